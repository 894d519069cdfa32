"""Statistics of the honest ratchet: pure functions on lists of numbers, scipy underneath.
A pair's *change* is log(b / a) (log scale) or b - a, signed like the metric; its *gain* is
oriented so that positive is better. A batch's *effect* is the Hodges–Lehmann estimate of the
gains with the Wilcoxon signed-rank interval (its real coverage reported as `level`) and p-value."""

from __future__ import annotations

import bisect
import math
import operator
import statistics
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal, Sequence

from autoloop.decide.ratchet import orientation

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
# The runs of one test, in the order they were measured (B1 A1 A2 B2 B3 A3 ...), are ranked as
# they come. When the change does nothing and the noise of every run is drawn alike (ANY shape:
# bursts, heavy tails, skew), the runs are exchangeable and each new run lands in each of the k
# slots among the k - 1 before it with chance 1/k (Rényi's sequential ranks: independent of the
# ranks before). Each run's factor q(slot) / p0(slot) bets on where it lands: a candidate's run
# above the incumbent's runs, an incumbent's run below the candidate's. q is chosen from the ranks
# so far (a tilt of the null toward the good side, and a sharper copy of the pattern seen so far),
# so the product of the factors is a nonnegative martingale with mean 1 under the null. Ville's
# inequality: it EVER reaches 1/alpha with chance <= alpha, so keeping there holds false keeps
# <= alpha at any stopping time, for any noise distribution, no correction for looking after every
# pair. The same test on the candidate's runs made worse by `delta` (the futility side) bets they
# land low: reaching 1/beta rules out a gain of delta or more (chance <= beta when the gain is at
# least delta, the noise again of any shape) and discards. Only ranks enter, so one burst moves a
# run to an end slot and costs one factor; and a factor is at most k / (slots in its gap) (about 2
# a run), so no single pair ever decides.

DESIGN_EFFECT = 1.2      # delta of the futility side, in robust pair-noise units (tuned, see noise.py)
FUTILITY = 0.05          # beta: the most a gain of delta (or more) is ever discarded by the test
RANK_TILT = 6.0          # how sharply the tilt bets on the good side
RANK_STAKE = 0.75        # the part of the evidence the tilt stakes on each run (the rest sits still)
RANK_URN = 0.05          # pseudo-count of the sharper copy of the pattern so far (1 would be the null)
RANK_TOP = 0.9          # pooled: the top component's stake on the end slot
BURST_SLOT = 0.1        # the shift component's stake on the bad end, where a burst lands
WITHIN_WEIGHTS = (0.5, 0.5, 0.0)     # (tilt, urn, top): within one test, as it always was
POOL_WEIGHTS = (0.25, 0.25, 0.5)     # with the incumbent's recent runs pooled
SHIFT_STAKE = 0.9       # the futility side's shift component: its stake on each run
SHIFT_WEIGHT = 0.75     # ... and its weight in that side's mixture (the rest as WITHIN/POOL_WEIGHTS)
PAIR_WEIGHT = 0.2       # the paired component's weight on the futility side (see _pair_factor)
PAIR_STAKE = 0.9        # ... and the most it stakes on one pair

MAD_SD = 1.4826          # a normal's SD per median absolute deviation
BURST_SDS = 5.0          # a value this many robust SDs from the median is a burst


def robust_scale(xs: Sequence[float]) -> float:
    """The spread of `xs` as a normal's SD: the median absolute deviation about their median,
    then again without the values beyond BURST_SDS of those (a third of the values can be
    bursts of any size without moving it much; the MAD alone would grow by half)."""
    if len(xs) < 2:
        return abs(float(xs[0])) if xs else 0.0
    m = statistics.median(xs)
    first = MAD_SD * float(statistics.median(abs(x - m) for x in xs))
    bulk = [x for x in xs if abs(x - m) <= BURST_SDS * first]
    if first <= 0 or len(bulk) < 2 or len(bulk) == len(xs):
        return first
    m = statistics.median(bulk)
    return MAD_SD * float(statistics.median(abs(x - m) for x in bulk))


def outliers(xs: Sequence[float], scale: float, k: float = BURST_SDS) -> list[float]:
    """The values more than `k` robust SDs (`scale`) from the median: the bursts."""
    if not xs or scale <= 0:
        return []
    m = statistics.median(xs)
    return [x for x in xs if abs(x - m) > k * scale]


def run_order(a: Sequence[float], b: Sequence[float], first: int = 0) -> list[tuple[str, float]]:
    """The runs of ABBA pairs in the order they were measured: B1 A1, A2 B2, B3 A3, ... (`first`:
    the index of the first pair given, so that a tail of the pairs keeps its order)."""
    out: list[tuple[str, float]] = []
    for i, (x, y) in enumerate(zip(a, b), start=first):
        out += [("B", y), ("A", x)] if i % 2 == 0 else [("A", x), ("B", y)]
    return out


