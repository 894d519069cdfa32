"""One way to run a command: its own session, a timeout that kills the whole tree, output straight
to files on disk (so a command printing gigabytes costs us no memory), and a result object
instead of exceptions.

Leftovers: a child that calls `setsid` (or double-forks) escapes its process group. Every child
gets an environment marker, and after each command we scan /proc for processes that carry it and
kill them too. That needs no privileges and works in CI containers; cgroups would be stronger
but are often not delegated to unprivileged users.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Mapping, Sequence

MARKER_VAR = "AUTOLOOP_RUN_MARKER"
TAIL_BYTES = 8192
KILL_GRACE_S = 3.0

# The processes running right now, so a signal handler can stop them at once, and the ones it
# stopped (their results say `interrupted`, not `exit -15`).
_current: set[subprocess.Popen[bytes]] = set()
_stopped: set[int] = set()
_current_lock = threading.Lock()


@dataclass(frozen=True)
class ProcResult:
    exit_code: int | None           # None when killed by our timeout or an interrupt
    timed_out: bool
    interrupted: bool
    duration_s: float
    stdout_path: Path
    stderr_path: Path
    leftovers_killed: int           # processes found after the command ended, and killed
    timeout_s: float | None = None  # the limit that applied
    start_error: str | None = None  # the command could not be started at all (why)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.interrupted

    def stdout_tail(self, limit: int = TAIL_BYTES) -> str:
        return read_tail(self.stdout_path, limit)

    def stderr_tail(self, limit: int = TAIL_BYTES) -> str:
        return read_tail(self.stderr_path, limit)

    def describe(self) -> str:
        if self.interrupted:
            return "interrupted"
        if self.timed_out:
            if self.timeout_s is not None:
                return f"timed out after {self.timeout_s:g}s"
            return f"timed out after {self.duration_s:.0f}s"
        return f"exit {self.exit_code}"


def new_marker() -> str:
    return uuid.uuid4().hex


def read_tail(path: Path, limit: int = TAIL_BYTES) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - limit))
            data = f.read()
    except OSError:
        return ""
    return data.decode("utf-8", "replace")


def run(
    command: str | Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout: float | None,
    log_stem: Path,
    stdin: Path | None = None,
    marker: str | None = None,
) -> ProcResult:
    """Run `command` (a shell string, or an argv list) and wait for it.

    stdout goes to `<log_stem>.out`, stderr to `<log_stem>.err`. The whole process tree is
    killed on timeout, on interrupt, and — for anything left running — when the command ends.
    """
    log_stem.parent.mkdir(parents=True, exist_ok=True)
    out_path = log_stem.with_name(log_stem.name + ".out")
    err_path = log_stem.with_name(log_stem.name + ".err")
    marker = marker or new_marker()
    child_env = dict(env)
    child_env[MARKER_VAR] = marker
    shell = isinstance(command, str)
    started = time.monotonic()
    timed_out = interrupted = False
    with open(out_path, "wb") as out, open(err_path, "wb") as err, _stdin(stdin) as inp:
        try:
            proc = subprocess.Popen(
                command if shell else list(command),
                shell=shell,
                cwd=cwd,
                env=child_env,
                stdin=inp,
                stdout=out,
                stderr=err,
                start_new_session=True,
                executable="/bin/sh" if shell else None,
            )
        except OSError as exc:
            # like a shell would: 127 not found, 126 not executable — a result, not an exception
            why = exc.strerror or str(exc)
            err.write(f"autoloop: cannot start {command!r}: {why}\n".encode())
            code = 127 if isinstance(exc, FileNotFoundError) else 126
            return ProcResult(code, False, False, time.monotonic() - started, out_path, err_path, 0,
                              timeout, why)
        with _current_lock:
            _current.add(proc)
        try:
            try:
                _wait(proc, timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
            except BaseException:
                interrupted = True
                raise
        finally:
            _kill_group(proc)
            with _current_lock:
                _current.discard(proc)
                if proc.pid in _stopped:
                    _stopped.discard(proc.pid)
                    interrupted = True
            leftovers = kill_marked(marker)
    duration = time.monotonic() - started
    code = None if (timed_out or interrupted) else proc.returncode
    return ProcResult(code, timed_out, interrupted, duration, out_path, err_path, leftovers, timeout)


def _wait(proc: subprocess.Popen[bytes], timeout: float | None) -> None:
    """Wait for the child. Popen.wait(timeout) polls with sleeps of up to 50 ms, which adds up to
    a noticeable share of a fast cycle; a pidfd wakes us the moment the child exits (Linux)."""
    if timeout is None or not hasattr(os, "pidfd_open"):
        proc.wait(timeout=timeout)
        return
    try:
        fd = os.pidfd_open(proc.pid)
    except OSError:
        proc.wait(timeout=timeout)
        return
    try:
        ready, _, _ = select.select([fd], [], [], timeout)
    finally:
        os.close(fd)
    if not ready:
        raise subprocess.TimeoutExpired(proc.args, timeout)
    proc.wait()


class _stdin:
    """stdin from a file, or /dev/null — never a pipe left open (agents like codex wait on it)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.f: IO[bytes] | None = None

    def __enter__(self) -> IO[bytes]:
        self.f = open(self.path if self.path else os.devnull, "rb")
        return self.f

    def __exit__(self, *exc: object) -> None:
        assert self.f is not None
        self.f.close()


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group, then SIGKILL what is still there after a grace period."""
    pgid = proc.pid  # start_new_session: the child leads its own group
    try:
        os.killpg(pgid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass
    if proc.returncode is None:
        try:
            proc.wait(timeout=KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
    # The leader may have exited while its children linger in the group.
    deadline = time.monotonic() + KILL_GRACE_S
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if proc.returncode is None:
        proc.wait()


def _group_alive(pgid: int) -> bool:
    """Is any process of the group still running? Zombies do not count: an orphan waits for
    init to reap it, which in a container may take seconds or never happen."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    proc_dir = Path("/proc")
    if not proc_dir.is_dir():
        return True
    for entry in os.scandir(proc_dir):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return False


def kill_marked(marker: str, *, prefix: bool = False) -> int:
    """Kill every process whose environment carries our marker (Linux /proc). Returns how many.
    With `prefix`, every marker that starts with `marker` counts (a parallel run's workers)."""
    needle = f"{MARKER_VAR}={marker}".encode()
    killed = 0
    for _ in range(5):  # a fork loop can spawn while we scan: repeat until none is found
        found = [pid for pid in _marked_pids(needle, prefix)]
        if not found:
            break
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.02)
    return killed


def _marked_pids(needle: bytes, prefix: bool = False) -> list[int]:
    proc_dir = Path("/proc")
    if not proc_dir.is_dir():
        return []
    me = os.getpid()
    pids: list[int] = []
    for entry in os.scandir(proc_dir):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if pid == me:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read()
        except OSError:
            continue
        entries = environ.split(b"\0")
        if needle in entries or (prefix and any(e.startswith(needle) for e in entries)):
            # A zombie still shows its environ; killing it is harmless.
            pids.append(pid)
    return pids


def stop_current() -> None:
    """For signal handlers: SIGTERM the groups of the commands running now. They are reaped by run()."""
    with _current_lock:
        procs = list(_current)
    for proc in procs:
        with _current_lock:
            _stopped.add(proc.pid)
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
