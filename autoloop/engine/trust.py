"""autoloop's own process as part of the trusted base, against a same-user generator.

- `undumpable()`: the kernel then refuses ptrace (gdb -p, /proc/PID/mem) of autoloop to anyone
  without CAP_SYS_PTRACE; every program it starts gets the usual flag back at execve.
- `preload()`: every module autoloop imports later is imported before the first generator runs,
  so a patched numpy/scipy (or a planted module on sys.path) never runs inside the judge.
"""

from __future__ import annotations

import importlib

from autoloop.process.kernel import prctl

_PR_SET_DUMPABLE = 4
_PR_GET_DUMPABLE = 3

# imported on first use elsewhere in autoloop (end of run, report, persistence): loaded up front
# (the command that started the run has imported its own modules, `run`'s progress and CI hooks,
# before the run began: this layer names none of them)
_ALWAYS = ("autoloop.journal.ledger", "autoloop.journal.facts", "autoloop.journal.persist",
           "autoloop.decide.stats", "filelock", "json", "csv", "tempfile",
           "shutil", "site", "html", "xml.sax.saxutils", "statistics", "encodings.idna")
_STATISTICS = ("numpy", "scipy", "scipy.stats")
_SDK = {"anthropic": ("anthropic",), "openai": ("openai",)}



def undumpable() -> bool:
    """Make this process non-dumpable (Linux); whether it is now."""
    prctl(_PR_SET_DUMPABLE, 0)
    return dumpable() is False


def dumpable() -> bool | None:
    """This process's dumpable flag (None where there is no prctl)."""
    flag = prctl(_PR_GET_DUMPABLE)
    return None if flag is None else bool(flag)


def preload(*, statistics: bool, generator_kind: str = "") -> list[str]:
    """Import now what this run imports later; returns the modules that could not be (an
    optional dependency: its own import later fails the same way). With `statistics`, each
    statistic the run reports is computed once on made-up numbers, so what scipy loads on first
    use is loaded too."""
    names = list(_ALWAYS) + list(_SDK.get(generator_kind, ()))
    if statistics:
        names += _STATISTICS
    missing = [name for name in names if not _imported(name)]
    if statistics and not any(m in missing for m in _STATISTICS):
        from autoloop.decide import stats
        a, b = [1.0, 1.2, 0.9, 1.1, 1.05, 0.95], [0.9, 1.1, 0.85, 1.0, 1.0, 0.9]
        stats.compare(a, b, "minimize")
        stats.hl_interval(stats.gains(a, b, "minimize", "log"))
        stats.sequential_path(a, b, "minimize", 0.005)
    return missing


def _imported(name: str) -> bool:
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True
