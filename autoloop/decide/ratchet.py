"""Direction lives here: what "better" means for a metric (contract §5). Pure functions."""

from __future__ import annotations

from autoloop.base.specs import Direction


def orientation(direction: Direction | str) -> int:   # +1: a larger metric is better
    return 1 if direction == "maximize" else -1


def gain_of(direction: Direction | str, incumbent: float, candidate: float) -> float:
    """How much better `candidate` is than `incumbent`, in metric units (negative: worse)."""
    return orientation(direction) * (candidate - incumbent)


def better(direction: Direction | str, candidate: float, incumbent: float) -> bool:
    return gain_of(direction, incumbent, candidate) > 0   # a tie is not a gain


def reached(direction: Direction | str, value: float | None, target: float | None) -> bool:
    """Has `value` reached the stop target (inclusive)?"""
    if value is None or target is None:
        return False
    return value <= target if direction == "minimize" else value >= target
