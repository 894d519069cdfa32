"""What the keep rules take and give: the runner protocol, samples, verdicts, ABBA pairs, limits."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, Sequence

from autoloop.base.numbers import num as fmt
from autoloop.base.specs import LimitSpec

History = Sequence[Mapping[str, Any]]      # the ledger's cycle records so far


@dataclass
class Sample:   # one verifier run: its value, or why there is none
    side: str                    # A: the incumbent (or the start); B: the candidate (or the best)
    label: str                   # "B1", "A3", "cB2" (confirmation), "wA1" (warm-up), "hB1" (holdout)
    value: float | None
    error: str | None = None     # the crash, or the failed guard's detail
    guard: str | None = None     # the guard that failed
    secondary: dict[str, float | None] = field(default_factory=dict)
    measurement: Any = None      # what measured it (verify.Measurement); decide never looks inside
    seconds: float | None = None


class Runner(Protocol):
    def __call__(self, side: str, label: str, with_guards: bool) -> Sample: ...


@dataclass
class Verdict:
    status: str                  # keep | discard | crash | guard_fail
    metric: float | None
    result: str                  # for experiments.md (full numbers)
    lesson: str                  # for the generator too (coarse)
    stats: dict[str, Any]
    measurement: Any = None      # the candidate's first run (its guards)
    delta_pct: float | None = None
    feedback: str | None = None  # what the prompt shows instead of the metric
    note: str = ""               # for the commit message


@dataclass
class Baseline:
    metric: float | None
    measurement: Any                          # the first run (or the one that failed)
    problem: str | None                       # why the starting commit cannot be used
    stats: dict[str, Any]
    warning: str | None = None
    note: str | None = None


class Session:   # runs through a runner; the first candidate-side run carries the guards
    def __init__(self, runner: Runner, guards: bool = True) -> None:
        self.runner, self.guards_pending = runner, guards
        self.first: Sample | None = None

    def run(self, side: str, label: str) -> Sample:
        with_guards = self.guards_pending and side == "B"
        r = self.runner(side, label, with_guards)
        if with_guards:
            self.guards_pending, self.first = False, r
        return r


@dataclass
class Pairs:
    a: list[float] = field(default_factory=list)
    b: list[float] = field(default_factory=list)
    runs: list[Sample] = field(default_factory=list)
    failure: Sample | None = None
    stopped_early: bool = False

    @property
    def order(self) -> str:
        return " ".join(r.label for r in self.runs)


def measure_pairs(session: Session, n: int, prefix: str = "",
                  stop: Callable[[list[float], list[float]], bool] | None = None) -> Pairs:
    out = Pairs()
    for i in range(n):
        values: dict[str, float] = {}
        for side in ("B", "A") if i % 2 == 0 else ("A", "B"):
            r = session.run(side, f"{prefix}{side}{i + 1}")
            out.runs.append(r)
            if r.value is None:
                out.failure = r
                return out
            values[side] = r.value
        out.a.append(values["A"])
        out.b.append(values["B"])
        if stop is not None and i + 1 < n and stop(out.a, out.b):
            out.stopped_early = True
            break
    return out


def series(session: Session, n: int, sides: str, prefix: str = "") -> tuple[list[Sample], Sample | None]:
    """`n` rounds of runs of `sides` (warm-ups, the strict rule's repeats); stops at a failure."""
    runs: list[Sample] = []
    for i in range(n):
        for side in sides:
            runs.append(session.run(side, f"{prefix}{side}{i + 1}"))
            if runs[-1].value is None:
                return runs, runs[-1]
    return runs, None


def values(runs: Sequence[Sample], side: str | None = None) -> list[float | None]:
    return [r.value for r in runs if side in (None, r.side)]


def first_measurement(session: Session) -> Any:   # of the run that carried the guards
    return session.first.measurement if session.first is not None else None


def median(xs: Sequence[float | None]) -> float:
    return float(statistics.median([x for x in xs if x is not None]))


def _secondaries(runs: Sequence[Sample]) -> dict[str, list[float | None]]:
    out: dict[str, list[float | None]] = {}
    for r in runs:
        for k, v in r.secondary.items():
            out.setdefault(k, []).append(v)
    return out


def check_limits(limits: Sequence[LimitSpec], baseline: Mapping[str, float | None],
                 runs: Sequence[Sample]) -> tuple[list[dict[str, Any]], str | None]:
    """Each limit on the median of the candidate's runs against the baseline's value: the
    records and the first failure (None when all hold)."""
    values = _secondaries(runs)
    records, failure = [], None
    for lim in limits:
        samples, base, problem = values.get(lim.label, []), baseline.get(lim.label), None
        rec: dict[str, Any] = {"metric": lim.label, "samples": samples, "baseline": base}
        if not samples or None in samples:
            rec["ok"], problem = False, f"limit {lim.label}: not in the verifier's output"
        else:
            value = rec["value"] = median(samples)
            if base is None:
                rec.update(ok=True, note="no baseline value to compare with")
            else:
                up = lim.max_increase is not None
                amount = lim.max_increase if up else lim.max_decrease
                assert amount is not None
                bound = base + amount.of(base) if up else base - amount.of(base)
                ok = value <= bound if up else value >= bound
                rec.update(bound=bound, ok=ok)
                if not ok:
                    problem = (f"limit {lim.label}: {fmt(value)} is more than {amount} "
                               f"{'above' if up else 'below'} the baseline {fmt(base)} "
                               f"(at {'most' if up else 'least'} {fmt(bound)})")
        records.append(rec)
        failure = failure or problem
    return records, failure


def baseline_secondaries(limits: Sequence[LimitSpec], runs: Sequence[Sample]) -> tuple[dict[str, float], str | None]:
    values = _secondaries(runs)
    out: dict[str, float] = {}
    for lim in limits:
        samples = values.get(lim.label, [])
        if not samples or None in samples:
            return out, f"limit {lim.label}: not in the verifier's output on the starting commit"
        out[lim.label] = median(samples)
    return out, None
