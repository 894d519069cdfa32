"""One way to run a command: its own session, a timeout that kills the whole tree, output straight
to files on disk (so a command printing gigabytes costs us no memory), and a result object
instead of exceptions.

Leftovers: a child that calls `setsid` (or double-forks) escapes its process group, and one that
also clears its environment (`setsid env -i cmd &`) escapes an environment marker. Three nets,
each catching what the one before misses:

1. the process group, killed (TERM, then KILL) when the command ends or times out;
2. an environment marker every child inherits, found by a /proc scan — the only net that also
   finds what a *previous*, kill -9'd run left behind (the marker is fixed per repo and tag);
3. while a command runs, this process is a child subreaper (PR_SET_CHILD_SUBREAPER, Linux ≥
   3.4, no privileges needed): every orphan of the command's tree — setsid, double fork,
   `env -i`, whatever — is re-parented to us instead of to init, so when the command ends any
   new child of ours that is not a command we are running is a leftover, and is killed with its
   whole subtree.

Why not a cgroup: cgroup v2 would also survive our own kill -9, but it is writable only where
it is delegated (systemd user slices, some containers), and CI runners and Docker often mount
it read-only or as a v1/v2 hybrid. The subreaper works for every user on every Linux; with
`sandbox: bwrap`, the generator also gets its own PID namespace, which the kernel tears down
(killing everything in it) when the generator exits.
"""

from __future__ import annotations

import ctypes
import os
import resource
import select
import shutil
import signal
import stat
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
_current_markers: dict[int, str] = {}   # pid of a running command -> the marker its tree carries
_stopped: set[int] = set()
# Re-entrant: stop_current() runs in a signal handler, which runs on the main thread between
# two bytecodes — possibly while that thread holds this very lock (a second Ctrl-C landing in
# run()'s bookkeeping deadlocked the run with a plain Lock).
_current_lock = threading.RLock()
# Every leftover process killed so far (after a command ended, or by a marker scan), so a caller
# can tell whether some step left processes running: read it before and after.
_leftovers_total = 0


def leftovers_killed() -> int:
    return _leftovers_total


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
    over_limit: str | None = None   # it was stopped for breaking a resource limit (which, in words)

    @property
    def ok(self) -> bool:
        return (self.exit_code == 0 and not self.timed_out and not self.interrupted
                and self.over_limit is None)

    def stdout_tail(self, limit: int = TAIL_BYTES) -> str:
        return read_tail(self.stdout_path, limit)

    def stderr_tail(self, limit: int = TAIL_BYTES) -> str:
        return read_tail(self.stderr_path, limit)

    def describe(self) -> str:
        if self.interrupted:
            return "interrupted"
        if self.over_limit is not None:
            return f"stopped: {self.over_limit}"
        if self.timed_out:
            if self.timeout_s is not None:
                return f"timed out after {self.timeout_s:g}s"
            return f"timed out after {self.duration_s:.0f}s"
        return f"exit {self.exit_code}"


@dataclass(frozen=True)
class Limits:
    """Resource limits for one command (the generator's; the verifier is trusted and unbounded).

    file_bytes: no file it writes may grow beyond this (RLIMIT_FSIZE; its own output logs too).
    disk_bytes: it is stopped once the filesystem holding `disk_path` has lost this much free
                space since it started (checked four times a second).
    processes:  at most this many more processes of our user at a time (RLIMIT_NPROC; the kernel
                does not apply it to root, for whom the subreaper's clean-up is the bound).
    """

    file_bytes: int | None = None
    disk_bytes: int | None = None
    disk_path: Path | None = None
    processes: int | None = None


def new_marker() -> str:
    return uuid.uuid4().hex


def read_tail(path: Path, limit: int = TAIL_BYTES) -> str:
    return read_regular(path, limit, tail=True).decode("utf-8", "replace")


