"""Scores rugged/params.py: Rastrigin-like in X, Y around (0.7, -0.4), plus a bowl in K; minimum 0."""
from __future__ import annotations

import math
import sys
from pathlib import Path


def objective(X: float, Y: float, K: float) -> float:
    total = 0.0
    for x in (X - 0.7, Y + 0.4):
        total += x * x + 2.0 * (1.0 - math.cos(2 * math.pi * x))
    return total + (K + 2) ** 2 / 4


def main() -> int:
    values: dict = {}
    exec(compile((Path(__file__).parent / "params.py").read_text(), "params.py", "exec"), values)
    print(f"loss: {objective(values['X'], values['Y'], values['K']):.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
