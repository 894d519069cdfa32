"""Scores spread/params.py: a shifted bowl over eight parameters on their own scales; minimum 0."""
from __future__ import annotations

import math
import sys
from pathlib import Path


def objective(P1: float, P2: float, P3: float, P4: float, P5: float, P6: float, P7: float,
              P8: float) -> float:
    terms = ((P1 - 0.8) / 0.5, (P2 - 30) / 40, (math.log10(P3) - 0.2) / 2, (math.log10(P4) - 1.0) / 1.5,
             (P5 - 20) / 20, (P6 - 1.5) / 4, (math.log10(P7) + 3.0) / 2, (math.log2(P8) - 3.0) / 3)
    return sum(t * t for t in terms)


def main() -> int:
    values: dict = {}
    exec(compile((Path(__file__).parent / "params.py").read_text(), "params.py", "exec"), values)
    print(f"loss: {objective(**{f'P{i}': values[f'P{i}'] for i in range(1, 9)}):.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
