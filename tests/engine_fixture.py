"""An engine opened in-process on a real repository (tests.scripts.e2e's project, scripted
generator and verifier): a Run attached under its lock, its trees made, the branch at the start
and the incumbent's metric known, so a test can drive the six steps of a round one by one."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from autoloop.engine.cycle import Round, RunState
from autoloop.git.gitrun import thaw_outer_config
from autoloop.engine.loop import Run, RunOptions
from autoloop.program.reader import load_program
from autoloop.engine.round import start_round
from autoloop.engine.steps.decide import decide
from autoloop.engine.steps.generate import generate
from autoloop.engine.steps.prepare import prepare
from autoloop.engine.steps.scope import scope
from autoloop.engine.steps.verify import verify
from tests.scripts.e2e import Project, make_project

START_SCORE = 40.25    # val.txt of the project


@dataclass
class Engine:
    project: Project
    run: Run

    @property
    def state(self) -> RunState:
        return self.run.state

    @property
    def tree(self) -> Path:
        return self.run.ws.path

    def round(self, k: int = 1, upto: str = "decide") -> Round:
        """A round of k cycles through the steps up to and including `upto`."""
        rnd = start_round(self.state, k)
        for step in (prepare, generate, scope, verify, decide):
            step(self.state, rnd)
            if step.__name__ == upto:
                break
        return rnd


@pytest.fixture
def engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    opened: list[Run] = []

    def make(plan: dict[Any, str] | None = None, **kw: Any) -> Engine:
        p = make_project(tmp_path / "p", plan, **kw)
        for k, v in p.env.items():
            monkeypatch.setenv(k, v)
        monkeypatch.chdir(p.repo)
        run = Run(load_program(p.repo / "program.md"), RunOptions(tag=p.tag))
        run.guard.preflight()
        lock = tmp_path / "run.lock"
        lock.touch()
        incumbent = run.open(lock)
        run.ws.create_branch(incumbent)
        s = run.state
        s.incumbent, s.baseline, s.best = incumbent, START_SCORE, START_SCORE
        opened.append(run)
        return Engine(p, run)

    yield make
    for run in opened:
        run.state.executor.close()
    # Run.open froze git's outer config for this process, as a run does until it ends: later
    # tests in the same process must see the real one again
    thaw_outer_config()
