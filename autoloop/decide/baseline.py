"""Cycle 0: the baseline, the noise calibration and what it proposes."""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from autoloop.decide import cost, stats as st
from autoloop.decide.core import (Baseline, Pairs, Sample, Session, baseline_secondaries,
                                  first_measurement, measure_pairs, median, series, values)
from autoloop.base.numbers import num as fmt, share
from autoloop.base.specs import Amount, Direction, Program

TARGET_POWER = 0.8         # "4 times in 5": the chance of a keep the proposals aim for
# The calibration's A/A pairs: 12 runs give the noise to a rough third (a MAD of 6 changes), which
# the later tests' changes refine (cycle.calibration_noise), and they are the first runs the
# cycles after it pool (autoloop.decide.pool); 16 pairs cost 33 runs before the first cycle
CALIBRATION_PAIRS = 6


def _mean_seconds(runs: Sequence[Sample]) -> float | None:
    ds = [r.seconds for r in runs if r.seconds is not None]
    return sum(ds) / len(ds) if ds else None


def propose(pair_sd: float, scale: st.Scale, direction: Direction, reference: float, *, alpha: float,
            pairs: int, confirm: bool, min_effect: tuple[float, bool], seconds: float | None,
            burst_rate: float = 0.0, burst: float = 0.0) -> dict[str, Any]:
    """What the sequential paired rule does at this noise, simulated: how often a real gain of
    min_effect is kept, and the smallest gain kept 4 times in 5 with its cost in runs (and time).
    `pair_sd` is the robust noise of a pair (log scale, or in units on the difference scale,
    simulated as the same share of `reference`); bursts (`burst_rate` of the runs, `burst` their
    relative size) are simulated too: they cost pairs, not a wrong verdict."""
    max_pairs = max(pairs, 2)
    min_gain = st.threshold(*min_effect, scale, direction, reference)
    unit = 1.0 if scale == "log" else abs(reference) or 1.0     # the simulation is in log units
    run_cv = pair_sd / unit / math.sqrt(2)
    delta = st.design_delta(pair_sd, min_gain) / unit

    def keep_rate(g: float, floor: float) -> tuple[float, float]:
        p, runs = st.sequential_runs(g / unit, run_cv, alpha, max_pairs, floor / unit, delta,
                                     burst_rate, burst, reps=100)
        return (p * p, 2 * runs) if confirm else (p, runs)

    # the test's own detection (floor 0): a true gain of exactly min_effect clears a min_effect
    # floor only about half the time whatever the noise
    at_min, runs_min = keep_rate(min_gain, 0.0) if min_gain > 0 else (0.0, 2.0 * max_pairs)
    lo, hi = 0.0, 4.0 * pair_sd + min_gain
    if keep_rate(hi, 0.0)[0] < TARGET_POWER:
        hi *= 2
    for _ in range(6):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if keep_rate(mid, 0.0)[0] >= TARGET_POWER else (mid, hi)
    # the min_effect proposed: half that gain, so the floor costs it little (it is kept as often
    # as the test detects it) while smaller lucky estimates are refused
    floor = hi / 2
    kept, runs = keep_rate(hi, floor)
    log = scale == "log"
    return {"pair_sd": pair_sd, "power_at_min_effect": at_min, "runs_at_min_effect": runs_min,
            "gain": hi, "gain_pct": st.change_pct(hi, "log") if log else None,
            "min_effect": floor, "min_effect_pct": st.change_pct(floor, "log") if log else None,
            "min_effect_set": list(min_effect),   # (value, relative): what the warning names
            "kept_at_gain": kept, "runs_per_keep": runs, "seconds_per_run": seconds,
            "minutes_per_keep": None if seconds is None else runs * seconds / 60.0,
            "noise_pct": st.change_pct(pair_sd / math.sqrt(2), "log") if log else None,
            "burst_rate": burst_rate, "burst_pct": burst * 100.0}


def _round_up(x: float) -> str:   # a min_effect a person would type: 2 digits, rounded up
    if x <= 0:
        return "0"
    e = math.floor(math.log10(x)) - 1
    return f"{math.ceil(x / 10 ** e) * 10 ** e:.{max(0, -e)}f}"


def _proposed(prop: Mapping[str, Any], scale: str, key: str) -> str:
    return f"{_round_up(prop[key + '_pct'])}%" if scale == "log" else _round_up(prop[key])


def _cost_text(prop: Mapping[str, Any]) -> str:
    cost = f"≈ {prop['runs_per_keep']:.0f} verifier runs a keep"
    t, sec = prop.get("minutes_per_keep"), prop.get("seconds_per_run")
    if t is not None and sec is not None:
        took = (f"{t * 60:.0f} s" if t < 1.5 else f"{t:.1f} min" if t < 120 else f"{t / 60:.1f} h")
        cost += f", ≈ {took} at {sec:.3g} s a run"
    return cost


