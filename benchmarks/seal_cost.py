"""What sealing a measurement's steps costs (contract §11): before every step but the first, the
verification tree is made exactly the commit again — what a step left (untracked and ignored)
removed, then a walk proving nothing more is there (autoloop.git.worktree.Worktree.reseal) — and
$TMPDIR is emptied. Timed on a committed tree of N small files, for a step that left nothing
and one that left a pytest-sized mess (a cache folder, bytecode, an answers file), given the
walk a run's after-step check takes anyway; the cost of that walk (what `verify` and the probe
pay on top, once per step) is printed beside. Printed beside a 1 s measurement's
budget: the goal is under 10% (100 ms) per step.

    python benchmarks/seal_cost.py --files 1000 5000 20000
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from autoloop.base.walk import RACY_NS, remove_tree  # noqa: E402
from autoloop.disk.watch import StatTree  # noqa: E402
from autoloop.git.worktree import Worktree  # noqa: E402

_PER_FOLDER = 100


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b",
           "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@b"}
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout


def mess(tree: Path) -> None:
    """What a pytest guard typically leaves, plus a planted answers file."""
    for sub in (".pytest_cache/v/cache", "pkg/__pycache__", "build"):
        (tree / sub).mkdir(parents=True, exist_ok=True)
    for i in range(40):
        (tree / "pkg" / "__pycache__" / f"m{i}.cpython-311.pyc").write_bytes(b"\0" * 2048)
    (tree / ".pytest_cache" / "v" / "cache" / "lastfailed").write_text("{}")
    (tree / "build" / "answers.json").write_text("{}" * 1000)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, nargs="+", default=[1000, 5000, 20000])
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    print(f"{'files':>7}  {'clean step ms':>14}  {'messy step ms':>14}  {'% of 1 s (messy)':>17}  "
          f"{'one walk ms':>14}")
    for n in args.files:
        with tempfile.TemporaryDirectory() as tmp:
            repo = Path(tmp) / "repo"
            repo.mkdir()
            git(repo, "init", "-q")
            for i in range(n):
                folder = repo / "pkg" / f"d{i // _PER_FOLDER}"
                folder.mkdir(parents=True, exist_ok=True)
                (folder / f"f{i}.py").write_text(f"x = {i}\n")
            (repo / ".gitignore").write_text("__pycache__/\n.pytest_cache/\nbuild/\n")
            git(repo, "add", "-A")
            git(repo, "commit", "-q", "-m", "start")
            commit = git(repo, "rev-parse", "HEAD").strip()
            common = Path(git(repo, "rev-parse", "--git-common-dir").strip())
            wt = Worktree(repo, (repo / common).resolve(), Path(tmp) / "wt")
            wt.open(commit)
            time.sleep(2 * RACY_NS / 1e9)
            watch = StatTree.verification(wt.path)
            assert not wt.reseal(commit, picture=watch.take())   # warm the proof's hash cache, as a run's first step does
            clean, messy, walks = [], [], []
            for _ in range(args.rounds):
                # a run's step hands over the walk its after-step check took anyway (not timed here:
                # that walk was paid before this change); `verify` and the probe take their own
                picture = watch.take()
                t0 = time.perf_counter()
                assert not wt.reseal(commit, picture=picture)
                clean.append(time.perf_counter() - t0)
                mess(wt.path)
                picture = watch.take()
                t0 = time.perf_counter()
                assert not wt.reseal(commit, picture=picture)
                messy.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                watch.take()
                walks.append(time.perf_counter() - t0)
            remove_tree(wt.path, quiet=True)
            c, m, w = (statistics.median(x) * 1e3 for x in (clean, messy, walks))
            print(f"{n:>7}  {c:>14.1f}  {m:>14.1f}  {m / 10:>16.1f}%  {w:>14.1f}")


if __name__ == "__main__":
    main()
