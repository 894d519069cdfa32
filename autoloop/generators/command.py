"""`kind: command`: any program that reads the prompt on stdin and edits the work tree (contract
§6). The agent CLI presets (autoloop.generators.agents) build on this class."""

from __future__ import annotations

import os
import re
import shlex
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Iterator, NamedTuple

from autoloop.process import logfile, proc
from autoloop.errors import ConfigError, FatalGeneratorError, GeneratorError
from autoloop.process.executables import needed_paths
from autoloop.isolation.sandbox import Sandboxed
from autoloop.git.gitrun import head_has
from autoloop.generators.base import MAX_HYPOTHESIS, GenContext, Proposal, hypothesis_in
from autoloop.base.numbers import exact as fmt
from autoloop.program.reader import GeneratorSpec, Program
from autoloop.base.walk import temp_tree

_SCAN_LIMIT = 16 << 20
_LINE_LIMIT = 64 << 10
# Exit statuses of a shell (and of bwrap's exec) for "found but not executable" / "not found":
# it will not start next cycle either.
_CANNOT_START = {126: "found but not executable", 127: "command not found"}
# A first word that is not a program on PATH: what it runs is known only to the shell.
_SHELL_WORDS = frozenset({".", ":", "[", "alias", "case", "cd", "command", "eval", "exec", "export",
                          "for", "if", "nice", "nohup", "set", "source", "test", "time", "timeout",
                          "ulimit", "umask", "until", "while", "{", "!"})
_INTERPRETER = re.compile(r"(python|pypy)[0-9.]*|node|bash|sh|dash|zsh|ruby|perl|Rscript")
_SHELL_SYNTAX = re.compile(r"[|&;<>()$`\\\"'*?\[\]#~=%{}]")


class Said(NamedTuple):
    """A short command's result and the tails of what it printed (its logs are gone)."""

    res: proc.ProcResult
    out: str
    err: str


def sandboxed(ctx: GenContext) -> Sandboxed | None:
    """The sandbox the generator runs in, as proc runs a command through it (None: unsandboxed)."""
    return None if ctx.wrap is None else Sandboxed(ctx.wrap)


def run_short(ctx: GenContext, argv: list[str], timeout: float = 120.0) -> Said:
    """Run `argv` as a cycle runs the generator (sandboxed when it is), stdin closed."""
    with temp_tree("preflight") as tmp:
        res = proc.run_wrapped(argv, sandboxed(ctx), cwd=ctx.workdir, env=dict(ctx.env), timeout=timeout,
                               log_stem=tmp / "preflight", stdin=None, marker=ctx.run_marker)
        return Said(res, res.stdout_tail(8000), res.stderr_tail(2000))


def written_hypothesis(ctx: GenContext) -> str:
    """What the generator wrote to AUTOLOOP_HYPOTHESIS_FILE, on one line ("" if nothing)."""
    written = logfile.read_regular(ctx.hypothesis_file, 64 << 10).decode(errors="replace")
    return " ".join(written.split())[:MAX_HYPOTHESIS]


