"""The pooled paired test (autoloop.decide.pool): the incumbent's recent runs ranked with the fresh
ones, the bound under exchangeability, which runs the ledger gives, and the fallback on drift."""

from __future__ import annotations

import importlib.util
import itertools
import math
import random
import sys
from pathlib import Path

import pytest

from autoloop.decide import cycle, pool as pooling, stats as st
from autoloop.decide.core import Session
from tests.decide.test_decide import PAIRED, Fake, program

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "pooled_shapes.py"


def _abba(fresh: list[float], n: int) -> tuple[list[float], list[float]]:
    """The first 2n values as n ABBA pairs in measuring order (B1 A1 A2 B2 ...)."""
    a = [fresh[2 * i + 1] if i % 2 == 0 else fresh[2 * i] for i in range(n)]
    b = [fresh[2 * i] if i % 2 == 0 else fresh[2 * i + 1] for i in range(n)]
    return a, b


@pytest.mark.parametrize("prior_sides", ["AAA", "AAB", "ABA"])
def test_pooled_evidence_has_mean_one_over_every_order(prior_sides: str) -> None:
    # exchangeable runs (pooled ones and fresh ones alike, a change that does nothing): every
    # order of the 7 values is equally likely, so the e-value averaged over them is exactly 1
    # after every pair, on both sides; prior B runs are the confirmation's case (the first
    # test's candidate runs ranked with the second's)
    values = [100.0, 101.3, 99.2, 140.0, 100.4, 98.9, 100.8]
    m, n = len(prior_sides), 2
    keep, fut = [0.0] * n, [0.0] * n
    perms = list(itertools.permutations(values))
    for p in perms:
        prior = list(zip(prior_sides, p[:m]))
        a, b = _abba(list(p[m:]), n)
        up, down = st.rank_evidence(a, b, "minimize", "log", 0.0, prior)
        for i in range(n):
            keep[i] += math.exp(up[i]) / len(perms)
            fut[i] += math.exp(down[i]) / len(perms)
    assert keep == pytest.approx([1.0] * n, rel=1e-9)
    assert fut == pytest.approx([1.0] * n, rel=1e-9)


def test_two_candidate_runs_above_twelve_pooled_ones_keep_at_alpha_005() -> None:
    pool = [("A", 100.0 + 0.1 * i) for i in range(12)]
    a, b = [100.05, 100.35], [90.0, 90.1]
    up, _ = st.rank_evidence(a, b, "minimize", "log", 0.0, pool)
    # the exact null chance of the pattern is 1 in C(16, 2) = 120: no e-value can show more
    assert math.log(20) <= up[-1] <= math.log(math.comb(16, 2))
    alone, _ = st.rank_evidence(a, b, "minimize", "log", 0.0)
    # within the test the floor: 4 runs show at most C(4, 2) = 6 to 1
    assert math.exp(alone[-1]) <= 6.0


def test_without_a_prior_the_evidence_is_the_within_test_rule() -> None:
    rng = random.Random(3)
    a = [100 * math.exp(0.01 * rng.gauss(0, 1)) for _ in range(6)]
    b = [97 * math.exp(0.01 * rng.gauss(0, 1)) for _ in range(6)]
    up, down = st.rank_evidence(a, b, "minimize", "log", 0.01)
    # the mixture of the rank rule before pooling: half tilt, half urn, no third component
    assert st.WITHIN_WEIGHTS == (0.5, 0.5, 0.0)
    assert up == st.rank_evidence(a, b, "minimize", "log", 0.01, ())[0]
    assert len(up) == len(down) == 6


def _pool(values: list[float], noise: float = 0.01) -> pooling.Pool:
    return pooling.Pool(tuple(values), (0,), 360.0, 100.0, noise)


def test_a_clear_gain_is_kept_in_eight_runs_with_confirm_at_alpha_005() -> None:
    prog = program("accept:\n  rule: paired\n  alpha: 0.05\n  confirm: true\n")
    pool = _pool([100.0 + 0.1 * (i % 5 - 2) for i in range(12)])
    fake = Fake(lambda side, k: 100.0 + 0.05 * (k % 3 - 1) if side == "A" else 95.0 + 0.05 * (k % 2))
    v = cycle.judge_paired(Session(fake), prog, {}, pool=pool)
    assert v.status == "keep" and v.stats["verifier_runs"] == 8
    assert [b["pool_runs"] for b in v.stats["batches"]] == [12, 12 + 4]
    assert "ranked with 12 earlier runs of the incumbent (cycles 0)" in v.result
    assert v.stats["pool"]["values"] == list(pool.values)
    # the same cycle without the pool: the within-test floor (3 pairs a test at alpha 0.05)
    alone = cycle.judge_paired(Session(Fake(fake.value)), prog, {})
    assert alone.status == "keep" and alone.stats["verifier_runs"] >= 12


