"""Scores noisysteps/params.py: a run time on plateaus with 1.5% noise per run.

`objective` is the noise-free time (what the benchmark reports); `main` prints one noisy run.
"""
from __future__ import annotations

import math
import random
import sys
from pathlib import Path


def objective(QUEUE: float, RATIO: float) -> float:
    return (1.0 + 0.25 * math.floor(abs(math.log2(QUEUE) - 4.2))
            + 0.2 * math.floor(abs(RATIO - 0.35) * 5))


def noisy(values: dict, rng: random.Random) -> float:
    return objective(**values) * (1.0 + rng.gauss(0.0, 0.015))


def main() -> int:
    values: dict = {}
    exec(compile((Path(__file__).parent / "params.py").read_text(), "params.py", "exec"), values)
    print(f"seconds: {objective(values['QUEUE'], values['RATIO']) * (1 + random.gauss(0, 0.015)):.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
