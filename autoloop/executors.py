"""Where verification runs (program.md `parallel.executor`): an executor offers lanes, each
measuring one candidate at a time (`parallel.verify` of them); the baseline and the end-of-run
check use lane 0, so every number of a run is measured on the same kind of machine.
`local`: lane k is the verification trees 2k (B) and 2k+1 (A) beside the run's own. `ray`: a
lane ships the commit as a tar (a Ray object, put once per commit) to a task that runs the same
steps in a temporary folder (autoloop.ray_task), sandboxed there as a local measurement is; its
output's tails come back as local logs."""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
from pathlib import Path
from typing import Any, Callable, Mapping

import autoloop
from autoloop import proc, ray_task
from autoloop.errors import ConfigError, Interrupted, UsageError
from autoloop.hardening import Guardrails
from autoloop.program import Program
from autoloop.sandbox import checkout_keep
from autoloop.score import Scorer, refuse_on_ray
from autoloop.specs import SandboxSpec
from autoloop.verify import SEED_VAR, Measurement, measure, new_seed, steps, summarize
from autoloop.workspace import Workspace

# Output brought back from a remote run: enough for any metric line and a failure's last words.
REMOTE_TAIL_BYTES = 4 << 20
RAY_EXTRA = "pip install 'autoloop-ratchet[ray]'"


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

    def measure(self, program: Program, side: str, *, env: Mapping[str, str], log_dir: Path,
                marker: str, with_guards: bool, seed: int | None = None, holdout: bool = False) -> Measurement:
        tree, commit = self.trees[side], self.commits[side]
        if side not in self._checked_out:
            tree.checkout(commit, clean=False)   # measuring() cleans it
            self._checked_out.add(side)
        with self.guard.measuring(tree, commit, env) as menv:
            return measure(program, cwd=tree.path, env=menv, log_dir=log_dir, marker=marker,
                           with_guards=with_guards, after_step=self.guard.after_step,
                           box=self.guard.confine(tree.path, menv, show_private=holdout),
                           scorer=None if holdout else self.scorer(), seed=seed)


class LocalExecutor:
    unsandboxed: str | None = None   # the measurements are sandboxed as the generator is

    def __init__(self, ws: Workspace, lanes: int, guard: Guardrails) -> None:
        self.ws, self.guard = ws, guard
        self.lanes = [LocalLane(ws, k, guard, self.scorer) for k in range(lanes)]
        self._scorer: Scorer | None = None
        self._lock = threading.Lock()

    def scorer(self) -> Scorer | None:
        """The one Scorer of the run's start commit (guard.start_commit), made at its first use."""
        p = self.guard.program
        if p.verifier.score is None:
            return None
        with self._lock:
            if self._scorer is None:
                assert self.guard.start_commit is not None, "the run's start commit is set in Run.open"
                self._scorer = Scorer(p, self.ws.score_tree(), self.guard.start_commit, self.guard.sandbox,
                                      self.guard.scratch / "score")
            return self._scorer

    def start(self) -> None:
        pass

    def lane(self, k: int) -> LocalLane:
        return self.lanes[k]

    def cancel(self) -> None:
        proc.stop_current()   # the signal handler did this already; harmless twice

    def close(self) -> None:
        pass


class RayLane:
    def __init__(self, ex: RayExecutor) -> None:
        self.ex = ex
        self.refs: dict[str, Any] = {}

    def prepare(self, sides: Mapping[str, str]) -> None:
        self.refs = {side: self.ex.put(commit) for side, commit in sides.items()}

    def measure(self, program: Program, side: str, *, env: Mapping[str, str], log_dir: Path,
                marker: str, with_guards: bool, seed: int | None = None, holdout: bool = False) -> Measurement:
        # a fresh folder unpacked from the commit on the node for every run: nothing to re-prove
        # there; here, the places the guardrails watch must still not change meanwhile
        self.ex.guard.capture_outside()
        todo = steps(program, with_guards)
        # the node's own environment, plus ours that mean something there: not our PATH or HOME
        shipped = {k: val for k, val in env.items() if k.startswith("AUTOLOOP_") or k in self.ex.hint_keys}
        shipped[proc.MARKER_VAR] = marker
        seed = new_seed() if seed is None else seed
        shipped[SEED_VAR] = str(seed)
        reply = self.ex.call(self.refs[side], todo, shipped, reap=program.verifier.measure == "cpu")
        if isinstance(reply, str):
            return Measurement(None, (), f"ray: {reply}", None, 0.0, seed)
        log_dir.mkdir(parents=True, exist_ok=True)
        results = []
        for step, run in zip(todo, reply.runs):
            stem = log_dir / step.log_name
            out, err = stem.with_name(stem.name + ".out"), stem.with_name(stem.name + ".err")
            out.write_bytes(run.stdout)
            err.write_bytes(run.stderr + f"\n[autoloop: ran on {reply.host}; "
                            f"{run.stdout_size} bytes of stdout in all]\n".encode())
            results.append(dataclasses.replace(run.result, stdout_path=out, stderr_path=err))
        return dataclasses.replace(summarize(program, todo, results), seed=seed)


