"""One way to run a command: its own session, a timeout that kills the whole tree, output straight
to files (a command printing gigabytes costs no memory), a result object, not exceptions.

A child that calls `setsid` escapes its process group; one that also clears its environment
escapes an environment marker. Three nets: (1) the process group, killed (TERM, then KILL) when
the command ends or times out; (2) an environment marker every child inherits, found by a /proc
scan, the only net that also finds what a kill -9'd run left behind (fixed per repo and tag);
(3) while a command runs we are a child subreaper (no privileges): orphans of its tree become our
children, and when it ends any new child that is not a command still running is killed with its
subtree. Not a cgroup: v2 is writable only where delegated, often not in CI or Docker (and
`sandbox: bwrap` adds a PID namespace the kernel tears down).

Process tables come from psutil, except after every command: our children (/proc/self/task) and
the marker scan (a substring test on raw environ; psutil is 3-6x slower: benchmarks/proc_tables.py).
"""

from __future__ import annotations

import ctypes
import os
import re
import select
import signal
import subprocess
import threading
import time
import uuid
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping, NamedTuple, Sequence

import psutil

from autoloop.process import kernel, rlimits
from autoloop.process.logfile import TAIL_BYTES, fresh_log, own_output, read_regular, read_tail  # noqa: F401 (re-exported)
from autoloop.process.rlimits import Limits

