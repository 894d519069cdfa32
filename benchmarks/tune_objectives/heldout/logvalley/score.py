"""Scores logvalley/params.py: a curved valley in (log10 LR, log10 GAP), minimum 0 at LR=1e-2."""
from __future__ import annotations

import math
import sys
from pathlib import Path


def objective(LR: float, GAP: float) -> float:
    u = math.log10(LR) + 6.0        # 0..6
    v = math.log10(GAP) + 4.0       # 0..4
    return (u - 4.0) ** 2 / 4 + 10.0 * (v - 0.5 - (u - 1.0) ** 2 / 5) ** 2


def main() -> int:
    values: dict = {}
    exec(compile((Path(__file__).parent / "params.py").read_text(), "params.py", "exec"), values)
    print(f"loss: {objective(values['LR'], values['GAP']):.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
