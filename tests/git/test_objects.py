"""autoloop.git.objects against git itself: the trees and commits autoloop writes by hand are the very
objects git would write (same ids), for random change sets in real repositories, and git's
strictest check accepts them."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from autoloop.git.objects import ObjectStore, Trees, changed_entries, derive


def _git(repo: Path, *args: str, env: dict[str, str] | None = None, input: bytes | None = None) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                          capture_output=True, env=env, input=input).stdout.decode()


def _listing(repo: Path, rev: str) -> list[tuple[str, str, str]]:
    out = []
    for item in _git(repo, "ls-tree", "-r", "-z", "--full-tree", rev).split("\0"):
        if item:
            meta, path = item.split("\t", 1)
            mode, _, oid = meta.split(" ")
            out.append((mode, oid, path))
    return out


NAMES = ["a", "b", "a.b", "a-b", "a0", "ä", "x y"]   # names that sort differently as folders


def _random_repo(repo: Path, rng: random.Random, object_format: str = "sha1") -> None:
    repo.mkdir()
    _git(repo, "init", "-q", f"--object-format={object_format}")
    for _ in range(30):
        rel = "/".join(rng.choice(NAMES) for _ in range(rng.randint(1, 3)))
        try:
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            if not (repo / rel).is_dir():
                (repo / rel).write_text(str(rng.random()))
        except (NotADirectoryError, FileExistsError, IsADirectoryError):
            pass
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "start")


def _random_changes(repo: Path, rng: random.Random) -> set[str]:
    """Edits, new files in new folders, deletions, a file becoming a folder and back, +x."""
    tracked = [p for p in _git(repo, "ls-files", "-z").split("\0") if p]
    paths: set[str] = set()
    for _ in range(rng.randint(1, 6)):
        op = rng.choice(["edit", "add", "delete", "file-to-folder", "folder-to-file", "exec"])
        p = rng.choice(tracked)
        try:
            if op == "edit" and (repo / p).is_file():
                (repo / p).write_text("edited " + str(rng.random()))
                paths.add(p)
            elif op == "exec" and (repo / p).is_file():
                os.chmod(repo / p, 0o755)
                paths.add(p)
            elif op == "delete" and (repo / p).is_file():
                (repo / p).unlink()
                paths.add(p)
            elif op == "add":
                new = "/".join(rng.choice(NAMES) for _ in range(rng.randint(1, 4)))
                if not (repo / new).exists():
                    (repo / new).parent.mkdir(parents=True, exist_ok=True)
                    (repo / new).write_text("new")
                    paths.add(new)
            elif op == "file-to-folder" and (repo / p).is_file():
                (repo / p).unlink()
                (repo / p).mkdir()
                (repo / p / "inside").write_text("i")
                paths |= {p, p + "/inside"}
            elif op == "folder-to-file" and "/" in p:
                folder = p.rsplit("/", 1)[0]
                if (repo / folder).is_dir():
                    paths |= {t for t in tracked if t.startswith(folder + "/")} | {folder}
                    shutil.rmtree(repo / folder)
                    (repo / folder).write_text("a file where a folder was")
        except (NotADirectoryError, FileExistsError, IsADirectoryError, FileNotFoundError):
            pass
    return paths


@pytest.mark.parametrize("object_format", ["sha1", "sha256"])
@pytest.mark.parametrize("seed", range(12))
def test_trees_written_by_hand_are_the_trees_git_writes(tmp_path, seed, object_format):
    rng = random.Random(seed)
    repo = tmp_path / "r"
    _random_repo(repo, rng, object_format)
    head = _git(repo, "rev-parse", "HEAD").strip()
    base = Trees.parse(_git(repo, "ls-tree", "-r", "-t", "-z", "--full-tree", head),
                       _git(repo, "rev-parse", "HEAD^{tree}").strip())
    assert base.files() == _listing(repo, head)
    paths = _random_changes(repo, rng)
    store = ObjectStore(repo / ".git" / "objects", object_format)
    made = derive(base, changed_entries(repo, sorted(paths), store), store)

    env = dict(os.environ, GIT_INDEX_FILE=str(tmp_path / "index"))   # git's own way, for comparison
    _git(repo, "read-tree", head, env=env)
    _git(repo, "update-index", "--add", "--remove", "--replace", "-z", "--stdin", env=env,
         input="\0".join(sorted(paths)).encode() + b"\0")
    assert made.root == _git(repo, "write-tree", env=env).strip(), sorted(paths)
    assert made.files() == _listing(repo, made.root)
    assert base.files() == _listing(repo, head)        # the base is left as it was
    commit = store.commit(made.root, head, "t", "t@t", "candidate\n")
    _git(repo, "fsck", "--strict", "--no-dangling")
    assert _git(repo, "rev-parse", commit + "^{tree}").strip() == made.root


def test_nothing_changed_is_the_same_tree(tmp_path):
    repo = tmp_path / "r"
    _random_repo(repo, random.Random(0))
    head = _git(repo, "rev-parse", "HEAD").strip()
    base = Trees.parse(_git(repo, "ls-tree", "-r", "-t", "-z", "--full-tree", head),
                       _git(repo, "rev-parse", "HEAD^{tree}").strip())
    store = ObjectStore(repo / ".git" / "objects", "sha1")
    assert derive(base, {}, store).root == base.root
    assert derive(base, {"not/there": None}, store).root == base.root


def test_a_commit_written_by_hand_is_byte_for_byte_commit_tree(tmp_path):
    repo = tmp_path / "r"
    _random_repo(repo, random.Random(1))
    tree, head = _git(repo, "rev-parse", "HEAD^{tree}").strip(), _git(repo, "rev-parse", "HEAD").strip()
    message = "autoloop: keep cycle 3\n\nHypothesis: ünïcode, <angle> brackets  \n\n\n"
    who = {"GIT_AUTHOR_NAME": "A <b>", "GIT_AUTHOR_EMAIL": "e@x", "GIT_COMMITTER_NAME": "A <b>",
           "GIT_COMMITTER_EMAIL": "e@x", "GIT_AUTHOR_DATE": "@1700000000 +0000",
           "GIT_COMMITTER_DATE": "@1700000000 +0000", "TZ": "UTC"}
    want = _git(repo, "commit-tree", tree, "-p", head, "-F", "-", env=dict(os.environ, **who),
                input=message.encode()).strip()
    os.environ["TZ"] = "UTC"
    try:
        got = ObjectStore(repo / ".git" / "objects", "sha1").commit(tree, head, "A <b>", "e@x", message,
                                                                    when=1700000000)
    finally:
        del os.environ["TZ"]
    assert got == want


def test_only_regular_files_are_written_by_hand(tmp_path):
    os.symlink("elsewhere", tmp_path / "link")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "big").write_bytes(b"x" * 100)
    (tmp_path / "objects").mkdir()
    store = ObjectStore(tmp_path / "objects", "sha1")
    for rel in ("link", "fifo"):
        with pytest.raises(ValueError):
            changed_entries(tmp_path, [rel], store)
    with pytest.raises(ValueError):
        changed_entries(tmp_path, ["big"], store, max_bytes=99)
    assert changed_entries(tmp_path, ["gone", "big"], store, max_bytes=100)["gone"] is None
