"""`kind: claude | codex | aider` — agent CLIs driven through the command protocol (contract §6).

Each preset is an argv (never a shell string) with defaults chosen so the tool edits the work tree
without asking anyone anything, touches nothing else that autoloop owns (git, files outside the
tree), and reports what it spent in a form we can read back:

    claude  -p --output-format json --permission-mode acceptEdits
            --disallowedTools Bash,WebFetch,WebSearch                 (prompt on stdin)
    codex   exec --json --sandbox workspace-write --skip-git-repo-check -   (prompt on stdin)
    aider   --message-file PROMPT --yes-always --no-auto-commits --no-dirty-commits --no-git
            --no-gitignore --no-stream --no-pretty --no-check-update --no-show-release-notes
            --no-analytics --no-suggest-shell-commands --no-detect-urls
            --input-history-file LOG --chat-history-file LOG  ./ALLOWED-FILE ...

`generator.model` adds the tool's model flag, `generator.args` are appended, and an appended
flag that sets the same option as a default replaces that default (so `--sandbox read-only` or
`--disallowedTools WebFetch` is honoured instead of clashing). `generator.command` replaces the
executable; it is split like a shell word list, so `npx @anthropic-ai/claude-code` works too.

The tool's report is read for cost, tokens, turns and errors. It is never trusted about what
changed: autoloop computes the change set from the disk.

Where the flags and shapes come from (re-check them here when a tool changes):
- claude: code.claude.com/docs/en/cli-reference and /headless (flags, `-p` reads stdin,
  `acceptEdits`, bare-name `--disallowedTools` removes a tool); the Agent SDK's
  `SDKResultMessage` (type, subtype, is_error, result, errors, total_cost_usd, num_turns, usage,
  permission_denials, session_id).
- codex: openai/codex `codex-rs/exec/src/cli.rs` (`--json`, `--skip-git-repo-check`, prompt `-`
  = stdin), `utils/cli` SharedCliOptions and SandboxModeCliArg (`--sandbox workspace-write`,
  `-m/--model`), `codex-rs/exec/src/exec_events.rs` and `docs/exec.md` (the JSONL events);
  issue openai/codex#32984 (`error` events that are only retries).
- aider: Aider-AI/aider `aider/args.py` (every flag used), `coders/base_coder.py` and
  `utils.format_tokens` (the `Tokens: ... Cost: ...` line).
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shlex
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar, Iterator, Mapping, Sequence

from autoloop import proc
from autoloop.executables import needed_paths
from autoloop.errors import FatalGeneratorError, GeneratorError
from autoloop.generators.base import GenContext, Proposal
from autoloop.generators.command import CommandGenerator
from autoloop.program import GeneratorSpec, PriceSpec, Program

# Reports bigger than this are read from their tail only: the result we want comes last, and a
# runaway tool must not cost us its whole output in memory.
_READ_LIMIT = 32 << 20
_MAX_NOTES = 20
_NOTE_LEN = 200
# CommandGenerator.propose writes the tool's output to `<log_dir>/generator.out|.err`; we read
# them back when it raises on a non-zero exit, because the tool's own report says more.
_LOG_STEM = "generator"

_HYPOTHESIS = re.compile(r"Hypothesis:[*_`\s]*(.*)", re.IGNORECASE)
_SENTENCE = re.compile(r"(.+?[.!?])(?:\s|$)", re.DOTALL)
# Messages meaning "this will fail every cycle until a human logs in or fixes a key".
_AUTH_PROBLEM = re.compile(
    r"invalid api key|invalid x-api-key|please run /login|not logged in|authentication_error"
    r"|authentication_failed|authenticationerror|permissiondeniederror|unauthori[sz]ed",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class AgentState:
    """Where an agent CLI keeps its state, so each run can give it a private, writable copy
    (inside the sandbox the user's home is read-only, and the real state must not become the
    generator's to rewrite).

    `env`: the variable that moves the state folder (the copy's path is put there);
    `home`: where the folder is when the variable is unset (`~` expanded);
    `files`: single files beside it that go into the copy (`~/.claude.json` → `.claude.json`);
    `copy`: what of the folder is copied — its top-level files and these sub-folders (sessions,
    logs and caches are left behind: the copy is for settings and credentials)."""

    env: str
    home: str
    files: tuple[tuple[str, str], ...] = ()
    copy: tuple[str, ...] = ()
    defaults: tuple[tuple[str, str], ...] = ()   # more variables, set only when the user has not


_STATE_FILE_LIMIT = 4 << 20


def private_state(state: AgentState, environ: Mapping[str, str]) -> Path:
    """A fresh private copy of the agent's state (0700, removed when autoloop exits)."""
    root = Path(tempfile.mkdtemp(prefix="autoloop-agent-state-"))
    atexit.register(shutil.rmtree, root, True)
    source = Path(environ.get(state.env) or os.path.expanduser(state.home))
    if source.is_dir() and not source.is_symlink():
        for entry in source.iterdir():
            try:
                if entry.is_file() and not entry.is_symlink() and entry.stat().st_size <= _STATE_FILE_LIMIT:
                    shutil.copy2(entry, root / entry.name)
                elif entry.name in state.copy and entry.is_dir() and not entry.is_symlink():
                    shutil.copytree(entry, root / entry.name, symlinks=True)
            except OSError:
                continue   # unreadable leftovers of the agent's own: not needed to start
    for src, dst in state.files:
        path = Path(os.path.expanduser(src))
        if state.env in environ:
            continue   # the user moved the state: the files beside the home default are not it
        try:
            if path.is_file() and not path.is_symlink() and path.stat().st_size <= _STATE_FILE_LIMIT:
                shutil.copy2(path, root / dst)
        except OSError:
            continue
    return root


class AgentReportError(GeneratorError):
    """The agent's run failed (the cycle is `gen_error`); `proposal` holds what it reported."""


class _Unparseable(AgentReportError):
    """The output is not the report shape we asked the tool for."""


# ---------------------------------------------------------------------------------- shared base


class AgentGenerator(CommandGenerator):
    """A CommandGenerator whose command is a known agent CLI. Subclasses give the argv and read
    the report; this class finds the executable and turns failures into clear errors."""

    tool: ClassVar[str] = ""
    install_hint: ClassVar[str] = ""
    model_flag: ClassVar[tuple[str, ...]] = ("--model",)
    state: ClassVar[AgentState | None] = None
    version_argv: ClassVar[tuple[str, ...]] = ("--version",)

    _state_dir: Path | None = None

    # ---- the sandbox it lives in -------------------------------------------------------------

    def program_path(self, ctx: GenContext) -> str | None:
        return self.executable(ctx)[0]

    def network(self) -> bool | None:
        """Agent CLIs talk to their API: network on in the sandbox unless program.md says."""
        return None if "sandbox.network" in self.program.lines else True

    def sandboxed(self, ctx: GenContext) -> GenContext:
        env = dict(ctx.env)
        for key, value in self.state.defaults if self.state is not None else ():
            env.setdefault(key, value)
        if ctx.wrap is None:
            # Unsandboxed the agent keeps the user's own state, as it would outside autoloop.
            return replace(ctx, env=env)
        writable: list[Path] = []
        if self.state is not None:
            if self._state_dir is None:
                self._state_dir = private_state(self.state, ctx.env)
            env[self.state.env] = str(self._state_dir)
            writable.append(self._state_dir)
        readable = needed_paths(self.executable(ctx)[0], ctx.env.get("PATH"))
        outer, network = ctx.wrap, self.network()
        return replace(ctx, env=env, wrap=lambda command: outer(
            command, readable=readable, writable=writable, network=network))

    def auth_status(self, ctx: GenContext) -> tuple[bool | None, str]:
        """Is the tool logged in / does it have a key — as far as it can say without spending
        tokens, and inside the sandbox with the state the cycles get. (True/False/None = cannot
        tell, and what was found.)"""
        return None, "cannot tell without sending a request"

    def _quiet(self, ctx: GenContext, argv: list[str]) -> tuple[int, str] | None:
        """(exit code, stdout + stderr) of a status command run as a cycle would run the tool."""
        ctx = self.sandboxed(ctx)
        command = ctx.wrap(argv) if ctx.wrap is not None else argv
        with tempfile.TemporaryDirectory(prefix="autoloop-status-") as tmp:
            res = proc.run(command, cwd=ctx.workdir, env=dict(ctx.env), timeout=60.0,
                           log_stem=Path(tmp) / "status", stdin=None, marker=ctx.run_marker)
            said = res.stdout_tail(8000) + "\n" + res.stderr_tail(2000)
        if res.exit_code is None or res.start_error is not None:
            return None
        return res.exit_code, said

    def preflight(self, ctx: GenContext) -> str | None:
        """The tool is found, and starts (`--version`) inside the sandbox the cycles will use;
        returns what it said its version is."""
        exe = self.executable(ctx)
        ctx = self.sandboxed(ctx)
        said = self.check_starts(ctx, [*exe, *self.version_argv], os.path.basename(exe[0]))
        return (said.strip().splitlines() or [""])[0][:100] or None

    # ---- argv ------------------------------------------------------------------------------

    def executable(self, ctx: GenContext) -> list[str]:
        """argv prefix for the tool, its program resolved now so a missing tool stops the run
        with a message instead of failing every cycle with `exit 127`."""
        words = shlex.split(self.spec.command) if self.spec.command else []
        if not words:
            words = [self.tool]
        name = os.path.expanduser(words[0])
        if "/" in name:
            # Paths in program.md are relative to the repository root, not to the work tree the
            # tool runs in (a private copy the generator may even be allowed to edit).
            path = Path(name) if os.path.isabs(name) else self.program.repo_root / name
            if not (path.is_file() and os.access(path, os.X_OK)):
                raise FatalGeneratorError(f"generator.command: {path} is not an executable file")
            return [str(path), *words[1:]]
        # The same lookup the child's exec will do: the spec env's PATH, else the default.
        found = shutil.which(name, path=ctx.env.get("PATH", os.defpath))
        if found is None:
            raise FatalGeneratorError(
                f"{words[0]} not found on PATH; install {self.install_hint} or set generator.command")
        return [found, *words[1:]]

    def defaults(self, ctx: GenContext) -> list[tuple[tuple[str, ...], list[str]]]:
        """(option names, argv) pairs; a pair is dropped when generator.args sets that option."""
        raise NotImplementedError

    def trailing(self, ctx: GenContext) -> list[str]:
        """argv that must come after the user's args (a prompt marker, file names)."""
        return []

    def command(self, ctx: GenContext) -> list[str]:
        user = list(self.spec.args)
        argv = self.executable(ctx)
        for names, words in self.defaults(ctx):
            if not _sets_option(user, names):
                argv += words
        if self.spec.model and not _sets_option(user, self.model_flag):
            argv += [self.model_flag[0], self.spec.model]
        return argv + user + self.trailing(ctx)

    # ---- the report ------------------------------------------------------------------------

    def parse(self, out: Path, err: Path, proposal: Proposal) -> None:
        """Fill `proposal` from the tool's output, field by field as they are found (so a caller
        that catches the error still has the usage); raise AgentReportError if the run failed."""
        raise NotImplementedError

    def read_report(self, res: proc.ProcResult, proposal: Proposal) -> None:
        self.parse(res.stdout_path, res.stderr_path, proposal)

    def output_hypothesis(self, ctx: GenContext, res: proc.ProcResult) -> str | None:
        """The hypothesis the tool's output gives, when the hypothesis file was not written."""
        raise NotImplementedError

    def hypothesis(self, ctx: GenContext, res: proc.ProcResult) -> str:
        # The default scans raw stdout, which for a JSON-printing tool finds `Hypothesis:` inside
        # an escaped string. The file still wins, as the contract says.
        written = _hypothesis_file(ctx)
        if written:
            return written
        return self.output_hypothesis(ctx, res) or "(none given)"

    def propose(self, ctx: GenContext) -> Proposal:
        try:
            return super().propose(ctx)
        except AgentReportError:
            raise
        except GeneratorError as exc:
            # CommandGenerator's Ctrl-C/SIGTERM signal: there is no report to read.
            if str(exc) == "interrupted":
                raise
            raise self._explain(ctx, exc) from exc

    def _explain(self, ctx: GenContext, exc: GeneratorError) -> AgentReportError:
        """A non-zero exit: the tool's own report names the error better than a stderr tail,
        and says what the failed run cost."""
        out = ctx.log_dir / f"{_LOG_STEM}.out"
        err = ctx.log_dir / f"{_LOG_STEM}.err"
        spent = Proposal(transcript=out if out.exists() else None)
        try:
            self.parse(out, err, spent)
        except _Unparseable:
            return AgentReportError(str(exc), spent)
        except AgentReportError as reported:
            # A timeout's partial report ("no completed turn") would hide the real cause.
            message = str(exc) if "timed out" in str(exc) else str(reported)
            return AgentReportError(message, spent)
        return AgentReportError(str(exc), spent)


def _sets_option(args: Sequence[str], names: Sequence[str]) -> bool:
    """Does `args` set one of the options `names` (`--x v`, `--x=v`, `-s v`)?"""
    for arg in args:
        for name in names:
            if arg == name or (name.startswith("--") and arg.startswith(name + "=")):
                return True
    return False


def _hypothesis_file(ctx: GenContext) -> str:
    try:
        written = proc.read_regular(ctx.hypothesis_file, 64 << 10).decode(errors="replace").strip()
    except OSError:
        return ""
    return " ".join(written.split())[:1000]


def hypothesis_in(text: str) -> str | None:
    """The text after the first `Hypothesis:` (markdown emphasis tolerated), or None."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = _HYPOTHESIS.search(line)
        if not m:
            continue
        found = m.group(1).strip().strip("*_`").strip()
        if not found:
            # `Hypothesis:` as a heading, the sentence on the next non-empty line.
            found = next((ln.strip() for ln in lines[i + 1:] if ln.strip()), "")
        if found:
            return " ".join(found.split())[:1000]
    return None


def first_sentence(text: str) -> str | None:
    flat = " ".join(text.split())
    if not flat:
        return None
    m = _SENTENCE.match(flat)
    return (m.group(1) if m else flat)[:300]


def _read_text(path: Path) -> str:
    # the agent's output files sit where the agent could have planted something in their place:
    # read them the one way autoloop reads such files (regular only, no link followed, bounded)
    return proc.read_regular(path, _READ_LIMIT, tail=True).decode("utf-8", "replace")


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:_NOTE_LEN] if lines else ""


def _dict(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


def _int(x: Any) -> int:
    return int(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else 0


def _price(tokens_in: int, tokens_out: int, price: PriceSpec | None) -> float | None:
    if price is None:
        return None
    return round((tokens_in * price.input + tokens_out * price.output) / 1_000_000, 8)


def _check_auth(tool: str, message: str) -> None:
    if _AUTH_PROBLEM.search(message):
        raise FatalGeneratorError(f"{tool} cannot authenticate: {message[:300]}")


# ---------------------------------------------------------------------------------- Claude Code


class ClaudeGenerator(AgentGenerator):
    """Claude Code headless: `claude -p --output-format json`, the prompt on stdin.

    `acceptEdits` lets it edit files in its working directory without prompting. Shell and
    network tools are removed from its context: a ratchet's judge is the verifier, and in `-p`
    mode a tool that needs permission is denied (or aborts the run) with no one to ask.
    Pass your own `--disallowedTools` / `--allowedTools` in generator.args to change that.
    """

    tool = "claude"
    install_hint = "Claude Code"
    # CLAUDE_CONFIG_DIR moves ~/.claude and ~/.claude.json together.
    state = AgentState(env="CLAUDE_CONFIG_DIR", home="~/.claude",
                       files=(("~/.claude.json", ".claude.json"),),
                       copy=("agents", "commands", "skills"),
                       # No update in the middle of an experiment; and a 401 is retried for
                       # minutes with Claude Code's own retry count (3 still rides out a 529).
                       defaults=(("DISABLE_AUTOUPDATER", "1"), ("CLAUDE_CODE_MAX_RETRIES", "3")))

    def defaults(self, ctx: GenContext) -> list[tuple[tuple[str, ...], list[str]]]:
        return [
            (("-p", "--print"), ["-p"]),
            (("--output-format",), ["--output-format", "json"]),
            (("--permission-mode", "--dangerously-skip-permissions"),
             ["--permission-mode", "acceptEdits"]),
            (("--disallowedTools", "--disallowed-tools"),
             ["--disallowedTools", "Bash,WebFetch,WebSearch"]),
        ]

    def auth_status(self, ctx: GenContext) -> tuple[bool | None, str]:
        # `claude auth status` (JSON: loggedIn, authMethod, apiKeySource; exit 1 when not).
        res = self._quiet(ctx, [*self.executable(ctx), "auth", "status"])
        if res is None:
            return None, "`claude auth status` did not answer"
        code, said = res
        info = _last_json(said)
        if info is None:
            return None, f"`claude auth status` exit {code}: {_last_line(said) or 'no output'}"
        if info.get("loggedIn") is True:
            how = str(info.get("apiKeySource") or info.get("authMethod") or "yes")
            return True, f"logged in ({how})"
        return False, "not logged in: run `claude` once and /login, or set ANTHROPIC_API_KEY"

    def parse(self, out: Path, err: Path, proposal: Proposal) -> None:
        result = _last_json_object(_read_text(out), want_type="result")
        if result is None:
            tail = _last_line(_read_text(err)) or _last_line(_read_text(out))
            raise _Unparseable("claude printed no JSON result" + (f": {tail}" if tail else ""))
        usage = _dict(result.get("usage"))
        proposal.tokens_in = sum(_int(usage.get(k)) for k in (
            "input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"))
        proposal.tokens_out = _int(usage.get("output_tokens"))
        proposal.turns = _int(result.get("num_turns"))
        # `cost_usd` is what versions before the SDK rename printed.
        cost = result.get("total_cost_usd", result.get("cost_usd"))
        if isinstance(cost, (int, float)) and not isinstance(cost, bool):
            proposal.cost_usd = float(cost)
        else:
            proposal.cost_usd = _price(proposal.tokens_in, proposal.tokens_out, self.spec.price)
        denials = result.get("permission_denials")
        denials = denials if isinstance(denials, list) else []
        for denial in denials[:_MAX_NOTES]:
            proposal.notes.append(_denial_note(denial))
        subtype = str(result.get("subtype", ""))
        proposal.meta.update({
            "tool": "claude",
            "session_id": str(result.get("session_id", "")),
            "subtype": subtype,
            "duration_ms": _int(result.get("duration_ms")),
            "cache_read_tokens": _int(usage.get("cache_read_input_tokens")),
            "cache_write_tokens": _int(usage.get("cache_creation_input_tokens")),
            "permission_denials": len(denials),
        })
        if result.get("is_error") is True or subtype != "success":
            errors = result.get("errors")
            detail = "; ".join(str(e) for e in errors) if isinstance(errors, list) and errors else ""
            detail = detail or str(result.get("result") or "") or subtype or "no detail"
            status = result.get("api_error_status")
            if status in (401, 403):
                raise FatalGeneratorError(f"claude cannot authenticate (HTTP {status}): {detail[:300]}")
            _check_auth("claude", detail)
            raise AgentReportError(f"claude reported an error ({subtype or 'is_error'}): "
                                   f"{' '.join(detail.split())[:500]}", proposal)

    def output_hypothesis(self, ctx: GenContext, res: proc.ProcResult) -> str | None:
        result = _last_json_object(_read_text(res.stdout_path), want_type="result")
        text = result.get("result") if result else None
        if not isinstance(text, str):
            return None
        return hypothesis_in(text) or first_sentence(text)


def _denial_note(denial: Any) -> str:
    if not isinstance(denial, dict):
        return "claude: permission denied"
    name = str(denial.get("tool_name", "a tool"))
    tool_input = denial.get("tool_input")
    target = ""
    if isinstance(tool_input, dict):
        for key in ("file_path", "path", "command", "url", "pattern"):
            if isinstance(tool_input.get(key), str):
                target = " " + " ".join(tool_input[key].split())
                break
    return f"claude: permission denied: {name}{target}"[:_NOTE_LEN]


def _last_json_object(text: str, want_type: str) -> dict[str, Any] | None:
    """The last JSON object of type `want_type` in `text`: one object per line, as
    `--output-format json` (and `stream-json`, whose last line is the result) print them;
    a pretty-printed object works too."""
    for obj in reversed(list(_json_lines(text))):
        if obj.get("type") == want_type:
            return obj
    try:
        whole = json.loads(text)
    except ValueError:
        return None
    return whole if isinstance(whole, dict) and whole.get("type") == want_type else None


# ----------------------------------------------------------------------------------- Codex CLI


class CodexGenerator(AgentGenerator):
    """Codex CLI: `codex exec --json ... -`, the prompt on stdin (a file, so it sees EOF and never
    waits on an open pipe). Unsandboxed, `workspace-write` lets it write its working directory
    only; inside autoloop's sandbox it runs `danger-full-access` within ours."""

    tool = "codex"
    install_hint = "the Codex CLI"
    model_flag = ("--model", "-m")
    state = AgentState(env="CODEX_HOME", home="~/.codex", copy=("prompts", "rules"))

    def defaults(self, ctx: GenContext) -> list[tuple[tuple[str, ...], list[str]]]:
        # Codex's own sandbox cannot start inside ours (it needs a user namespace bwrap's
        # --cap-drop forbids): its edits would fail while it exits 0. Ours confines it instead.
        own = ["--sandbox", "danger-full-access"] if ctx.wrap is not None else ["--sandbox", "workspace-write"]
        return [
            ((), ["exec"]),
            (("--json", "--experimental-json"), ["--json"]),
            (("--sandbox", "-s", "--dangerously-bypass-approvals-and-sandbox", "--full-auto"), own),
            (("--skip-git-repo-check",), ["--skip-git-repo-check"]),
        ]

    def trailing(self, ctx: GenContext) -> list[str]:
        return ["-"]   # "read the prompt from stdin"

    def auth_status(self, ctx: GenContext) -> tuple[bool | None, str]:
        # A model provider of config.toml with an `env_key` authenticates by that variable;
        # OpenAI's own by `codex login` (or CODEX_API_KEY), which `codex login status` reports.
        env = self.sandboxed(ctx).env   # (the private CODEX_HOME copy when sandboxed)
        provider_key = _codex_provider_env_key(Path(env.get("CODEX_HOME") or
                                                    os.path.expanduser("~/.codex")) / "config.toml")
        if provider_key:
            if env.get(provider_key):
                return True, f"the model provider's key ${provider_key} is set"
            return False, f"${provider_key} (env_key of the model provider in config.toml) is not set"
        if env.get("CODEX_API_KEY"):
            return True, "CODEX_API_KEY is set"
        res = self._quiet(ctx, [*self.executable(ctx), "login", "status"])
        if res is None:
            return None, "`codex login status` did not answer"
        code, said = res
        if code == 0:
            return True, _last_line(said) or "logged in"
        return False, f"{_last_line(said) or 'not logged in'}: run `codex login`, or set CODEX_API_KEY"

    def parse(self, out: Path, err: Path, proposal: Proposal) -> None:
        seen = completed = 0
        last_completed = -1
        failure: str | None = None
        last_error: tuple[int, str] | None = None
        commands = failed_commands = edits = 0
        failed_edits: list[str] = []
        for index, event in enumerate(_json_lines(_read_text(out))):
            kind = event.get("type")
            if not isinstance(kind, str):
                continue
            seen += 1
            if kind == "thread.started":
                proposal.meta["thread_id"] = str(event.get("thread_id", ""))
            elif kind == "turn.completed":
                usage = _dict(event.get("usage"))
                # input_tokens already counts the cached ones (cached ⊆ input, as in the API).
                proposal.tokens_in += _int(usage.get("input_tokens"))
                proposal.tokens_out += _int(usage.get("output_tokens"))
                proposal.meta["cached_input_tokens"] = (
                    _int(proposal.meta.get("cached_input_tokens"))
                    + _int(usage.get("cached_input_tokens")))
                completed += 1
                last_completed = index
            elif kind == "turn.failed":
                error = event.get("error")
                failure = str(error.get("message", "")) if isinstance(error, dict) else ""
                failure = failure or "turn failed"
            elif kind == "error":
                message = str(event.get("message", "")) or "error"
                last_error = (index, message)
                if len(proposal.notes) < _MAX_NOTES:
                    proposal.notes.append(f"codex: {message}"[:_NOTE_LEN])
            elif kind == "item.completed" and isinstance(event.get("item"), dict):
                item = event["item"]
                if item.get("type") == "command_execution":
                    commands += 1
                    if item.get("status") == "failed" or _int(item.get("exit_code")) != 0:
                        failed_commands += 1
                        _note(proposal, f"codex: command failed (exit {item.get('exit_code')}): "
                                        f"{' '.join(str(item.get('command', '')).split())}")
                elif item.get("type") == "file_change":
                    paths = ", ".join(str(c.get("path", "?")) for c in item.get("changes") or []
                                      if isinstance(c, dict))
                    if item.get("status") == "failed":
                        failed_edits.append(paths or "?")
                        _note(proposal, f"codex: edit failed: {paths or '(no path given)'}")
                    else:
                        edits += 1
                elif item.get("type") == "error" and len(proposal.notes) < _MAX_NOTES:
                    proposal.notes.append(f"codex: {item.get('message', '')}"[:_NOTE_LEN])
        proposal.turns = completed
        proposal.cost_usd = _price(proposal.tokens_in, proposal.tokens_out, self.spec.price)
        proposal.meta.update({"tool": "codex", "commands": commands, "failed_commands": failed_commands,
                              "edits": edits, "failed_edits": len(failed_edits)})
        if seen == 0:
            tail = _last_line(_read_text(err)) or _last_line(_read_text(out))
            raise _Unparseable("codex printed no JSON events" + (f": {tail}" if tail else ""))
        if failure is not None:
            _check_auth("codex", failure)
            raise AgentReportError(f"codex turn failed: {failure[:500]}", proposal)
        # An `error` followed by a completed turn was a retry ("Reconnecting... 1/5"); one
        # after the last completed turn is what ended the run.
        if last_error is not None and last_error[0] > last_completed:
            _check_auth("codex", last_error[1])
            raise AgentReportError(f"codex error: {last_error[1][:500]}", proposal)
        if completed == 0:
            raise AgentReportError("codex finished without completing a turn", proposal)
        if failed_edits and not edits:
            # Codex exits 0 when every edit it tried failed (its own sandbox refusing them, for
            # one): that is a failed attempt, not a generator that chose to change nothing.
            raise AgentReportError(f"codex: every edit it tried failed ({'; '.join(failed_edits)[:300]})",
                                   proposal)

    def output_hypothesis(self, ctx: GenContext, res: proc.ProcResult) -> str | None:
        replies = [str(e["item"].get("text", "")) for e in _json_lines(_read_text(res.stdout_path))
                   if e.get("type") == "item.completed" and isinstance(e.get("item"), dict)
                   and e["item"].get("type") == "agent_message"]
        for reply in replies:
            found = hypothesis_in(reply)
            if found:
                return found
        return first_sentence(replies[-1]) if replies else None


def _codex_provider_env_key(config: Path) -> str | None:
    """`env_key` of the model provider config.toml selects (None: OpenAI's own, or unreadable)."""
    try:
        import tomllib
    except ImportError:   # Python 3.10: no TOML reader in the standard library; cannot tell
        return None
    try:
        data = tomllib.loads(config.read_text())
    except (OSError, ValueError):
        return None
    name = data.get("model_provider")
    providers = data.get("model_providers")
    if not isinstance(name, str) or not isinstance(providers, dict):
        return None
    entry = providers.get(name)
    key = entry.get("env_key") if isinstance(entry, dict) else None
    return key if isinstance(key, str) and key else None


def _last_json(text: str) -> dict[str, Any] | None:
    """The JSON object `text` holds (pretty-printed or one line), else the last one-line one."""
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        try:
            whole = json.loads(text[start:end + 1])
            if isinstance(whole, dict):
                return whole
        except ValueError:
            pass
    found = list(_json_lines(text))
    return found[-1] if found else None


def _note(proposal: Proposal, text: str) -> None:
    if len(proposal.notes) < _MAX_NOTES:
        proposal.notes.append(text[:_NOTE_LEN])


def _json_lines(text: str) -> Iterator[dict[str, Any]]:
    """The JSON objects of `text` that stand one to a line; other lines are skipped."""
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            yield obj


# ---------------------------------------------------------------------------------------- aider

_MAX_AIDER_FILES = 50
_AIDER_COUNT = r"(\d[\d,]*(?:\.\d+)?[kKmM]?)"
_AIDER_TOKENS = re.compile(_AIDER_COUNT + r"\s+(sent|cache write|cache hit|cached|received)")
_AIDER_COST = re.compile(r"Cost:\s*\$(\d+(?:\.\d+)?)\s+message,\s*\$(\d+(?:\.\d+)?)\s+session")
_AIDER_LLM_ERROR = re.compile(r"^\s*litellm\.(\w+)", re.MULTILINE)


class AiderGenerator(AgentGenerator):
    """aider, one message and exit (`--message-file`), with the allowed files that exist already
    in the chat so it can edit them.

    `--no-git`: aider must not commit, stage or edit .gitignore — autoloop owns git — and the
    commit flags stay off even if generator.args turns git back on. Its history files would land
    in the work tree (a change outside `allowed`), so they go to the cycle's log folder, where
    they double as the transcript. Best effort: aider prints text, not a structured report.
    """

    tool = "aider"
    install_hint = "aider (pip install aider-chat)"

    def __init__(self, spec: GeneratorSpec, program: Program) -> None:
        super().__init__(spec, program)
        # The files chosen for a cycle, computed once before aider runs (it may create more).
        self._files: dict[int, tuple[list[str], int]] = {}

    def defaults(self, ctx: GenContext) -> list[tuple[tuple[str, ...], list[str]]]:
        return [
            (("--message-file", "-f", "--message", "--msg", "-m"),
             ["--message-file", str(ctx.prompt_file)]),
            (("--yes-always",), ["--yes-always"]),
            (("--auto-commits", "--no-auto-commits"), ["--no-auto-commits"]),
            (("--dirty-commits", "--no-dirty-commits"), ["--no-dirty-commits"]),
            (("--git", "--no-git"), ["--no-git"]),
            (("--gitignore", "--no-gitignore"), ["--no-gitignore"]),
            (("--stream", "--no-stream"), ["--no-stream"]),
            (("--pretty", "--no-pretty"), ["--no-pretty"]),
            (("--check-update", "--no-check-update"), ["--no-check-update"]),
            (("--show-release-notes", "--no-show-release-notes"), ["--no-show-release-notes"]),
            (("--analytics", "--no-analytics"), ["--no-analytics"]),
            (("--suggest-shell-commands", "--no-suggest-shell-commands"),
             ["--no-suggest-shell-commands"]),
            (("--detect-urls", "--no-detect-urls"), ["--no-detect-urls"]),
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
        files, _ = self._files.get(id(ctx)) or allowed_files(ctx, _MAX_AIDER_FILES)
        # `./` keeps a file named like an option from being read as one.
        return [f"./{rel}" for rel in files]

    def propose(self, ctx: GenContext) -> Proposal:
        files, total = allowed_files(ctx, _MAX_AIDER_FILES)
        self._files[id(ctx)] = (files, total)
        try:
            proposal = super().propose(ctx)
        finally:
            self._files.pop(id(ctx), None)
        if total > len(files):
            proposal.notes.append(f"aider: {total} allowed files exist; the first {len(files)} "
                                  "were added to the chat")
        chat = ctx.log_dir / "aider.chat.history.md"
        if chat.exists():
            proposal.meta["chat_history"] = str(chat)
        return proposal

    def parse(self, out: Path, err: Path, proposal: Proposal) -> None:
        text = _read_text(out)
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
            _price(proposal.tokens_in, proposal.tokens_out, self.spec.price)
            if proposal.turns else None)
        proposal.meta["tool"] = "aider"
        for source, where in ((text, "stdout"), (_read_text(err), "stderr")):
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
        text = _read_text(res.stdout_path)
        kept = "\n".join(ln for ln in text.splitlines() if ln.strip() not in prompt_lines)
        return hypothesis_in(kept)


def _aider_count(text: str) -> int:
    """aider's token counts: `1,234`, `12.3k`, `45k`, `1.2M`."""
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1].lower(), 1)
    number = text[:-1] if scale != 1 else text
    try:
        return int(round(float(number.replace(",", "")) * scale))
    except ValueError:
        return 0


def allowed_files(ctx: GenContext, limit: int) -> tuple[list[str], int]:
    """Regular files in the work tree the generator may edit: (the first `limit`, sorted; how
    many there are). Symlinks are left out — an edit through one lands somewhere else."""
    found: list[str] = []
    root = ctx.workdir
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != ".git")
        rel_dir = Path(dirpath).relative_to(root).as_posix()
        for name in filenames:
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            full = Path(dirpath) / name
            if full.is_symlink() or not full.is_file():
                continue
            if ctx.is_allowed(rel):
                found.append(rel)
    found.sort()
    return found[:limit], len(found)
