"""`autoloop init --template speed --trace COMMAND --target MODULE:NAME`: a sealed speed
benchmark recorded from the project's own workload (autoloop.trace), written as program.md and
bench/ (committed, so that a run measures it), then checked by `verify` and `doctor --probe`."""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
from pathlib import Path

from autoloop.base.numbers import seconds
from autoloop.base.walk import remove_tree
from autoloop.base.specs import SandboxSpec
from autoloop.errors import UsageError
from autoloop.git.gitrun import GitError, git
from autoloop.git.gitrun import run as git_run
from autoloop.isolation.sandbox import Bwrap, SandboxUnavailable
from autoloop.process.executables import all_words
from autoloop.program.globs import PathRules
from autoloop.program.reader import load_program
from autoloop.trace import build

BENCH = ("produce.py", "score.py", "trace.json", *build.BENCH_MODULES)
QUICK_S = 20e-6   # a derived call quicker than this at HEAD: deriving its input costs as much
NARROW = 0.8      # a draw with fewer new calls than this share: the workload varies little
SKEWED = 0.8     # one value of an argument in at least this share of the replayed calls: said
TEST_FORBIDDEN = ("tests/**", "**/tests/**", "**/test_*.py", "**/*_test.py", "**/conftest.py", "bench/**")


def _home(path: Path) -> str:
    """`~/...` for a path under the home folder: program.md stays the same for another user."""
    home = Path.home()
    return "~/" + str(path.relative_to(home)) if path.is_relative_to(home) else str(path)


def _python(trace: build.Trace) -> str:
    """How program.md names the interpreter the workload ran: the repository's venv by its path,
    else the name PATH finds it by, else its absolute path."""
    if not os.path.isabs(trace.python):
        return trace.python
    for name in ("python", "python3"):
        found = shutil.which(name)
        if found and os.path.realpath(found) == os.path.realpath(trace.python):
            return name
    return trace.python


def _allowed(reports: list[build.TargetReport]) -> list[str]:
    """The targets' packages (a module at the top level: its file)."""
    out: list[str] = []
    for r in reports:
        parts = r.file.split("/")
        depth = len(r.name.split(":")[0].split("."))
        if parts[-1] == "__init__.py" or depth > 1:
            top = len(parts) - depth - (1 if parts[-1] == "__init__.py" else 0) + 1
            glob = "/".join(parts[:top]) + "/**"
        else:
            glob = r.file
        if glob not in out:
            out.append(glob)
    return out


def _produce(trace: build.Trace, live: list[build.TargetReport]) -> str:
    # literal imports and sys.path entries: `doctor --probe` follows them to the module to plant in
    paths = ["."] + [root for root in trace.roots if root]
    lines = ['"""Replays recorded and derived calls of the targets (written by `autoloop init --trace`;',
             'bench/ is the judge\'s: the generator may not change it). This process never imports the',
             "targets: a worker process does, and is handed one batch of calls at a time (bench/tracefeed.py).",
             '"""', "import sys", "", 'sys.path.insert(0, "bench")']
    lines += [f'sys.path.insert(0, "{root}")' for root in reversed(paths) if root != "."]
    lines += ["import tracefeed  # noqa: E402", "", "if False:   # what the worker imports (for readers and `doctor --probe`)"]
    for module in dict.fromkeys(r.name.split(":")[0] for r in live):
        lines.append(f"    import {module}  # noqa: F401")
    lines += ["", f"tracefeed.produce(paths={paths!r})", ""]
    return "\n".join(lines)


def _score(trace: build.Trace) -> str:
    lines = ['"""Checks the outcomes bench/produce.py wrote: every recorded call\'s (against the outcomes recorded',
             'at HEAD, given the private folder) and a sample of the derived ones, drawn after the run, against',
             'the start commit\'s code. Written by `autoloop init --trace`."""',
             "import sys", "", 'sys.path.insert(0, "bench")']
    lines += [f'sys.path.insert(0, "{root}")' for root in reversed(trace.roots) if root]
    lines += ['sys.path.insert(0, ".")', "", 'if sys.argv[1:] == ["--inputs"]:   # verifier.inputs: the calls, drawn',
              "    import tracefeed  # noqa: E402", "    tracefeed.write_inputs()", "else:",
              "    import tracereplay  # noqa: E402", "    tracereplay.score(sys.argv[1] if len(sys.argv) > 1 else None)", ""]
    return "\n".join(lines)


