"""Statistics of the honest ratchet: pure functions on lists of numbers, scipy underneath.

Conventions (used by autoloop.judge, the ledger and the docs):

- A *pair* is one incumbent run `a` and one candidate run `b`, measured next to each other.
- Its *change* is `log(b / a)` on the log scale (every value of the batch > 0) or `b - a` on
  the difference scale (some value is zero or negative). It is signed like the metric.
- Its *gain* is the change oriented so that positive means better: `-change` when the metric
  is minimized, `change` when it is maximized.
- The *effect* of a batch is the Hodges–Lehmann estimate of the gains: the median of their
  Walsh averages (every mean `(g_i + g_j) / 2` with `i <= j`), the estimator that goes with the
  Wilcoxon signed-rank test. Its confidence interval is the classic distribution-free one:
  the k-th smallest and k-th largest Walsh average, k taken from the exact null distribution
  of the signed-rank statistic (obtained from scipy), so its coverage is exact for symmetric
  noise. With few pairs 95% is out of reach; the interval then is [min, max] of the Walsh
  averages and the coverage it does have is reported with it (`level`).
- The *p-value* is scipy's one-sided Wilcoxon signed-rank test that the gains tend to be
  positive (`scipy.stats.wilcoxon(gains, alternative="greater")`: exact without ties, an exact
  permutation test with ties or zeros up to 13 pairs, the normal approximation beyond).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Literal, Sequence

if TYPE_CHECKING:
    import numpy as np

# numpy and scipy cost about a second to import; only the noise-aware rules (paired batches,
# the gate, power) need them, so they are imported on first use — a run with the plain strict
# rule never pays for them.


def _np():  # type: ignore[no-untyped-def]
    import numpy
    return numpy


def _st():  # type: ignore[no-untyped-def]
    from scipy import stats
    return stats

Scale = Literal["log", "diff"]
CI_LEVEL = 0.95


# ---- pairs → gains --------------------------------------------------------------------------


def pick_scale(*groups: Sequence[float]) -> Scale:
    """Log-ratios when every value is positive, differences otherwise."""
    return "log" if all(v > 0 for g in groups for v in g) else "diff"


def changes(a: Sequence[float], b: Sequence[float], scale: Scale) -> list[float]:
    """Per-pair change of the candidate `b` against the incumbent `a`, signed like the metric."""
    if len(a) != len(b):
        raise ValueError("incumbent and candidate need the same number of runs")
    if scale == "log":
        return [math.log(y / x) for x, y in zip(a, b)]
    return [y - x for x, y in zip(a, b)]


def orientation(direction: str) -> int:
    """+1 when a larger metric is better, -1 when a smaller one is."""
    return 1 if direction == "maximize" else -1


def gains(a: Sequence[float], b: Sequence[float], direction: str, scale: Scale) -> list[float]:
    s = orientation(direction)
    return [s * c for c in changes(a, b, scale)]


def to_change(gain: float, direction: str) -> float:
    return orientation(direction) * gain


def change_pct(change: float, scale: Scale, reference: float | None = None) -> float | None:
    """A change as a percentage of the incumbent: exact on the log scale; on the difference
    scale relative to `reference` (the incumbent's median), None when that is 0 or unknown."""
    if scale == "log":
        return (math.exp(change) - 1.0) * 100.0
    if not reference:
        return None
    return change / abs(reference) * 100.0


# ---- the signed-rank test ---------------------------------------------------------------------


def signed_rank_p(g: Sequence[float]) -> float:
    """One-sided p-value that the gains tend to be positive (1.0 when nothing is nonzero)."""
    np = _np()
    arr = np.asarray(g, dtype=float)
    if arr.size == 0 or not np.any(arr != 0):
        return 1.0
    return float(_st().wilcoxon(arr, alternative="greater").pvalue)


def _ranks_with_sum(n: int, w: int) -> np.ndarray:
    """Data 1..n whose positive part has rank sum exactly `w` (0 <= w <= n(n+1)/2)."""
    out, rest = [], w
    for i in range(n, 0, -1):
        if i <= rest:
            out.append(float(i))
            rest -= i
        else:
            out.append(-float(i))
    return _np().asarray(out)


@lru_cache(maxsize=None)
def _upper_tail(n: int, w: int) -> float:
    """P(W+ >= w) under the null for n untied nonzero pairs, from scipy's exact distribution."""
    total = n * (n + 1) // 2
    if w <= 0:
        return 1.0
    if w > total:
        return 0.0
    return float(_st().wilcoxon(_ranks_with_sum(n, w), alternative="greater",
                              method="exact").pvalue)


def lower_tail(n: int, k: int) -> float:
    """P(W+ <= k) under the null (by symmetry, P(W+ >= n(n+1)/2 - k))."""
    if k < 0:
        return 0.0
    return _upper_tail(n, n * (n + 1) // 2 - k)


@lru_cache(maxsize=None)
def critical_w(n: int, alpha: float) -> int | None:
    """The smallest W+ whose one-sided exact p-value is <= alpha (None: n pairs can never)."""
    total = n * (n + 1) // 2
    if n == 0 or _upper_tail(n, total) > alpha:
        return None
    lo, hi = 0, total          # _upper_tail falls as w grows: find the first w at or below alpha
    while lo < hi:
        mid = (lo + hi) // 2
        if _upper_tail(n, mid) <= alpha:
            hi = mid
        else:
            lo = mid + 1
    return lo


def reachable(g: Sequence[float], n_total: int, alpha: float) -> bool:
    """Could a batch of `n_total` pairs whose first gains are `g` still pass the test? The best
    case is that every pair still to come shows a gain larger than all seen so far."""
    if len(g) >= n_total:
        return signed_rank_p(g) <= alpha
    top = max((abs(x) for x in g), default=0.0) or 1.0
    best = list(g) + [top * (2.0 + i) for i in range(n_total - len(g))]
    return signed_rank_p(best) <= alpha


# ---- Hodges–Lehmann -------------------------------------------------------------------------


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
    """Distribution-free confidence interval of the Hodges–Lehmann estimate: the (k+1)-th
    smallest and largest Walsh averages, where k is the largest count with
    P(W+ <= k) <= (1 - level) / 2. Coverage = 1 - 2 P(W+ <= k)."""
    n = len(g)
    if n == 0:
        raise ValueError("no pairs")
    w = walsh_averages(g)
    m = w.size
    k = 0
    while lower_tail(n, k) <= (1.0 - level) / 2.0 and k < m // 2:
        k += 1
    k = max(k - 1, 0)     # the last k that still met the bound (0 when none did)
    if n == 1:
        return Interval(float(w[0]), float(w[0]), 0.0)
    return Interval(float(w[k]), float(w[m - 1 - k]), 1.0 - 2.0 * lower_tail(n, k))


# ---- one batch --------------------------------------------------------------------------------


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

    def as_record(self) -> dict:
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
    est = hodges_lehmann(g)
    ci = hl_interval(g, level)
    s = orientation(direction)
    lo_c, hi_c = sorted((s * ci.low, s * ci.high))
    np = _np()
    med_a = float(np.median(a))
    pct = change_pct(s * est, scale, med_a)
    lo_p, hi_p = change_pct(lo_c, scale, med_a), change_pct(hi_c, scale, med_a)
    ratio = float(np.median([y / x for x, y in zip(a, b)])) if scale == "log" else None
    return Comparison(
        n=len(g), scale=scale, p=signed_rank_p(g), effect=est, ci=ci, change=s * est,
        change_ci=(lo_c, hi_c), change_pct=pct,
        change_ci_pct=None if lo_p is None or hi_p is None else (lo_p, hi_p),
        median_ratio=ratio, median_a=med_a, median_b=float(np.median(b)))


def threshold(value: float, relative: bool, scale: Scale, direction: str,
              reference: float) -> float:
    """min_effect as a gain on `scale`: the candidate must be at least `value`% (relative) or
    `value` metric units better than the incumbent whose typical value is `reference`."""
    if value <= 0:
        return 0.0
    if scale == "log":
        frac = value / 100.0 if relative else (value / abs(reference) if reference else math.inf)
        if direction == "maximize":
            return math.log1p(frac)
        return -math.log1p(-frac) if frac < 1 else math.inf
    return value / 100.0 * abs(reference) if relative else value


def passes(c: Comparison, alpha: float, min_gain: float) -> bool:
    """The paired rule on one batch: significant, and the effect at least min_effect (and > 0)."""
    return c.p <= alpha and c.effect >= min_gain and c.effect > 0


# ---- noise, power and the smallest detectable effect -------------------------------------------


def noise_sd(g: Sequence[float]) -> float:
    """Spread of the per-pair changes of an A/A batch (two runs of the same code)."""
    xs = [float(x) for x in g]
    if not xs:
        return 0.0
    if len(xs) == 1:
        return abs(xs[0])
    return statistics.stdev(xs)


def batch_power(effect: float, sd: float, n: int, alpha: float, min_gain: float,
                reps: int = 4000, seed: int = 12345) -> float:
    """Probability that one batch of n pairs passes `passes` when the true gain is `effect`
    and each pair's gain has normal noise of spread `sd` (simulated, fixed seed)."""
    w_crit = critical_w(n, alpha)
    if w_crit is None:
        return 0.0
    if sd <= 0:
        return 1.0 if effect > 0 and effect >= min_gain else 0.0
    np, st = _np(), _st()
    z = np.random.default_rng(seed).standard_normal((reps, n))
    g = effect + sd * z
    ranks = st.rankdata(np.abs(g), axis=1)
    w_plus = (ranks * (g > 0)).sum(axis=1)
    i, j = np.triu_indices(n)
    hl = np.median((g[:, i] + g[:, j]) / 2.0, axis=1)
    ok = (w_plus >= w_crit) & (hl >= min_gain) & (hl > 0)
    return float(ok.mean())


def power(effect: float, sd: float, n: int, alpha: float, min_gain: float, confirm: bool) -> float:
    """The paired rule's chance to keep a change whose true gain is `effect`."""
    p = batch_power(effect, sd, n, alpha, min_gain)
    return p * p if confirm else p


def detectable_effect(sd: float, n: int, alpha: float, min_gain: float, confirm: bool,
                      target: float = 0.8) -> float:
    """The smallest true gain kept with probability >= target (math.inf: never)."""
    if critical_w(n, alpha) is None:
        return math.inf
    if sd <= 0:
        return max(min_gain, 0.0)
    hi = max(min_gain, 0.0) + 12.0 * sd
    if power(hi, sd, n, alpha, min_gain, confirm) < target:
        return math.inf
    lo = 0.0
    for _ in range(40):
        mid = (lo + hi) / 2.0
        if power(mid, sd, n, alpha, min_gain, confirm) >= target:
            hi = mid
        else:
            lo = mid
    return hi


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


# ---- coarse feedback ------------------------------------------------------------------------


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
