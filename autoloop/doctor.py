"""`autoloop doctor [PROGRAM]`: what to run before leaving a loop overnight.

Each check is what the run itself would do before its baseline, done the same way (the same
Run object, sandbox and generator preflight), and nothing is changed: no branch, no journal, no
worktree. One `Check` per line: git, the sandbox, the generator (found, version, authenticated
where the tool can say so without spending tokens), the data paths, the guards and the verifier
(measured once, on HEAD as the baseline would be). The CLI prints them and picks the exit code.
"""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Literal

from autoloop import envs
from autoloop.errors import AutoloopError, UsageError
from autoloop.generators.base import GenContext, preflight_context
from autoloop.numbers import num as fmt
from autoloop.loop import Run, RunOptions
from autoloop.program import Program
from autoloop.sandbox import SandboxUnavailable
from autoloop.gitrun import git

State = Literal["ok", "warn", "FAIL"]


@dataclass(frozen=True)
class Check:
    name: str
    state: State
    detail: str

    @property
    def blocks(self) -> bool:
        return self.state == "FAIL"


def diagnose(program: Program, tag: str = "doctor") -> Iterator[Check]:
    """The checks, in order, as they finish (the verifier may take minutes)."""
    run = Run(program, RunOptions(tag=tag))
    head = yield from _git(run)
    failed = head is None
    sandbox = _sandbox(run)
    failed = failed or sandbox.blocks
    yield sandbox
    for check in _generator(run):
        failed = failed or check.blocks
        yield check
    data_ok = True
    for check in _data(program, head):
        data_ok = data_ok and not check.blocks
        yield check
    failed = failed or not data_ok
    if head is not None and not failed:
        # What else the run checks before it starts (submodules, the run branch checked out
        # somewhere); sandbox and data problems have had their own lines.
        try:
            run.guard.preflight()
        except UsageError as exc:
            failed = True
            yield Check("repository", "FAIL", str(exc))
    if head is None:
        yield Check("verifier", "FAIL", "not measured: the repository has no commit to measure")
    elif not data_ok:
        yield Check("verifier", "FAIL", "not measured: a data path is missing")
    else:
        yield from _measure(run, head)


# ---- git -----------------------------------------------------------------------------------------


def _git(run: Run) -> Iterator[Check]:
    ws, program = run.ws, run.program
    try:
        ws.check_state()
    except UsageError as exc:
        yield Check("git", "FAIL", str(exc))
        return None
    head = ws.head()
    branch = git(program.repo_root, "symbolic-ref", "--short", "-q", "HEAD", check=False).strip()
    where = f"on {branch}" if branch else "detached"
    dirty = [ln for ln in git(program.repo_root, "status", "--porcelain", "--untracked-files=normal",
                              check=False).splitlines() if ln.strip()]
    detail = f"{program.repo_root}: HEAD {head[:12]} {where}"
    if dirty:
        names = ", ".join(ln[3:] for ln in dirty[:5]) + (f" (+{len(dirty) - 5} more)" if len(dirty) > 5 else "")
        yield Check("git", "warn", f"{detail}; {len(dirty)} uncommitted or untracked path"
                                   f"{'s' if len(dirty) > 1 else ''} ({names}) — a run starts from HEAD "
                                   "and does not see them (commit what the verifier needs)")
    else:
        yield Check("git", "ok", detail + ", clean")
    resumes = ws.branch_head()
    if resumes:
        yield Check("run", "ok", f"branch {ws.branch} exists at {resumes[:12]}: "
                                 f"`--tag {run.opt.tag}` resumes it")
    return head


# ---- sandbox -------------------------------------------------------------------------------------


def _sandbox(run: Run) -> Check:
    sandbox = run.guard.sandbox
    if sandbox is None:
        return Check("sandbox", "warn", f"none (sandbox: {run.program.sandbox.kind}): the generator "
                                        "runs as you, unconfined; attacks are only detected (see README)")
    try:
        sandbox.probe()
    except SandboxUnavailable as exc:
        return Check("sandbox", "FAIL", f"sandbox: {run.program.sandbox.kind}: {exc}")
    return Check("sandbox", "ok", f"bubblewrap ({sandbox.exe}) makes a sandbox here")


# ---- the generator -------------------------------------------------------------------------------


