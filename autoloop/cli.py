"""Command line: parses the arguments and hands them to the command's module in
autoloop.commands. With those modules, the only place that prints or picks exit codes: 0 stopped on a stop condition / success, 1 could not go on, 2 bad usage or input,
4 no Ray node can measure any more (stopped as an interruption is), 130 interrupted."""

from __future__ import annotations

import argparse
import errno
import math
import os
import signal
import sys
from importlib import import_module
from typing import Any, Callable, Sequence

from autoloop import __version__
from autoloop.base.walk import calm_gc
from autoloop.errors import (
    AutoloopError,
    ClusterLost,
    ConfigError,
    Interrupted,
)

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE if hasattr(signal, "SIGPIPE") else 141
MAX_PAIRS = 1000


class _Terminal:
    """A stream that was a terminal at the start, whose writes stop, silently, once the terminal
    is gone (EIO: its window closed while hangups are ignored, `trap '' HUP`): what was left to
    print has no reader, and the run ends as it would have, its journal closed and its exit code
    its own. Only a terminal's EIO: on a file or a pipe an error stays an error."""

    def __init__(self, stream: Any) -> None:
        self._stream, self._gone = stream, False

    def _gone_now(self, exc: OSError) -> None:
        if exc.errno != errno.EIO:
            raise exc
        self._gone = True
        _to_devnull(self._stream)   # what Python flushes at exit goes nowhere too

    def write(self, text: str) -> int:
        if not self._gone:
            try:
                return self._stream.write(text)
            except OSError as exc:
                self._gone_now(exc)
        return len(text)

    def flush(self) -> None:
        if not self._gone:
            try:
                self._stream.flush()
            except OSError as exc:
                self._gone_now(exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _to_devnull(stream: Any) -> None:
    """Point `stream`'s descriptor at /dev/null: its reader is gone, and what is left in its
    buffer, flushed at exit, must not fail again."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, stream.fileno())
        finally:
            os.close(null)
    except OSError:
        pass


def _guard_terminals() -> None:
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        try:
            tty = stream is not None and not isinstance(stream, _Terminal) and stream.isatty()
        except (OSError, ValueError):
            tty = False
        if tty:
            setattr(sys, name, _Terminal(stream))


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
    from autoloop.program.reader import (
        MAX_WORKERS,  # only when given: `init` and `--help` stay quick
    )

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

    sh = sub.add_parser("show", help="one cycle: its hypothesis, verdict, numbers and its change (diff)")
    # a string, checked by the command: a bad N gets one line, as a bad tag does
    sh.add_argument("cycle", metavar="N", help="the cycle number (0 is the baseline), as `autoloop log` lists them")
    sh.add_argument("program", nargs="?", default="program.md", help="program file (default ./program.md)")
    sh.add_argument("--tag", help="which run (default: the most recent)")
    sh.add_argument("--stat", action="store_true", help="a diffstat instead of the whole diff")
    sh.add_argument("--json", action="store_true", help="one JSON object: the facts, the commit hashes and the diff")

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
    c.add_argument("--branch", action="store_true",
                   help="also delete the branch autoloop/TAG (its kept commits) and the tag's refs that keep "
                        "every cycle's change (refs/autoloop/TAG/)")
    c.add_argument("--journal", action="store_true",
                   help="also delete the journal: the ledger, and experiments.md/results.tsv when they are this tag's")

    i = sub.add_parser("init", help="write a program.md from a template")
    i.add_argument("path", nargs="?", default=".", help="file or folder (default: ./program.md)")
    i.add_argument("--template", default="generic", help="template name (see --list)")
    i.add_argument("--list", action="store_true", help="list the templates")
    i.add_argument("--trace", metavar="COMMAND",
                   help="with --template speed: run COMMAND once at HEAD, record the calls of each --target, "
                        "and write a sealed replay benchmark (bench/) from them")
    i.add_argument("--target", action="append", default=[], metavar="MODULE:NAME",
                   help="a function, method (Class.method) or class/static method to record (repeatable)")
    i.add_argument("--replay-seconds", type=float, default=1.0, metavar="S",
                   help="seconds the targets' own calls take in one measurement, at HEAD (default 1)")
    i.add_argument("--no-probe", action="store_true", help="after writing, run `verify` but not `doctor --probe`")
    i.add_argument("--no-check", action="store_true", help="after writing, run neither `verify` nor the probe")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # a bare `--approve` means `--approve=after` (an optional value would swallow PROGRAM)
    argv = ["--approve=after" if a == "--approve" else a for a in argv]
    args = build_parser().parse_args(argv)
    calm_gc()
    _guard_terminals()
    if args.command in ("log", "report", "show", "init") and hasattr(signal, "SIGPIPE"):
        # read-only commands behave like any Unix tool in a pipe: `autoloop log | head` just
        # ends when head has read enough (a run keeps Python's handling: see BrokenPipeError)
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        # each command's module is imported only when it runs: `init` and `--help` stay quick
        return import_module(f"autoloop.commands.{args.command}").main(args)
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
        _to_devnull(sys.stdout)
        return EXIT_BROKEN_PIPE
    except Exception as exc:  # a bug of ours: one line, details only on request
        if os.environ.get("AUTOLOOP_DEBUG"):
            raise
        print(f"autoloop: internal error: {type(exc).__name__}: {exc} (set AUTOLOOP_DEBUG=1 for details)",
              file=sys.stderr)
        return 1


def _leaving() -> None:
    # all is put back: one more Ctrl-C must not break the way out (filelock's exit handlers)
    from autoloop.process.running import STOP_SIGNALS

    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


if __name__ == "__main__":
    raise SystemExit(main())
