"""Command line. The only module that prints or picks exit codes:
0 stopped on a stop condition / success, 1 could not go on, 2 bad usage or input, 130 interrupted."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
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


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="autoloop", description="Ratchet loops on a git repository.")
    p.add_argument("--version", action="version", version=f"autoloop {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    r = sub.add_parser("run", help="run the ratchet loop on branch autoloop/TAG")
    r.add_argument("program", nargs="?", default="program.md", help="program file (default ./program.md)")
    r.add_argument("--tag", required=True, help="run name; commits go on branch autoloop/TAG")
    r.add_argument("--cycles", type=_cycles, help="cycles in this invocation (overrides stop.max_cycles)")

    v = sub.add_parser("verify", help="measure the current checkout (guards + metric); changes nothing")
    v.add_argument("program", nargs="?", default="program.md")

    lg = sub.add_parser("log", help="the cycles of a run and its summary")
    lg.add_argument("program", nargs="?", default="program.md")
    lg.add_argument("--tag", help="which run (default: the most recent)")

    i = sub.add_parser("init", help="write a program.md from a template")
    i.add_argument("path", nargs="?", default=".", help="file or folder (default: ./program.md)")
    i.add_argument("--template", default="generic", help="template name (see --list)")
    i.add_argument("--list", action="store_true", help="list the templates")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return {"run": cmd_run, "verify": cmd_verify, "log": cmd_log, "init": cmd_init}[args.command](args)
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        return exc.exit_code
    except Interrupted:
        print("autoloop: interrupted; the work tree is back at the incumbent and the journal is whole",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    except AutoloopError as exc:
        print(f"autoloop: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("autoloop: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # a bug of ours: one line, details only on request
        if os.environ.get("AUTOLOOP_DEBUG"):
            raise
        print(f"autoloop: internal error: {type(exc).__name__}: {exc} (set AUTOLOOP_DEBUG=1 for details)",
              file=sys.stderr)
        return 1


def _load(path_text: str):  # -> Program
    from autoloop.program import load_program

    return load_program(Path(path_text).expanduser().absolute())


# ---- run ---------------------------------------------------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    from autoloop.loop import Run, RunOptions

    program = _load(args.program)
    printer = _Progress(program.verifier.label)
    run = Run(program, RunOptions(tag=args.tag, cycles=args.cycles, report=printer))
    summary = run.execute()
    gain = _gain(summary.baseline, summary.best)
    print(f"stopped: {summary.stop_reason}. {program.verifier.label}: baseline {_f(summary.baseline)}"
          f" → best {_f(summary.best)}{gain}; {summary.kept} kept in total; branch autoloop/{summary.tag}"
          f" at {summary.incumbent[:12]}")
    print(f"journal: {program.state_dir / 'experiments.md'}  {program.state_dir / 'results.tsv'}")
    return 0


class _Progress:
    """Plain progress lines, one per cycle (safe for logs and CI)."""

    def __init__(self, metric: str) -> None:
        self.metric = metric

    def __call__(self, event: str, data: Mapping[str, Any]) -> None:
        if event != "cycle":
            return
        hyp = " ".join(str(data.get("hypothesis", "")).split())
        if len(hyp) > 70:
            hyp = hyp[:69] + "…"
        line = (f"cycle {data['cycle']:>4}  {data['status']:<10} {self.metric} {_f(data.get('metric')) or '-':>10}"
                f"  best {_f(data.get('best')):>10}  {data.get('duration_s', 0):6.1f}s  {hyp}")
        print(line, flush=True)
        if data["status"] not in ("keep", "baseline", "discard"):
            print(f"            {data.get('lesson', '')}"[:200], flush=True)


def _f(x: float | None) -> str:
    return "" if x is None else f"{x:.6g}"


def _gain(a: float | None, b: float | None) -> str:
    if a is None or b is None or a == 0:
        return ""
    return f" ({(b - a) / abs(a) * 100:+.2f}%)"


# ---- verify ------------------------------------------------------------------------------------


def cmd_verify(args: argparse.Namespace) -> int:
    from autoloop import proc
    from autoloop.envs import measurement_env
    from autoloop.verify import measure

    program = _load(args.program)
    log_dir = Path(tempfile.mkdtemp(prefix="autoloop-verify-"))
    print(f"verifying {program.repo_root} (current checkout, nothing is changed)")
    # the same scrubbed environment as a run's measurements (autoloop.envs)
    with measurement_env(os.environ, parent=log_dir / "scratch") as env:
        m = measure(program, cwd=program.repo_root, env=env, log_dir=log_dir, marker=proc.new_marker())
    for g in m.guards:
        print(f"guard {g.name}: {'pass' if g.ok else 'FAIL'} ({g.detail}, {g.duration_s:.1f}s)")
    if not m.guards_ok:
        print(f"logs: {log_dir}")
        return 1
    if m.metric is None:
        print(f"verifier: no metric: {m.error}")
        if m.log_stem is not None:
            print(proc.read_tail(m.log_stem.with_name("verifier.out"), 2000).rstrip())
            print(proc.read_tail(m.log_stem.with_name("verifier.err"), 2000).rstrip())
        print(f"logs: {log_dir}")
        return 1
    v = program.verifier
    print(f"{v.label}: {_f(m.metric)}  ({v.direction}, {m.duration_s:.1f}s)")
    print(f"logs: {log_dir}")
    return 0


# ---- log ---------------------------------------------------------------------------------------


def cmd_log(args: argparse.Namespace) -> int:
    from autoloop.journal import Journal
    from autoloop.summary import summarize

    program = _load(args.program)
    tag = args.tag or _latest_tag(program.state_dir)
    journal = Journal(program.state_dir, tag)
    if not journal.exists():
        raise UsageError(f"no run '{tag}' next to {program.path.name} (no {journal.ledger})")
    journal.load()
    cycles = journal.cycles()
    name = program.verifier.label
    print(f"run autoloop/{tag} — {program.goal}")
    print(f"{'cycle':>5}  {'status':<10} {name:>12} {'best':>12}  hypothesis / lesson")
    for c in cycles:
        hyp = " ".join(str(c.get("hypothesis", "")).split())[:60]
        print(f"{c['cycle']:>5}  {c['status']:<10} {_f(c.get('metric')) or '-':>12} {_f(c.get('best')):>12}  {hyp}")
    s = summarize(cycles, program.verifier.direction)
    print()
    print(f"baseline   {_f(s.baseline) or '-'}")
    print(f"best       {_f(s.best) or '-'}")
    print(f"gain       {'-' if s.gain_pct is None else f'{s.gain_pct:+.2f}%'}")
    rate = "-" if s.keep_rate is None else f"{s.keep_rate * 100:.0f}% ({s.kept} of {s.cycles})"
    print(f"keep rate  {rate}")
    print("by status  " + (", ".join(f"{k} {v}" for k, v in s.by_status.items()) or "-"))
    print(f"trend      {s.trend}")
    if s.cost_usd:
        per_keep = f", ${s.cost_per_keep:.2f} per kept change" if s.cost_per_keep is not None else ""
        per_unit = (f", {_usd(s.cost_per_unit_gain)} per unit of {name} gained"
                    if s.cost_per_unit_gain is not None else "")
        print(f"cost       ${s.cost_usd:.2f}{per_keep}{per_unit}, {s.tokens} tokens")
    return 0


def _usd(x: float) -> str:
    return f"${x:.2f}" if abs(x) >= 0.01 else f"${x:.2g}"


def _latest_tag(state_dir: Path) -> str:
    ledgers = sorted((state_dir / ".autoloop").glob("*/ledger.jsonl"), key=lambda p: p.stat().st_mtime)
    if not ledgers:
        raise UsageError(f"no autoloop run found in {state_dir} (run `autoloop run --tag NAME` first)")
    return ledgers[-1].parent.name


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