class CommandGenerator:
    def __init__(self, spec: GeneratorSpec, program: Program) -> None:
        if not spec.command and type(self) is CommandGenerator:
            raise ConfigError(f"{program.path.name}:{program.lines.get('generator', 1)}: "
                              "generator.command is required for kind 'command'")
        self.spec = spec
        self.program = program

    def command(self, ctx: GenContext) -> str | list[str]:
        return self.spec.command or ""

    def stdin(self, ctx: GenContext) -> Path | None:
        return ctx.prompt_file

    def read_report(self, res: proc.ProcResult, proposal: Proposal) -> None:
        """Fill cost/tokens/notes from the tool's own output; raise GeneratorError if it failed."""

    def hypothesis(self, ctx: GenContext, res: proc.ProcResult) -> str:
        said = hypothesis_in(_head_lines(res.stdout_path))
        return written_hypothesis(ctx) or said or "(none given)"

    def program_path(self, ctx: GenContext, root: Path | None = None) -> str | None:
        """The program the command starts, resolved as its shell will (None: not knowable, e.g. a
        builtin or shell syntax). A relative path is a file of the tree `root` (default the cycle's)."""
        try:
            words = shlex.split(self.spec.command or "")
        except ValueError:
            return None
        if not words or _SHELL_SYNTAX.search(words[0]) or words[0] in _SHELL_WORDS:
            return None
        name = words[0]
        if "/" in name:
            return str(Path(root or ctx.workdir, name)) if not os.path.isabs(name) else name
        return shutil.which(name, path=ctx.env.get("PATH", os.defpath)) or name

    def sandboxed(self, ctx: GenContext) -> GenContext:
        """`ctx` with what the program resolves to (an npm `.bin` link's target, a venv's
        interpreter) readable inside the sandbox."""
        exe = self.program_path(ctx) if ctx.wrap is not None else None
        if exe is None or not os.path.isabs(exe):
            return ctx
        readable, outer = needed_paths(exe, ctx.env.get("PATH")), ctx.wrap
        return replace(ctx, wrap=lambda command: outer(command, readable=readable))

    def _refused(self, text: str) -> FatalGeneratorError:
        """`text` at the key's line of program.md, as a bad value there is said."""
        return FatalGeneratorError(f"{self.program.path.name}:{self.program.line('generator.command')}: {text}")

    def preflight(self, ctx: GenContext) -> None:
        """FatalGeneratorError unless the program can start (in the sandbox when there is one),
        before the baseline, so a run that could never propose anything stops at once."""
        # a relative path names a file of HEAD's tree (which the generator may be allowed to create)
        exe = self.program_path(ctx, root=self.program.repo_root)
        if exe is None:
            return
        words = shlex.split(self.spec.command or "")
        relative = "/" in words[0] and not os.path.isabs(words[0])
        if relative and not os.path.lexists(exe):
            if head_has(self.program.repo_root, os.path.normpath(words[0])) is not False:
                return   # HEAD's tree has it: the cycle's work tree will
            raise self._refused(f"generator.command: no such file {words[0]} (neither in your "
                                      "checkout nor in HEAD; paths are relative to the repository "
                                      "root); fix generator.command, or create and commit the script")
        if not os.path.isabs(exe):
            raise self._refused(f"generator.command: {words[0]} not found on PATH; install it, "
                                      "or name it by its full path")
        if not os.path.exists(exe):
            raise self._refused(f"generator.command: no such file {exe}; fix generator.command")
        if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
            raise self._refused(f"generator.command: {exe} is not an executable file; "
                                      "fix generator.command or chmod +x it")
        script = _script_operand(words)
        if script is not None and not (self.program.repo_root / script).exists():   # (/ keeps an absolute one)
            where = "" if os.path.isabs(script) else "in the repository; "
            raise self._refused(f"generator.command: {script} does not exist ({where}"
                                      f"{os.path.basename(exe)} would fail every cycle); fix the path, "
                                      "or commit the script")
        ctx = self.sandboxed(ctx)
        if ctx.wrap is not None and not relative:   # (the work tree is always there inside)
            # found outside; is it there inside (not under a folder the sandbox hides)?
            self.check_starts(ctx, ["/bin/sh", "-c", 'test -x "$1"', "sh", exe], words[0])

    def check_starts(self, ctx: GenContext, argv: list[str], name: str) -> str:
        """Run `argv` as the generator would run; its stdout, or FatalGeneratorError with the fix."""
        said = run_short(ctx, argv)
        res = said.res
        if res.start_error is not None or not res.ok:
            where = " inside the sandbox" if ctx.wrap is not None else ""
            why = res.start_error or last_line(said.err + "\n" + said.out, 300) or res.describe()
            fix = ("bind what it needs with sandbox.writable, or run it with sandbox: none"
                   if ctx.wrap is not None else "check that it is installed and runs")
            raise FatalGeneratorError(f"the generator {name} cannot start{where}: "
                                      f"`{' '.join(argv)}` {res.describe()}: {why}; {fix}".replace("  ", " "))
        return said.out

    def propose(self, ctx: GenContext) -> Proposal:
        ctx = self.sandboxed(ctx)
        env = {**ctx.env, "AUTOLOOP_PROMPT_FILE": str(ctx.prompt_file), "AUTOLOOP_CYCLE": str(ctx.cycle),
               "AUTOLOOP_BEST": fmt(ctx.best), "AUTOLOOP_BASELINE": fmt(ctx.baseline),
               "AUTOLOOP_HYPOTHESIS_FILE": str(ctx.hypothesis_file), "AUTOLOOP_WORKDIR": str(ctx.workdir)}
        argv = self.command(ctx)
        res = proc.run_wrapped(argv, sandboxed(ctx), cwd=ctx.workdir, env=env, timeout=ctx.timeout,
                               log_stem=ctx.log_dir / "generator", stdin=self.stdin(ctx), marker=ctx.run_marker,
                               limits=ctx.limits)
        if res.interrupted:
            raise GeneratorError("interrupted")
        if res.over_limit is not None:
            raise GeneratorError(f"generator {res.describe()}")
        if res.start_error is not None:
            raise FatalGeneratorError(f"cannot run the generator {_show(argv)}: {res.start_error}")
        if res.exit_code in _CANNOT_START:
            raise FatalGeneratorError(
                f"the generator {_show(argv)[:200]} {_CANNOT_START[res.exit_code]} (exit "
                f"{res.exit_code}): {last_line(res.stderr_tail(500))}; "
                "fix generator.command (autoloop doctor checks it)")
        if not res.ok:
            tail = last_line(res.stderr_tail(2000) or res.stdout_tail(2000))
            raise GeneratorError(f"generator {res.describe()}" + (f": {tail}" if tail else ""))
        proposal = Proposal(hypothesis=self.hypothesis(ctx, res), transcript=res.stdout_path)
        self.read_report(res, proposal)
        return proposal


def _script_operand(words: list[str]) -> str | None:
    """The script an interpreter runs (`python3 gen.py` -> gen.py); None for `-m`/`-c`/stdin."""
    if len(words) < 2 or not _INTERPRETER.fullmatch(os.path.basename(words[0])):
        return None
    for word in words[1:]:
        if word in ("-m", "-c", "-e", "-", "--"):
            return None
        if not word.startswith("-"):
            return word if ("/" in word or "." in word) and not _SHELL_SYNTAX.search(word) else None
    return None


def _head_lines(path: Path) -> Iterator[str]:
    """The lines of a possibly huge output file: its first 16 MiB, in pieces of at most 64 KiB."""
    seen = 0
    try:
        with open(path, "rb") as f:
            while seen < _SCAN_LIMIT and (raw := f.readline(_LINE_LIMIT)):
                seen += len(raw)
                yield raw.decode("utf-8", "replace")
    except OSError:
        return


def last_line(text: str, limit: int = 200) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:limit] if lines else ""


def _show(command: str | list[str]) -> str:
    return command if isinstance(command, str) else " ".join(command)
