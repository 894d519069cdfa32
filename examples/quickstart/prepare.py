"""The fixed half of the quickstart: data, training call and evaluation. Not editable by the loop.

Prints `val_loss: X`, the mean binary cross-entropy of train.py's model on a held-out split
of a synthetic "two moons" data set. Everything is seeded, so the same train.py always gives
the same number; run it from anywhere (it finds train.py next to itself).
"""

from __future__ import annotations

import math
import random
import sys
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
TRAIN_SIZE = 600
VAL_SIZE = 1000
NOISE = 0.25


def make_moons(n: int, seed: int) -> tuple[list[tuple[float, float]], list[int]]:
    """Two interleaving half circles with Gaussian noise: not linearly separable."""
    rng = random.Random(seed)
    xs: list[tuple[float, float]] = []
    ys: list[int] = []
    for i in range(n):
        label = i % 2
        t = rng.uniform(0.0, math.pi)
        if label == 0:
            x, y = math.cos(t), math.sin(t)
        else:
            x, y = 1.0 - math.cos(t), 0.5 - math.sin(t)
        xs.append((x - 0.5 + rng.gauss(0.0, NOISE), y - 0.25 + rng.gauss(0.0, NOISE)))
        ys.append(label)
    return xs, ys


def load_train_module() -> types.ModuleType:
    # Load train.py from its source, by path: the verifier runs from the repository root, an
    # unrelated `train` module elsewhere on sys.path must never be picked up instead, and a
    # cached .pyc of an earlier train.py (same size, same mtime second) must never be run.
    path = HERE / "train.py"
    module = types.ModuleType("quickstart_train")
    module.__file__ = str(path)
    sys.modules[module.__name__] = module   # as an import would: dataclasses, pickle need it
    exec(compile(path.read_bytes(), str(path), "exec", dont_inherit=True), module.__dict__)
    return module


def main() -> int:
    train_x, train_y = make_moons(TRAIN_SIZE, seed=1)
    val_x, val_y = make_moons(VAL_SIZE, seed=2)
    module = load_train_module()
    model = module.train(train_x, train_y)
    total = 0.0
    correct = 0
    for x, y in zip(val_x, val_y):
        p = float(module.predict(model, x))
        if not math.isfinite(p):
            print("error: the model predicted a non-finite probability", file=sys.stderr)
            return 1
        p = min(max(p, 1e-7), 1.0 - 1e-7)   # a confident wrong answer costs a lot, not infinity
        total -= math.log(p) if y == 1 else math.log(1.0 - p)
        correct += (p >= 0.5) == (y == 1)
    print(f"val_accuracy: {correct / len(val_y):.4f}")
    print(f"val_loss: {total / len(val_y):.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
