"""Statistics of the honest ratchet: pure functions on lists of numbers, scipy underneath.

- A *pair* is one incumbent run `a` and one candidate run `b`, measured next to each other; its
  *change* is `log(b / a)` (log scale: every value > 0) or `b - a` (difference scale), signed like
  the metric; its *gain* is the change oriented so that positive means better.
- The *effect* of a batch is the Hodges–Lehmann estimate of the gains (the median of their
  Walsh averages), with the distribution-free interval of the Wilcoxon signed-rank test: exact
  coverage for symmetric noise; with few pairs 95% is out of reach and the coverage it has is
  reported (`level`).
- The *p-value* is scipy's one-sided Wilcoxon signed-rank test that the gains tend to be positive.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal, Sequence

from autoloop.ratchet import orientation

if TYPE_CHECKING:
    import numpy as np

Scale = Literal["log", "diff"]
CI_LEVEL = 0.95

# numpy and scipy cost about a second to import: imported on first use, so a run with the plain
# strict rule never pays for them.


def _np() -> Any:
    import numpy
    return numpy


def _st() -> Any:
    from scipy import stats
    return stats


def pick_scale(*groups: Sequence[float]) -> Scale:
    """Log-ratios when every value is positive, differences otherwise."""
    return "log" if all(v > 0 for g in groups for v in g) else "diff"


def changes(a: Sequence[float], b: Sequence[float], scale: Scale) -> list[float]:
    """Per-pair change of the candidate `b` against the incumbent `a`, signed like the metric."""
    if len(a) != len(b):
        raise ValueError("incumbent and candidate need the same number of runs")
    return [math.log(y / x) if scale == "log" else y - x for x, y in zip(a, b)]


def gains(a: Sequence[float], b: Sequence[float], direction: str, scale: Scale) -> list[float]:
    s = orientation(direction)
    return [s * c for c in changes(a, b, scale)]


def change_pct(change: float, scale: Scale, reference: float | None = None) -> float | None:
    """A change as a percentage of the incumbent: exact on the log scale; on the difference
    scale relative to `reference` (the incumbent's median), None when that is 0 or unknown."""
    if scale == "log":
        return (math.exp(change) - 1.0) * 100.0
    return change / abs(reference) * 100.0 if reference else None


def signed_rank_p(g: Sequence[float]) -> float:
    """One-sided p-value that the gains tend to be positive (1.0 when nothing is nonzero)."""
    arr = _np().asarray(g, dtype=float)
    if arr.size == 0 or not arr.any():
        return 1.0
    return float(_st().wilcoxon(arr, alternative="greater").pvalue)


@lru_cache(maxsize=None)
def _upper_tail(n: int, w: int) -> float:
    """P(W+ >= w) under the null for n untied nonzero pairs: scipy's exact distribution, asked
    through data 1..n whose positive ranks sum to exactly w."""
    if w <= 0:
        return 1.0
    if w > n * (n + 1) // 2:
        return 0.0
    data, rest = [], w
    for i in range(n, 0, -1):
        data.append(float(i) if i <= rest else -float(i))
        rest -= i if i <= rest else 0
    return float(_st().wilcoxon(data, alternative="greater", method="exact").pvalue)


def lower_tail(n: int, k: int) -> float:
    """P(W+ <= k) under the null (by symmetry, P(W+ >= n(n+1)/2 - k))."""
    return 0.0 if k < 0 else _upper_tail(n, n * (n + 1) // 2 - k)


def walsh_averages(g: Sequence[float]) -> np.ndarray:
    np = _np()
    arr = np.asarray(g, dtype=float)
    i, j = np.triu_indices(arr.size)
    return np.sort((arr[i] + arr[j]) / 2.0)


def hodges_lehmann(g: Sequence[float]) -> float:
    if len(g) == 0:
        raise ValueError("no pairs")
    return float(_np().median(walsh_averages(g)))


@dataclass(frozen=True)
class Interval:
    low: float
    high: float
    level: float          # the coverage it really has (>= the level asked for when reachable)


def hl_interval(g: Sequence[float], level: float = CI_LEVEL) -> Interval:
    """The (k+1)-th smallest and largest Walsh averages, k the largest count with
    P(W+ <= k) <= (1 - level) / 2; coverage 1 - 2 P(W+ <= k)."""
    n = len(g)
    if n == 0:
        raise ValueError("no pairs")
    w = walsh_averages(g)
    m, k = w.size, 0
    while lower_tail(n, k) <= (1.0 - level) / 2.0 and k < m // 2:
        k += 1
    k = max(k - 1, 0)     # the last k that still met the bound (0 when none did)
    if n == 1:
        return Interval(float(w[0]), float(w[0]), 0.0)
    return Interval(float(w[k]), float(w[m - 1 - k]), 1.0 - 2.0 * lower_tail(n, k))


@dataclass(frozen=True)
class Comparison:
    """Everything reported about incumbent runs `a` and candidate runs `b` (same length)."""

    n: int
    scale: Scale
    p: float                 # one-sided: the candidate is better
    effect: float            # Hodges–Lehmann estimate of the gains (positive = better)
    ci: Interval             # of the gains
    change: float            # the effect signed like the metric (log-ratio or difference)
    change_ci: tuple[float, float]
    change_pct: float | None           # the effect as % of the incumbent
    change_ci_pct: tuple[float, float] | None
    median_ratio: float | None         # median over pairs of b / a (log scale only)
    median_a: float
    median_b: float

    def as_record(self) -> dict[str, Any]:
        return {"n": self.n, "scale": self.scale, "p": self.p, "effect": self.effect,
                "ci": [self.ci.low, self.ci.high], "ci_level": self.ci.level,
                "change": self.change, "change_pct": self.change_pct,
                "change_ci_pct": None if self.change_ci_pct is None else list(self.change_ci_pct),
                "median_ratio": self.median_ratio, "median_a": self.median_a,
                "median_b": self.median_b}


def compare(a: Sequence[float], b: Sequence[float], direction: str,
            scale: Scale | None = None, level: float = CI_LEVEL) -> Comparison:
    if not a or len(a) != len(b):
        raise ValueError("need the same, nonzero number of incumbent and candidate runs")
    scale = scale or pick_scale(a, b)
    g = gains(a, b, direction, scale)
    est, ci, s = hodges_lehmann(g), hl_interval(g, level), orientation(direction)
    lo_c, hi_c = sorted((s * ci.low, s * ci.high))
    np = _np()
    med_a = float(np.median(a))
    lo_p, hi_p = change_pct(lo_c, scale, med_a), change_pct(hi_c, scale, med_a)
    return Comparison(
        n=len(g), scale=scale, p=signed_rank_p(g), effect=est, ci=ci, change=s * est,
        change_ci=(lo_c, hi_c), change_pct=change_pct(s * est, scale, med_a),
        change_ci_pct=None if lo_p is None or hi_p is None else (lo_p, hi_p),
        median_ratio=float(np.median([y / x for x, y in zip(a, b)])) if scale == "log" else None,
        median_a=med_a, median_b=float(np.median(b)))


def threshold(value: float, relative: bool, scale: Scale, direction: str, reference: float) -> float:
    """min_effect as a gain on `scale`: the candidate must be at least `value`% (relative) or
    `value` metric units better than the incumbent whose typical value is `reference`."""
    if value <= 0:
        return 0.0
    if scale == "diff":
        return value / 100.0 * abs(reference) if relative else value
    frac = value / 100.0 if relative else (value / abs(reference) if reference else math.inf)
    s = orientation(direction)       # the candidate is reference * (1 + s * frac)
    return s * math.log1p(s * frac) if s * frac > -1 else math.inf


def noise_sd(g: Sequence[float]) -> float:
    """Spread of the per-pair changes of an A/A batch (two runs of the same code)."""
    if len(g) < 2:
        return abs(float(g[0])) if g else 0.0
    return statistics.stdev(float(x) for x in g)


def strict_noise(values: Sequence[float]) -> tuple[float, Scale]:
    """Spread of single runs of the same code (sd of log values, or of values)."""
    scale = pick_scale(values)
    xs = [math.log(v) for v in values] if scale == "log" else list(values)
    return (statistics.stdev(xs) if len(xs) > 1 else 0.0), scale


def strict_phantom(run_sd: float, repeats: int, candidates: int) -> float:
    """The strict rule's winner's curse: after `candidates` changes that do nothing, the stored
    best is the luckiest of candidates + 1 measurements (medians of `repeats` runs), about this
    far (in the units of run_sd) better than the truth: the expected maximum of that many
    standard normals (Blom's approximation) times the spread of one measurement."""
    eff = 1.2533 if repeats >= 3 else 1.0     # a median is noisier than a mean
    n = candidates + 1
    return statistics.NormalDist().inv_cdf((n - 0.375) / (n + 0.25)) * run_sd * eff / math.sqrt(repeats)


def coarse_pct(value: float | None, step: float | None) -> str:
    """`value` (a percentage) rounded to a multiple of the noise `step` (also a percentage),
    for the generator: it learns the direction and size, not the noise."""
    if value is None:
        return "?"
    if not step or step <= 0 or not math.isfinite(step):
        return f"{value:+.2g}%"
    step = float(f"{step:.1g}")            # one significant digit
    rounded = round(value / step) * step
    if rounded == 0:
        return f"≈0% (noise ±{step:g}%)"
    return f"≈{float(f'{rounded:.3g}'):+g}% (noise ±{step:g}%)"


# ---- the sequential paired test ---------------------------------------------------------------
#
# Each pair's gain x_i is modelled as normal with an unknown spread σ; the A/A changes of the
# run's calibration (cycle 0: the same commit in both trees) are extra draws c_j of the same
# noise with mean 0. The test of "the candidate does nothing" (mean 0) against "it is better by
# `delta` σ" uses only what does not depend on σ — the direction of the vector (c, x), its
# maximal invariant under rescaling — so its likelihood ratio (Wijsman's representation)
#
#     LR_n = exp(-n δ²/2) · I(N, δ u) / I(N, 0),   u = Σx / sqrt(Σc² + Σx²),  N = m + n,
#     I(N, a) = ∫_0^∞ s^(N-1) exp(-s²/2 + a s) ds,
#
# is a nonnegative martingale with mean 1 when the change does nothing, whatever σ is. Ville's
# inequality then bounds the chance that it EVER reaches 1/alpha by alpha: stopping as soon as
# it does (a keep) or as soon as it falls to beta (a discard) keeps the false-keep rate at or
# below alpha by construction, at any stopping time, with no correction for looking after every
# pair. Symmetrically (1/LR is a martingale when the gain is delta σ) a change that good is
# wrongly discarded with probability at most beta. The bounds are those two numbers, nothing
# tuned: this is Wald's sequential probability ratio test on the scale-invariant statistic
# (the sequential t-test), made sharper by the calibration's noise draws.

DESIGN_EFFECT = 1.5      # the alternative, in units of one pair's noise: gains this big are decided fastest
FUTILITY = 0.05          # beta: the most a gain of DESIGN_EFFECT σ is ever discarded by the test


def helmert(xs: Sequence[float]) -> list[float]:
    """The k - 1 Helmert contrasts of k values: orthonormal, free of their common mean, so for
    independent draws with one mean and spread σ they are independent N(0, σ²) draws."""
    out, total = [], 0.0
    for j, x in enumerate(xs, start=1):
        if j > 1:
            out.append((total - (j - 1) * x) / math.sqrt(j * (j - 1)))
        total += x
    return out


def _log_integral(n_total: int, a: float) -> float:
    """log of ∫_0^∞ s^(N-1) exp(-s²/2 + a s) ds = log(Γ(N) e^(a²/4) D_-N(-a)), D the parabolic
    cylinder function (scipy); numerically integrated around its peak where that underflows."""
    from scipy.special import gammaln, pbdv
    d, _ = pbdv(-float(n_total), -a)
    if d > 0 and math.isfinite(d):
        return float(gammaln(n_total)) + a * a / 4.0 + math.log(d)
    return _log_integral_quad(n_total, a)


def _log_integral_quad(n_total: int, a: float) -> float:
    from scipy import integrate
    top = (a + math.sqrt(a * a + 4.0 * (n_total - 1))) / 2.0

    def f(s: float) -> float:
        return (n_total - 1) * math.log(s) - s * s / 2.0 + a * s if s > 0 else -math.inf

    peak = f(top) if top > 0 else 0.0
    lo, hi = max(top - 12.0, 0.0), top + 12.0
    val, _ = integrate.quad(lambda s: math.exp(f(s) - peak) if s > 0 else 0.0, lo, hi,
                            points=[top] if lo < top < hi else None, limit=200)
    return peak + math.log(val)


def _log_integral_zero(n_total: int) -> float:
    from scipy.special import gammaln
    return (n_total / 2.0 - 1.0) * math.log(2.0) + float(gammaln(n_total / 2.0))


def sequential_log_lr(g: Sequence[float], noise: Sequence[float], delta: float = DESIGN_EFFECT) -> float:
    """log LR_n of the gains `g` (positive = better) given the calibration's mean-zero noise
    draws `noise`: the evidence that the candidate is better (see the comment above)."""
    n = len(g)
    if n == 0:
        return 0.0
    q = sum(x * x for x in noise) + sum(x * x for x in g)
    if q <= 0:
        return 0.0            # every draw exactly 0: nothing to tell the hypotheses apart
    u = sum(g) / math.sqrt(q)
    total = len(noise) + n
    return -n * delta * delta / 2.0 + _log_integral(total, delta * u) - _log_integral_zero(total)


@dataclass(frozen=True)
class Step:
    """The sequential test after n pairs."""

    n: int
    log_lr: float
    decision: Literal["keep", "discard", "continue"]


def sequential_decide(log_lr: float, alpha: float, beta: float = FUTILITY) -> Literal["keep", "discard", "continue"]:
    """Wald's boundaries: keep at LR >= 1/alpha, discard at LR <= beta, else measure a pair more."""
    if log_lr >= math.log(1.0 / alpha):
        return "keep"
    if log_lr <= math.log(beta):
        return "discard"
    return "continue"


def sequential_path(g: Sequence[float], noise: Sequence[float], alpha: float,
                    beta: float = FUTILITY, delta: float = DESIGN_EFFECT) -> list[Step]:
    """The test after each pair of `g`, up to and including the first decision (recomputes
    what the judge did from the ledger's raw values)."""
    out: list[Step] = []
    for n in range(1, len(g) + 1):
        lr = sequential_log_lr(g[:n], noise, delta)
        d = sequential_decide(lr, alpha, beta)
        out.append(Step(n, lr, d))
        if d != "continue":
            break
    return out


def sequential_runs(effect: float, sd: float, alpha: float, max_pairs: int, noise_n: int,
                    min_gain: float = 0.0, beta: float = FUTILITY, delta: float = DESIGN_EFFECT,
                    reps: int = 400, seed: int = 12345) -> tuple[float, float]:
    """(chance of a keep, median verifier runs) of the sequential rule when the true gain is
    `effect` and one pair's gain has normal noise `sd` (simulated with a fixed seed)."""
    np = _np()
    rng = np.random.default_rng(seed)
    keeps, runs = 0, []
    for _ in range(reps):
        noise = list(sd * rng.standard_normal(noise_n))
        g = list(effect + sd * rng.standard_normal(max_pairs))
        path = sequential_path(g, noise, alpha, beta, delta)
        last = path[-1]
        if last.decision == "keep" and hodges_lehmann(g[:last.n]) >= min_gain:
            keeps += 1
        runs.append(2 * last.n)
    return keeps / reps, float(np.median(runs))
