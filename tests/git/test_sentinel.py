"""Sentinel: capture / changed / restore of watched files, folders, absent paths and symlinks."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from autoloop.disk.sentinel import Sentinel, remove_tree


def state(p: Path) -> object:
    """A comparable picture of a path: kind, mode, bytes / target, children."""
    if p.is_symlink():
        return ("l", os.readlink(p))
    if not p.exists():
        return None
    if p.is_file():
        return ("f", stat.S_IMODE(p.stat().st_mode), p.read_bytes())
    out = {}
    for dirpath, dirnames, filenames in os.walk(p):
        for name in dirnames + filenames:
            full = Path(dirpath, name)
            out[full.relative_to(p).as_posix()] = state(full) if not full.is_dir() or full.is_symlink() else "d"
    return ("d", out)


@pytest.fixture
def paths(tmp_path: Path) -> dict[str, Path]:
    cfg = tmp_path / "config"
    cfg.write_text("[core]\n\tbare = false\n")
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "pre-commit.sample").write_text("#!/bin/sh\n")
    (hooks / "post-checkout").write_text("#!/bin/sh\necho hi\n")
    (hooks / "post-checkout").chmod(0o755)
    os.symlink("post-checkout", hooks / "alias")
    os.symlink("..", hooks / "updir")            # a link to a folder: kept as a link, not walked
    link = tmp_path / "commondir"
    os.symlink("../..", link)
    absent = tmp_path / "config.worktree"
    empty = tmp_path / "objects-info"
    empty.mkdir()
    return {"file": cfg, "folder": hooks, "link": link, "absent": absent, "empty": empty}


def watch(*ps: Path, **kw) -> Sentinel:
    s = Sentinel(ps, **kw)
    s.capture()
    return s


# Each attack on one watched path: (which path, what to do)
ATTACKS = {
    "file: edit": ("file", lambda p: p.write_text("[core]\n\thooksPath = /tmp/evil\n")),
    "file: same size edit": ("file", lambda p: p.write_text(p.read_text().replace("false", "FALSE"))),
    "file: append": ("file", lambda p: p.open("a").write("[x]\n")),
    "file: truncate": ("file", lambda p: p.write_text("")),
    "file: chmod": ("file", lambda p: p.chmod(0o600)),
    "file: delete": ("file", lambda p: p.unlink()),
    "file: to symlink": ("file", lambda p: (p.unlink(), os.symlink("/etc/hostname", p))),
    "file: to dir": ("file", lambda p: (p.unlink(), p.mkdir(), (p / "x").write_text("x"))),
    "folder: new hook": ("folder", lambda p: (p / "pre-commit").write_text("#!/bin/sh\nrm -rf ~\n")),
    "folder: edit hook": ("folder", lambda p: (p / "post-checkout").write_text("#!/bin/sh\nevil\n")),
    "folder: chmod hook": ("folder", lambda p: (p / "pre-commit.sample").chmod(0o755)),
    "folder: delete hook": ("folder", lambda p: (p / "post-checkout").unlink()),
    "folder: retarget dir link": ("folder", lambda p: ((p / "updir").unlink(), os.symlink("/", p / "updir"))),
    "folder: dir link to real dir": ("folder", lambda p: ((p / "updir").unlink(), (p / "updir").mkdir())),
    "folder: retarget link": ("folder", lambda p: ((p / "alias").unlink(), os.symlink("/bin/sh", p / "alias"))),
    "folder: nested file": ("folder", lambda p: ((p / "sub").mkdir(), (p / "sub" / "x").write_text("x"))),
    "folder: delete all": ("folder", lambda p: remove_tree(p)),
    "folder: to file": ("folder", lambda p: (remove_tree(p), p.write_text("x"))),
    "folder: to symlink": ("folder", lambda p: (remove_tree(p), os.symlink("/tmp", p))),
    "link: retarget": ("link", lambda p: (p.unlink(), os.symlink("/elsewhere", p))),
    "link: delete": ("link", lambda p: p.unlink()),
    "link: to file": ("link", lambda p: (p.unlink(), p.write_text("../.."))),
    "absent: create file": ("absent", lambda p: p.write_text("[core]\n\tfsmonitor = evil\n")),
    "absent: create dir": ("absent", lambda p: (p.mkdir(), (p / "f").write_text("x"))),
    "absent: create empty dir": ("absent", lambda p: p.mkdir()),
    "absent: create symlink": ("absent", lambda p: os.symlink("config", p)),
    "absent: create dangling symlink": ("absent", lambda p: os.symlink("nowhere", p)),
    "empty: new file": ("empty", lambda p: (p / "alternates").write_text("/tmp/objects\n")),
    "empty: delete": ("empty", lambda p: p.rmdir()),
}


@pytest.mark.parametrize("name", list(ATTACKS))
def test_changed_names_the_path(paths: dict[str, Path], name: str) -> None:
    which, attack = ATTACKS[name]
    s = watch(*paths.values(), label={paths[which]: f"label-{which}"})
    attack(paths[which])
    assert s.changed() == [f"label-{which}"]


@pytest.mark.parametrize("name", list(ATTACKS))
def test_restore_puts_it_back_exactly(paths: dict[str, Path], name: str) -> None:
    which, attack = ATTACKS[name]
    s = watch(*paths.values())
    before = {k: state(p) for k, p in paths.items()}
    attack(paths[which])
    s.restore()
    assert {k: state(p) for k, p in paths.items()} == before
    assert s.changed() == []


def test_nothing_changed(paths: dict[str, Path]) -> None:
    s = watch(*paths.values())
    assert s.changed() == []


def test_unlabelled_path_is_named_by_its_path(paths: dict[str, Path]) -> None:
    s = watch(paths["file"])
    paths["file"].write_text("x")
    assert s.changed() == [str(paths["file"])]


def test_several_changes_are_all_reported(paths: dict[str, Path]) -> None:
    s = watch(*paths.values())
    paths["file"].write_text("x")
    paths["absent"].write_text("x")
    assert sorted(s.changed()) == sorted([str(paths["file"]), str(paths["absent"])])


def test_restore_leaves_unchanged_paths_untouched(paths: dict[str, Path]) -> None:
    s = watch(*paths.values())
    ino = paths["file"].stat().st_ino
    paths["absent"].write_text("x")
    s.restore()
    assert paths["file"].stat().st_ino == ino


def test_touch_is_not_a_change(paths: dict[str, Path]) -> None:
    s = watch(*paths.values())
    os.utime(paths["file"], (1, 1))
    assert s.changed() == []


def test_capture_again_accepts_the_new_state(paths: dict[str, Path]) -> None:
    s = watch(*paths.values())
    paths["file"].write_text("new\n")
    s.capture()
    assert s.changed() == []
    paths["file"].write_text("newer\n")
    s.restore()
    assert paths["file"].read_text() == "new\n"


def test_restore_recreates_missing_parent(tmp_path: Path) -> None:
    f = tmp_path / "a" / "b" / "config"
    f.parent.mkdir(parents=True)
    f.write_text("x")
    s = watch(f)
    remove_tree(tmp_path / "a")
    s.restore()
    assert f.read_text() == "x"


def test_restore_of_a_folder_with_a_locked_subfolder(tmp_path: Path) -> None:
    d = tmp_path / "info"
    d.mkdir()
    (d / "exclude").write_text("x\n")
    s = watch(d)
    (d / "locked").mkdir()
    (d / "locked" / "f").write_text("x")
    (d / "locked").chmod(0)
    s.restore()
    assert state(d) == ("d", {"exclude": ("f", stat.S_IMODE((d / "exclude").stat().st_mode), b"x\n")})


def test_binary_content_round_trips(tmp_path: Path) -> None:
    f = tmp_path / "index"
    f.write_bytes(bytes(range(256)) * 10)
    s = watch(f)
    f.write_bytes(b"")
    s.restore()
    assert f.read_bytes() == bytes(range(256)) * 10


def test_restore_keeps_empty_subfolders(tmp_path: Path) -> None:
    d = tmp_path / "objects-info"
    (d / "packs.d").mkdir(parents=True)
    (d / "f").write_text("x")
    s = watch(d)
    (d / "f").write_text("y")
    s.restore()
    assert (d / "packs.d").is_dir()


def test_folder_mode_change_is_reported(tmp_path: Path) -> None:
    d = tmp_path / "hooks"
    d.mkdir()
    (d / "x").write_text("x")
    s = watch(d)
    d.chmod(0o777)
    assert s.changed() == [str(d)]


# ---------------------------------------------------------------------------------------------
# unchanged files are not read again; every change still is

@pytest.mark.parametrize("age", [False, True])
def test_same_size_edit_with_times_put_back_is_seen(paths: dict[str, Path], age: bool) -> None:
    import time
    from autoloop.base import walk as sentmod
    if age:
        time.sleep(sentmod.RACY_NS / 1e9 + 0.05)
    s = watch(*paths.values())
    assert s.changed() == []                         # reads, and trusts what is old enough
    cfg = paths["file"]
    st = os.stat(cfg)
    cfg.write_text(cfg.read_text().replace("false", "FALSE"))
    os.utime(cfg, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert s.changed() == [str(cfg)]
    hook = paths["folder"] / "pre-commit.sample"
    st = os.stat(hook)
    hook.write_text("#!/bin/X\n")
    os.utime(hook, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert str(paths["folder"]) in s.changed()


def test_unchanged_old_files_are_not_read_again(paths: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    import time
    from autoloop.base import walk as sentmod
    time.sleep(sentmod.RACY_NS / 1e9 + 0.05)
    s = watch(*paths.values())
    opened: list[str] = []
    real = os.open
    def counting_open(p, flags, *a, **k):  # type: ignore[no-untyped-def]
        if not flags & os.O_DIRECTORY:   # a walk opens folders; files are what must not be read
            opened.append(str(p))
        return real(p, flags, *a, **k)

    monkeypatch.setattr(sentmod.os, "open", counting_open)
    assert s.changed() == []
    s.capture()
    assert opened == []


def test_a_planted_fifo_does_not_hang(paths: dict[str, Path]) -> None:
    s = watch(*paths.values())
    os.mkfifo(paths["folder"] / "post-merge")
    assert s.changed() == [str(paths["folder"])]
    s.restore()
    assert not (paths["folder"] / "post-merge").exists()