@dataclass(frozen=True)
class _Slots:
    """Where a new run of `side` lands among the runs before it: `other`, the other side's runs
    (sorted); `counts`, this side's runs in each of the m + 1 gaps between them; `k`, the slots
    (runs before + 1: under the null gap g has chance (counts[g] + 1) / k); `gaps`, the gaps the
    new value touches (several when it ties runs of the other side: the bets spread evenly)."""
    other: list[float]
    counts: list[int]
    k: int
    gaps: range


def _slots(own: Sequence[float], other: list[float], y: float) -> _Slots:
    """`own`: this side's runs before; `other`: the other side's, sorted (not copied: the caller
    adds to the lists only once the slots are used)."""
    counts = [0] * (len(other) + 1)
    for v in own:
        counts[bisect.bisect_left(other, v)] += 1
    return _Slots(other, counts, len(own) + len(other) + 1,
                  range(bisect.bisect_left(other, y), bisect.bisect_right(other, y) + 1))


def _top_factor(sl: _Slots, high: bool) -> float:
    """The pooled test's third component: RANK_TOP of the evidence on the run landing beyond
    every run of the other side (a candidate's above all incumbent runs, an incumbent's below all
    the candidate's). Its payoff there is 1 - RANK_TOP + RANK_TOP / p0: with 16 incumbent runs
    pooled, about 15 for a candidate run on top, where the tilt pays about 5."""
    m = len(sl.other)
    if m == 0:
        return 1.0
    target = m if high else 0
    p0 = (sl.counts[target] + 1) / sl.k
    return sum(1.0 - RANK_TOP + (RANK_TOP / p0 if g == target else 0.0) for g in sl.gaps) / len(sl.gaps)


def _bursts_below(sorted_values: Sequence[float]) -> int:
    """How many of the (sorted, oriented) values are bursts below the rest: beyond BURST_SDS
    robust SDs under their median."""
    if len(sorted_values) < 4:
        return 0
    scale = robust_scale(sorted_values)
    if scale <= 0:
        return 0
    cut = statistics.median(sorted_values) - BURST_SDS * scale
    return min(bisect.bisect_left(sorted_values, cut), len(sorted_values) - 1)


@lru_cache(maxsize=4096)
def _shift_slots(m: int, shift: float, high: bool) -> tuple[float, ...]:
    """The chance of each of the m + 1 gaps between m runs of the other side for a run `shift`
    of their (normal) noises beyond them, up when `high`: the gaps sit at the quantiles
    j / (m + 1), and a run shifted by d lands below quantile t with chance Phi(Phi^-1(t) - d)."""
    nd, d = statistics.NormalDist(), shift if high else -shift
    cdf = [0.0] + [nd.cdf(nd.inv_cdf(j / (m + 1)) - d) for j in range(1, m + 1)] + [1.0]
    return tuple(cdf[j + 1] - cdf[j] for j in range(m + 1))


def _shift_factor(sl: _Slots, high: bool, shift: float) -> float:
    """The futility side's shift component: SHIFT_STAKE of the evidence on the run landing where
    a run `shift` noises beyond the other side's would (the design gain, in run noises): the
    normal-scores bet, which gains about shift²/2 a run where a tilt of the slots gains a fraction
    of it. A bet on the high side keeps BURST_SLOT at the bottom for the bursts."""
    m = len(sl.other)
    if m == 0 or shift <= 0:
        return 1.0
    # the other side's bursts sit below its bulk (always the bad side): the shift is measured
    # against the bulk, and a run of this side lands among the bursts only as a burst itself
    nb = _bursts_below(sl.other)
    q = [0.0] * nb + list(_shift_slots(m - nb, round(shift, 3), high))
    if high or nb:
        q = [(1.0 - BURST_SLOT) * x for x in q]
        for g in range(nb + 1):
            q[g] += BURST_SLOT / (nb + 1)
    return sum(1.0 - SHIFT_STAKE + SHIFT_STAKE * q[g] * sl.k / (sl.counts[g] + 1)
               for g in sl.gaps) / len(sl.gaps)


@lru_cache(maxsize=1024)
def _tilt(m: int, high: bool) -> tuple[float, ...]:
    """The tilt's weight of each of the m + 1 gaps (the same for every run with m on the other side)."""
    sign = 1.0 if high else -1.0
    return tuple(math.exp(sign * RANK_TILT * (j / m - 0.5)) for j in range(m + 1))


