"""One cycle: the strict and the paired rule, the holdout after a keep."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from autoloop.decide import stats as st
from autoloop.decide import wording
from autoloop.decide.cost import floor_pairs
from autoloop.decide.core import (History, Pairs, Sample, Session, Verdict, check_limits,
                                  first_measurement, measure_pairs, median, series, values)
from autoloop.base.numbers import formatter, num as fmt, pct, share, signed_pct
from autoloop.decide import pool as pooling
from autoloop.decide.pool import Pool, drifted
from autoloop.decide.ratchet import better, gain_of
from autoloop.base.specs import HoldoutSpec, Program

HOLDOUT_PAIRS = 8          # a fixed batch for the held-out verifier after a keep (min p 1/256)
NOISE_DRAWS = 200          # the most noise draws a test leans on: the recent past, not all of it


def _failed(session: Session, failure: Sample, stats: dict[str, Any]) -> Verdict:
    if failure.guard is not None:
        return Verdict("guard_fail", None, f"guard_fail: {failure.guard}: {failure.error}",
                       f"guard '{failure.guard}' failed: {failure.error}", stats,
                       measurement=failure.measurement)
    why = failure.error if failure.side != "A" else (
        f"the incumbent's re-measurement ({failure.label}) crashed: {failure.error}; "
        "the verifier is flaky")
    # an A run comes after B1 (ABBA), which carried the guards
    return Verdict("crash", None, f"crash: {why}", f"crash: {why}", stats,
                   measurement=first_measurement(session) or failure.measurement)


def judge_strict(session: Session, program: Program, best: float,
                 baseline_secondary: Mapping[str, float | None],
                 holdout: Session | None = None) -> Verdict:
    """The one strict rule (contract §5): the median of `repeats` candidate runs against the
    incumbent's stored metric."""
    v, acc = program.verifier, program.accept
    name = v.label
    stats: dict[str, Any] = {"rule": "strict", "repeats": v.repeats, "incumbent": best,
                             "min_effect": str(acc.min_effect)}
    warm, failure = series(session, acc.warmup, "B", "w")
    stats["warmup"] = values(warm)
    runs, failure = series(session, v.repeats, "B") if failure is None else ([], failure)
    stats["samples"] = [x for x in values(runs) if x is not None]
    if failure is not None:
        return _failed(session, failure, stats)
    value = stats["median"] = median(stats["samples"])
    limits, problem = check_limits(program.limits, baseline_secondary, runs)
    if limits:
        stats["limits"] = limits
    delta = pct(best, value)
    base = dict(measurement=first_measurement(session), delta_pct=delta)
    if problem:
        return Verdict("guard_fail", value, f"guard_fail: {problem}", problem, stats, **base)
    stats["threshold"] = need = acc.min_effect.of(best)
    f = formatter([best, value])      # two values that differ must print differently
    shown = f"{f(value)}" + (f" (median of {v.repeats})" if v.repeats > 1 else "")
    gain_txt = f" ({signed_pct(delta)})" if delta is not None else ""
    if better(v.direction, value, best) and gain_of(v.direction, best, value) >= need:
        verdict = Verdict("keep", value, f"keep: {name} {f(best)} → {shown}{gain_txt}",
                          f"kept: {name} {f(best)} → {f(value)}{gain_txt}", stats, **base)
        if holdout is not None:
            _holdout_strict(holdout, program, verdict)
        return verdict
    if value == best:
        why = f"{shown} ties best {f(best)}"
    elif better(v.direction, value, best):
        why = f"{shown} is better than best {f(best)} by less than min_effect {acc.min_effect}"
    else:
        why = f"{shown} is worse than best {f(best)}"
    # its change as the result, log and report state it (a float-noise difference rounds to 0%,
    # which beside "worse" would read as a contradiction: left out)
    said = gain_txt if value == best or gain_txt != " (0%)" else ""
    return Verdict("discard", value, f"discard: {name} {why}{said}", f"discarded: {why}{said}",
                   stats, **base)


