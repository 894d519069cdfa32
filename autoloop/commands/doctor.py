"""`autoloop doctor [PROGRAM]`: what to run before leaving a loop overnight.

Each check is what the run itself would do before its baseline, done the same way (the same Run
object, sandbox and generator preflight), and nothing is changed. One `Check` per line: git, the
sandbox, the generator (found, version, authenticated where the tool can say so without
spending tokens), the data paths, the guards and the verifier (measured once, on HEAD).
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from itertools import chain
from typing import Any, Iterator, Literal

from autoloop.base.numbers import num, seconds
from autoloop.base.walk import left_behind, temp_tree
from autoloop.commands.clean import temps_text
from autoloop.engine.hints import (
    missing_scripts,
    placeholders,
    plain,
    unmatched_allowed,
)
from autoloop.engine.loop import Run, RunOptions
from autoloop.errors import AutoloopError, UsageError
from autoloop.generators.base import preflight_context
from autoloop.generators.command import last_line, run_short
from autoloop.isolation.egress.allowlist import url_rules
from autoloop.isolation.egress.policy import policy
from autoloop.isolation.egress.proxy import PORT
from autoloop.git.gitrun import git, head_has
from autoloop.isolation.sandbox import SandboxUnavailable, needs_network
from autoloop.process import envs
from autoloop.program.reader import Program, data_problem, load_program

State = Literal["ok", "warn", "FAIL"]
NAMES_SHOWN = 5
SAID_CHARS = 200


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
    unfinished = placeholders(program)   # `run` and `verify` refuse these before anything else
    for line in unfinished:
        yield Check("program", "FAIL", f"{line}; `run` refuses the file until it is edited")
    missing = [] if unfinished else missing_scripts(program, lambda rel: head_has(program.repo_root, rel))
    for line in missing:
        yield Check("program", "FAIL", f"{line}; `run` refuses the file until it is fixed")
    for line in unmatched_allowed(program):
        yield Check("program", "warn", line)
    head = yield from _git(run)
    temps = left_behind()
    if temps:   # (not a problem: a run does not mind them)
        yield Check("temp", "warn", f"{temps_text(temps)}: `autoloop clean` removes them")
    data = list(_data(program, head))
    failed = head is None
    cluster = _ray(run) if program.parallel.executor == "ray" else iter(())
    for check in chain([_sandbox(run)], cluster, _generator(run), data):  # streamed: preflights are slow
        failed = failed or check.blocks
        yield check
    if not failed:
        # what else the run checks before it starts (submodules, the run branch checked out
        # somewhere); sandbox and data problems have had their own lines
        try:
            run.guard.preflight()
        except UsageError as exc:
            yield Check("repository", "FAIL", str(exc))
    if head is None:
        yield Check("verifier", "FAIL", "not measured: the repository has no commit to measure")
    elif unfinished:
        yield Check("verifier", "FAIL", f"not measured: {program.path.name} still holds the template's "
                                        "placeholders (the lines marked EDIT)")
    elif missing:
        yield Check("verifier", "FAIL", "not measured: a file its commands run is missing (above)")
    elif any(c.blocks for c in data):
        yield Check("verifier", "FAIL", "not measured: its data is not in place (above)")
    else:
        yield from _measure(run, head)


def _git(run: Run) -> Iterator[Check]:
    ws, root = run.ws, run.program.repo_root
    try:
        ws.check_state()
    except UsageError as exc:
        yield Check("git", "FAIL", str(exc))
        return None
    head = ws.head()
    branch = git(root, "symbolic-ref", "--short", "-q", "HEAD", check=False).strip()
    detail = f"{root}: HEAD {head[:12]} {f'on {branch}' if branch else 'detached'}"
    # program.md is read from the checkout, committed or not: not a file a run would miss
    own = run.program.path.resolve().relative_to(root.resolve()).as_posix()
    dirty = [ln for ln in git(root, "status", "--porcelain", "--untracked-files=normal",
                              check=False).splitlines() if ln.strip() and ln[3:] != own]
    if dirty:
        more = f" (+{len(dirty) - NAMES_SHOWN} more)" if len(dirty) > NAMES_SHOWN else ""
        names = ", ".join(ln[3:] for ln in dirty[:NAMES_SHOWN]) + more
        yield Check("git", "warn", f"{detail}; {len(dirty)} uncommitted or untracked path"
                                   f"{'s' if len(dirty) > 1 else ''} ({names}) — a run starts from HEAD "
                                   "and does not see them (commit what the verifier needs)")
    else:
        yield Check("git", "ok", detail + ", clean")
    resumes = ws.branch_head()
    if resumes:
        yield Check("run", "ok", f"branch {ws.branch} exists at {resumes[:12]}: `--tag {run.opt.tag}` resumes it")
    return head


def _sandbox(run: Run) -> Check:
    sandbox, kind = run.guard.sandbox, run.program.sandbox.kind
    if sandbox is None:
        return Check("sandbox", "warn", f"none (sandbox: {kind}): the generator runs as you, unconfined; "
                                        "attacks are only detected (see docs/trust.md)")
    try:
        sandbox.probe()
        if needs_network(run.program):
            sandbox.start_egress()
    except SandboxUnavailable as exc:
        return Check("sandbox", "FAIL", f"sandbox: {kind}: {exc}")
    return Check("sandbox", "ok", f"bubblewrap ({sandbox.exe}) makes a sandbox here")


def _ray(run: Run) -> Iterator[Check]:
    """The cluster `executor: ray` measures on: its size, and each node's Ray and Python against
    this driver's (Ray refuses a mismatch) and its bubblewrap."""
    from autoloop.engine.executors import make_executor

    with temp_tree("doctor-ray") as logs:   # Ray's own output: doctor writes nothing in the checkout
        yield from _cluster(run, make_executor(run.program, run.ws, 1, run.guard, logs))


