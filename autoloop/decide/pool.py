"""The incumbent's recent runs, pooled into a paired test: which of its runs the ledger holds may
stand beside the fresh ones (the same commit's tree, the same node, recent enough that a slow
drift cannot have moved them), and the drift check that sets them aside when the fresh runs of
the incumbent say the machine moved (either way).

Why it pays: within one test, n candidate runs ranked among 2n runs show at most C(2n, n) to 1
(3 pairs at alpha 0.05, 6 at 0.005). Ranked among m earlier incumbent runs too they show up to
C(m + 2n, n) to 1: two candidate runs above 16 earlier ones are already 1 in 153. The price is an
assumption the test alone does not need: the pooled runs and the fresh ones are exchangeable.
The window keeps a slow drift small against the noise; the drift check catches a step: to the
good side, where it would make a change that does nothing look like a gain, and to the bad side,
where it would hide a real one.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from autoloop.decide import stats as st
from autoloop.decide.core import History
from autoloop.decide.ratchet import orientation

DRIFT_PER_HOUR = 0.05   # the slow drift a night brings (5% an hour): what the window is built for
DRIFT_SHARE = 0.5       # the oldest pooled run at most this many run noises of that drift ago
POOL_RUNS = 12          # the most recent incumbent runs pooled: C(14, 2) = 91 (more are older)
DRIFT_Z = 3.0           # fresh incumbent runs this many standard errors better than the pool: drift
DRIFT_Z_RUN = 3.5       # ... or one fresh incumbent run this many (a step a burst beside it hides)
DRIFT_BAD_RUNS = 3      # fresh incumbent runs a drift to the bad side needs: their median, so one burst is no step
MEDIAN_SE = math.sqrt(math.pi / 2)   # a median's standard error per mean's (normal bulk)


@dataclass(frozen=True)
class Pool:
    values: tuple[float, ...] = ()       # the incumbent's earlier runs (metric values)
    cycles: tuple[int, ...] = ()         # the ledger cycles they come from
    window_s: float = 0.0                # how far back a run may be
    oldest_s: float | None = None        # the age of the oldest run pooled
    noise: float = 0.0                   # robust run noise (log or metric units) of the drift check
    why_not: str | None = None           # why nothing is pooled
    ages: tuple[float, ...] = field(default=(), repr=False)

    def record(self) -> dict[str, Any]:
        out: dict[str, Any] = {"runs": len(self.values), "cycles": list(self.cycles),
                               "window_s": round(self.window_s, 1), "noise": self.noise}
        if self.oldest_s is not None:
            out["oldest_s"] = round(self.oldest_s, 1)
        if self.why_not:
            out["why_not"] = self.why_not
        return out


def window_seconds(rel_run_noise: float) -> float:
    """How far back a run may be pooled: DRIFT_SHARE run noises of a DRIFT_PER_HOUR drift (at 1%
    noise, 6 minutes: a 5%-an-hour drift moves the level 0.5% in that time)."""
    return DRIFT_SHARE * rel_run_noise / DRIFT_PER_HOUR * 3600.0


def _node(rec: Mapping[str, Any]) -> Any:
    return rec.get("node") if rec.get("node") is not None else (rec.get("stats") or {}).get("node")


def _incumbent_runs(rec: Mapping[str, Any], incumbent: str) -> list[tuple[int, float]]:
    """(position in the record's runs, value) of its runs of `incumbent`: the calibration's,
    a cycle's incumbent side (its parent), a kept cycle's candidate side (it became `incumbent`)."""
    s = rec.get("stats") or {}
    if s.get("rule") != "paired":
        return []
    calibration = rec.get("status") == "baseline" and s.get("kind") == "calibration"
    batches = [s] if calibration else list(s.get("batches") or [])
    sides = set()
    if calibration and rec.get("commit") == incumbent:
        sides = {"A", "B"}
    elif rec.get("cycle", 0) > 0:
        if rec.get("parent") == incumbent:
            sides.add("A")
        if rec.get("status") == "keep" and rec.get("commit") == incumbent:
            sides.add("B")
    out: list[tuple[int, float]] = []
    pos = 0
    for i, b in enumerate(batches):
        a_, b_ = b.get("a") or [], b.get("b") or []
        for side, v in st.run_order(a_, b_):
            if side in sides and isinstance(v, (int, float)):
                out.append((pos, float(v)))
            pos += 1
    return [(pos - p, v) for p, v in out]    # runs from the record's end: 1 = its last


def incumbent_pool(history: History, incumbent: str, node: Any, now: float,
                   seconds_per_run: float | None, run_noise: float | None,
                   reference: float | None, scale: str | None) -> Pool:
    """The incumbent's runs in `history` that may be pooled: newest first, at most POOL_RUNS,
    none older than the window, all on `node`. A run's time is its record's (`ts`, written right
    after its measuring) less one run time for each run after it in that record."""
    if not run_noise or run_noise <= 0 or not seconds_per_run or scale is None:
        return Pool(why_not="no calibrated noise and run time to set the window by")
    rel = run_noise if scale == "log" else run_noise / abs(reference or 0.0) if reference else 0.0
    if rel <= 0:
        return Pool(why_not="no calibrated noise to set the window by")
    window = window_seconds(rel)
    values: list[float] = []
    ages: list[float] = []
    cycles: list[int] = []
    for rec in reversed(history):
        ts = rec.get("ts")
        if not isinstance(ts, (int, float)):
            continue
        if now - ts > window:
            break                     # older records only from here
        if _node(rec) != node:
            continue
        group = [(now - ts + (back - 1) * seconds_per_run, v)
                 for back, v in sorted(_incumbent_runs(rec, incumbent))]
        group = [(age, v) for age, v in group if age <= window][:POOL_RUNS - len(values)]
        if not group:
            continue
        # a record whose runs sit apart from the newer ones already pooled: the machine moved
        # between them (a drift faster than the window allows, a step): the older runs stay out
        if values and abs(drift_z(values, [v for _, v in group], "maximize", scale, run_noise,
                                  both_medians=True)) > DRIFT_Z:
            break
        values += [v for _, v in group]
        ages += [age for age, _ in group]
        cycles.append(int(rec.get("cycle", 0)))
        if len(values) >= POOL_RUNS:
            break
    if scale == "log" and any(v <= 0 for v in values):
        values, ages, cycles = [], [], []
    why = None if values else "no run of this commit on this node within the window"
    # the drift check's scale: the calibration's noise, or the pool's own spread when that is
    # larger (a MAD of 6 calibration changes can come out a quarter of the truth, and a check on
    # that scale would call the pool's own noise a drift)
    noise = run_noise
    if len(values) >= 4:
        noise = max(noise, st.robust_scale([math.log(v) if scale == "log" else v for v in values]))
    return Pool(tuple(values), tuple(cycles), window, max(ages) if ages else None, noise, why,
                tuple(ages))


def drift_z(pool: Sequence[float], fresh: Sequence[float], direction: str, scale: str,
            noise: float, both_medians: bool = False) -> float:
    """How far the fresh incumbent runs sit on the good side of the pooled ones, in standard
    errors (medians; fresh runs that are bursts on the bad side left out): above DRIFT_Z the
    machine moved (a step, a faster drift than the window allows) and the pool is set aside."""
    if not pool or not fresh or noise <= 0:
        return 0.0
    s = orientation(direction)
    f = [s * (math.log(v) if scale == "log" else v) for v in fresh]
    p = [s * (math.log(v) if scale == "log" else v) for v in pool]
    # a fresh run that is a burst on the bad side says nothing of the level: it would hide a shift
    # to the good side from the median of two or three runs
    mid = statistics.median(p)
    bulk = [x for x in f if x >= mid - st.BURST_SDS * noise]
    f = bulk or f
    k, m = len(f), len(p)
    se = noise * math.sqrt((MEDIAN_SE ** 2 if k >= 3 or both_medians else 1.0) / k + MEDIAN_SE ** 2 / m)
    return (statistics.median(f) - statistics.median(p)) / se



def best_run_z(pool: Sequence[float], fresh: Sequence[float], direction: str, scale: str,
               noise: float) -> float:
    """drift_z of the best fresh incumbent run alone: a burst (slower) beside a step (faster)
    would hide the step from the median of two runs, never from the best one."""
    return max((drift_z(pool, [v], direction, scale, noise) for v in fresh), default=0.0)


def drifted(pool: Sequence[float], fresh: Sequence[float], direction: str, scale: str,
            noise: float, bad_side: bool = True) -> float | None:
    """How far the fresh incumbent runs sit from the pool, in standard errors, when that is drift;
    else None. Positive on the good side (the median beyond DRIFT_Z or the best run beyond
    DRIFT_Z_RUN: the machine got faster, and a change that does nothing would look like a gain).
    Negative on the bad side, when `bad_side` asks (the median of at least DRIFT_BAD_RUNS fresh
    runs beyond DRIFT_Z: the machine got slower, and a real gain's runs would rank among pooled
    runs of a faster machine: kept late or never, and the futility side discarding it). The bad
    side costs no false keep, only pairs: it is judged on the larger of `noise` and the spread of
    the pooled and the fresh runs about their own medians (a calibration's noise can come out a
    quarter of the truth, and an alarm then would be the noise)."""
    z, best = drift_z(pool, fresh, direction, scale, noise), best_run_z(pool, fresh, direction, scale, noise)
    if z > DRIFT_Z or best > DRIFT_Z_RUN:
        return max(z, best)
    if bad_side and len(fresh) >= DRIFT_BAD_RUNS:
        logs = scale == "log"
        p = [math.log(v) if logs else v for v in pool]
        f = [math.log(v) if logs else v for v in fresh]
        mp, mf = statistics.median(p), statistics.median(f)
        spread = st.robust_scale([x - mp for x in p] + [x - mf for x in f])
        worse = drift_z(pool, fresh, "maximize" if direction == "minimize" else "minimize", scale,
                        max(noise, spread))
        if worse > DRIFT_Z:
            return -worse
    return None
