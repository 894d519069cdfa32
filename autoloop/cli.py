"""Command line. The only place that prints or picks exit codes (with cli_log, its `log` and
`report`): 0 stopped on a stop condition / success, 1 could not go on, 2 bad usage or input,
4 no Ray node can measure any more (stopped as an interruption is), 130 interrupted."""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import signal
import sys
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from autoloop import __version__
from autoloop.errors import AutoloopError, ClusterLost, ConfigError, Interrupted, UsageError
from autoloop.walk import calm_gc

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE if hasattr(signal, "SIGPIPE") else 141
MAX_PAIRS = 1000
DOCTOR_NAME_WIDTH = 14    # the lines stream out as each check ends: one width that fits `guard <name>`


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        print(f"autoloop: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def _number(flag: str, kind: type[int] | type[float], ok: Callable[[Any], bool], rule: str
            ) -> Callable[[str], Any]:
    """An argparse type: `kind(text)` within `rule`, else `FLAG must be RULE, got TEXT`."""
    def parse(text: str) -> Any:
        try:
            x = kind(text)
        except ValueError:
            need = "a whole number" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"{flag} needs {need}, got {text!r}") from None
        if not ok(x):
            raise argparse.ArgumentTypeError(f"{flag} must be {rule}, got {x if kind is int else text}")
        return x
    return parse