def _cluster(run: Run, ex: Any) -> Iterator[Check]:
    import platform

    import ray

    try:
        ex.start()
    except AutoloopError as exc:
        yield Check("ray", "FAIL", str(exc))
        return
    try:
        yield Check("ray", "ok", ex.description)
        yield Check("ray steps", "ok", ex.where_steps())
        here = (ray.__version__, platform.python_version())
        for node, facts in ex.node_facts():
            name = f"ray node {node.get('NodeName') or '?'} ({str(node.get('NodeID'))[:12]})"
            if isinstance(facts, str):
                yield Check(name, "FAIL", f"did not answer: {facts}")
                continue
            problems = [f"Ray {facts.ray} (here {here[0]})"] if facts.ray != here[0] else []
            if facts.python.rsplit(".", 1)[0] != here[1].rsplit(".", 1)[0]:
                problems.append(f"Python {facts.python} (here {here[1]})")
            box = "bubblewrap makes a sandbox there" if facts.bwrap is None else f"no sandbox there: {facts.bwrap}"
            detail = f"{facts.host}: Ray {facts.ray}, Python {facts.python}, {box}"
            if problems:
                yield Check(name, "FAIL", f"{detail}; Ray needs the driver's versions: {', '.join(problems)}")
            elif facts.bwrap is not None and run.program.sandbox.kind != "none":
                yield Check(name, "FAIL" if run.program.sandbox.kind == "bwrap" else "warn", detail)
            else:
                yield Check(name, "ok", detail)
    finally:
        ex.close()


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
    yield Check("generator", "ok", f"{spec.kind}: starts{where}" + (f", version {version}" if version else ""))
    yield from _egress(run, generator)
    status = getattr(generator, "auth_status", None)
    if status is None:
        return
    with temp_tree("doctor") as scratch:
        ctx = preflight_context(run.program, scratch, env=envs.generator_env(run.env(0)),
                                run_marker=run.marker, wrap=run.guard.wrap(scratch, workdir=scratch))
        try:
            known, detail = status(ctx)
        except AutoloopError as exc:
            known, detail = False, str(exc)
    yield Check("auth", "ok" if known else ("warn" if known is None else "FAIL"), f"{spec.kind}: {detail}")


_ASK_PROXY = """import socket, sys
s = socket.create_connection(("127.0.0.1", {port}), timeout=30)
s.sendall(b"CONNECT {target} HTTP/1.1\\r\\nHost: {target}\\r\\n\\r\\n")
s.settimeout(30)
print(s.recv(4096).decode(errors="replace").splitlines()[0])
"""


def _egress(run: Run, generator: Any) -> Iterator[Check]:
    """The allowlist the generator's sandbox gets, and whether its API host answers through the
    proxy: a TCP connection opened by the proxy from inside the sandbox (nothing is sent to it)."""
    p, sandbox = run.program, run.guard.sandbox
    preset = hasattr(generator, "egress_hosts")
    if sandbox is None or not (p.sandbox.network or (preset and "sandbox.network" not in p.lines)):
        return
    env = envs.generator_env(run.env(0))
    own = generator.egress_hosts(env) if preset else []
    urls = url_rules(os.environ, p.generator.base_url)
    rules = policy(sandbox.allowlist([*own, *urls], p.sandbox.hosts)).rules
    shown = "; ".join(f"{r} ({r.why})" for r in rules) or "nothing"
    yield Check("egress", "ok", f"the generator reaches only {shown} (through autoloop's proxy; add hosts "
                                "to sandbox.hosts)")
    api = (urls or own or [None])[0]   # a base URL set is where the agent talks
    if api is None:
        return
    target = f"{api.host}:{api.ports[0]}" if ":" not in api.host else f"[{api.host}]:{api.ports[0]}"
    with temp_tree("doctor") as scratch:
        ctx = preflight_context(p, scratch, env=env, run_marker=run.marker, wrap=run.guard.wrap(scratch, workdir=scratch))
        ctx = generator.sandboxed(ctx) if preset else ctx
        said = run_short(ctx, [sys.executable, "-I", "-S", "-c", _ASK_PROXY.format(port=PORT, target=target)], 90.0)
    answer = last_line(said.out) or last_line(said.err) or "no answer"
    if " 200 " in answer + " ":
        yield Check("egress", "ok", f"{target} ({api.why}) answers through the proxy")
    else:
        yield Check("egress", "FAIL", f"{target} ({api.why}) does not answer through the proxy: {answer}")


