"""A command's output files: made fresh where nothing planted can redirect them, read back
bounded and without following what a generator or candidate code could have put there."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path
from typing import IO

from autoloop.base.walk import remove_tree

TAIL_BYTES = 8192


def read_tail(path: Path, limit: int = TAIL_BYTES) -> str:
    return read_regular(path, limit, tail=True).decode("utf-8", "replace")


def read_regular(path: Path, limit: int, *, tail: bool = False) -> bytes:
    """At most `limit` bytes (the last ones with `tail`) of the regular file at `path`; b"" for
    anything else: a symlink is not followed, a FIFO does not block."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return b""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return b""
        if tail:
            os.lseek(fd, max(0, st.st_size - limit), os.SEEK_SET)
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(limit)
    except OSError:
        return b""
    finally:
        os.close(fd)


def size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def fresh_log(path: Path) -> IO[bytes]:
    """A new, empty regular file of our own at `path`: never written through a symlink or into
    a FIFO or folder planted at that name (those are removed first)."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(8):
        try:
            if stat.S_ISDIR(os.lstat(path).st_mode):
                remove_tree(path, quiet=True)
            else:
                os.unlink(path)
        except FileNotFoundError:
            pass
        try:
            return os.fdopen(os.open(path, flags, 0o644), "w+b")
        except FileExistsError:
            continue   # planted again between the removal and the open
    raise OSError(f"{path}: something keeps replacing this log file")


def log_folder(root: Path, *names: str) -> Path:
    """`root/names...`, each a real folder of ours: whatever a generator planted at a name in the
    log folder it writes (a link to a folder of its choice, a file) is removed first, so logs
    autoloop writes there — and the removal of what sits at a log's name — stay under `root`.
    (The generator's sandbox has ended by the time a measurement logs: nothing races this.)"""
    path = root
    for name in names:
        path = path / name
        try:
            st = os.lstat(path)
            if stat.S_ISDIR(st.st_mode):
                continue
            os.unlink(path)
        except FileNotFoundError:
            pass
        os.mkdir(path)
    return path


def own_output(f: IO[bytes], path: Path) -> None:
    """Make `path` again the file behind our descriptor `f` when something replaced it: what is
    read back by path is then what the command wrote to its stdout/stderr."""
    mine = os.fstat(f.fileno())
    try:
        st = os.lstat(path)
        if (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino):
            return
    except FileNotFoundError:
        pass
    f.flush()
    f.seek(0)
    with fresh_log(path) as copy:
        shutil.copyfileobj(f, copy, 1 << 20)