def burst_text(rate: float | None, size_pct: float | None) -> str:
    """`; 15% of runs are bursts of ~+40%` (empty without bursts)."""
    if not rate or size_pct is None:
        return ""
    return f"; {rate * 100:.2g}% of runs are bursts of ~{size_pct:+.2g}%"


def proposal_text(prop: Mapping[str, Any], scale: str, name: str) -> str:
    per_run = float(f"{prop['pair_sd'] / math.sqrt(2):.3g}")
    noise = f"{prop['noise_pct']:.2g}% per run" if scale == "log" else f"±{fmt(per_run)} {name} per run"
    noise += burst_text(prop.get("burst_rate"), prop.get("burst_pct"))
    # a proposal stored by an older run has no min_effect_set: name the key alone
    now = f"{Amount(*prop['min_effect_set'])} (accept.min_effect)" if "min_effect_set" in prop else "accept.min_effect"
    return (f"your verifier's noise is {noise}: a real gain of {now} is detected only "
            f"{share(prop['power_at_min_effect'])} of the time. Gains of {_proposed(prop, scale, 'gain')} "
            f"or more are kept {share(prop['kept_at_gain'])} of the time with accept.min_effect: "
            f"{_proposed(prop, scale, 'min_effect')} ({_cost_text(prop)}): set it, or make the "
            "verifier steadier (docs/noisy-metrics.md).")


def _noise_words(run_noise: float, scale: st.Scale, reference: float, name: str) -> str:
    """A clear gain as the calibration measured the noise: `4 × 1.1%`, `4 × 0.25 score`."""
    if scale == "log":
        return f"{cost.CLEAR_NOISES:g} × {st.change_pct(run_noise, 'log'):.2g}%"
    return f"{cost.CLEAR_NOISES:g} × {fmt(float(f'{run_noise:.3g}'))} {name}"


def _bursts(runs: Sequence[float], scale: st.Scale, pair_sd: float) -> dict[str, Any]:
    """The runs of one commit more than stats.BURST_SDS robust run noises from their median: their
    share (`burst_rate`) and median size (`burst_pct`, % of the median; None without any)."""
    xs = [math.log(x) for x in runs] if scale == "log" else list(runs)
    out = st.outliers(xs, pair_sd / math.sqrt(2))
    mid = median(xs)
    size = median([x - mid for x in out]) if out else None
    pct = None if size is None else (st.change_pct(size, "log") if scale == "log"
                                     else st.change_pct(size, "diff", median(runs)))
    return {"burst_rate": len(out) / len(xs) if xs else 0.0, "burst_pct": pct}


def _run_problem(failure: Sample, is_first: bool) -> str:
    if failure.guard is not None:
        return f"guard fails on the starting commit: '{failure.guard}' failed: {failure.error}"
    if is_first:
        return f"the baseline could not be measured: {failure.error}"
    return (f"the baseline could not be measured: run {failure.label} of the starting commit "
            f"failed ({failure.error}); the verifier is flaky")


def calibrate_strict(session: Session, program: Program) -> Baseline:
    """`repeats` runs of the starting commit (at least two, to see the noise); the metric is
    the median of the first `repeats`."""
    v, acc = program.verifier, program.accept
    warm, failure = series(session, acc.warmup, "B", "w")
    runs, failure = series(session, max(v.repeats, 2), "B") if failure is None else ([], failure)
    rec: dict[str, Any] = {"kind": "calibration", "rule": "strict", "repeats": v.repeats,
                           "warmup": values(warm), "runs": values(runs)}
    if failure is not None:
        return Baseline(None, failure.measurement, _run_problem(failure, session.first is failure), rec)
    xs = [x for x in values(runs) if x is not None]
    metric = xs[0] if v.repeats == 1 else median(xs[:v.repeats])
    rec["secondary"], problem = baseline_secondaries(program.limits, runs[:max(v.repeats, 1)])
    rec["seconds_per_run"] = _mean_seconds(runs)
    rec["deterministic"] = deterministic = len(set(xs)) == 1
    warning = None
    if not deterministic:
        sd, scale = st.strict_noise(xs)
        phantom = st.strict_phantom(sd, v.repeats, 100)
        rec.update(scale=scale, run_sd=sd, noise_pct=st.change_pct(sd, "log") if scale == "log" else None,
                   phantom_100=phantom)
        spread = (f"±{st.change_pct(sd, 'log'):.2g}% per run" if scale == "log"
                  else f"±{fmt(float(f'{sd:.3g}'))} per run")
        seems = (f"{st.change_pct(phantom, 'log'):.2g}%" if scale == "log"
                 else f"{fmt(float(f'{phantom:.3g}'))} ({v.label} units)")
        warning = (f"the verifier is noisy: {len(xs)} runs of the starting commit gave "
                   f"{', '.join(fmt(x) for x in xs)} ({spread}). With accept.rule: strict a "
                   "change that does nothing is kept whenever its measurement comes out luckier "
                   "than the best so far: over 100 such changes expect several junk commits and "
                   f"a best {v.label} that reads about {seems} better than it is. Set "
                   "accept.rule: paired (docs/noisy-metrics.md).")
        # what the paired rule's defaults would do at this noise (its calibration: 16 pairs)
        m = acc.min_effect
        prop = propose(sd * math.sqrt(2), scale, v.direction, metric, alpha=0.005, pairs=16,
                       confirm=False, min_effect=(m.value, m.relative) if m.value else (1.0, True),
                       seconds=_mean_seconds(runs))
        rec["proposal"] = prop
        warning += (f" With it and min_effect: {_proposed(prop, scale, 'min_effect')}, gains of "
                    f"{_proposed(prop, scale, 'gain')} or more would be kept "
                    f"{share(prop['kept_at_gain'])} of the time ({_cost_text(prop)}).")
        rec["warning"] = warning
    return Baseline(metric, first_measurement(session), problem, rec, warning=warning)


