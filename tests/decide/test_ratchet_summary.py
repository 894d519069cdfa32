"""The keep rule (contract §5), the stop target, and the run summary recomputed from records."""

from __future__ import annotations

import math
import random

import pytest

from autoloop.journal.ledger import STATUSES
from autoloop.base.numbers import pct
from autoloop.decide.ratchet import better, gain_of, orientation, reached
from autoloop.journal.facts import Summary, summarize

# ---------------------------------------------------------------------------------------------
# better(): strictly better in the direction; ties are not gains

BETTER = [
    ("minimize", 0.9, 1.0, True),
    ("minimize", 1.0, 1.0, False),          # tie
    ("minimize", 1.1, 1.0, False),
    ("minimize", -1.0, 0.0, True),
    ("minimize", 0.0, -0.0, False),         # 0.0 == -0.0: a tie
    ("minimize", 1.0 + 1e-17, 1.0, False),  # equal as floats
    ("minimize", 1.0 - 2.3e-16, 1.0, True),  # the next float down
    ("minimize", 5e-324, 0.0, False),
    ("minimize", 0.0, 5e-324, True),
    ("minimize", -1e308, 1e308, True),
    ("maximize", 1.1, 1.0, True),
    ("maximize", 1.0, 1.0, False),          # tie
    ("maximize", 0.9, 1.0, False),
    ("maximize", -0.5, -1.0, True),
    ("maximize", 1.0 + 2.3e-16, 1.0, True),
    ("maximize", 5e-324, 0.0, True),
]


@pytest.mark.parametrize("direction,cand,inc,expected", BETTER)
def test_better(direction: str, cand: float, inc: float, expected: bool) -> None:
    assert better(direction, cand, inc) is expected


@pytest.mark.parametrize("direction,cand,inc,expected", [b for b in BETTER if abs(b[1]) < 1e300])
def test_gain_is_positive_exactly_when_better(direction: str, cand: float, inc: float,
                                              expected: bool) -> None:
    """direction is read in one place: the gain, the orientation and better() agree."""
    g = gain_of(direction, inc, cand)
    assert (g > 0) is expected and g == orientation(direction) * (cand - inc)


def test_orientation_and_gain_in_metric_units() -> None:
    assert (orientation("maximize"), orientation("minimize")) == (1, -1)
    assert gain_of("minimize", 10.0, 7.5) == 2.5 and gain_of("maximize", 10.0, 7.5) == -2.5


@pytest.mark.parametrize("direction", ["minimize", "maximize"])
def test_better_is_a_strict_order(direction: str) -> None:
    rng = random.Random(7)
    values = [rng.choice([rng.uniform(-5, 5), float(rng.randint(-3, 3))]) for _ in range(300)]
    for a, b in zip(values, values[1:]):
        assert not (better(direction, a, b) and better(direction, b, a))       # asymmetric
        assert better(direction, a, b) or better(direction, b, a) or a == b   # total up to ties
        assert not better(direction, a, a)                                    # irreflexive


def test_directions_are_mirror_images() -> None:
    rng = random.Random(3)
    for _ in range(300):
        a, b = rng.uniform(-9, 9), rng.uniform(-9, 9)
        assert better("minimize", a, b) == better("maximize", -a, -b)


# ---------------------------------------------------------------------------------------------
# reached(): the stop target is inclusive

REACHED = [
    ("minimize", 0.5, 0.5, True),
    ("minimize", 0.4, 0.5, True),
    ("minimize", 0.6, 0.5, False),
    ("maximize", 0.95, 0.95, True),
    ("maximize", 0.96, 0.95, True),
    ("maximize", 0.94, 0.95, False),
    ("minimize", None, 0.5, False),
    ("minimize", 0.1, None, False),
    ("maximize", None, None, False),
    ("minimize", -1.0, 0.0, True),
    ("maximize", 0.0, -0.0, True),
]


@pytest.mark.parametrize("direction,value,target,expected", REACHED)
def test_reached(direction, value, target, expected) -> None:
    assert reached(direction, value, target) is expected


