"""Direction lives here: what "better" means for a metric (contract §5). Pure functions."""

from __future__ import annotations

from autoloop.specs import Direction


def orientation(direction: Direction | str) -> int:
    """+1 when a larger metric is better, -1 when a smaller one is."""
    return 1 if direction == "maximize" else -1


def gain_of(direction: Direction | str, incumbent: float, candidate: float) -> float:
    """How much better `candidate` is than `incumbent`, in metric units (negative: worse)."""
    return orientation(direction) * (candidate - incumbent)


def better(direction: Direction | str, candidate: float, incumbent: float) -> bool:
    """Strictly better in `direction`; a tie is not a gain."""
    return candidate < incumbent if direction == "minimize" else candidate > incumbent


def reached(direction: Direction | str, value: float | None, target: float | None) -> bool:
    """Has `value` reached the stop target (inclusive)?"""
    if value is None or target is None:
        return False
    return value <= target if direction == "minimize" else value >= target
