"""Writing a candidate's objects (blob, trees along the changed path, commit): autoloop's own
writer (autoloop.git.objects) vs pygit2 (libgit2) vs the git CLI (private index: update-index,
write-tree, commit-tree), side by side in one process, on 1k- and 100k-file trees.

    pip install pygit2        # only for this comparison; autoloop does not depend on it
    python benchmarks/git_objects.py [--files 1000 100000] [--rounds 5] [--cycles 50]

Each cycle changes one file at a random place and writes its candidate on the same base commit.
Rounds alternate the three ways so that they see the same machine load; the median per-cycle
time over rounds is reported. It also checks what the choice between them depends on:

- that the trees and commits of each way are identical (same object ids as git's);
- that a commit written by pygit2 is byte for byte `git commit-tree`'s (`git cat-file commit`);
- whether each way can write to a SHA-256 repository (`git init --object-format=sha256`).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from autoloop.git.objects import ObjectStore, Trees, changed_entries, derive  # noqa: E402

try:
    import pygit2
except ImportError:  # the comparison needs it; autoloop does not
    sys.exit("pip install pygit2 first")

NAME, EMAIL, WHEN = "Bench", "bench@example.com", 1_700_000_000
ENV = {**os.environ, "GIT_AUTHOR_NAME": NAME, "GIT_AUTHOR_EMAIL": EMAIL, "GIT_COMMITTER_NAME": NAME,
       "GIT_COMMITTER_EMAIL": EMAIL, "GIT_AUTHOR_DATE": f"{WHEN} +0000",
       "GIT_COMMITTER_DATE": f"{WHEN} +0000", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}


def git(repo: Path, *args: str, env: dict[str, str] | None = None, input: bytes | None = None) -> str:
    return subprocess.run(["git", *args], cwd=repo, env=env or ENV, input=input, check=True,
                          capture_output=True).stdout.decode()


def make_repo(root: Path, files: int, fmt: str = "sha1") -> tuple[Path, str, list[str]]:
    repo = root / f"repo-{files}-{fmt}"
    git(root, "init", "-q", f"--object-format={fmt}", str(repo))
    paths = []
    per = 100
    for i in range(files):
        rel = f"d{i // (per * 10):03d}/s{(i // per) % 10}/f{i % per:03d}.txt"
        full = repo / rel
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_text(f"file {i}\n")
        paths.append(rel)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    return repo, git(repo, "rev-parse", "HEAD").strip(), paths


def by_hand(repo: Path, base: str) -> Callable[[str], str]:
    fmt = git(repo, "rev-parse", "--show-object-format").strip()
    store = ObjectStore(repo / ".git" / "objects", fmt)
    trees = Trees.parse(git(repo, "ls-tree", "-r", "-t", "-z", "--full-tree", base),
                        git(repo, "rev-parse", base + "^{tree}").strip())

    def one(rel: str) -> str:
        made = derive(trees, changed_entries(repo, [rel], store), store)
        return store.commit(made.root, base, NAME, EMAIL, "candidate\n", when=WHEN)
    return one


def with_pygit2(repo: Path, base: str) -> Callable[[str], str]:
    r = pygit2.Repository(str(repo))
    base_tree = r[base].peel(pygit2.Tree)
    who = pygit2.Signature(NAME, EMAIL, WHEN, 0)

    def rebuild(tree: pygit2.Tree | None, parts: list[str], blob: pygit2.Oid, mode: int) -> pygit2.Oid:
        tb = r.TreeBuilder(tree) if tree is not None else r.TreeBuilder()
        if len(parts) == 1:
            tb.insert(parts[0], blob, mode)
        else:
            sub = tree[parts[0]] if tree is not None and parts[0] in tree else None
            tb.insert(parts[0], rebuild(sub, parts[1:], blob, mode), pygit2.GIT_FILEMODE_TREE)
        return tb.write()

    def one(rel: str) -> str:
        full = repo / rel
        blob = r.create_blob((full).read_bytes())
        mode = pygit2.GIT_FILEMODE_BLOB_EXECUTABLE if os.stat(full).st_mode & 0o100 else pygit2.GIT_FILEMODE_BLOB
        tree = rebuild(base_tree, rel.split("/"), blob, mode)
        return str(r.create_commit(None, who, who, "candidate\n", tree, [pygit2.Oid(hex=base)]))
    return one


def with_git(repo: Path, base: str) -> Callable[[str], str]:
    index = repo / ".git" / "bench-index"
    env = {**ENV, "GIT_INDEX_FILE": str(index)}
    git(repo, "read-tree", base, env=env)
    seed = index.read_bytes()

    def one(rel: str) -> str:
        index.write_bytes(seed)   # as autoloop copies its sealed index: the base's, each cycle
        git(repo, "update-index", "--add", "--remove", "-z", "--stdin", env=env, input=rel.encode() + b"\0")
        tree = git(repo, "write-tree", env=env).strip()
        return git(repo, "commit-tree", tree, "-p", base, env=env, input=b"candidate\n").strip()
    return one


def bench(files: int, rounds: int, cycles: int, root: Path) -> None:
    t = time.perf_counter()
    repo, base, paths = make_repo(root, files)
    print(f"\n{files} files (made in {time.perf_counter() - t:.1f} s), {rounds} rounds x {cycles} cycles")
    ways = {"autoloop.git.objects": by_hand, "pygit2": with_pygit2, "git CLI": with_git}
    setup: dict[str, list[float]] = {k: [] for k in ways}
    per: dict[str, list[float]] = {k: [] for k in ways}
    rng = random.Random(files)
    for rnd in range(rounds):
        picks = [rng.choice(paths) for _ in range(cycles)]
        for p in picks:
            (repo / p).write_text(f"changed {rng.random()}\n")
        made: dict[str, list[str]] = {}
        for name, make in ways.items():
            t0 = time.perf_counter()
            one = make(repo, base)
            t1 = time.perf_counter()
            made[name] = [one(p) for p in picks]
            setup[name].append(t1 - t0)
            per[name].append((time.perf_counter() - t1) / cycles)
        first = made["autoloop.git.objects"]
        for name, ids in made.items():
            if ids != first:
                raise SystemExit(f"{name} wrote other commits than autoloop.git.objects")
        for p in picks:
            git(repo, "checkout", "-q", "--", p)
    for name in ways:
        print(f"  {name:17s} per candidate {statistics.median(per[name]) * 1e3:8.3f} ms "
              f"[{min(per[name]) * 1e3:.3f} - {max(per[name]) * 1e3:.3f}]   "
              f"setup (base tree once) {statistics.median(setup[name]) * 1e3:8.1f} ms")
    print("  same commit ids from all three: yes")


def commit_bytes(root: Path) -> None:
    repo, base, _ = make_repo(root, 3)
    r = pygit2.Repository(str(repo))
    tree = git(repo, "rev-parse", "HEAD^{tree}").strip()
    for off in (0, 330, -480):
        who = pygit2.Signature(NAME, EMAIL, WHEN, off)
        ours = str(r.create_commit(None, who, who, "msg\n\nbody\n", pygit2.Oid(hex=tree), [pygit2.Oid(hex=base)]))
        sign = "+" if off >= 0 else "-"
        date = f"{WHEN} {sign}{abs(off) // 60:02d}{abs(off) % 60:02d}"
        theirs = git(repo, "commit-tree", tree, "-p", base, input=b"msg\n\nbody\n",
                     env={**ENV, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}).strip()
        same = git(repo, "cat-file", "commit", ours) == git(repo, "cat-file", "commit", theirs)
        print(f"pygit2 commit bytes == git commit-tree's (tz offset {off:+d} min): {same}")


def sha256(root: Path) -> None:
    repo, base, paths = make_repo(root, 3, "sha256")
    (repo / paths[0]).write_text("changed\n")
    want = None
    for name, make in (("git CLI", with_git), ("autoloop.git.objects", by_hand), ("pygit2", with_pygit2)):
        try:
            got = make(repo, base)(paths[0])
        except Exception as exc:  # noqa: BLE001 - reported, it is the finding
            print(f"SHA-256 repository, {name}: fails ({type(exc).__name__}: {exc})")
            continue
        want = want or got
        print(f"SHA-256 repository, {name}: {'ok, same commit as git' if got == want else 'DIFFERENT commit'}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, nargs="+", default=[1000, 100_000])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cycles", type=int, default=50)
    args = ap.parse_args()
    print(f"pygit2 {pygit2.__version__} (libgit2 {pygit2.LIBGIT2_VERSION}); "
          f"{subprocess.run(['git', '--version'], capture_output=True, text=True).stdout.strip()}")
    with tempfile.TemporaryDirectory(prefix="autoloop-objects-") as tmp:
        root = Path(tmp)
        commit_bytes(root)
        sha256(root)
        for n in args.files:
            bench(n, args.rounds, args.cycles, root)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