# ---------------------------------------------------------------------------------------------
# summarize(): every number recomputable from the cycle records alone

def rec(n: int, status: str, metric: float | None = None, best: float | None = None,
        cost: float | None = None, tin: int | None = None, tout: int | None = None) -> dict:
    return {"t": "cycle", "cycle": n, "status": status, "metric": metric, "best": best,
            "gen": {"cost_usd": cost, "tokens_in": tin, "tokens_out": tout}}


def simulate(direction: str, seed: int, n: int = 60) -> list[dict]:
    """A run ledger as the loop writes it: best moves only on keep."""
    rng = random.Random(seed)
    base = 10.0
    out = [rec(0, "baseline", base, base)]
    best = base
    for i in range(1, n + 1):
        status = rng.choice([s for s in STATUSES if s != "baseline"] + ["discard", "discard"])
        metric = None
        if status in ("keep", "discard"):
            step = rng.uniform(0.01, 1.0)
            better_value = best - step if direction == "minimize" else best + step
            worse_value = best + step if direction == "minimize" else best - step
            metric = better_value if status == "keep" else rng.choice([worse_value, best])
            if status == "keep":
                best = metric
        out.append(rec(i, status, metric, best, cost=rng.choice([None, 0.0, 0.25, 1.5]),
                       tin=rng.choice([None, 100]), tout=rng.choice([None, 7])))
    return out


def recompute(cycles: list[dict], direction: str) -> dict:
    done = [c for c in cycles if c["cycle"] > 0]
    base = next(c["metric"] for c in cycles if c["status"] == "baseline")
    keeps = [c["metric"] for c in done if c["status"] == "keep"]
    best = (min if direction == "minimize" else max)([base] + keeps)
    counts: dict[str, int] = {}
    for c in done:
        counts[c["status"]] = counts.get(c["status"], 0) + 1
    return {
        "cycles": len(done), "baseline": base, "best": best, "gain_pct": (best - base) / abs(base) * 100,
        "kept": len(keeps), "keep_rate": len(keeps) / len(done), "by_status": counts,
        "cost_usd": sum(c["gen"]["cost_usd"] or 0 for c in done),
        "tokens": sum((c["gen"]["tokens_in"] or 0) + (c["gen"]["tokens_out"] or 0) for c in done),
    }


@pytest.mark.parametrize("direction", ["minimize", "maximize"])
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("field", ["cycles", "baseline", "best", "gain_pct", "kept", "keep_rate",
                                   "by_status", "cost_usd", "tokens"])
def test_summary_is_reproducible_from_records(direction: str, seed: int, field: str) -> None:
    cycles = simulate(direction, seed)
    got = getattr(summarize(cycles, direction), field)
    want = recompute(cycles, direction)[field]
    if isinstance(want, float):
        assert math.isclose(got, want, rel_tol=1e-12, abs_tol=1e-12)
    else:
        assert got == want


def test_best_is_the_last_kept_metric_in_a_loop_ledger() -> None:
    cycles = simulate("minimize", 11)
    s = summarize(cycles, "minimize")
    assert s.best == cycles[-1]["best"]


def test_summary_of_a_baseline_only_run() -> None:
    s = summarize([rec(0, "baseline", 2.0, 2.0)], "minimize")
    assert (s.cycles, s.baseline, s.best, s.gain_pct, s.kept, s.keep_rate, s.by_status, s.trend) == \
        (0, 2.0, 2.0, 0.0, 0, None, {}, "no cycles yet")


def test_summary_of_nothing() -> None:
    s = summarize([], "maximize")
    assert (s.cycles, s.baseline, s.best, s.gain_pct, s.keep_rate, s.cost_usd, s.tokens) == \
        (0, None, None, None, None, 0.0, 0)


def test_by_status_omits_zero_counts() -> None:
    s = summarize([rec(0, "baseline", 1, 1), rec(1, "crash", best=1), rec(2, "crash", best=1)], "minimize")
    assert s.by_status == {"crash": 2}


