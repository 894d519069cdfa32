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

Here: the command run and timed, and its group killed. The marker and the subreaper are
autoloop.process.leftovers; the commands running now (and a signal handler's stop) are
autoloop.process.running. Process tables come from psutil, except after every command: our
children (/proc/self/task) and the marker scan (a substring test on raw environ; psutil is 3-6x
slower: benchmarks/proc_tables.py).
"""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, NamedTuple, Sequence

import psutil

from autoloop.process import leftovers, rlimits, running
from autoloop.process.leftovers import Adopting
from autoloop.process.line import Wrap
from autoloop.process.logfile import TAIL_BYTES, fresh_log, own_output, read_tail
from autoloop.process.rlimits import Limits
from autoloop.process.running import MARKER_VAR

KILL_GRACE_S = 3.0


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
        limits: Limits | None = None, pass_fds: Sequence[int] = ()) -> ProcResult:
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
        *leftovers.marked_pids(marker, False), *(p.pid for p in leftovers.subtree([proc.pid, *adopting.new()]))})
    # stdin is a file or /dev/null, never a pipe left open (agents like codex wait on it)
    with fresh_log(out_path) as out, fresh_log(err_path) as err, \
            open(stdin or os.devnull, "rb") as inp, Adopting(marker) as adopting:
        with running.starting():   # registered before any leftover sweep of another thread can look
            try:
                launched = time.monotonic()   # wall_s: from here, not from our own preparations
                proc = subprocess.Popen(
                    command if shell else list(command), shell=shell, cwd=cwd,
                    env={**env, MARKER_VAR: marker}, stdin=inp, stdout=out, stderr=err,
                    start_new_session=True, executable="/bin/sh" if shell else None, pass_fds=tuple(pass_fds),
                    preexec_fn=rlimits.preexec(limits) if limits is not None else None)
            except OSError as exc:
                # like a shell: 127 not found, 126 not executable; a result, not an exception
                why = exc.strerror or str(exc)
                err.write(f"autoloop: cannot start {command!r}: {why}\n".encode())
                return ProcResult(127 if isinstance(exc, FileNotFoundError) else 126, False, False,
                                  time.monotonic() - started, out_path, err_path, 0, timeout, why)
            running.register(proc.pid, marker)
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
            left = leftovers.settled(adopting.live) if ended else 0
            _kill_group(proc)
            done_at = time.monotonic()   # nothing of the tree runs now, unless `left` says so
            if running.unregister(proc.pid):
                interrupted = True
            # after a timeout or an interrupt a tree still running is no surprise: count only
            # what a command that ended by itself left behind
            marked = 0 if adopting.working else leftovers.kill_marked(marker, count=False)
            killed = adopting.kill_leftovers()
            if ended:
                leftovers.add_leftovers(max(left, marked))
            found = max(left, killed) + marked
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
                      found, timeout, over_limit=over,
                      wall_s=done_at - launched if timed else None, cpu_s=adopting.cpu if timed else None)


RESTARTS = 5   # a wrapper's set-up meets a changing host again only by another race (~10 ms each)


def run_wrapped(command: str | list[str], wrap: Wrap | None, *, cwd: Path, env: Mapping[str, str],
                timeout: float | None, log_stem: Path, stdin: Path | None = None, marker: str | None = None,
                limits: Limits | None = None) -> ProcResult:
    """`command` (a shell string or an argv) run through `wrap` (None: as it is), as `run` runs it;
    started again, on a new line, while its wrapper's set-up failed before the command started."""
    if wrap is None:
        return run(command, cwd=cwd, env=env, timeout=timeout, log_stem=log_stem, stdin=stdin, marker=marker,
                   limits=limits)
    restarts = 0
    while True:
        line = wrap.line(command)
        try:
            res = run(line.argv, cwd=cwd, env=env, timeout=timeout, log_stem=log_stem, stdin=stdin, marker=marker,
                      limits=limits, pass_fds=line.fds)
            # a timeout or an interrupt is no set-up failure: only a run that ended by itself is asked
            if res.ok or res.exit_code is None or restarts == RESTARTS or line.started():
                return res
        finally:
            line.close()
        restarts += 1


def run_steps(steps: Iterable[Step], *, cwd: Path, env: Mapping[str, str], log_dir: Path,
              marker: str, wrap: Wrap | None = None,
              after: Callable[[Step], None] | None = None, stdin: Path | None = None) -> list[ProcResult]:
    """Each step in turn (logs at log_dir/<step.log_name>), up to the first failing guard. `wrap`: what
    a command runs in (a sandbox); `after` is called after each; `stdin`: the file each reads."""
    results: list[ProcResult] = []
    for step in steps:
        res = run_wrapped(step.command, wrap, cwd=cwd, env=env, timeout=step.timeout,
                          log_stem=log_dir / step.log_name, marker=marker, stdin=stdin)
        if after is not None:
            after(step)
        results.append(res)
        if step.guard and not res.ok:
            break
    return results


def _wait(proc: subprocess.Popen[bytes], timeout: float | None, watch: rlimits.DiskWatch | None,
          adopting: Adopting) -> str | None:
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


def _reaped_main(proc: subprocess.Popen[bytes], adopting: Adopting, *, block: bool) -> bool:
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
            if p.info["status"] not in leftovers.DEAD and os.getpgid(p.pid) == pgid:
                return True
        except OSError:
            continue
    return False
