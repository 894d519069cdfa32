"""The engine's values: a run's state (RunState), one round of cycles (Round) and one candidate
(Cycle) with its Outcome. The six steps (autoloop.engine.steps) each take the state and a round."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from autoloop.process import running
from autoloop.errors import Interrupted, NodeLost
from autoloop.engine.approve import Reviewer
from autoloop.engine.executors import LocalExecutor, RayExecutor, make_executor
from autoloop.generators.base import Generator, Proposal
from autoloop.isolation.hardening import Guardrails
from autoloop.journal.ledger import Journal
from autoloop.engine.measure import Judge
from autoloop.program.reader import Program
from autoloop.journal.redact import Redactor
from autoloop.program.scope_rules import ScopeRules
from autoloop.disk.sentinel import Sentinel
from autoloop.disk.snapshot import Change
from autoloop.engine.verify import Measurement
from autoloop.git.workspace import Workspace, Worktree

Reporter = Callable[[str, Mapping[str, Any]], None]
# After Ctrl-C, how long a round waits for its workers to notice before it cleans up anyway
# (commands die at once; an SDK call in flight cannot be interrupted from another thread).
STOP_GRACE_S = 15.0
_RECORDING = threading.Lock()   # node_lost records come from the workers' threads


@dataclass
class Outcome:
    status: str
    lesson: str
    result: str
    metric: float | None = None
    changed: list[str] = field(default_factory=list)
    measurement: Measurement | None = None
    extra: dict[str, Any] = field(default_factory=dict)   # the judge's fields for the cycle record
    diffstat: str | None = None
    decided_by: str = "ratchet"          # or "human" (approve mode)
    recommendation: str | None = None    # the ratchet's status when a person overruled or confirmed it


def violation(problems: Sequence[str], changed: list[str]) -> Outcome:
    text = "violation: " + "; ".join(problems)
    return Outcome("violation", text, text, changed=changed)


@dataclass
class Cycle:   # one candidate: worker `worker`'s cycle `n`, from generation to its record
    worker: int
    n: int
    tree: Worktree
    env: dict[str, str] = field(default_factory=dict)
    marker: str = ""
    log_dir: Path = Path()
    t0: float = field(default_factory=time.monotonic)
    before: dict | None = None               # snapshot of the tree at the incumbent
    proposal: Proposal = field(default_factory=Proposal)
    gen_error: str | None = None
    changes: list[Change] = field(default_factory=list)
    candidate: str | None = None             # the candidate commit (on no branch)
    found: str | None = None                 # no candidate: a violation's or gen_error's change as found on disk
    found_note: str = ""                     # why a change found on disk has no commit
    tree_hash: str | None = None
    measured: bool = False                   # it went to a lane (measured, or voided while measured)
    files: list[str] = field(default_factory=list)
    stat: Callable[[], str] | None = None    # the candidate's diffstat, read when recorded
    measurement: Measurement | None = None   # the strict rule's one measurement
    verdict: Any = None                      # the noise-aware judge's verdict
    node: dict[str, str] | None = None       # the Ray node every run of its measurement ran on
    outcome: Outcome | None = None
    blocked: dict[str, int] = field(default_factory=dict)   # host:port → refusals of the egress proxy


@dataclass
class Round:
    n0: int                                  # its first cycle number
    incumbent: str
    best_before: float | None
    cycles: list[Cycle]
    winner: Cycle | None = None
    measuring: bool = False                  # some candidate went to be measured


@dataclass
class RunState:   # everything the steps share; only the main thread changes the fields below `sentinel`
    program: Program
    tag: str
    report: Reporter
    ws: Workspace
    journal: Journal
    rules: ScopeRules
    guard: Guardrails
    marker: str
    workers: int
    lanes: int
    parallel: bool                           # records name their worker and round
    generator_factory: Callable[..., Generator]
    script_dirs: list[str]
    redact: Redactor
    reviewer: Reviewer | None = None
    sentinel: Sentinel | None = None
    incumbent: str = ""
    baseline: float | None = None
    best: float | None = None
    generators: dict[int, Generator] = field(default_factory=dict)
    exact: dict[int, tuple[str, dict]] = field(default_factory=dict)   # worker -> (commit, proven snapshot)
    signal: int | None = None
    in_python: bool = False                  # in code of ours that a signal interrupts at once
    restoring: bool = False                  # a further Ctrl-C must not cut a restore short
    finished: str | None = None              # why the generator has nothing left to propose

    @cached_property
    def executor(self) -> LocalExecutor | RayExecutor:
        # made at first use: `doctor` builds a Run without ever measuring through it
        return make_executor(self.program, self.ws, self.lanes, self.guard, self.journal.dir)

    def node_lost(self, exc: NodeLost, during: str, attempt: int) -> None:
        """A Ray node failed under a measurement: one line to the person, one ledger record; the
        measurement runs again elsewhere (autoloop.engine.measure)."""
        who = f"Ray node {exc.host or '?'} ({(exc.node_id or '?')[:12]})"
        self.report("warning", {"message": f"{who} lost during {during}; measuring again"})
        with _RECORDING:
            self.journal.append({"t": "node_lost", "during": during, "ray_node": exc.node_id, "host": exc.host,
                                 "attempt": attempt, "error": str(exc)[:500]})

    @cached_property
    def judge(self) -> Judge:
        # baseline and end-of-run check through lane 0: every number of the run from one place
        return Judge(self.program, self.ws, self.marker, self.check_signal, self.executor.lane(0), self.node_lost)

    def check_signal(self) -> None:
        if self.signal is not None:
            raise Interrupted("interrupted")

    def env(self, n: int) -> dict[str, str]:   # GIT_DIR & co. go at each use (generator_env, the scrub)
        return {**os.environ, "AUTOLOOP_CYCLE": str(n), "AUTOLOOP_TAG": self.tag}

    def worker_marker(self, worker: int) -> str:
        # prefix-matched on resume (leftovers.kill_marked(prefix=True)), so a killed run's workers die
        return f"{self.marker}-w{worker}"

    def log_dir(self, n: int, name: str = "") -> Path:
        d = self.journal.dir / "logs" / (name or f"cycle-{n:04d}")
        if d.exists():
            # an earlier attempt at this cycle number was rolled back; keep its logs aside
            d.rename(d.with_name(f"{d.name}.aborted-{int(time.time() * 1000)}"))
        d.mkdir(parents=True)
        return d

    def redact_logs(self, log_dir: Path) -> None:
        for p in log_dir.rglob("*"):      # runs/LABEL/ of repeated and paired measurements too
            if p.is_file() and not p.is_symlink():
                self.redact.file(p)

    def phase(self, rnd: Round, phase: str) -> None:
        k = len(rnd.cycles)
        self.report("phase", {"cycle": rnd.n0, "phase": phase if k == 1 else f"{phase} ({k} workers)"})

    def each(self, cycles: Sequence[Cycle], fn: Callable[[Cycle], None]) -> None:
        """fn(cycle) for every cycle at once, one thread each; the main thread waits, watching
        for Ctrl-C/SIGTERM. The first worker error is raised once all of them have stopped."""
        errors: dict[int, BaseException] = {}

        def body(i: int, c: Cycle) -> None:
            try:
                fn(c)
            except BaseException as exc:  # carried to the main thread
                errors[i] = exc

        if len(cycles) == 1:
            body(0, cycles[0])
        else:
            threads = [threading.Thread(target=body, args=(i, c), daemon=True, name=f"autoloop-worker-{c.worker}")
                       for i, c in enumerate(cycles)]
            for t in threads:
                t.start()
            try:
                for t in threads:
                    while t.is_alive():
                        t.join(0.05)
                        self.check_signal()
            except BaseException:
                # stop the commands and remote tasks; give the workers a moment to see it, so
                # the trees are quiet before the round is undone
                running.stop_current()
                self.executor.cancel()
                deadline = time.monotonic() + STOP_GRACE_S
                for t in threads:
                    t.join(max(0.0, deadline - time.monotonic()))
                raise
        if errors:
            if self.signal is not None:
                self.executor.cancel()
                raise Interrupted("interrupted")
            raise errors[min(errors)]


def file_changes(changes: list[Change]) -> list[Change]:
    """Changes git could record (files, links, specials); folders come and go with them."""
    return [c for c in changes
            if not ((c.before is None or c.before.kind == "d") and (c.after is None or c.after.kind == "d"))]
