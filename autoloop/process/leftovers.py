"""What a command leaves behind, found and killed. Two of the three nets of autoloop.process.proc:
the environment marker every child inherits, found by a /proc scan (the only net that also finds
what a kill -9'd run left behind), and the child subreaper (no privileges): while a command runs,
orphans of its tree become our children, and when it ends any new child that is not a command
still running is killed with its subtree. Every process reaped here adds its CPU to the command's.
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading
import time
from contextlib import suppress
from typing import Callable

import psutil

from autoloop.process import kernel, running
from autoloop.process.running import MARKER_VAR

SETTLE_S = 0.3
SWEEP_S = 10.0           # the longest a leftover sweep goes on (a fork loop respawning)
DEAD = (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
_PR_SET_CHILD_SUBREAPER, _PR_GET_CHILD_SUBREAPER = 36, 37
_leftovers_total = 0   # every leftover killed so far: a caller compares it before and after a step


def leftovers_killed() -> int:
    return _leftovers_total


def add_leftovers(n: int) -> int:
    """`n` more leftovers killed; returns `n`."""
    global _leftovers_total
    _leftovers_total += n
    return n


_reaper_lock = threading.Lock()
_reaper_users = 0
_reaper_was_set = False


def is_subreaper() -> bool:
    value = ctypes.c_int(0)
    return kernel.prctl(_PR_GET_CHILD_SUBREAPER, value) == 0 and bool(value.value)


class Adopting:
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

    def __enter__(self) -> Adopting:
        global _reaper_users, _reaper_was_set
        with _reaper_lock:
            if _reaper_users == 0:
                _reaper_was_set = is_subreaper()
                if not _reaper_was_set:
                    kernel.prctl(_PR_SET_CHILD_SUBREAPER, 1)
            _reaper_users += 1
        self.working = is_subreaper()   # without it the marker scan is the net
        self.before = set(_my_children())
        return self

    def new(self) -> list[int]:
        with running.listing_children():
            ours = self.before | set(running.running_now()) | running.known()
            new = [pid for pid in _my_children() if pid not in ours]
        # an orphan marked by another command still running (a parallel worker's) is that
        # command's to sweep when it ends: it may still be doing that command's work
        return [pid for pid in new if not _others(pid, self.marker)]

    def live(self) -> int:
        """Live processes in the subtrees of new children; adopted zombies are reaped, as init would."""
        new = []
        for pid in self.new():
            if zombie(pid):
                self.cpu += reap(pid, time.monotonic())
            else:
                new.append(pid)
        return sum(1 for p in subtree(new) if not zombie(p.pid)) if new else 0

    def kill_leftovers(self) -> int:
        killed = 0
        deadline = time.monotonic() + SWEEP_S
        while time.monotonic() < deadline and (new := self.new()):
            victims = subtree(new)
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
                    killed += not zombie(p.pid)
                    with suppress(psutil.Error):
                        p.send_signal(signal.SIGKILL)
            if inits:
                for p in inits:
                    with suppress(psutil.Error):
                        p.send_signal(signal.SIGCONT)
                settled(lambda: sum(1 for p in inits if not zombie(p.pid)))
                for p in inits:
                    with suppress(psutil.Error):
                        p.send_signal(signal.SIGKILL)
            for pid in new:
                self.cpu += reap(pid, deadline)
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
    return theirs not in (None, marker) and theirs in running.running_now().values()


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


def subtree(roots: list[int]) -> list[psutil.Process]:
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


def zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() in DEAD
    except psutil.Error:
        return True


def settled(count: Callable[[], int]) -> int:
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


def reap(pid: int, deadline: float) -> float:
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


def kill_marked(marker: str, *, count: bool = True, prefix: bool = False) -> int:
    """Kill every process whose environment carries our marker; returns how many. With `prefix`,
    every marker starting with `marker` counts (a parallel run's workers)."""
    killed = 0
    if count:   # what is still finishing its exit is not left behind
        settled(lambda: sum(1 for pid in marked_pids(marker, prefix) if not zombie(pid)))
    for _ in range(5):   # a fork loop can spawn while we scan: repeat until none is found
        found = [pid for pid in marked_pids(marker, prefix) if not zombie(pid)]
        if not found:
            break
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.02)
    return add_leftovers(killed) if count else killed


def marked_pids(marker: str, prefix: bool) -> list[int]:
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