def _workers(text: str) -> int:
    from autoloop.program import MAX_WORKERS   # only when given: `init` and `--help` stay quick

    return _number("--workers", int, lambda n: 1 <= n <= MAX_WORKERS, f"between 1 and {MAX_WORKERS}")(text)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="autoloop", description="Ratchet loops on a git repository.")
    p.add_argument("--version", action="version", version=f"autoloop {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    def command(name: str, text: str, tag: str | None = "which run (default: the most recent)"
                ) -> argparse.ArgumentParser:
        c = sub.add_parser(name, help=text)
        c.add_argument("program", nargs="?", default="program.md", help="program file (default ./program.md)")
        if tag:
            c.add_argument("--tag", help=tag)
        return c

    r = command("run", "run the ratchet loop on branch autoloop/TAG", None)
    r.add_argument("--tag", required=True, help="run name; commits go on branch autoloop/TAG")
    r.add_argument("--cycles", type=_number("--cycles", int, lambda n: n >= 0, "0 or more"),
                   help="cycles in this invocation (overrides stop.max_cycles)")
    r.add_argument("--approve", choices=("after", "before", "both"),
                   help="a person decides each cycle at the terminal: after verification (default), "
                        "before it, or both")
    r.add_argument("--ci", action="store_true", default=None,
                   help="CI mode (default when CI=true): plain lines, journal committed on the run branch, "
                        "$GITHUB_STEP_SUMMARY")
    r.add_argument("--no-ci", dest="ci", action="store_false", help="not CI mode even when CI=true")
    r.add_argument("--max-minutes", type=_number("--max-minutes", float, lambda x: 0 < x < math.inf,
                                                  "more than 0"), help="wall-clock budget for this invocation")
    r.add_argument("--json", action="store_true",
                   help="print one JSON object describing the outcome on stdout (progress goes to stderr)")
    r.add_argument("--workers", type=_workers,
                   help="generators proposing at once from the same incumbent, each in its own worktree "
                        "(overrides parallel.workers; default 1)")
    command("verify", "measure HEAD as a run's baseline would (guards + metric); changes nothing", None)
    d = command("doctor", "check that a run could start: git, generator, sandbox, data, verifier", None)
    d.add_argument("--tag", default="doctor", help="the run tag to check against (default: doctor)")
    d.add_argument("--probe", action="store_true",
                   help="try the reward hacks that fit the program against its own verifier, in a throwaway "
                        "tree; exit 1 if any fooled it")
    command("log", "the cycles of a run and its summary").add_argument(
        "--wide", action="store_true",
        help="print every hypothesis and lesson whole (default: cut with … to the terminal width)")

    g = command("gate", "pull-request gate: measure base and head here, paired; exit 1 if head is worse", None)
    g.add_argument("--base", required=True, help="the commit to compare against (e.g. origin/main)")
    g.add_argument("--head", default="HEAD", help="the commit under test (default HEAD)")
    g.add_argument("--pairs", type=_number("--pairs", int, lambda n: 1 <= n <= MAX_PAIRS,
                                           f"between 1 and {MAX_PAIRS}"),
                   default=6, help="interleaved base/head pairs (default 6)")
    g.add_argument("--tolerance", default="2%", help="allowed worsening, in percent (default 2%%)")
    g.add_argument("--alpha", type=_number("--alpha", float, lambda x: 0 < x < 1, "between 0 and 1"),
                   default=0.05, help="significance level (default 0.05)")
    g.add_argument("--require-improvement", action="store_true",
                   help="pass only when the head is significantly better")
    g.add_argument("--guards", action="store_true", help="also run the guards once on each side")
    g.add_argument("--json", action="store_true", help="print JSON instead of the Markdown table")
    g.add_argument("--markdown", metavar="FILE", help="also write the Markdown table to FILE")

    rp = command("report", "a self-contained HTML report of a run (chart + table)")
    rp.add_argument("-o", "--output", help="where to write (default .autoloop/TAG/report.html; '-' for stdout)")
    rp.add_argument("--format", choices=("html", "markdown"), default="html",
                    help="html (default) or markdown (the summary a PR body or step summary shows)")

    c = command("clean", "remove a tag's worktrees and private state, and killed runs' temporary folders (asks first)")
    c.add_argument("--yes", "-y", action="store_true", help="do not ask")
    c.add_argument("--branch", action="store_true", help="also delete the branch autoloop/TAG (its kept commits)")
    c.add_argument("--journal", action="store_true",
                   help="also delete the journal: the ledger, and experiments.md/results.tsv when they are this tag's")

    i = sub.add_parser("init", help="write a program.md from a template")
    i.add_argument("path", nargs="?", default=".", help="file or folder (default: ./program.md)")
    i.add_argument("--template", default="generic", help="template name (see --list)")
    i.add_argument("--list", action="store_true", help="list the templates")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    from autoloop import cli_log

    argv = list(sys.argv[1:] if argv is None else argv)
    # a bare `--approve` means `--approve=after` (an optional value would swallow PROGRAM)
    argv = ["--approve=after" if a == "--approve" else a for a in argv]
    args = build_parser().parse_args(argv)
    calm_gc()
    if args.command in ("log", "report", "init") and hasattr(signal, "SIGPIPE"):
        # read-only commands behave like any Unix tool in a pipe: `autoloop log | head` just
        # ends when head has read enough (a run keeps Python's handling: see BrokenPipeError)
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    commands = {"run": cmd_run, "verify": cmd_verify, "doctor": cmd_doctor, "log": cli_log.cmd_log,
                "init": cmd_init, "gate": cmd_gate, "report": cli_log.cmd_report, "clean": cmd_clean}
    try:
        return commands[args.command](args)
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        return exc.exit_code
    except ClusterLost as exc:
        _leaving()
        print(f"autoloop: stopped: {exc}; the work tree is back at the incumbent and the journal is whole",
              file=sys.stderr)
        return exc.exit_code
    except Interrupted:
        _leaving()
        print("autoloop: interrupted; the work tree is back at the incumbent and the journal is whole",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    except AutoloopError as exc:
        print(f"autoloop: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        _leaving()
        print("autoloop: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # the reader went away (`| head`): no traceback when Python flushes stdout at exit
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except OSError:
            pass
        return EXIT_BROKEN_PIPE
    except Exception as exc:  # a bug of ours: one line, details only on request
        if os.environ.get("AUTOLOOP_DEBUG"):
            raise
        print(f"autoloop: internal error: {type(exc).__name__}: {exc} (set AUTOLOOP_DEBUG=1 for details)",
              file=sys.stderr)
        return 1


def _leaving() -> None:
    # all is put back: one more Ctrl-C must not break the way out (filelock's exit handlers)
    from autoloop.proc import STOP_SIGNALS

    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


def load(path_text: str) -> Any:  # -> Program (imported lazily, as above)
    from autoloop.program import load_program

    return load_program(Path(path_text).expanduser().absolute())


def cmd_run(args: argparse.Namespace) -> int:
    from autoloop import ci as cimod

    in_ci = cimod.ci_env() if args.ci is None else args.ci
    outcome = cimod.Outcome(ci=in_ci, tag=args.tag, program=args.program)
    try:
        outcome.exit_code = _run(args, in_ci, outcome)
    except BaseException as exc:
        outcome.exit_code = _exit_code(exc)
        outcome.error = str(exc) or type(exc).__name__
        raise
    finally:
        _run_epilogue(args, outcome)
    return outcome.exit_code


def _run(args: argparse.Namespace, in_ci: bool, outcome: Any) -> int:
    out = sys.stderr if args.json else sys.stdout
    program = load(args.program)  # before the heavy imports: bad input is refused at once
    warnings = _newcomer_checks(program, args.tag)
    from autoloop import ci as cimod
    from autoloop.approve import TerminalReviewer
    from autoloop.loop import Run, RunOptions
    from autoloop.persist import save
    from autoloop.progress import Progress, is_live, use_color
    outcome.program = program.rel_path
    outcome.paths = cimod.journal_paths(program, args.tag)
    workers = args.workers or program.parallel.workers
    if args.approve and workers > 1:
        raise UsageError("--approve shows one candidate at a time; it cannot be used with parallel "
                         "workers (--workers / parallel.workers above 1)")
    if args.approve and in_ci:
        raise UsageError("--approve asks a person at a terminal; it cannot be used in CI mode "
                         "(--ci, or CI=true in the environment: add --no-ci)")
    if args.approve:
        TerminalReviewer.check_terminal()
    live, color = not in_ci and is_live(out), not in_ci and use_color(out)
    progress = Progress(out, program.verifier.label, live=live, color=color, timestamps=in_ci,
                        direction=program.verifier.direction)
    reviewer = TerminalReviewer(args.approve, out=out, color=color, pause=progress.pause,
                                resume=progress.resume) if args.approve else None
    budget = cimod.Budget(args.max_minutes) if args.max_minutes else None

    def report(event: str, data: Mapping[str, Any]) -> None:
        while warnings:    # the run got past its checks: now they are worth a look
            print(warnings.pop(0), file=sys.stderr, flush=True)
        if budget is not None:
            budget.observe(event, data)
        progress(event, data)

    def stop_check() -> str:
        return (reviewer.stop_reason() if reviewer else "") or (budget.stop_reason() if budget else "")

    def on_finish(run: Run) -> None:  # under the run's lock, signal handlers still in place
        if budget is not None:
            budget.disarm()
        outcome.incumbent = run.incumbent
        if in_ci:
            outcome.journal_commit = save(run.ws, run.journal, run.program, run.incumbent)

    run = None
    try:
        options = RunOptions(tag=args.tag, cycles=args.cycles, report=report, reviewer=reviewer,
                             stop_check=stop_check, on_finish=on_finish,
                             time_left=budget.time_left if budget is not None else lambda: None)
        run = Run(program, options, workers=workers)
        summary = run.execute()
    except BaseException as exc:
        progress.close()
        # our own deadline stopped the cycle (or the end-of-run check) in progress: the run
        # ended on its budget
        on_budget = isinstance(exc, Interrupted) and budget is not None and budget.fired
        if run is not None and getattr(run, "_attached", False):
            # however it ended, the ending is told: counts from the ledger, the summary line
            if on_budget:
                reason = (f"--max-minutes budget reached ({args.max_minutes:g} min); the cycle in "
                          "progress was stopped")
            elif isinstance(exc, ClusterLost):
                reason = f"no Ray node can measure ({exc})"
            elif isinstance(exc, (Interrupted, KeyboardInterrupt)):
                reason = "interrupted"
            else:
                reason = f"error: {(str(exc) or type(exc).__name__).splitlines()[0]}"
            _ending(out, program, run, outcome, reason, None,
                    resume=_resume_command(args))
        if not on_budget:
            raise
        return 0
    finally:
        if budget is not None:
            budget.disarm()
        progress.close()
    _ending(out, program, run, outcome, summary.stop_reason, summary.final)
    return 0


def _ending(out: Any, program: Any, run: Any, outcome: Any, reason: str,
            final: Mapping[str, Any] | None, resume: str = "") -> None:
    """The last lines of every run that got as far as its ledger, however it ended: the
    journal's paths, the CI journal commit, and `stopped: ... baseline → best ...; branch`."""
    from autoloop.decide.end import NOTHING_KEPT
    from autoloop.journal import since_last_start

    outcome.stop_reason = reason
    outcome.this_run = since_last_start(run.journal.records)
    outcome.cycles_run = sum(outcome.this_run.values())
    outcome.incumbent = run.incumbent or outcome.incumbent
    tag = run.opt.tag
    print(f"journal: {program.state_dir / 'experiments.md'}  {program.state_dir / 'results.tsv'}", file=out)
    if outcome.journal_commit:
        print(f"journal committed on autoloop/{tag}: {outcome.journal_commit[:12]} "
              "(push the branch; the next run resumes from it)", file=out)
    if run.baseline is None:
        print(f"stopped: {reason}. {program.verifier.label}: no baseline was measured, so branch "
              f"autoloop/{tag} was not made", file=out)
        return
    # one gain, from facts like log/report/--json: the re-measured one when the run has it; a
    # re-measurement that did not happen says why, unless the line already does ("0 kept",
    # best = baseline) because nothing was kept
    why_not = (f"; {final['text']}" if final and final.get("text") and (final.get("skipped") or final.get("error"))
               and final.get("skipped") != NOTHING_KEPT else "")
    print(f"stopped: {reason}. {_standing(run)}; branch autoloop/{tag} at {run.incumbent[:12]}{why_not}",
          file=out)
    if reason == "interrupted" and resume:
        print(f"resume with: {resume}", file=out, flush=True)


def _resume_command(args: argparse.Namespace) -> str:
    """The command to paste after an interrupt: the same run with the options the user gave.
    --cycles and --max-minutes count in each invocation (CONTRACT §3), so they are repeated as
    given; left out they would turn a bounded run into one that goes on to stop.max_cycles."""
    argv = ["autoloop", "run", args.program, "--tag", args.tag]
    for flag, value in (("--cycles", args.cycles), ("--max-minutes", args.max_minutes),
                        ("--workers", args.workers)):
        if value is not None:
            argv += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    if args.approve is not None:
        argv += [f"--approve={args.approve}"]
    if args.ci is not None:
        argv += ["--ci" if args.ci else "--no-ci"]
    if args.json:
        argv += ["--json"]
    return shlex.join(argv)


def _standing(run: Any) -> str:
    """`score: baseline 109.04 → best 100.86, gain -25.77% (95% CI …), re-measured; 3 kept` —
    from the ledger through facts, the same numbers `log`, the report and --json show."""
    from autoloop.ci import facts_of
    from autoloop.facts import gain_text
    from autoloop.numbers import signed_pct

    label = run.program.verifier.label
    f = facts_of(run.program, run.opt.tag, run.journal.records)
    s = f.summary
    if s.baseline is None:
        return f"{label}: no baseline measured"
    gain = f", gain {gain_text(f)}" if f.headline_gain_pct is not None else ""
    if f.head_final is not None:
        # the end-of-run check measured the branch head, which a person kept against the
        # ratchet: its gain is not the best's
        gain += ("; the branch head (a person's keep) re-measured against the start: "
                 f"{signed_pct(f.head_final.get('change_pct'))}")
    return f"{label}: baseline {f.fmt(s.baseline)} → best {f.fmt(s.best)}{gain}; {s.kept} kept in total"


def _newcomer_checks(program: Any, tag: str | None = None) -> list[str]:
    """Refuse an untouched `autoloop init` template (exit 2); return the warnings about
    `allowed` entries, to print once the run is past its checks (not on every resume)."""
    from autoloop import hints
    from autoloop.journal import Journal, has_baseline
    from autoloop.workspace import require_commit

    require_commit(program.repo_root)   # else a missing script reads as the template's placeholder
    hints.refuse_placeholders(program)
    hints.refuse_missing_scripts(program)
    if tag is not None and has_baseline(Journal(program.state_dir, tag).ledger):
        return []
    return [f"autoloop: warning: {line}" for line in hints.unmatched_allowed(program)]


def _exit_code(exc: BaseException) -> int:
    if isinstance(exc, AutoloopError):      # Interrupted included: 130
        return exc.exit_code
    if isinstance(exc, SystemExit):
        return exc.code if isinstance(exc.code, int) else 1
    return EXIT_INTERRUPTED if isinstance(exc, KeyboardInterrupt) else 1


def _run_epilogue(args: argparse.Namespace, outcome: Any) -> None:
    """After a run however it ended: the step summary (CI) and the --json object."""
    from autoloop import ci as cimod

    if outcome.program and outcome.paths:
        try:
            outcome.facts = cimod.load_facts(load(args.program), args.tag)
        except AutoloopError:
            outcome.facts = None
    if outcome.ci:
        _step_summary(outcome.step_summary())
    if args.json:
        print(json.dumps(outcome.as_json(), indent=2, default=str), flush=True)


def _step_summary(text: str) -> None:
    path = os.environ.get("GITHUB_STEP_SUMMARY", "").strip()
    if path:
        try:
            with open(path, "a", encoding="utf-8") as f:
                f.write(text.rstrip("\n") + "\n\n")
        except OSError as exc:
            print(f"autoloop: warning: cannot write the step summary to {path}: {exc}",
                  file=sys.stderr)


def cmd_verify(args: argparse.Namespace) -> int:
    from autoloop.numbers import num, seconds
    from autoloop.verify_head import check, verify_head

    program = load(args.program)
    warnings = _newcomer_checks(program)
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
    print(f"{v.label}: {num(m.metric)}  ({v.direction}, {seconds(m.verifier_s)})")
    if res.files_read is not None:
        print(f"reads: {res.files_read.summary()}")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from autoloop.doctor import diagnose

    if args.probe:
        return _probe(load(args.program))
    failed = 0
    for check in diagnose(load(args.program), tag=args.tag):
        print(f"{check.state:<4}  {check.name:<{DOCTOR_NAME_WIDTH}}  {check.detail}", flush=True)
        failed += check.blocks
    if failed:
        print(f"doctor: {failed} problem{'s' if failed > 1 else ''}: a run would not start (or not get far)")
        return 1
    print("doctor: a run can start")
    return 0


def _probe(program: Any) -> int:
    from autoloop.numbers import num, seconds
    from autoloop.probe import Baseline, ProbeError, probe

    v = program.verifier
    mode = getattr(v, "measure", "output")
    print(f"probe: reward hacks against {v.label} (measure: {mode}"
          f"{', score' if getattr(v, 'score', None) else ''}), each in a throwaway tree of HEAD; "
          "nothing of the checkout changes", flush=True)
    fooled = 0
    try:
        for item in probe(program):
            if isinstance(item, Baseline):
                where = f"planted in {item.target}" if item.target else "no module to plant in"
                print(f"baseline  {v.label} {' '.join(num(x) for x in item.values)} "
                      f"({seconds(item.seconds)} a run); {where}", flush=True)
                continue
            state = "skip" if item.fooled is None else ("fooled" if item.fooled else "held")
            fix = f" — fix: {item.fix}" if item.fooled else ""
            print(f"{state:<6}  {item.name:<{DOCTOR_NAME_WIDTH + 5}}  {item.detail}{fix}", flush=True)
            fooled += bool(item.fooled)
    except ProbeError as exc:
        print(f"probe: {exc}")
        return 1
    if fooled:
        print(f"probe: {fooled} hack{'s' if fooled > 1 else ''} fooled the verifier: a run could keep them")
        return 1
    print("probe: every hack tried was caught")
    return 0


def cmd_gate(args: argparse.Namespace) -> int:
    from autoloop.gate import check_pairs, markdown, parse_tolerance, resolve, run_gate, to_json

    try:
        tolerance = parse_tolerance(args.tolerance)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    check_pairs(args.pairs, args.alpha, args.require_improvement)
    program = load(args.program)
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
    _step_summary(table)
    return res.exit_code


def cmd_clean(args: argparse.Namespace) -> int:
    from autoloop import clean

    program, tag, no_run = None, None, None
    try:
        program = load(args.program)
        tag = args.tag or clean.latest_tag(program)
    except UsageError as exc:
        if args.tag or args.branch or args.journal:
            raise
        no_run = exc   # nothing of a run to clean here: the temporary folders alone, if any
    if args.yes and not args.tag and tag is not None:
        # with no one to read the listing, a guessed tag's worktrees and logs must not go
        raise UsageError(f"clean --yes needs the tag named: add --tag {tag} (the most recent run "
                         "here), or leave out --yes to see the listing first")
    plan = clean.plan(program, tag, branch=args.branch, journal=args.journal)
    keeps = [f"  {k}" if k.startswith("note:") else f"  keeps {k}" for k in plan.keeps]
    if no_run and plan.empty:
        raise no_run
    if plan.empty:
        print("\n".join([f"nothing to remove for tag '{tag}'", *keeps]))
        return 0
    what = f"tag '{tag}'" if tag else f"no run here ({no_run})"
    print(f"autoloop clean: {what} — will remove:")
    if plan.branch_head:
        print(f"  branch {plan.branch} (at {plan.branch_head[:12]}; its kept commits stay reachable only "
              "if merged elsewhere)")
    for p in [*plan.trees, *map(_shown, [*plan.journal, *plan.state])]:
        print(f"  {p}")
    if plan.temps:
        print(f"  {clean.temps_text(plan.temps)}")
    for k in keeps:
        print(k)
    if not args.yes:
        if not sys.stdin.isatty():
            raise UsageError("autoloop clean asks before removing anything; add --yes to run it without a terminal")
        try:
            answer = input("remove these? [y/N] ").strip().lower()
        except EOFError:
            answer = ""
        if answer not in ("y", "yes"):
            print("nothing removed")
            return 1
    clean.remove(program, plan)
    print(f"removed; `autoloop run {args.program} --tag {tag}` {plan.after}" if tag else "removed")
    return 0


def _shown(p: Path) -> str:
    try:
        return p.relative_to(Path.cwd()).as_posix()
    except ValueError:
        return str(p)


def cmd_init(args: argparse.Namespace) -> int:
    from autoloop.init import CHOICE, TEMPLATES, init_program

    if args.list:
        for name, desc in TEMPLATES.items():
            print(f"{name:<10} {desc}")
        return 0
    target = Path(args.path)
    steps = init_program(target, args.template)
    print(f"wrote {target / 'program.md' if target.is_dir() else target}.")
    for line in CHOICE.get(args.template, ()):
        print(f"  {line}")
    print("Next:")
    for s in steps:
        print(f"  {s}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
