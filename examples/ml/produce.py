"""The fixed half that runs the candidate's code (verifier.command): trains train.py's model for
BUDGET_S seconds of wall-clock time, then writes its predicted probability for every held-out
input to $AUTOLOOP_OUTPUT/predictions.csv. It prints nothing that is read: the metric is
score.py's, which alone sees the held-out labels. Run from the repository root."""

from __future__ import annotations

import csv
import math
import os
import sys
import time
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
BUDGET_S = 2.0   # every candidate gets the same: a change wins by learning more per second


def rows(path: Path) -> list[list[str]]:
    with open(path, newline="") as f:
        return list(csv.reader(f))[1:]


def load_train() -> types.ModuleType:
    # by path, from its source: never a stale .pyc, never another `train` on sys.path
    path = HERE / "train.py"
    module = types.ModuleType("ml_train")
    module.__file__ = str(path)
    sys.modules[module.__name__] = module
    exec(compile(path.read_bytes(), str(path), "exec", dont_inherit=True), module.__dict__)
    return module


def main() -> int:
    train_rows = rows(HERE / "data" / "train.csv")
    xs = [[float(v) for v in r[:-1]] for r in train_rows]
    ys = [int(r[-1]) for r in train_rows]
    test = [[float(v) for v in r] for r in rows(HERE / "data" / "test_inputs.csv")]
    module = load_train()
    start = time.monotonic()
    model = module.train(xs, ys, start + BUDGET_S)
    trained = time.monotonic() - start
    out = Path(os.environ["AUTOLOOP_OUTPUT"]) / "predictions.csv"
    with open(out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["p"])
        for x in test:
            p = float(module.predict(model, x))
            w.writerow([repr(p) if math.isfinite(p) else "nan"])
    print(f"trained for {trained:.2f} s; {len(test)} predictions written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
