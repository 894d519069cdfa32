"""Is this file unchanged since we last read it? One rule for every memo of a file's bytes or
hash: its stat identity (inode, size, mtime, ctime — ctime cannot be set from user space) stands
for its bytes only once the file had last changed well before we read it; a file written within
a clock tick of our read may change again without its stamp changing."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, NamedTuple, TypeVar

from autoloop.walk import RACY_NS

V = TypeVar("V")


class Stamp(NamedTuple):
    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> "Stamp":
        return cls(st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def settled(self, read_ns: int) -> bool:
        """Had the file last changed well before `read_ns` (when its bytes were read)?"""
        return max(self.mtime_ns, self.ctime_ns) + RACY_NS < read_ns


@dataclass(frozen=True)
class Memo(Generic[V]):
    stamp: Stamp
    value: V
    read_ns: int


class StatMemo(Generic[V]):
    """What was learnt from files (their bytes, their hash), by key, while their stamp holds."""

    def __init__(self) -> None:
        self._memo: dict[str, Memo[V]] = {}

    def get(self, key: str, stamp: Stamp) -> V | None:
        hit = self._memo.get(key)
        if hit is not None and hit.stamp == stamp and stamp.settled(hit.read_ns):
            return hit.value
        return None

    def put(self, key: str, stamp: Stamp, value: V, read_ns: int) -> bool:
        """Remember `value`, read at `read_ns`; whether it can stand for as long as `stamp` does."""
        self._memo[key] = Memo(stamp, value, read_ns)
        return stamp.settled(read_ns)

    def forget(self, key: str) -> None:
        self._memo.pop(key, None)


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
