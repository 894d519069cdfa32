"""Step 5 (autoloop.engine.steps.decide): the strict rule (contract §5), and of a round's keeps the best
one; the others are discarded as beaten in the round."""

from __future__ import annotations

import pytest

from tests.engine_fixture import engine  # noqa: F401 (fixture)


@pytest.mark.parametrize("val, status, lesson", [
    ("39", "keep", "kept: score 40.25 → 39 (-3.11%)"),
    ("40.25", "discard", "discarded: 40.25 ties best 40.25"),
    ("41", "discard", "discarded: 41 is worse than best 40.25"),
    ("none", "crash", "crash: "),
])
def test_strict_rule(engine, val, status, lesson):
    e = engine({"*": f'W("val.txt", "{val}")'}, guards=False)
    c = e.round().cycles[0]
    assert c.outcome is not None and c.outcome.status == status
    assert c.outcome.lesson.startswith(lesson)
    assert c.candidate is not None and c.outcome.diffstat


def test_a_failing_guard_is_guard_fail_whatever_the_metric(engine):
    e = engine({"*": 'W("val.txt", "1"); W("notes.txt", "FAIL")'})
    c = e.round().cycles[0]
    assert c.outcome is not None and c.outcome.status == "guard_fail" and "notes" in c.outcome.lesson


def test_the_best_keep_of_a_round_wins(engine):
    e = engine({"*": 'W("val.txt", {0: "39", 1: "38", 2: "41"}[int(os.environ["AUTOLOOP_WORKER"])])'},
               extra="parallel: {workers: 3}")
    rnd = e.round(k=3)
    assert rnd.winner is rnd.cycles[1]
    statuses = [c.outcome.status for c in rnd.cycles if c.outcome]
    assert statuses == ["discard", "keep", "discard"]
    beaten = rnd.cycles[0].outcome
    assert beaten is not None and f"cycle {rnd.cycles[1].n} of the same round did better" in beaten.lesson
