"""A tiny neural network, trained with plain SGD in pure Python: the file autoloop may edit.

prepare.py (fixed) builds the data set, calls train() and scores the model on a held-out
split. The constants below carry `tune:` markers, so `generator.kind: tune` can search them
offline; an agent generator may rewrite anything in this file instead. The starting values
are deliberately poor: a learning rate far too small, a net too narrow, no momentum.
"""

from __future__ import annotations

import math
import random

# Marker syntax: `NAME = VALUE  # tune: LO..HI [int] [log]` (log: search in log space).
LEARNING_RATE = 0.003  # tune: 1e-4..3 log
HIDDEN = 2  # tune: 1..16 int
BATCH_SIZE = 128  # tune: 1..256 int log
MOMENTUM = 0.0  # tune: 0..0.95

# The budget is a fixed number of training examples seen, not a number of steps, so the batch
# size trades steps for gradient quality instead of buying more compute (only HIDDEN makes a
# run slower, and its range is capped for that reason). Not tuned.
EXAMPLES = 128_000
SEED = 0


def train(xs: list[tuple[float, float]], ys: list[int]) -> dict[str, list[float]]:
    """Fit a 2-HIDDEN-1 tanh network with binary cross-entropy; returns its weights."""
    rng = random.Random(SEED)
    h = HIDDEN
    w1 = [rng.gauss(0.0, 1.0) for _ in range(2 * h)]       # input -> hidden, row-major
    b1 = [0.0] * h
    w2 = [rng.gauss(0.0, 1.0 / math.sqrt(h)) for _ in range(h)]
    b2 = [0.0]
    params = [w1, b1, w2, b2]
    velocity = [[0.0] * len(p) for p in params]
    order = list(range(len(xs)))
    batch = max(1, min(BATCH_SIZE, len(xs)))
    steps = EXAMPLES // batch
    cursor = len(order)
    for _ in range(steps):
        grads = [[0.0] * len(p) for p in params]
        gw1, gb1, gw2, gb2 = grads
        for _ in range(batch):
            if cursor == len(order):
                rng.shuffle(order)
                cursor = 0
            i = order[cursor]
            cursor += 1
            x0, x1 = xs[i]
            hidden = [math.tanh(w1[2 * j] * x0 + w1[2 * j + 1] * x1 + b1[j]) for j in range(h)]
            z = b2[0] + sum(w2[j] * hidden[j] for j in range(h))
            d = _sigmoid(z) - ys[i]                      # dLoss/dz for cross-entropy
            gb2[0] += d
            for j in range(h):
                gw2[j] += d * hidden[j]
                dh = d * w2[j] * (1.0 - hidden[j] * hidden[j])
                gw1[2 * j] += dh * x0
                gw1[2 * j + 1] += dh * x1
                gb1[j] += dh
        scale = LEARNING_RATE / batch
        for p, g, v in zip(params, grads, velocity):
            for k in range(len(p)):
                v[k] = MOMENTUM * v[k] - scale * g[k]
                p[k] += v[k]
    return {"w1": w1, "b1": b1, "w2": w2, "b2": b2}


def predict(model: dict[str, list[float]], x: tuple[float, float]) -> float:
    """Probability that x belongs to class 1."""
    w1, b1, w2, b2 = model["w1"], model["b1"], model["w2"], model["b2"]
    x0, x1 = x
    z = b2[0]
    for j in range(len(b1)):
        z += w2[j] * math.tanh(w1[2 * j] * x0 + w1[2 * j + 1] * x1 + b1[j])
    return _sigmoid(z)


def _sigmoid(z: float) -> float:
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)
