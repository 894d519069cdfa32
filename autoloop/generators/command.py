"""`kind: command` — any program that reads the prompt on stdin and edits the work tree
(contract §6). The agent CLI presets (claude, codex, aider) build on this class."""

from __future__ import annotations

import re
from pathlib import Path

from autoloop import proc
from autoloop.errors import ConfigError, FatalGeneratorError, GeneratorError
from autoloop.generators.base import GenContext, Proposal
from autoloop.numbers import exact as fmt
from autoloop.program import GeneratorSpec, Program

_HYPOTHESIS = re.compile(r"Hypothesis:\s*(.*)", re.IGNORECASE)
_SCAN_LIMIT = 16 << 20
_LINE_LIMIT = 64 << 10


class CommandGenerator:
    def __init__(self, spec: GeneratorSpec, program: Program) -> None:
        if not spec.command and type(self) is CommandGenerator:
            raise ConfigError(f"{program.path.name}:{program.lines.get('generator', 1)}: "
                              "generator.command is required for kind 'command'")
        self.spec = spec
        self.program = program

    # ---- what presets override -----------------------------------------------------------------

    def command(self, ctx: GenContext) -> str | list[str]:
        assert self.spec.command is not None
        return self.spec.command

    def stdin(self, ctx: GenContext) -> Path | None:
        return ctx.prompt_file

    def read_report(self, res: proc.ProcResult, proposal: Proposal) -> None:
        """Fill cost/tokens/notes from the tool's own output; raise GeneratorError if it failed."""

    # ---- the protocol --------------------------------------------------------------------------

    def propose(self, ctx: GenContext) -> Proposal:
        env = dict(ctx.env)
        env.update(
            AUTOLOOP_PROMPT_FILE=str(ctx.prompt_file),
            AUTOLOOP_CYCLE=str(ctx.cycle),
            AUTOLOOP_BEST=fmt(ctx.best),
            AUTOLOOP_BASELINE=fmt(ctx.baseline),
            AUTOLOOP_HYPOTHESIS_FILE=str(ctx.hypothesis_file),
            AUTOLOOP_WORKDIR=str(ctx.workdir),
        )
        command = self.command(ctx)
        if ctx.wrap is not None:
            command = ctx.wrap(command)
        res = proc.run(command, cwd=ctx.workdir, env=env, timeout=ctx.timeout,
                       log_stem=ctx.log_dir / "generator", stdin=self.stdin(ctx), marker=ctx.run_marker,
                       limits=ctx.limits)
        if res.interrupted:
            raise GeneratorError("interrupted")
        if res.over_limit is not None:
            raise GeneratorError(f"generator {res.describe()}")
        if res.start_error is not None:
            # it will not start next cycle either
            raise FatalGeneratorError(f"cannot run the generator {_show(self.command(ctx))}: {res.start_error}")
        if not res.ok:
            tail = [ln for ln in (res.stderr_tail(2000) or res.stdout_tail(2000)).splitlines() if ln.strip()]
            raise GeneratorError(f"generator {res.describe()}" + (f": {tail[-1][:200]}" if tail else ""))
        proposal = Proposal(hypothesis=self.hypothesis(ctx, res), transcript=res.stdout_path)
        self.read_report(res, proposal)
        return proposal

    def hypothesis(self, ctx: GenContext, res: proc.ProcResult) -> str:
        try:
            written = ctx.hypothesis_file.read_text(errors="replace").strip()
        except OSError:
            written = ""
        if written:
            return " ".join(written.split())[:1000]
        found = first_hypothesis(res.stdout_path)
        return found or "(none given)"


def first_hypothesis(path: Path) -> str | None:
    """The text after the first `Hypothesis:` in a (possibly huge) output file."""
    seen = 0
    try:
        with open(path, "rb") as f:
            while seen < _SCAN_LIMIT:
                raw = f.readline(_LINE_LIMIT)  # bounded: one giant line must not fill memory
                if not raw:
                    break
                seen += len(raw)
                m = _HYPOTHESIS.search(raw.decode("utf-8", "replace"))
                if m and m.group(1).strip():
                    return " ".join(m.group(1).split())[:1000]
    except OSError:
        return None
    return None


def _show(command: str | list[str]) -> str:
    return command if isinstance(command, str) else " ".join(command)
