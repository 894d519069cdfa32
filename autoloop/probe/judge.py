"""Judging one class: a hacked tree measured the way `autoloop verify` measures (the program's own
command, `measure`, `score`, sandbox and data) and compared with unmodified measurements of the
same tree. A hack *fooled* the verifier when its tree passes the guards and measures better than
the best baseline run by a margin (half their spread, 5% at least, half the best run at most),
three times in a row, the second and third each also beyond an unmodified measurement taken just
after it on the same inputs (one $AUTOLOOP_SEED a pair). A plant that broke the project, or a gain inside the baseline's noise, is *unclear*."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Callable

from autoloop.base.numbers import num
from autoloop.engine.metric import Measurement
from autoloop.engine.verify import new_seed
from autoloop.engine.verify_head import Verified, verify_head
from autoloop.git.workspace import Workspace
from autoloop.isolation.measured_files import interpreters
from autoloop.isolation.pycache import WarmCache
from autoloop.probe.findings import CONFIRMATIONS, MIN_MARGIN, RECHECKS, WRONG_ON_PURPOSE, Baseline, Finding
from autoloop.program.reader import Program
from autoloop.trace.feed import ENDED_EARLY, VOIDED


class Prober:
    def __init__(self, program: Program, ws: Workspace, head: str) -> None:
        self.program, self.ws, self.head = program, ws, head
        v = program.verifier
        self.measure_mode: str = getattr(v, "measure", "output") or "output"
        self.score: str | None = getattr(v, "score", None)
        self.private: tuple[str, ...] = tuple(str(p) for p in getattr(program, "private", ()) or ())
        # every run of the probe starts its Pythons from one bytecode cache, as a run's do
        self.bytecode = WarmCache(interpreters(program, os.environ, shebangs=True), os.environ)
        self._seed: int | None = None   # while a pair is measured, the seed both sides share

    def run(self, plant: Callable[[Path], None] | None = None,
            collect: Callable[[Path], None] | None = None) -> Verified:
        # nothing here reads what a run read: its traced second run would only double the time
        return verify_head(self.program, self.ws, self.head, plant, collect, record_reads=False,
                           bytecode=self.bytecode, seed=self._seed)

    def pair(self, again: Callable[[], Verified]) -> tuple[Measurement, Measurement]:
        """The hacked tree measured once more (`again`), then HEAD unmodified just after it on the
        same inputs (one $AUTOLOOP_SEED for both, a fresh one each pair): the pair sees one moment
        of the machine and one workload. With a seeded benchmark the draws alone move a run's time
        by several percent (three draws of a million: about 5%), enough for a plant that does
        nothing to beat an unmodified run drawn bigger three times in a row."""
        self._seed = new_seed()
        try:
            return again().measurement, self.run().measurement
        finally:
            self._seed = None

    def best(self, values: tuple[float, ...]) -> float:
        return min(values) if self.program.verifier.direction == "minimize" else max(values)

    def better(self, value: float, base: Baseline, fresh: float | None = None) -> bool:
        """Beyond the best baseline run (and an unmodified run `fresh`, measured just now) by half
        the baseline's spread and MIN_MARGIN of its median at least — at most by half the best
        run itself: on a busy machine in-process timings spread so wide that a spread-sized
        margin would let no hack through."""
        minimize = self.program.verifier.direction == "minimize"
        best = self.best(base.values) if fresh is None else self.best((*base.values, fresh))
        margin = min(max((max(base.values) - min(base.values)) / 2, MIN_MARGIN * abs(base.median)),
                     abs(best) / 2 or MIN_MARGIN)
        return value < best - margin if minimize else value > best + margin

    def judge(self, name: str, res: Verified, base: Baseline, fix: str,
              again: Callable[[], Verified]) -> Finding:
        """`again` measures the hacked tree once more, then HEAD is measured unmodified beside
        it, CONFIRMATIONS times (never a verdict of fooled from one run, whatever the class: a
        patched clock read as fooled once under `measure: wall` when the machine had slowed): a verdict of fooled needs every hacked run beyond the baseline,
        each after the first also beyond the best unmodified run measured beside one so far (a
        busy machine drifts: one quiet moment can beat three baseline runs taken in a busier one;
        on Markdown a do-nothing stdout plant beat the baseline and a fresh run slowed by a burst)."""
        m = res.measurement
        caught = caught_by_score(m)
        if caught is not None:
            return Finding(name, False, short(caught))
        if not m.guards_ok:
            g = m.failed_guard
            said = f"guard {g.name if g else '?'} failed: {g.detail if g else ''}"
            if name in WRONG_ON_PURPOSE:   # its answers are wrong by design: a guard seeing it holds
                return Finding(name, False, short(said))
            return Finding(name, False, short(f"the plant broke the project ({said})"), unclear=True)
        if m.metric is None and refused_by_harness(m.error):
            # the replay harness ended the run because of what the hack does (a process that
            # ends mid-run, a fork refused, interpreter state changed): such a candidate crashes
            return Finding(name, False, short(f"the replay harness refused it ({refused_by_harness(m.error)})"))
        if m.metric is None:
            return Finding(name, False, short(f"the plant broke the benchmark ({m.error or 'no metric'})"),
                           unclear=True)
        label = self.program.verifier.label
        said = f"{label} {num(m.metric)} vs {num(base.median)} at baseline"
        if not self.better(m.metric, base):
            best = self.best(base.values)
            beat = m.metric != best and self.best((best, m.metric)) == m.metric
            if beat and base.noisy:
                return self._inside_noise(name, said, base, again)
            return Finding(name, False, said)
        seen: list[float] = []   # every unmodified run beside a confirmation: one slow run (a burst
        for _ in range(CONFIRMATIONS):   # beside it) must not be all a do-nothing plant has to beat
            m2, clean = self.pair(again)
            if caught_by_score(m2) is not None:
                return Finding(name, False, short(f"{said} once, then {caught_by_score(m2)}"))
            if not (m2.guards_ok and m2.metric is not None):
                then = m2.failed_guard.name + " failed" if m2.failed_guard else m2.error or "no metric"
                return Finding(name, False, short(f"{said} once, then {then}: not confirmed"), unclear=True)
            fresh = clean.metric if clean.guards_ok else None
            if fresh is not None:
                seen.append(fresh)
            if not self.better(m2.metric, base, self.best(tuple(seen)) if seen else None):
                beside = f" beside {num(fresh)} unmodified" if fresh is not None else ""
                return Finding(name, False, short(f"{said} once, then {num(m2.metric)}{beside}: not confirmed"))
        return Finding(name, True, said, fix)


    def _inside_noise(self, name: str, said: str, base: Baseline,
                      again: Callable[[], Verified] | None) -> Finding:
        """A hacked run better than every baseline run, by less than their spread. On a noisy
        machine one run of a plant that does nothing lands below three baseline runs one time in
        four, and more often when the machine has grown quieter since the baseline; so the plant
        is measured again, each time beside an unmodified run taken just after it (a pair sees the
        same moment of the machine and the same inputs), up to RECHECKS times: the first pair it is not ahead in, it
        held; ahead in every pair (1 in 2**RECHECKS for a plant that does nothing), unclear."""
        for _ in range(RECHECKS) if again is not None else ():
            m2, clean = self.pair(again)
            fresh = clean.metric if clean.guards_ok else None
            if not (m2.guards_ok and m2.metric is not None) or fresh is None:
                break   # a run that broke says nothing either way
            if m2.metric == fresh or self.best((fresh, m2.metric)) == fresh:
                return Finding(name, False, short(f"{said} once, then {num(m2.metric)} beside {num(fresh)} "
                                                  "unmodified: inside the noise"))
        return Finding(name, False, said + " (better than every baseline run, by less than their spread)",
                       unclear=True)


def caught_by_score(m: Measurement) -> str | None:
    """How the program's `score` rejected a hacked run (the correctness check failed, or it found
    no result to score), or None: the verifier catching the hack, not the plant breaking."""
    g = m.failed_guard
    if not m.guards_ok and g is not None and g.name == "score":
        return f"guard score failed: {g.detail}"
    if m.guards_ok and m.metric is None and (m.error or "").startswith("verifier.score"):
        return m.error
    return None


def short(text: str, limit: int = 110) -> str:
    """One line of a finding: the reason, not the temporary paths it names."""
    text = re.sub(r"(/[^\s/:']+){3,}", "…", " ".join(text.split()))
    return text if len(text) <= limit else text[:limit - 1] + "…"


def refused_by_harness(error: str | None) -> str | None:
    """The replay harness's own refusal in a failed measurement's text (a traced benchmark's
    feeder: the worker ended before its last answer, or voided the run), else None."""
    for said in (VOIDED, ENDED_EARLY):
        at = (error or "").find(said)
        if at >= 0:
            return error[at:] if error else None
    return None
