"""The end of a run (best against start, re-measured) and what the ledger says about the run."""

from __future__ import annotations

import math
import time
from typing import Any, Callable, Mapping

from autoloop.decide import stats as st
from autoloop.decide.core import History, Session, measure_pairs
from autoloop.decide.cycle import ci_text, comparison_text, holdout_batch
from autoloop.base.numbers import exact, signed_pct
from autoloop.decide.ratchet import orientation
from autoloop.base.specs import Direction, Program
from autoloop.decide.wording import plural

FINAL_ALPHA = 0.05     # the end-of-run check describes a finished run: it decides nothing
NOTHING_KEPT = "nothing was kept: the best is the starting code"   # an end-of-run check skipped


def final_check(session: Session, program: Program, holdout: Session | None = None) -> dict[str, Any]:
    """Best (B) against the start (A), `final_pairs` ABBA pairs; two when both sides give the
    same value every time (a deterministic verifier)."""
    direction, n = program.verifier.direction, program.accept.final_pairs
    pairs = measure_pairs(session, n, "f", lambda a, b: len(a) == 2 and len(set(a)) == len(set(b)) == 1)
    rec: dict[str, Any] = {"pairs": len(pairs.a), "planned": n, "a": pairs.a, "b": pairs.b,
                           "order": pairs.order, "direction": direction,
                           "deterministic": pairs.stopped_early}
    if pairs.failure is not None:
        return {**rec, "error": f"{pairs.failure.label}: {pairs.failure.error}"}
    if pairs.stopped_early and holdout is None:
        # every pair identical: the change is exact, no statistic (and no numpy/scipy) needed
        return {**rec, **_deterministic_pair(pairs.a[0], pairs.b[0], direction), "n": len(pairs.a)}
    c = st.compare(pairs.a, pairs.b, direction)
    rec.update(c.as_record())
    rec["improved"] = c.effect > 0 and (pairs.stopped_early or c.p <= FINAL_ALPHA)
    if holdout is not None and program.holdout is not None:
        hold = rec["holdout"] = holdout_batch(holdout, program.holdout, n, FINAL_ALPHA, "fh")
        if "error" not in hold:
            rec["overfit"] = bool(rec["improved"] and not hold["improved"])
    return rec


def end_of_run(program: Program, history: History, start: str, best: str,
               unchanged: Callable[[], bool],
               sessions: Callable[[bool], tuple[Session, Session | None]],
               announce: Callable[[], None] = lambda: None) -> dict[str, Any]:
    """The end-of-run record: skipped, the best measured once more (a verifier cycle 0 showed
    deterministic), or final_check. `sessions(both)`: the best's (and start's), the holdout's;
    `announce()`: called once, only when something is going to be measured."""
    t0 = time.monotonic()
    rec: dict[str, Any] = {"start": start, "best": best}
    if program.accept.final_pairs == 0:
        return {**rec, "skipped": "accept.final_pairs is 0"}
    if unchanged():
        return {**rec, "skipped": NOTHING_KEPT, "change_pct": 0.0}
    announce()
    runs = 0
    if calibration(history).get("deterministic") and program.holdout is None:
        # cycle 0 measured the starting commit twice, identically: it is not measured again. The
        # best is, once: its stored value again is the whole check (no numpy/scipy); anything
        # else and the verifier is no longer deterministic, so the full check runs
        r, runs, stored = sessions(False)[0].run("B", "fB1"), 1, _stored(history)
        if r.value is not None and stored is not None and r.value == stored[1]:
            rec.update(pairs=0, planned=0, a=[stored[0]], b=[r.value], order="fB1",
                       direction=program.verifier.direction, deterministic=True, verifier_runs=runs,
                       reused="cycle 0 measured the starting commit twice, identically",
                       **_deterministic_pair(stored[0], r.value, program.verifier.direction))
            return {**rec, "seconds": round(time.monotonic() - t0, 3)}
        rec["determinism_broken"] = {"b": r.value, "error": r.error, "stored": stored}
    main, hold = sessions(True)
    rec.update(final_check(main, program, hold))
    hold_rec = rec.get("holdout") or {}
    rec["verifier_runs"] = runs + sum(len(r.get(k) or []) for r in (rec, hold_rec) for k in "ab")
    return {**rec, "seconds": round(time.monotonic() - t0, 3)}


def confirmed(rec: Mapping[str, Any]) -> bool | None:
    """Did this end-of-run record confirm the best over the start? None: it measured nothing
    that could say (skipped, failed, or an old record without the verdict)."""
    if rec.get("skipped") or rec.get("error") or "improved" not in rec:
        return None
    return bool(rec["improved"])