def _sdk_key(run: Run, kind: str) -> Check:
    var = "ANTHROPIC_API_KEY" if kind == "anthropic" else "OPENAI_API_KEY"
    if os.environ.get(var):
        return Check("auth", "ok", f"{kind}: {var} is set")
    if run.program.generator.base_url or os.environ.get(var.replace("API_KEY", "BASE_URL")):
        return Check("auth", "warn", f"{kind}: {var} is not set; a local server at the base URL may not need it")
    return Check("auth", "FAIL", f"{kind}: {var} is not set; export it before the run")


def _data(program: Program, head: str | None) -> Iterator[Check]:
    for i, d in enumerate(program.data):
        problem = data_problem(program, i, head)
        yield Check("data", "FAIL", problem) if problem else \
            Check("data", "ok", f"{d.source} appears read-only at {d.target}")


def _last_line(text: str, shown: str = "") -> str:
    """`; it said: LINE`, unless the check's text already quotes that line."""
    last = last_line(plain(text), SAID_CHARS)
    return f"; it said: {last}" if last and last not in shown else ""


def _measure(run: Run, head: str) -> Iterator[Check]:
    """Guards and verifier on HEAD, exactly as `autoloop verify` (and the baseline) measure it."""
    from autoloop.engine.verify_head import verify_head

    res = verify_head(run.program, run.ws, head)
    for warning in res.warnings:
        yield Check("checkout", "warn", warning)
    if res.files_read is not None:
        yield Check("reads", "ok", res.files_read.summary())
    for warning in res.read_warnings:
        yield Check("reads", "warn", warning)
    m = res.measurement
    for g in m.guards:
        said = "" if g.ok else _last_line(res.guard_tails.get(g.name) or "", g.detail)
        yield Check(f"guard {g.name}", "ok" if g.ok else "FAIL",
                    f"{'passes' if g.ok else 'fails'} on HEAD ({g.detail}, {seconds(g.duration_s)}){said}")
    if not m.guards_ok:
        yield Check("verifier", "FAIL", "not measured: a guard fails on HEAD, so the baseline would too")
    elif m.metric is None:
        yield Check("verifier", "FAIL", f"{m.error or 'no metric'} on HEAD{_last_line(res.verifier_tail, m.error or '')} — "
                                        "the baseline would fail the same way (try `autoloop verify`)")
    else:
        v = run.program.verifier
        yield Check("verifier", "ok", f"{v.label} = {num(m.metric)} on HEAD {head[:12]} "
                                      f"({v.direction}, {seconds(m.verifier_s)})")


DOCTOR_NAME_WIDTH = 14    # the lines stream out as each check ends: one width that fits `guard <name>`


def main(args: argparse.Namespace) -> int:
    from autoloop.commands.doctor import diagnose

    program = _load(args.program)
    if args.probe:
        from autoloop.commands.probe import print_probe

        return print_probe(program)
    failed = 0
    for check in diagnose(program, tag=args.tag):
        print(f"{check.state:<4}  {check.name:<{DOCTOR_NAME_WIDTH}}  {check.detail}", flush=True)
        failed += check.blocks
    if failed:
        print(f"doctor: {failed} problem{'s' if failed > 1 else ''}: a run would not start (or not get far)")
        return 1
    print("doctor: a run can start")
    return 0


def _load(path: str) -> Program:
    """The program to check; a missing file says where a first check can start (right after
    installing, there is no program.md yet)."""
    try:
        return load_program(path)
    except UsageError as exc:
        if os.path.lexists(os.path.expanduser(path)):
            raise
        raise UsageError(f"{exc}; doctor checks a program: give its path, write one with `autoloop init`, "
                         "or check this machine with the quickstart's, from autoloop's clone: "
                         "autoloop doctor examples/quickstart/program.md") from None