def calibrate_paired(session: Session, program: Program, n: int | None = None) -> Baseline:
    """An A/A batch of `n` pairs of the starting commit (CALIBRATION_PAIRS, at most
    accept.pairs): the metric is their median, the spread of the per-pair changes the noise."""
    v, acc = program.verifier, program.accept
    n = n or min(acc.pairs, CALIBRATION_PAIRS)
    warm, failure = series(session, acc.warmup, "BA", "w")
    pairs = measure_pairs(session, n) if failure is None else Pairs()
    failure = failure or pairs.failure
    rec: dict[str, Any] = {"kind": "calibration", "rule": "paired", "pairs": n,
                           "warmup": {"a": values(warm, "A"), "b": values(warm, "B")},
                           "a": pairs.a, "b": pairs.b, "order": pairs.order}
    if failure is not None:
        return Baseline(None, failure.measurement, _run_problem(failure, session.first is failure), rec)
    metric = median(pairs.a + pairs.b)
    rec["secondary"], problem = baseline_secondaries(program.limits, pairs.runs)
    scale = st.pick_scale(pairs.a, pairs.b)
    changes = st.changes(pairs.a, pairs.b, scale)
    # the noise is the spread of the bulk (MAD), the bursts are counted apart: one +40% run must
    # not read as "13% noise" and advise a min_effect no real gain reaches
    sd, bursts = st.robust_scale(changes), _bursts(pairs.a + pairs.b, scale, st.robust_scale(changes))
    deterministic = len(set(pairs.a + pairs.b)) == 1
    m = acc.min_effect
    rec.update(scale=scale, noise_sd=st.noise_sd(changes), noise_robust=sd, deterministic=deterministic,
               min_gain=st.threshold(m.value, m.relative, scale, v.direction, metric),
               seconds_per_run=_mean_seconds(pairs.runs),
               noise_pct=st.change_pct(sd / math.sqrt(2), "log") if scale == "log" else None,
               step=sd / math.sqrt(n), **bursts)
    warning = note = None
    if deterministic:
        note = ("the verifier looks deterministic (identical values for the same commit); "
                "accept.rule: paired only costs time here")
    elif sd > 0:
        prop = propose(sd, scale, v.direction, metric, alpha=acc.alpha, pairs=acc.pairs,
                       confirm=acc.confirm, min_effect=(m.value, m.relative),
                       seconds=_mean_seconds(pairs.runs), burst_rate=bursts["burst_rate"],
                       burst=(bursts["burst_pct"] or 0.0) / 100.0)
        rec["proposal"], rec["detectable"] = prop, prop["gain"]
        if prop["power_at_min_effect"] < TARGET_POWER:
            warning = proposal_text(prop, scale, v.label)
        # the cost of a night at this alpha and min_effect, said before it starts
        run_noise = sd / math.sqrt(2)
        c = cost.expected(acc.alpha, acc.confirm, acc.pairs, rec["min_gain"] / run_noise)
        rec["cost"] = c.record()
        said = cost.cost_text(c, rec["seconds_per_run"], _noise_words(run_noise, scale, metric, v.label),
                              str(m))
        warning = f"{warning} {said[0].upper()}{said[1:]}" if warning else None
        note = None if warning else f"{said[0].upper()}{said[1:]}"
    rec["warning"] = warning
    return Baseline(metric, first_measurement(session), problem, rec, warning=warning, note=note)
