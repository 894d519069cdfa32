"""The commands running now, and autoloop's own short commands: which process of ours runs which
command (and the marker its tree carries), stopping them all from a signal handler, and the
children `run_captured` starts (git, a query of an interpreter), which no leftover sweep may
take for an orphan: starting a child is shared, listing our children for a sweep exclusive.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Mapping, Sequence

# the environment entry every process of a command's tree inherits (autoloop.process.leftovers
# finds what a command left behind by it)
MARKER_VAR = "AUTOLOOP_RUN_MARKER"
# What stops a run the way Ctrl-C does: SIGHUP too, sent when the terminal or ssh session the run
# was started from goes away (a nohup'd run ignores it, and keeps ignoring it).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

# The commands running now, for a signal handler to stop, and those it stopped (`interrupted`,
# not `exit -15`). Re-entrant: stop_current() runs in a signal handler on the main thread, maybe
# while it holds this lock (a plain Lock deadlocked a run on a second Ctrl-C).
_running: dict[int, str] = {}   # pid of a command running now -> the marker its tree carries
_stopped: set[int] = set()
_current_lock = threading.RLock()


def register(pid: int, marker: str) -> None:
    """A command started (its process `pid` leads its own group)."""
    with _current_lock:
        _running[pid] = marker


def unregister(pid: int) -> bool:
    """The command `pid` has ended; True when stop_current stopped it."""
    with _current_lock:
        _running.pop(pid, None)
        if pid in _stopped:
            _stopped.discard(pid)
            return True
        return False


def running_now() -> dict[int, str]:
    """pid -> marker of every command running now."""
    with _current_lock:
        return dict(_running)


def stop_current() -> None:
    """For signal handlers: SIGTERM the groups of the commands running now (proc.run reaps them)."""
    with _current_lock:
        pids = list(_running)
        _stopped.update(pids)
    for pid in pids:
        try:
            os.killpg(pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass


# Children of run_captured (git, a short query) are never leftovers, even when one thread starts
# them while another's command ends and is swept. Starting is shared, listing exclusive: a sweep
# waits for the starts in flight, and starts wait for a sweep that lists.
_spawn_cond = threading.Condition()
_spawning = 0
_listing = False
_known: set[int] = set()


@contextmanager
def starting() -> Iterator[None]:
    """Around starting a child and registering it (in _known or _running)."""
    global _spawning
    with _spawn_cond:
        _spawn_cond.wait_for(lambda: not _listing)
        _spawning += 1
    try:
        yield
    finally:
        with _spawn_cond:
            _spawning -= 1
            _spawn_cond.notify_all()


@contextmanager
def listing_children() -> Iterator[None]:
    """Around listing our children for a sweep: no start is half done meanwhile."""
    global _listing
    with _spawn_cond:
        _spawn_cond.wait_for(lambda: not _spawning and not _listing)
        _listing = True
    try:
        yield
    finally:
        with _spawn_cond:
            _listing = False
            _spawn_cond.notify_all()


def known() -> set[int]:
    """The children of run_captured alive now."""
    with _spawn_cond:
        return set(_known)


def run_captured(args: Sequence[str], *, cwd: Path | str | None = None, input: bytes | None = None,
                 env: Mapping[str, str] | None = None, timeout: float | None = None,
                 shielded: bool = False) -> subprocess.CompletedProcess[bytes]:
    """subprocess.run(args, capture_output=True, input=input) for autoloop's own short commands
    (git, a query of an interpreter), registered so no leftover sweep takes them for an orphan.
    Raises OSError when it cannot start and TimeoutExpired after killing it. `shielded`: in a
    session of its own, the STOP_SIGNALS blocked across the spawn (see gitrun.run)."""
    with starting():
        old = signal.pthread_sigmask(signal.SIG_BLOCK, set(STOP_SIGNALS)) if shielded else None
        try:
            child = subprocess.Popen(list(args), cwd=cwd, env=None if env is None else dict(env),
                                     start_new_session=shielded,
                                     stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        finally:
            if old is not None:
                signal.pthread_sigmask(signal.SIG_SETMASK, old)
        with _spawn_cond:
            _known.add(child.pid)
    try:
        out, err = child.communicate(input, timeout=timeout)
    except BaseException:
        child.kill()
        child.wait()
        raise
    finally:
        with _spawn_cond:
            _known.discard(child.pid)
    return subprocess.CompletedProcess(list(args), child.returncode, out, err)
