"""Measuring and judging candidates when one measurement is not enough (the honest ratchet).

The loop asks three things of a Judge: measure the starting commit (cycle 0, with a noise
calibration), judge a candidate commit against the incumbent, and re-measure the best commit
against the starting one when a run ends. The procedures below are written against a *runner*
— `runner(side, label, with_guards) -> Run` — so tests drive them with fake measurements; the
Judge class binds them to real verifier processes in pristine trees (the incumbent, side A, in
verification slot 1; the candidate, side B, in slot 0; every run a fresh process).

Rules (see autoloop.stats for the statistics and their conventions):

- `strict` (contract section 5): the candidate's metric (the median of `verifier.repeats` runs)
  must be strictly better than the incumbent's stored metric, by at least `min_effect`.
- `paired`: each batch measures `pairs` incumbent/candidate pairs in ABBA order (B A, A B,
  B A, ...), so slow drift cancels. A batch passes when the one-sided Wilcoxon signed-rank test
  of the per-pair gains gives p <= alpha and their Hodges–Lehmann estimate is at least
  min_effect. With `confirm`, a second, fresh batch must pass too. A batch stops early once no
  result of the pairs still to come could make it pass (this only saves time: it never keeps).

Every raw value measured goes into the cycle's `stats` record, so everything reported can be
recomputed from the ledger.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from contextlib import AbstractContextManager
from typing import Any, Callable, Mapping, Protocol, Sequence

from autoloop import stats as st
from autoloop.journal import pct
from autoloop.numbers import exact, formatter, num as fmt, signed_pct
from autoloop.program import Amount, LimitSpec, Program, VerifierSpec
from autoloop.ratchet import better
from autoloop.sandbox import Confinement
from autoloop.verify import Measurement, MetricError, measure, parse_metric


@dataclass
class Run:
    """One verifier process: its value, or why there is none."""

    side: str                    # "A" incumbent (or start), "B" candidate (or best)
    label: str                   # "B1", "A3", "cB2" (confirmation), "wA1" (warm-up), "hB1" (holdout)
    value: float | None
    error: str | None = None     # crash, or the failed guard
    guard_failed: bool = False
    secondary: dict[str, float | None] = field(default_factory=dict)
    measurement: Measurement | None = None


Runner = Callable[[str, str, bool], Run]


@dataclass
class Verdict:
    status: str                  # keep | discard | crash | guard_fail
    metric: float | None
    result: str                  # for experiments.md (full numbers)
    lesson: str                  # for the generator too (coarse)
    stats: dict[str, Any]
    measurement: Measurement | None = None   # the candidate's first run (its guards)
    delta_pct: float | None = None
    feedback: str | None = None  # what the prompt shows instead of the metric
    note: str = ""               # for the commit message


@dataclass
class Baseline:
    metric: float | None
    measurement: Measurement | None          # the first run (or the one that failed)
    problem: str | None                       # why the starting commit cannot be used
    stats: dict[str, Any]
    warning: str | None = None
    note: str | None = None


# ---- running pairs ----------------------------------------------------------------------------


class Session:
    """Runs through a runner; the first candidate-side run carries the guards."""

    def __init__(self, runner: Runner, guards: bool = True) -> None:
        self.runner = runner
        self.guards_pending = guards
        self.first: Run | None = None

    def run(self, side: str, label: str) -> Run:
        with_guards = self.guards_pending and side == "B"
        r = self.runner(side, label, with_guards)
        if with_guards:
            self.guards_pending = False
            self.first = r
        return r


@dataclass
class Pairs:
    a: list[float] = field(default_factory=list)
    b: list[float] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)
    failure: Run | None = None
    stopped_early: bool = False

    @property
    def order(self) -> str:
        return " ".join(r.label for r in self.runs)


def order_of(i: int) -> tuple[str, str]:
    """ABBA: pair 1 is B A, pair 2 A B, pair 3 B A, ... (a linear drift cancels every 2 pairs)."""
    return ("B", "A") if i % 2 == 0 else ("A", "B")


def measure_pairs(session: Session, n: int, prefix: str = "",
                  stop: Callable[[list[float], list[float]], bool] | None = None) -> Pairs:
    out = Pairs()
    for i in range(n):
        values: dict[str, float] = {}
        for side in order_of(i):
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


def warm_up(session: Session, n: int, prefix: str = "", sides: str = "BA") -> tuple[list[Run], Run | None]:
    runs: list[Run] = []
    for i in range(n):
        for side in sides:
            r = session.run(side, f"w{prefix}{side}{i + 1}")
            runs.append(r)
            if r.value is None:
                return runs, r
    return runs, None


def _secondaries(runs: Sequence[Run]) -> dict[str, list[float | None]]:
    out: dict[str, list[float | None]] = {}
    for r in runs:
        for k, v in r.secondary.items():
            out.setdefault(k, []).append(v)
    return out


def _m(run: Run | None) -> Measurement | None:
    return run.measurement if run is not None else None


def _median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


# ---- limits (guard metrics) -------------------------------------------------------------------


def check_limits(limits: Sequence[LimitSpec], baseline: Mapping[str, float | None],
                 runs: Sequence[Run]) -> tuple[list[dict[str, Any]], str | None]:
    """Each limit on the median of the candidate's runs, relative to the baseline's value.
    Returns the records and the first failure (None when all hold)."""
    values = _secondaries(runs)
    records, failure = [], None
    for lim in limits:
        name = lim.label
        samples = values.get(name, [])
        rec: dict[str, Any] = {"metric": name, "samples": samples, "baseline": baseline.get(name)}
        if not samples or any(v is None for v in samples):
            rec["ok"] = False
            problem = f"limit {name}: not in the verifier's output"
        else:
            value = _median([v for v in samples if v is not None])
            base = baseline.get(name)
            rec["value"] = value
            if base is None:
                rec["ok"], problem = True, None
                rec["note"] = "no baseline value to compare with"
            elif lim.max_increase is not None:
                bound = base + lim.max_increase.of(base)
                rec.update(bound=bound, ok=value <= bound)
                problem = None if value <= bound else (
                    f"limit {name}: {fmt(value)} is more than {lim.max_increase} above the "
                    f"baseline {fmt(base)} (at most {fmt(bound)})")
            else:
                assert lim.max_decrease is not None
                bound = base - lim.max_decrease.of(base)
                rec.update(bound=bound, ok=value >= bound)
                problem = None if value >= bound else (
                    f"limit {name}: {fmt(value)} is more than {lim.max_decrease} below the "
                    f"baseline {fmt(base)} (at least {fmt(bound)})")
        records.append(rec)
        if problem and failure is None:
            failure = problem
    return records, failure


def baseline_secondaries(limits: Sequence[LimitSpec], runs: Sequence[Run]) -> tuple[dict[str, float], str | None]:
    values = _secondaries(runs)
    out: dict[str, float] = {}
    for lim in limits:
        samples = values.get(lim.label, [])
        if not samples or any(v is None for v in samples):
            return out, f"limit {lim.label}: not in the verifier's output on the starting commit"
        out[lim.label] = _median([v for v in samples if v is not None])
    return out, None


# ---- cycle 0: the baseline and the noise calibration -------------------------------------------


def _pct_of_gain(gain: float, scale: str) -> float:
    """A gain (positive = better) as a positive percentage of the incumbent, log scale."""
    return (math.exp(abs(gain)) - 1.0) * 100.0 if scale == "log" else abs(gain)


def _amount_text(gain: float, scale: str, name: str) -> str:
    """A gain as people read it: a percentage of the incumbent, or metric units."""
    if scale == "log":
        return f"{_pct_of_gain(gain, scale):.2g}%"
    return f"{fmt(float(f'{gain:.3g}'))} ({name} units)"


TARGET_POWER = 0.8         # "4 times in 5": the chance of a keep the proposals aim for


def _mean_seconds(runs: Sequence[Run]) -> float | None:
    ds = [r.measurement.duration_s for r in runs if r.measurement is not None]
    return sum(ds) / len(ds) if ds else None


def propose(pair_sd: float, scale: str, program: Program, noise_n: int,
            seconds: float | None, reference: float) -> dict[str, Any]:
    """What the sequential paired rule does at this noise, measured by simulation: how often a
    real gain of min_effect is kept, and the smallest gain kept 4 times in 5 with its cost
    in verifier runs (and time, at `seconds` a run). Gains are on `scale` (one pair's change)."""
    acc = program.accept
    alpha, max_pairs = acc.alpha, max(acc.pairs, 2)
    m = program.accept.min_effect
    min_gain = st.threshold(m.value, m.relative, scale, program.verifier.direction, reference)

    def keep_rate(gain: float, floor: float) -> tuple[float, float]:
        p, runs = st.sequential_runs(gain, pair_sd, alpha, max_pairs, noise_n, floor, reps=200)
        return (p * p, 2 * runs) if acc.confirm else (p, runs)

    # how often the test itself detects a gain (floor 0): a true gain of exactly min_effect
    # clears a min_effect floor only about half the time whatever the noise

    at_min, runs_min = keep_rate(min_gain, 0.0) if min_gain > 0 else (0.0, 2.0 * max_pairs)
    lo, hi = 0.0, 4.0 * pair_sd + min_gain
    if keep_rate(hi, 0.0)[0] < TARGET_POWER:
        hi *= 2
    for _ in range(7):
        mid = (lo + hi) / 2
        if keep_rate(mid, 0.0)[0] >= TARGET_POWER:
            hi = mid
        else:
            lo = mid
    # the min_effect to propose: half that gain, so that the floor costs the gain little (the
    # rule keeps it as often as the test detects it) while smaller lucky estimates are refused
    floor = hi / 2
    kept, runs = keep_rate(hi, floor)
    return {"pair_sd": pair_sd, "power_at_min_effect": at_min, "runs_at_min_effect": runs_min,
            "gain": hi, "gain_pct": _pct_of_gain(hi, scale) if scale == "log" else None,
            "min_effect": floor, "min_effect_pct": _pct_of_gain(floor, scale) if scale == "log" else None,
            "kept_at_gain": kept, "runs_per_keep": runs, "seconds_per_run": seconds,
            "minutes_per_keep": None if seconds is None else runs * seconds / 60.0,
            "noise_pct": (math.exp(pair_sd / math.sqrt(2)) - 1) * 100 if scale == "log" else None}


def _round_up(x: float) -> str:
    """A min_effect a person would type: 2 significant digits, rounded up."""
    if x <= 0:
        return "0"
    e = math.floor(math.log10(x)) - 1
    return f"{math.ceil(x / 10 ** e) * 10 ** e:.{max(0, -e)}f}"


def _proposed_gain(prop: Mapping[str, Any], scale: str) -> str:
    return f"{_round_up(prop['gain_pct'])}%" if scale == "log" else _round_up(prop["gain"])


def _proposed_min_effect(prop: Mapping[str, Any], scale: str) -> str:
    return (f"{_round_up(prop['min_effect_pct'])}%" if scale == "log"
            else _round_up(prop["min_effect"]))


def _cost_text(prop: Mapping[str, Any]) -> str:
    cost = f"≈ {prop['runs_per_keep']:.0f} verifier runs a keep"
    t, sec = prop.get("minutes_per_keep"), prop.get("seconds_per_run")
    if t is not None and sec is not None:
        took = (f"{t * 60:.0f} s" if t < 1.5 else f"{t:.1f} min" if t < 120 else f"{t / 60:.1f} h")
        cost += f", ≈ {took} at {sec:.3g} s a run"
    return cost


def proposal_text(prop: Mapping[str, Any], scale: str, name: str) -> str:
    """The proposal as one actionable sentence."""
    if scale == "log":
        noise = f"{prop['noise_pct']:.2g}% per run"
    else:
        per_run = float(f"{prop['pair_sd'] / math.sqrt(2):.3g}")
        noise = f"±{fmt(per_run)} {name} per run"
    gain, floor = _proposed_gain(prop, scale), _proposed_min_effect(prop, scale)
    return (f"your verifier's noise is {noise}: a real gain of accept.min_effect is detected only "
            f"{prop['power_at_min_effect'] * 100:.0f}% of the time. Gains of {gain} or more are "
            f"kept {prop['kept_at_gain'] * 100:.0f}% of the time with accept.min_effect: {floor} "
            f"({_cost_text(prop)}): set it, or make the verifier steadier (README: 'Noisy metrics').")


def calibrate_strict(session: Session, program: Program) -> Baseline:
    """`repeats` runs of the starting commit (at least two: a second one only to look at the
    noise). The baseline metric is the median of the first `repeats` runs."""
    v, acc = program.verifier, program.accept
    warm, failure = warm_up(session, acc.warmup, sides="B")
    runs: list[Run] = []
    if failure is None:
        for i in range(max(v.repeats, 2)):
            r = session.run("B", f"B{i + 1}")
            runs.append(r)
            if r.value is None:
                failure = r
                break
    rec: dict[str, Any] = {"kind": "calibration", "rule": "strict", "repeats": v.repeats,
                           "warmup": [r.value for r in warm], "runs": [r.value for r in runs]}
    first = session.first
    if failure is not None:
        return Baseline(None, failure.measurement, _run_problem(failure, first is failure), rec)
    values = [r.value for r in runs if r.value is not None]
    metric = values[0] if v.repeats == 1 else _median(values[:v.repeats])
    secondary, problem = baseline_secondaries(program.limits, runs[:max(v.repeats, 1)])
    rec["secondary"] = secondary
    rec["seconds_per_run"] = _mean_seconds(runs)
    deterministic = len(set(values)) == 1
    rec["deterministic"] = deterministic
    warning = None
    if not deterministic:
        sd, scale = st.strict_noise(values)
        rec.update(scale=scale, run_sd=sd)
        rec["noise_pct"] = _pct_of_gain(sd, scale) if scale == "log" else None
        phantom = st.strict_phantom(sd, v.repeats, 100)
        rec["phantom_100"] = phantom
        spread = (f"±{_pct_of_gain(sd, scale):.2g}% per run" if scale == "log"
                  else f"±{fmt(float(f'{sd:.3g}'))} per run")
        warning = (f"the verifier is noisy: {len(values)} runs of the starting commit gave "
                   f"{', '.join(fmt(x) for x in values)} ({spread}). With accept.rule: strict a "
                   "change that does nothing is kept whenever its measurement comes out luckier "
                   "than the best so far: over 100 such changes expect several junk commits and "
                   f"a best {v.label} that reads about {_amount_text(phantom, scale, v.label)} "
                   "better than it is. Set accept.rule: paired (README: 'Noisy metrics').")
        # what the paired rule's defaults would do at this noise (its calibration: 16 pairs)
        paired = dataclasses.replace(program, accept=dataclasses.replace(
            acc, rule="paired", alpha=0.005, pairs=16, confirm=False,
            min_effect=acc.min_effect if acc.min_effect.value else Amount(1.0, True)))
        prop = propose(sd * math.sqrt(2), scale, paired, 16, _mean_seconds(runs), metric)
        rec["proposal"] = prop
        warning += (f" With it and min_effect: {_proposed_min_effect(prop, scale)}, gains of "
                    f"{_proposed_gain(prop, scale)} or more would be kept "
                    f"{prop['kept_at_gain'] * 100:.0f}% of the time ({_cost_text(prop)}).")
        rec["warning"] = warning
    return Baseline(metric, _m(first), problem, rec, warning=warning)


def calibrate_paired(session: Session, program: Program) -> Baseline:
    """An A/A batch: `pairs` pairs of the starting commit measured in both trees in ABBA order.
    The baseline metric is the median of all its runs; the spread of the per-pair changes is the
    noise, from which the smallest effect the configured batches detect is computed."""
    v, acc = program.verifier, program.accept
    warm, failure = warm_up(session, acc.warmup)
    pairs = measure_pairs(session, acc.pairs) if failure is None else Pairs()
    failure = failure or pairs.failure
    rec: dict[str, Any] = {"kind": "calibration", "rule": "paired", "pairs": acc.pairs,
                           "warmup": {"a": [r.value for r in warm if r.side == "A"],
                                      "b": [r.value for r in warm if r.side == "B"]},
                           "a": pairs.a, "b": pairs.b, "order": pairs.order}
    first = session.first
    if failure is not None:
        return Baseline(None, failure.measurement, _run_problem(failure, first is failure), rec)
    metric = _median(pairs.a + pairs.b)
    secondary, problem = baseline_secondaries(program.limits, pairs.runs)
    rec["secondary"] = secondary
    scale = st.pick_scale(pairs.a, pairs.b)
    sd = st.noise_sd(st.changes(pairs.a, pairs.b, scale))
    deterministic = len(set(pairs.a + pairs.b)) == 1
    min_gain = st.threshold(acc.min_effect.value, acc.min_effect.relative, scale, v.direction, metric)
    rec.update(scale=scale, noise_sd=sd, deterministic=deterministic, min_gain=min_gain,
               seconds_per_run=_mean_seconds(pairs.runs),
               noise_pct=(math.exp(sd / math.sqrt(2)) - 1) * 100 if scale == "log" else None,
               step=sd / math.sqrt(acc.pairs))
    warning = note = None
    if deterministic:
        note = ("the verifier looks deterministic (identical values for the same commit); "
                "accept.rule: paired only costs time here")
    elif sd > 0:
        prop = propose(sd, scale, program, len(pairs.a), _mean_seconds(pairs.runs), metric)
        rec["proposal"] = prop
        rec["detectable"] = prop["gain"]
        if prop["power_at_min_effect"] < TARGET_POWER:
            warning = proposal_text(prop, scale, v.label)
    rec["warning"] = warning
    return Baseline(metric, _m(first), problem, rec, warning=warning, note=note)


def _run_problem(failure: Run, is_first: bool) -> str:
    if failure.guard_failed:
        return f"guard fails on the starting commit: {failure.error}"
    if is_first:
        return f"the baseline could not be measured: {failure.error}"
    return (f"the baseline could not be measured: run {failure.label} of the starting commit "
            f"failed ({failure.error}); the verifier is flaky")


HOLDOUT_PAIRS = 8          # a fixed batch for the held-out verifier after a keep (min p 1/256)


# ---- one cycle --------------------------------------------------------------------------------


def _failed(session: Session, failure: Run, stats: dict[str, Any]) -> Verdict:
    """A run without a value: the candidate's guard failed, or a run crashed."""
    first = session.first
    if failure.guard_failed:
        return Verdict("guard_fail", None, f"guard_fail: {failure.error}",
                       f"guard {failure.error}", stats, measurement=failure.measurement)
    if failure.side == "A":
        why = (f"the incumbent's re-measurement ({failure.label}) crashed: {failure.error}; "
               "the verifier is flaky")
        return Verdict("crash", None, f"crash: {why}", f"crash: {why}", stats, measurement=_m(first))
    return Verdict("crash", None, f"crash: {failure.error}", f"crash: {failure.error}", stats,
                   measurement=_m(first) or failure.measurement)


def judge_strict(session: Session, program: Program, best: float,
                 baseline_secondary: Mapping[str, float | None],
                 holdout: Session | None = None) -> Verdict:
    """Median of `repeats` candidate runs against the incumbent's stored metric."""
    v, acc = program.verifier, program.accept
    name = v.label
    stats: dict[str, Any] = {"rule": "strict", "repeats": v.repeats, "incumbent": best,
                             "min_effect": str(acc.min_effect)}
    warm, failure = warm_up(session, acc.warmup, sides="B")
    stats["warmup"] = [r.value for r in warm]
    runs: list[Run] = []
    if failure is None:
        for i in range(v.repeats):
            r = session.run("B", f"B{i + 1}")
            runs.append(r)
            if r.value is None:
                failure = r
                break
    stats["samples"] = [r.value for r in runs if r.value is not None]
    if failure is not None:
        return _failed(session, failure, stats)
    value = _median(stats["samples"])
    stats["median"] = value
    limits, problem = check_limits(program.limits, baseline_secondary, runs)
    if limits:
        stats["limits"] = limits
    first = session.first
    delta = pct(best, value)
    if problem:
        return Verdict("guard_fail", value, f"guard_fail: {problem}", problem, stats,
                       measurement=_m(first), delta_pct=delta)
    need = acc.min_effect.of(best)
    gain = (best - value) if v.direction == "minimize" else (value - best)
    stats["threshold"] = need
    fmt = formatter([best, value])      # two values that differ must print differently
    shown = f"{fmt(value)}" + (f" (median of {v.repeats})" if v.repeats > 1 else "")
    gain_txt = f" ({signed_pct(delta)})" if delta is not None else ""
    if better(v.direction, value, best) and gain >= need:
        verdict = Verdict("keep", value, f"keep: {name} {fmt(best)} → {shown}{gain_txt}",
                          f"kept: {name} {fmt(best)} → {fmt(value)}{gain_txt}", stats,
                          measurement=_m(first), delta_pct=delta)
        if holdout is not None:
            _holdout_strict(holdout, program, verdict)
        return verdict
    if value == best:
        why = f"{shown} ties best {fmt(best)}"
    elif better(v.direction, value, best):
        why = f"{shown} is better than best {fmt(best)} by less than min_effect {acc.min_effect}"
    else:
        why = f"{shown} is worse than best {fmt(best)}"
    return Verdict("discard", value, f"discard: {name} {why}", f"discarded: {why}", stats,
                   measurement=_m(first), delta_pct=delta)


def _holdout_strict(session: Session, program: Program, verdict: Verdict) -> None:
    h = program.holdout
    assert h is not None
    n = program.verifier.repeats
    runs = []
    for i in range(n):
        for side in order_of(i):
            r = session.run(side, f"h{side}{i + 1}")
            runs.append(r)
            if r.value is None:
                verdict.stats["holdout"] = {"error": f"{r.label}: {r.error}"}
                verdict.result += f"; holdout could not be measured ({r.error})"
                return
    a = [r.value for r in runs if r.side == "A" and r.value is not None]
    b = [r.value for r in runs if r.side == "B" and r.value is not None]
    improved = better(h.direction, _median(b), _median(a))
    verdict.stats["holdout"] = {"a": a, "b": b, "improved": improved, "overfit": not improved}
    if improved:
        verdict.result += f"; holdout {h.label} {fmt(_median(a))} → {fmt(_median(b))}"
    else:
        verdict.result += (f"; holdout {h.label} did not improve ({fmt(_median(a))} → "
                           f"{fmt(_median(b))}): possible overfitting to the verifier")


def _ci_text(c: st.Comparison, name: str) -> str:
    """`score -2.3% (95% CI -3.1% … -1.5%)` (or in metric units on the difference scale)."""
    level = f"{c.ci.level * 100:.0f}% CI" if c.n > 1 else "one pair, no CI"
    if c.change_pct is not None and c.change_ci_pct is not None:
        lo, hi = c.change_ci_pct
        body = signed_pct(c.change_pct)
        ci = f"{signed_pct(lo)} … {signed_pct(hi)}"
    else:
        lo, hi = c.change_ci
        body = f"{c.change:+.4g}"
        ci = f"{lo:+.4g} … {hi:+.4g}"
    if c.n == 1:
        return f"{name} {body} ({level})"
    return f"{name} {body} ({level} {ci})"


def _batch_record(name: str, pairs: Pairs, c: st.Comparison | None, min_gain: float | None,
                  passed: bool, n: int) -> dict[str, Any]:
    rec: dict[str, Any] = {"name": name, "a": pairs.a, "b": pairs.b, "order": pairs.order,
                           "planned": n, "stopped_early": pairs.stopped_early, "passed": passed}
    if c is not None:
        rec.update(c.as_record())
    if min_gain is not None:
        rec["threshold"] = min_gain
    return rec


def _step_pct(noise_step: float | None, scale: str, reference: float) -> float | None:
    """The noise of one batch's effect as a percentage (for coarse feedback)."""
    if noise_step is None or noise_step <= 0:
        return None
    if scale == "log":
        return (math.exp(noise_step) - 1.0) * 100.0
    return noise_step / abs(reference) * 100.0 if reference else None


NOISE_DRAWS = 200          # the most noise draws a test leans on: the recent past, not all of it


def calibration_noise(history: Sequence[Mapping[str, Any]]) -> tuple[list[float], str | None]:
    """Draws of the pair noise with mean 0, and their scale ([], None when the run has none):
    the A/A changes of the paired calibration (the same commit on both sides), then, from every
    later paired cycle, the Helmert contrasts of each test's gains — orthonormal combinations
    that cancel the candidate's effect, so k pairs give k - 1 pure noise draws whatever the
    candidate did. A lucky calibration is outvoted as the run goes on, and more draws make the
    test faster. At most NOISE_DRAWS, the most recent first."""
    draws: list[float] = []
    scale = None
    for c in history:
        s = c.get("stats") or {}
        if (c.get("status") == "baseline" and s.get("kind") == "calibration"
                and s.get("rule") == "paired" and s.get("a") and s.get("scale")):
            scale = s["scale"]
            draws = st.changes(s["a"], s["b"], scale)
    if scale is None:
        return [], None
    later: list[float] = []
    for c in history:
        s = c.get("stats") or {}
        if c.get("cycle", 0) > 0 and s.get("rule") == "paired" and s.get("test") == "sequential":
            for b in s.get("batches") or []:
                a_, b_ = b.get("a") or [], b.get("b") or []
                if len(a_) == len(b_) >= 2 and st.pick_scale(a_, b_) == scale:
                    later.extend(st.helmert(st.changes(a_, b_, scale)))
    pooled = draws + later
    return pooled[-NOISE_DRAWS:], scale


@dataclass
class Sequential:
    """One sequential test: its pairs, the evidence after each pair and how it ended."""

    pairs: Pairs
    log_lr: list[float]
    decision: str          # keep | discard | undecided (the most pairs, no boundary reached)
    noise_n: int


def sequential_test(session: Session, program: Program, prefix: str,
                    noise: Sequence[float], noise_scale: str | None) -> Sequential:
    """Pairs in ABBA order until the likelihood ratio of autoloop.stats reaches 1/alpha (keep)
    or beta (discard), or accept.pairs pairs were measured."""
    acc, direction = program.accept, program.verifier.direction
    evidence: list[float] = []
    used: list[int] = []

    def lr(a: list[float], b: list[float]) -> float:
        scale = st.pick_scale(a, b)
        draws = list(noise) if noise_scale == scale else []
        used.append(len(draws))
        x = st.sequential_log_lr(st.gains(a, b, direction, scale), draws)
        evidence.append(x)
        return x

    def stop(a: list[float], b: list[float]) -> bool:
        return st.sequential_decide(lr(a, b), acc.alpha) != "continue"

    pairs = measure_pairs(session, acc.pairs, prefix, stop)
    if pairs.failure is not None:
        return Sequential(pairs, evidence, "discard", used[-1] if used else 0)
    if len(evidence) < len(pairs.a):          # measure_pairs does not ask after the last pair
        lr(pairs.a, pairs.b)
    d = st.sequential_decide(evidence[-1], acc.alpha)
    return Sequential(pairs, evidence, "undecided" if d == "continue" else d, used[-1])


def judge_paired(session: Session, program: Program,
                 baseline_secondary: Mapping[str, float | None],
                 noise_step: float | None = None, noise_scale: str | None = None,
                 holdout: Session | None = None, noise: Sequence[float] = ()) -> Verdict:
    """The sequential paired rule: keep when the evidence reaches 1/alpha and the effect is at
    least min_effect; discard as soon as it falls to beta or after accept.pairs pairs. With
    confirm, a second, fresh test must end in a keep too (false keeps then <= alpha²)."""
    v, acc = program.verifier, program.accept
    name, direction = v.label, v.direction
    stats: dict[str, Any] = {"rule": "paired", "test": "sequential", "alpha": acc.alpha,
                             "beta": st.FUTILITY, "design_effect": st.DESIGN_EFFECT,
                             "pairs": acc.pairs, "confirm": acc.confirm,
                             "min_effect": str(acc.min_effect), "direction": direction,
                             "batches": []}
    warm, failure = warm_up(session, acc.warmup)
    stats["warmup"] = {"a": [r.value for r in warm if r.side == "A"],
                       "b": [r.value for r in warm if r.side == "B"]}
    if failure is not None:
        return _failed(session, failure, stats)
    batches: list[tuple[Pairs, st.Comparison, float, bool, Sequential]] = []

    def run_test(label: str, prefix: str) -> Verdict | None:
        t = sequential_test(session, program, prefix, noise, noise_scale)
        pairs = t.pairs
        if pairs.failure is not None:
            stats["batches"].append(_batch_record(label, pairs, None, None, False, acc.pairs))
            return _failed(session, pairs.failure, stats)
        c = st.compare(pairs.a, pairs.b, direction)
        min_gain = st.threshold(acc.min_effect.value, acc.min_effect.relative, c.scale,
                                direction, c.median_a)
        ok = t.decision == "keep" and c.effect >= min_gain and c.effect > 0
        rec = _batch_record(label, pairs, c, min_gain, ok, acc.pairs)
        rec.update(log_lr=t.log_lr, decision=t.decision, noise_n=t.noise_n,
                   bounds=[math.log(st.FUTILITY), math.log(1.0 / acc.alpha)])
        stats["batches"].append(rec)
        batches.append((pairs, c, min_gain, ok, t))
        return None

    early = run_test("batch", "")
    if early is not None:
        return early
    limits, problem = check_limits(program.limits, baseline_secondary,
                                   [r for r in batches[0][0].runs if r.side == "B"])
    if limits:
        stats["limits"] = limits
    if batches[0][3] and acc.confirm and not problem:
        early = run_test("confirm", "c")
        if early is not None:
            return early
    stats["verifier_runs"] = sum(len(p.runs) for p, *_ in batches) + len(warm)

    a = [x for p, *_ in batches for x in p.a]
    b = [x for p, *_ in batches for x in p.b]
    pooled = st.compare(a, b, direction)
    stats["pooled"] = pooled.as_record()
    metric = _median(b)
    step = _step_pct(noise_step if noise_scale in (None, pooled.scale) else None,
                     pooled.scale, pooled.median_a)
    if step is None and pooled.n > 1:          # no calibration to lean on: this cycle's own noise
        g = st.gains(a, b, direction, pooled.scale)
        step = _step_pct(st.noise_sd(g) / math.sqrt(pooled.n), pooled.scale, pooled.median_a)
    stats["step_pct"] = step
    improvement = None if pooled.change_pct is None else -pooled.change_pct if direction == "minimize" \
        else pooled.change_pct
    feedback = change_words(improvement, step)
    stats["feedback"] = feedback
    first = session.first
    ci = _ci_text(pooled, name)
    evid = ", ".join(f"{'confirm ' if i else ''}LR={math.exp(t.log_lr[-1]):.3g}"
                     for i, (*_, t) in enumerate(batches))
    sizes = "+".join(str(c.n) for _, c, *_ in batches)
    ratio = f", median ratio {pooled.median_ratio:.4g}" if pooled.median_ratio is not None else ""
    numbers = f"{ci}, {evid}{ratio} ({sizes} pairs)"
    base = dict(stats=stats, measurement=_m(first), delta_pct=pooled.change_pct, feedback=feedback)
    keep_at = f"{1 / acc.alpha:g}"

    if problem:
        return Verdict("guard_fail", metric, f"guard_fail: {problem}; {numbers}", problem, **base)
    p1, c1, g1, ok1, t1 = batches[0]
    if not ok1:
        if t1.decision == "discard":
            why = (f"stopped after {c1.n} pairs: the evidence fell to {st.FUTILITY:g} "
                   "(no improvement beyond the noise)")
            lesson = f"discarded: {feedback}{_not_beyond(feedback)}"
        elif t1.decision == "undecided":
            why = (f"undecided after {c1.n} pairs (LR between {st.FUTILITY:g} and {keep_at}): "
                   "any real gain is smaller than the noise lets these pairs show")
            lesson = f"discarded: {feedback}{_not_beyond(feedback)}"
        else:
            why = f"significant, but the effect is below min_effect {acc.min_effect}"
            lesson = f"discarded: {feedback}, below min_effect {acc.min_effect}"
        return Verdict("discard", metric, f"discard: {numbers}; {why}", lesson, **base)
    if acc.confirm:
        p2, c2, g2, ok2, t2 = batches[1]
        if not ok2:
            why = f"the confirmation test ended in {t2.decision} after {c2.n} pairs"
            return Verdict("discard", metric, f"discard: {numbers}; first test passed, {why}",
                           f"discarded: looked better at first, not confirmed; {feedback}", **base)
    confirmed = ", confirmed" if acc.confirm else ""
    verdict = Verdict("keep", metric, f"keep: {numbers}", f"kept: {feedback}{confirmed}",
                      note=f"{numbers}", **base)
    if holdout is not None:
        _holdout_paired(holdout, program, verdict)
    return verdict


FINAL_ALPHA = 0.05     # the end-of-run check describes a finished run: it decides nothing


def change_words(improvement: float | None, step: float | None) -> str:
    """What the generator is told a change did, in words that cannot be misread: `better by
    ≈2% (noise ±0.4%)`, `worse by ≈53.6% (noise ±2%)`, `no change beyond the noise (≈0%, noise
    ±1%)`. `improvement` is signed so that positive is better, whatever the direction."""
    if improvement is None:
        return "change unknown"
    text = st.coarse_pct(abs(improvement), step)
    if improvement == 0:
        return "no change (0%)"
    if text.startswith("≈0%"):
        return f"no change beyond the noise ({text.replace(' (', ', ', 1)}"
    text = text.replace("+", "", 1)
    return f"better by {text}" if improvement > 0 else f"worse by {text}"


def _not_beyond(feedback: str) -> str:
    # a better-looking result that was discarded was not better beyond the noise: say so
    return ", not beyond the noise" if feedback.startswith("better") else ""


def holdout_batch(session: Session, program: Program, n: int, prefix: str = "h",
                  alpha: float | None = None) -> dict[str, Any]:
    """The held-out verifier on `n` pairs; improved = its one-sided test passes alpha."""
    h = program.holdout
    assert h is not None
    pairs = measure_pairs(session, n, prefix)
    if pairs.failure is not None:
        return {"error": f"{pairs.failure.label}: {pairs.failure.error}", "a": pairs.a, "b": pairs.b}
    c = st.compare(pairs.a, pairs.b, h.direction)
    improved = c.p <= (program.accept.alpha if alpha is None else alpha) and c.effect > 0
    return {"a": pairs.a, "b": pairs.b, "order": pairs.order, **c.as_record(),
            "direction": h.direction, "improved": improved}


def _holdout_paired(session: Session, program: Program, verdict: Verdict) -> None:
    h = program.holdout
    assert h is not None
    rec = holdout_batch(session, program, HOLDOUT_PAIRS)
    if "error" in rec:
        rec["overfit"] = None
        verdict.result += f"; holdout could not be measured ({rec['error']})"
    else:
        rec["overfit"] = not rec["improved"]
        c = _comparison_text(rec, h.label)
        verdict.result += (f"; holdout {c}" if rec["improved"] else
                           f"; holdout {c} did not improve: possible overfitting to the verifier")
    verdict.stats["holdout"] = rec


def _comparison_text(rec: Mapping[str, Any], name: str) -> str:
    c = st.compare(rec["a"], rec["b"], rec["direction"]) if rec.get("a") else None
    return f"{_ci_text(c, name)}, p={c.p:.3g}" if c is not None else name


# ---- the end of a run ---------------------------------------------------------------------------


def final_check(session: Session, program: Program, holdout: Session | None = None) -> dict[str, Any]:
    """Best (B) against the starting commit (A), `final_pairs` pairs in ABBA order; two pairs
    suffice when both sides give the same value every time (a deterministic verifier)."""
    v, acc = program.verifier, program.accept
    n = acc.final_pairs

    def constant(a: list[float], b: list[float]) -> bool:
        return len(a) == 2 and len(set(a)) == 1 and len(set(b)) == 1

    pairs = measure_pairs(session, n, "f", constant)
    rec: dict[str, Any] = {"pairs": len(pairs.a), "planned": n, "a": pairs.a, "b": pairs.b,
                           "order": pairs.order, "direction": v.direction,
                           "deterministic": pairs.stopped_early}
    if pairs.failure is not None:
        rec["error"] = f"{pairs.failure.label}: {pairs.failure.error}"
        return rec
    if pairs.stopped_early and holdout is None:
        # every pair identical: the change is exact, no statistic (and no numpy/scipy) needed
        rec.update(_deterministic_pair(pairs.a[0], pairs.b[0], v.direction))
        rec["n"] = len(pairs.a)
        return rec
    c = st.compare(pairs.a, pairs.b, v.direction)
    rec.update(c.as_record())
    rec["improved"] = c.effect > 0 and (pairs.stopped_early or c.p <= FINAL_ALPHA)
    if holdout is not None and program.holdout is not None:
        hold = holdout_batch(holdout, program, n, "fh", FINAL_ALPHA)
        rec["holdout"] = hold
        if "error" not in hold:
            rec["overfit"] = bool(rec["improved"] and not hold["improved"])
    return rec


def final_text(rec: Mapping[str, Any], name: str) -> str:
    """One line about an end-of-run record: gain with its CI (or why there is none)."""
    if rec.get("skipped"):
        return f"re-measured: {rec['skipped']}"
    if rec.get("error"):
        return f"re-measure of best vs start failed: {rec['error']}" + _cost(rec)
    if rec.get("deterministic") and "change" in rec and not rec.get("holdout"):
        pct_ = rec.get("change_pct")
        body = (f"{name} {pct_:+.2f}%" if pct_ is not None else f"{name} {rec['change']:+.4g}")
        how = ("the best measured once more, the start as in cycle 0" if rec.get("reused")
               else f"{len(rec['a'])} identical pairs")
        return f"re-measured best vs start: {body} (deterministic: {how}){_cost(rec)}"
    c = st.compare(rec["a"], rec["b"], rec["direction"])
    if rec.get("deterministic"):
        body = f"{_ci_text(c, name).split(' (')[0]} (deterministic: {c.n} identical pairs)"
    else:
        body = f"{_ci_text(c, name)}, p={c.p:.3g}, {c.n} pairs"
    text = f"re-measured best vs start: {body}"
    hold = rec.get("holdout")
    if hold and "error" not in hold:
        text += f"; holdout {_comparison_text(hold, 'holdout')}"
        if rec.get("overfit"):
            text += " — the holdout did not improve: possible overfitting"
    return text + _cost(rec)


def _cost(rec: Mapping[str, Any]) -> str:
    """What the end-of-run check cost, for its line."""
    if rec.get("verifier_runs") is None:
        return ""
    n = rec["verifier_runs"]
    return f" [{n} verifier run{'' if n == 1 else 's'}, {rec.get('seconds', 0.0):.1f} s]"


def calibration(history: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The run's cycle-0 calibration record ({} when there is none)."""
    for c in history:
        if c.get("status") == "baseline":
            s = c.get("stats") or {}
            if s.get("kind") == "calibration":
                return s
    return {}


def needs_scipy(program: Program, history: Sequence[Mapping[str, Any]] = ()) -> bool:
    """Will this run compute a statistic that needs numpy/scipy (so they are worth importing
    before the first generator runs)? The paired rule and a holdout always do; the strict rule
    does once cycle 0 has shown a noisy verifier (its end-of-run check compares pairs). A strict
    run on a verifier shown deterministic never does."""
    if program.accept.rule == "paired" or program.holdout is not None:
        return True
    cal = calibration(history)
    if not cal:
        return False          # not known before cycle 0: ask again once it has calibrated
    return not cal.get("deterministic") and program.accept.final_pairs > 0


def final_estimate(program: Program, history: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What the end-of-run check will cost: verifier runs, and seconds at the calibration's
    mean time a run (None when unknown). Zero when it will be skipped."""
    acc = program.accept
    kept = any(c.get("status") == "keep" for c in history)
    cal = calibration(history)
    if acc.final_pairs == 0 or not kept:
        runs = 0
    elif cal.get("deterministic") and program.holdout is None:
        runs = 1
    else:
        runs = 2 * acc.final_pairs * (2 if program.holdout is not None else 1)
    sec = cal.get("seconds_per_run")
    return {"runs": runs, "seconds": None if sec is None else runs * sec}


def _deterministic_pair(a: float, b: float, direction: str) -> dict[str, Any]:
    """The record of one pair on a deterministic verifier, computed without numpy/scipy."""
    if a > 0 and b > 0:
        change, scale, pct_ = math.log(b / a), "log", (b / a - 1.0) * 100.0
    else:
        change, scale, pct_ = b - a, "diff", ((b - a) / abs(a) * 100.0 if a else None)
    gain = st.orientation(direction) * change
    return {"n": 1, "scale": scale, "change": change, "effect": gain, "change_pct": pct_,
            "median_a": a, "median_b": b, "improved": gain > 0}


# ---- the prompt's view ----------------------------------------------------------------------


def noise_step(history: Sequence[Mapping[str, Any]]) -> tuple[float | None, str | None]:
    """(noise of one batch's effect, its scale) from the run's calibration, if it has one."""
    for c in history:
        s = c.get("stats") or {}
        if c.get("status") == "baseline" and s.get("kind") == "calibration" and "step" in s:
            return s.get("step"), s.get("scale")
    return None, None


def coarse_value(x: float | None, history: Sequence[Mapping[str, Any]]) -> str:
    """A metric for the generator, rounded to what the noise lets one know (exact when the run
    has no calibrated noise)."""
    if x is None:
        return ""
    step, scale = noise_step(history)
    if not step or scale != "log" or x == 0:
        return exact(x)
    size = abs(x) * (math.exp(step) - 1.0)
    digits = max(0, -round(math.log10(size))) if size > 0 else 6
    return f"≈{round(x, digits):.{digits}f}"


# ---- binding to real processes ----------------------------------------------------------------


class Guarded(Protocol):
    """What the guardrails (autoloop.hardening.Guardrails) offer a measurement: the environment
    for measuring a commit in a tree proven to hold exactly it, and a check after each step."""

    def measuring(self, tree: Any, commit: str, base_env: Mapping[str, str], *,
                  baseline: bool = False) -> AbstractContextManager[dict[str, str]]: ...

    def after_step(self, step: str) -> None: ...

    def confine(self, tree: Path, env: Mapping[str, str]) -> Confinement | None: ...


class TreeRunner:
    """Runs the verifier (or the holdout) as a fresh process in a prepared tree per side,
    every run through the guardrails; each run logs to log_dir/runs/LABEL/."""

    def __init__(self, program: Program, sides: Mapping[str, tuple[Any, str]], *,
                 env: Mapping[str, str], log_dir: Path, marker: str,
                 check_signal: Callable[[], None], guard: Guarded,
                 spec: VerifierSpec | None = None, first_log_dir: Path | None = None,
                 baseline: bool = False) -> None:
        self.program = program if spec is None else dataclasses.replace(program, verifier=spec, guards=())
        self.sides = sides               # side -> (verification tree, the commit it holds)
        self.guard = guard
        self.baseline = baseline
        self.env = env
        self.log_dir = log_dir
        self.marker = marker
        self.check_signal = check_signal
        self.first_log_dir = first_log_dir
        self.limits = program.limits if spec is None else ()
        # Sides whose tree holds its commit. A tree is checked out when first measured, never
        # before: the guardrails carry each verification tree's picture from its last
        # measurement to the next generator check, and a tree reset to another commit but never
        # measured (a guard failing on B ends the batch before A runs) would no longer match
        # that picture — the next cycle then blamed its generator for "changing" it.
        self.checked_out: set[str] = set()

    def __call__(self, side: str, label: str, with_guards: bool) -> Run:
        if self.first_log_dir is not None:
            d, self.first_log_dir = self.first_log_dir, None
        else:
            d = self.log_dir / "runs" / label
            d.mkdir(parents=True, exist_ok=True)
        m = self._measure(side, d, with_guards)
        self.check_signal()
        if not m.guards_ok:
            g = m.failed_guard
            assert g is not None
            return Run(side, label, None, f"'{g.name}' failed: {g.detail}", True, measurement=m)
        secondary: dict[str, float | None] = {}
        if m.metric is not None and m.log_stem is not None:
            out = m.log_stem.with_name(m.log_stem.name + ".out")
            for lim in self.limits:
                spec = VerifierSpec(command="", direction="minimize", metric=lim.metric,
                                    pattern=lim.pattern)
                try:
                    secondary[lim.label] = parse_metric(out, spec)
                except (MetricError, OSError):
                    secondary[lim.label] = None
        return Run(side, label, m.metric, m.error, False, secondary, m)


    def _measure(self, side: str, log_dir: Path, with_guards: bool) -> Measurement:
        """One run in this side's tree, through the guardrails; autoloop.executors overrides it
        to run elsewhere."""
        tree, commit = self.sides[side]
        if side not in self.checked_out:
            tree.checkout(commit, clean=False)   # measuring() cleans it
            self.checked_out.add(side)
        with self.guard.measuring(tree, commit, self.env, baseline=self.baseline) as env:
            return measure(self.program, cwd=tree.path, env=env, log_dir=log_dir, marker=self.marker,
                           with_guards=with_guards, after_step=self.guard.after_step,
                           box=self.guard.confine(tree.path, env))


def holdout_spec(program: Program) -> VerifierSpec | None:
    h = program.holdout
    if h is None:
        return None
    return VerifierSpec(command=h.command, direction=h.direction, metric=h.metric,
                        pattern=h.pattern, timeout=h.timeout)


class Judge:
    """The loop's view: baseline, cycle and end-of-run measurements on real trees."""

    def __init__(self, program: Program, ws: Any, marker: str,
                 check_signal: Callable[[], None], guard: Guarded) -> None:
        self.program = program
        self.guard = guard
        self.ws = ws
        self.marker = marker
        self.check_signal = check_signal

    @property
    def plain(self) -> bool:
        """Contract section 5 exactly: one run of the candidate against the stored incumbent."""
        p = self.program
        a = p.accept
        return (a.rule == "strict" and p.verifier.repeats == 1 and a.min_effect.value == 0
                and a.warmup == 0 and not p.limits and p.holdout is None)

    def _runners(self, a: str, b: str, env: Mapping[str, str], log_dir: Path,
                 first_log_dir: Path | None = None, need_a: bool = True,
                 baseline: bool = False) -> tuple[TreeRunner, TreeRunner | None]:
        # checked out by the runner at each side's first measurement (TreeRunner.checked_out)
        sides: dict[str, tuple[Any, str]] = {"B": (self.ws.verify_tree(0), b)}
        if need_a:
            sides["A"] = (self.ws.verify_tree(1), a)
        main = TreeRunner(self.program, sides, env=env, log_dir=log_dir, marker=self.marker,
                          check_signal=self.check_signal, guard=self.guard,
                          first_log_dir=first_log_dir, baseline=baseline)
        spec = holdout_spec(self.program)
        hold = None if spec is None else TreeRunner(
            self.program, sides, env=env, log_dir=log_dir, marker=self.marker,
            check_signal=self.check_signal, guard=self.guard, spec=spec, baseline=baseline)
        if hold is not None:
            hold.checked_out = main.checked_out   # the same trees: one checkout each
        return main, hold

    def baseline(self, commit: str, log_dir: Path, env: Mapping[str, str]) -> Baseline:
        paired = self.program.accept.rule == "paired"
        # the first run logs where a single-run baseline always has (log_dir/verifier.*)
        main, _ = self._runners(commit, commit, env, log_dir, first_log_dir=log_dir, need_a=paired,
                                baseline=True)
        session = Session(main)
        return calibrate_paired(session, self.program) if paired else calibrate_strict(session, self.program)

    def cycle(self, candidate: str, incumbent: str, best: float, log_dir: Path,
              env: Mapping[str, str], history: Sequence[Mapping[str, Any]]) -> Verdict:
        paired = self.program.accept.rule == "paired"
        need_a = paired or self.program.holdout is not None
        main, hold = self._runners(incumbent, candidate, env, log_dir, need_a=need_a)
        session = Session(main)
        holdout = Session(hold, guards=False) if hold is not None else None
        secondary = _baseline_secondary(history)
        if paired:
            step, scale = noise_step(history)
            noise, noise_scale = calibration_noise(history)
            return judge_paired(session, self.program, secondary, step, noise_scale or scale,
                                holdout, noise)
        return judge_strict(session, self.program, best, secondary, holdout)

    def final(self, start: str, best: str, log_dir: Path, env: Mapping[str, str],
              history: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
        t0 = time.monotonic()
        rec = self._final(start, best, log_dir, env, history)
        if "skipped" not in rec:
            rec["seconds"] = round(time.monotonic() - t0, 3)
        return rec

    def _final(self, start: str, best: str, log_dir: Path, env: Mapping[str, str],
               history: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        rec: dict[str, Any] = {"start": start, "best": best}
        if self.program.accept.final_pairs == 0:
            return {**rec, "skipped": "accept.final_pairs is 0"}
        if self.ws.tree_of(start) == self.ws.tree_of(best):
            return {**rec, "skipped": "nothing was kept: the best is the starting code",
                    "change_pct": 0.0}
        cal = calibration(history)
        runs = 0
        if cal.get("deterministic") and self.program.holdout is None:
            # cycle 0 measured the starting commit twice and got the same value: it is not
            # measured again. The best is, once, in a fresh tree: when it gives its stored value
            # again that is the whole check (no statistics, no numpy/scipy); anything else and
            # the verifier is no longer deterministic, so the full check runs
            v = self.program.verifier
            only_b, _ = self._runners(start, best, env, log_dir, need_a=False)
            r = Session(only_b, guards=False).run("B", "fB1")
            runs = 1
            stored = _stored(history)
            if r.value is not None and stored is not None and r.value == stored[1]:
                rec.update(pairs=0, planned=0, a=[stored[0]], b=[r.value], order="fB1",
                           direction=v.direction, deterministic=True, verifier_runs=runs,
                           reused="cycle 0 measured the starting commit twice, identically",
                           **_deterministic_pair(stored[0], r.value, v.direction))
                return rec
            rec["determinism_broken"] = {"b": r.value, "error": r.error, "stored": stored}
        main, hold = self._runners(start, best, env, log_dir)
        rec.update(final_check(Session(main, guards=False), self.program,
                               Session(hold, guards=False) if hold is not None else None))
        rec["verifier_runs"] = runs + len(rec.get("a") or []) + len(rec.get("b") or []) + (
            len((rec.get("holdout") or {}).get("a") or []) + len((rec.get("holdout") or {}).get("b") or []))
        return rec


def _stored(history: Sequence[Mapping[str, Any]]) -> tuple[float, float] | None:
    """(the baseline's metric, the best kept metric) as the ledger holds them."""
    base = next((c.get("metric") for c in history if c.get("status") == "baseline"), None)
    best = next((c.get("metric") for c in reversed(history) if c.get("status") in ("keep", "baseline")), None)
    return None if base is None or best is None else (base, best)


def _baseline_secondary(history: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    for c in history:
        if c.get("status") == "baseline":
            return dict((c.get("stats") or {}).get("secondary") or {})
    return {}
