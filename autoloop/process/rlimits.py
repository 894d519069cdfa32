"""Resource limits of one command (the generator's; the verifier is trusted): what the kernel
enforces (file size, process count) and what we watch (disk space), and how to say which broke."""

from __future__ import annotations

import os
import resource
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import psutil

from autoloop.process.logfile import size

DISK_TICK_S = 0.25   # how often the disk limit is checked


@dataclass(frozen=True)
class Limits:
    """file_bytes: no file it writes may grow beyond this (RLIMIT_FSIZE; its own logs too).
    disk_bytes: stopped once the filesystem holding `disk_path` lost this much free space.
    processes:  at most this many more processes of our user (RLIMIT_NPROC; the kernel does not
                apply it to root, for whom the subreaper's clean-up is the bound)."""

    file_bytes: int | None = None
    disk_bytes: int | None = None
    disk_path: Path | None = None
    processes: int | None = None


class DiskWatch:
    """Free space of the filesystem holding the work tree, against what it was at the start."""

    def __init__(self, limits: Limits) -> None:
        self.limit, self.path = limits.disk_bytes or 0, str(limits.disk_path or ".")
        self.start = self._free()

    def _free(self) -> int | None:
        try:
            st = os.statvfs(self.path)
            return st.f_bavail * st.f_frsize
        except OSError:
            return None

    def check(self) -> str | None:
        now = self._free()
        if self.start is not None and now is not None and self.start - now > self.limit:
            return f"took more than {self.limit >> 20} MB of disk"
        return None


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
