"""The one walker, entry type, stat-keyed cache and delete helper (autoloop.base.walk), on real trees."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from autoloop.base.walk import RACY_NS, StatCache, entry_of, inside, lstat_entry, remove_tree, walk


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "t"
    (root / "b" / "deep").mkdir(parents=True)
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("x")
    (root / "a.txt").write_text("a")
    (root / "b" / "c.txt").write_text("c")
    (root / "b" / "deep" / "d.txt").write_text("d")
    os.symlink("../a.txt", root / "b" / "link")
    os.symlink(str(root / "b"), root / "dirlink")
    return root


def test_walk_lists_everything_parents_first_without_following_links(tree: Path) -> None:
    seen = [rel for rel, _, _ in walk(str(tree))]
    assert sorted(seen) == [".git", ".git/HEAD", "a.txt", "b", "b/c.txt", "b/deep", "b/deep/d.txt",
                            "b/link", "dirlink"]
    assert all(seen.index(rel.rsplit("/", 1)[0]) < seen.index(rel) for rel in seen if "/" in rel)
    assert "dirlink/c.txt" not in seen


def test_walk_paths_and_lstat_are_the_entries_own(tree: Path) -> None:
    for rel, full, st in walk(str(tree)):
        assert full == f"{tree}/{rel}" and st is not None
        assert (st.st_ino, st.st_mode) == (os.lstat(full).st_ino, os.lstat(full).st_mode)


def test_walk_skip_top_only_and_order(tree: Path) -> None:
    assert ".git/HEAD" not in {rel for rel, _, _ in walk(str(tree), skip={".git"})}
    assert ".git" not in {rel for rel, _, _ in walk(str(tree), skip={".git"})}
    assert {rel for rel, _, _ in walk(str(tree), top_only=True)} == {".git", "a.txt", "b", "dirlink"}
    top = [rel for rel, _, _ in walk(str(tree), ordered=True) if "/" not in rel]
    assert top == sorted(top)


def test_walk_reports_an_unlistable_folder(tree: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root lists any folder")
    os.chmod(tree / "b", 0)
    try:
        got = list(walk(str(tree)))
        assert [rel for rel, _, st in got if st is None] == ["b"]     # listed, then found unlistable
        assert "b/c.txt" not in {rel for rel, _, _ in got}
    finally:
        os.chmod(tree / "b", 0o755)


def test_walk_of_a_missing_root_says_so(tmp_path: Path) -> None:
    assert list(walk(str(tmp_path / "nope"))) == [("", str(tmp_path / "nope"), None)]


def test_entries_name_their_stat_fields(tree: Path) -> None:
    st = os.lstat(tree / "a.txt")
    e = lstat_entry(str(tree / "a.txt"))
    assert e is not None
    assert (e.kind, e.mode, e.size, e.mtime_ns, e.ctime_ns, e.ino) == (
        "f", stat.S_IMODE(st.st_mode), 1, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
    link = lstat_entry(str(tree / "b" / "link"))
    assert link is not None and (link.kind, link.digest) == ("l", "../a.txt")
    folder = entry_of(os.lstat(tree / "b"), str(tree / "b"))
    assert folder.kind == "d" and folder.mtime_ns == 0          # a folder's times only on request
    assert entry_of(os.lstat(tree / "b"), str(tree / "b"), dir_times=True).mtime_ns != 0
    assert lstat_entry(str(tree / "gone")) is None


def test_stat_cache_trusts_only_files_that_had_settled(tree: Path) -> None:
    path = tree / "a.txt"
    cache: StatCache[str] = StatCache()
    cache.put("a", os.lstat(path), "fresh", time.time_ns())       # changed just now: racy
    assert cache.get("a", os.lstat(path)) is None
    cache.put("a", os.lstat(path), "settled", time.time_ns() + 2 * RACY_NS)
    assert cache.get("a", os.lstat(path)) == "settled"
    path.write_text("b")                                            # same size, new ctime
    assert cache.get("a", os.lstat(path)) is None
    cache.retain(set())
    assert cache.known == {}


def test_remove_tree_takes_back_taken_permissions(tree: Path) -> None:
    os.chmod(tree / "b" / "deep", 0o500)
    os.chmod(tree / "b", 0o500)
    remove_tree(tree)
    assert not tree.exists()


def test_remove_tree_removes_a_link_not_its_target(tree: Path) -> None:
    remove_tree(tree / "dirlink")
    assert not os.path.lexists(tree / "dirlink") and (tree / "b" / "c.txt").exists()
    remove_tree(tree / "a.txt")
    remove_tree(tree / "never-there")
    assert not (tree / "a.txt").exists()


def test_inside_resolves_both_sides(tree: Path) -> None:
    assert inside(tree / "b" / "c.txt", tree) and inside(tree, tree)
    assert inside(tree / "dirlink" / "c.txt", tree / "b")
    assert not inside(str(tree) + "x", tree)


def test_remove_tree_raises_or_stays_quiet_about_what_cannot_go() -> None:
    undeletable = Path("/proc/self/status")      # procfs refuses unlink, to root too
    with pytest.raises(OSError):
        remove_tree(undeletable)
    remove_tree(undeletable, quiet=True)
    assert undeletable.exists()


def test_remove_tree_takes_an_entry_another_remover_took_first(tmp_path, monkeypatch):
    """A measurement's scratch is deleted in the background while `verify` removes the folder
    holding it: an entry already gone is done, not an error (a fresh HOME made `verify` end with
    an internal FileNotFoundError)."""
    import os

    from autoloop.base.walk import remove_tree

    tree = tmp_path / "scratch"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "f").write_text("x")
    real = os.rmdir
    raced = []

    def rmdir(path, *args, **kwargs):
        real(path, *args, **kwargs)
        if not raced and os.fspath(path).endswith("sub"):
            raced.append(path)
            raise FileNotFoundError(2, "No such file or directory", os.fspath(path))

    monkeypatch.setattr(os, "rmdir", rmdir)
    remove_tree(tree)
    assert raced and not tree.exists()
