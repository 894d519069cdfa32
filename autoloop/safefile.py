"""Files of our own, read and written without following what a generator may have put at their
name: a symlink to a file of the user's, or a FIFO that would block a plain open."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import NamedTuple


class Regular(NamedTuple):
    stat: os.stat_result
    data: bytes


def read_regular(path: Path, limit: int = -1) -> Regular | None:
    """A regular file's stat and bytes; None for anything else. A generator may have put a FIFO
    (which would block a plain open) or a symlink where git keeps a file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        with open(fd, "rb", closefd=False) as f:
            return Regular(st, f.read(limit))
    except OSError:
        return None
    finally:
        os.close(fd)


def write_new(path: Path, data: bytes) -> None:
    """A file of our own made afresh, never written through whatever a generator may have put
    at that name (a symlink to a file of the user's)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with open(fd, "wb") as f:
        f.write(data)