def test_drift_sets_the_pool_aside_and_the_test_goes_on_within_itself() -> None:
    # the pool was measured at 100; the machine is now 10% faster for both sides (a step): the
    # candidate changes nothing, its runs beat every pooled run
    pool = _pool([100.0 + 0.1 * (i % 5 - 2) for i in range(12)])
    rng = random.Random(4)
    fake = Fake(lambda side, k: 90.0 * math.exp(0.01 * rng.gauss(0, 1)))
    v = cycle.judge_paired(Session(fake), program(PAIRED + "  alpha: 0.05\n"), {}, pool=pool)
    assert v.status == "discard"
    batch = v.stats["batches"][0]
    assert batch["drift"]["pair"] == 1 and batch["drift"]["z"] > pooling.DRIFT_Z
    assert "drift: the incumbent's fresh runs sat" in v.result
    assert "set aside, judged within the test from pair 2" in v.result
    # after the drift: the evidence carried (at most 1) times the within-test rule's on pairs 2..
    kept = batch["drift"]["log_lr_kept"]
    assert kept <= 0.0
    up, _ = st.rank_evidence(batch["a"][1:], batch["b"][1:], "minimize", "log", batch["delta"], first=1)
    assert batch["log_lr"][1:] == pytest.approx([kept + u for u in up])


# Cycle 10 of the traced benchmark's run (tests/test_attacks_trace.py), resumed on a quiet machine
# after ci20's suite: the incumbent's 12 pooled runs were measured while the machine ran fast, its
# fresh runs ran a third slower; the one-pass rewrite, 30% faster and better in 15 pairs of 16,
# ranked among the pooled runs and was undecided after 16 pairs (LR 189 of 200 needed).
SLOWER_POOL = [0.258443, 0.22717, 0.278209, 0.232451, 0.311831, 0.280003, 0.231665, 0.229608,
               0.22976, 0.345706, 0.225579, 0.239095]
SLOWER_A = [0.279, 0.389, 0.378, 0.398, 0.404, 0.365, 0.362, 0.384, 0.354, 0.383, 0.389, 0.373,
            0.408, 0.378, 0.345, 0.367]
SLOWER_B = [0.333, 0.255, 0.245, 0.286, 0.258, 0.28, 0.227, 0.25, 0.27, 0.264, 0.279, 0.273,
            0.262, 0.25, 0.268, 0.255]


def test_a_machine_slower_than_the_pool_sets_it_aside_and_a_real_gain_is_kept() -> None:
    prog = program("accept:\n  rule: paired\n  pairs: 16\n  min_effect: 2%\n  final_pairs: 0\n")
    pool = _pool(SLOWER_POOL, noise=0.1525)
    fake = Fake(lambda side, k: (SLOWER_A if side == "A" else SLOWER_B)[k])
    v = cycle.judge_paired(Session(fake), prog, {}, pool=pool)
    assert v.status == "keep", v.result
    batch = v.stats["batches"][0]
    # the median of three fresh incumbent runs, not the first one alone: one slow run is a burst
    assert batch["drift"]["pair"] == 3 and batch["drift"]["z"] < -pooling.DRIFT_Z
    assert "fresh runs sat" in v.result and "standard errors worse than its 12 earlier runs" in v.result
    assert batch["n"] < 16


def test_one_slow_fresh_run_is_a_burst_not_a_drift() -> None:
    pool = [100.0 + (i % 5 - 2) for i in range(12)]
    # one run far on the bad side: the good side's checks say nothing, and the bad side waits for
    # the median of DRIFT_BAD_RUNS runs
    assert pooling.drifted(pool, [140.0], "minimize", "log", 0.02) is None
    assert pooling.drifted(pool, [140.0, 101.0], "minimize", "log", 0.02) is None
    assert pooling.drifted(pool, [140.0, 101.0, 99.0], "minimize", "log", 0.02) is None
    z = pooling.drifted(pool, [140.0, 139.0, 99.0], "minimize", "log", 0.02)
    assert z is not None and z < -pooling.DRIFT_Z
    # the same on a metric to maximize: lower is the bad side
    assert pooling.drifted(pool, [60.0, 61.0, 101.0], "maximize", "log", 0.02) < -pooling.DRIFT_Z
    assert pooling.drifted(pool, [60.0, 101.0, 99.0], "maximize", "log", 0.02) is None


def test_drift_check_is_one_sided_and_in_standard_errors() -> None:
    pool = [100.0] * 5 + [101.0] * 5
    # fresh runs slower than the pool: not the side that makes a no-op look like a gain
    assert pooling.drift_z(pool, [110.0, 111.0], "minimize", "log", 0.01) < 0
    z = pooling.drift_z(pool, [95.0], "minimize", "log", 0.01)
    se = 0.01 * math.sqrt(1.0 + pooling.MEDIAN_SE ** 2 / 10)
    assert z == pytest.approx((math.log(100.5) - math.log(95.0)) / se, rel=1e-3)


def _cal(ts: float, commit: str = "c0", node: object = None) -> dict:
    return {"cycle": 0, "status": "baseline", "commit": commit, "parent": commit, "ts": ts,
            "metric": 100.0, **({"node": node} if node else {}),
            "stats": {"kind": "calibration", "rule": "paired", "a": [100.0, 100.2], "b": [100.1, 100.3],
                      "scale": "log", "noise_robust": 0.014, "seconds_per_run": 2.0}}


