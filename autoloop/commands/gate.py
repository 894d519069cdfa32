"""`autoloop gate --base REF [--head REF]`: does a pull request make the benchmark worse?

Both commits are measured in this job, paired and interleaved (ABBA, so drift falls on both
sides alike), each run a fresh verifier process in a pristine worktree of its commit. It fails
only when the head is *significantly* worse (one-sided Wilcoxon signed-rank, p ≤ α) *and* the
Hodges–Lehmann estimate is beyond the tolerance; `--require-improvement` passes only a head
significantly better. Exit: 0 pass, 1 fail, 2 bad usage, 3 base unmeasurable, 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from autoloop.base.numbers import num as fmt
from autoloop.base.numbers import plain_pct, share, signed_pct
from autoloop.base.walk import remove_tree, temp_dir
from autoloop.commands.ci import step_summary
from autoloop.decide import stats
from autoloop.decide.ratchet import orientation
from autoloop.decide.wording import plural
from autoloop.engine.score import Scorer
from autoloop.engine.verify import (
    SEED_VAR,
    measure,
    new_seed,
    sandbox_outside_run,
    steps,
)
from autoloop.errors import AutoloopError, UsageError
from autoloop.git.gitrun import git
from autoloop.git.workspace import Worktree
from autoloop.isolation.hardening import link_data
from autoloop.isolation.measured_files import protected_paths
from autoloop.isolation.sandbox import Confinement, tree_box
from autoloop.process import logfile, proc
from autoloop.process.envs import git_scrubbed
from autoloop.program.reader import Program, check_data, load_program

EXIT_PASS, EXIT_FAIL, EXIT_USAGE, EXIT_BASE_BROKEN = 0, 1, 2, 3


class BaseBroken(AutoloopError):
    """The base commit cannot be measured: the gate cannot judge the head."""

    exit_code = EXIT_BASE_BROKEN


@dataclass(frozen=True)
class GateStats:
    n: int
    scale: str                        # "log" | "diff"
    change_pct: float | None          # Hodges–Lehmann estimate of head vs base, in % of base
    ci_pct: tuple[float, float] | None
    ci_level: float
    p_better: float                   # one-sided: head better than base
    p_worse: float                    # one-sided: head worse than base


def compare(base: Sequence[float], head: Sequence[float], direction: str, level: float = 0.95) -> GateStats:
    """Head against base with the same statistics the ratchet's paired rule uses."""
    better = stats.compare(base, head, direction, level=level)
    # head worse is the same test on the gains turned around
    p_worse = stats.signed_rank_p([-g for g in stats.gains(base, head, direction, better.scale)])
    return GateStats(n=better.n, scale=better.scale, change_pct=better.change_pct,
                  ci_pct=better.change_ci_pct, ci_level=better.ci.level,
                  p_better=better.p, p_worse=p_worse)


@dataclass
class GateResult:
    program: Program
    base_ref: str
    head_ref: str
    base: str
    head: str
    pairs: int
    tolerance_pct: float
    alpha: float
    require_improvement: bool
    base_values: list[float] = field(default_factory=list)
    head_values: list[float] = field(default_factory=list)
    order: list[tuple[str, str]] = field(default_factory=list)
    stats: GateStats | None = None
    passed: bool = False
    verdict: str = ""
    head_error: str = ""
    judge_changed: list[str] = field(default_factory=list)
    duration_s: float = 0.0

    @property
    def exit_code(self) -> int:
        return EXIT_PASS if self.passed else EXIT_FAIL

    def as_json(self) -> dict[str, Any]:
        s = self.stats
        return {
            "passed": self.passed, "exit_code": self.exit_code, "verdict": self.verdict,
            "metric": self.program.verifier.label, "direction": self.program.verifier.direction,
            "base": {"ref": self.base_ref, "commit": self.base, "values": self.base_values,
                     "median": _median(self.base_values)},
            "head": {"ref": self.head_ref, "commit": self.head, "values": self.head_values,
                     "median": _median(self.head_values), "error": self.head_error or None},
            "pairs": self.pairs, "order": [list(o) for o in self.order],
            "tolerance_pct": self.tolerance_pct, "alpha": self.alpha,
            "require_improvement": self.require_improvement,
            "change_pct": None if s is None else s.change_pct,
            "ci_pct": None if s is None or s.ci_pct is None else list(s.ci_pct),
            **{k: None if s is None else getattr(s, k) for k in ("ci_level", "p_worse", "p_better")},
            "judge_changed": self.judge_changed, "duration_s": round(self.duration_s, 3),
        }