@contextmanager
def _context(run: Run) -> Iterator[GenContext]:
    with tempfile.TemporaryDirectory(prefix="autoloop-doctor-") as tmp:
        scratch = Path(tmp)
        yield preflight_context(run.program, scratch, env=envs.generator_env(run._env(0)),
                                run_marker=run.marker, wrap=run.guard.wrap(scratch, workdir=scratch))


def _generator(run: Run) -> Iterator[Check]:
    from autoloop.generators.registry import make_generator

    spec = run.program.generator
    generator: Any = make_generator(spec, run.program)
    if spec.kind in ("anthropic", "openai"):
        yield _sdk_key(run, spec.kind)
        return
    if spec.kind == "tune":
        yield Check("generator", "ok", "tune: autoloop's own parameter search (nothing to install)")
        return
    try:
        version = run.preflight_generator(generator)
    except AutoloopError as exc:
        yield Check("generator", "FAIL", str(exc))
        return
    where = " inside the sandbox" if run.guard.sandbox is not None else ""
    said = f", version {version}" if version else ""
    yield Check("generator", "ok", f"{spec.kind}: starts{where}{said}")
    status = getattr(generator, "auth_status", None)
    if status is None:
        return
    with _context(run) as ctx:
        try:
            known, detail = status(ctx)
        except AutoloopError as exc:
            known, detail = False, str(exc)
    yield Check("auth", "ok" if known else ("warn" if known is None else "FAIL"), f"{spec.kind}: {detail}")


def _sdk_key(run: Run, kind: str) -> Check:
    var = "ANTHROPIC_API_KEY" if kind == "anthropic" else "OPENAI_API_KEY"
    spec = run.program.generator
    if os.environ.get(var):
        return Check("auth", "ok", f"{kind}: {var} is set")
    if spec.base_url or os.environ.get(var.replace("API_KEY", "BASE_URL")):
        return Check("auth", "warn", f"{kind}: {var} is not set; a local server at the base URL may not need it")
    return Check("auth", "FAIL", f"{kind}: {var} is not set; export it before the run")


# ---- data ----------------------------------------------------------------------------------------


def _data(program: Program, head: str | None) -> Iterator[Check]:
    for i, d in enumerate(program.data):
        line = program.lines.get(f"data[{i}].path", program.lines.get(f"data[{i}]", 1))
        where = f"{program.path.name}:{line}: data[{i}]"
        if not d.source.exists():
            yield Check("data", "FAIL", f"{where}.path: {d.source} does not exist; fix the path or create it")
        elif not os.access(d.source, os.R_OK):
            yield Check("data", "FAIL", f"{where}.path: {d.source} is not readable by you")
        elif head and git(program.repo_root, "ls-tree", "--name-only", head, "--", d.target, check=False).strip():
            yield Check("data", "FAIL", f"{where}.as: {d.target!r} is a path of the repository at {head[:12]}; "
                                        "choose a place the repository does not use")
        else:
            yield Check("data", "ok", f"{d.source} appears read-only at {d.target}")


# ---- the verifier --------------------------------------------------------------------------------


def _measure(run: Run, head: str) -> Iterator[Check]:
    """Guards and verifier on HEAD, exactly as `autoloop verify` (and the baseline) measure it."""
    from autoloop.verify_head import verify_head

    program = run.program
    res = verify_head(program, run.ws, head)
    for warning in res.warnings:
        yield Check("checkout", "warn", warning)
    m = res.measurement
    for g in m.guards:
        said = ""
        if not g.ok and res.guard_tails.get(g.name):
            lines = res.guard_tails[g.name].strip().splitlines()
            said = f"; it said: {lines[-1][:200]}" if lines else ""
        yield Check(f"guard {g.name}", "ok" if g.ok else "FAIL",
                    f"{'passes' if g.ok else 'fails'} on HEAD ({g.detail}, {g.duration_s:.1f}s){said}")
    if not m.guards_ok:
        yield Check("verifier", "FAIL", "not measured: a guard fails on HEAD, so the baseline would too")
        return
    v = program.verifier
    if m.metric is None:
        lines = res.verifier_tail.strip().splitlines()
        tail = f"; it said: {lines[-1][:200]}" if lines else ""
        yield Check("verifier", "FAIL", f"{m.error or 'no metric'} on HEAD{tail} — the baseline "
                                        f"would fail the same way (try `autoloop verify`)")
        return
    yield Check("verifier", "ok", f"{v.label} = {fmt(m.metric)} on HEAD {head[:12]} "
                                  f"({v.direction}, {m.duration_s:.1f}s)")
