"""`autoloop run`: a run from the command line to its last lines — the progress it prints, the
end-of-run summary, the CI step summary and the --json object."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from typing import Any, Callable, Mapping

from autoloop.commands.ci import step_summary
from autoloop.errors import AutoloopError, ClusterLost, Interrupted, UsageError
from autoloop.program.reader import load_program


def main(args: argparse.Namespace) -> int:
    from autoloop.commands import ci as cimod

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
    program = load_program(args.program)  # before the heavy imports: bad input is refused at once
    warnings = newcomer_checks(program, args.tag)
    from autoloop.commands import ci as cimod
    from autoloop.commands.progress import Progress, is_live, use_color
    from autoloop.engine.approve import TerminalReviewer
    from autoloop.engine.loop import Run, RunOptions
    from autoloop.journal.persist import save
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
                    resume=lambda ran: _resume_command(args, _cycles_left(args, program, ran)))
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
            final: Mapping[str, Any] | None, resume: Callable[[int], str] | None = None) -> None:
    """The last lines of every run that got as far as its ledger, however it ended: the
    journal's paths, the CI journal commit, and `stopped: ... baseline → best ...; branch`."""
    from autoloop.decide.end import NOTHING_KEPT
    from autoloop.journal.ledger import since_last_start

    outcome.stop_reason = reason
    outcome.this_run = since_last_start(run.journal.records)
    outcome.cycles_run = sum(outcome.this_run.values())
    outcome.incumbent = run.incumbent or outcome.incumbent
    tag = run.opt.tag
    print(f"journal: {program.state_dir / 'experiments.md'}  {program.state_dir / 'results.tsv'}", file=out)
    if outcome.journal_commit:
        print(f"journal committed on autoloop/{tag}: {outcome.journal_commit[:12]} "
              f"(push the branch, and refs/autoloop/{tag}/* for every cycle's change; the next run resumes from it)",
              file=out)
    if run.baseline is None:
        print(f"stopped: {reason}. {program.verifier.label}: no baseline was measured, so branch "
              f"autoloop/{tag} was not made", file=out)
        return
    # one gain, from facts like log/report/--json: the re-measured one when the run has it; a
    # re-measurement that did not happen says why, unless the line already does ("0 kept",
    # best = baseline) because nothing was kept
    why_not = (f"; {final['text']}" if final and final.get("text") and (final.get("skipped") or final.get("error"))
               and final.get("skipped") != NOTHING_KEPT else "")
    print(f"stopped: {reason}. {_standing(run)}; {_branch(run, tag)}{why_not}", file=out)
    if reason == "interrupted" and resume is not None:
        print(f"resume with: {resume(outcome.cycles_run)}", file=out, flush=True)


def _cycles_left(args: argparse.Namespace, program: Any, ran: int) -> int | None:
    """The cycles this invocation had left when it stopped (`ran` of them finished: an
    interrupted cycle is not one), from --cycles or stop.max_cycles; None when neither bounds it."""
    limit = args.cycles if args.cycles is not None else program.stop.max_cycles
    return None if limit is None else max(0, limit - ran)


def _resume_command(args: argparse.Namespace, cycles_left: int | None = None) -> str:
    """The command to paste after an interrupt: the same run with the options the user gave.
    --cycles and --max-minutes count in each invocation (CONTRACT §3): --cycles says the cycles
    left (`cycles_left`; after Ctrl-C at cycle 7 of 9, `--cycles 3`: cycle 7 again, 8 and 9, not
    nine more), --max-minutes is repeated as given; left out they would turn a bounded run into
    one that goes on to stop.max_cycles."""
    argv = ["autoloop", "run", args.program, "--tag", args.tag]
    cycles = args.cycles if cycles_left is None else cycles_left
    for flag, value in (("--cycles", cycles), ("--max-minutes", args.max_minutes),
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


def _branch(run: Any, tag: str) -> str:
    """`branch autoloop/x at <commit>`, or where an undone best left it, and where that best is."""
    from autoloop.commands.ci import facts_of

    f = facts_of(run.program, tag, run.journal.records)
    return f.undone if f.undone else f"branch autoloop/{tag} at {run.incumbent[:12]}"


def _standing(run: Any) -> str:
    """`score: baseline 109.04 → best 100.86, gain -25.77% (95% CI …), re-measured; 3 kept` —
    from the ledger through facts, the same numbers `log`, the report and --json show."""
    from autoloop.base.numbers import signed_pct
    from autoloop.commands.ci import facts_of
    from autoloop.journal.facts import gain_text

    label = run.program.verifier.label
    f = facts_of(run.program, run.opt.tag, run.journal.records)
    s = f.summary
    if s.baseline is None:
        return f"{label}: no baseline measured"
    gain = f", gain {gain_text(f)}" if f.headline_gain_pct is not None else \
        f", no confirmed gain: {f.refuted}" if f.refuted else ""
    if f.head_final is not None:
        # the end-of-run check measured the branch head, which a person kept against the
        # ratchet: its gain is not the best's
        gain += ("; the branch head (a person's keep) re-measured against the start: "
                 f"{signed_pct(f.head_final.get('change_pct'))}")
    return f"{label}: baseline {f.fmt(s.baseline)} → best {f.fmt(s.best)}{gain}; {s.kept} kept in total"


def newcomer_checks(program: Any, tag: str | None = None) -> list[str]:
    """Refuse an untouched `autoloop init` template (exit 2); return the warnings about
    `allowed` entries, to print once the run is past its checks (not on every resume)."""
    from autoloop.engine import hints
    from autoloop.git.workspace import require_commit
    from autoloop.journal.ledger import Journal, has_baseline

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
    return Interrupted.exit_code if isinstance(exc, KeyboardInterrupt) else 1


def _run_epilogue(args: argparse.Namespace, outcome: Any) -> None:
    """After a run however it ended: the step summary (CI) and the --json object."""
    from autoloop.commands import ci as cimod

    if outcome.program and outcome.paths:
        try:
            outcome.facts = cimod.load_facts(load_program(args.program), args.tag)
        except AutoloopError:
            outcome.facts = None
    if outcome.ci:
        step_summary(outcome.step_summary())
    if args.json:
        print(json.dumps(outcome.as_json(), indent=2, default=str), flush=True)