def read_regular(path: Path, limit: int, *, tail: bool = False) -> bytes:
    """At most `limit` bytes (the last ones with `tail`) of the regular file at `path`; b"" for
    anything else — a symlink is not followed, a FIFO does not block, a folder is no error. For
    files a generator or candidate code could have put there."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return b""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return b""
        with os.fdopen(fd, "rb", closefd=False) as f:
            if tail:
                f.seek(max(0, st.st_size - limit))
            return f.read(limit)
    except OSError:
        return b""
    finally:
        os.close(fd)


def run(
    command: str | Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout: float | None,
    log_stem: Path,
    stdin: Path | None = None,
    marker: str | None = None,
    limits: Limits | None = None,
) -> ProcResult:
    """Run `command` (a shell string, or an argv list) and wait for it.

    stdout goes to `<log_stem>.out`, stderr to `<log_stem>.err`. The whole process tree is
    killed on timeout, on interrupt, on breaking `limits`, and — for anything left running,
    detached or not — when the command ends.
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
    over: str | None = None
    watch = _DiskWatch(limits) if limits is not None and limits.disk_bytes is not None else None
    with _fresh_log(out_path) as out, _fresh_log(err_path) as err, _stdin(stdin) as inp, _Adopting(marker) as adopting:
        starting = _Starting()
        starting.__enter__()   # known before any leftover sweep of another thread can see it
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
                preexec_fn=_rlimits(limits) if limits is not None else None,
            )
        except BaseException as exc:
            starting.__exit__(None, None, None)
            if not isinstance(exc, OSError):
                raise
            # like a shell would: 127 not found, 126 not executable — a result, not an exception
            why = exc.strerror or str(exc)
            err.write(f"autoloop: cannot start {command!r}: {why}\n".encode())
            code = 127 if isinstance(exc, FileNotFoundError) else 126
            return ProcResult(code, False, False, time.monotonic() - started, out_path, err_path, 0,
                              timeout, why)
        with _current_lock:
            _current.add(proc)
            _current_markers[proc.pid] = marker
        starting.__exit__(None, None, None)
        try:
            try:
                over = _wait(proc, timeout, watch)
            except subprocess.TimeoutExpired:
                timed_out = True
            except BaseException:
                interrupted = True
                raise
        finally:
            # The command is over: whatever of its tree still runs after a moment's grace (its
            # group's members and every escapee are orphans now, re-parented to us) was left behind.
            ended = proc.returncode is not None and not timed_out and not interrupted and over is None
            left = _settled(adopting.live) if ended else 0
            _kill_group(proc)
            with _current_lock:
                _current.discard(proc)
                _current_markers.pop(proc.pid, None)
                if proc.pid in _stopped:
                    _stopped.discard(proc.pid)
                    interrupted = True
            # after a timeout or an interrupt, a tree still running is no surprise: count only
            # what a command that ended by itself left behind
            marked = 0 if adopting.working else kill_marked(marker, count=False)
            killed = adopting.kill_leftovers()
            if ended:
                _count(max(left, marked))
            leftovers = max(left, killed) + marked
        # nothing of the command runs any more: what is at the log paths now must be what it
        # wrote through the descriptors we gave it (a file renamed over them is put back)
        for f, path in ((out, out_path), (err, err_path)):
            _own_output(f, path)
    if over is None and limits is not None and limits.file_bytes is not None \
            and proc.returncode == -signal.SIGXFSZ:
        over = f"wrote a file larger than {limits.file_bytes >> 20} MB"
    if over is None and limits is not None and limits.file_bytes is not None:
        # Python (and others) ignore SIGXFSZ: the write is cut short and goes on quietly
        for path in (out_path, err_path):
            try:
                if path.stat().st_size >= limits.file_bytes:
                    over = f"printed more than {limits.file_bytes >> 20} MB"
            except OSError:
                pass
    if over is None and watch is not None:
        over = watch.check()  # what it wrote just before it ended counts too
    duration = time.monotonic() - started
    code = None if (timed_out or interrupted or over) else proc.returncode
    return ProcResult(code, timed_out, interrupted, duration, out_path, err_path, leftovers, timeout,
                      over_limit=over)


def _clear(path: Path) -> None:
    """Remove whatever is at `path` (a file, a link, a FIFO, a folder someone planted)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path, ignore_errors=True)
    else:
        os.unlink(path)


def _fresh_log(path: Path) -> IO[bytes]:
    """A new, empty regular file of our own at `path`: never written through a symlink or
    into a FIFO or folder planted at that name (those are removed first)."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(8):
        _clear(path)
        try:
            return os.fdopen(os.open(path, flags, 0o644), "w+b")
        except FileExistsError:
            continue   # planted again between the removal and the open
    raise OSError(f"{path}: something keeps replacing this log file")