def refuted_text(rec: Mapping[str, Any], keeps: list[int], name: str) -> str:
    """`cycle 1's keep did not hold: re-measured +3.64% against the start`: the keeps an
    end-of-run check did not confirm, in words."""
    who = (f"cycle {keeps[0]}'s keep" if len(keeps) == 1 else
           f"the keeps of cycles {', '.join(map(str, keeps[:-1]))} and {keeps[-1]}" if keeps else "the best")
    p = rec.get("change_pct")
    change = signed_pct(p) if p is not None else "no change"
    if (rec.get("effect") or 0.0) <= 0:
        return f"{who} did not hold: {name} re-measured {change} against the start"
    p_value = f", p = {rec['p']:.3g}" if isinstance(rec.get("p"), (int, float)) else ""
    return f"{who} {'was' if len(keeps) < 2 else 'were'} not confirmed: {name} re-measured {change} against the start{p_value}"


def _cost(rec: Mapping[str, Any]) -> str:
    if rec.get("verifier_runs") is None:
        return ""
    n = rec["verifier_runs"]
    return f" [{n} verifier run{'' if n == 1 else 's'}, {rec.get('seconds', 0.0):.1f} s]"


def final_text(rec: Mapping[str, Any], name: str) -> str:
    if rec.get("skipped"):
        return f"not re-measured: {rec['skipped']}"
    if rec.get("error"):
        return f"re-measure of best vs start failed: {rec['error']}" + _cost(rec)
    if rec.get("deterministic") and "change" in rec and not rec.get("holdout"):
        p = rec.get("change_pct")
        body = f"{name} {signed_pct(p)}" if p is not None else f"{name} {rec['change']:+.4g}"
        how = ("the best measured once more, the start as in cycle 0" if rec.get("reused")
               else f"{len(rec['a'])} identical pairs")
        return f"re-measured best vs start: {body} (deterministic: {how}){_cost(rec)}"
    c = st.compare(rec["a"], rec["b"], rec["direction"])
    if rec.get("deterministic"):
        body = f"{ci_text(c, name).split(' (')[0]} (deterministic: {c.n} identical pairs)"
    else:
        body = f"{ci_text(c, name)}, p={c.p:.3g}, {plural(c.n, 'pair')}"
    text = f"re-measured best vs start: {body}"
    hold = rec.get("holdout")
    if hold and "error" not in hold:
        text += f"; holdout {comparison_text(hold, 'holdout')}"
        if rec.get("overfit"):
            text += " — the holdout did not improve: possible overfitting"
    return text + _cost(rec)


def _deterministic_pair(a: float, b: float, direction: Direction) -> dict[str, Any]:
    scale = st.pick_scale([a, b])
    change = st.changes([a], [b], scale)[0]
    gain = orientation(direction) * change
    return {"n": 1, "scale": scale, "change": change, "effect": gain, "change_pct": st.change_pct(change, scale, a),
            "median_a": a, "median_b": b, "improved": gain > 0}


def calibration(history: History) -> Mapping[str, Any]:   # cycle 0's stats ({} if none)
    base = next((c for c in history if c.get("status") == "baseline"), None)
    s = (base.get("stats") or {}) if base is not None else {}
    return s if s.get("kind") == "calibration" else {}


def baseline_secondary(history: History) -> dict[str, float | None]:   # the limits' baseline
    return dict(calibration(history).get("secondary") or {})


def _stored(history: History) -> tuple[float, float] | None:   # (baseline, best) in the ledger
    base = next((c.get("metric") for c in history if c.get("status") == "baseline"), None)
    best = next((c.get("metric") for c in reversed(history) if c.get("status") in ("keep", "baseline")), None)
    return None if base is None or best is None else (base, best)


def needs_scipy(program: Program, history: History = ()) -> bool:
    """Will this run compute a statistic that needs numpy/scipy? The paired rule and a holdout
    always do; the strict rule once cycle 0 showed a noisy verifier (the end-of-run check)."""
    if program.accept.rule == "paired" or program.holdout is not None:
        return True
    cal = calibration(history)
    return bool(cal) and not cal.get("deterministic") and program.accept.final_pairs > 0


def final_estimate(program: Program, history: History) -> dict[str, Any]:
    """What the end-of-run check will cost: verifier runs, and seconds at the calibration's time
    a run (None when unknown)."""
    acc, cal = program.accept, calibration(history)
    if acc.final_pairs == 0 or not any(c.get("status") == "keep" for c in history):
        runs = 0
    elif cal.get("deterministic") and program.holdout is None:
        runs = 1
    else:
        runs = 2 * acc.final_pairs * (2 if program.holdout is not None else 1)
    sec = cal.get("seconds_per_run")
    return {"runs": runs, "seconds": None if sec is None else runs * sec}


def coarse_value(x: float | None, history: History) -> str:
    """A metric for the generator, rounded to what the calibrated noise lets one know."""
    if x is None:
        return ""
    cal = calibration(history)
    step = cal.get("step")
    if not step or cal.get("scale") != "log" or x == 0:
        return exact(x)
    size = abs(x) * (math.exp(step) - 1.0)
    digits = max(0, -round(math.log10(size))) if size > 0 else 6
    return f"≈{round(x, digits):.{digits}f}"
