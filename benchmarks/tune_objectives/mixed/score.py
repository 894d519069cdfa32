"""Scores mixed/params.py: a deterministic stand-in for a validation error (lower is better).

Each optimizer has its own best learning rate, depth and width interact with the activation
(sigmoid nets get worse with depth), so the categoricals matter and are not separable.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

BEST_LR = {"sgd": -1.0, "adam": -3.0, "rmsprop": -2.5}
OPT_COST = {"sgd": 0.10, "adam": 0.0, "rmsprop": 0.05}
ACT_COST = {"relu": 0.05, "tanh": 0.10, "gelu": 0.0, "sigmoid": 0.30}


def objective(DEPTH: float, LEARNING_RATE: float, WIDTH: float, ACTIVATION: str, OPTIMIZER: str) -> float:
    depth_best = 3.0 if ACTIVATION == "sigmoid" else 7.0
    lr = (math.log10(LEARNING_RATE) - BEST_LR[OPTIMIZER]) ** 2 * 0.25
    depth = (DEPTH - depth_best) ** 2 / 16
    width = (math.log2(WIDTH) - (6.0 + DEPTH / 3)) ** 2 / 12
    return 0.1 + lr + depth + width + OPT_COST[OPTIMIZER] + ACT_COST[ACTIVATION]


def main() -> int:
    values: dict = {}
    exec(compile((Path(__file__).parent / "params.py").read_text(), "params.py", "exec"), values)
    print(f"error: {objective(values['DEPTH'], values['LEARNING_RATE'], values['WIDTH'], values['ACTIVATION'], values['OPTIMIZER']):.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
