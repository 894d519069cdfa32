"""The model and its training: the file autoloop may edit.

produce.py (fixed) calls train() with the training set and a wall-clock deadline, then
predict() for every held-out input. A change wins by learning more in the same time, not by
training longer: the deadline is produce.py's. The constants carry `tune:` markers, so
`generator.kind: tune` searches them offline; an agent may rewrite anything here instead (pure
standard-library Python). The starting values are deliberately poor.
"""

from __future__ import annotations

import math
import random
import time

# Marker syntax: `NAME = VALUE  # tune: LO..HI [int] [log]`
LEARNING_RATE = 0.002  # tune: 1e-4..1 log
HIDDEN = 2  # tune: 1..24 int
BATCH_SIZE = 64  # tune: 1..128 int log
MOMENTUM = 0.0  # tune: 0..0.95
SEED = 0


def train(xs: list[list[float]], ys: list[int], deadline: float) -> dict[str, list[float]]:
    """A d-HIDDEN-1 tanh network fitted with SGD on cross-entropy until `deadline` (time.monotonic)."""
    rng = random.Random(SEED)
    d, h = len(xs[0]), HIDDEN
    w1 = [rng.gauss(0.0, 1.0 / math.sqrt(d)) for _ in range(d * h)]
    b1 = [0.0] * h
    w2 = [rng.gauss(0.0, 1.0 / math.sqrt(h)) for _ in range(h)]
    b2 = [0.0]
    params = [w1, b1, w2, b2]
    velocity = [[0.0] * len(p) for p in params]
    batch = max(1, min(BATCH_SIZE, len(xs)))
    while time.monotonic() < deadline:
        grads = [[0.0] * len(p) for p in params]
        gw1, gb1, gw2, gb2 = grads
        for _ in range(batch):
            i = rng.randrange(len(xs))
            x = xs[i]
            hidden = [math.tanh(sum(w1[j * d + k] * x[k] for k in range(d)) + b1[j]) for j in range(h)]
            z = b2[0] + sum(w2[j] * hidden[j] for j in range(h))
            g = _sigmoid(z) - ys[i]
            gb2[0] += g
            for j in range(h):
                gw2[j] += g * hidden[j]
                dh = g * w2[j] * (1.0 - hidden[j] * hidden[j])
                for k in range(d):
                    gw1[j * d + k] += dh * x[k]
                gb1[j] += dh
        scale = LEARNING_RATE / batch
        for p, gr, v in zip(params, grads, velocity):
            for k in range(len(p)):
                v[k] = MOMENTUM * v[k] - scale * gr[k]
                p[k] += v[k]
    return {"w1": w1, "b1": b1, "w2": w2, "b2": b2}


def predict(model: dict[str, list[float]], x: list[float]) -> float:
    """Probability that x is of class 1."""
    w1, b1, w2, b2 = model["w1"], model["b1"], model["w2"], model["b2"]
    d = len(x)
    z = b2[0]
    for j in range(len(b1)):
        z += w2[j] * math.tanh(sum(w1[j * d + k] * x[k] for k in range(d)) + b1[j])
    return _sigmoid(z)


def _sigmoid(z: float) -> float:
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)
