"""autoloop's own process as part of the trusted base: what a same-user generator could use to
reach into it after the run has started.

- `undumpable()`: no same-uid debugger (gdb -p, ptrace, /proc/PID/mem) can attach to autoloop
  and rewrite its memory — the kernel refuses ptrace of a non-dumpable process to anyone
  without CAP_SYS_PTRACE, and /proc/PID/mem and friends become root's. Children are not
  affected: execve gives every program it starts the usual flag back.
- `preload()`: every module autoloop will import later is imported before the first
  generator runs, so a patched numpy/scipy (or a planted module earlier on sys.path) in
  autoloop's own environment never runs inside the judge.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib
import sys

_PR_SET_DUMPABLE = 4
_PR_GET_DUMPABLE = 3

# imported on first use elsewhere in autoloop (end of run, report, persistence): loaded up front
_ALWAYS = ("autoloop.journal", "autoloop.summary", "autoloop.facts", "autoloop.report", "autoloop.persist",
           "autoloop.ci", "autoloop.stats", "autoloop.progress", "filelock", "json", "csv", "tempfile",
           "shutil", "site", "html", "xml.sax.saxutils", "statistics", "encodings.idna")
_STATISTICS = ("numpy", "scipy", "scipy.stats")
_SDK = {"anthropic": ("anthropic",), "openai": ("openai",)}


def _prctl():  # type: ignore[no-untyped-def]
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None
    return libc.prctl


def undumpable() -> bool:
    """Make this process non-dumpable (Linux); whether it is now."""
    prctl = _prctl()
    if prctl is None:
        return False
    prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    return dumpable() is False


def dumpable() -> bool | None:
    """This process's dumpable flag (None where there is no prctl)."""
    prctl = _prctl()
    if prctl is None:
        return None
    return bool(prctl(_PR_GET_DUMPABLE, 0, 0, 0, 0))


def preload(*, statistics: bool, generator_kind: str = "") -> list[str]:
    """Import now what this run will import later; returns the modules that could not be
    imported (an optional dependency not installed: its own import later fails the same way).

    `statistics`: the run will compute statistics (a noise-aware rule, or the end-of-run
    re-measurement) — numpy and scipy are loaded, and each statistic the run reports is
    computed once on made-up numbers, so what scipy itself loads on first use is loaded too."""
    names = list(_ALWAYS) + list(_SDK.get(generator_kind, ()))
    if statistics:
        names += _STATISTICS
    missing = []
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if statistics and not any(m in missing for m in _STATISTICS):
        from autoloop import stats
        a, b = [1.0, 1.2, 0.9, 1.1, 1.05, 0.95], [0.9, 1.1, 0.85, 1.0, 1.0, 0.9]
        stats.compare(a, b, "minimize")
        stats.hl_interval(stats.gains(a, b, "minimize", "log"))
        stats.sequential_path(stats.gains(a, b, "minimize", "log"), [0.01, -0.02], 0.005)
        stats._log_integral_quad(3, 0.5)
    return missing
