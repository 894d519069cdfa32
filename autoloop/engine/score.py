"""`verifier.score` (contract §10), the produce/score split: `verifier.command` runs the
candidate's code and writes into $AUTOLOOP_OUTPUT; the score then runs as a process of its own in
a tree of the commit the run started from — none of the candidate's files are there, so nothing
it changed can run — with that folder read-only and the program's `private` paths readable, which
no process running the candidate's code can read."""

from __future__ import annotations

import dataclasses
import secrets
import tempfile
import threading
import weakref
from pathlib import Path
from typing import Mapping

from autoloop.process import envs
from autoloop.process import proc
from autoloop.errors import ConfigError
from autoloop.isolation.hardening import Guardrails, Tampered, link_data
from autoloop.program.reader import Program
from autoloop.isolation.sandbox import Bwrap, make_mount_points, tree_box
from autoloop.base.walk import remove_tree
from autoloop.git.workspace import Workspace, Worktree

LOG_NAME = "score"   # its logs: <log_dir>/score.out and .err
KEEP_INPUTS = 4      # verifier.inputs' outputs kept, by seed (both runs of a pair share one)


class Scorer:
    """Runs `verifier.score` in `tree`, a worktree held at `commit` (the run's start; `verify`'s
    HEAD; `gate`'s base). Sandboxed, nothing can write that tree: no sandbox binds it writable,
    the score's own binds it read-only, so it is made once. Unsandboxed, anything the candidate's
    code ran as you could have written it, so it is made exactly the commit again before each score."""

    def __init__(self, program: Program, tree: Worktree, commit: str, bwrap: Bwrap | None,
                 scratch: Path, guard: Guardrails | None = None) -> None:
        self.program, self.tree, self.commit, self.bwrap = program, tree, commit, bwrap
        self.guard = guard   # a run's: its bytecode cache starts each Python warm
        self.scratch = scratch
        self._lock = threading.Lock()
        self._made = False
        self._inputs: dict[str, Path] = {}   # seed -> the file verifier.inputs wrote for it
        self._inputs_dir: Path | None = None

    def _make(self) -> None:
        with self._lock:
            if self._made and self.bwrap is not None:
                return
            self.tree.checkout(self.commit)
            link_data(self.program, self.tree.path)
            if self.bwrap is not None:
                make_mount_points(self.program, self.tree.path)
            bad = self.tree.differs_from(self.commit)
            if bad:
                raise Tampered("the score's tree does not hold the start commit: " + ", ".join(bad[:5]))
            self._made = True

    def __call__(self, env: Mapping[str, str], output: Path, log_dir: Path, marker: str,
                 readable: tuple[Path, ...] = ()) -> proc.ProcResult:
        """`verifier.score` with the command's `env` (its $AUTOLOOP_* included: the same seed)
        but fresh temp and bytecode folders: the command's, which its code could write, are not
        the score's. `readable`: files bound read-only for it too (verifier.inputs' output)."""
        command = self.program.verifier.score
        assert command is not None
        return self._run(command, env, log_dir / LOG_NAME, marker, (output, *readable))

    def inputs(self, env: Mapping[str, str], marker: str) -> tuple[proc.ProcResult | None, Path | None]:
        """`verifier.inputs` for `env`'s seed, run where the score runs (the start commit's tree,
        its sandbox, the private paths readable), before the command and outside its timing:
        (its result, the file holding its stdout — None when it failed). Both runs of a pair
        share a seed and so the file: made once. The file is in a folder of autoloop's temp
        space that no measurement's sandbox binds: the command gets it as its stdin only."""
        command = self.program.verifier.inputs
        assert command is not None
        seed = env.get("AUTOLOOP_SEED", "")
        with self._lock:
            hit = self._inputs.get(seed)
            if self._inputs_dir is None:
                self._inputs_dir = Path(tempfile.mkdtemp(prefix="autoloop-inputs-"))
                weakref.finalize(self, remove_tree, self._inputs_dir, quiet=True)
            folder = self._inputs_dir
        if hit is not None and hit.exists():
            return None, hit
        res = self._run(command, env, folder / f"inputs-{secrets.token_hex(6)}", marker, ())
        if not res.ok:
            return res, None
        with self._lock:
            self._inputs[seed] = res.stdout_path
            while len(self._inputs) > KEEP_INPUTS:
                old = self._inputs.pop(next(iter(self._inputs)))
                for path in (old, old.with_suffix(".err")):
                    path.unlink(missing_ok=True)
        return res, res.stdout_path

    def _run(self, command: str, env: Mapping[str, str], log_stem: Path, marker: str,
             read_only: tuple[Path, ...]) -> proc.ProcResult:
        self._make()
        self.scratch.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix="score-", dir=self.scratch))
        try:
            senv = envs.scrubbed(env, scratch=scratch / "env")
            senv.update({k: v for k, v in env.items() if k.startswith("AUTOLOOP_")})
            prefix = Path(senv["PYTHONPYCACHEPREFIX"])
            cache = self.guard.seed_bytecode(prefix, command) if self.guard is not None else None
            box = None
            if self.bwrap is not None:
                box = tree_box(self.bwrap, self.program, self.tree.path, self.tree.common_dir, scratch,
                               path=senv.get("PATH", ""), show_private=True)
                box = dataclasses.replace(box, tree_writable=False, read_only=read_only)
            try:
                res = proc.run_wrapped(command, box, cwd=self.tree.path, env=senv,
                                       timeout=self.program.verifier.timeout, log_stem=log_stem, marker=marker)
            except BaseException:
                if cache is not None:
                    cache.forget(prefix)   # as measuring() does: nothing to learn from it
                raise
            if self.guard is not None:
                self.guard.learn_bytecode(cache, prefix)
            return res
        finally:
            remove_tree(scratch, quiet=True)


def start_scorer(ws: Workspace, guard: Guardrails) -> Scorer | None:
    """The Scorer of the run's start commit (guard.start_commit) in this machine's sandbox
    (guard.sandbox, which shows it the private paths), or None without `verifier.score`."""
    p = guard.program
    if p.verifier.score is None:
        return None
    assert guard.start_commit is not None, "the run's start commit is set in Run.open"
    return Scorer(p, ws.score_tree(), guard.start_commit, guard.sandbox, guard.scratch / "score", guard)


def refuse_on_ray(program: Program) -> None:
    """On Ray the score runs here and the private paths never leave this machine; a `holdout`
    runs the candidate's code, on a node, where they are not: refused together (ConfigError,
    exit 2, before anything starts)."""
    if program.parallel.executor == "ray" and program.holdout is not None and program.private:
        raise ConfigError(f"{program.path.name}:{program.line('holdout')}: holdout reads the private paths, "
                          "which never leave this machine, and with parallel.executor: ray it runs on a "
                          "node; score the held-out data with verifier.score instead (it runs here), or "
                          "use parallel.executor: local")
