"""Statistics of the honest ratchet: pure functions on lists of numbers, scipy underneath.
A pair's *change* is log(b / a) (log scale) or b - a, signed like the metric; its *gain* is
oriented so that positive is better. A batch's *effect* is the Hodges–Lehmann estimate of the
gains with the Wilcoxon signed-rank interval (its real coverage reported as `level`) and p-value."""

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
# numpy and scipy cost about a second to import: imported on first use (the plain rule never is)


def _np() -> Any:
    import numpy
    return numpy


def _st() -> Any:
    from scipy import stats
    return stats


def pick_scale(*groups: Sequence[float]) -> Scale:
    return "log" if all(v > 0 for g in groups for v in g) else "diff"


def changes(a: Sequence[float], b: Sequence[float], scale: Scale) -> list[float]:
    if len(a) != len(b):
        raise ValueError("incumbent and candidate need the same number of runs")
    return [math.log(y / x) if scale == "log" else y - x for x, y in zip(a, b)]


def gains(a: Sequence[float], b: Sequence[float], direction: str, scale: Scale) -> list[float]:
    s = orientation(direction)
    return [s * c for c in changes(a, b, scale)]


def change_pct(change: float, scale: Scale, reference: float | None = None) -> float | None:
    """A change as a % of the incumbent (on the difference scale of `reference`, None if 0)."""
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
    """P(W+ >= w) for n untied pairs: scipy's exact null, asked with data 1..n whose positive
    ranks sum to exactly w."""
    if w <= 0:
        return 1.0
    if w > n * (n + 1) // 2:
        return 0.0
    data, rest = [], w
    for i in range(n, 0, -1):
        data.append(float(i) if i <= rest else -float(i))
        rest -= i if i <= rest else 0
    return float(_st().wilcoxon(data, alternative="greater", method="exact").pvalue)


def lower_tail(n: int, k: int) -> float:   # P(W+ <= k) = P(W+ >= n(n+1)/2 - k) by symmetry
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
    level: float          # the coverage it really has


def hl_interval(g: Sequence[float], level: float = CI_LEVEL) -> Interval:
    """The (k+1)-th smallest and largest Walsh averages, k the largest with
    P(W+ <= k) <= (1 - level) / 2."""
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
    """min_effect (`value`% or units better than `reference`) as a gain on `scale`."""
    if value <= 0:
        return 0.0
    if scale == "diff":
        return value / 100.0 * abs(reference) if relative else value
    frac = value / 100.0 if relative else (value / abs(reference) if reference else math.inf)
    s = orientation(direction)       # the candidate is reference * (1 + s * frac)
    return s * math.log1p(s * frac) if s * frac > -1 else math.inf


def noise_sd(g: Sequence[float]) -> float:
    if len(g) < 2:
        return abs(float(g[0])) if g else 0.0
    return statistics.stdev(float(x) for x in g)


def strict_noise(values: Sequence[float]) -> tuple[float, Scale]:
    scale = pick_scale(values)
    xs = [math.log(v) for v in values] if scale == "log" else list(values)
    return (statistics.stdev(xs) if len(xs) > 1 else 0.0), scale


def strict_phantom(run_sd: float, repeats: int, candidates: int) -> float:
    """The strict rule's winner's curse: after `candidates` changes that do nothing, how far
    the stored best (the luckiest measurement) reads better than the truth (Blom's expected
    maximum of that many normals times one measurement's spread)."""
    eff = 1.2533 if repeats >= 3 else 1.0     # a median is noisier than a mean
    n = candidates + 1
    return statistics.NormalDist().inv_cdf((n - 0.375) / (n + 0.25)) * run_sd * eff / math.sqrt(repeats)


# ---- the sequential paired test ---------------------------------------------------------------
# Gains x_i ~ N(μ, σ²), σ unknown; the calibration's A/A changes c_j are extra mean-0 draws. The
# test of μ = 0 against μ = δσ uses only the direction of (c, x) (free of σ), so its likelihood
# ratio (Wijsman) LR_n = exp(-n δ²/2) · I(N, δu) / I(N, 0), u = Σx / sqrt(Σc² + Σx²), N = m + n,
# I(N, a) = ∫_0^∞ s^(N-1) exp(-s²/2 + a s) ds, is a mean-1 martingale under μ = 0 whatever σ.
# Ville's inequality: it EVER reaches 1/alpha with chance <= alpha, so stopping at 1/alpha (keep)
# or beta (discard) holds false keeps <= alpha at any stopping time, no correction for looking
# after every pair; symmetrically a gain of δσ is discarded with chance <= beta (Wald's SPRT).

DESIGN_EFFECT = 1.5      # the alternative, in units of one pair's noise: gains this big are decided fastest
FUTILITY = 0.05          # beta: the most a gain of DESIGN_EFFECT σ is ever discarded by the test


def helmert(xs: Sequence[float]) -> list[float]:
    """The k - 1 Helmert contrasts of k values: orthonormal and free of their common mean, so
    independent N(μ, σ²) draws give independent N(0, σ²) ones."""
    out, total = [], 0.0
    for j, x in enumerate(xs, start=1):
        if j > 1:
            out.append((total - (j - 1) * x) / math.sqrt(j * (j - 1)))
        total += x
    return out


def _log_integral(n_total: int, a: float) -> float:
    """log I(N, a) = log(Γ(N) e^(a²/4) D_-N(-a)) (D: scipy's parabolic cylinder function);
    integrated numerically around its peak where that underflows."""
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
    """log LR_n of the gains `g` given the mean-zero `noise` draws (see the comment above)."""
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
class Step:   # the sequential test after n pairs
    n: int
    log_lr: float
    decision: Literal["keep", "discard", "continue"]


def sequential_decide(log_lr: float, alpha: float, beta: float = FUTILITY) -> Literal["keep", "discard", "continue"]:
    if log_lr >= math.log(1.0 / alpha):
        return "keep"
    if log_lr <= math.log(beta):
        return "discard"
    return "continue"


def sequential_path(g: Sequence[float], noise: Sequence[float], alpha: float,
                    beta: float = FUTILITY, delta: float = DESIGN_EFFECT) -> list[Step]:
    """The test after each pair of `g`, up to and including the first decision."""
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
    """(chance of a keep, median verifier runs) at a true gain `effect` and pair noise `sd`,
    simulated with a fixed seed."""
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
