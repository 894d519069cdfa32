"""What the paired rule costs, said before a night: the verifier runs (and seconds) a keep and a
discard take at the user's alpha, confirm and min_effect, simulated through the rule's own
evidence, and the floor behind them. Rank tests do not see the noise's size, only how far a gain
stands out of it, so the figures hold at any noise level for a gain of so many noises.
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass
from typing import Any

from autoloop.decide import stats as st
from autoloop.decide.pool import POOL_RUNS

CLEAR_NOISES = 4.0     # "a clear gain": this many run noises
REPS = 60              # simulated cycles per figure (seeded: the same text every time)


def floor_pairs(alpha: float, pooled: int = 0) -> int:
    """The fewest pairs whose ranks can show 1/alpha at all: n candidate runs among
    `pooled` + 2n runs show at most C(pooled + 2n, n) to 1."""
    n = 1
    while math.comb(pooled + 2 * n, n) < 1.0 / alpha:
        n += 1
    return n


def _test(rng: random.Random, gain: float, alpha: float, max_pairs: int, min_gain: float,
          delta: float, prior: list[tuple[str, float]]) -> tuple[str, list[float], list[float]]:
    a: list[float] = []
    b: list[float] = []
    ev = st.RankEvidence("minimize", "log", delta, prior, shift=delta)   # run noise 1
    for _ in range(max_pairs):
        a.append(math.exp(rng.gauss(0.0, 1.0)))
        b.append(math.exp(rng.gauss(0.0, 1.0) - gain))
        up, down = ev.add(a[-1], b[-1])   # one pair more, not every pair ranked again
        g = st.gains(a, b, "minimize", "log")
        if up >= math.log(1.0 / alpha) and statistics.median(g) >= min_gain:
            return "keep", a, b
        if down >= math.log(1.0 / st.FUTILITY):
            return "discard", a, b
    return "undecided", a, b


def simulate(gain: float, alpha: float, confirm: bool, max_pairs: int, min_gain: float, delta: float,
             pooled: int, reps: int = REPS, seed: int = 7) -> tuple[float, float]:
    """(chance of a keep, median verifier runs a cycle) at a true gain of `gain` run noises (min_gain
    and delta in run noises too), with `pooled` earlier incumbent runs ranked with the fresh ones."""
    rng = random.Random(seed)
    keeps, runs = 0, []
    for _ in range(reps):
        prior = [("A", math.exp(rng.gauss(0.0, 1.0))) for _ in range(pooled)]
        d, a, b = _test(rng, gain, alpha, max_pairs, min_gain, delta, prior)
        n = 2 * len(a)
        if d == "keep" and confirm:
            later = prior + st.run_order(a, b) if pooled else []
            d, a, b = _test(rng, gain, alpha, max_pairs, min_gain, delta, later)
            n += 2 * len(a)
        keeps += d == "keep"
        runs.append(n)
    return keeps / reps, float(statistics.median(runs))


@dataclass(frozen=True)
class Cost:
    alpha: float
    confirm: bool
    keep_runs: float            # a clear gain, the incumbent's recent runs pooled
    discard_runs: float         # a change that does nothing, pooled
    keep_runs_alone: float      # the same within one test (no recent runs to pool)
    discard_runs_alone: float
    floor_alone: int            # pairs before one test alone can keep
    floor_pooled: int           # ... ranked with POOL_RUNS earlier runs

    def record(self) -> dict[str, Any]:
        return dict(self.__dict__)


def expected(alpha: float, confirm: bool, max_pairs: int, min_effect_noises: float = 0.0) -> Cost:
    """The cost at this alpha and confirm, min_effect in run noises (0 when it is below them)."""
    pair = math.sqrt(2.0)                         # a pair's noise in run noises
    delta = st.design_delta(pair, min_effect_noises)
    gain = max(CLEAR_NOISES, 2 * min_effect_noises)
    _, keep = simulate(gain, alpha, confirm, max_pairs, min_effect_noises, delta, POOL_RUNS)
    _, drop = simulate(0.0, alpha, confirm, max_pairs, min_effect_noises, delta, POOL_RUNS)
    _, keep0 = simulate(gain, alpha, confirm, max_pairs, min_effect_noises, delta, 0)
    _, drop0 = simulate(0.0, alpha, confirm, max_pairs, min_effect_noises, delta, 0)
    return Cost(alpha, confirm, keep, drop, keep0, drop0, floor_pairs(alpha), floor_pairs(alpha, POOL_RUNS))


def _time(runs: float, seconds: float | None) -> str:
    if seconds is None:
        return ""
    t = runs * seconds
    return f" ({t:.0f} s)" if t < 90 else f" ({t / 60:.1f} min)" if t < 5400 else f" ({t / 3600:.1f} h)"


def cost_text(c: Cost, seconds: float | None, clear: str = f"{CLEAR_NOISES:g} run noises",
              min_effect: str | None = None) -> str:
    """`a clear gain (4 run noises) is kept in ≈ 8 verifier runs (20 s) and a change that does
    nothing discarded in ≈ 6 (15 s) ...; the floor: ...`."""
    at = f"at alpha {c.alpha:g}{' with confirm' if c.confirm else ''}" + (
        f", min_effect {min_effect}" if min_effect else "")
    per = f" at {seconds:.3g} s a run" if seconds is not None else ""
    tests = 2 if c.confirm else 1
    return (f"expected cost {at}{per}: a clear gain ({clear}) is kept in ≈ {c.keep_runs:.0f} verifier runs"
            f"{_time(c.keep_runs, seconds)} and a change that does nothing discarded in ≈ "
            f"{c.discard_runs:.0f}{_time(c.discard_runs, seconds)} while the incumbent's recent runs "
            f"can be pooled; within one test alone ≈ {c.keep_runs_alone:.0f}{_time(c.keep_runs_alone, seconds)} "
            f"and ≈ {c.discard_runs_alone:.0f}{_time(c.discard_runs_alone, seconds)}. The floor: n candidate "
            f"runs ranked among 2n show at most C(2n, n) to 1, so no test alone can keep before "
            f"{c.floor_alone} pairs ({2 * tests * c.floor_alone} runs{' with confirm' if c.confirm else ''}); "
            f"ranked with {POOL_RUNS} earlier runs of the incumbent too, at most C({POOL_RUNS} + 2n, n) "
            f"to 1: {c.floor_pooled} pairs ({2 * tests * c.floor_pooled} runs).")
