"""The keep/discard rule (contract §5). Pure functions."""

from __future__ import annotations

from autoloop.program import Direction


def better(direction: Direction, candidate: float, incumbent: float) -> bool:
    """Strictly better in `direction`; a tie is not a gain."""
    return candidate < incumbent if direction == "minimize" else candidate > incumbent


def reached(direction: Direction, value: float | None, target: float | None) -> bool:
    """Has `value` reached the stop target (inclusive)?"""
    if value is None or target is None:
        return False
    return value <= target if direction == "minimize" else value >= target
