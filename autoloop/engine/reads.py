"""What the measurements read (CONTRACT §10): once per run (at the baseline, in `verify`, in
`doctor`, never per cycle), the guards and the verifier run once more, traced, and autoloop
records which files of the measured tree each opened. strace does it for every process
(`strace -f -y`, run inside the measurement's own sandbox so paths are the tree's); where strace
is missing or refused, a Python audit hook loaded through a `sitecustomize` on PYTHONPATH sees
what Python processes open (not other programs, nor `python -I`/`-E`). Two warnings come of it:
a verifier that read none of the files `allowed` covers measures the same code every cycle
(an installed copy, a stale build, a wrong path); and a test helper the generator may change,
read by a guard, is a way to weaken the tests. Both are a second line: a check of what was read
can be routed around by code that reads differently once it is not being traced."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from autoloop.process import proc
from autoloop.process.line import Wrap
from autoloop.program.globs import PathRules
from autoloop.program.reader import Program
from autoloop.base.walk import under

TRACE_ENV = "AUTOLOOP_READS_FILE"
SYSCALLS = "open,openat,openat2,execve"
_SHOWN = 5
# `123 openat(AT_FDCWD</t>, "x.py", O_RDONLY|O_CLOEXEC) = 3</t/x.py>`; `execve("/t/run", ...) = 0`
_OPENED = re.compile(r'^\d+\s+open(?:at2?)?\(.*?"(?:[^"\\]|\\.)*",\s*\{?(?:flags=)?([A-Z_|]+).*\)\s*=\s*\d+<([^>]+)>\s*$')
# with -f a call another process interrupts is split: `12 openat(..., O_RDONLY <unfinished ...>`
# then `12 <... openat resumed>) = 3</t/x.py>`
_UNFINISHED = re.compile(r'^(\d+)\s+open(?:at2?)?\(.*?"(?:[^"\\]|\\.)*",\s*\{?(?:flags=)?([A-Z_|]+).*<unfinished \.\.\.>\s*$')
_RESUMED = re.compile(r'^(\d+)\s+<\.\.\. open(?:at2?)? resumed>.*\)\s*=\s*\d+<([^>]+)>\s*$')
_EXECVE = re.compile(r'^\d+\s+execve\("((?:[^"\\]|\\.)*)",.*\)\s*=\s*0\s*$')
_TESTISH_DIRS = {"tests", "test", "testing"}
_TESTISH_MODULES = {"test_tools", "testing", "conftest"}

# loaded by every Python the measurement starts (PYTHONPATH): each file it opens for reading,
# one absolute path a line, appended to $AUTOLOOP_READS_FILE
_SITECUSTOMIZE = '''\
import os as _os, sys as _sys
def _autoloop_reads():
    out = _os.environ.get("AUTOLOOP_READS_FILE")
    if not out:
        return
    fd = _os.open(out, _os.O_WRONLY | _os.O_APPEND | _os.O_CREAT, 0o600)
    def hook(event, args):
        if event != "open" or not args or not isinstance(args[0], str):
            return
        mode = args[1] if len(args) > 1 else "r"
        if isinstance(mode, str) and any(c in mode for c in "wax"):
            return
        try:
            _os.write(fd, (_os.path.abspath(args[0]) + "\\n").encode("utf-8", "surrogateescape"))
        except OSError:
            pass
    _sys.addaudithook(hook)
_autoloop_reads()
'''


@dataclass
class Reads:   # what one traced run of the guards and the verifier read
    how: str                                   # "strace", "audit hook (Python only)" or "" (not recorded)
    steps: dict[str, list[str]] = field(default_factory=dict)   # "verifier" / guard name -> files read
    note: str = ""                             # why it is partial or skipped
    seconds: float = 0.0                       # what recording cost (the traced run)

    def summary(self) -> str:
        """`recorded by strace in 1.2 s: the verifier read 3 files of the tree, guard 'tests' 40`"""
        if not self.how:
            return self.note or "not recorded"
        each = ", ".join(f"{'the verifier' if k == 'verifier' else f'guard {k!r}'} {len(v)}"
                         for k, v in self.steps.items())
        return (f"recorded by {self.how} in {self.seconds:.1f} s: files of the tree read: {each or 'none'}"
                + (f" ({self.note})" if self.note else ""))

    def as_dict(self) -> dict[str, Any]:
        return {"how": self.how, "steps": self.steps, "note": self.note, "seconds": round(self.seconds, 3)}


def strace_works(run: Callable[[str], proc.ProcResult]) -> bool:
    """Can strace trace a process where the measurements run (`run`: a command run there)?"""
    exe = shutil.which("strace")
    if exe is None:
        return False
    res = run(f"{shlex.quote(exe)} -f -qq -o /dev/null -- {shlex.quote(shutil.which('true') or '/bin/true')}")
    return res.ok


def roots(tree: Path, checkout: Path | None) -> list[str]:
    """Where the measured tree appears to its commands: first where they run (in a sandbox,
    your checkout's path, where the tree is bound), then the tree's own path."""
    real = os.path.realpath(tree)
    return [os.path.realpath(checkout), real] if checkout is not None else [real]


def traced(command: str, trace_file: Path, how: str) -> str:
    """`command` (a shell string) as it runs when recording with `how`."""
    if how == "strace":
        return (f"exec {shlex.quote(shutil.which('strace') or 'strace')} -f -qq -y -e trace={SYSCALLS} -o {shlex.quote(str(trace_file))} -- "
                f"/bin/sh -c {shlex.quote(command)}")
    return command


def hook_env(env: Mapping[str, str], folder: Path, trace_file: Path) -> dict[str, str]:
    """`env` with the audit hook's sitecustomize (written into `folder`) first on PYTHONPATH."""
    (folder / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    out = dict(env)
    out["PYTHONPATH"] = os.pathsep.join([str(folder), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    out[TRACE_ENV] = str(trace_file)
    return out


def opened(trace_file: Path, how: str, cwd: str) -> list[str]:
    """Absolute paths read, from a trace file written by `how`."""
    try:
        text = trace_file.read_text(errors="surrogateescape")
    except OSError:
        return []
    if how != "strace":
        return [ln for ln in text.splitlines() if ln.startswith("/")]
    out: list[str] = []
    pending: dict[str, str] = {}    # pid -> the flags of its unfinished open
    for line in text.splitlines():
        m = _OPENED.match(line)
        flags, path = (m.group(1), m.group(2)) if m else (None, None)
        m = None if m else _UNFINISHED.match(line)
        if m:
            pending[m.group(1)] = m.group(2)
            continue
        m = None if flags else _RESUMED.match(line)
        if m:
            flags, path = pending.pop(m.group(1), ""), m.group(2)
        if flags is not None and path is not None:
            if "O_WRONLY" not in flags and "O_DIRECTORY" not in flags:
                out.append(path)
            continue
        m = _EXECVE.match(line)
        if m:
            out.append(os.path.normpath(os.path.join(cwd, m.group(1))))
    return out


_CACHED = re.compile(r"(?:(.*)/)?__pycache__/([^/.]+)\.[^/]+\.pyc")
_PREFIXED = re.compile(r"(.*/)?([^/.]+)\.[^/]+\.pyc")


def source_of(path: str, pycache_prefix: str | None = None) -> str:
    """The module source a bytecode file was compiled from, or `path` itself. A guard that
    imported `src/m.py` leaves its bytecode behind (in `src/__pycache__/`, or under
    PYTHONPYCACHEPREFIX at the source's own path, as autoloop's measurements have it), and the
    verifier's import then opens only that: it is still a read of the tree's `src/m.py`."""
    if pycache_prefix and under(path, pycache_prefix) and path != pycache_prefix:
        if m := _PREFIXED.fullmatch(os.path.relpath(path, pycache_prefix)):
            return "/" + (m.group(1) or "") + m.group(2) + ".py"
    if m := _CACHED.fullmatch(path):
        return os.path.join(m.group(1) or "", m.group(2) + ".py")
    return path


def in_tree(paths: Iterable[str], roots: Sequence[str], pycache_prefix: str | None = None) -> list[str]:
    """The paths under one of `roots` (the measured tree, where it appears), relative to it; a
    module's bytecode counts as its source (source_of)."""
    found: dict[str, None] = {}
    for p in paths:
        p = source_of(os.path.normpath(p), pycache_prefix)
        for root in roots:
            if under(p, root) and p != root:
                rel = os.path.relpath(p, root)
                if not rel.startswith(("../", ".git/")) and rel != ".git":
                    found[rel] = None
                break
    return sorted(found)


def looks_like_test(rel: str) -> bool:
    """Does `rel` look like test code: test_*.py, *_test.py, conftest.py, a tests/ or testing/
    folder, a test_tools or testing module?"""
    parts = rel.split("/")
    name = parts[-1]
    stem = name[:-3] if name.endswith(".py") else None
    if stem is not None and (stem.startswith("test_") or stem.endswith("_test") or stem in _TESTISH_MODULES):
        return True
    return any(d in _TESTISH_DIRS for d in parts[:-1])


def warnings(program: Program, reads: Reads, protected: Mapping[str, str]) -> list[str]:
    """What the record says before cycle 1: a verifier that read nothing `allowed` covers, and
    test code a guard reads that the generator may change."""
    if not reads.how:
        return []
    rules = PathRules(program.allowed, program.forbidden, protected)
    out: list[str] = []
    allowed = "[" + ", ".join(program.allowed) + "]"
    v = reads.steps.get("verifier")
    if v is not None and not any(rules.allows(rel) for rel in v):
        partial = "" if reads.how == "strace" else f" (recorded by {reads.how})"
        out.append(f"the verifier read none of the files `allowed: {allowed}` covers{partial}: every cycle would measure the same code — an installed "
                   "copy instead of the tree's files, a stale build, a wrong path. Make it import or "
                   "read the tree's files (e.g. `PYTHONPATH=. python …` from the repository root)")
    weak = sorted({rel for name, rels in reads.steps.items() if name != "verifier"
                   for rel in rels if looks_like_test(rel) and rules.allows(rel)})
    if weak:
        shown = ", ".join(weak[:_SHOWN]) + (f" (+{len(weak) - _SHOWN} more)" if len(weak) > _SHOWN else "")
        line = "forbidden: [" + ", ".join([*program.forbidden, *_patterns(weak)]) + "]"
        out.append(f"guards read test code that `allowed: {allowed}` lets the generator change: {shown}; "
                   f"through it a candidate could weaken the tests (skip them, make assertions "
                   f"no-ops). Add to {program.path.name}: `{line}`")
    return out


def _patterns(rels: Sequence[str]) -> list[str]:
    """What `forbidden` should name: each test folder once (`tests/**`), other files by path."""
    out: dict[str, None] = {}
    for rel in rels:
        parts = rel.split("/")
        i = next((k for k, d in enumerate(parts[:-1]) if d in _TESTISH_DIRS), None)
        out["/".join(parts[:i + 1]) + "/**" if i is not None else rel] = None
    return list(out)


def record(program: Program, *, cwd: Path, env: Mapping[str, str], scratch: Path, log_dir: Path,
           marker: str, wrap: Wrap | None, where: Sequence[str]) -> Reads:
    """Run the guards and the verifier once, traced, in `cwd` (through `wrap`: the measurement's
    sandbox); `scratch` must be writable there. What each read of the tree at `where` (roots())."""
    from autoloop.engine.verify import OUTPUT_VAR, SEED_VAR, new_seed, steps

    t0 = time.monotonic()
    # what a measurement's command gets: a seed, and with verifier.score a folder to write
    env = {**env, SEED_VAR: str(new_seed())}
    if program.verifier.score is not None:
        (scratch / "reads-output").mkdir(parents=True, exist_ok=True)
        env[OUTPUT_VAR] = str(scratch / "reads-output")

    def run_there(command: str, stem: str, e: Mapping[str, str] = env, timeout: float | None = 30) -> proc.ProcResult:
        return proc.run_wrapped(command, wrap, cwd=cwd, env=e, timeout=timeout, log_stem=log_dir / stem,
                                marker=marker)

    if strace_works(lambda c: run_there(c, "strace-probe")):
        how, note = "strace", ""
    else:
        how = "audit hook (Python only)"
        note = "strace is missing or refused here: only what Python processes opened was recorded"
    reads = Reads(how, note=note)
    for step in steps(program):
        trace = scratch / f"reads-{step.log_name}.trace"
        hooked = env if how == "strace" else hook_env(env, scratch, trace)
        res = run_there(traced(step.command, trace, how), f"reads-{step.log_name}", hooked, step.timeout)
        seen = opened(trace, how, where[0])
        if seen:   # nothing at all: not recorded (no Python ran, for the hook), not "read nothing"
            # a virtualenv inside the checkout (as the install page makes it) is bound into the
            # sandbox at the checkout's path but is no file of the measured tree: only what exists there
            reads.steps["verifier" if not step.guard else step.name] = [
                rel for rel in in_tree(seen, where, hooked.get("PYTHONPYCACHEPREFIX"))
                if os.path.lexists(cwd / rel)]
        else:
            reads.note = (reads.note + "; " if reads.note else "") + f"nothing recorded for {step.name}"
        if step.guard and not res.ok:
            reads.note = (reads.note + "; " if reads.note else "") + f"guard '{step.name}' failed while traced"
            break
    reads.seconds = time.monotonic() - t0
    return reads