def _own_output(f: IO[bytes], path: Path) -> None:
    """Make `path` again the file behind our descriptor `f`, when something replaced it: the
    output read back by path is then what the command wrote to its stdout/stderr."""
    mine = os.fstat(f.fileno())
    try:
        st = os.lstat(path)
        if (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino):
            return
    except FileNotFoundError:
        pass
    f.flush()
    f.seek(0)
    with _fresh_log(path) as copy:
        shutil.copyfileobj(f, copy, 1 << 20)


def _wait(proc: subprocess.Popen[bytes], timeout: float | None, watch: _DiskWatch | None = None) -> str | None:
    """Wait for the child; returns why it was cut short by `watch` (None when it ended by itself).
    Popen.wait(timeout) polls with sleeps of up to 50 ms, which adds up to a noticeable share of
    a fast cycle; a pidfd wakes us the moment the child exits (Linux)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    fd = None
    if hasattr(os, "pidfd_open") and (timeout is not None or watch is not None):
        try:
            fd = os.pidfd_open(proc.pid)
        except OSError:
            fd = None
    try:
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            tick = left if watch is None else min(_DiskWatch.TICK_S, left if left is not None else _DiskWatch.TICK_S)
            if fd is not None:
                ready, _, _ = select.select([fd], [], [], tick)
                done = bool(ready)
            else:
                try:
                    proc.wait(timeout=tick)
                    done = True
                except subprocess.TimeoutExpired:
                    done = False
            if done:
                proc.wait()
                return None
            if watch is not None:
                why = watch.check()
                if why is not None:
                    return why
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(proc.args, timeout or 0.0)
    finally:
        if fd is not None:
            os.close(fd)


class _DiskWatch:
    """Stops a command that eats the disk: compares the free space of the filesystem holding
    the work tree with what it was when the command started."""

    TICK_S = 0.25

    def __init__(self, limits: Limits) -> None:
        assert limits.disk_bytes is not None
        self.limit = limits.disk_bytes
        self.path = str(limits.disk_path or ".")
        self.start = self._free()

    def _free(self) -> int | None:
        try:
            st = os.statvfs(self.path)
        except OSError:
            return None
        return st.f_bavail * st.f_frsize

    def check(self) -> str | None:
        now = self._free()
        if self.start is None or now is None:
            return None
        if self.start - now > self.limit:
            return f"took more than {self.limit >> 20} MB of disk"
        return None


def _rlimits(limits: Limits):  # -> Callable[[], None] run in the child before exec
    nproc = None
    if limits.processes is not None and os.getuid() != 0:
        # RLIMIT_NPROC counts every process of the user: allow what runs now, plus the budget
        nproc = _processes_of(os.getuid()) + limits.processes

    def apply() -> None:
        if limits.file_bytes is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes))
        if nproc is not None:
            soft, hard = resource.getrlimit(resource.RLIMIT_NPROC)
            cap = nproc if hard == resource.RLIM_INFINITY else min(nproc, hard)
            resource.setrlimit(resource.RLIMIT_NPROC, (cap, cap))

    return apply


def _processes_of(uid: int) -> int:
    n = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    n += 1
            except OSError:
                pass
    return n


# ---- orphans: the subreaper ---------------------------------------------------------------

_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37
_reaper_lock = threading.Lock()
_reaper_users = 0
_reaper_was_set = False


def _prctl(option: int, arg: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False  # not Linux: the marker scan is the net


def _is_subreaper() -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        value = ctypes.c_int(0)
        if libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(value), 0, 0, 0) != 0:
            return False
        return bool(value.value)
    except (OSError, AttributeError):
        return False


# Children started on purpose outside run() (git, a short query; see run_captured) are never
# leftovers, even when a parallel round (autoloop.parallel) starts them in one thread while a
# command of another thread ends and its leftovers are swept: see _Starting and _Listing.
# Starting is shared (threads start children at once), listing is exclusive: a sweep waits for
# the starts in flight, and starts wait for a sweep that is listing.
_spawn_cond = threading.Condition()
_spawning = 0
_listing = False
_known: set[int] = set()


class _Starting:
    """Around starting a child and registering it (in _known or _current)."""

    def __enter__(self) -> None:
        global _spawning
        with _spawn_cond:
            while _listing:
                _spawn_cond.wait()
            _spawning += 1

    def __exit__(self, *exc: object) -> None:
        global _spawning
        with _spawn_cond:
            _spawning -= 1
            _spawn_cond.notify_all()


class _Listing:
    """Around listing our children for a sweep: no start is half done meanwhile."""

    def __enter__(self) -> None:
        global _listing
        with _spawn_cond:
            while _spawning or _listing:
                _spawn_cond.wait()
            _listing = True

    def __exit__(self, *exc: object) -> None:
        global _listing
        with _spawn_cond:
            _listing = False
            _spawn_cond.notify_all()


def run_captured(args: Sequence[str], *, cwd: Path | str | None = None, input: bytes | None = None,
                 env: Mapping[str, str] | None = None, timeout: float | None = None,
                 shielded: bool = False) -> subprocess.CompletedProcess[bytes]:
    """subprocess.run(args, capture_output=True, input=input) for autoloop's own short commands
    (git), registered so that no leftover sweep takes them for a command's orphan. `shielded`:
    in a session of its own, with SIGINT/SIGTERM blocked across the spawn (see
    workspace.run_git_process)."""
    with _Starting():
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM}) if shielded else None
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


class _Adopting:
    """While a command runs, orphans of its tree become our children (subreaper); afterwards,
    every child of ours that was not there before and is not a command still running is a
    leftover, killed with its whole subtree."""

    def __init__(self, marker: str | None = None) -> None:
        self.marker = marker

    def __enter__(self) -> _Adopting:
        global _reaper_users, _reaper_was_set
        with _reaper_lock:
            if _reaper_users == 0:
                _reaper_was_set = _is_subreaper()
                if not _reaper_was_set:
                    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
            _reaper_users += 1
        # without the subreaper (not Linux, or prctl refused), the marker scan is the net
        self.working = _is_subreaper()
        self.before = set(_my_children())
        return self

    def _new(self) -> list[int]:
        with _Listing():
            with _current_lock:
                running = {p.pid for p in _current}
            with _spawn_cond:
                known = set(_known)
            new = [pid for pid in _my_children()
                   if pid not in self.before and pid not in running and pid not in known]
        # an orphan marked by another command still running (a parallel worker's) is that
        # command's to sweep when it ends, not ours: it may still be doing that command's work
        return [pid for pid in new if not _others(pid, self.marker)]

    def live(self) -> int:
        """Live processes in the subtrees of new children; adopted zombies are reaped, as init would."""
        new = []
        for pid in self._new():
            if _state(pid) in ("Z", "X"):
                _reap(pid, time.monotonic())
            else:
                new.append(pid)
        if not new:
            return 0
        table = _table()
        return sum(1 for pid in _subtree(new, table) if table.get(pid, (0, "X"))[1] not in ("Z", "X"))

    def kill_leftovers(self) -> int:
        killed = 0
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:
            new = self._new()
            if not new:
                break
            table = _table()
            victims = _subtree(new, table)
            for pid in victims:
                # freeze first, so nothing forks between being found and being killed
                _signal(pid, signal.SIGSTOP)
            for pid in victims:
                if table.get(pid, (0, "Z"))[1] not in ("Z", "X"):
                    killed += 1
                _signal(pid, signal.SIGKILL)
            for pid in new:
                _reap(pid, deadline)
        return killed

    def __exit__(self, *exc: object) -> None:
        global _reaper_users
        with _reaper_lock:
            _reaper_users -= 1
            if _reaper_users == 0 and not _reaper_was_set:
                _prctl(_PR_SET_CHILD_SUBREAPER, 0)


def _others(pid: int, marker: str | None) -> bool:
    """Does `pid` carry the marker of a command other than ours that is still running?"""
    if marker is None:
        return False
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            entries = f.read().split(b"\0")
    except OSError:
        return False
    prefix = f"{MARKER_VAR}=".encode()
    theirs = next((e[len(prefix):].decode(errors="replace") for e in entries if e.startswith(prefix)), None)
    if theirs is None or theirs == marker:
        return False
    with _current_lock:
        return theirs in _current_markers.values()


def _my_children() -> list[int]:
    """Our direct children: /proc/self/task/*/children (cheap), else a scan of /proc."""
    me = os.getpid()
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{me}/task"):
            with open(f"/proc/{me}/task/{tid}/children") as f:
                out.extend(int(x) for x in f.read().split())
    except (OSError, ValueError):
        return _children(me, _table())
    return out


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0].decode()
    except (OSError, IndexError):
        return "X"


SETTLE_S = 0.3


def _settled(count, within: float = SETTLE_S) -> int:  # type: ignore[no-untyped-def]
    """`count()` once the processes it counts had a moment to finish exiting on their own: a
    child that ends a few milliseconds after its parent (bwrap's init after its monitor, a
    shell's last pipeline stage) is not left behind."""
    deadline = time.monotonic() + within
    n = count()
    pause = 0.0005      # such a straggler is gone within a millisecond or two: look soon, then less often
    while n and time.monotonic() < deadline:
        time.sleep(pause)
        pause = min(pause * 2, 0.01)
        n = count()
    return n


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _reap(pid: int, deadline: float) -> None:
    """Collect an adopted child's exit status (it is ours now: nobody else will)."""
    while True:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return
        if done or time.monotonic() >= deadline:
            return
        time.sleep(0.002)


def _table(with_group: bool = False) -> dict:
    """pid -> (parent pid, state) of every process we can see (+ process group)."""
    out: dict = {}
    try:
        entries = os.scandir("/proc")
    except OSError:
        return out
    with entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
                state = fields[0].decode()
                out[int(entry.name)] = (int(fields[1]), state, int(fields[2])) if with_group \
                    else (int(fields[1]), state)
            except (OSError, IndexError, ValueError):
                continue
    return out


def _children(pid: int, table: dict[int, tuple[int, str]]) -> list[int]:
    return [p for p, (ppid, _) in table.items() if ppid == pid]


def _subtree(roots: list[int], table: dict[int, tuple[int, str]]) -> list[int]:
    kids: dict[int, list[int]] = {}
    for p, (ppid, _) in table.items():
        kids.setdefault(ppid, []).append(p)
    out, todo = [], list(roots)
    seen: set[int] = set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        out.append(p)
        todo.extend(kids.get(p, ()))
    return out


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


def _count(n: int) -> int:
    global _leftovers_total
    _leftovers_total += n
    return n


def kill_marked(marker: str, *, count: bool = True, prefix: bool = False) -> int:
    """Kill every process whose environment carries our marker (Linux /proc). Returns how many.
    With `prefix`, every marker that starts with `marker` counts (a parallel run's workers)."""
    needle = f"{MARKER_VAR}={marker}".encode()
    killed = 0
    if count:  # what is still finishing its exit is not left behind
        _settled(lambda: sum(1 for pid in _marked_pids(needle, prefix) if not _zombie(pid)))
    for _ in range(5):  # a fork loop can spawn while we scan: repeat until none is found
        found = [pid for pid in _marked_pids(needle, prefix) if not _zombie(pid)]
        if not found:
            break
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.02)
    return _count(killed) if count else killed


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X")
    except (OSError, IndexError):
        return True


def _marked_pids(needle: bytes, prefix: bool = False) -> list[int]:
    # Runs after every child (a few times a cycle) over every process of the machine: plain
    # descriptors and one substring test first, the NUL-separated match only on a hit.
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    me = os.getpid()
    pids: list[int] = []
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)
    for name in names:
        if not name.isdigit():
            continue
        pid = int(name)
        if pid == me:
            continue
        try:
            fd = os.open(f"/proc/{name}/environ", flags)
        except OSError:
            continue
        try:
            chunks = []
            while chunk := os.read(fd, 1 << 16):
                chunks.append(chunk)
        except OSError:
            continue
        finally:
            os.close(fd)
        environ = b"".join(chunks)
        if needle not in environ:
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
