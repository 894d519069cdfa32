"""Snapshotter (what is really on disk, every entry, hashes cached by stat identity) and diff."""

from __future__ import annotations

import os
import time
import random
import stat
from pathlib import Path

import pytest

from autoloop.disk import snapshot as snapmod
from autoloop.disk.snapshot import Change, Entry, Snapshotter, diff


def tree(root: Path, files: dict[str, str | bytes]) -> Path:
    for rel, content in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content)
    return root


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "wt"
    r.mkdir()
    tree(r, {"a.py": "print(1)\n", "pkg/__init__.py": "", "pkg/mod.py": "x = 1\n", "data/blob.bin": b"\0" * 100})
    return r


def changes(before: dict, after: dict) -> list[tuple[str, str]]:
    return [(c.path, c.what) for c in diff(before, after)]


def keep_times(path: Path):
    st = os.stat(path, follow_symlinks=False)
    return lambda: os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)


# ---------------------------------------------------------------------------------------------
# what a snapshot holds

def test_entries_for_every_kind(root: Path) -> None:
    os.symlink("a.py", root / "link")
    os.mkfifo(root / "fifo")
    snap = Snapshotter(root).take()
    assert {k: snap[k].kind for k in ("a.py", "pkg", "link", "fifo")} == {"a.py": "f", "pkg": "d", "link": "l", "fifo": "o"}


def test_file_entry_fields(root: Path) -> None:
    e = Snapshotter(root).take()["a.py"]
    st = os.stat(root / "a.py")
    assert (e.kind, e.mode, e.size, e.nlink) == ("f", stat.S_IMODE(st.st_mode), 9, 1)
    assert len(e.digest) == 40


def test_symlink_entry_holds_its_target(root: Path) -> None:
    os.symlink("../outside/secret", root / "link")
    assert Snapshotter(root).take()["link"].digest == "../outside/secret"


def test_symlink_to_dir_is_not_followed(root: Path) -> None:
    os.symlink("pkg", root / "alias")
    snap = Snapshotter(root).take()
    assert snap["alias"].kind == "l"
    assert not any(k.startswith("alias/") for k in snap)


def test_broken_symlink_is_an_entry(root: Path) -> None:
    os.symlink("nowhere", root / "dangling")
    e = Snapshotter(root).take()["dangling"]
    assert (e.kind, e.digest) == ("l", "nowhere")


def test_top_level_git_is_skipped_but_nested_git_is_not(root: Path) -> None:
    tree(root, {".git/config": "[core]\n", "sub/.git/hooks/post-checkout": "#!/bin/sh\n"})
    snap = Snapshotter(root).take()
    assert not any(k == ".git" or k.startswith(".git/") for k in snap)
    assert "sub/.git/hooks/post-checkout" in snap


def test_worktree_git_file_is_skipped(root: Path) -> None:
    (root / ".git").write_text("gitdir: /elsewhere\n")
    assert ".git" not in Snapshotter(root).take()


def test_custom_skip_top(root: Path) -> None:
    snap = Snapshotter(root, skip_top=("data",)).take()
    assert "data" not in snap and "data/blob.bin" not in snap and "a.py" in snap


@pytest.mark.parametrize("rel", [".gitignore", "__pycache__/a.cpython-311.pyc", ".venv/lib/site-packages/evil.pth",
                                 ".env", "build/out.o", "node_modules/x/index.js", ".DS_Store", "deep/.hidden/f"])
def test_ignored_style_files_are_included(root: Path, rel: str) -> None:
    (root / ".gitignore").write_text("*\n")
    tree(root, {rel: "x"})
    assert Snapshotter(root).take()[rel].kind == "f"


def test_non_utf8_file_name(root: Path) -> None:
    name = os.fsdecode(b"\xff-bad.py")
    (root / name).write_text("x")
    assert name in Snapshotter(root).take()


def test_large_file_hash_covers_all_bytes(root: Path) -> None:
    big = root / "big.bin"
    big.write_bytes(b"a" * (3 << 20))
    s = Snapshotter(root)
    before = s.take()
    with open(big, "r+b") as f:
        f.seek((3 << 20) - 1)
        f.write(b"b")
    assert changes(before, Snapshotter(root).take()) == [("big.bin", "modified")]


