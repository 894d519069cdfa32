"""Resource limits of one command (the generator's; the verifier is trusted): what the kernel
enforces (file size, process count) and what we watch (disk space), and how to say which broke."""

from __future__ import annotations

import os
import resource
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

import psutil

from autoloop.base.walk import under
from autoloop.process.logfile import size

DISK_TICK_S = 0.25   # how often the disk limit is checked
OTHERS_LOOK_S = 1.0  # how often, while other processes hold the disk's free space down, their share is looked at again


@dataclass(frozen=True)
class Limits:
    """file_bytes: no file it writes may grow beyond this (RLIMIT_FSIZE; its own logs too).
    disk_bytes: stopped once the filesystem holding `disk_path` lost this much free space and its
                own processes wrote that much (DiskWatch).
    processes:  at most this many more processes of our user (RLIMIT_NPROC; the kernel does not
                apply it to root, for whom the subreaper's clean-up is the bound)."""

    file_bytes: int | None = None
    disk_bytes: int | None = None
    disk_path: Path | None = None
    processes: int | None = None


class DiskWatch:
    """Free space of the filesystem holding the work tree, against what it was at the start.

    A fall past the limit is the command's only when its own processes wrote that much: on a
    shared machine a training job's checkpoint, or another run's build, lands on the same disk
    while the generator works, and stopping the generator for it would call an honest cycle a
    broken limit. `own` says what the command's processes wrote (None: it cannot tell, and the
    whole fall counts, as on a filesystem whose writes the kernel does not count)."""

    def __init__(self, limits: Limits, own: Callable[[], int | None] | None = None) -> None:
        self.limit, self.path = limits.disk_bytes or 0, str(limits.disk_path or ".")
        self.start = self._free()
        self.own = own if own is not None and _counted(self.path) else None
        self.excused = 0           # of the fall: what other processes wrote
        self._next_look = 0.0      # other writers keep the fall high: their share is looked at once a second

    def _free(self) -> int | None:
        try:
            st = os.statvfs(self.path)
            return st.f_bavail * st.f_frsize
        except OSError:
            return None

    def check(self, *, last: bool = False) -> str | None:
        """Why the command is over its limit, or None. `last`: after it ended (never put off)."""
        now = self._free()
        if self.start is None or now is None:
            return None
        fall = self.start - now
        # at the end the whole fall is weighed again: what its ended processes wrote reaches
        # their tally only once they are reaped, after a tick may have called it others'
        if fall <= self.limit or (not last and (fall - self.excused <= self.limit
                                                or time.monotonic() < self._next_look)):
            return None
        own = self.own() if self.own is not None else None
        if own is None or own > self.limit:
            return f"took more than {self.limit >> 20} MB of disk"
        self.excused = fall - own
        self._next_look = time.monotonic() + OTHERS_LOOK_S
        return None


def disk_watch(limits: Limits | None, pids: Callable[[], Iterable[int]]) -> DiskWatch | None:
    """The watch of a command with `limits` whose processes are `pids()` (None: no disk limit)."""
    if limits is None or limits.disk_bytes is None:
        return None
    reaped = reaped_writes()
    return DiskWatch(limits, own=lambda: writes(pids(), reaped))


def reaped_writes() -> int:
    """Bytes written by every child we have reaped so far, each with what it reaped (the
    kernel's tally of page writes, handed up at each wait)."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_oublock * 512


def writes(pids: Iterable[int], reaped: int) -> int | None:
    """What a command's processes wrote since it started: the live ones' (`pids`) from
    /proc/<pid>/io (page writes less what was deleted before it went out, or the bytes passed
    to write(), whichever is more), the ended ones' through what we reaped since `reaped` (any
    thread's children: more, never less). None when a live one's cannot be read."""
    total = reaped_writes() - reaped
    for pid in pids:
        try:
            with open(f"/proc/{pid}/io", "rb") as f:
                io = dict(line.split(b":", 1) for line in f.read().splitlines() if b":" in line)
            total += max(int(io[b"wchar"]), int(io[b"write_bytes"]) - int(io[b"cancelled_write_bytes"]))
        except (FileNotFoundError, ProcessLookupError):   # ended since: counted when it is reaped
            continue
        except (OSError, KeyError, ValueError):
            return None
    return total


def _counted(path: str) -> bool:
    """Does the kernel count page writes to the filesystem holding `path` (not tmpfs or ramfs,
    whose pages never go to a disk)? Unknown counts as no: the whole fall is the command's."""
    real, best, kind = os.path.realpath(path), "", ""
    try:
        parts = psutil.disk_partitions(all=True)
    except (OSError, psutil.Error):
        return False
    for part in parts:
        mount = part.mountpoint.rstrip("/") or "/"
        if under(real, mount) and len(mount) >= len(best):
            best, kind = mount, part.fstype
    return bool(kind) and kind not in ("tmpfs", "ramfs", "shm")


def preexec(limits: Limits) -> Callable[[], None]:
    """What the child runs before exec."""
    nproc = None
    if limits.processes is not None and os.getuid() != 0:
        # RLIMIT_NPROC counts every process of the real user: what runs now, plus the budget
        uid = os.getuid()
        nproc = limits.processes + sum(1 for p in psutil.process_iter(["uids"])
                                       if p.info["uids"] is not None and p.info["uids"].real == uid)

    def apply() -> None:
        if limits.file_bytes is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes))
        if nproc is not None:
            hard = resource.getrlimit(resource.RLIMIT_NPROC)[1]
            cap = nproc if hard == resource.RLIM_INFINITY else min(nproc, hard)
            resource.setrlimit(resource.RLIMIT_NPROC, (cap, cap))

    return apply


def broken(limits: Limits, returncode: int | None, logs: Sequence[Path]) -> str | None:
    """The file-size limit a command that ended broke, in words (None if it kept it)."""
    if limits.file_bytes is None:
        return None
    if returncode == -signal.SIGXFSZ:
        return f"wrote a file larger than {limits.file_bytes >> 20} MB"
    if any(size(p) >= limits.file_bytes for p in logs):
        return f"printed more than {limits.file_bytes >> 20} MB"   # Python ignores SIGXFSZ
    return None