def _cycle(n: int, ts: float, parent: str, status: str, commit: str | None, a: list[float],
           b: list[float], node: object = None) -> dict:
    return {"cycle": n, "status": status, "commit": commit, "parent": parent, "ts": ts,
            **({"node": node} if node else {}),
            "stats": {"rule": "paired", "test": "sequential", "batches": [{"a": a, "b": b}]}}


def test_the_pool_takes_the_incumbents_runs_newest_first_on_its_node_within_the_window() -> None:
    history = [
        _cal(1000.0),
        _cycle(1, 1100.0, "c0", "discard", None, [100.4, 100.5], [99.0, 99.1]),
        _cycle(2, 1150.0, "c0", "discard", None, [100.6, 100.7], [98.0, 98.1], node={"host": "x"}),
        _cycle(3, 1200.0, "c0", "keep", "c3", [100.8, 100.9], [97.0, 97.1]),
    ]
    p = pooling.incumbent_pool(history, "c0", None, 1210.0, 2.0, 0.01, 100.0, "log")
    # cycle 3's and 1's incumbent runs and the calibration's four; cycle 2 ran on another node
    assert sorted(p.values) == [100.0, 100.1, 100.2, 100.3, 100.4, 100.5, 100.8, 100.9]
    assert p.cycles == (3, 1, 0)
    assert p.window_s == pytest.approx(360.0)        # half a run noise of 5% an hour, at 1%
    # the kept candidate is the incumbent now: its runs are, the old incumbent's are not
    kept = pooling.incumbent_pool(history, "c3", None, 1210.0, 2.0, 0.01, 100.0, "log")
    assert sorted(kept.values) == [97.0, 97.1] and kept.cycles == (3,)
    # the window: at 0.2% noise, 72 s; only cycle 3 is that recent
    near = pooling.incumbent_pool(history, "c0", None, 1210.0, 2.0, 0.002, 100.0, "log")
    assert sorted(near.values) == [100.8, 100.9]
    late = pooling.incumbent_pool(history, "c0", None, 5000.0, 2.0, 0.01, 100.0, "log")
    assert late.values == () and late.why_not
    assert pooling.incumbent_pool(history, "c0", None, 1210.0, None, 0.01, 100.0, "log").why_not


def test_older_runs_that_sit_apart_from_the_newer_ones_stay_out() -> None:
    history = [_cal(1000.0),
               _cycle(1, 1100.0, "c0", "discard", None, [110.0, 110.2, 109.9], [110.0, 110.1, 110.3]),
               _cycle(2, 1150.0, "c0", "discard", None, [100.0, 100.2, 99.9], [99.0, 99.1, 99.2])]
    p = pooling.incumbent_pool(history, "c0", None, 1160.0, 2.0, 0.01, 100.0, "log")
    assert sorted(p.values) == [99.9, 100.0, 100.2] and p.cycles == (2,)


def _bench():
    spec = importlib.util.spec_from_file_location("pooled_shapes", BENCH)
    assert spec is not None and spec.loader is not None
    sys.path.insert(0, str(BENCH.parent))
    try:
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod      # its dataclasses look their module up
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(BENCH.parent))
    return mod


@pytest.mark.parametrize("shape,drift", [("gauss 1%", "step-"), ("gauss 1%", "linear-"),
                                         ("1% + bursts 15% of runs, +40%", "none")])
def test_the_simulation_keeps_no_ops_at_most_alpha(shape: str, drift: str) -> None:
    # the shipped simulation, small and seeded: no-ops through the pooled rule, a step of 10%
    # faster in every cycle, a drift of 5% an hour faster, bursts
    bench = _bench()
    s = next(x for x in bench.SHAPES if x.name == shape)
    tally = bench.Tally()
    for r in range(2):
        bench.one_run(s, 0.0, 25, 7000 + r, tally, after=True, drift=drift, alpha=0.05, confirm=False,
                      run_s=2.5, gap_s=20.0)
    assert tally.candidates == 50 and max(tally.pooled) > 0
    assert tally.kept / tally.candidates <= 0.05


def test_a_burst_beside_a_step_does_not_hide_the_step() -> None:
    pool = [100.0 + 0.1 * (i % 5 - 2) for i in range(12)]
    # one fresh run 10% faster (a step), one 40% slower (a burst): the burst is left out
    assert pooling.drift_z(pool, [90.0, 140.0], "minimize", "log", 0.01) == pytest.approx(
        pooling.drift_z(pool, [90.0], "minimize", "log", 0.01))
    assert pooling.drifted(pool, [90.0, 140.0], "minimize", "log", 0.01) is not None
    # a step before the last of three runs: their median is the pool's, the best run is not
    fresh = [100.1, 99.9, 90.0]
    assert pooling.drift_z(pool, fresh, "minimize", "log", 0.01) < pooling.DRIFT_Z
    z = pooling.drifted(pool, fresh, "minimize", "log", 0.01)
    assert z is not None and z == pytest.approx(pooling.best_run_z(pool, fresh, "minimize", "log", 0.01))
    # nothing moved: no drift
    assert pooling.drifted(pool, [100.1, 99.9], "minimize", "log", 0.01) is None