def test_same_content_same_digest(root: Path) -> None:
    (root / "copy.py").write_bytes((root / "a.py").read_bytes())
    snap = Snapshotter(root).take()
    assert snap["copy.py"].digest == snap["a.py"].digest


# ---------------------------------------------------------------------------------------------
# diff: added / deleted / modified / mode / type

def mutate(root: Path, how: str) -> None:
    a = root / "a.py"
    if how == "add file":
        (root / "new.py").write_text("n")
    elif how == "add empty file":
        (root / "empty").touch()
    elif how == "delete file":
        a.unlink()
    elif how == "grow file":
        a.write_text("print(1)\nprint(2)\n")
    elif how == "same size":
        a.write_text("print(2)\n")
    elif how == "truncate to empty":
        a.write_text("")
    elif how == "chmod +x":
        a.chmod(0o755)
    elif how == "chmod 600":
        a.chmod(0o600)
    elif how == "setuid":
        a.chmod(0o4644)
    elif how == "file to symlink":
        a.unlink()
        os.symlink("pkg/mod.py", a)
    elif how == "file to dir":
        a.unlink()
        a.mkdir()
    elif how == "dir to file":
        for p in (root / "pkg").iterdir():
            p.unlink()
        (root / "pkg").rmdir()
        (root / "pkg").write_text("x")
    elif how == "file to fifo":
        a.unlink()
        os.mkfifo(a)
    elif how == "add dir":
        (root / "newdir").mkdir()
    elif how == "delete dir":
        (root / "data" / "blob.bin").unlink()
        (root / "data").rmdir()
    elif how == "dir mode":
        (root / "pkg").chmod(0o700)
    elif how == "rename":
        a.rename(root / "b.py")
    else:
        raise AssertionError(how)


DIFFS = [
    ("add file", [("new.py", "added")]),
    ("add empty file", [("empty", "added")]),
    ("delete file", [("a.py", "deleted")]),
    ("grow file", [("a.py", "modified")]),
    ("same size", [("a.py", "modified")]),
    ("truncate to empty", [("a.py", "modified")]),
    ("chmod +x", [("a.py", "mode")]),
    ("chmod 600", [("a.py", "mode")]),
    ("setuid", [("a.py", "mode")]),
    ("file to symlink", [("a.py", "type")]),
    ("file to dir", [("a.py", "type")]),
    ("dir to file", [("pkg", "type"), ("pkg/__init__.py", "deleted"), ("pkg/mod.py", "deleted")]),
    ("file to fifo", [("a.py", "type")]),
    ("add dir", [("newdir", "added")]),
    ("delete dir", [("data", "deleted"), ("data/blob.bin", "deleted")]),
    ("dir mode", [("pkg", "mode")]),
    ("rename", [("a.py", "deleted"), ("b.py", "added")]),
]


@pytest.mark.parametrize("how,expected", DIFFS, ids=[d[0] for d in DIFFS])
def test_diff_kinds(root: Path, how: str, expected: list) -> None:
    s = Snapshotter(root)
    before = s.take()
    mutate(root, how)
    assert changes(before, s.take()) == expected


@pytest.mark.parametrize("how,expected", DIFFS, ids=[d[0] for d in DIFFS])
def test_diff_kinds_with_a_fresh_snapshotter(root: Path, how: str, expected: list) -> None:
    before = Snapshotter(root).take()
    mutate(root, how)
    assert changes(before, Snapshotter(root).take()) == expected


def test_no_change_no_diff(root: Path) -> None:
    s = Snapshotter(root)
    assert diff(s.take(), s.take()) == []


def test_touch_only_is_not_a_change(root: Path) -> None:
    s = Snapshotter(root)
    before = s.take()
    os.utime(root / "a.py", (1, 1))
    assert diff(before, s.take()) == []


def test_rewrite_with_same_bytes_is_not_a_change(root: Path) -> None:
    s = Snapshotter(root)
    before = s.take()
    data = (root / "a.py").read_bytes()
    (root / "a.py").unlink()
    (root / "a.py").write_bytes(data)
    assert diff(before, s.take()) == []