def _guard(command: str, python: str) -> str:
    words = command.split()
    if any("pytest" in w or w == "unittest" for w in words):
        return command
    return f"{python} -m pytest -q"


def _judge_files(root: Path, command: str) -> list[str]:
    """The checkout's files the tests' command names (`pytest mypkg/tests.py`) that no pattern of
    TEST_FORBIDDEN covers: the judge's even inside the targets' package (else `run` refuses a
    guard the generator could rewrite)."""
    rules = PathRules(["**"], list(TEST_FORBIDDEN))
    out = []
    for w in all_words(command):
        path = root / w
        if w.startswith("-") or not path.is_file():
            continue
        try:
            rel = path.resolve().relative_to(root.resolve()).as_posix()
        except ValueError:
            continue
        if rules.allows(rel) and rel not in out:
            out.append(rel)
    return out


def program_text(trace: build.Trace, command: str, private: bool, root: Path | None = None) -> str:
    live = build.usable(trace)
    python = _python(trace)
    store = _home(trace.store)
    names = ", ".join(r.name for r in live)
    guard = _guard(command, python)
    named = _judge_files(root, guard) if root is not None else []
    forbidden = "\n".join(f'  - "{g}"' for g in [*TEST_FORBIDDEN, *named])
    allowed = "\n".join(f'  - "{g}"' for g in _allowed(live))
    score = f"{python} bench/score.py {store}/private" if private else f"{python} bench/score.py"
    sealed = (f"private:                        # the outcomes recorded at HEAD: only the score reads them\n"
              f"  - {store}/private\n") if private else (
              "# private: not listed: no sandbox can be made here, and autoloop refuses `private` without one.\n"
              "# The score recomputes every outcome with the start commit's code instead; install bubblewrap,\n"
              f"# then add `private: [{store}/private]` and the folder to the score's command line.\n")
    return f"""---
# program.md — written by `autoloop init --template speed --trace`. A sealed speed benchmark
# recorded from your own workload, which ran once at HEAD:
#   {command}
# with a recorder on {names}.
# Each measurement replays calls drawn from $AUTOLOOP_SEED: a few recorded ones and many new
# ones derived from them, handed a batch at a time to a worker process that runs your code; the
# score then checks a sample of the outcomes, drawn after the run, against the start commit's code.

goal: Make {names} faster without changing any result

allowed:                        # the targets' code
{allowed}

forbidden:                      # the benchmark and the tests are the judge's, not the generator's
{forbidden}

verifier:                       # sealed: the number is autoloop's, not the candidate's (`doctor --probe`)
  command: {python} bench/produce.py   # replays this measurement's calls through the candidate's code
  score: {score}
  inputs: {python} bench/score.py --inputs   # draws the calls before the command, untimed: its stdin
  measure: cpu                  # CPU seconds of every process of the command, counted by the kernel
                                # (a second core is no gain; `wall` if parallel speed-ups are welcome)
  direction: minimize
  timeout: 600

{sealed}data:                           # the recorded arguments, linked into each measured tree
  - {{path: {store}/inputs, as: bench/.trace}}

guards:                         # a faster wrong answer is never kept
  - name: tests
    command: {guard}
    timeout: 900

accept:                         # timings are noisy: incumbent and candidate are timed side by side
  rule: paired
  min_effect: 2%                # the smallest speed-up worth keeping

generator:
  kind: claude
  timeout: 1800

stop:
  max_cycles: 30
  patience: 10
---
# Instructions to the generator

Make {names} faster. autoloop times `bench/produce.py`, which calls them with arguments that
change with every measurement (derived from calls recorded from `{command}`), and
`bench/score.py` compares results, and exceptions, with the start commit's code (a sample drawn
after each run: any wrong result can be the one checked). The CPU time of every process counts.
The tests must still pass.

- One optimization per cycle, and say why it should be faster (a better algorithm, fewer
  allocations, avoiding repeated work).
- Keep every public signature and every result identical, types, ordering and exceptions included.
- No new dependencies.
- End your reply with one line: `Hypothesis: <what you changed and why it should be faster>`.
"""