def _holdout_strict(session: Session, program: Program, verdict: Verdict) -> None:
    h = program.holdout
    assert h is not None
    pairs = measure_pairs(session, program.verifier.repeats, "h")
    if pairs.failure is not None:
        verdict.stats["holdout"] = {"error": f"{pairs.failure.label}: {pairs.failure.error}"}
        verdict.result += f"; holdout could not be measured ({pairs.failure.error})"
        return
    a, b = median(pairs.a), median(pairs.b)
    improved = better(h.direction, b, a)
    verdict.stats["holdout"] = {"a": pairs.a, "b": pairs.b, "improved": improved, "overfit": not improved}
    verdict.result += (f"; holdout {h.label} {fmt(a)} → {fmt(b)}" if improved else
                       f"; holdout {h.label} did not improve ({fmt(a)} → {fmt(b)}): possible "
                       "overfitting to the verifier")


def ci_text(c: st.Comparison, name: str) -> str:
    if c.change_pct is not None and c.change_ci_pct is not None:
        body, ci = signed_pct(c.change_pct), " … ".join(signed_pct(x) for x in c.change_ci_pct)
    else:
        body, ci = f"{c.change:+.4g}", " … ".join(f"{x:+.4g}" for x in c.change_ci)
    if c.n == 1:
        return f"{name} {body} (one pair, no CI)"
    return f"{name} {body} ({share(c.ci.level)} CI {ci})"


def stated_change(stats: Mapping[str, Any], name: str) -> str | None:
    """A paired cycle's change as its verdict states it (`score -14.01% (75% CI …)`, the
    estimate over all its pairs), read from its ledger stats; None for any other rule. What is
    quoted beside the verdict (a commit message, a person's decision) must not be the change
    between two medians, which the estimate is not."""
    p = stats.get("pooled")
    if not isinstance(p, dict) or p.get("change_pct") is None:
        return None
    body = signed_pct(p["change_pct"])
    noise = wording.noise_text(wording.noise_pct({"stats": stats}), p.get("n"))
    noise = f", {noise}" if noise else ""
    if p.get("n") == 1 or not p.get("change_ci_pct"):
        return f"{name} {body} (one pair, no CI){noise}"
    ci = " … ".join(signed_pct(x) for x in p["change_ci_pct"])
    level = f"{share(p['ci_level'])} CI" if p.get("ci_level") is not None else "CI"
    return f"{name} {body} ({level} {ci}){noise}"


def calibration_noise(history: History) -> tuple[list[float], str | None]:
    """Draws of the pair noise about 0 and their scale ([], None without): the calibration's A/A
    changes, then each later paired test's changes less their median (free of the candidate's
    effect; a Helmert contrast would spread one burst over every contrast after it), so a lucky
    calibration is outvoted as the run goes on. Only their robust spread is used."""
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
    for c in history:
        s = c.get("stats") or {}
        if c.get("cycle", 0) > 0 and s.get("rule") == "paired" and s.get("test") == "sequential":
            for b in s.get("batches") or []:
                a_, b_ = b.get("a") or [], b.get("b") or []
                if len(a_) == len(b_) >= 2 and st.pick_scale(a_, b_) == scale:
                    ch = st.changes(a_, b_, scale)
                    mid = median(ch)
                    draws.extend(x - mid for x in ch)
    return draws[-NOISE_DRAWS:], scale


def pool_for(history: History, incumbent: str, node: Any, now: float) -> Pool:
    """autoloop.decide.pool.incumbent_pool with the calibration's run time, its robust noise
    (the later tests' draws included, as the futility side takes them) and its scale."""
    base = next((c for c in history if c.get("status") == "baseline"), None)
    cal = (base.get("stats") or {}) if base is not None else {}
    if cal.get("kind") != "calibration" or cal.get("rule") != "paired" or cal.get("deterministic"):
        return Pool(why_not="no paired calibration of a noisy verifier")
    draws, scale = calibration_noise(history)
    pair_noise = st.robust_scale(draws) if draws else float(cal.get("noise_robust") or 0.0)
    return pooling.incumbent_pool(history, incumbent, node, now, cal.get("seconds_per_run"),
                                  pair_noise / math.sqrt(2), base.get("metric") if base else None,
                                  scale or cal.get("scale"))