def check_pairs(pairs: int, alpha: float, require_improvement: bool = False) -> None:
    """Refuse a gate that can never fail (or, with --require-improvement, never pass): the smallest
    p-value of n pairs is 1/2ⁿ, as accept.pairs is refused in program.md."""
    if 0.5 ** pairs > alpha:
        need = math.ceil(math.log2(1 / alpha))
        raise UsageError(f"--pairs {pairs} can never reach --alpha {alpha:g} (the smallest p-value of "
                         f"{pairs} pairs is {0.5 ** pairs:g}), so this gate could never "
                         f"{'pass' if require_improvement else 'fail'}; use "
                         f"--pairs {need + 1} or more (with {need}, only pairs that all agree can be significant)")


def resolve(repo: Path, ref: str) -> str:
    out = git(repo, "rev-parse", "--verify", "-q", ref + "^{commit}", check=False).strip()
    if not out:
        raise UsageError(f"unknown revision {ref!r} in {repo} (in CI, fetch it: actions/checkout "
                         "with fetch-depth: 0, or `git fetch origin <branch>`)")
    return out


def run_gate(program: Program, *, base_ref: str, head_ref: str = "HEAD", pairs: int = 6,
             tolerance_pct: float = 2.0, alpha: float = 0.05, require_improvement: bool = False,
             guards: bool = False, log: Callable[[str], None] = lambda line: None) -> GateResult:
    repo = program.repo_root
    base, head = resolve(repo, base_ref), resolve(repo, head_ref)
    res = GateResult(program, base_ref, head_ref, base, head, pairs, tolerance_pct, alpha, require_improvement)
    changed = git(repo, "diff", "--no-ext-diff", "--name-only", "-z", base, head).split("\0")
    judge = set(protected_paths(program)) - {p for p in program.protected if p != program.rel_path}
    res.judge_changed = sorted(p for p in changed if p and p in judge)
    common = Path(repo / git(repo, "rev-parse", "--git-common-dir").strip()).resolve()
    for commit in (base, head):
        check_data(program, commit)                  # as `run` and `verify` do, before anything
    bwrap, warning = sandbox_outside_run(program)   # refuses as `run` does, before any temp folder
    if warning:
        log(f"WARNING: {warning}")
    commits = {"base": base, "head": head}
    marker = proc.new_marker()
    env = {**git_scrubbed(os.environ), "AUTOLOOP_GATE": "1"}
    t0 = time.monotonic()
    tmp = temp_dir("gate")
    trees = {side: Worktree(repo, common, tmp / side) for side in commits}
    # both sides scored by the base's score, in a tree neither side's command can write
    scorer = None if program.verifier.score is None else \
        Scorer(program, Worktree(repo, common, tmp / "score"), base, bwrap, tmp / "score-scratch")

    def box(side: str) -> Confinement | None:
        if bwrap is None:
            return None
        scratch = tmp / "scratch" / side
        tree = trees[side.removeprefix("guards-")].path
        return tree_box(bwrap, program, tree, common, scratch, env.get("PATH", ""))

    def checkout(side: str) -> Path:
        path = trees[side].checkout(commits[side])  # pristine: reset and cleaned every run
        link_data(program, path)                     # the data, where a run's measurement finds it
        return path

    try:
        if guards:
            for side in ("base", "head"):
                # in a scratch of their own: nothing they leave there reaches the measurements
                problem = _run_guards(program, checkout(side), env, tmp / f"guards-{side}", marker,
                                      box(f"guards-{side}"))
                if problem:
                    if side == "base":
                        raise BaseBroken(f"the base ({base[:12]}) fails a guard: {problem}")
                    res.head_error = f"the head fails guard {problem}"
                    res.verdict = f"FAIL: {res.head_error}"
                    return res
            if program.guards:
                log(f"guards pass on the base and the head ({', '.join(g.name for g in program.guards)})")
        for i in range(pairs):
            order = ("base", "head") if i % 2 == 0 else ("head", "base")
            res.order.append(order)
            got: dict[str, float] = {}
            seed = new_seed()   # one $AUTOLOOP_SEED for both sides of the pair
            for side in order:
                path = checkout(side)
                log_dir = tmp / "logs" / f"pair-{i + 1:02d}-{side}"
                log_dir.mkdir(parents=True)
                m = measure(program, cwd=path, env=env, log_dir=log_dir, marker=marker, with_guards=False,
                            box=box(side), seed=seed, scorer=scorer,
                            output=tmp / "scratch" / side / "output")
                if m.metric is None:
                    tail = logfile.read_tail(log_dir / "verifier.err", 600).strip() or \
                        logfile.read_tail(log_dir / "verifier.out", 600).strip()
                    if side == "base":
                        raise BaseBroken(f"the base ({base[:12]}) cannot be measured: {m.error}\n{tail}")
                    res.head_error = f"the verifier fails on the head: {m.error}"
                    res.verdict = f"FAIL: {res.head_error}"
                    log(f"pair {i + 1}/{pairs}: head: {m.error}")
                    return res
                got[side] = m.metric
                (res.base_values if side == "base" else res.head_values).append(m.metric)
            log(f"pair {i + 1}/{pairs} ({' then '.join(order)}): base {fmt(got['base'])}, head {fmt(got['head'])}")
        # the interval that agrees with the one-sided tests at alpha: it leaves out 0 exactly when
        # one of them is significant (1 - 2 alpha, 90% at the default 0.05)
        res.stats = compare(res.base_values, res.head_values, program.verifier.direction, level=1 - 2 * alpha)
        _judge(res)
        return res
    finally:
        res.duration_s = time.monotonic() - t0
        remove_tree(tmp, quiet=True)
        git(repo, "worktree", "prune", check=False)   # their trees gone: drops their admin folders