def test_gain_pct_sign_follows_values_not_direction() -> None:
    cyc = [rec(0, "baseline", 2.0, 2.0), rec(1, "keep", 1.0, 1.0)]
    assert summarize(cyc, "minimize").gain_pct == -50.0
    cyc = [rec(0, "baseline", 2.0, 2.0), rec(1, "keep", 3.0, 3.0)]
    assert summarize(cyc, "maximize").gain_pct == 50.0


def test_gain_pct_with_zero_baseline_is_none() -> None:
    assert summarize([rec(0, "baseline", 0.0, 0.0), rec(1, "keep", -1.0, -1.0)], "minimize").gain_pct is None


def test_summary_ignores_gen_none() -> None:
    cyc = [rec(0, "baseline", 1, 1), {"cycle": 1, "status": "gen_error", "metric": None, "best": 1, "gen": None}]
    s = summarize(cyc, "minimize")
    assert (s.cost_usd, s.tokens) == (0.0, 0)


def test_discarded_metrics_do_not_count_as_best() -> None:
    cyc = [rec(0, "baseline", 1.0, 1.0), rec(1, "discard", 0.1, 1.0)]
    assert summarize(cyc, "minimize").best == 1.0


def test_trend_over_the_recent_window() -> None:
    cyc = [rec(0, "baseline", 10.0, 10.0)]
    best = 10.0
    for i in range(1, 21):
        if i in (15, 18):
            best -= 1
            cyc.append(rec(i, "keep", best, best))
        else:
            cyc.append(rec(i, "discard", best + 1, best))
    trend = summarize(cyc, "minimize", recent=10).trend
    assert trend == "last 10 cycles: 2 kept, best 10 → 8 (-20.00%)"


def test_trend_with_fewer_cycles_than_the_window() -> None:
    cyc = [rec(0, "baseline", 4.0, 4.0), rec(1, "keep", 3.0, 3.0)]
    assert summarize(cyc, "minimize", recent=10).trend == "the last cycle: 1 kept, best 4 → 3 (-25.00%)"


def test_trend_without_best_values() -> None:
    cyc = [rec(0, "baseline", None, None), rec(1, "crash")]
    assert summarize(cyc, "minimize").trend == "the last cycle: 0 kept"


def test_summary_is_frozen() -> None:
    s = summarize([rec(0, "baseline", 1, 1)], "minimize")
    with pytest.raises(Exception):
        s.kept = 5  # type: ignore[misc]
    assert isinstance(s, Summary)


def test_pct_helper_matches_summary() -> None:
    cyc = [rec(0, "baseline", 3.0, 3.0), rec(1, "keep", 2.0, 2.0)]
    assert summarize(cyc, "minimize").gain_pct == pct(3.0, 2.0)


def test_best_measured_ignores_a_regression_a_person_kept() -> None:
    from autoloop.journal.facts import best_measured
    base = {"cycle": 0, "status": "baseline", "metric": 1.0, "best": 1.0}
    kept_by_person = {"cycle": 1, "status": "keep", "metric": 2.0, "best": 2.0,
                      "decided_by": "human", "recommendation": "discard"}
    agreed = {"cycle": 2, "status": "keep", "metric": 0.5, "best": 0.5,
              "decided_by": "human", "recommendation": "keep"}
    assert best_measured([base, kept_by_person], "minimize", 2.0) == 1.0
    assert best_measured([base, kept_by_person, agreed], "minimize", 0.5) == 0.5
    assert best_measured([base, {**kept_by_person, "metric": 0.2, "best": 0.2, "recommendation": "keep"}],
                         "minimize", 0.2) == 0.2
    # maximize, and no person involved: the incumbent's metric as before
    assert best_measured([{**base, "metric": 3.0}, {**kept_by_person, "metric": 2.0}], "maximize", 2.0) == 3.0
    assert best_measured([base], "minimize", 1.0) == 1.0