def _rank_factors(sl: _Slots, high: bool) -> tuple[float, float]:
    """(tilt, urn) factors of a run (its slots `sl`, values oriented: larger is better);
    `high`: the bet is that it lands above the other side's runs."""
    other, counts, k, gaps = sl.other, sl.counts, sl.k, sl.gaps
    m = len(other)
    n = k - 1 - m
    if m == 0:
        return 1.0, 1.0
    p0 = [(c + 1) / k for c in counts]   # the null: each of the k slots alike
    w = _tilt(m, high)
    z = sum(map(operator.mul, p0, w))
    tilt = sum(1.0 - RANK_STAKE + RANK_STAKE * w[g] / z for g in gaps) / len(gaps)
    centre = sum(map(operator.mul, range(m + 1), counts)) / n / m if n else 0.5
    if n == 0 or (centre <= 0.5 if high else centre >= 0.5):
        return tilt, 1.0                 # the pattern so far is not on the good side: no bet
    urn = sum(((counts[g] + RANK_URN) / (n + RANK_URN * (m + 1))) / p0[g] for g in gaps) / len(gaps)
    return tilt, urn


def _oriented(side: str, v: float, s: float, scale: Scale, delta: float) -> tuple[str, float]:
    y = s * (math.log(v) if scale == "log" else v)
    return side, (y - delta if side == "B" else y)


def _pair_factor(x: float, delta: float, pair_noise: float) -> float:
    """The paired component: a bet on the sign of `x` (a pair's gain; on the futility side,
    delta less it), staked by its size. When the change does nothing the two runs of a pair are
    exchangeable whatever the noise and whatever the machine did since the pool (a drift moves
    both), so x's sign is a fair coin given |x|: 1 + lambda(|x|) sign(x) has mean 1. lambda is
    the likelihood's (tanh(delta |x| / noise²), a gain of delta on normal noise), PAIR_STAKE at
    most, and 0 for a pair beyond BURST_SDS noises (a burst: its sign says which run burst)."""
    if pair_noise <= 0 or x == 0 or abs(x) > BURST_SDS * pair_noise:
        return 1.0
    lam = PAIR_STAKE * math.tanh(delta * abs(x) / pair_noise ** 2)
    return 1.0 + lam if x > 0 else 1.0 - lam


class RankEvidence:
    """The e-values of rank_evidence, one pair at a time (a sequential test adds each pair once
    instead of ranking every run again)."""

    def __init__(self, direction: str, scale: Scale, delta: float = 0.0,
                 prior: Sequence[tuple[str, float]] = (), first: int = 0, shift: float = 0.0) -> None:
        self.s, self.scale, self.delta, self.n = orientation(direction), scale, delta, first
        self.shift = shift
        base = POOL_WEIGHTS if prior else WITHIN_WEIGHTS
        # the keep side is the rank rule as it was; the futility side, whose error is a lost gain
        # and never a false keep, adds the shift and the paired components (weight 0 without delta)
        w, wp = (SHIFT_WEIGHT, PAIR_WEIGHT) if shift > 0 and delta > 0 else (0.0, 0.0)
        self.weights = base                                          # (tilt, urn, top)
        self.fut_weights = (*((1.0 - w - wp) * x for x in base), w, wp)  # (..., shift, paired)
        # the paired component's scale: a pair's noise (two runs'), from delta in run noises
        self.pair_noise = math.sqrt(2.0) * delta / shift if shift > 0 else 0.0
        self.pooled = bool(prior)
        self.keep, self.fut = [1.0] * 3, [1.0] * 5
        self.up: list[float] = []
        self.down: list[float] = []
        # each side's runs so far, sorted (what a new run is ranked among): as measured, and with
        # the candidate's moved by delta (the futility side's ranking)
        self._seen = {side: sorted(_oriented(s, v, self.s, scale, 0.0)[1] for s, v in prior if s == side)
                      for side in "AB"}
        self._shifted = {side: sorted(_oriented(s, v, self.s, scale, delta)[1] for s, v in prior if s == side)
                         for side in "AB"}

    def add(self, a: float, b: float) -> tuple[float, float]:
        """One more pair (incumbent `a`, candidate `b`): the log e-values after it."""
        order = [("B", b), ("A", a)] if self.n % 2 == 0 else [("A", a), ("B", b)]
        seen, shifted = self._seen, self._shifted
        ys: dict[str, float] = {}      # this pair's runs, oriented
        for side, v in order:
            _, y = _oriented(side, v, self.s, self.scale, 0.0)
            _, yd = _oriented(side, v, self.s, self.scale, self.delta)
            hi, other = side == "B", "A" if side == "B" else "B"
            sk, sf = _slots(seen[side], seen[other], y), _slots(shifted[side], shifted[other], yd)
            fk = (*_rank_factors(sk, hi), _top_factor(sk, hi) if self.pooled else 1.0)
            ff = (*_rank_factors(sf, not hi), _top_factor(sf, not hi) if self.pooled else 1.0,
                  _shift_factor(sf, not hi, self.shift), 1.0)   # the paired factor: per pair, below
            self.keep = [e * f for e, f in zip(self.keep, fk)]
            self.fut = [e * f for e, f in zip(self.fut, ff)]
            bisect.insort(seen[side], y)
            bisect.insort(shifted[side], yd)
            ys[side] = y
        g = ys["B"] - ys["A"]          # this pair's gain (oriented)
        self.fut[4] *= _pair_factor(self.delta - g, self.delta, self.pair_noise)
        self.n += 1
        # the components hold their weights of the evidence: its mean is the e-value
        self.up.append(math.log(sum(w * e for w, e in zip(self.weights, self.keep))))
        self.down.append(math.log(sum(w * e for w, e in zip(self.fut_weights, self.fut))))
        return self.up[-1], self.down[-1]


