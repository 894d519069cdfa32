"""Makes the sealed ML example a repository of its own: `python3 setup.py DEST`.

DEST gets train.py (what the loop edits), produce.py and score.py (fixed), program.md and
data/: a training set and the held-out inputs. The held-out LABELS go to DEST-private/,
outside the repository, named in program.md's `private`: only the score reads them; the
generator and the training run cannot. Every setup draws a fresh secret seed (the data's
rotation, noise and label flips), so nothing in the repository predicts the labels. Offline,
standard library only; then `cd DEST && autoloop run program.md --tag ml`."""

from __future__ import annotations

import argparse
import csv
import math
import random
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
TRAIN, TEST = 600, 2000
NOISE_DIMS = 2      # inputs that carry nothing: the model must learn to ignore them
FLIP = 0.05         # label noise: no model scores a perfect loss


def draw(n: int, rng: random.Random, angle: float) -> tuple[list[list[float]], list[int]]:
    """Two interleaving half circles, rotated by `angle`, with Gaussian noise and NOISE_DIMS
    extra inputs of pure noise; FLIP of the labels flipped."""
    xs, ys = [], []
    c, s = math.cos(angle), math.sin(angle)
    for i in range(n):
        label = i % 2
        t = rng.uniform(0.0, math.pi)
        x, y = (math.cos(t), math.sin(t)) if label == 0 else (1.0 - math.cos(t), 0.5 - math.sin(t))
        x, y = x - 0.5 + rng.gauss(0.0, 0.2), y - 0.25 + rng.gauss(0.0, 0.2)
        xs.append([round(c * x - s * y, 5), round(s * x + c * y, 5),
                   *(round(rng.gauss(0.0, 1.0), 5) for _ in range(NOISE_DIMS))])
        ys.append(label if rng.random() >= FLIP else 1 - label)
    return xs, ys


def write(path: Path, header: list[str], rows: list[list[object]]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dest", type=Path, help="the new repository (must not exist)")
    dest = ap.parse_args().dest.expanduser().resolve()
    private = dest.with_name(dest.name + "-private")
    if dest.exists() or private.exists():
        sys.exit(f"setup: {dest} or {private} exists already; name a new folder")
    rng = random.Random(secrets.randbits(64))   # never written anywhere
    angle = rng.uniform(0.0, 2 * math.pi)
    train_x, train_y = draw(TRAIN, rng, angle)
    test_x, test_y = draw(TEST, rng, angle)
    (dest / "data").mkdir(parents=True)
    private.mkdir(mode=0o700)
    cols = [f"x{i}" for i in range(len(train_x[0]))]
    write(dest / "data" / "train.csv", [*cols, "y"], [[*x, y] for x, y in zip(train_x, train_y)])
    write(dest / "data" / "test_inputs.csv", cols, test_x)
    write(private / "labels.csv", ["y"], [[y] for y in test_y])
    for name in ("train.py", "produce.py", "score.py", "README.md"):
        shutil.copy(HERE / name, dest / name)
    (dest / ".gitignore").write_text("__pycache__/\n")
    text = (HERE / "program.md.in").read_text().replace("@PRIVATE@", str(private))
    (dest / "program.md").write_text(text)
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "the sealed ML example"]):
        subprocess.run(["git", *args], cwd=dest, check=True)
    print(f"repository: {dest}\nheld-out labels (private, outside it): {private / 'labels.csv'}")
    print(f"next: cd {dest} && autoloop verify program.md && autoloop run program.md --tag ml")
    return 0


if __name__ == "__main__":
    sys.exit(main())
