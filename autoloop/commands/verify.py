"""`autoloop verify`: print what a run's baseline would measure — HEAD, in a private verification
tree outside the repository (autoloop.engine.verify_head), after the same program checks as
`run` — and what a cycle will cost at that. Nothing of the checkout changes."""

from __future__ import annotations

import argparse
import re
import sys

from autoloop.commands.run import newcomer_checks
from autoloop.decide.baseline import CALIBRATION_PAIRS
from autoloop.engine.verify import Measurement
from autoloop.engine.verify_head import check, verify_head
from autoloop.program.reader import Program, load_program

HARNESS_GOAL = 0.10   # a replay benchmark's own share of the wall time it is measured by


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
