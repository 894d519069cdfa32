"""`kind: claude | codex | aider`: agent CLIs driven through the command protocol (contract §6),
each an argv whose defaults make the tool edit the work tree unattended and report what it
spent (never trusted about what changed). Flags and report shapes come from the tools' sources
(claude: CLI reference, SDKResultMessage; codex: exec cli.rs, exec_events.rs,
openai/codex#32984; aider: args.py, base_coder.py); re-check them when a tool changes."""

from __future__ import annotations

import atexit
import json
import os
import re
import shlex
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar, Iterator, Mapping, Sequence

from autoloop.process import logfile, proc
from autoloop.errors import FatalGeneratorError, GeneratorError
from autoloop.process.executables import needed_paths
from autoloop.generators.base import GenContext, Proposal, hypothesis_of
from autoloop.generators.command import CommandGenerator, last_line, run_short, written_hypothesis
from autoloop.generators.llm_common import cost_usd
from autoloop.base.walk import remove_tree, temp_dir
from autoloop.base.hosts import Rule
from autoloop.isolation.egress.allowlist import args_urls, preset_rules, url_rules

_MAX_NOTES = 20
_NOTE_LEN = 200
# Messages meaning "this will fail every cycle until a human logs in or fixes a key".
_AUTH_PROBLEM = re.compile(
    r"invalid api key|invalid x-api-key|please run /login|not logged in|authentication_error"
    r"|authentication_failed|authenticationerror|permissiondeniederror|unauthori[sz]ed",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class AgentState:
    """Where an agent CLI keeps its state; a sandboxed run gives it a private writable copy (the
    home is read-only there). `env` moves the folder, `home` is its default, `files` sit beside
    it, `copy` names the sub-folders worth copying (settings, not sessions or logs)."""

    env: str
    home: str
    files: tuple[tuple[str, str], ...] = ()
    copy: tuple[str, ...] = ()
    defaults: tuple[tuple[str, str], ...] = ()   # more variables, set only when the user has not


def private_state(state: AgentState, environ: Mapping[str, str]) -> Path:
    """A fresh private copy of the agent's state (0700, removed when autoloop exits)."""
    root = temp_dir("agent-state")
    atexit.register(remove_tree, root, quiet=True)
    source = Path(environ.get(state.env) or os.path.expanduser(state.home))
    listed = source.is_dir() and not source.is_symlink()
    entries = [(e, root / e.name) for e in source.iterdir()] if listed else []
    if state.env not in environ:   # (moved state: the files beside the default are not its)
        entries += [(Path(os.path.expanduser(src)), root / dst) for src, dst in state.files]
    for src, dst in entries:
        try:
            if src.is_symlink():
                continue
            if src.is_file() and src.stat().st_size <= 4 << 20:
                shutil.copy2(src, dst)
            elif src.name in state.copy and src.is_dir():
                shutil.copytree(src, dst, symlinks=True)
        except OSError:
            continue   # unreadable leftovers of the agent's own: not needed to start
    return root


class AgentReportError(GeneratorError):
    """The agent's run failed (the cycle is `gen_error`); `proposal` holds what it reported."""


class _Unparseable(AgentReportError):
    """The output is not the report shape we asked the tool for."""


class AgentGenerator(CommandGenerator):
    """A known agent CLI: subclasses give the argv (`defaults`, `trailing`) and read the report
    (`parse` fills the proposal field by field, then raises AgentReportError if the run failed)."""

    tool: ClassVar[str] = ""
    install_hint: ClassVar[str] = ""
    model_flag: ClassVar[tuple[str, ...]] = ("--model",)
    state: ClassVar[AgentState | None] = None
    _state_dir: Path | None = None

    def program_path(self, ctx: GenContext, root: Path | None = None) -> str | None:
        return self.executable(ctx)[0]

    def sandboxed(self, ctx: GenContext) -> GenContext:
        env = dict(ctx.env)
        for key, value in self.state.defaults if self.state is not None else ():
            env.setdefault(key, value)
        for key in self.model_keys(ctx.env):   # its model's key, which the credential filter left out
            if key not in env and os.environ.get(key):
                env[key] = os.environ[key]
        if ctx.wrap is None:   # unsandboxed, the agent keeps the user's own state
            return replace(ctx, env=env)
        writable: list[Path] = []
        if self.state is not None:
            if self._state_dir is None:
                self._state_dir = private_state(self.state, ctx.env)
            env[self.state.env] = str(self._state_dir)
            writable.append(self._state_dir)
        readable = needed_paths(self.executable(ctx)[0], ctx.env.get("PATH"))
        # agent CLIs talk to their API: the network is on unless program.md says
        network = None if "sandbox.network" in self.program.lines else True
        outer, hosts = ctx.wrap, self.egress_hosts(env)
        return replace(ctx, env=env, wrap=lambda command: outer(
            command, readable=readable, writable=writable, network=network, hosts=hosts))

    def model_keys(self, env: Mapping[str, str]) -> tuple[str, ...]:
        """Variables by another name than a model provider's that the agent's own settings name
        as its model's key (autoloop.process.envs.credential leaves them out otherwise)."""
        return ()

    def egress_hosts(self, env: Mapping[str, str]) -> list[Rule]:
        """What the egress proxy lets the agent reach besides sandbox.hosts and the base URLs
        of autoloop's own environment: its preset's API hosts and the URLs its settings name."""
        return [*preset_rules(self.tool), *url_rules({}, None, args_urls(self.spec.args))]

    def auth_status(self, ctx: GenContext) -> tuple[bool | None, str]:
        """Logged in / has a key (None: cannot tell) without spending tokens; and what was found."""
        return None, "cannot tell without sending a request"

    def _status(self, ctx: GenContext, *words: str) -> tuple[int | None, str]:
        """(exit code, None if it did not answer; stdout + stderr) of `TOOL WORDS...`, run as a
        cycle runs the tool."""
        said = run_short(self.sandboxed(ctx), [*self.executable(ctx), *words], 60.0)
        answered = said.res.start_error is None
        return said.res.exit_code if answered else None, said.out + "\n" + said.err

    def preflight(self, ctx: GenContext) -> str | None:
        """The tool starts (`--version`) inside the sandbox the cycles use; its version."""
        exe = self.executable(ctx)
        said = self.check_starts(self.sandboxed(ctx), [*exe, "--version"], os.path.basename(exe[0]))
        return (said.strip().splitlines() or [""])[0][:100] or None

    def executable(self, ctx: GenContext) -> list[str]:
        """argv prefix for the tool, resolved now so a missing tool stops the run with a message
        instead of failing every cycle with `exit 127`."""
        words = (shlex.split(self.spec.command) if self.spec.command else []) or [self.tool]
        name = os.path.expanduser(words[0])
        if "/" in name:
            # relative to the repository root, not to the work tree the tool runs in
            path = Path(name) if os.path.isabs(name) else self.program.repo_root / name
            if not (path.is_file() and os.access(path, os.X_OK)):
                raise FatalGeneratorError(f"generator.command: {path} is not an executable file")
            return [str(path), *words[1:]]
        found = shutil.which(name, path=ctx.env.get("PATH", os.defpath))   # as the child's exec will
        if found is None:
            raise FatalGeneratorError(f"{words[0]} not found on PATH; install {self.install_hint}, give its path in generator.command, "
                                      "or pick another generator.kind (`command` runs your own script, `tune` needs no model: docs/install.md)")
        return [found, *words[1:]]

    def defaults(self, ctx: GenContext) -> list[tuple[tuple[str, ...], list[str]]]:
        """(option names, argv) pairs; a pair is dropped when generator.args sets that option."""
        raise NotImplementedError

    def trailing(self, ctx: GenContext) -> list[str]:
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

    def parse(self, out: Path, err: Path, proposal: Proposal) -> None:
        raise NotImplementedError

    def read_report(self, res: proc.ProcResult, proposal: Proposal) -> None:
        self.parse(res.stdout_path, res.stderr_path, proposal)

    def output_hypothesis(self, ctx: GenContext, res: proc.ProcResult) -> str | None:
        raise NotImplementedError

    def hypothesis(self, ctx: GenContext, res: proc.ProcResult) -> str:
        # raw stdout of a JSON-printing tool has `Hypothesis:` inside escaped strings: read the report
        return written_hypothesis(ctx) or self.output_hypothesis(ctx, res) or "(none given)"

    def propose(self, ctx: GenContext) -> Proposal:
        try:
            return super().propose(ctx)
        except AgentReportError:
            raise
        except GeneratorError as exc:
            if str(exc) == "interrupted":   # Ctrl-C/SIGTERM: there is no report to read
                raise
            raise self._explain(ctx, exc) from exc

    def _explain(self, ctx: GenContext, exc: GeneratorError) -> AgentReportError:
        """A non-zero exit: the tool's own report names the error better than a stderr tail, and
        says what the failed run cost."""
        out, err = ctx.log_dir / "generator.out", ctx.log_dir / "generator.err"
        spent = Proposal(transcript=out if out.exists() else None)
        try:
            self.parse(out, err, spent)
        except _Unparseable:
            pass
        except AgentReportError as reported:
            # a timeout's partial report ("no completed turn") would hide the real cause
            return AgentReportError(str(exc) if "timed out" in str(exc) else str(reported), spent)
        return AgentReportError(str(exc), spent)

    def _unparseable(self, out: Path, err: Path, what: str) -> _Unparseable:
        tail = last_line(read_output(err)) or last_line(read_output(out))
        return _Unparseable(f"{self.tool} printed no {what}" + (f": {tail}" if tail else ""))


def _sets_option(args: Sequence[str], names: Sequence[str]) -> bool:
    """Does `args` set one of the options `names` (`--x v`, `--x=v`, `-s v`)?"""
    return any(arg == name or (name.startswith("--") and arg.startswith(name + "="))
               for arg in args for name in names)


def read_output(path: Path) -> str:
    # read the one way autoloop reads files a generator could have replaced (regular only, no
    # link followed); the tail only: the result comes last, and a runaway tool must not cost
    # us its whole output in memory
    return logfile.read_regular(path, 32 << 20, tail=True).decode("utf-8", "replace")


def _dict(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


def _int(x: Any) -> int:
    return int(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else 0


def _note(proposal: Proposal, text: str) -> None:
    if len(proposal.notes) < _MAX_NOTES:
        proposal.notes.append(text[:_NOTE_LEN])


def _check_auth(tool: str, message: str) -> None:
    if _AUTH_PROBLEM.search(message):
        raise FatalGeneratorError(f"{tool} cannot authenticate: {message[:300]}")


def _json_lines(text: str) -> Iterator[dict[str, Any]]:
    """The JSON objects of `text` that stand one to a line."""
    for line in text.splitlines():
        if line.strip().startswith("{"):
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict):
                yield obj


def _last_json(text: str, want_type: str | None = None) -> dict[str, Any] | None:
    """The last one-line JSON object (of type `want_type`), else the one the whole text holds
    (pretty-printed)."""
    found = [o for o in _json_lines(text) if want_type is None or o.get("type") == want_type]
    if found:
        return found[-1]
    try:
        whole = json.loads(text[text.find("{"):text.rfind("}") + 1])
    except ValueError:
        return None
    ok = isinstance(whole, dict) and (want_type is None or whole.get("type") == want_type)
    return whole if ok else None


class ClaudeGenerator(AgentGenerator):
    """Claude Code headless: `claude -p --output-format json`, the prompt on stdin. `acceptEdits`
    edits its working directory without prompting; shell and network tools are removed (the
    judge is the verifier, and in `-p` mode a tool that needs permission is denied or aborts the
    run). Your own `--disallowedTools` / `--allowedTools` in generator.args change that."""

    tool = "claude"
    install_hint = "Claude Code (npm install -g @anthropic-ai/claude-code)"
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
        code, said = self._status(ctx, "auth", "status")
        if code is None:
            return None, "`claude auth status` did not answer"
        info = _last_json(said)
        if info is None:
            return None, f"`claude auth status` exit {code}: {last_line(said) or 'no output'}"
        if info.get("loggedIn") is True:
            how = str(info.get("apiKeySource") or info.get("authMethod") or "yes")
            return True, f"logged in ({how})"
        return False, "not logged in: run `claude` once and /login, or set ANTHROPIC_API_KEY"

    def parse(self, out: Path, err: Path, proposal: Proposal) -> None:
        result = _last_json(read_output(out), "result")
        if result is None:
            raise self._unparseable(out, err, "JSON result")
        usage = _dict(result.get("usage"))
        proposal.tokens_in = sum(_int(usage.get(k)) for k in (
            "input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"))
        proposal.tokens_out = _int(usage.get("output_tokens"))
        proposal.turns = _int(result.get("num_turns"))
        # `cost_usd` is what versions before the SDK rename printed.
        cost = result.get("total_cost_usd", result.get("cost_usd"))
        reported = isinstance(cost, (int, float)) and not isinstance(cost, bool)
        proposal.cost_usd = float(cost) if reported else cost_usd(
            proposal.tokens_in, proposal.tokens_out, self.spec.price)
        denials = result.get("permission_denials")
        denials = denials if isinstance(denials, list) else []
        proposal.notes += [_denial_note(denial) for denial in denials[:_MAX_NOTES]]
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
        result = _last_json(read_output(res.stdout_path), "result")
        text = result.get("result") if result else None
        return hypothesis_of([text]) if isinstance(text, str) else None


def _denial_note(denial: Any) -> str:
    if not isinstance(denial, dict):
        return "claude: permission denied"
    tool_input = _dict(denial.get("tool_input"))
    target = next((" " + " ".join(tool_input[key].split()) for key in
                   ("file_path", "path", "command", "url", "pattern")
                   if isinstance(tool_input.get(key), str)), "")
    return f"claude: permission denied: {denial.get('tool_name', 'a tool')}{target}"[:_NOTE_LEN]


class CodexGenerator(AgentGenerator):
    """Codex CLI: `codex exec --json ... -`, the prompt on stdin (a file, so it sees EOF and never
    waits on an open pipe). Unsandboxed, `workspace-write` lets it write its working directory
    only; inside autoloop's sandbox it runs `danger-full-access` within ours."""

    tool = "codex"
    install_hint = "the Codex CLI (npm install -g @openai/codex)"
    model_flag = ("--model", "-m")
    state = AgentState(env="CODEX_HOME", home="~/.codex", copy=("prompts", "rules"))

    def egress_hosts(self, env: Mapping[str, str]) -> list[Rule]:
        url = _codex_provider(Path(env.get("CODEX_HOME") or os.path.expanduser("~/.codex")) / "config.toml").get("base_url")
        return [*super().egress_hosts(env), *url_rules({}, None, [(url, "config.toml's model provider")] if isinstance(url, str) else [])]

    def defaults(self, ctx: GenContext) -> list[tuple[tuple[str, ...], list[str]]]:
        # Codex's own sandbox cannot start inside ours (it needs a user namespace bwrap's
        # --cap-drop forbids): its edits would fail while it exits 0. Ours confines it instead.
        own = ["--sandbox", "danger-full-access" if ctx.wrap is not None else "workspace-write"]
        return [
            ((), ["exec"]),
            (("--json", "--experimental-json"), ["--json"]),
            (("--sandbox", "-s", "--dangerously-bypass-approvals-and-sandbox", "--full-auto"), own),
            (("--skip-git-repo-check",), ["--skip-git-repo-check"]),
        ]

    def trailing(self, ctx: GenContext) -> list[str]:
        return ["-"]   # "read the prompt from stdin"

    def model_keys(self, env: Mapping[str, str]) -> tuple[str, ...]:
        key = _codex_provider(Path(env.get("CODEX_HOME") or os.path.expanduser("~/.codex")) / "config.toml").get("env_key")
        return (key,) if isinstance(key, str) and key else ()

    def auth_status(self, ctx: GenContext) -> tuple[bool | None, str]:
        # A model provider of config.toml with an `env_key` authenticates by that variable;
        # OpenAI's own by `codex login` (or CODEX_API_KEY), which `codex login status` reports.
        env = self.sandboxed(ctx).env   # (the private CODEX_HOME copy when sandboxed)
        home = env.get("CODEX_HOME") or os.path.expanduser("~/.codex")
        key = _codex_provider(Path(home) / "config.toml").get("env_key")
        provider_key = key if isinstance(key, str) and key else None
        if provider_key:
            if env.get(provider_key):
                return True, f"the model provider's key ${provider_key} is set"
            return False, f"${provider_key} (env_key of the model provider in config.toml) is not set"
        if env.get("CODEX_API_KEY"):
            return True, "CODEX_API_KEY is set"
        code, said = self._status(ctx, "login", "status")
        if code is None:
            return None, "`codex login status` did not answer"
        if code == 0:
            return True, last_line(said) or "logged in"
        said = last_line(said) or "not logged in"
        return False, f"{said}: run `codex login`, or set CODEX_API_KEY"

    def parse(self, out: Path, err: Path, proposal: Proposal) -> None:
        seen = completed = commands = failed_commands = edits = 0
        last_completed = -1
        failure: str | None = None
        last_error: tuple[int, str] | None = None
        failed_edits: list[str] = []
        for index, event in enumerate(_json_lines(read_output(out))):
            kind = event.get("type")
            item = _dict(event.get("item"))
            seen += isinstance(kind, str)
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
                _note(proposal, f"codex: {message}")
            elif kind != "item.completed" or not isinstance(event.get("item"), dict):
                continue
            elif item.get("type") == "command_execution":
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
            elif item.get("type") == "error":
                _note(proposal, f"codex: {item.get('message', '')}")
        proposal.turns = completed
        proposal.cost_usd = cost_usd(proposal.tokens_in, proposal.tokens_out, self.spec.price)
        proposal.meta.update({"tool": "codex", "commands": commands,
                              "failed_commands": failed_commands, "edits": edits,
                              "failed_edits": len(failed_edits)})
        if seen == 0:
            raise self._unparseable(out, err, "JSON events")
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
            raise AgentReportError(
                f"codex: every edit it tried failed ({'; '.join(failed_edits)[:300]})", proposal)

    def output_hypothesis(self, ctx: GenContext, res: proc.ProcResult) -> str | None:
        items = [_dict(e.get("item")) for e in _json_lines(read_output(res.stdout_path))
                 if e.get("type") == "item.completed"]
        return hypothesis_of([str(i.get("text", "")) for i in items
                              if i.get("type") == "agent_message"])


def _codex_provider(config: Path) -> dict[str, Any]:
    """The model provider config.toml selects ({}: OpenAI's own, or unreadable)."""
    try:
        import tomllib
    except ImportError:   # Python 3.10: no TOML reader in the standard library; cannot tell
        return {}
    try:
        data = tomllib.loads(config.read_text())
    except (OSError, ValueError):
        return {}
    name = data.get("model_provider")
    return _dict(_dict(data.get("model_providers")).get(name)) if isinstance(name, str) else {}
