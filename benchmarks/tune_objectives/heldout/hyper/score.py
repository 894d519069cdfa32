"""Scores hyper/params.py: a deterministic stand-in for a validation error (lower is better).

Batch norm moves the best batch size up, deeper nets want more weight decay and dropout.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

NORM_COST = {"none": 0.2, "batch": 0.0, "layer": 0.05}


def objective(BATCH: float, WEIGHT_DECAY: float, DROPOUT: float, LAYERS: float, NORM: str) -> float:
    best_batch = 6.5 if NORM == "batch" else 5.0
    batch = (math.log2(BATCH) - best_batch) ** 2 / 20
    decay = (math.log10(WEIGHT_DECAY) + 4.5 - 0.3 * (LAYERS - 3)) ** 2 * 0.1
    dropout = (DROPOUT - 0.1 - 0.05 * LAYERS) ** 2 * 2
    layers = (LAYERS - 4) ** 2 / 25
    return 0.05 + batch + decay + dropout + layers + NORM_COST[NORM]


def main() -> int:
    values: dict = {}
    exec(compile((Path(__file__).parent / "params.py").read_text(), "params.py", "exec"), values)
    keys = ("BATCH", "WEIGHT_DECAY", "DROPOUT", "LAYERS", "NORM")
    print(f"error: {objective(**{k: values[k] for k in keys}):.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