@dataclass
class Sequential:   # one sequential test; ok: a keep with an effect of at least min_effect
    pairs: Pairs
    log_lr: list[float]          # log e-value of the keep side after each pair
    log_futility: list[float]    # ... and of the futility side (a gain of delta ruled out)
    decision: str          # keep | discard | undecided (the most pairs, no boundary reached)
    noise_n: int
    delta: float
    at_floor: bool = False       # delta is min_effect: a futility discard says "below min_effect"
    ok: bool = False
    pooled: int = 0              # earlier runs ranked with this test's (0: the test alone)
    drift: dict[str, Any] | None = None   # where the drift check set the pool aside
    shift: float = 0.0           # delta in run noises: the futility side's shift component


def sequential_test(session: Session, program: Program, prefix: str,
                    noise: Sequence[float], noise_scale: str | None,
                    prior: Sequence[tuple[str, float]] = (), pool: Pool | None = None,
                    fresh_a: Sequence[float] = ()) -> Sequential:
    """ABBA pairs until autoloop.decide.stats' rank e-value reaches 1/alpha (keep) or its futility side
    1/beta (discard), or accept.pairs pairs. The futility side rules out DESIGN_EFFECT robust
    pair noises (the calibration's, when on this scale), at least min_effect; fixed after the
    first pair (its incumbent run is min_effect's reference on the difference scale).

    With `prior` (the incumbent's pooled runs, and with confirm the first test's runs) the runs
    are ranked among those too. After each pair the drift check compares the fresh incumbent
    runs (`fresh_a` and this test's) with the pool; when they sit on either side beyond
    pool.drifted's bounds, the pool is set aside for the rest of the cycle: the evidence so far
    is cut to at most 1 (never raised), and the test goes on within itself on the pairs measured
    after it."""
    acc, direction = program.accept, program.verifier.direction
    trail: list[tuple[float, float]] = []
    used: list[float] = []
    prior_values = [v for _, v in prior]
    fewest_pairs = floor_pairs(acc.alpha)   # the fewest pairs that can keep within one test
    # after a drift: the pair the within-test rule starts at and the evidence carried (<= 1)
    cut: dict[str, Any] = {}

    evidence: dict[str, st.RankEvidence] = {}

    def fed(key: str, a: list[float], b: list[float], n0: int, scale: st.Scale,
            before: Sequence[tuple[str, float]]) -> st.RankEvidence:
        # each pair is ranked once; a scale that changes (a value <= 0 arrives) ranks them again
        e = evidence.get(key)
        if e is None or e.scale != scale:
            e = evidence[key] = st.RankEvidence(direction, scale, used[1], before, first=n0,
                                                shift=used[3])
        for i in range(e.n, len(a)):
            e.add(a[i], b[i])
        return e

    def step(a: list[float], b: list[float]) -> str:
        scale = st.pick_scale(a, b, prior_values)
        if not used:
            draws = list(noise) if noise_scale == scale else []
            m = acc.min_effect
            floor = st.threshold(m.value, m.relative, scale, direction, a[0])
            pair_noise = st.robust_scale(draws)
            delta = st.design_delta(pair_noise, floor)
            # the futility side's shift: delta in run noises (a pair holds two runs' noise)
            shift = delta / (pair_noise / math.sqrt(2)) if pair_noise > 0 else 0.0
            used.extend([len(draws), delta, floor, shift])
        if prior and not cut and pool is not None and pool.values:
            # a slower machine is worth setting the pool aside for only while the pairs left can
            # still keep within the test; else the cut would only make a discard undecided
            can_keep = acc.pairs - len(a) >= fewest_pairs
            z = drifted(pool.values, [*fresh_a, *a], direction, scale, pool.noise, bad_side=can_keep)
            if z is not None:
                e = fed("pooled", a, b, 0, scale, prior)
                cut.update(pair=len(a), z=z, up=min(e.up[-1], 0.0), down=min(e.down[-1], 0.0))
                trail[:] = list(zip(e.up, e.down))
                return "continue"
        if cut:
            n0 = cut["pair"]
            if len(a) == n0:
                return "continue"
            e = fed("within", a, b, n0, st.pick_scale(a[n0:], b[n0:]), ())
            trail[n0:] = [(cut["up"] + u, cut["down"] + d) for u, d in zip(e.up, e.down)]
            return st.sequential_decide(trail[-1][0], acc.alpha, trail[-1][1])
        e = fed("pooled", a, b, 0, scale, prior)
        trail[:] = list(zip(e.up, e.down))
        return st.sequential_decide(e.up[-1], acc.alpha, e.down[-1])

    def effect_ok(a: list[float], b: list[float]) -> bool:
        # a keep also needs the effect (judge_paired's check): while it is not there the test
        # goes on (the bound holds at any stopping time), so a run of bursts on the candidate
        # side costs pairs, not the verdict
        scale = st.pick_scale(a, b)
        g = st.gains(a, b, direction, scale)
        m = acc.min_effect
        return (median(g) >= st.threshold(m.value, m.relative, scale, direction, median(a))
                and st.hodges_lehmann(g) > 0)

    def stop(a: list[float], b: list[float]) -> bool:
        d = step(a, b)
        return d == "discard" or (d == "keep" and effect_ok(a, b))

    pairs = measure_pairs(session, acc.pairs, prefix, stop)
    d = step(pairs.a, pairs.b) if pairs.a else "continue"
    if pairs.failure is not None:
        d = "discard"
    drift = None if not cut else {"pair": cut["pair"], "z": round(cut["z"], 2),
                                  "log_lr_kept": cut["up"], "log_futility_kept": cut["down"]}
    return Sequential(pairs, [u for u, _ in trail], [f for _, f in trail],
                      "undecided" if d == "continue" else d, int(used[0]) if used else 0,
                      used[1] if used else 0.0, bool(used) and used[1] <= used[2],
                      pooled=len(prior), drift=drift, shift=used[3] if used else 0.0)