def _sandbox_note() -> str | None:
    try:
        Bwrap(SandboxSpec()).probe()
    except SandboxUnavailable as exc:
        return str(exc)
    return None


def _commit(root: Path) -> str:
    paths = [f"bench/{name}" for name in BENCH]
    git(root, "add", "--", *paths)
    res = git_run(root, "commit", "-q", "-m", "bench: a replay benchmark recorded by autoloop init --trace",
                  "--", *paths)
    if res.returncode != 0:   # no identity configured, say: the files are there to commit by hand
        return ""
    return git(root, "rev-parse", "--short=12", "HEAD").strip()


def main(args: argparse.Namespace) -> int:
    from autoloop.commands.probe import probe_outcome
    from autoloop.commands.verify import print_verify

    if args.template != "speed":
        raise UsageError(f"--trace writes a speed benchmark: use --template speed (not {args.template!r})")
    if not args.target:
        raise UsageError("--trace needs at least one --target MODULE:NAME (the functions to make faster)")
    targets = list(dict.fromkeys(build.parse_target(t) for t in args.target))
    path = Path(args.path)
    target = (path / "program.md" if path.is_dir() else path).resolve()
    if target.exists():
        raise UsageError(f"{target} already exists; not overwriting it (move it away or give another path)")
    try:
        root = Path(git(target.parent, "rev-parse", "--show-toplevel").strip()).resolve()
    except (GitError, OSError):
        raise UsageError(f"{target.parent} is not inside a git repository; --trace records at HEAD: "
                         "git init && git add -A && git commit -m start") from None
    bench = root / "bench"
    taken = [f"bench/{n}" for n in BENCH if (bench / n).exists()]
    if taken:
        raise UsageError(f"{', '.join(taken)} already exist{'s' if len(taken) == 1 else ''}; not overwriting "
                         "(move them away, or write the benchmark by hand: docs/trust.md)")
    print(f"recording: `{args.trace}` at HEAD in a throwaway worktree, calls of {', '.join(targets)} …", flush=True)
    trace = build.record(root, args.trace, targets, budget_s=args.replay_seconds)
    print(f"recorded in {seconds(trace.command_s)} with {trace.python}; stored in {trace.store}")
    if trace.command_exit != 0:
        print(f"warning: `{args.trace}` exited {trace.command_exit}: what it called is recorded all the same, but "
              "the tests are the guard, and a guard failing at HEAD stops a run before it starts")
    for r in trace.targets:
        print(_report_line(r))
        for reason, (count, example) in sorted(r.refused.items(), key=lambda kv: -kv[1][0]):
            print(f"    not used: {count} × {reason}" + (f" (e.g. {example})" if example else ""))
    live = build.usable(trace)
    if not live:
        remove_tree(trace.store, quiet=True)   # nothing written: no store for a benchmark that is not there
        raise UsageError(_too_few(trace))
    sandbox_missing = _sandbox_note()
    bench.mkdir(exist_ok=True)
    (bench / "produce.py").write_text(_produce(trace, live), encoding="utf-8")
    (bench / "score.py").write_text(_score(trace), encoding="utf-8")
    (bench / "trace.json").write_text(build.plan_json(trace), encoding="utf-8")
    build.copy_modules(bench)
    target.write_text(program_text(trace, args.trace, private=sandbox_missing is None, root=root), encoding="utf-8")
    done = _commit(root)
    print(f"wrote {target} and bench/ ({', '.join(BENCH)})" +
          (f"; committed bench/ as {done} (a run measures committed files)" if done else
           "; commit bench/ yourself: a run measures committed files"))
    if sandbox_missing:
        print(f"note: no sandbox here ({sandbox_missing.split(';')[0]}): program.md lists no `private` folder, "
              f"so the score recomputes every outcome; the candidate's code could read {trace.store}")
    if args.no_check:
        return 0
    shown = shlex.quote(str(target))
    print(f"\n$ autoloop verify {shown}", flush=True)
    code = print_verify(load_program(target))
    if code != 0:
        print("init: the benchmark does not measure yet (above); fix it, then `autoloop verify`")
        return code
    if args.no_probe:
        return 0
    print(f"\n$ autoloop doctor --probe {shown}", flush=True)
    probed = probe_outcome(load_program(target))
    print(f"\nNext: autoloop run {shown} --tag first")
    if probed.unclear:   # the last line: not a quiet pass when the probe could not judge some classes
        print(f"init: {'no hack fooled the verifier, but' if probed.code == 0 else 'a hack fooled the verifier (above);'} "
              f"{probed.unjudged} (their lines above say why: the plant broke the project, or its gain sat in "
              "the noise)")
    return probed.code


