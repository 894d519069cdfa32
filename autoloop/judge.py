"""Moved to autoloop.decide (the keep rules) and autoloop.measure (running them): this path is
kept only so branches written against it still import. Delete once nothing imports it."""

from autoloop.decide.cycle import change_words
from autoloop.decide.end import coarse_value, final_estimate, final_text, needs_scipy
from autoloop.measure import Guarded, Judge, TreeRunner, holdout_spec

__all__ = ["Guarded", "Judge", "TreeRunner", "change_words", "coarse_value", "final_estimate",
           "final_text", "holdout_spec", "needs_scipy"]
