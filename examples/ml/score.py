"""The fixed score (verifier.score): runs from the start commit's tree with the held-out labels'
folder (program.md `private`) readable, which the training run cannot read. Prints
`val_loss: X`, the mean cross-entropy of $AUTOLOOP_OUTPUT/predictions.csv against the labels
(lower is better), and `val_accuracy: Y`. Usage: score.py LABELS.csv"""

from __future__ import annotations

import csv
import math
import os
import sys
from pathlib import Path


def main(labels_path: str) -> int:
    with open(labels_path, newline="") as f:
        labels = [int(r[0]) for r in list(csv.reader(f))[1:]]
    try:
        with open(Path(os.environ["AUTOLOOP_OUTPUT"]) / "predictions.csv", newline="") as f:
            preds = [float(r[0]) for r in list(csv.reader(f))[1:]]
    except (OSError, ValueError, IndexError) as exc:
        print(f"error: no readable predictions: {exc}", file=sys.stderr)
        return 1
    if len(preds) != len(labels):
        print(f"error: {len(preds)} predictions for {len(labels)} held-out inputs", file=sys.stderr)
        return 1
    if not all(math.isfinite(p) for p in preds):
        print("error: a prediction is not a finite number", file=sys.stderr)
        return 1
    loss, correct = 0.0, 0
    for p, y in zip(preds, labels):
        p = min(max(p, 1e-7), 1.0 - 1e-7)   # a confident wrong answer costs a lot, not infinity
        loss -= math.log(p) if y == 1 else math.log(1.0 - p)
        correct += (p >= 0.5) == (y == 1)
    print(f"val_accuracy: {correct / len(labels):.4f}")
    print(f"val_loss: {loss / len(labels):.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
