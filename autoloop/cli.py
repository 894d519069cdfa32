"""Command line. The only module that prints or picks exit codes:
0 stopped on a stop condition / success, 1 could not go on, 2 bad usage or input, 130 interrupted."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from autoloop import __version__
from autoloop.errors import AutoloopError, ConfigError, Interrupted, UsageError

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        print(f"autoloop: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def _cycles(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--cycles needs a whole number, got {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"--cycles must be 0 or more, got {n}")
    return n


def _minutes(text: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--max-minutes needs a number, got {text!r}") from None
    if not x > 0 or x != x or x == float("inf"):
        raise argparse.ArgumentTypeError(f"--max-minutes must be more than 0, got {text}")
    return x


def _pairs(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--pairs needs a whole number, got {text!r}") from None
    if not 1 <= n <= 1000:
        raise argparse.ArgumentTypeError(f"--pairs must be between 1 and 1000, got {n}")
    return n


def _workers(text: str) -> int:
    from autoloop.program import MAX_WORKERS

    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--workers needs a whole number, got {text!r}") from None
    if not 1 <= n <= MAX_WORKERS:
        raise argparse.ArgumentTypeError(f"--workers must be between 1 and {MAX_WORKERS}, got {n}")
    return n


def _alpha(text: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--alpha needs a number, got {text!r}") from None
    if not 0 < x < 1:
        raise argparse.ArgumentTypeError(f"--alpha must be between 0 and 1, got {text}")
    return x


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="autoloop", description="Ratchet loops on a git repository.")
    p.add_argument("--version", action="version", version=f"autoloop {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    r = sub.add_parser("run", help="run the ratchet loop on branch autoloop/TAG")
    r.add_argument("program", nargs="?", default="program.md", help="program file (default ./program.md)")
    r.add_argument("--tag", required=True, help="run name; commits go on branch autoloop/TAG")
    r.add_argument("--cycles", type=_cycles, help="cycles in this invocation (overrides stop.max_cycles)")
    r.add_argument("--approve", choices=("after", "before", "both"),
                   help="a person decides each cycle at the terminal: after verification (default), "
                        "before it, or both")
    r.add_argument("--ci", action="store_true", default=None,
                   help="CI mode (default when CI=true): plain lines, journal committed on the run branch, "
                        "$GITHUB_STEP_SUMMARY")
    r.add_argument("--no-ci", dest="ci", action="store_false", help="not CI mode even when CI=true")
    r.add_argument("--max-minutes", type=_minutes, help="wall-clock budget for this invocation")
    r.add_argument("--json", action="store_true",
                   help="print one JSON object describing the outcome on stdout (progress goes to stderr)")
    r.add_argument("--workers", type=_workers,
                   help="generators proposing at once from the same incumbent, each in its own worktree "
                        "(overrides parallel.workers; default 1)")

    v = sub.add_parser("verify", help="measure HEAD as a run's baseline would (guards + metric); changes nothing")
    v.add_argument("program", nargs="?", default="program.md")

    d = sub.add_parser("doctor", help="check that a run could start: git, generator, sandbox, data, verifier")
    d.add_argument("program", nargs="?", default="program.md")
    d.add_argument("--tag", default="doctor", help="the run tag to check against (default: doctor)")

    lg = sub.add_parser("log", help="the cycles of a run and its summary")
    lg.add_argument("program", nargs="?", default="program.md")
    lg.add_argument("--tag", help="which run (default: the most recent)")
    lg.add_argument("--wide", action="store_true",
                    help="print every hypothesis and lesson whole (default: cut with … to the terminal width)")

    g = sub.add_parser("gate", help="pull-request gate: measure base and head here, paired; exit 1 if head is worse")
    g.add_argument("program", nargs="?", default="program.md")
    g.add_argument("--base", required=True, help="the commit to compare against (e.g. origin/main)")
    g.add_argument("--head", default="HEAD", help="the commit under test (default HEAD)")
    g.add_argument("--pairs", type=_pairs, default=6, help="interleaved base/head pairs (default 6)")
    g.add_argument("--tolerance", default="2%", help="allowed worsening, in percent (default 2%%)")
    g.add_argument("--alpha", type=_alpha, default=0.05, help="significance level (default 0.05)")
    g.add_argument("--require-improvement", action="store_true",
                   help="pass only when the head is significantly better")
    g.add_argument("--guards", action="store_true", help="also run the guards once on each side")
    g.add_argument("--json", action="store_true", help="print JSON instead of the Markdown table")
    g.add_argument("--markdown", metavar="FILE", help="also write the Markdown table to FILE")

    rp = sub.add_parser("report", help="a self-contained HTML report of a run (chart + table)")
    rp.add_argument("program", nargs="?", default="program.md")
    rp.add_argument("--tag", help="which run (default: the most recent)")
    rp.add_argument("-o", "--output", help="where to write (default .autoloop/TAG/report.html; '-' for stdout)")
    rp.add_argument("--format", choices=("html", "markdown"), default="html",
                    help="html (default) or markdown (the summary a PR body or step summary shows)")

    c = sub.add_parser("clean", help="remove a tag's worktrees and private state (asks first)")
    c.add_argument("program", nargs="?", default="program.md")
    c.add_argument("--tag", help="which run (default: the most recent)")
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
    argv = list(sys.argv[1:] if argv is None else argv)
    # a bare `--approve` means `--approve=after` (an optional value would swallow PROGRAM)
    argv = ["--approve=after" if a == "--approve" else a for a in argv]
    args = build_parser().parse_args(argv)
    if args.command in ("log", "report", "init") and hasattr(signal, "SIGPIPE"):
        # read-only commands behave like any Unix tool in a pipe: `autoloop log | head` just
        # ends when head has read enough (a run keeps Python's handling: see BrokenPipeError)
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        return {"run": cmd_run, "verify": cmd_verify, "doctor": cmd_doctor, "log": cmd_log, "init": cmd_init,
                "gate": cmd_gate, "report": cmd_report, "clean": cmd_clean}[args.command](args)
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
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
        # the reader went away (`| head`): nothing more to say, and no traceback when Python
        # flushes stdout at exit
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except OSError:
            pass
        return 128 + 13
    except Exception as exc:  # a bug of ours: one line, details only on request
        if os.environ.get("AUTOLOOP_DEBUG"):
            raise
        print(f"autoloop: internal error: {type(exc).__name__}: {exc} (set AUTOLOOP_DEBUG=1 for details)",
              file=sys.stderr)
        return 1


def _leaving() -> None:
    """Interrupted, and all is put back: one more Ctrl-C (an impatient second press, the
    terminal's signal to the whole group) must not break the way out — the interpreter's
    exit handlers (filelock releases its locks at exit) would print a traceback."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)


def _load(path_text: str):  # -> Program
    from autoloop.program import load_program

    return load_program(Path(path_text).expanduser().absolute())


# ---- run ---------------------------------------------------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    from autoloop import ci as cimod

    in_ci = cimod.ci_env() if args.ci is None else args.ci
    outcome = cimod.Outcome(ci=in_ci, tag=args.tag, program=args.program)
    try:
        code = _run(args, in_ci, outcome)
    except BaseException as exc:
        outcome.exit_code = _exit_code(exc)
        outcome.error = str(exc) or type(exc).__name__
        _run_epilogue(args, outcome)
        raise
    outcome.exit_code = code
    _run_epilogue(args, outcome)
    return code


def _run(args: argparse.Namespace, in_ci: bool, outcome: Any) -> int:
    out = sys.stderr if args.json else sys.stdout
    program = _load(args.program)  # before the heavy imports: bad input is refused at once
    warnings = _newcomer_checks(program, args.tag)
    from autoloop import ci as cimod
    from autoloop.approve import NoTerminal, TerminalReviewer
    from autoloop.loop import Run, RunOptions
    from autoloop.persist import save
    from autoloop.progress import Progress, is_live, use_color
    outcome.program = program.rel_path
    outcome.paths = cimod.journal_paths(program, args.tag)
    reviewer = None
    if args.approve and (args.workers or program.parallel.workers) > 1:
        raise UsageError("--approve shows one candidate at a time; it cannot be used with parallel "
                         "workers (--workers / parallel.workers above 1)")
    if args.approve:
        if in_ci:
            raise UsageError("--approve asks a person at a terminal; it cannot be used in CI mode "
                             "(--ci, or CI=true in the environment: add --no-ci)")
        try:
            TerminalReviewer.check_terminal()
        except NoTerminal as exc:
            raise UsageError(str(exc)) from None
    live = not in_ci and is_live(out)
    color = not in_ci and use_color(out)
    progress = Progress(out, program.verifier.label, live=live, color=color, timestamps=in_ci,
                        direction=program.verifier.direction)
    if args.approve:
        reviewer = TerminalReviewer(args.approve, out=out, color=color, pause=progress.pause,
                                    resume=progress.resume)
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
        run = Run(program, options, workers=args.workers or program.parallel.workers)
        summary = run.execute()
    except BaseException as exc:
        progress.close()
        # our own deadline stopped the cycle (or the end-of-run check) in progress: the run
        # ended on its budget
        on_budget = isinstance(exc, Interrupted) and budget is not None and budget.fired
        if run is not None and getattr(run, "_attached", False):
            # however it ended, the ending is told: counts from the ledger, the summary line
            if on_budget:
                assert budget is not None
                reason = (f"--max-minutes budget reached ({budget.minutes:g} min); the cycle in "
                          "progress was stopped")
            elif isinstance(exc, (Interrupted, KeyboardInterrupt)):
                reason = "interrupted"
            else:
                reason = f"error: {(str(exc) or type(exc).__name__).splitlines()[0]}"
            import shlex

            _ending(out, program, run, outcome, reason, None,
                    resume=shlex.join(["autoloop", "run", args.program, "--tag", args.tag]))
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
    outcome.stop_reason = reason
    outcome.this_run = _since_start(run)
    outcome.cycles_run = sum(outcome.this_run.values())
    outcome.incumbent = run.incumbent or outcome.incumbent
    label = program.verifier.label
    print(f"journal: {program.state_dir / 'experiments.md'}  {program.state_dir / 'results.tsv'}", file=out)
    if outcome.journal_commit:
        print(f"journal committed on autoloop/{run.opt.tag}: {outcome.journal_commit[:12]} "
              "(push the branch; the next run resumes from it)", file=out)
    if run.baseline is None:
        print(f"stopped: {reason}. {label}: no baseline was measured, so branch autoloop/{run.opt.tag} "
              "was not made", file=out)
        return
    # one gain, from facts like log/report/--json: the re-measured one when the run has it; a
    # re-measurement that did not happen says why
    why_not = (f"; {final['text']}" if final and final.get("text") and (final.get("skipped") or final.get("error"))
               else "")
    print(f"stopped: {reason}. {_standing(run)}; branch autoloop/{run.opt.tag} at {run.incumbent[:12]}{why_not}",
          file=out)
    if reason == "interrupted" and resume:
        print(f"resume with: {resume}", file=out, flush=True)


def _standing(run: Any) -> str:
    """`score: baseline 109.04 → best 100.86, gain -25.77% (95% CI …), re-measured; 3 kept` —
    from the ledger through facts, the same numbers `log`, the report and --json show."""
    from autoloop.facts import facts, gain_text
    from autoloop.summary import overruled_keep

    v = run.program.verifier
    f = facts(run.journal.records, tag=run.opt.tag, goal=run.program.goal, metric=v.label,
              direction=v.direction)
    s = f.summary
    if s.baseline is None:
        return f"{v.label}: no baseline measured"
    gain = f", gain {gain_text(f)}" if f.headline_gain_pct is not None else ""
    if f.remeasured_pct is not None and any(overruled_keep(c) for c in run.journal.cycles()):
        # the end-of-run check measured the branch head, which a person kept against the
        # ratchet: its gain is not the best's
        gain = f"; the branch head (a person's keep) re-measured against the start: {gain_text(f)}"
    return f"{v.label}: baseline {f.fmt(s.baseline)} → best {f.fmt(s.best)}{gain}; {s.kept} kept in total"


def _newcomer_checks(program: Any, tag: str | None = None) -> list[str]:
    """Before anything runs: refuse an untouched `autoloop init` template (exit 2). Returns the
    warnings about `allowed` entries that can only be mistakes — for the caller to print once the
    run is past its own checks (a refused run shows its one error line, nothing else), before
    the baseline, so not again on every resume of a tag that has measured one."""
    from autoloop import hints

    hints.refuse_placeholders(program)
    if tag is not None and _has_baseline(program, tag):
        return []
    return [f"autoloop: warning: {line}" for line in hints.unmatched_allowed(program)]


def _has_baseline(program: Any, tag: str) -> bool:
    """Does the tag's ledger hold a cycle record? Read only (loading would mend a torn line,
    which is the run's job, under its lock); every record starts with its type."""
    from autoloop.journal import Journal

    try:
        with open(Journal(program.state_dir, tag).ledger, "rb") as f:
            return any(line.startswith(b'{"t":"cycle"') for line in f)
    except OSError:
        return False


def _since_start(run: Any) -> dict[str, int]:
    """This invocation's cycles (those recorded since its `start` record), by status."""
    counts: dict[str, int] = {}
    for r in reversed(run.journal.records):
        if r.get("t") == "start":
            break
        if r.get("t") == "cycle" and r.get("cycle", 0) > 0:
            counts[r["status"]] = counts.get(r["status"], 0) + 1
    return dict(sorted(counts.items()))


def _exit_code(exc: BaseException) -> int:
    if isinstance(exc, (Interrupted, KeyboardInterrupt)):
        return EXIT_INTERRUPTED
    if isinstance(exc, AutoloopError):
        return exc.exit_code
    if isinstance(exc, SystemExit):
        return exc.code if isinstance(exc.code, int) else 1
    return 1


def _run_epilogue(args: argparse.Namespace, outcome: Any) -> None:
    """After a run however it ended: the step summary (CI) and the --json object."""
    from autoloop import ci as cimod

    if outcome.program and outcome.paths:
        try:
            program = _load(args.program)
            outcome.facts = cimod.load_facts(program, args.tag)
        except AutoloopError:
            outcome.facts = None
    summary_file = os.environ.get("GITHUB_STEP_SUMMARY", "").strip()
    if outcome.ci and summary_file:
        try:
            cimod.append_step_summary(summary_file, outcome.step_summary())
        except OSError as exc:
            print(f"autoloop: warning: cannot write the step summary to {summary_file}: {exc}", file=sys.stderr)
    if args.json:
        cimod.write_json(sys.stdout, outcome.as_json())


# ---- verify ------------------------------------------------------------------------------------


def cmd_verify(args: argparse.Namespace) -> int:
    from autoloop.numbers import num
    from autoloop.verify_head import check, verify_head

    program = _load(args.program)
    warnings = _newcomer_checks(program)
    ws, head = check(program)
    for line in warnings:
        print(line, file=sys.stderr)
    print(f"verifying {program.repo_root} at HEAD {head[:12]}: what a run's baseline measures "
          "(committed files only, in a private tree; nothing is changed)", flush=True)
    res = verify_head(program, ws, head)
    for line in res.warnings:
        print(f"autoloop: WARNING: {line}", file=sys.stderr)
    m = res.measurement
    for g in m.guards:
        print(f"guard {g.name}: {'pass' if g.ok else 'FAIL'} ({g.detail}, {g.duration_s:.1f}s)")
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
    print(f"{v.label}: {num(m.metric)}  ({v.direction}, {m.duration_s:.1f}s)")
    return 0


# ---- doctor ------------------------------------------------------------------------------------


def cmd_doctor(args: argparse.Namespace) -> int:
    from autoloop.doctor import diagnose

    program = _load(args.program)
    failed = 0
    width = 14    # the lines stream out as each check ends: one width that fits `guard <name>`s
    for check in diagnose(program, tag=args.tag):
        print(f"{check.state:<4}  {check.name:<{width}}  {check.detail}", flush=True)
        failed += check.blocks
    if failed:
        print(f"doctor: {failed} problem{'s' if failed > 1 else ''}: a run would not start (or not get far)")
        return 1
    print("doctor: a run can start")
    return 0


# ---- log ---------------------------------------------------------------------------------------


def cmd_log(args: argparse.Namespace) -> int:
    from autoloop.facts import facts, gain_text, rows
    from autoloop.numbers import count, signed_pct, usd

    program, tag, journal = _open_run(args)
    cycles = journal.cycles()
    v = program.verifier
    name = v.label
    f = facts(journal.records, tag=tag, goal=program.goal, metric=name, direction=v.direction)
    fmt = f.fmt
    width = None if args.wide else _columns()
    print(f"run autoloop/{tag} — {program.goal}")
    from autoloop.journal import not_sandboxed
    for note in not_sandboxed(journal.records):
        print(f"WARNING: {note}")
    if not cycles:
        # an aborted baseline leaves no cycle record, only why: say so instead of an empty table
        why = next((r.get("reason") for r in reversed(journal.records)
                    if r.get("t") == "abort" and r.get("cycle") == 0), None)
        print("no cycle was measured: " + (f"the baseline was aborted ({why})" if why else
                                           "the run stopped before its baseline"))
        print(f"fix what stopped it (`autoloop verify {args.program}` shows the verifier's output), then "
              f"`autoloop run {args.program} --tag {tag}` starts the tag afresh")
        return 1
    paired = any(isinstance((c.get("stats") or {}).get("pooled"), dict) for c in cycles)
    against = "vs (in cycle)" if paired else "best before"
    head = f"{'cycle':>5}  {'status':<10} {name[:12]:>12} {against:>13} {'change':>8}  "
    print(head + "hypothesis")
    indent = " " * len(head)
    for c, vs, change in rows(cycles):
        line = (f"{c['cycle']:>5}  {c['status']:<10} {fmt(c.get('metric')) or '-':>12} "
                f"{fmt(vs, '') :>13} {signed_pct(change, ''):>8}  ")
        print(_cut(line + " ".join(str(c.get("hypothesis", "")).split()), width))
        if c["status"] != "baseline":
            print(_cut(indent + "→ " + " ".join(str(c.get("lesson", "")).split()), width))
    judged = [c for c in cycles if (c.get("stats") or {}).get("pooled")]
    if judged:
        print()
        print(f"{'cycle':>5}  {'status':<10} {'change':>9}  {'95% CI':<21} {'p':>8}  pairs  holdout")
        for c in judged:
            st = c["stats"]
            pooled = st["pooled"]
            ci = pooled.get("change_ci_pct")
            ci_text = f"{signed_pct(ci[0])} … {signed_pct(ci[1])}" if ci else "-"
            hold = st.get("holdout")
            h = "-" if not isinstance(hold, dict) else ("overfit?" if hold.get("overfit") else "improved")
            ps = "/".join(f"{b['p']:.3g}" for b in st.get("batches", []) if "p" in b)
            pairs = "+".join(str(b.get("n", 0)) for b in st.get("batches", []))
            print(f"{c['cycle']:>5}  {c['status']:<10} {signed_pct(pooled.get('change_pct'), '-'):>9}  "
                  f"{ci_text:<21} {ps:>8}  {pairs:<5}  {h}")
    s = f.summary
    print()
    print(f"baseline   {fmt(s.baseline) or '-'}")
    print(f"best       {fmt(s.best) or '-'}" + (" (as measured against its incumbent)" if f.paired else ""))
    print(f"gain       {gain_text(f) if f.headline_gain_pct is not None else '-'}")
    if f.final is not None and s.gain_pct is not None and signed_pct(s.gain_pct) != signed_pct(f.headline_gain_pct):
        print(f"           (one-cycle medians baseline → best said {signed_pct(s.gain_pct)}; "
              "the re-measured gain is the one to quote)")
    rate = "-" if s.keep_rate is None else f"{s.keep_rate * 100:.0f}% ({s.kept} of {s.cycles})"
    print(f"keep rate  {rate}")
    print("by status  " + (", ".join(f"{k} {n}" for k, n in s.by_status.items()) or "-"))
    print(f"trend      {s.trend}")
    calibration = (cycles[0].get("stats") or {}) if cycles else {}
    if calibration.get("warning"):
        print(f"warning    {calibration['warning']}")
    for fin in journal.finals():
        # the run's headline gain, with its interval and cost: never cut
        print(f"final      (after cycle {fin.get('after_cycle')}) {fin.get('text', '')}")
    if s.cost_usd or s.tokens:
        parts = [usd(s.cost_usd) if s.cost_usd else "no price known"]
        if s.cost_per_keep is not None:
            parts.append(f"{usd(s.cost_per_keep)} per kept change")
        if s.cost_per_unit_gain is not None:
            parts.append(f"{usd(s.cost_per_unit_gain)} per unit of {name} gained")
        if s.tokens:
            parts.append(f"{count(s.tokens)} tokens")
        print("cost       " + ", ".join(parts))
    return 0


def _columns() -> int | None:
    """How wide a line `log` may print: the terminal's width, or 120 in a pipe (a `| less`
    reader still sees whole words); `--wide` prints everything."""
    if sys.stdout.isatty():
        import shutil

        return max(60, shutil.get_terminal_size((120, 24)).columns)
    return 120


def _cut(line: str, width: int | None) -> str:
    return line if width is None or len(line) <= width else line[:width - 1] + "…"


def _open_run(args: argparse.Namespace) -> tuple[Any, str, Any]:
    """(program, tag, loaded journal) of the run `--tag` names, else the most recent one."""
    from autoloop.journal import Journal, run_of, run_programs

    program = _load(args.program)
    tag = args.tag or _latest_tag(program.state_dir, program.rel_path, args.command)
    journal = Journal(program.state_dir, tag)
    if not journal.exists():
        runs = [led.parent.name for led in sorted((program.state_dir / ".autoloop").glob("*/ledger.jsonl"))
                if run_of(led, program.rel_path)]
        known = f"; its runs: {', '.join(runs)}" if runs else f"; {program.path.name} has no run yet"
        raise UsageError(f"no run '{tag}' next to {program.path.name} (no {journal.ledger}){known}")
    journal.load()
    made_by = run_programs(journal.ledger)
    if made_by and program.rel_path not in made_by:
        # its cycles would be shown under this program's goal and metric name: wrong labels
        other = sorted(made_by)[0]
        raise UsageError(f"run '{tag}' was made with {other}, not {program.rel_path}: "
                         f"name it, e.g. autoloop {args.command} {other} --tag {tag}")
    return program, tag, journal


def _latest_tag(state_dir: Path, program: str, command: str) -> str:
    """The most recent run of `program`: program files in one folder share `.autoloop/`, and
    another program's run would be read under this one's goal and metric name."""
    from autoloop.journal import run_of, run_programs

    ledgers = sorted((state_dir / ".autoloop").glob("*/ledger.jsonl"), key=lambda p: p.stat().st_mtime)
    if not ledgers:
        raise UsageError(f"no autoloop run found in {state_dir} (run `autoloop run --tag NAME` first)")
    mine = [led for led in ledgers if run_of(led, program)]
    if not mine:
        other = sorted(run_programs(ledgers[-1]))[0]
        raise UsageError(f"no run of {program} in {state_dir}: the latest run there, "
                         f"'{ledgers[-1].parent.name}', was made with {other}: "
                         f"autoloop {command} {other}")
    return mine[-1].parent.name


# ---- gate --------------------------------------------------------------------------------------


def cmd_gate(args: argparse.Namespace) -> int:
    from autoloop.gate import markdown, parse_tolerance, resolve, run_gate, to_json

    try:
        tolerance = parse_tolerance(args.tolerance)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    program = _load(args.program)
    for ref in (args.base, args.head):
        resolve(program.repo_root, ref)      # an unknown revision is refused before any header
    print(f"gate: {program.verifier.label} of {args.head} vs {args.base}, {args.pairs} interleaved pairs",
          file=sys.stderr, flush=True)
    res = run_gate(program, base_ref=args.base, head_ref=args.head, pairs=args.pairs,
                   tolerance_pct=tolerance, alpha=args.alpha, require_improvement=args.require_improvement,
                   guards=args.guards, log=lambda line: print(f"gate: {line}", file=sys.stderr, flush=True))
    table = markdown(res)
    print(f"gate: {res.verdict}", file=sys.stderr, flush=True)
    if args.json:
        print(to_json(res))
    else:
        sys.stdout.write(table)
    if args.markdown:
        Path(args.markdown).write_text(table, encoding="utf-8")
    summary_file = os.environ.get("GITHUB_STEP_SUMMARY", "").strip()
    if summary_file:
        try:
            with open(summary_file, "a", encoding="utf-8") as f:
                f.write(table + "\n")
        except OSError as exc:
            print(f"autoloop: warning: cannot write the step summary to {summary_file}: {exc}", file=sys.stderr)
    return res.exit_code


# ---- report --------------------------------------------------------------------------------------


def cmd_report(args: argparse.Namespace) -> int:
    from autoloop.facts import facts, markdown
    from autoloop.report import render

    program, tag, journal = _open_run(args)
    v = program.verifier
    f = facts(journal.records, tag=tag, goal=program.goal, metric=v.label, direction=v.direction)
    text = markdown(f) if args.format == "markdown" else render(journal.records, f)
    dest = args.output or ("-" if args.format == "markdown" else str(journal.dir / "report.html"))
    if dest == "-":
        sys.stdout.write(text)
        return 0
    out = Path(dest)
    if out.is_dir():
        out = out / ("report.html" if args.format == "html" else "report.md")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    print(f"wrote {out} ({f.cycles_total} cycles)")
    return 0


# ---- clean ---------------------------------------------------------------------------------------


def cmd_clean(args: argparse.Namespace) -> int:
    from autoloop import clean

    program = _load(args.program)
    tag = args.tag or clean.latest_tag(program)
    plan = clean.plan(program, tag, branch=args.branch, journal=args.journal)
    if plan.empty:
        print(f"nothing to remove for tag '{tag}'")
        for k in plan.keeps:
            print(f"  keeps {k}")
        return 0
    print(f"autoloop clean: tag '{tag}' — will remove:")
    if plan.branch_head:
        print(f"  branch {plan.branch} (at {plan.branch_head[:12]}; its kept commits stay reachable only "
              "if merged elsewhere)")
    for p in plan.trees:
        print(f"  {p}")
    for p in [*plan.journal, *plan.state]:
        print(f"  {_show_path(program, p)}")
    for k in plan.keeps:
        print(f"  keeps {k}")
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
    print(f"removed; `autoloop run {args.program} --tag {tag}` " + (
        "starts the tag afresh" if plan.branch_head and plan.journal else "resumes it"
        if not plan.branch_head and not plan.journal else "cannot reuse the tag (see above)"))
    return 0


def _show_path(program: Any, p: Path) -> str:
    try:
        return p.relative_to(Path.cwd()).as_posix()
    except ValueError:
        return str(p)


# ---- init --------------------------------------------------------------------------------------


def cmd_init(args: argparse.Namespace) -> int:
    from autoloop.init import init_program, list_templates

    if args.list:
        for name, desc in list_templates():
            print(f"{name:<10} {desc}")
        return 0
    target = Path(args.path)
    steps = init_program(target, args.template)
    written = target / "program.md" if target.is_dir() else target
    print(f"wrote {written}. Next:")
    for s in steps:
        print(f"  {s}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
