"""`kind: aider`: aider, one message and exit, driven through the command protocol (see agents)."""

from __future__ import annotations

import re
import stat
from pathlib import Path

from autoloop.process import proc
from autoloop.errors import FatalGeneratorError
from autoloop.generators.agents import AgentGenerator, AgentReportError, read_output
from autoloop.generators.base import GenContext, Proposal, hypothesis_in
from autoloop.generators.llm_common import cost_usd
from autoloop.base.walk import walk

_MAX_AIDER_FILES = 50
_AIDER_COUNT = r"(\d[\d,]*(?:\.\d+)?[kKmM]?)"
_AIDER_TOKENS = re.compile(_AIDER_COUNT + r"\s+(sent|cache write|cache hit|cached|received)")
_AIDER_COST = re.compile(r"Cost:\s*\$(\d+(?:\.\d+)?)\s+message,\s*\$(\d+(?:\.\d+)?)\s+session")
# aider must not commit, stage or edit .gitignore (autoloop owns git), nor ask, check, stream or phone
_AIDER_OFF = ("auto-commits", "dirty-commits", "git", "gitignore", "stream", "pretty", "check-update",
              "show-release-notes", "analytics", "suggest-shell-commands", "detect-urls")
_AIDER_LLM_ERROR = re.compile(r"^\s*litellm\.(\w+)", re.MULTILINE)


class AiderGenerator(AgentGenerator):
    """aider, one message and exit (`--message-file`), the allowed files that exist in the chat.
    Its history files go to the cycle's log folder (in the work tree they would be a change
    outside `allowed`) and double as the transcript. It prints text, not a report: best effort."""

    tool = "aider"
    install_hint = "aider (pip install aider-chat)"

    def defaults(self, ctx: GenContext) -> list[tuple[tuple[str, ...], list[str]]]:
        return [
            (("--message-file", "-f", "--message", "--msg", "-m"),
             ["--message-file", str(ctx.prompt_file)]),
            (("--yes-always",), ["--yes-always"]),
            *(((f"--{flag}", f"--no-{flag}"), [f"--no-{flag}"]) for flag in _AIDER_OFF),
            (("--input-history-file",),
             ["--input-history-file", str(ctx.log_dir / "aider.input.history")]),
            (("--chat-history-file",),
             ["--chat-history-file", str(ctx.log_dir / "aider.chat.history.md")]),
        ]

    def auth_status(self, ctx: GenContext) -> tuple[bool | None, str]:
        # aider has no status command; the keys litellm reads for the common providers, or a
        # key given in generator.args, are what can be seen without a request.
        args = " ".join(self.spec.args)
        if "--api-key" in args or "-api-key" in args:
            return True, "a key is given in generator.args"
        found = sorted(k for k in ctx.env if k.endswith("_API_KEY") and ctx.env[k])
        if found:
            return True, "key in the environment: " + ", ".join(found[:4])
        return None, ("no *_API_KEY in the environment (a key in .aider.conf.yml or .env may still "
                      "work); aider only says on its first request")

    def stdin(self, ctx: GenContext) -> Path | None:
        # The prompt goes by --message-file; were aider ever to ask a question anyway, it must
        # read EOF, not the prompt's first line as the answer.
        return None

    def trailing(self, ctx: GenContext) -> list[str]:
        files, _ = allowed_files(ctx, _MAX_AIDER_FILES)
        # `./` keeps a file named like an option from being read as one.
        return [f"./{rel}" for rel in files]

    def propose(self, ctx: GenContext) -> Proposal:
        files, total = allowed_files(ctx, _MAX_AIDER_FILES)   # before aider may create more
        proposal = super().propose(ctx)
        if total > len(files):
            proposal.notes.append(f"aider: {total} allowed files exist; the first {len(files)} "
                                  "were added to the chat")
        chat = ctx.log_dir / "aider.chat.history.md"
        if chat.exists():
            proposal.meta["chat_history"] = str(chat)
        return proposal

    def parse(self, out: Path, err: Path, proposal: Proposal) -> None:
        text = read_output(out)
        last_usage = -1
        cost: float | None = None
        for m in re.finditer(r"Tokens:[^\n]*", text):
            counts = {kind: _aider_count(n) for n, kind in _AIDER_TOKENS.findall(m.group(0))}
            proposal.tokens_in += counts.get("sent", 0)
            proposal.tokens_out += counts.get("received", 0)
            proposal.turns += 1
            last_usage = m.end()
        for m in _AIDER_COST.finditer(text):
            cost = float(m.group(2))    # the session total so far; the last one is the run's
        proposal.cost_usd = cost if cost is not None else (
            cost_usd(proposal.tokens_in, proposal.tokens_out, self.spec.price)
            if proposal.turns else None)
        proposal.meta["tool"] = "aider"
        for source, where in ((text, "stdout"), (read_output(err), "stderr")):
            for m in _AIDER_LLM_ERROR.finditer(source):
                line = source[m.start():].strip().splitlines()[0][:300]
                if m.group(1) in ("AuthenticationError", "PermissionDeniedError"):
                    raise FatalGeneratorError(f"aider cannot authenticate: {line}")
                # aider retries transient errors itself; an error printed after its last usage
                # report is what ended the run (stderr has no order relative to stdout).
                if where == "stdout" and m.start() > last_usage:
                    raise AgentReportError(f"aider: {line}", proposal)

    def output_hypothesis(self, ctx: GenContext, res: proc.ProcResult) -> str | None:
        # Skip lines that are the prompt's own (a prompt that says "end with `Hypothesis: ...`"
        # must not become the hypothesis if aider echoes it).
        try:
            prompt_lines = {ln.strip() for ln in ctx.prompt_file.read_text(errors="replace").splitlines()}
        except OSError:
            prompt_lines = set()
        text = read_output(res.stdout_path)
        return hypothesis_in(ln for ln in text.splitlines() if ln.strip() not in prompt_lines)


def _aider_count(text: str) -> int:
    """aider's token counts: `1,234`, `12.3k`, `45k`, `1.2M`."""
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1].lower(), 1)
    number = text[:-1] if scale != 1 else text
    try:
        return int(round(float(number.replace(",", "")) * scale))
    except ValueError:
        return 0


def allowed_files(ctx: GenContext, limit: int) -> tuple[list[str], int]:
    """Regular files of the work tree the generator may edit: (the first `limit`, sorted; how
    many there are). Symlinks are left out — an edit through one lands somewhere else."""
    found = sorted(rel for rel, _, st in walk(str(ctx.workdir), skip={".git"})
                   if st is not None and stat.S_ISREG(st.st_mode) and ctx.is_allowed(rel))
    return found[:limit], len(found)
