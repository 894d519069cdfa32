"""What one walk of a work tree costs: autoloop.disk.snapshot.Snapshotter.take (lstat + content hash,
hashes cached by stat identity) and autoloop.disk.watch.StatTree.verification(...).take (lstat only),
on a tree of N small files, cold (first walk) and warm (unchanged tree, the common case). With
--against REV, REV's snapshot.py is timed too, in alternating rounds on the same tree, so both
see the same machine load (issue 17: the one walker must be no slower than the ones it replaced).

    python benchmarks/tree_walk.py --files 10000
    python benchmarks/tree_walk.py --files 10000 --against main
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from autoloop.disk import snapshot  # noqa: E402
from autoloop.base.walk import RACY_NS  # noqa: E402
from autoloop.disk.watch import StatTree  # noqa: E402

_PER_FOLDER = 100


def make_tree(root: Path, files: int) -> None:
    for i in range(files):
        folder = root / f"d{i // _PER_FOLDER}"
        folder.mkdir(exist_ok=True)
        (folder / f"f{i}.py").write_text(f"x = {i}\n")
    time.sleep(2 * RACY_NS / 1e9)   # settled: warm walks may trust their cache


def load_old(rev: str) -> types.ModuleType:
    """REV's snapshot.py as a module of its own (it imports only the standard library)."""
    src = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:autoloop/disk/snapshot.py"],
                         check=True, capture_output=True, text=True).stdout
    mod = types.ModuleType(f"snapshot_{rev}")
    sys.modules[mod.__name__] = mod   # dataclasses look their module up
    exec(compile(src, f"{rev}:autoloop/disk/snapshot.py", "exec"), mod.__dict__)
    return mod


def timed(fn: Callable[[], object], repeat: int) -> float:
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - start) / repeat * 1000


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--against", help="a git revision whose snapshot.py to time side by side")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_tree(root, args.files)
        sides: dict[str, types.ModuleType] = {"this tree": snapshot}
        if args.against:
            sides[args.against] = load_old(args.against)
        results: dict[str, list[float]] = {}
        for _ in range(args.rounds):
            for name, mod in sides.items():
                snap = mod.Snapshotter(root)
                results.setdefault(f"snapshot cold   ({name})", []).append(timed(snap.take, 1))
                results.setdefault(f"snapshot warm   ({name})", []).append(timed(snap.take, args.repeat))
            results.setdefault("stat walk       (this tree)", []).append(
                timed(StatTree.verification(root).take, args.repeat))
    print(f"{args.files} files, median of {args.rounds} rounds (ms per walk; a shared machine is noisy):")
    for name, ms in results.items():
        print(f"  {name:40s} {statistics.median(ms):8.1f}   (min {min(ms):.1f}, max {max(ms):.1f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