def _report_line(r: build.TargetReport) -> str:
    if r.error:
        return f"  {r.name}: not usable: {r.error}"
    head = f"  {r.name}: {r.seen} calls, {r.distinct} distinct, {r.usable} usable ({r.derivable} can be varied)"
    if r.usable < build.MIN_USABLE:
        return f"{head}; fewer than {build.MIN_USABLE}: not used"
    line = (f"{head}; a measurement replays {r.recorded} recorded + {r.derived} derived calls "
            f"({r.derived_seconds * 1e6:.1f} µs each at HEAD"
            + (f", {r.derived_raise:.0%} of them raise" if r.derived_raise >= 0.01 else "") + ")")
    if r.frozen:   # the check's slots: positions from 0, or keyword names
        line += ("; kept as recorded (changed, they mostly make the call fail): "
                 + ", ".join(_argument(s) for s in r.frozen))
    other = [s for s in r.kept if s not in r.frozen]
    if other and r.derived:
        line += "; also kept as recorded (no derived call varies them): " + ", ".join(_argument(s) for s in other)
    if r.skew and r.skew[1] >= SKEWED:
        slot, share, value = r.skew
        line += (f"\n    note: {share:.0%} of the replayed calls use one value of {_argument(slot)} ({value}): the "
                 "workload is skewed as the command's calls were (a test calling the target one way weighs that "
                 "way in every measurement); a command calling it with more kinds of input gives a fuller benchmark")
    if r.derived and r.new_share < NARROW:
        line += (f"\n    note: {1 - r.new_share:.0%} of the calls derived from the recorded ones repeat a call "
                 "already drawn and are left out (a call never repeats within a measurement, so a memo inside "
                 "the target saves nothing): the workload varies little; a test command calling the target "
                 "with more kinds of input gives a fuller benchmark")
    if r.order_dependent:
        line += (f"\n    note: {r.order_dependent} of {r.derived} derived calls answered otherwise after other calls "
                 "(the target keeps state between calls): the score cannot check a sample, so it runs every call "
                 "again, in order, with the start commit's code (a run costs about twice the command)")
    if 0 < r.derived_seconds < QUICK_S:
        line += (f"\n    note: {r.derived_seconds * 1e6:.1f} µs a call is about what making a new input costs: "
                 "the harness will be much of what is timed (verify says how much); a caller doing more per "
                 "call measures better")
    return line


def _argument(slot: object) -> str:
    """A slot of the check's (a position from 0, or a keyword name) as a reader counts it."""
    return f"argument {slot + 1}" if isinstance(slot, int) else f"`{slot}`"


def _too_few(trace: build.Trace) -> str:
    worst = {reason for r in trace.targets for reason in r.refused}
    hint = ("target a function whose arguments are plain data (strings, numbers, lists, dicts) and that "
            "returns a value without writing files or changing its arguments — often the caller of the "
            "one named, or the pure function inside a method")
    if any("never called" in r.error for r in trace.targets):
        hint += "; check that the command calls the target (MODULE:NAME as Python imports it)"
        if trace.command_exit:
            # a test run that fails early (a fixture, a conftest, a missing option) calls nothing:
            # that, not the target, is what to fix first
            hint = (f"the command exited {trace.command_exit} at HEAD: run it by hand and make it pass "
                    f"first (a test that fails before calling the target records nothing); else {hint}")
    return (f"--trace: too few usable calls (at least {build.MIN_USABLE} per target are needed"
            f"{': ' + '; '.join(sorted(worst)) if worst else ''}); {hint}")