def rank_evidence(a: Sequence[float], b: Sequence[float], direction: str, scale: Scale,
                  delta: float = 0.0, prior: Sequence[tuple[str, float]] = (),
                  first: int = 0, shift: float = 0.0) -> tuple[list[float], list[float]]:
    """log of the keep side's and the futility side's e-values after each pair (see above):
    the candidate's runs better than the incumbent's; a gain of `delta` (on `scale`, oriented)
    ruled out. `prior`: runs measured before these, as (side, value), ranked with them but bet on
    by neither side (the pooled test: the incumbent's recent runs, and with confirm the first
    test's); with a prior the evidence also holds the top component (POOL_WEIGHTS). `first`: the
    index of the first pair given (its ABBA order)."""
    ev = RankEvidence(direction, scale, delta, prior, first, shift)
    for x, y in zip(a, b):
        ev.add(x, y)
    return ev.up, ev.down


@dataclass(frozen=True)
class Step:   # the sequential test after n pairs
    n: int
    log_lr: float          # log e-value of the keep side
    log_futility: float    # ... and of the futility side
    decision: Literal["keep", "discard", "continue"]


def sequential_decide(log_lr: float, alpha: float, log_futility: float = -math.inf,
                      beta: float = FUTILITY) -> Literal["keep", "discard", "continue"]:
    if log_lr >= math.log(1.0 / alpha):
        return "keep"
    if log_futility >= math.log(1.0 / beta):
        return "discard"
    return "continue"


def sequential_path(a: Sequence[float], b: Sequence[float], direction: str, alpha: float,
                    delta: float = 0.0, beta: float = FUTILITY) -> list[Step]:
    """The test after each pair, up to and including the first decision (the pairs after it
    are not ranked: a simulation of hundreds of cycles stops each where the rule would)."""
    ev = RankEvidence(direction, pick_scale(a, b), delta)
    out: list[Step] = []
    for n, (x, y) in enumerate(zip(a, b), start=1):
        u, d = ev.add(x, y)
        out.append(Step(n, u, d, sequential_decide(u, alpha, d, beta)))
        if out[-1].decision != "continue":
            break
    return out


def design_delta(pair_scale: float, min_gain: float) -> float:
    """The gain the futility side rules out: DESIGN_EFFECT robust pair noises, at least min_effect."""
    return max(min_gain, DESIGN_EFFECT * pair_scale)


def bursty_runs(rng: Any, n: int, cv: float, burst_rate: float, burst: float) -> Any:
    """`n` run factors: exp(cv N(0, 1)) (positive at any noise), and with chance `burst_rate` a
    burst of +`burst`."""
    np = _np()
    x = np.exp(cv * rng.standard_normal(n))
    return x * np.where(rng.random(n) < burst_rate, 1.0 + burst, 1.0)


def sequential_runs(effect: float, run_cv: float, alpha: float, max_pairs: int, min_gain: float = 0.0,
                    delta: float = 0.0, burst_rate: float = 0.0, burst: float = 0.0,
                    beta: float = FUTILITY, reps: int = 400, seed: int = 12345) -> tuple[float, float]:
    """(chance of a keep, median verifier runs) at a true gain `effect` (log scale) on a verifier
    with `run_cv` noise a run and bursts, simulated with a fixed seed."""
    np = _np()
    rng = np.random.default_rng(seed)
    keeps, runs = 0, []
    for _ in range(reps):
        a = list(100.0 * bursty_runs(rng, max_pairs, run_cv, burst_rate, burst))
        b = list(100.0 * math.exp(-effect) * bursty_runs(rng, max_pairs, run_cv, burst_rate, burst))
        last = sequential_path(a, b, "minimize", alpha, delta, beta)[-1]
        if last.decision == "keep" and hodges_lehmann(gains(a[:last.n], b[:last.n], "minimize", "log")) >= min_gain:
            keeps += 1
        runs.append(2 * last.n)
    return keeps / reps, float(np.median(runs))