def test_symlink_retarget_is_modified(root: Path) -> None:
    os.symlink("a.py", root / "link")
    s = Snapshotter(root)
    before = s.take()
    (root / "link").unlink()
    os.symlink("pkg/mod.py", root / "link")
    assert changes(before, s.take()) == [("link", "modified")]


def test_symlink_target_content_change_is_seen_on_the_target_only(root: Path) -> None:
    os.symlink("a.py", root / "link")
    s = Snapshotter(root)
    before = s.take()
    (root / "a.py").write_text("changed!\n")
    assert changes(before, s.take()) == [("a.py", "modified")]


def test_diff_is_sorted_by_path(root: Path) -> None:
    s = Snapshotter(root)
    before = s.take()
    for name in ("z.py", "b.py", "m/a.py"):
        tree(root, {name: "x"})
    paths = [c.path for c in diff(before, s.take())]
    assert paths == sorted(paths)


def test_change_carries_before_and_after(root: Path) -> None:
    s = Snapshotter(root)
    before = s.take()
    (root / "a.py").chmod(0o755)
    (ch,) = diff(before, s.take())
    assert (ch.before.mode, ch.after.mode) == (before["a.py"].mode, 0o755)


@pytest.mark.parametrize("change,text", [
    (Change("a.py", "mode", Entry("f", 0o644), Entry("f", 0o755)), "a.py (mode 644 -> 755)"),
    (Change("a.py", "added", None, Entry("f", 0o644)), "a.py (added)"),
    (Change("a.py", "deleted", Entry("f", 0o644), None), "a.py (deleted)"),
    (Change("a.py", "type", Entry("f", 0o644), Entry("l", 0o777)), "a.py (type)"),
])
def test_change_describe(change: Change, text: str) -> None:
    assert change.describe() == text


# ---------------------------------------------------------------------------------------------
# hard links

def test_new_hard_link_inside_the_tree(root: Path) -> None:
    s = Snapshotter(root)
    before = s.take()
    os.link(root / "a.py", root / "alias.py")
    after = s.take()
    assert changes(before, after) == [("a.py", "modified"), ("alias.py", "added")]
    assert after["alias.py"].nlink == 2


