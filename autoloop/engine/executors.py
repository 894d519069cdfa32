"""Where verification runs (program.md `parallel.executor`): an executor offers lanes, each
measuring one candidate at a time (`parallel.verify` of them); the baseline and the end-of-run
check use lane 0, so every number of a run is measured on the same kind of machine.
`local`: lane k is the verification trees 2k (B) and 2k+1 (A) beside the run's own. `ray`:
autoloop.engine.rayexec."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable, Mapping

from autoloop.process import running
from autoloop.engine import reads
from autoloop.engine.rayexec import RAY_EXTRA, RayExecutor, RayLane
from autoloop.errors import ConfigError, NodeLost
from autoloop.isolation.hardening import Guardrails
from autoloop.program.reader import Program
from autoloop.engine.score import Scorer, refuse_on_ray, start_scorer
from autoloop.engine.verify import Measurement, label, measure, steps
from autoloop.git.workspace import Workspace

__all__ = ["LocalExecutor", "LocalLane", "RayExecutor", "RayLane", "make_executor"]


class LocalLane:
    """Two verification trees; every run through the guardrails (a tree proven to hold exactly
    the commit, a scrubbed environment, checks after each step)."""

    def __init__(self, ws: Workspace, k: int, guard: Guardrails,
                 scorer: Callable[[], Scorer | None] = lambda: None) -> None:
        self.trees = {"B": ws.verify_tree(2 * k), "A": ws.verify_tree(2 * k + 1)}
        self.guard = guard
        self.scorer = scorer
        self.commits: dict[str, str] = {}
        self._checked_out: set[str] = set()

    def prepare(self, sides: Mapping[str, str]) -> None:
        # Each tree is checked out at its first measurement, not here: the guardrails carry each
        # tree's picture from its last measurement to the next generator check, and a tree reset
        # but never measured (a guard failing on B ends the batch before A runs) would no longer
        # match it: the next cycle then blamed its generator for "changing" it.
        self.commits = dict(sides)
        self._checked_out = set()

    def where(self) -> dict[str, str] | None:   # this machine: nothing to say per run
        return None

    def measure(self, program: Program, side: str, *, env: Mapping[str, str], log_dir: Path,
                marker: str, with_guards: bool, seed: int | Callable[[], int] | None = None,
                holdout: bool = False, hints: bool = True, check: bool = True) -> Measurement:
        tree, commit = self.trees[side], self.commits[side]
        if side not in self._checked_out:
            tree.checkout(commit, clean=False)   # measuring() cleans it
            self._checked_out.add(side)
        labels = [label(s) for s in steps(program, with_guards)]
        with self.guard.measuring(tree, commit, env, labels) as menv:
            return measure(program, cwd=tree.path, env=menv, log_dir=log_dir, marker=marker,
                           with_guards=with_guards, after_step=self.guard.after_step,
                           box=self.guard.confine(tree.path, menv, show_private=holdout),
                           scorer=None if holdout else self.scorer(), seed=seed,
                           reseal=lambda: self.guard.reseal(tree, commit), hints=hints, check=check)

    def record_reads(self, program: Program, commit: str, *, env: Mapping[str, str], log_dir: Path,
                     marker: str) -> reads.Reads:
        """The guards and the verifier once more on `commit` (in tree B), traced (autoloop.engine.reads)."""
        self.prepare({"B": commit})
        tree = self.trees["B"]
        tree.checkout(commit, clean=False)   # measuring() cleans it
        self._checked_out.add("B")
        with self.guard.measuring(tree, commit, env, ["the traced steps"]) as menv:
            box = self.guard.confine(tree.path, menv)
            return reads.record(program, cwd=tree.path, env=menv, scratch=Path(menv["TMPDIR"]),
                                log_dir=log_dir, marker=marker, wrap=box,
                                where=reads.roots(tree.path, None if box is None else box.checkout))


class LocalExecutor:
    unsandboxed: str | None = None   # the measurements are sandboxed as the generator is
    description = ""                 # nothing to add to the start line

    def __init__(self, ws: Workspace, lanes: int, guard: Guardrails) -> None:
        self.ws, self.guard = ws, guard
        self.lanes = [LocalLane(ws, k, guard, self.scorer) for k in range(lanes)]
        self._scorer: Scorer | None = None
        self._lock = threading.Lock()

    def scorer(self) -> Scorer | None:
        """The one Scorer of the run's start commit (guard.start_commit), made at its first use."""
        with self._lock:
            if self._scorer is None:
                self._scorer = start_scorer(self.ws, self.guard)
            return self._scorer

    def start(self) -> None:
        pass

    def lane(self, k: int) -> LocalLane:
        return self.lanes[k]

    def lose(self, exc: NodeLost) -> None:   # never raised here: a local lane has no node to lose
        pass

    def resume_on(self, where: Mapping[str, str] | None) -> None:   # one machine: nothing to find
        pass

    def cancel(self) -> None:
        running.stop_current()   # the signal handler did this already; harmless twice

    def close(self) -> None:
        pass


def make_executor(program: Program, ws: Workspace, lanes: int, guard: Guardrails,
                  log_dir: Path | None = None) -> LocalExecutor | RayExecutor:
    """The executor program.md asks for; ConfigError (exit 2) before anything changes when it
    cannot work here."""
    refuse_on_ray(program)
    if program.parallel.executor == "ray":
        try:   # an import, not a lookup: a broken install counts as absent
            import ray  # noqa: F401
        except ImportError:
            line = program.lines.get("parallel.executor", 1)
            raise ConfigError(f"{program.path.name}:{line}: parallel.executor: ray is not installed "
                              f"in this Python; {RAY_EXTRA}") from None
        ex = RayExecutor(program, ws, lanes, guard)
        if log_dir is not None:
            ex.log_dir = log_dir
        return ex
    return LocalExecutor(ws, lanes, guard)