class RayExecutor:
    def __init__(self, program: Program, ws: Workspace, lanes: int, guard: Guardrails) -> None:
        self.program, self.ws, self.guard = program, ws, guard
        self.spec = program.parallel
        self.hint_keys = frozenset(k for env in self.spec.env for k in env)
        self.lanes = [RayLane(self) for _ in range(lanes)]
        self._cache: dict[str, Any] = {}           # commit -> ObjectRef of its tar
        self._lock = threading.Lock()
        self._running: set[Any] = set()
        self._cancelled = False
        self._ray: Any = None
        self._task: Any = None
        self.sandbox: SandboxSpec | None = None    # what every measurement on a node runs in
        self.unsandboxed: str | None = None        # why, under `sandbox: auto`, none does

    def start(self) -> None:
        import ray

        address = self.spec.address
        # autoloop travels with the job: the cluster's nodes need Ray and Python, not autoloop
        kw: dict[str, Any] = dict(ignore_reinit_error=True, logging_level=logging.ERROR, log_to_driver=False,
                                  runtime_env={"py_modules": [autoloop]})
        if address is None:
            # a private local instance: enough CPUs for every lane, Ray's own GPU detection
            cpus = self.spec.num_cpus if self.spec.num_cpus is not None else 1.0
            kw.update(num_cpus=max(1, math.ceil(cpus * len(self.lanes))), include_dashboard=False)
        else:
            kw["address"] = address
        opts = {"max_retries": 0, **{k: v for k, v in (("num_cpus", self.spec.num_cpus),
                                                        ("num_gpus", self.spec.num_gpus)) if v is not None}}
        try:
            ray.init(**kw)
            self._ray = ray
            self._sandbox_on_nodes(ray.remote(ray_task.probe).options(**opts))
        except Exception as exc:  # Ray raises ConnectionError, RuntimeError, ValueError ...
            raise UsageError(f"{self.program.path.name}:{self.program.line('parallel.address')}: parallel.address: cannot start or reach "
                             f"Ray ({address or 'local instance'}): {type(exc).__name__}: "
                             f"{' '.join(str(exc).split())[:300]}") from None
        self._task = ray.remote(ray_task.run_steps).options(**opts)

    def _sandbox_on_nodes(self, probe: Any) -> None:
        """Under `auto` the answer of one node decides for the whole run: a sandbox for every
        measurement (on a node that cannot make one the measurement then crashes, saying why), or
        none, said as a local run says it. `bwrap` needs one everywhere, without asking first."""
        p = self.program
        if p.sandbox.kind == "none":
            return
        wanted = dataclasses.replace(p.sandbox, kind="bwrap", network=p.verifier.network)
        if p.sandbox.kind == "auto":
            host, why = self._ray.get(probe.remote(wanted, dict(self.spec.worker_env(0))))
            if why is not None:
                self.unsandboxed = f"on the Ray node {host}: {why}"
                return
        self.sandbox = wanted

    def lane(self, k: int) -> RayLane:
        return self.lanes[k]

    def put(self, commit: str) -> Any:
        with self._lock:
            ref = self._cache.get(commit)
        if ref is None:
            ref = self._ray.put(self.ws.archive(commit))
            with self._lock:
                if len(self._cache) > 32:      # old incumbents and candidates: let Ray free them
                    self._cache.clear()
                self._cache[commit] = ref
        return ref

    def call(self, archive_ref: Any, todo: list[proc.Step], env: dict[str, str],
             reap: bool = False) -> ray_task.RemoteReply | str:   # or why there is no reply
        checkout = (str(self.program.repo_root), tuple(map(str, checkout_keep(self.program))))
        ref = self._task.remote(archive_ref, todo, env, REMOTE_TAIL_BYTES, self.sandbox, checkout, reap)
        with self._lock:
            self._running.add(ref)
        try:
            while True:
                if self._cancelled:
                    raise Interrupted("interrupted")
                done, _ = self._ray.wait([ref], timeout=0.2)
                if done:
                    break
            try:
                return self._ray.get(ref)
            except Exception as exc:
                # the task or its node died: the candidate's run is a crash, not the run's end
                return f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        finally:
            with self._lock:
                self._running.discard(ref)

    def cancel(self) -> None:
        self._cancelled = True
        with self._lock:
            refs = list(self._running)
        for ref in refs:
            try:
                self._ray.cancel(ref)   # not force: the task kills its verifier's group first
            except Exception:
                pass

    def close(self) -> None:
        if self._ray is not None:
            self._ray.shutdown()
            self._ray = None


def make_executor(program: Program, ws: Workspace, lanes: int,
                  guard: Guardrails) -> LocalExecutor | RayExecutor:
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
        return RayExecutor(program, ws, lanes, guard)
    return LocalExecutor(ws, lanes, guard)
