"""What a night costs, said before it (issue 33, item 3): the calibration and `verify` state the
runs and seconds a keep and a discard take at the user's alpha and min_effect, and the floor."""

from __future__ import annotations

import math
import random

import pytest

from autoloop.commands.verify import cost_line
from autoloop.decide import baseline as cal, cost
from autoloop.decide.core import Session
from tests.decide.test_decide import Fake, program


@pytest.mark.parametrize("alpha,pooled,pairs", [(0.05, 0, 3), (0.005, 0, 5), (0.05, 12, 2),
                                                (0.005, 12, 3), (1e-12, 0, 22)])
def test_the_floor_is_the_fewest_pairs_whose_ranks_can_show_one_in_alpha(alpha, pooled, pairs) -> None:
    assert cost.floor_pairs(alpha, pooled) == pairs
    assert math.comb(pooled + 2 * pairs, pairs) >= 1 / alpha > math.comb(pooled + 2 * pairs - 2, pairs - 1)


def test_pooling_makes_a_clear_gain_and_a_no_op_cheaper() -> None:
    c = cost.expected(0.005, False, 16)
    assert c.keep_runs <= 8 < c.keep_runs_alone
    assert c.discard_runs <= c.discard_runs_alone
    assert (c.floor_alone, c.floor_pooled) == (5, 3)
    # seeded: the same figures every time
    assert cost.expected(0.005, False, 16) == c


def test_the_text_states_runs_seconds_alpha_min_effect_and_the_floor() -> None:
    c = cost.Cost(0.05, True, 8.0, 6.0, 16.0, 12.0, 3, 2)
    text = cost.cost_text(c, 2.5, min_effect="1%")
    assert text.startswith("expected cost at alpha 0.05 with confirm, min_effect 1% at 2.5 s a run: ")
    assert "a clear gain (4 run noises) is kept in ≈ 8 verifier runs (20 s)" in text
    assert "a change that does nothing discarded in ≈ 6 (15 s)" in text
    assert "within one test alone ≈ 16 (40 s) and ≈ 12 (30 s)" in text
    assert "at most C(2n, n) to 1, so no test alone can keep before 3 pairs (12 runs with confirm)" in text
    assert "C(12 + 2n, n) to 1: 2 pairs (8 runs)" in text


def test_the_calibration_says_the_cost_at_its_noise() -> None:
    rng = random.Random(2)
    fake = Fake(lambda side, k: 100.0 * math.exp(0.01 * rng.gauss(0, 1)))
    prog = program("accept:\n  rule: paired\n  alpha: 0.05\n  min_effect: 0.5%\n")
    b = cal.calibrate_paired(Session(fake), prog)
    assert len(b.stats["a"]) == cal.CALIBRATION_PAIRS        # 12 runs
    said = b.warning or b.note
    assert said is not None and "Expected cost at alpha 0.05, min_effect 0.5%" in said
    assert "a clear gain (4 × " in said and "The floor: n candidate runs ranked among 2n" in said
    assert b.stats["cost"]["keep_runs"] == cost.expected(0.05, False, 16, b.stats["min_gain"] / (
        b.stats["noise_robust"] / math.sqrt(2))).keep_runs


def test_verify_states_the_paired_cost_from_its_run_time() -> None:
    line = cost_line(program("accept:\n  rule: paired\n  alpha: 0.05\n  confirm: true\n"), 2.5)
    c = cost.expected(0.05, True, 16)
    assert line.startswith(cost.cost_text(c, 2.5, min_effect="1%"))
    assert "calibration (12 runs) measures the noise" in line
    assert cost_line(program(""), 0.5).startswith("accept.rule strict: 1 verifier run a cycle (≈ 0.5 s")