def _run_guards(program: Program, cwd: Path, env: dict[str, str], log_dir: Path, marker: str,
                box: Confinement | None) -> str:
    """The first failing guard and how it failed, or ""."""
    todo = [s for s in steps(program) if s.guard]
    results = proc.run_steps(todo, cwd=cwd, env={**env, SEED_VAR: str(new_seed())}, log_dir=log_dir,
                             marker=marker, wrap=box)
    return next((f"{s.name}: {r.describe()}" for s, r in zip(todo, results) if not r.ok), "")


def _judge(res: GateResult) -> None:
    s = res.stats
    assert s is not None
    change = signed_pct(s.change_pct, "n/a")
    d = res.program.verifier.direction
    # the change oriented so that > 0 means worse
    worse_pct = None if s.change_pct is None else -orientation(d) * s.change_pct
    if res.require_improvement:
        res.passed = s.p_better <= res.alpha and worse_pct is not None and worse_pct < 0
        res.verdict = (f"PASS: the head is better ({change}, p = {s.p_better:.3g})" if res.passed else
                       f"FAIL: the head is not shown to be better ({change}, p = {s.p_better:.3g} > α = {res.alpha:g})"
                       if s.p_better > res.alpha else f"FAIL: the head is not better ({change})")
        return
    significant = s.p_worse <= res.alpha
    beyond = worse_pct is not None and worse_pct > res.tolerance_pct
    res.passed = not (significant and beyond)
    if res.passed:
        if significant and worse_pct is not None and worse_pct > 0:
            why = f"worse by {plain_pct(s.change_pct)}, within the {res.tolerance_pct:g}% tolerance"
        elif s.p_better <= res.alpha:
            why = f"better ({change}, p = {s.p_better:.3g})"
        elif 0.5 ** s.n > res.alpha:
            why = (f"inconclusive ({change}): {plural(s.n, 'pair')} can never reach α = {res.alpha:g}; "
                   f"use --pairs {math.ceil(math.log2(1 / res.alpha)) + 1} or more")
        else:
            why = f"no significant difference ({change})"
        res.verdict = f"PASS: {why}"
    else:
        res.verdict = (f"FAIL: the head is worse by {plain_pct(s.change_pct)} (beyond the {res.tolerance_pct:g}% tolerance; "
                       f"p = {s.p_worse:.3g} ≤ α = {res.alpha:g})")