MARKER_VAR = "AUTOLOOP_RUN_MARKER"
KILL_GRACE_S = 3.0
SETTLE_S = 0.3
SWEEP_S = 10.0           # the longest a leftover sweep goes on (a fork loop respawning)
_DEAD = (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
# What stops a run the way Ctrl-C does: SIGHUP too, sent when the terminal or ssh session the run
# was started from goes away (a nohup'd run ignores it, and keeps ignoring it).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_PR_SET_CHILD_SUBREAPER, _PR_GET_CHILD_SUBREAPER = 36, 37

# The commands running now, for a signal handler to stop, and those it stopped (`interrupted`,
# not `exit -15`). Re-entrant: stop_current() runs in a signal handler on the main thread, maybe
# while it holds this lock (a plain Lock deadlocked a run on a second Ctrl-C).
_running: dict[int, str] = {}   # pid of a command running now -> the marker its tree carries
_stopped: set[int] = set()
_current_lock = threading.RLock()
_leftovers_total = 0   # every leftover killed so far: a caller compares it before and after a step


def leftovers_killed() -> int:
    return _leftovers_total


@dataclass(frozen=True)
class ProcResult:
    exit_code: int | None           # None when killed by our timeout, an interrupt or a limit
    timed_out: bool
    interrupted: bool
    duration_s: float
    stdout_path: Path
    stderr_path: Path
    leftovers_killed: int           # processes found after the command ended, and killed
    timeout_s: float | None = None  # the limit that applied
    start_error: str | None = None  # why the command could not be started at all
    over_limit: str | None = None   # the resource limit it broke, in words
    # timed here, out of the command's reach (verifier.measure); None unless it ended by itself
    wall_s: float | None = None     # from the start until its last process had ended
    cpu_s: float | None = None      # user+system CPU of every process of its tree (see _Adopting)

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
            return f"timed out after {self.timeout_s:g}s" if self.timeout_s is not None \
                else f"timed out after {self.duration_s:.0f}s"
        return f"exit {self.exit_code}"


class Step(NamedTuple):
    """One command of a measurement: a guard (a failing one ends the sequence) or the verifier."""
    name: str
    command: str
    timeout: float | None
    guard: bool

    @property
    def log_name(self) -> str:
        return f"guard-{re.sub(r'[^A-Za-z0-9_.-]+', '_', self.name)[:60] or 'guard'}" if self.guard else "verifier"


def new_marker() -> str:
    return uuid.uuid4().hex


def run(command: str | Sequence[str], *, cwd: Path, env: Mapping[str, str], timeout: float | None,
        log_stem: Path, stdin: Path | None = None, marker: str | None = None,
        limits: Limits | None = None) -> ProcResult:
    """Run `command` (a shell string, or an argv list) and wait for it; stdout to
    `<log_stem>.out`, stderr to `<log_stem>.err`. The whole tree is killed on timeout, interrupt,
    a broken limit and, for anything left running, when the command ends."""
    log_stem.parent.mkdir(parents=True, exist_ok=True)
    out_path, err_path = (log_stem.with_name(log_stem.name + ext) for ext in (".out", ".err"))
    marker = marker or new_marker()
    shell = isinstance(command, str)
    started = time.monotonic()
    timed_out = interrupted = False
    over: str | None = None
    watch = rlimits.disk_watch(limits, lambda: {   # its processes: marked, or in its tree whatever their environment
        *_marked_pids(marker, False), *(p.pid for p in _subtree([proc.pid, *adopting._new()]))})
    # stdin is a file or /dev/null, never a pipe left open (agents like codex wait on it)
    with fresh_log(out_path) as out, fresh_log(err_path) as err, \
            open(stdin or os.devnull, "rb") as inp, _Adopting(marker) as adopting:
        with _starting():   # registered before any leftover sweep of another thread can look
            try:
                launched = time.monotonic()   # wall_s: from here, not from our own preparations
                proc = subprocess.Popen(
                    command if shell else list(command), shell=shell, cwd=cwd,
                    env={**env, MARKER_VAR: marker}, stdin=inp, stdout=out, stderr=err,
                    start_new_session=True, executable="/bin/sh" if shell else None,
                    preexec_fn=rlimits.preexec(limits) if limits is not None else None)
            except OSError as exc:
                # like a shell: 127 not found, 126 not executable; a result, not an exception
                why = exc.strerror or str(exc)
                err.write(f"autoloop: cannot start {command!r}: {why}\n".encode())
                return ProcResult(127 if isinstance(exc, FileNotFoundError) else 126, False, False,
                                  time.monotonic() - started, out_path, err_path, 0, timeout, why)
            with _current_lock:
                _running[proc.pid] = marker
        try:
            try:
                over = _wait(proc, timeout, watch, adopting)
            except subprocess.TimeoutExpired:
                timed_out = True
            except BaseException:
                interrupted = True
                raise
        finally:
            # Whatever of the tree still runs after a moment's grace (the group's members and
            # every escapee are orphans now, re-parented to us) was left behind.
            ended = proc.returncode is not None and not timed_out and not interrupted and over is None
            left = _settled(adopting.live) if ended else 0
            _kill_group(proc)
            done_at = time.monotonic()   # nothing of the tree runs now, unless `left` says so
            with _current_lock:
                _running.pop(proc.pid, None)
                if proc.pid in _stopped:
                    _stopped.discard(proc.pid)
                    interrupted = True
            # after a timeout or an interrupt a tree still running is no surprise: count only
            # what a command that ended by itself left behind
            marked = 0 if adopting.working else kill_marked(marker, count=False)
            killed = adopting.kill_leftovers()
            if ended:
                _count(max(left, marked))
            leftovers = max(left, killed) + marked
            if left or killed or marked:
                done_at = time.monotonic()   # what it left running ended only now
        # nothing of the command runs any more: the log paths must hold what it wrote through
        # the descriptors we gave it (a file renamed over them is put back)
        for f, path in ((out, out_path), (err, err_path)):
            own_output(f, path)
    if over is None and limits is not None:
        over = rlimits.broken(limits, proc.returncode, (out_path, err_path))
    if over is None and watch is not None:
        over = watch.check(last=True)   # what it wrote just before it ended counts too
    code = None if (timed_out or interrupted or over) else proc.returncode
    # Without the subreaper, orphans went to init: neither their end nor their CPU reached us.
    timed = code is not None and adopting.working and adopting.accounted
    return ProcResult(code, timed_out, interrupted, time.monotonic() - started, out_path, err_path,
                      leftovers, timeout, over_limit=over,
                      wall_s=done_at - launched if timed else None, cpu_s=adopting.cpu if timed else None)


def run_steps(steps: Iterable[Step], *, cwd: Path, env: Mapping[str, str], log_dir: Path,
              marker: str, wrap: Callable[[str], str | list[str]] | None = None,
              after: Callable[[Step], None] | None = None, stdin: Path | None = None) -> list[ProcResult]:
    """Each step in turn (logs at log_dir/<step.log_name>), up to the first failing guard. `wrap` turns
    a command into what runs (a sandbox); `after` is called after each; `stdin`: the file each reads."""
    results: list[ProcResult] = []
    for step in steps:
        res = run(step.command if wrap is None else wrap(step.command), cwd=cwd, env=env,
                  timeout=step.timeout, log_stem=log_dir / step.log_name, marker=marker, stdin=stdin)
        if after is not None:
            after(step)
        results.append(res)
        if step.guard and not res.ok:
            break
    return results


def _wait(proc: subprocess.Popen[bytes], timeout: float | None, watch: rlimits.DiskWatch | None,
          adopting: _Adopting) -> str | None:
    """Wait for the child; returns why `watch` cut it short (None when it ended by itself).
    Popen.wait(timeout) polls with sleeps of up to 50 ms, a noticeable share of a fast cycle; a
    pidfd wakes us the moment the child exits. Reaped with wait4: its rusage goes to `adopting`."""
    deadline = None if timeout is None else time.monotonic() + timeout
    fd = None
    if hasattr(os, "pidfd_open"):
        try:
            fd = os.pidfd_open(proc.pid)
        except OSError:
            pass
    try:
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            tick = left if watch is None else min(rlimits.DISK_TICK_S, rlimits.DISK_TICK_S if left is None else left)
            if fd is not None:
                done = bool(select.select([fd], [], [], tick)[0]) and _reaped_main(proc, adopting, block=True)
            else:
                done = _reaped_main(proc, adopting, block=False)
                if not done:
                    time.sleep(0.005 if tick is None else min(0.005, tick))
            if done:
                return None
            why = watch.check() if watch is not None else None
            if why is not None:
                return why
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(proc.args, timeout or 0.0)
    finally:
        if fd is not None:
            os.close(fd)


def _reaped_main(proc: subprocess.Popen[bytes], adopting: _Adopting, *, block: bool) -> bool:
    """Reap the command's own process with wait4 (Popen.wait would lose its rusage)."""
    try:
        pid, status, usage = os.wait4(proc.pid, 0 if block else os.WNOHANG)
    except ChildProcessError:   # reaped elsewhere: its usage is lost
        adopting.accounted = False
        proc.wait()
        return True
    if pid == 0:
        return False
    adopting.cpu += usage.ru_utime + usage.ru_stime
    proc.returncode = os.waitstatus_to_exitcode(status)
    return True


# ---- orphans: the subreaper ------------------------------------------------------------------

_reaper_lock = threading.Lock()
_reaper_users = 0
_reaper_was_set = False


def _is_subreaper() -> bool:
    value = ctypes.c_int(0)
    return kernel.prctl(_PR_GET_CHILD_SUBREAPER, value) == 0 and bool(value.value)


# Children of run_captured (git, a short query) are never leftovers, even when one thread starts
# them while another's command ends and is swept. Starting is shared, listing exclusive: a sweep
# waits for the starts in flight, and starts wait for a sweep that lists.
_spawn_cond = threading.Condition()
_spawning = 0
_listing = False
_known: set[int] = set()


@contextmanager
def _starting() -> Iterator[None]:
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
def _listing_children() -> Iterator[None]:
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


def run_captured(args: Sequence[str], *, cwd: Path | str | None = None, input: bytes | None = None,
                 env: Mapping[str, str] | None = None, timeout: float | None = None,
                 shielded: bool = False) -> subprocess.CompletedProcess[bytes]:
    """subprocess.run(args, capture_output=True, input=input) for autoloop's own short commands
    (git, a query of an interpreter), registered so no leftover sweep takes them for an orphan.
    Raises OSError when it cannot start and TimeoutExpired after killing it. `shielded`: in a
    session of its own, the STOP_SIGNALS blocked across the spawn (see gitrun.run)."""
    with _starting():
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


class _Adopting:
    """While a command runs, orphans of its tree become our children (subreaper); afterwards,
    every child of ours that was not there before and is not a command still running is a
    leftover, killed with its whole subtree.

    `cpu` sums the rusage of all we reap (wait4): the command's process and every orphan we
    adopt, each with what it reaped (a sandbox's PID-namespace init: all its namespace). Lost:
    what the kernel reaps unasked (a parent ignoring SIGCHLD, a dying namespace's init)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker
        self.cpu = 0.0
        self.accounted = True   # False once a process of the tree was reaped where we cannot see

    def __enter__(self) -> _Adopting:
        global _reaper_users, _reaper_was_set
        with _reaper_lock:
            if _reaper_users == 0:
                _reaper_was_set = _is_subreaper()
                if not _reaper_was_set:
                    kernel.prctl(_PR_SET_CHILD_SUBREAPER, 1)
            _reaper_users += 1
        self.working = _is_subreaper()   # without it the marker scan is the net
        self.before = set(_my_children())
        return self

    def _new(self) -> list[int]:
        with _listing_children():
            with _current_lock:
                running = set(_running)
            with _spawn_cond:
                known = set(_known)
            new = [pid for pid in _my_children() if pid not in self.before | running | known]
        # an orphan marked by another command still running (a parallel worker's) is that
        # command's to sweep when it ends: it may still be doing that command's work
        return [pid for pid in new if not _others(pid, self.marker)]

    def live(self) -> int:
        """Live processes in the subtrees of new children; adopted zombies are reaped, as init would."""
        new = []
        for pid in self._new():
            if _zombie(pid):
                self.cpu += _reap(pid, time.monotonic())
            else:
                new.append(pid)
        return sum(1 for p in _subtree(new) if not _zombie(p.pid)) if new else 0

    def kill_leftovers(self) -> int:
        killed = 0
        deadline = time.monotonic() + SWEEP_S
        while time.monotonic() < deadline and (new := self._new()):
            victims = _subtree(new)
            # frozen first: nothing forks between found and killed (psutil signals a pid only
            # while it names the process found: a reused pid is spared)
            for p in victims:
                with suppress(psutil.Error):
                    p.send_signal(signal.SIGSTOP)
            # a PID namespace's init (Confinement.reap) is spared a moment: it reaps what we kill
            # below it (their CPU reaches us through it) and ends; killed, its CPU tally is lost
            inits = [p for p in victims if p.pid in new and _namespace_init(p.pid)]
            for p in victims:
                if p not in inits:
                    killed += not _zombie(p.pid)
                    with suppress(psutil.Error):
                        p.send_signal(signal.SIGKILL)
            if inits:
                for p in inits:
                    with suppress(psutil.Error):
                        p.send_signal(signal.SIGCONT)
                _settled(lambda: sum(1 for p in inits if not _zombie(p.pid)))
                for p in inits:
                    with suppress(psutil.Error):
                        p.send_signal(signal.SIGKILL)
            for pid in new:
                self.cpu += _reap(pid, deadline)
        return killed

    def __exit__(self, *exc: object) -> None:
        global _reaper_users
        with _reaper_lock:
            _reaper_users -= 1
            if _reaper_users == 0 and not _reaper_was_set:
                kernel.prctl(_PR_SET_CHILD_SUBREAPER, 0)


def _others(pid: int, marker: str) -> bool:
    """Does `pid` carry the marker of a command other than ours that is still running?"""
    try:
        theirs = psutil.Process(pid).environ().get(MARKER_VAR)
    except psutil.Error:
        return False
    with _current_lock:
        return theirs not in (None, marker) and theirs in _running.values()


def _my_children() -> list[int]:
    """Our direct children: /proc/self/task/*/children (cheap), else psutil (a scan of all)."""
    try:
        out: list[int] = []
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/children") as f:
                out.extend(int(x) for x in f.read().split())
        return out
    except (OSError, ValueError):
        return [p.pid for p in psutil.Process().children()]


def _subtree(roots: list[int]) -> list[psutil.Process]:
    """The roots and all their descendants that still exist."""
    out: list[psutil.Process] = []
    for pid in roots:
        try:
            root = psutil.Process(pid)
            out += [root, *root.children(recursive=True)]
        except psutil.Error:
            continue
    return out


def _namespace_init(pid: int) -> bool:
    """Is `pid` the first process (pid 1) of a PID namespace of its own?"""
    try:
        with open(f"/proc/{pid}/status") as f:
            ids = next((ln for ln in f if ln.startswith("NSpid:")), "").split()[1:]
    except OSError:
        return False
    return len(ids) > 1 and ids[-1] == "1"


def _zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() in _DEAD
    except psutil.Error:
        return True


def _settled(count: Callable[[], int]) -> int:
    """`count()` once the processes it counts had a moment to finish exiting on their own: a
    child ending milliseconds after its parent (bwrap's init after its monitor, a shell's last
    pipeline stage) is not left behind."""
    deadline = time.monotonic() + SETTLE_S
    n = count()
    pause = 0.0005   # such a straggler is gone within a millisecond or two: look soon, then less often
    while n and time.monotonic() < deadline:
        time.sleep(pause)
        pause = min(pause * 2, 0.01)
        n = count()
    return n


def _reap(pid: int, deadline: float) -> float:
    """Collect an adopted child's exit status (it is ours now: nobody else will); returns the
    CPU seconds it and what it reaped used."""
    while True:
        try:
            done, _, usage = os.wait4(pid, os.WNOHANG)
        except ChildProcessError:
            return 0.0
        if done:
            return usage.ru_utime + usage.ru_stime
        if time.monotonic() >= deadline:
            return 0.0
        time.sleep(0.002)


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group, then SIGKILL what is still there after a grace period."""
    pgid = proc.pid   # start_new_session: the child leads its own group
    _killpg(pgid, signal.SIGTERM)
    if proc.returncode is None:
        try:
            proc.wait(timeout=KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
    deadline = time.monotonic() + KILL_GRACE_S   # the leader may be gone, its group not
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.02)
    _killpg(pgid, signal.SIGKILL)
    if proc.returncode is None:
        proc.wait()


def _group_alive(pgid: int) -> bool:
    """Is any process of the group still running? Zombies do not count: an orphan waits for init
    to reap it, which in a container may take seconds or never happen."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    for p in psutil.process_iter(["status"]):
        try:
            if p.info["status"] not in _DEAD and os.getpgid(p.pid) == pgid:
                return True
        except OSError:
            continue
    return False


def _count(n: int) -> int:
    global _leftovers_total
    _leftovers_total += n
    return n


def kill_marked(marker: str, *, count: bool = True, prefix: bool = False) -> int:
    """Kill every process whose environment carries our marker; returns how many. With `prefix`,
    every marker starting with `marker` counts (a parallel run's workers)."""
    killed = 0
    if count:   # what is still finishing its exit is not left behind
        _settled(lambda: sum(1 for pid in _marked_pids(marker, prefix) if not _zombie(pid)))
    for _ in range(5):   # a fork loop can spawn while we scan: repeat until none is found
        found = [pid for pid in _marked_pids(marker, prefix) if not _zombie(pid)]
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


def _marked_pids(marker: str, prefix: bool) -> list[int]:
    # Runs after commands, over every process of the machine: raw reads and one substring test,
    # the NUL-separated match only on a hit (a zombie still shows its environ: killing it is harmless)
    me, needle = os.getpid(), f"{MARKER_VAR}={marker}".encode()
    pids: list[int] = []
    for pid in psutil.pids():
        if pid == me:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read()
        except OSError:
            continue
        if needle in environ:
            entries = environ.split(b"\0")
            if needle in entries or (prefix and any(e.startswith(needle) for e in entries)):
                pids.append(pid)
    return pids


def stop_current() -> None:
    """For signal handlers: SIGTERM the groups of the commands running now (run() reaps them)."""
    with _current_lock:
        pids = list(_running)
        _stopped.update(pids)
    for pid in pids:
        _killpg(pid, signal.SIGTERM)