def test_hard_link_to_a_file_outside_the_tree(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "secret.txt"
    outside.write_text("s")
    s = Snapshotter(root)
    before = s.take()
    os.link(outside, root / "peek.txt")
    after = s.take()
    assert changes(before, after) == [("peek.txt", "added")] and after["peek.txt"].nlink == 2


def test_hard_link_removed_is_a_change(root: Path, tmp_path: Path) -> None:
    os.link(root / "a.py", tmp_path / "outside-link")
    s = Snapshotter(root)
    before = s.take()
    (tmp_path / "outside-link").unlink()
    assert changes(before, s.take()) == [("a.py", "modified")]


def test_existing_file_replaced_by_a_hard_link_with_same_bytes(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "same"
    outside.write_bytes((root / "a.py").read_bytes())
    os.chmod(outside, os.stat(root / "a.py").st_mode)
    s = Snapshotter(root)
    before = s.take()
    (root / "a.py").unlink()
    os.link(outside, root / "a.py")
    assert changes(before, s.take()) == [("a.py", "modified")]


# ---------------------------------------------------------------------------------------------
# the stat → hash cache

@pytest.mark.parametrize("new", ["print(9)\n", "PRINT(1)\n", "print(1)\r"])
def test_content_change_with_mtime_restored_is_detected(root: Path, new: str) -> None:
    s = Snapshotter(root)
    before = s.take()
    restore_times = keep_times(root / "a.py")
    with open(root / "a.py", "r+") as f:     # same inode, same size
        f.write(new)
    restore_times()
    assert changes(before, s.take()) == [("a.py", "modified")]


def test_content_change_with_mtime_restored_in_a_tight_loop(root: Path) -> None:
    """ctime is what gives the change away; it must do so even right after a snapshot."""
    s = Snapshotter(root)
    f = root / "a.py"
    misses = 0
    for i in range(200):
        f.write_text("AAAAAAAA")
        before = s.take()
        restore_times = keep_times(f)
        f.write_text("BBBBBBBB")
        restore_times()
        if not diff(before, s.take()):
            misses += 1
    assert misses == 0


def test_replaced_file_same_size_and_mtime_is_detected(root: Path) -> None:
    s = Snapshotter(root)
    before = s.take()
    st = os.stat(root / "a.py")
    tmp = root / "tmp"
    tmp.write_text("print(7)\n")
    os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(tmp, root / "a.py")
    assert changes(before, s.take()) == [("a.py", "modified")]


def test_unchanged_files_are_not_read_again(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # files hashed within the racy window of their last change are re-read (like git's racy
    # entries); let the fixture's files age past it first
    time.sleep(snapmod.RACY_NS / 1e9 + 0.05)
    s = Snapshotter(root)
    s.take()
    opened: list[str] = []
    real_open = open

    def counting_open(path, *a, **kw):
        opened.append(str(path))
        return real_open(path, *a, **kw)

    monkeypatch.setattr(snapmod, "open", counting_open, raising=False)
    s.take()
    assert opened == []
    (root / "a.py").write_text("changed\n")
    s.take()
    assert opened == [str(root / "a.py")]


def test_cache_forgets_deleted_paths(root: Path) -> None:
    s = Snapshotter(root)
    s.take()
    (root / "a.py").unlink()
    s.take()
    assert "a.py" not in s._cache.known


def test_cache_is_per_path_not_per_inode(root: Path) -> None:
    """Moving a file onto another path: the new path's entry is the moved bytes."""
    s = Snapshotter(root)
    before = s.take()
    os.replace(root / "pkg" / "mod.py", root / "a.py")
    after = s.take()
    assert after["a.py"].digest == before["pkg/mod.py"].digest
    assert changes(before, after) == [("a.py", "modified"), ("pkg/mod.py", "deleted")]


def test_cached_and_fresh_snapshots_agree_after_random_edits(root: Path) -> None:
    rng = random.Random(1234)
    s = Snapshotter(root)
    s.take()
    names = [f"f{i}" for i in range(8)]
    for step in range(150):
        name = root / rng.choice(names)
        op = rng.randrange(6)
        if op == 0:
            name.write_bytes(bytes([rng.randrange(256)]) * rng.randrange(1, 4))
        elif op == 1 and name.exists() and not name.is_symlink():
            t = keep_times(name)
            data = name.read_bytes()
            name.write_bytes(bytes(255 - b for b in data))
            t()
        elif op == 2 and (name.exists() or name.is_symlink()):
            name.unlink()
        elif op == 3 and not name.exists() and not name.is_symlink():
            os.symlink(rng.choice(names), name)
        elif op == 4 and name.is_file() and not name.is_symlink():
            name.chmod(rng.choice([0o644, 0o755, 0o600]))
        elif op == 5 and name.is_file() and not name.is_symlink():
            os.replace(name, root / rng.choice(names))
        assert s.take() == Snapshotter(root).take(), step


# ---------------------------------------------------------------------------------------------
# permissions

def test_chmod_000_dir_is_a_change(root: Path) -> None:
    s = Snapshotter(root)
    before = s.take()
    (root / "pkg").chmod(0)
    try:
        assert ("pkg", "mode") in changes(before, s.take()) or ("pkg", "type") in changes(before, s.take())
    finally:
        (root / "pkg").chmod(0o755)


def test_chmod_000_file_is_a_change(root: Path) -> None:
    s = Snapshotter(root)
    before = s.take()
    (root / "a.py").chmod(0)
    try:
        assert ("a.py", "mode") in changes(before, s.take())
    finally:
        (root / "a.py").chmod(0o644)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_unreadable_dir_is_reported_not_skipped(root: Path) -> None:
    s = Snapshotter(root)
    before = s.take()
    (root / "pkg").chmod(0)
    try:
        after = s.take()
        assert after["pkg"].kind == "o"
        assert "pkg/mod.py" not in after
        assert diff(before, after)
    finally:
        (root / "pkg").chmod(0o755)
