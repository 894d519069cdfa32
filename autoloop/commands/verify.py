"""`autoloop verify`: measure what a run's baseline would measure — HEAD, in a private
verification tree outside the repository, in the same scrubbed environment — after the same
program checks as `run`. Nothing of the checkout changes, and its temporary folders go."""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from autoloop.base.walk import remove_tree, temp_dir
from autoloop.commands.run import newcomer_checks
from autoloop.decide.baseline import CALIBRATION_PAIRS
from autoloop.engine import reads
from autoloop.engine.score import Scorer
from autoloop.engine.verify import Measurement, measure, sandbox_outside_run
from autoloop.git.workspace import Workspace, Worktree
from autoloop.errors import RunFailure
from autoloop.isolation.hardening import data_paths, link_data
from autoloop.isolation.measured_files import protected_paths, uncommitted_warnings
from autoloop.isolation.sandbox import tree_box
from autoloop.process import envs, proc
from autoloop.program.reader import Program, check_data, load_program

HARNESS_GOAL = 0.10   # a replay benchmark's own share of the wall time it is measured by


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
                collect: Callable[[Path], None] | None = None, record_reads: bool = True) -> Verified:
    """Guards and verifier on `commit` in a private tree that is removed afterwards. `plant(tree)`
    changes the tree before it is measured and `collect(tree)` reads it after (`doctor --probe`:
    a reward hack tried in a throwaway tree, never on a branch). What the measurement read is
    recorded (a second, traced run) for an unplanted tree unless `record_reads` is false."""
    warnings = uncommitted_warnings(program, ws, commit)
    bwrap, warning = sandbox_outside_run(program)
    warnings += [warning] if warning else []
    tmp = temp_dir("verify")
    tree = Worktree(program.repo_root, ws.common_dir, tmp / "tree")
    # the score runs in a tree of its own: the one measured is the command's to write
    score_tree = Worktree(program.repo_root, ws.common_dir, tmp / "score")
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
            m = measure(program, cwd=tree.path, env=env, log_dir=log_dir, marker=proc.new_marker(), box=box,
                        scorer=scorer, reseal=lambda: reseal(program, tree, commit, plant))
            got, said = None, []
            # a probe's planted tree is not the user's
            if m.guards_ok and m.metric is not None and plant is None and record_reads:
                got = reads.record(program, cwd=tree.path, env=env, scratch=Path(env["TMPDIR"]),
                                   log_dir=log_dir, marker=proc.new_marker(),
                                   wrap=None if box is None else box.argv,
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


def _tail(stem: Path) -> str:
    parts = [proc.read_tail(stem.with_name(stem.name + ext), 2000).rstrip()
             for ext in (".out", ".err")]
    return "\n".join(p for p in parts if p)


def cost_line(program: Program, run_s: float) -> str:
    """What a cycle will cost at this program's rule, alpha and min_effect, from this run's time."""
    acc, v = program.accept, program.verifier
    if acc.rule != "paired":
        runs = max(v.repeats, 1) + acc.warmup
        return (f"accept.rule strict: {runs} verifier {'run' if runs == 1 else 'runs'} a cycle "
                f"(≈ {runs * run_s:.3g} s at {run_s:.3g} s a run), keep or discard")
    from autoloop.decide import cost
    c = cost.expected(acc.alpha, acc.confirm, acc.pairs)
    return (cost.cost_text(c, run_s, min_effect=str(acc.min_effect)) + " The run's calibration "
            f"({2 * min(acc.pairs, CALIBRATION_PAIRS)} runs) measures the noise and says these figures "
            "again at it: a min_effect above 1.7 run noises costs more runs")


def main(args: argparse.Namespace) -> int:
    return print_verify(load_program(args.program))


def harness_share(m: Measurement) -> tuple[float, float, float] | None:
    """(the seconds the code under test took inside the targets and importing their modules, by
    the score's `target_seconds:` and `import_seconds:` lines, and the share of the wall time that
    went elsewhere: interpreter start, reading and deriving the inputs, writing the results) — or
    None. The command reports its own seconds, so the share is a guide, never judged on."""
    def said(key: str) -> float | None:
        found = re.findall(rf"^{key}: *([0-9.eE+-]+) *$", m.score_said, re.MULTILINE)
        return float(found[-1]) if found else None

    inside, imported = said("target_seconds"), said("import_seconds") or 0.0
    if inside is None or not m.metric:
        return None
    return inside, imported, max(0.0, 1 - (inside + imported) / m.metric)


def harness_parts(m: Measurement) -> dict[str, float]:
    """The score's own lines about the run (`setup_seconds:`, `call_seconds:`, `check_seconds:`…,
    a traced benchmark's): a guide, never judged on."""
    return {k: float(v) for k, v in re.findall(r"^([a-z_]+_seconds): *([0-9.eE+-]+) *$", m.score_said, re.MULTILINE)}


def print_verify(program: Program) -> int:
    """`autoloop verify`'s lines for `program`; its exit status."""
    from autoloop.base.numbers import num, seconds

    warnings = newcomer_checks(program)
    ws, head = check(program)
    for line in warnings:
        print(line, file=sys.stderr)
    print(f"verifying {program.repo_root} at HEAD {head[:12]}: what a run's baseline measures "
          "(committed files only, in a private tree; nothing is changed)", flush=True)
    res = verify_head(program, ws, head)
    for line in res.warnings + res.read_warnings:
        print(f"autoloop: WARNING: {line}", file=sys.stderr)
    m = res.measurement
    for g in m.guards:
        print(f"guard {g.name}: {'pass' if g.ok else 'FAIL'} ({g.detail}, {seconds(g.duration_s)})")
        if not g.ok and res.guard_tails.get(g.name):
            print(res.guard_tails[g.name])
    if not m.guards_ok:
        return 1
    if m.metric is None:
        print(f"verifier: no metric: {m.error}")
        if res.verifier_tail:
            print(res.verifier_tail)
        return 1
    v = program.verifier
    if v.score is not None and v.measure != "output":   # with output the score's number is the metric
        said = [line.strip() for line in m.score_said.splitlines()
                if line.strip() and not re.match(r"[a-z_]+_seconds:", line)]
        print(f"score: pass ({said[-1] if said else f'`{v.score}` accepted every result'})")
    print(f"{v.label}: {num(m.metric)}  ({v.direction}, {seconds(m.verifier_s)})")
    share = harness_share(m) if v.measure in ("wall", "cpu") else None
    if share is not None:
        inside, imported, rest = share
        goal = "" if rest <= HARNESS_GOAL else (
            f" (goal <= {HARNESS_GOAL:.0%}: the code under test is too quick per call for its inputs to be "
            "made fresh each time; target a function that does more per call)")
        heavy = "" if imported <= inside else (
            "; importing takes longer than the calls, so a change to the import weighs as much as one to "
            "the calls: `init --trace … --replay-seconds` longer weighs the calls more")
        what = "wall time" if v.measure == "wall" else "CPU time"
        parts = harness_parts(m)
        print(f"harness: {rest:.0%} of the {what} is not the code under test (the targets' calls took "
              f"{seconds(inside)} and importing their modules {seconds(imported)}, of {seconds(m.metric)}"
              + (f"; drawing the inputs {seconds(parts['setup_seconds'])}, handing the calls over "
                 f"{seconds(max(0.0, parts['call_seconds'] - inside))}" if parts else "")
              + f"){goal}{heavy}")
    if m.score_s:
        command_s = max(0.0, m.verifier_s - m.score_s)
        checking = harness_parts(m).get("check_seconds")
        print(f"run: {seconds(m.verifier_s)} = the timed command {seconds(command_s)} + the score "
              f"{seconds(m.score_s)}" + (f" ({seconds(checking)} of it checking outcomes)" if checking else "")
              + (f": {m.verifier_s / command_s:.2f}× the command's own seconds" if command_s else ""))
    print(f"cost: {cost_line(program, m.verifier_s)}")
    if res.files_read is not None:
        print(f"reads: {res.files_read.summary()}")
    return 0
