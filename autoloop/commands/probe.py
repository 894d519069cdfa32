"""`autoloop doctor --probe`: prints what the probe (autoloop.probe) finds — the baseline, one
line per class as it ends (a progress line on stderr as it starts), and a last line with the
count — and picks the exit status."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any

from autoloop.base.numbers import num, seconds
from autoloop.probe import classes
from autoloop.probe.findings import Baseline, ProbeError, Trying

NAME_WIDTH = 19   # one width for the class names (special-cased-input), as the lines stream out


@dataclass(frozen=True)
class Outcome:
    """What the probe ended with: its exit status and the classes it could not judge (the plant
    broke the project or sat in the noise) out of those it tried."""
    code: int
    unclear: tuple[str, ...] = ()
    tried: int = 0

    @property
    def unjudged(self) -> str:
        """`3 of 14 could not be judged: a, b, c`, or ''."""
        if not self.unclear:
            return ""
        return f"{len(self.unclear)} of {self.tried} could not be judged: {', '.join(self.unclear)}"


def print_probe(program: Any) -> int:
    """The probe's lines for `program` as each class ends; its exit status: 1 when a hack fooled
    the verifier, else 0 — also when some classes could not be judged (the last line counts and
    names them): an unclear class is no evidence of a hole, and the contract's 0 means none fooled."""
    return probe_outcome(program).code


def probe_outcome(program: Any) -> Outcome:
    """print_probe's lines, and what it ended with (`init --trace` repeats the unjudged at its end)."""
    v = program.verifier
    mode = getattr(v, "measure", "output")
    print(f"probe: reward hacks against {v.label} (measure: {mode}"
          f"{', score' if getattr(v, 'score', None) else ''}), each in a throwaway tree of HEAD; "
          "nothing of the checkout changes", flush=True)
    fooled, unclear, tried, noisy = 0, [], 0, ""
    t0 = time.monotonic()
    try:
        for item in classes.probe(program):
            if isinstance(item, Trying):   # on stderr: stdout keeps one line per class
                print(f"probe: {item.k}/{item.n} trying {item.name} … ({seconds(time.monotonic() - t0)} so far)",
                      file=sys.stderr, flush=True)
                continue
            if isinstance(item, Baseline):
                where = f"planted in {item.target}" if item.target else "no module to plant in"
                print(f"baseline  {v.label} {' '.join(num(x) for x in item.values)} "
                      f"({seconds(item.seconds)} a run); {where}", flush=True)
                if item.noisy:
                    noisy = f"{item.spread * 100:.0f}%"
                    print(f"probe: WARNING: the baseline's runs spread {noisy} of their median: a hack must beat "
                          f"the best of them by half that to count, so a smaller gain reads as held; "
                          "probe on a quieter machine or with a longer benchmark", flush=True)
                continue
            fix = f" — fix: {item.fix}" if item.fooled else ""
            print(f"{item.verdict:<7} {item.name:<{NAME_WIDTH}}  {item.detail}{fix}", flush=True)
            fooled += bool(item.fooled)
            tried += item.verdict != "skip"
            if item.verdict == "unclear":
                unclear.append(item.name)
    except ProbeError as exc:
        print(f"probe: {exc}")
        return Outcome(1)
    took = f" ({seconds(time.monotonic() - t0)})"
    out = Outcome(1 if fooled else 0, tuple(unclear), tried)
    also = f"; {out.unjudged} (the plant broke the project or sat in the noise)" if unclear else ""
    if fooled:
        print(f"probe: {fooled} hack{'s' if fooled > 1 else ''} fooled the verifier: a run could keep them{also}{took}")
    elif unclear:
        print(f"probe: no hack fooled the verifier, but {out.unjudged}: the plant broke the project or sat in the "
              f"noise, which says nothing about the verifier either way{took}")
    else:
        print("probe: every hack tried was caught" + (f", as far as a baseline spread of {noisy} can tell" if noisy
                                                       else "") + took)
    return out
