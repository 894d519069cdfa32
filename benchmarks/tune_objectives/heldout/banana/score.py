"""Scores banana/params.py: (3 - X)^2 + 5 (Y - X^2)^2, a wide curved valley."""
from __future__ import annotations

import sys
from pathlib import Path


def objective(X: float, Y: float) -> float:
    return (3.0 - X) ** 2 + 5.0 * (Y - X * X) ** 2


def main() -> int:
    values: dict = {}
    exec(compile((Path(__file__).parent / "params.py").read_text(), "params.py", "exec"), values)
    print(f"loss: {objective(values['X'], values['Y']):.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
