"""autoloop.decide.stats: the signed-rank test, Hodges–Lehmann and its interval, the paired rule's
pieces, power. Checked against scipy, against brute-force enumeration written here
independently, and against published table values."""

from __future__ import annotations

import itertools
import random
import math
import statistics

import numpy as np
import pytest
import scipy.stats

from autoloop.decide import stats as st


def null_counts(n: int) -> list[int]:
    """Number of sign patterns of ranks 1..n with positive rank sum w (brute force DP)."""
    counts = [1] + [0] * (n * (n + 1) // 2)
    for r in range(1, n + 1):
        for w in range(len(counts) - 1, r - 1, -1):
            counts[w] += counts[w - r]
    return counts


def brute_walsh(g: list[float]) -> list[float]:
    return sorted((g[i] + g[j]) / 2 for i in range(len(g)) for j in range(i, len(g)))


# ---- scales, changes, gains -----------------------------------------------------------------


@pytest.mark.parametrize("values, scale", [
    ([1.0, 2.0, 0.5], "log"), ([1.0, 0.0], "diff"), ([-1.0, 2.0], "diff"), ([1e-9], "log"),
])
def test_pick_scale(values, scale) -> None:
    assert st.pick_scale(values) == scale


def test_pick_scale_looks_at_every_group() -> None:
    assert st.pick_scale([1.0, 2.0], [3.0, -1.0]) == "diff"


def test_changes_log_is_log_ratio_of_candidate_to_incumbent() -> None:
    assert st.changes([2.0, 4.0], [1.0, 4.0], "log") == [math.log(0.5), 0.0]


def test_changes_diff_is_candidate_minus_incumbent() -> None:
    assert st.changes([2.0, -1.0], [1.0, 1.0], "diff") == [-1.0, 2.0]


def test_changes_need_equal_lengths() -> None:
    with pytest.raises(ValueError):
        st.changes([1.0], [1.0, 2.0], "log")


@pytest.mark.parametrize("direction, expected", [("minimize", [1.0]), ("maximize", [-1.0])])
def test_gains_are_positive_when_better(direction, expected) -> None:
    assert st.gains([3.0], [2.0], direction, "diff") == expected


@pytest.mark.parametrize("change, scale, ref, pct", [
    (math.log(0.98), "log", None, -2.0), (0.0, "log", None, 0.0), (-0.5, "diff", 10.0, -5.0),
    (1.0, "diff", -4.0, 25.0), (1.0, "diff", 0.0, None),
])
def test_change_pct(change, scale, ref, pct) -> None:
    got = st.change_pct(change, scale, ref)
    assert (got is None and pct is None) or got == pytest.approx(pct)


# ---- the signed-rank test ---------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(8))
def test_signed_rank_p_is_scipys_one_sided_wilcoxon(seed: int) -> None:
    g = np.random.default_rng(seed).normal(0.3, 1.0, 5 + seed)
    assert st.signed_rank_p(list(g)) == scipy.stats.wilcoxon(g, alternative="greater").pvalue


@pytest.mark.parametrize("g", [[], [0.0], [0.0, 0.0, 0.0]])
def test_signed_rank_p_without_nonzero_gain_is_one(g) -> None:
    assert st.signed_rank_p(g) == 1.0


def test_signed_rank_p_of_six_positive_gains_is_one_in_64() -> None:
    assert st.signed_rank_p([0.1, 0.2, 0.3, 0.4, 0.5, 0.6]) == pytest.approx(1 / 64)


def test_signed_rank_p_with_ties_is_exact_over_sign_flips() -> None:
    # all equal (a deterministic verifier): only the all-positive pattern is as extreme
    assert st.signed_rank_p([0.02] * 6) == pytest.approx(1 / 64)


@pytest.mark.parametrize("n", range(1, 13))
def test_lower_tail_matches_enumeration(n: int) -> None:
    counts = null_counts(n)
    total = 2 ** n
    for k in range(len(counts)):
        assert st.lower_tail(n, k) == pytest.approx(sum(counts[: k + 1]) / total, abs=1e-12)


# ---- Hodges–Lehmann ---------------------------------------------------------------------------


def test_walsh_averages_are_all_pairwise_means_with_self() -> None:
    g = [3.0, -1.0, 2.0, 7.0]
    assert list(st.walsh_averages(g)) == brute_walsh(g)


def test_hodges_lehmann_small_known_value() -> None:
    assert st.hodges_lehmann([1.0, 2.0, 3.0]) == 2.0        # 1 1.5 2 2 2.5 3


@pytest.mark.parametrize("seed", range(5))
def test_hodges_lehmann_is_median_of_walsh_averages(seed: int) -> None:
    g = list(np.random.default_rng(seed).normal(size=9))
    assert st.hodges_lehmann(g) == pytest.approx(float(np.median(brute_walsh(g))))


def test_hodges_lehmann_needs_pairs() -> None:
    with pytest.raises(ValueError):
        st.hodges_lehmann([])


def test_interval_n10_uses_the_table_critical_value() -> None:
    # n = 10, two-sided 5%: lower critical value 8 -> the 9th smallest and 9th largest of 55
    g = [float(x) for x in (-3, 1, 4, 6, 9, 10, 12, 15, 20, 31)]
    w = brute_walsh(g)
    ci = st.hl_interval(g)
    assert (ci.low, ci.high) == (w[8], w[55 - 9])
    assert ci.level == pytest.approx(1 - 2 * 25 / 1024)


def test_interval_n20_level_from_the_table() -> None:
    ci = st.hl_interval([float(x) for x in range(-3, 17)])
    assert ci.level == pytest.approx(1 - 2 * sum(null_counts(20)[:53]) / 2 ** 20)
    assert ci.level >= 0.95


def test_interval_with_six_pairs_is_min_max_at_its_real_level() -> None:
    g = [0.5, -0.2, 0.9, 0.1, 0.3, 0.4]
    ci = st.hl_interval(g)
    assert (ci.low, ci.high, ci.level) == (-0.2, 0.9, pytest.approx(1 - 2 / 64))


def test_interval_of_one_pair_is_a_point_with_no_coverage() -> None:
    ci = st.hl_interval([0.25])
    assert (ci.low, ci.high, ci.level) == (0.25, 0.25, 0.0)


def test_interval_of_identical_gains_is_that_point() -> None:
    ci = st.hl_interval([0.02] * 8)
    assert ci.low == ci.high == 0.02


def test_interval_contains_the_estimate() -> None:
    g = list(np.random.default_rng(3).normal(size=15))
    ci = st.hl_interval(g)
    assert ci.low <= st.hodges_lehmann(g) <= ci.high


def test_interval_coverage_is_close_to_its_level() -> None:
    rng = np.random.default_rng(2024)
    n, trials = 9, 3000
    level = st.hl_interval([1.0] * n).level
    hits = 0
    for _ in range(trials):
        ci = st.hl_interval(list(rng.normal(0.0, 1.0, n)))
        hits += ci.low <= 0.0 <= ci.high
    assert abs(hits / trials - level) < 0.02


# ---- compare / threshold / passes ---------------------------------------------------------------


def test_compare_minimize_numbers() -> None:
    a = [1.0, 1.01, 0.99, 1.02, 1.0, 1.0]
    b = [0.97, 0.98, 0.975, 0.99, 0.97, 0.985]
    c = st.compare(a, b, "minimize")
    g = [math.log(x / y) for x, y in zip(a, b)]
    assert c.scale == "log" and c.n == 6
    assert c.effect == pytest.approx(float(np.median(brute_walsh(g))))
    assert c.change == -c.effect
    assert c.change_pct == pytest.approx((math.exp(-c.effect) - 1) * 100)
    assert c.p == pytest.approx(1 / 64)
    assert c.median_ratio == pytest.approx(float(np.median([y / x for x, y in zip(a, b)])))
    lo, hi = c.change_ci_pct
    assert lo <= c.change_pct <= hi < 0


def test_compare_maximize_gain_is_the_change() -> None:
    c = st.compare([10.0, 11.0, 10.5], [11.0, 12.0, 11.5], "maximize")
    assert c.change == c.effect > 0


def test_compare_diff_scale_when_values_are_not_positive() -> None:
    c = st.compare([0.0, -1.0, 1.0], [-1.0, -2.0, 0.0], "minimize")
    assert (c.scale, c.change, c.median_ratio) == ("diff", -1.0, None)
    assert c.change_pct is None or c.change_pct == pytest.approx(-1.0 / abs(c.median_a) * 100)


def test_compare_record_is_plain_json_data() -> None:
    import json
    rec = st.compare([1.0, 2.0], [1.5, 2.5], "minimize").as_record()
    assert json.loads(json.dumps(rec)) == rec


def test_compare_needs_equal_nonempty_sides() -> None:
    with pytest.raises(ValueError):
        st.compare([], [], "minimize")


@pytest.mark.parametrize("value, relative, scale, direction, ref, expected", [
    (1.0, True, "log", "minimize", 5.0, -math.log(0.99)),
    (1.0, True, "log", "maximize", 5.0, math.log(1.01)),
    (0.5, False, "log", "maximize", 10.0, math.log(1.05)),
    (0.5, False, "log", "minimize", 10.0, -math.log(0.95)),
    (2.0, True, "diff", "minimize", -50.0, 1.0),
    (0.3, False, "diff", "maximize", 7.0, 0.3),
    (0.0, True, "log", "minimize", 1.0, 0.0),
    (20.0, False, "log", "minimize", 10.0, math.inf),
])
def test_threshold(value, relative, scale, direction, ref, expected) -> None:
    assert st.threshold(value, relative, scale, direction, ref) == pytest.approx(expected)


# ---- noise, power, detectable effect ------------------------------------------------------------


def test_noise_sd() -> None:
    assert st.noise_sd([]) == 0.0
    assert st.noise_sd([-0.3]) == 0.3
    assert st.noise_sd([1.0, 2.0, 3.0]) == pytest.approx(1.0)


def test_default_pairs_is_eight() -> None:
    from autoloop.program.reader import AcceptSpec
    assert AcceptSpec().pairs == 8


def test_strict_noise_and_detectable() -> None:
    sd, scale = st.strict_noise([1.0, 1.0])
    assert (sd, scale) == (0.0, "log")
    sd, scale = st.strict_noise([1.0, -1.0])
    assert scale == "diff" and sd == pytest.approx(math.sqrt(2))



def test_strict_phantom_is_the_expected_luckiest_draw() -> None:
    # the expected maximum of 101 standard normals is about 2.5 (simulated here)
    rng = np.random.default_rng(0)
    expected_max = rng.standard_normal((20000, 101)).max(axis=1).mean()
    assert st.strict_phantom(0.03, 1, 100) == pytest.approx(0.03 * expected_max, rel=0.02)
    assert st.strict_phantom(0.03, 4, 100) == pytest.approx(st.strict_phantom(0.03, 1, 100) * 1.2533 / 2)


def test_enumeration_helper_is_right() -> None:
    # the independent reference used above: 2^n patterns, symmetric
    for n in range(1, 8):
        c = null_counts(n)
        assert sum(c) == 2 ** n and c == c[::-1]
        assert c == [sum(1 for s in itertools.product((0, 1), repeat=n)
                         if sum(r * b for r, b in zip(range(1, n + 1), s)) == w)
                     for w in range(len(c))]


def test_strict_pieces_agree_with_numpy_and_scipy() -> None:
    """strict_noise / strict_phantom / noise_sd are pure Python (no scipy import on the strict
    path) but give numpy's and scipy's values."""
    xs = [1.3, 0.7, 2.9, 1.1, 0.4]
    assert st.noise_sd(xs) == pytest.approx(float(np.std(xs, ddof=1)), rel=1e-12)
    assert st.strict_noise(xs)[0] == pytest.approx(float(np.std(np.log(xs), ddof=1)), rel=1e-12)
    for n in (1, 10, 100, 1000):
        q = (n + 1 - 0.375) / (n + 1 + 0.25)
        assert st.strict_phantom(1.0, 1, n) == pytest.approx(float(scipy.stats.norm.ppf(q)), rel=1e-12)


def test_numpy_and_scipy_load_only_when_a_statistical_rule_needs_them() -> None:
    """They cost about a second at start-up: importing the whole program, and the strict rule's
    warnings about noise, must not load them; the paired test does."""
    import subprocess
    import sys
    code = (
        "import sys\n"
        "import autoloop.cli, autoloop.engine.loop, autoloop.engine.measure, autoloop.commands.gate, autoloop.commands.report\n"
        "from autoloop.decide import stats as st\n"
        "st.strict_noise([1.0, 1.2, 0.9]); st.strict_phantom(0.1, 1, 100); st.noise_sd([0.1, 0.2])\n"
        "assert 'numpy' not in sys.modules and 'scipy' not in sys.modules, "
        "sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'scipy'))[:5]\n"
        "st.signed_rank_p([0.1, 0.2, -0.05])\n"
        "assert 'scipy.stats' in sys.modules\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


# ---- the sequential test ------------------------------------------------------------------------


def _bursty(rng: random.Random, n: int, cv: float = 0.01, rate: float = 0.15, size: float = 0.4) -> list[float]:
    return [100.0 * (1 + cv * rng.gauss(0, 1)) * (1 + size if rng.random() < rate else 1.0) for _ in range(n)]


@pytest.mark.parametrize("n", [2, 3])
def test_rank_evidence_has_mean_one_over_every_order_of_the_runs(n: int) -> None:
    # exchangeable runs (a change that does nothing, noise of any shape): every order of the 2n
    # values is equally likely, so the e-value averaged over all orders must be exactly 1 after
    # every pair; a factor that is not a fair bet drifts away from 1
    values = [100.0, 101.3, 99.2, 140.0, 100.4, 98.9][:2 * n]
    sums = [0.0] * n
    perms = list(itertools.permutations(values))
    for p in perms:
        a = [p[2 * i + 1] if i % 2 == 0 else p[2 * i] for i in range(n)]
        b = [p[2 * i] if i % 2 == 0 else p[2 * i + 1] for i in range(n)]
        up, down = st.rank_evidence(a, b, "minimize", "log", 0.0)
        for i in range(n):
            sums[i] += math.exp(up[i]) / len(perms)
    assert sums == pytest.approx([1.0] * n, rel=1e-9)


@pytest.mark.parametrize("noise", ["bursts", "cauchy"])
def test_false_keeps_stay_below_alpha_on_heavy_tailed_noise(noise: str) -> None:
    # Ville: P(ever >= 1/alpha) <= alpha whatever the noise; a Gaussian likelihood ratio fails
    # this on bursts (one pair whose incumbent run is a burst reads as a huge gain)
    rng = random.Random(5)
    alpha, keeps, trials = 0.05, 0, 1500
    for _ in range(trials):
        if noise == "bursts":
            a, b = _bursty(rng, 16), _bursty(rng, 16)
        else:
            a = [100.0 * math.exp(0.01 * math.tan(math.pi * (rng.random() - 0.5))) for _ in range(16)]
            b = [100.0 * math.exp(0.01 * math.tan(math.pi * (rng.random() - 0.5))) for _ in range(16)]
        keeps += st.sequential_path(a, b, "minimize", alpha)[-1].decision == "keep"
    # the binomial 99.9% margin keeps the test from flaking
    assert keeps / trials <= alpha + 3.1 * math.sqrt(alpha * (1 - alpha) / trials)


def test_a_real_gain_is_kept_through_bursts_and_a_no_op_is_discarded() -> None:
    rng = random.Random(9)
    keeps = sum(st.sequential_path(_bursty(rng, 16), [0.95 * x for x in _bursty(rng, 16)],
                                   "minimize", 0.005, math.log(1 / 0.98))[-1].decision == "keep"
                for _ in range(200))
    assert keeps / 200 >= 0.9
    ends = [st.sequential_path(_bursty(rng, 16), _bursty(rng, 16), "minimize", 0.005,
                               math.log(1 / 0.98))[-1].decision for _ in range(200)]
    # a no-op: never kept here, and mostly stopped early by the futility side (a 2% gain ruled out)
    assert "keep" not in ends and ends.count("discard") / 200 >= 0.75


def test_no_pair_decides_alone() -> None:
    # after one pair the evidence is at most 2 whatever the values: a burst cannot keep or discard
    for a, b in (([100.0], [60.0]), ([100.0], [140.0]), ([140.0], [100.0])):
        up, down = st.rank_evidence(a, b, "minimize", "log", 0.01)
        assert math.exp(up[0]) <= 2.0 and math.exp(down[0]) <= 2.0
        assert st.sequential_path(a, b, "minimize", 0.05, 0.01)[-1].decision == "continue"


def test_sequential_decide_boundaries() -> None:
    assert st.sequential_decide(math.log(100), 0.01) == "keep"
    assert st.sequential_decide(math.log(99.9), 0.01) == "continue"
    assert st.sequential_decide(0.0, 0.01, math.log(20)) == "discard"
    assert st.sequential_decide(0.0, 0.01, math.log(19.9), 0.05) == "continue"


def test_the_sequential_test_sees_only_ranks() -> None:
    # a monotone transform of every value (another unit, a burst ten times bigger) changes nothing
    a, b = [100.0, 101.0, 99.0, 140.0], [97.0, 98.0, 150.0, 96.5]
    ref = st.rank_evidence(a, b, "minimize", "log", 0.0)[0]
    assert st.rank_evidence([x * 1000 for x in a], [x * 1000 for x in b], "minimize", "log", 0.0)[0] == pytest.approx(ref)
    assert st.rank_evidence([100.0, 101.0, 99.0, 1400.0], [97.0, 98.0, 1500.0, 96.5],
                            "minimize", "log", 0.0)[0] == pytest.approx(ref)


def test_robust_scale_and_outliers_ignore_bursts() -> None:
    xs = [0.01, -0.012, 0.008, -0.009, 0.011, -0.01, 0.4, -0.38]
    assert st.robust_scale(xs) < 0.03 < st.noise_sd(xs)
    assert sorted(st.outliers(xs, st.robust_scale(xs))) == [-0.38, 0.4]
    assert st.robust_scale([]) == 0.0 and st.outliers([0.1], 0.0) == []


# ---- the futility side's shift and paired components -------------------------------------------


def test_the_keep_side_is_the_same_with_the_futility_components() -> None:
    # the false-keep bound is Ville's on the keep side alone: the futility side's components
    # (which look at values, not only ranks) must not move it
    rng = random.Random(4)
    prior = [("A", x) for x in _bursty(rng, 12)]
    a, b = _bursty(rng, 8), [0.99 * x for x in _bursty(rng, 8)]
    for pr in ((), prior):
        with_ = st.rank_evidence(a, b, "minimize", "log", 0.017, pr, shift=1.7)
        without = st.rank_evidence(a, b, "minimize", "log", 0.017, pr)
        assert with_[0] == without[0] and with_[1] != without[1]


@pytest.mark.parametrize("rate", [0.0, 0.15])
def test_a_gain_of_delta_is_rarely_ruled_out(rate: float) -> None:
    # the futility side's error: a gain of exactly delta discarded. Its bets look at the values
    # (bursts below the bulk, a pair's size), so its beta is measured here, not proven: about 2%
    # on normal noise and 6% under 15% bursts of +40% (400 cycles each, 12 pooled runs)
    rng = random.Random(3)
    delta, shift, trials, discards = 1.2 * math.sqrt(2) * 0.01, 1.2 * math.sqrt(2), 400, 0
    for _ in range(trials):
        prior = [("A", x) for x in _bursty(rng, 12, rate=rate)]
        a = _bursty(rng, 16, rate=rate)
        b = [x * math.exp(-delta) for x in _bursty(rng, 16, rate=rate)]
        up, down = st.rank_evidence(a, b, "minimize", "log", delta, prior, shift=shift)
        ends = [st.sequential_decide(u, 0.05, d) for u, d in zip(up, down)]
        discards += next((e for e in ends if e != "continue"), "") == "discard"
    beta = st.FUTILITY
    assert discards / trials <= beta + 3.1 * math.sqrt(beta * (1 - beta) / trials)


def test_the_shift_component_rules_out_delta_sooner_on_a_no_op_with_bursts() -> None:
    # a no-op with 15% bursts of +40%, 12 pooled incumbent runs: pairs until the futility side
    # reaches 1/beta, with the shift and paired components and without (the tilt and urn alone)
    rng = random.Random(11)
    delta, shift = 1.2 * math.sqrt(2) * 0.01, 1.2 * math.sqrt(2)

    def pairs_to_discard(shift_: float) -> int:
        prior = [("A", x) for x in _bursty(rng, 12)]
        a, b = _bursty(rng, 16), _bursty(rng, 16)
        _, down = st.rank_evidence(a, b, "minimize", "log", delta, prior, shift=shift_)
        return next((i + 1 for i, d in enumerate(down) if d >= math.log(1 / st.FUTILITY)), 17)

    with_, without = ([pairs_to_discard(s) for _ in range(150)] for s in (shift, 0.0))
    # measured: a median of 5 pairs with them, 10.5 without
    assert statistics.median(with_) <= 5 and 2 * statistics.median(with_) <= statistics.median(without)


def test_bursts_below_the_bulk_are_counted_from_the_values_alone() -> None:
    bulk = sorted([-0.004, -0.002, 0.0, 0.001, 0.003, 0.005])
    assert st._bursts_below(bulk) == 0
    assert st._bursts_below(sorted(bulk + [-0.35, -0.3])) == 2
    assert st._bursts_below([0.0, 0.1]) == 0          # too few to tell a burst