def judge_paired(session: Session, program: Program,
                 baseline_secondary: Mapping[str, float | None],
                 noise_step: float | None = None, noise_scale: str | None = None,
                 holdout: Session | None = None, noise: Sequence[float] = (),
                 pool: Pool | None = None) -> Verdict:
    """The sequential paired rule: keep when the evidence reaches 1/alpha and the effect is at
    least min_effect; with confirm a fresh second test must keep too (false keeps <= alpha²).
    With a `pool` (autoloop.decide.pool) the tests rank their runs among the incumbent's recent
    runs too, unless the drift check sets them aside."""
    v, acc = program.verifier, program.accept
    name, direction = v.label, v.direction
    stats: dict[str, Any] = {"rule": "paired", "test": "sequential", "evidence": "ranks",
                             "alpha": acc.alpha, "beta": st.FUTILITY, "design_effect": st.DESIGN_EFFECT,
                             "pairs": acc.pairs, "confirm": acc.confirm,
                             "min_effect": str(acc.min_effect), "direction": direction,
                             "batches": []}
    warm, failure = series(session, acc.warmup, "BA", "w")
    stats["warmup"] = {"a": values(warm, "A"), "b": values(warm, "B")}
    if failure is not None:
        return _failed(session, failure, stats)
    tests: list[Sequential] = []
    if pool is not None:
        stats["pool"] = {**pool.record(), "values": list(pool.values)}

    def run_test(label: str, prefix: str) -> Verdict | None:
        prior: list[tuple[str, float]] = []
        fresh_a: list[float] = []
        if pool is not None and pool.values and not any(t.drift for t in tests):
            prior = [("A", v) for v in pool.values]
            for t in tests:
                prior += st.run_order(t.pairs.a, t.pairs.b)
                fresh_a += t.pairs.a
        t = sequential_test(session, program, prefix, noise, noise_scale, prior, pool, fresh_a)
        rec: dict[str, Any] = {"name": label, "a": t.pairs.a, "b": t.pairs.b, "order": t.pairs.order,
                               "planned": acc.pairs, "stopped_early": t.pairs.stopped_early}
        if t.pairs.failure is not None:
            stats["batches"].append({**rec, "passed": False})
            return _failed(session, t.pairs.failure, stats)
        c = st.compare(t.pairs.a, t.pairs.b, direction)
        min_gain = st.threshold(acc.min_effect.value, acc.min_effect.relative, c.scale,
                                direction, c.median_a)
        # min_effect against the median pair gain: the Hodges-Lehmann estimate breaks down once
        # ~30% of the pairs hold a burst, the median only at half
        mid = median(st.gains(t.pairs.a, t.pairs.b, direction, c.scale))
        t.ok = t.decision == "keep" and mid >= min_gain and c.effect > 0
        stats["batches"].append({**rec, "passed": t.ok, **c.as_record(), "threshold": min_gain, "median_gain": mid,
                                 "log_lr": t.log_lr, "log_futility": t.log_futility, "delta": t.delta, "shift": t.shift,
                                 "decision": t.decision, "noise_n": t.noise_n,
                                 "pool_runs": t.pooled, "drift": t.drift,
                                 "bounds": [math.log(1.0 / st.FUTILITY), math.log(1.0 / acc.alpha)]})
        tests.append(t)
        return None

    early = run_test("batch", "")
    if early is not None:
        return early
    limits, problem = check_limits(program.limits, baseline_secondary,
                                   [r for r in tests[0].pairs.runs if r.side == "B"])
    if limits:
        stats["limits"] = limits
    if tests[0].ok and acc.confirm and not problem:
        early = run_test("confirm", "c")
        if early is not None:
            return early
    stats["verifier_runs"] = sum(len(t.pairs.runs) for t in tests) + len(warm)

    a = [x for t in tests for x in t.pairs.a]
    b = [x for t in tests for x in t.pairs.b]
    pooled = st.compare(a, b, direction)
    stats["pooled"] = pooled.as_record()
    # The noise the lesson states is the larger of the calibration's and this cycle's own: a
    # machine busier than at calibration must not read "better by 5% (noise ±5%)" beside a 95% CI
    # of -24…+17%. Both robust (MAD): a burst in one run must not read as the noise of all.
    own = st.robust_scale(st.gains(a, b, direction, pooled.scale)) / math.sqrt(pooled.n) if pooled.n > 1 else 0.0
    sd = max(noise_step or 0.0, own) if noise_scale in (None, pooled.scale) and pooled.median_a else own
    step = stats["step_pct"] = st.change_pct(sd, pooled.scale, pooled.median_a) if sd and sd > 0 else None

    def words(status: str) -> str:
        # the one wording of this change (autoloop.decide.wording), as log, report and commit quote it
        return wording.change_words(pooled.change_pct, step, pooled.n, direction, status)

    feedback = stats["feedback"] = words("discard")
    evid = ", ".join(f"{'confirm ' if i else ''}LR={math.exp(t.log_lr[-1]):.3g}"
                     for i, t in enumerate(tests))
    sizes = "+".join(str(len(t.pairs.a)) for t in tests)
    ratio = f", median ratio {pooled.median_ratio:.4g}" if pooled.median_ratio is not None else ""
    # no % without a reference (a median of 0): the change in the metric's units
    stated = stated_change(stats, name) or ci_text(pooled, name)
    numbers = f"{stated}, {evid}{ratio} ({sizes} {'pair' if sizes == '1' else 'pairs'})"
    numbers += wording.pool_words(stats)
    base = dict(stats=stats, measurement=first_measurement(session), delta_pct=pooled.change_pct, feedback=feedback)
    metric = median(b)

    if problem:
        return Verdict("guard_fail", metric, f"guard_fail: {problem}; {numbers}", problem, **base)
    first = tests[0]
    n_first = wording.plural(len(first.pairs.a), "pair")
    if not first.ok:
        if first.decision == "discard":
            ruled = st.change_pct(first.delta, pooled.scale, pooled.median_a)
            gain = f"{ruled:.2g}%" if ruled is not None else f"{first.delta:.3g}"
            why = (f"stopped after {n_first}: a gain of {gain} or more is ruled out "
                   f"(evidence {1 / st.FUTILITY:g} against it; no improvement beyond the noise)")
            short = (f"below min_effect {acc.min_effect}" if first.at_floor
                     else f"a gain of {gain} or more is ruled out after {n_first}")
        elif first.decision == "undecided":
            why = (f"undecided after {n_first} (LR below {1 / acc.alpha:g}): any real "
                   "gain is smaller than the noise lets these pairs show")
            short = f"undecided after {n_first}"
        else:
            why = short = f"significant, but the effect is below min_effect {acc.min_effect}"
        # a discard that looked better says why it was not kept; one that was not needs no reason
        lesson = (f"discarded: {feedback}; not kept: {short}" if first.decision == "keep"
                  or wording.direction_word(pooled.change_pct, direction) == "better"
                  else f"discarded: {feedback}")
        return Verdict("discard", metric, f"discard: {numbers}; {why}", lesson, **base)
    if acc.confirm and not tests[1].ok:
        why = (f"the confirmation test ended in {tests[1].decision} after "
               f"{wording.plural(len(tests[1].pairs.a), 'pair')}")
        return Verdict("discard", metric, f"discard: {numbers}; first test passed, {why}",
                       f"discarded: {feedback}; not kept: looked better at first, not confirmed", **base)
    confirmed = ", confirmed" if acc.confirm else ""
    kept = stats["feedback"] = base["feedback"] = words("keep")
    verdict = Verdict("keep", metric, f"keep: {numbers}", f"kept: {kept}{confirmed}",
                      note=numbers, **base)
    if holdout is not None:
        assert program.holdout is not None
        rec = holdout_batch(holdout, program.holdout, HOLDOUT_PAIRS, program.accept.alpha)
        rec["overfit"] = None if "error" in rec else not rec["improved"]
        if "error" in rec:
            verdict.result += f"; holdout could not be measured ({rec['error']})"
        else:
            verdict.result += f"; holdout {comparison_text(rec, program.holdout.label)}" + (
                "" if rec["improved"] else " did not improve: possible overfitting to the verifier")
        verdict.stats["holdout"] = rec
    return verdict


def holdout_batch(session: Session, h: HoldoutSpec, n: int, alpha: float, prefix: str = "h") -> dict[str, Any]:
    pairs = measure_pairs(session, n, prefix)
    if pairs.failure is not None:
        return {"error": f"{pairs.failure.label}: {pairs.failure.error}", "a": pairs.a, "b": pairs.b}
    c = st.compare(pairs.a, pairs.b, h.direction)
    return {"a": pairs.a, "b": pairs.b, "order": pairs.order, **c.as_record(),
            "direction": h.direction, "improved": c.p <= alpha and c.effect > 0}


def comparison_text(rec: Mapping[str, Any], name: str) -> str:
    c = st.compare(rec["a"], rec["b"], rec["direction"]) if rec.get("a") else None
    return f"{ci_text(c, name)}, p={c.p:.3g}" if c is not None else name
