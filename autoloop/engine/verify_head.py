"""HEAD (or any commit) measured as a run's baseline would measure it — guards and verifier in a
private tree outside the repository, in the same scrubbed environment and sandbox — after the
same program checks as `run`. Nothing of the checkout changes, and its temporary folders go.
`autoloop verify` prints one such measurement; `doctor` and `doctor --probe` take theirs here."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from autoloop.base.walk import remove_tree, temp_dir
from autoloop.engine import reads
from autoloop.engine.score import Scorer
from autoloop.engine.verify import Measurement, measure, sandbox_outside_run
from autoloop.errors import RunFailure
from autoloop.git.workspace import Workspace, Worktree
from autoloop.isolation.hardening import data_paths, link_data
from autoloop.isolation.measured_files import protected_paths, uncommitted_warnings
from autoloop.isolation.pycache import WarmCache
from autoloop.isolation.sandbox import tree_box
from autoloop.process import envs, logfile, proc
from autoloop.program.reader import Program, check_data


@dataclass
class Verified:
    commit: str
    measurement: Measurement
    warnings: list[str] = field(default_factory=list)
    guard_tails: dict[str, str] = field(default_factory=dict)   # failing guard -> its output's tail
    verifier_tail: str = ""                                     # when there is no metric
    files_read: reads.Reads | None = None                       # what it read (a measured HEAD)
    read_warnings: list[str] = field(default_factory=list)      # what that says (reads.warnings)


def check(program: Program) -> tuple[Workspace, str]:
    """The checks `run` makes before anything changes; (workspace, HEAD)."""
    ws = Workspace(program.repo_root, "verify")
    ws.check_state()
    protected_paths(program)   # a verifier the generator could edit is refused, as by `run`
    sandbox_outside_run(program)   # refuses what `run` does before its baseline
    head = ws.head()
    check_data(program, head)
    return ws, head


def verify_head(program: Program, ws: Workspace, commit: str,
                plant: Callable[[Path], None] | None = None,
                collect: Callable[[Path], None] | None = None, record_reads: bool = True,
                bytecode: WarmCache | None = None, seed: int | None = None) -> Verified:
    """Guards and verifier on `commit` in a private tree that is removed afterwards. `plant(tree)`
    changes the tree before it is measured and `collect(tree)` reads it after (`doctor --probe`:
    a reward hack tried in a throwaway tree, never on a branch). What the measurement read is
    recorded (a second, traced run) for an unplanted tree unless `record_reads` is false.
    `bytecode`: a cache that several such measurements start their Pythons from (used only when
    they are sandboxed: unsandboxed, a planted tree's code could rewrite it for the next).
    `seed`: the verifier's $AUTOLOOP_SEED (default a fresh one), for two measurements on the same inputs."""
    warnings = uncommitted_warnings(program, ws, commit)
    bwrap, warning = sandbox_outside_run(program)
    warnings += [warning] if warning else []
    bytecode = bytecode if bwrap is not None else None
    tmp = temp_dir("verify")
    tree = Worktree(program.repo_root, ws.common_dir, tmp / "tree")
    # the score runs in a tree of its own: the one measured is the command's to write
    score_tree = Worktree(program.repo_root, ws.common_dir, tmp / "score")
    # (the score starts cold: what it compiles may come from the private paths, which no
    # measurement may read, and this cache's folder is not hidden like a run's scratch)
    scorer = None if program.verifier.score is None else Scorer(program, score_tree, commit, bwrap, tmp / "score-scratch")
    try:
        tree.open(commit)
        link_data(program, tree.path)
        if plant is not None:
            plant(tree.path)
        log_dir = tmp / "logs"
        log_dir.mkdir()
        with envs.measurement_env(os.environ, parent=tmp / "scratch") as env:
            # the same sandbox as a run's measurements (autoloop.isolation.sandbox)
            box = None if bwrap is None else tree_box(bwrap, program, tree.path, ws.common_dir,
                                                       Path(env["TMPDIR"]).parent, env.get("PATH", ""))
            prefix = Path(env["PYTHONPYCACHEPREFIX"])
            steps = _Prefix(prefix, bytecode)

            def between() -> None:
                reseal(program, tree, commit, plant)
                steps.next()

            try:
                m = measure(program, cwd=tree.path, env=env, log_dir=log_dir, marker=proc.new_marker(), box=box,
                            scorer=scorer, reseal=between, seed=seed)
            finally:
                steps.close()
            got, said = None, []
            # a probe's planted tree is not the user's
            if m.guards_ok and m.metric is not None and plant is None and record_reads:
                got = reads.record(program, cwd=tree.path, env=env, scratch=Path(env["TMPDIR"]),
                                   log_dir=log_dir, marker=proc.new_marker(),
                                   wrap=box,
                                   where=reads.roots(tree.path, None if box is None else box.checkout))
                said = reads.warnings(program, got, protected_paths(program))
        if collect is not None:
            collect(tree.path)
        tails = {g.name: _tail(g.log_stem) for g in m.guards if not g.ok}
        no_metric = "" if m.metric is not None or m.log_stem is None else _tail(m.log_stem)
        return Verified(commit, m, warnings, tails, no_metric, got, said)
    finally:
        for t in (tree, score_tree):
            t._discard()   # also unregisters it from the repository (git worktree prune)
        remove_tree(tmp)


def reseal(program: Program, tree: Worktree, commit: str, plant: Callable[[Path], None] | None = None) -> None:
    """Between two steps: the tree exactly `commit` again, its data linked (as a run's are), and
    a probe's plant made again on top (the candidate it stands for is that tree)."""
    bad = tree.reseal(commit, data_paths(program))
    link_data(program, tree.path)
    if bad:
        raise RunFailure(f"the measurement's tree could not be made {commit[:12]} again between two "
                         f"steps: {', '.join(bad[:5])}")
    if plant is not None:
        plant(tree.path)


class _Prefix:
    """The bytecode prefix of one measurement's steps, as a run's (Guardrails.after_step): each
    step starts from an empty one, seeded from `bytecode` with what the same step needed before
    (steps by their order), and what it compiled is learnt afterwards. Bytecode one step wrote is
    never the next one's; the cache compiles from the sources, so nothing a planted tree wrote
    is copied in."""

    def __init__(self, prefix: Path, bytecode: WarmCache | None) -> None:
        self.prefix, self.bytecode, self.step = prefix, bytecode, 0
        self.cache = None if bytecode is None else bytecode.seed_bytecode(prefix, "step 0")

    def next(self) -> None:
        self.close()
        remove_tree(self.prefix)
        self.prefix.mkdir()
        self.step += 1
        if self.bytecode is not None:
            self.cache = self.bytecode.seed_bytecode(self.prefix, f"step {self.step}")

    def close(self) -> None:
        if self.bytecode is not None:
            self.bytecode.learn_bytecode(self.cache, self.prefix)
        self.cache = None


def _tail(stem: Path) -> str:
    parts = [logfile.read_tail(stem.with_name(stem.name + ext), 2000).rstrip()
             for ext in (".out", ".err")]
    return "\n".join(p for p in parts if p)
