"""The generator's memory of failed ideas: folded repeats, bounded, newest last."""

from __future__ import annotations

from pathlib import Path

from autoloop.generators.memory import Avenue, foreclosed, near_duplicate
from autoloop.generators.prompt import RECENT

from tests.journal.test_redact_prompt import program, prompt


def cycle(n: int, status: str, hypothesis: str, lesson: str = "") -> dict[str, object]:
    return {"cycle": n, "status": status, "hypothesis": hypothesis, "lesson": lesson}


HISTORY = [
    cycle(1, "discard", "Halve the learning rate", "worse"),
    cycle(2, "keep", "Use cosine decay"),
    cycle(3, "crash", "halve the learning rate!", "diverged"),
    cycle(4, "guard_fail", "(none given)"),
    cycle(5, "violation", "Edit the verifier", "refused"),
    cycle(6, "discard", "   "),
]


def test_foreclosed_folds_repeats_and_skips_kept_and_silent_cycles() -> None:
    assert foreclosed(HISTORY) == [
        Avenue(cycle=3, status="crash", hypothesis="halve the learning rate!", lesson="diverged",
               times=2),
        Avenue(cycle=5, status="violation", hypothesis="Edit the verifier", lesson="refused",
               times=1),
    ]


def test_foreclosed_keeps_the_most_recent_distinct_ideas() -> None:
    history = [cycle(i, "discard", f"idea number {i} alpha{i}") for i in range(1, 31)]
    assert [a.cycle for a in foreclosed(history, limit=3)] == [28, 29, 30]


def test_near_duplicate_finds_the_latest_foreclosed_match_only() -> None:
    assert near_duplicate("HALVE the learning rate", HISTORY)["cycle"] == 3
    assert near_duplicate("use cosine decay", HISTORY) is None        # kept, not foreclosed
    assert near_duplicate("(none given)", HISTORY) is None
    assert near_duplicate("something new entirely", HISTORY) is None


def test_prompt_lists_the_folded_avenues_of_older_cycles(tmp_path: Path) -> None:
    recent = [cycle(10 + i, "keep", f"kept change {i}") for i in range(RECENT)]
    text = prompt(tmp_path, [*HISTORY, *recent], prog=program(tmp_path))
    assert "- [crash, tried 2x, last cycle 3] halve the learning rate! — diverged" in text
    assert "- [violation, last cycle 5] Edit the verifier — refused" in text