def markdown(res: GateResult) -> str:
    v = res.program.verifier
    s = res.stats
    icon = "✅" if res.passed else "❌"
    lines = [f"### {icon} autoloop gate: {res.verdict}", ""]
    bm, hm = _median(res.base_values), _median(res.head_values)
    lines += [f"| {v.label} ({v.direction}) | base `{res.base[:10]}` | head `{res.head[:10]}` |",
              "| --- | ---: | ---: |",
              f"| median | {fmt(bm) or '–'} | {fmt(hm) or '–'} |",
              f"| min … max | {_range(res.base_values)} | {_range(res.head_values)} |",
              f"| runs | {len(res.base_values)} | {len(res.head_values)} |", ""]
    if s is not None:
        ci = "–" if s.ci_pct is None else f"{signed_pct(s.ci_pct[0])} … {signed_pct(s.ci_pct[1])} ({share(s.ci_level)})"
        lines += ["| | |", "| --- | --- |",
                  f"| change, head vs base | {signed_pct(s.change_pct)} (Hodges–Lehmann) |",
                  f"| confidence interval | {ci} |",
                  f"| p (head worse) / p (head better) | {s.p_worse:.3g} / {s.p_better:.3g} |"]
    rule = ("pass only if the head is significantly better" if res.require_improvement else
            f"fail if the head is significantly worse by more than {res.tolerance_pct:g}%")
    lines.append(f"| rule | {rule} (one-sided Wilcoxon signed-rank, α = {res.alpha:g}, "
                 f"{res.pairs} interleaved ABBA pairs, each run a fresh process in a clean tree) |")
    if res.head_error:
        lines.append(f"| head | {res.head_error} |")
    if res.judge_changed:
        lines += ["", f"⚠️ This change touches what the verifier runs ({', '.join(f'`{p}`' for p in res.judge_changed)}): "
                  "each side was measured with its own version."]
    if res.order:
        lines += ["", "<details><summary>every run</summary>", "", "| pair | order | base | head |",
                  "| ---: | --- | ---: | ---: |"]
        for i, order in enumerate(res.order):
            b = res.base_values[i] if i < len(res.base_values) else None
            h = res.head_values[i] if i < len(res.head_values) else None
            lines.append(f"| {i + 1} | {' → '.join(order)} | {fmt(b) or '–'} | {fmt(h) or '–'} |")
        lines += ["", "</details>"]
    lines += ["", f"<sub>autoloop gate · {res.duration_s:.0f}s · `{res.base_ref}` vs `{res.head_ref}`</sub>"]
    return "\n".join(lines) + "\n"


def _median(xs: Sequence[float]) -> float | None:
    return statistics.median(xs) if xs else None


def _range(xs: Sequence[float]) -> str:
    return f"{fmt(min(xs))} … {fmt(max(xs))}" if xs else "–"


def to_json(res: GateResult) -> str:
    return json.dumps(res.as_json(), indent=2, default=str)


def parse_tolerance(text: str) -> float:
    """`2%`, `2` (percent) or `0.5%` → percent as a float ≥ 0."""
    t = text.strip().rstrip("%").strip()
    try:
        x = float(t)
    except ValueError:
        raise ValueError(f"--tolerance needs a percentage such as 2%, got {text!r}") from None
    if not (x >= 0) or math.isinf(x):
        raise ValueError(f"--tolerance must be 0% or more, got {text!r}")
    return x


def main(args: argparse.Namespace) -> int:
    from autoloop.commands.gate import (
        check_pairs,
        markdown,
        parse_tolerance,
        resolve,
        run_gate,
        to_json,
    )

    try:
        tolerance = parse_tolerance(args.tolerance)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    check_pairs(args.pairs, args.alpha, args.require_improvement)
    program = load_program(args.program)
    for ref in (args.base, args.head):
        resolve(program.repo_root, ref)      # an unknown revision is refused before any header

    def log(line: str) -> None:
        print(f"gate: {line}", file=sys.stderr, flush=True)

    log(f"{program.verifier.label} of {args.head} vs {args.base}, {args.pairs} interleaved pairs")
    res = run_gate(program, base_ref=args.base, head_ref=args.head, pairs=args.pairs,
                   tolerance_pct=tolerance, alpha=args.alpha, require_improvement=args.require_improvement,
                   guards=args.guards, log=log)
    table = markdown(res)
    log(res.verdict)
    sys.stdout.write(to_json(res) + "\n" if args.json else table)
    if args.markdown:
        Path(args.markdown).write_text(table, encoding="utf-8")
    step_summary(table)
    return res.exit_code
