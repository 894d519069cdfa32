"""The claude / codex / aider presets, each driven against a fake executable on PATH (tests/fakes)
that accepts the real tool's flags, reads the prompt the way it does and prints its report shapes."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from autoloop.errors import FatalGeneratorError, GeneratorError
from autoloop.generators.agents import (
    AgentReportError,
    ClaudeGenerator,
    CodexGenerator,
    _sets_option,
)
from autoloop.generators.aider import AiderGenerator, _aider_count, allowed_files
from autoloop.generators.base import GenContext, Proposal, hypothesis_in, hypothesis_of
from autoloop.generators.registry import make_generator
from autoloop.program.globs import PathRules
from autoloop.program.reader import GeneratorSpec, PriceSpec, Program, VerifierSpec
from autoloop.process.proc import ProcResult, new_marker

from tests.conftest import git

FAKES = Path(__file__).parents[1] / "fakes"
PROMPT = "Lower the loss of train.py.\nEnd with a line `Hypothesis: <one sentence>`.\n"
HYPOTHESIS = "a smaller learning rate lowers the validation loss."
SECRET = "sk-ant-test-0123456789abcdef"


@pytest.fixture
def agent_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The fakes first on PATH; each run appends {argv, stdin, ...} to the returned file."""
    monkeypatch.setenv("PATH", f"{FAKES}{os.pathsep}{os.environ['PATH']}")
    log = tmp_path / "agent.log"
    monkeypatch.setenv("FAKE_AGENT_LOG", str(log))
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    for var in ("FAKE_AGENT_MODE", "FAKE_AGENT_EDIT", "FAKE_AGENT_REPLY", "FAKE_AGENT_EXIT"):
        monkeypatch.delenv(var, raising=False)
    return log


@pytest.fixture
def repo(make_repo: Any) -> Path:
    return make_repo({
        "train.py": "lr = 0.1\n",
        "prepare.py": "print('m: 1.0')\n",
        "program.md": "---\ngoal: g\n---\n",
    })


def runs(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def make_ctx(repo: Path, tmp_path: Path, spec: GeneratorSpec | None = None, *,
             allowed: tuple[str, ...] = ("train.py",), forbidden: tuple[str, ...] = (),
             timeout: float = 60, prompt: str = PROMPT) -> GenContext:
    program = Program(path=repo / "program.md", repo_root=repo, goal="Lower the loss",
                      allowed=allowed, forbidden=forbidden,
                      verifier=VerifierSpec(command="true", direction="minimize", metric="m"),
                      generator=spec or GeneratorSpec())
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    prompt_file = state / "prompt.md"
    prompt_file.write_text(prompt)
    rules = PathRules(program.allowed, program.forbidden, program.protected)
    return GenContext(
        program=program, cycle=1, workdir=repo, prompt=prompt, prompt_file=prompt_file,
        hypothesis_file=state / "hypothesis.txt", log_dir=state / "cycle-1", best=1.0,
        baseline=1.0, history=(), is_allowed=rules.allows, env=dict(os.environ),
        timeout=timeout, run_marker=new_marker())


def generator_for(ctx: GenContext) -> Any:
    return make_generator(ctx.program.generator, ctx.program)


def edit(monkeypatch: pytest.MonkeyPatch, files: dict[str, str]) -> None:
    monkeypatch.setenv("FAKE_AGENT_EDIT", json.dumps(files))


# ----------------------------------------------------------------------------------- registry


def test_registry_builds_each_preset(repo: Path, tmp_path: Path) -> None:
    for kind, cls in (("claude", ClaudeGenerator), ("codex", CodexGenerator), ("aider", AiderGenerator)):
        ctx = make_ctx(repo, tmp_path, GeneratorSpec(kind=kind))
        assert isinstance(generator_for(ctx), cls)


# -------------------------------------------------------------------------------------- claude

CLAUDE_ARGV = ["-p", "--output-format", "json", "--permission-mode", "acceptEdits",
               "--disallowedTools", "Bash,WebFetch,WebSearch"]


def test_claude_flags_prompt_edit_and_report(repo: Path, tmp_path: Path, agent_log: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    edit(monkeypatch, {"train.py": "lr = 0.05\n"})
    ctx = make_ctx(repo, tmp_path, GeneratorSpec(kind="claude"))
    proposal = generator_for(ctx).propose(ctx)

    (run,) = runs(agent_log)
    assert run["argv"] == CLAUDE_ARGV
    assert run["stdin"] == PROMPT
    assert Path(run["cwd"]).resolve() == repo.resolve()
    assert (repo / "train.py").read_text() == "lr = 0.05\n"
    assert proposal.hypothesis == HYPOTHESIS
    assert proposal.cost_usd == pytest.approx(0.0421)
    assert proposal.tokens_in == 1200 + 3000 + 20000     # cache reads and writes are input too
    assert proposal.tokens_out == 850
    assert proposal.turns == 4
    assert proposal.notes == []
    assert proposal.meta["subtype"] == "success" and proposal.meta["session_id"]
    assert proposal.meta["cache_read_tokens"] == 20000
    json.dumps(proposal.meta)   # journaled as-is
    assert proposal.transcript is not None and proposal.transcript.exists()


def test_claude_hypothesis_first_sentence_and_file_wins(repo: Path, tmp_path: Path, agent_log: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_AGENT_REPLY", "Cached the tokenizer. It was rebuilt every step!")
    ctx = make_ctx(repo, tmp_path, GeneratorSpec(kind="claude"))
    assert generator_for(ctx).propose(ctx).hypothesis == "Cached the tokenizer."

    monkeypatch.setenv("FAKE_AGENT_REPLY", "Done.\n\n**Hypothesis:** caching the tokenizer saves time")
    ctx = make_ctx(repo, tmp_path, GeneratorSpec(kind="claude"))   # ctx.env is a snapshot
    assert generator_for(ctx).propose(ctx).hypothesis == "caching the tokenizer saves time"

    ctx.hypothesis_file.write_text("  the file\nwins  ")
    assert generator_for(ctx).propose(ctx).hypothesis == "the file wins"


def test_claude_permission_denials_become_notes(repo: Path, tmp_path: Path, agent_log: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # A user's own --disallowedTools replaces the default, so Bash is offered — and denied.
    monkeypatch.setenv("FAKE_AGENT_MODE", "denied")
    edit(monkeypatch, {"train.py": "lr = 0.05\n"})
    spec = GeneratorSpec(kind="claude", args=("--disallowedTools", "WebFetch"))
    ctx = make_ctx(repo, tmp_path, spec)
    proposal = generator_for(ctx).propose(ctx)   # a denied tool still exits 0: not an error

    (run,) = runs(agent_log)
    assert run["argv"] == ["-p", "--output-format", "json", "--permission-mode", "acceptEdits",
                           "--disallowedTools", "WebFetch"]
    assert proposal.notes == ["claude: permission denied: Bash pytest -q"]
    assert proposal.meta["permission_denials"] == 1
    assert (repo / "train.py").read_text() == "lr = 0.05\n"


def test_claude_permission_mode_override_denies_the_edit(repo: Path, tmp_path: Path, agent_log: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    edit(monkeypatch, {"train.py": "lr = 0.05\n"})
    ctx = make_ctx(repo, tmp_path, GeneratorSpec(kind="claude", args=("--permission-mode", "default")))
    proposal = generator_for(ctx).propose(ctx)
    assert runs(agent_log)[0]["argv"].count("--permission-mode") == 1
    assert proposal.notes == ["claude: permission denied: Edit train.py"]
    assert (repo / "train.py").read_text() == "lr = 0.1\n"


@pytest.mark.parametrize("exit_status", ["1", "0"])
def test_claude_error_result_is_gen_error_with_its_cost(repo: Path, tmp_path: Path, agent_log: Path,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        exit_status: str) -> None:
    monkeypatch.setenv("FAKE_AGENT_MODE", "error")
    monkeypatch.setenv("FAKE_AGENT_EXIT", exit_status)
    ctx = make_ctx(repo, tmp_path, GeneratorSpec(kind="claude"))
    with pytest.raises(GeneratorError) as info:
        generator_for(ctx).propose(ctx)
    assert "error_during_execution" in str(info.value) and "529 Overloaded" in str(info.value)
    assert isinstance(info.value, AgentReportError) and info.value.proposal is not None
    assert info.value.proposal.cost_usd == pytest.approx(0.0105)
    assert info.value.proposal.turns == 2


def test_claude_non_success_subtype_is_gen_error(repo: Path, tmp_path: Path, agent_log: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_AGENT_MODE", "max_turns")   # is_error false, subtype error_max_turns
    ctx = make_ctx(repo, tmp_path, GeneratorSpec(kind="claude", args=("--max-turns", "3")))
    with pytest.raises(GeneratorError, match="error_max_turns"):
        generator_for(ctx).propose(ctx)
    assert runs(agent_log)[0]["argv"][-2:] == ["--max-turns", "3"]


def test_claude_bad_credentials_stop_the_run(repo: Path, tmp_path: Path, agent_log: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_AGENT_MODE", "auth")
    ctx = make_ctx(repo, tmp_path, GeneratorSpec(kind="claude"))
    with pytest.raises(FatalGeneratorError, match="Invalid API key"):
        generator_for(ctx).propose(ctx)


def test_claude_garbage_output_is_gen_error(repo: Path, tmp_path: Path, agent_log: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_AGENT_MODE", "garbage")
    ctx = make_ctx(repo, tmp_path, GeneratorSpec(kind="claude"))
    with pytest.raises(GeneratorError, match="no JSON result"):
        generator_for(ctx).propose(ctx)


def test_claude_missing_executable_is_fatal(repo: Path, tmp_path: Path, agent_log: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    ctx = make_ctx(repo, tmp_path, GeneratorSpec(kind="claude"))
    with pytest.raises(FatalGeneratorError) as info:
        generator_for(ctx).propose(ctx)
    assert str(info.value).startswith("claude not found on PATH; install Claude Code (npm install -g @anthropic-ai/claude-code), "
                                      "give its path in generator.command, or pick another generator.kind")
    assert not agent_log.exists()


def test_claude_model_args_and_command(repo: Path, tmp_path: Path, agent_log: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # generator.command replaces the executable: the fake is not on PATH any more.
    monkeypatch.setenv("PATH", "/usr/local/bin:/usr/bin:/bin")
    spec = GeneratorSpec(kind="claude", command=str(FAKES / "claude"), model="claude-opus-4-1",
                         args=("--max-turns", "5", "--append-system-prompt", "be terse"))
    ctx = make_ctx(repo, tmp_path, spec)
    generator_for(ctx).propose(ctx)
    assert runs(agent_log)[0]["argv"] == [*CLAUDE_ARGV, "--model", "claude-opus-4-1",
                                          "--max-turns", "5", "--append-system-prompt", "be terse"]


def test_claude_relative_command_is_a_wrapper_in_the_repo(repo: Path, tmp_path: Path, agent_log: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    wrapper = repo / "tools" / "claude-wrap"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec "{FAKES / "claude"}" --verbose "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.chdir(tmp_path)   # resolved against the repository root, not our cwd
    spec = GeneratorSpec(kind="claude", command="./tools/claude-wrap")
    ctx = make_ctx(repo, tmp_path, spec)
    assert generator_for(ctx).propose(ctx).hypothesis == HYPOTHESIS
    assert runs(agent_log)[0]["argv"] == ["--verbose", *CLAUDE_ARGV]


def test_claude_stream_json_from_args_replaces_the_format(repo: Path, tmp_path: Path, agent_log: Path) -> None:
    spec = GeneratorSpec(kind="claude", args=("--output-format", "stream-json", "--verbose"))
    ctx = make_ctx(repo, tmp_path, spec)
    proposal = generator_for(ctx).propose(ctx)
    assert runs(agent_log)[0]["argv"].count("--output-format") == 1
    assert proposal.cost_usd == pytest.approx(0.0421) and proposal.hypothesis == HYPOTHESIS


def test_claude_timeout_is_gen_error(repo: Path, tmp_path: Path, agent_log: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_AGENT_MODE", "sleep")
    ctx = make_ctx(repo, tmp_path, GeneratorSpec(kind="claude"), timeout=1)
    with pytest.raises(GeneratorError, match="timed out"):
        generator_for(ctx).propose(ctx)


# --------------------------------------------------------------------------------------- codex

CODEX_ARGV = ["exec", "--json", "--sandbox", "workspace-write", "--skip-git-repo-check"]


def test_codex_flags_prompt_edit_and_report(repo: Path, tmp_path: Path, agent_log: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    edit(monkeypatch, {"train.py": "lr = 0.05\n"})
    ctx = make_ctx(repo, tmp_path, GeneratorSpec(kind="codex"))
    proposal = generator_for(ctx).propose(ctx)

    (run,) = runs(agent_log)
    assert run["argv"] == [*CODEX_ARGV, "-"]
    assert run["stdin"] == PROMPT
    assert (repo / "train.py").read_text() == "lr = 0.05\n"
    assert proposal.tokens_in == 24763 and proposal.tokens_out == 122
    assert proposal.meta["cached_input_tokens"] == 24448
    assert proposal.meta["commands"] == 1 and proposal.meta["thread_id"]
    assert proposal.turns == 1
    assert proposal.cost_usd is None            # codex reports tokens, not dollars
    assert proposal.hypothesis == HYPOTHESIS
    assert proposal.notes == []


def test_codex_cost_from_the_price_table(repo: Path, tmp_path: Path, agent_log: Path) -> None:
    spec = GeneratorSpec(kind="codex", price=PriceSpec(input=1.25, output=10.0))
    ctx = make_ctx(repo, tmp_path, spec)
    proposal = generator_for(ctx).propose(ctx)
    assert proposal.cost_usd == pytest.approx((24763 * 1.25 + 122 * 10.0) / 1e6)


def test_codex_hypothesis_falls_back_to_first_sentence(repo: Path, tmp_path: Path, agent_log: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_AGENT_REPLY", "Vectorized the inner loop. Tests pass.")
    ctx = make_ctx(repo, tmp_path, GeneratorSpec(kind="codex"))
    assert generator_for(ctx).propose(ctx).hypothesis == "Vectorized the inner loop."


def test_codex_reconnects_are_notes_not_errors(repo: Path, tmp_path: Path, agent_log: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_AGENT_MODE", "reconnect")
    ctx = make_ctx(repo, tmp_path, GeneratorSpec(kind="codex"))
    proposal = generator_for(ctx).propose(ctx)
    assert len(proposal.notes) == 2 and proposal.notes[0].startswith("codex: Reconnecting... 1/5")
    assert proposal.tokens_in == 24763


def test_codex_failed_turn_is_gen_error(repo: Path, tmp_path: Path, agent_log: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_AGENT_MODE", "error")
    ctx = make_ctx(repo, tmp_path, GeneratorSpec(kind="codex"))
    with pytest.raises(GeneratorError, match="codex turn failed: stream disconnected") as info:
        generator_for(ctx).propose(ctx)
    assert isinstance(info.value, AgentReportError) and info.value.proposal is not None


def test_codex_failed_turn_with_exit_zero_is_gen_error(repo: Path, tmp_path: Path, agent_log: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_AGENT_MODE", "error")
    monkeypatch.setenv("FAKE_AGENT_EXIT", "0")
    ctx = make_ctx(repo, tmp_path, GeneratorSpec(kind="codex"))
    with pytest.raises(GeneratorError, match="codex turn failed"):
        generator_for(ctx).propose(ctx)


def test_codex_unauthorized_stops_the_run(repo: Path, tmp_path: Path, agent_log: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_AGENT_MODE", "auth")
    ctx = make_ctx(repo, tmp_path, GeneratorSpec(kind="codex"))
    with pytest.raises(FatalGeneratorError, match="401 Unauthorized"):
        generator_for(ctx).propose(ctx)


def test_codex_garbage_output_is_gen_error(repo: Path, tmp_path: Path, agent_log: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_AGENT_MODE", "garbage")
    ctx = make_ctx(repo, tmp_path, GeneratorSpec(kind="codex"))
    with pytest.raises(GeneratorError, match="no JSON events"):
        generator_for(ctx).propose(ctx)


def test_codex_missing_executable_is_fatal(repo: Path, tmp_path: Path, agent_log: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    ctx = make_ctx(repo, tmp_path, GeneratorSpec(kind="codex"))
    with pytest.raises(FatalGeneratorError,
                       match=r"^codex not found on PATH; install the Codex CLI \(npm install -g @openai/codex\), give its path in "
                             r"generator.command, or pick another generator.kind "):
        generator_for(ctx).propose(ctx)


def test_codex_model_args_and_command(repo: Path, tmp_path: Path, agent_log: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/usr/local/bin:/usr/bin:/bin")
    spec = GeneratorSpec(kind="codex", command=f"python3 {FAKES / 'codex'}", model="gpt-5-codex",
                         args=("-c", "model_reasoning_effort=high"))
    ctx = make_ctx(repo, tmp_path, spec)
    generator_for(ctx).propose(ctx)
    assert runs(agent_log)[0]["argv"] == [*CODEX_ARGV, "--model", "gpt-5-codex",
                                          "-c", "model_reasoning_effort=high", "-"]


def test_codex_sandbox_from_args_replaces_the_default(repo: Path, tmp_path: Path, agent_log: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # codex refuses a repeated --sandbox, so the user's must replace ours, not follow it.
    edit(monkeypatch, {"train.py": "lr = 0.05\n"})
    ctx = make_ctx(repo, tmp_path, GeneratorSpec(kind="codex", args=("--sandbox", "read-only")))
    proposal = generator_for(ctx).propose(ctx)
    assert runs(agent_log)[0]["argv"] == ["exec", "--json", "--skip-git-repo-check",
                                          "--sandbox", "read-only", "-"]
    assert (repo / "train.py").read_text() == "lr = 0.1\n"
    assert proposal.notes == ["codex: patch rejected: read-only sandbox"]


# --------------------------------------------------------------------------------------- aider


def aider_argv(ctx: GenContext, *files: str) -> list[str]:
    return ["--message-file", str(ctx.prompt_file), "--yes-always", "--no-auto-commits",
            "--no-dirty-commits", "--no-git", "--no-gitignore", "--no-stream", "--no-pretty",
            "--no-check-update", "--no-show-release-notes", "--no-analytics",
            "--no-suggest-shell-commands", "--no-detect-urls",
            "--input-history-file", str(ctx.log_dir / "aider.input.history"),
            "--chat-history-file", str(ctx.log_dir / "aider.chat.history.md"), *files]


def tree_changes(repo: Path) -> list[str]:
    """Everything that differs from HEAD on disk, ignored files included."""
    return [ln.strip() for ln in git(repo, "status", "--porcelain", "--ignored", "--untracked-files=all").splitlines()]


def test_aider_flags_message_edit_and_report(repo: Path, tmp_path: Path, agent_log: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    edit(monkeypatch, {"train.py": "lr = 0.05\n"})
    head = git(repo, "rev-parse", "HEAD")
    ctx = make_ctx(repo, tmp_path, GeneratorSpec(kind="aider"))
    proposal = generator_for(ctx).propose(ctx)

    (run,) = runs(agent_log)
    assert run["argv"] == aider_argv(ctx, "./train.py")
    assert run["message"] == PROMPT
    # Only the edit: no commit, no history files or .gitignore entry in the work tree.
    assert (repo / "train.py").read_text() == "lr = 0.05\n"
    assert git(repo, "rev-parse", "HEAD") == head
    assert tree_changes(repo) == ["M train.py"]
    assert (ctx.log_dir / "aider.chat.history.md").exists()
    assert proposal.meta["chat_history"] == str(ctx.log_dir / "aider.chat.history.md")
    assert proposal.tokens_in == 2300 + 12000 and proposal.tokens_out == 456 + 1024
    assert proposal.cost_usd == pytest.approx(0.05)    # the last session total
    assert proposal.turns == 2
    assert proposal.hypothesis == HYPOTHESIS


def test_aider_chat_gets_existing_allowed_files_only(make_repo: Any, tmp_path: Path,
                                                     agent_log: Path) -> None:
    repo = make_repo({"src/a.py": "", "src/b.py": "", "src/vendor/v.py": "", "README.md": "",
                      "-dash.py": "", "program.md": "---\n"})
    (repo / "src" / "link.py").symlink_to(repo / "README.md")
    ctx = make_ctx(repo, tmp_path, GeneratorSpec(kind="aider"),
                   allowed=("src/**", "-dash.py", "new.py"), forbidden=("src/vendor/**",))
    generator_for(ctx).propose(ctx)
    assert runs(agent_log)[0]["argv"][-3:] == ["./-dash.py", "./src/a.py", "./src/b.py"]
    assert allowed_files(ctx, 1) == (["-dash.py"], 3)


def test_aider_many_files_are_capped_with_a_note(make_repo: Any, tmp_path: Path, agent_log: Path) -> None:
    repo = make_repo({**{f"m/{i:03}.py": "" for i in range(60)}, "program.md": "---\n"})
    ctx = make_ctx(repo, tmp_path, GeneratorSpec(kind="aider"), allowed=("m/**",))
    proposal = generator_for(ctx).propose(ctx)
    files = [a for a in runs(agent_log)[0]["argv"] if a.startswith("./m/")]
    assert len(files) == 50 and files[0] == "./m/000.py"
    assert proposal.notes == ["aider: 60 allowed files exist; the first 50 were added to the chat"]


def test_aider_model_and_args(repo: Path, tmp_path: Path, agent_log: Path,
                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/usr/local/bin:/usr/bin:/bin")
    spec = GeneratorSpec(kind="aider", command=str(FAKES / "aider"), model="sonnet",
                         args=("--map-tokens", "0", "--edit-format", "whole"))
    ctx = make_ctx(repo, tmp_path, spec)
    generator_for(ctx).propose(ctx)
    assert runs(agent_log)[0]["argv"] == [*aider_argv(ctx), "--model", "sonnet",
                                          "--map-tokens", "0", "--edit-format", "whole", "./train.py"]


def test_aider_git_turned_back_on_still_never_commits(repo: Path, tmp_path: Path, agent_log: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    edit(monkeypatch, {"train.py": "lr = 0.05\n"})
    head = git(repo, "rev-parse", "HEAD")
    ctx = make_ctx(repo, tmp_path, GeneratorSpec(kind="aider", args=("--git",)))
    generator_for(ctx).propose(ctx)
    argv = runs(agent_log)[0]["argv"]
    assert "--no-git" not in argv and "--git" in argv and "--no-auto-commits" in argv
    assert git(repo, "rev-parse", "HEAD") == head
    assert tree_changes(repo) == ["M train.py"]


def test_aider_transient_error_then_success(repo: Path, tmp_path: Path, agent_log: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_AGENT_MODE", "retry")
    ctx = make_ctx(repo, tmp_path, GeneratorSpec(kind="aider"))
    assert generator_for(ctx).propose(ctx).turns == 2


def test_aider_model_error_is_gen_error(repo: Path, tmp_path: Path, agent_log: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_AGENT_MODE", "error")
    ctx = make_ctx(repo, tmp_path, GeneratorSpec(kind="aider"))
    with pytest.raises(GeneratorError, match="APIConnectionError"):
        generator_for(ctx).propose(ctx)


def test_aider_bad_credentials_stop_the_run(repo: Path, tmp_path: Path, agent_log: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_AGENT_MODE", "auth")
    ctx = make_ctx(repo, tmp_path, GeneratorSpec(kind="aider"))
    with pytest.raises(FatalGeneratorError, match="invalid x-api-key"):
        generator_for(ctx).propose(ctx)


def test_aider_output_without_a_report_is_read_best_effort(repo: Path, tmp_path: Path, agent_log: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # aider prints text, not a structured report: nothing to parse is not a failure.
    monkeypatch.setenv("FAKE_AGENT_MODE", "garbage")
    ctx = make_ctx(repo, tmp_path, GeneratorSpec(kind="aider"))
    proposal = generator_for(ctx).propose(ctx)
    assert (proposal.tokens_in, proposal.tokens_out, proposal.cost_usd, proposal.turns) == (0, 0, None, 0)
    assert proposal.hypothesis == "(none given)"


def test_aider_failing_exit_is_gen_error(repo: Path, tmp_path: Path, agent_log: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_AGENT_EXIT", "1")
    ctx = make_ctx(repo, tmp_path, GeneratorSpec(kind="aider"))
    with pytest.raises(GeneratorError, match="exit 1") as info:
        generator_for(ctx).propose(ctx)
    assert isinstance(info.value, AgentReportError) and info.value.proposal is not None
    assert info.value.proposal.cost_usd == pytest.approx(0.05)


def test_aider_missing_executable_is_fatal(repo: Path, tmp_path: Path, agent_log: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    ctx = make_ctx(repo, tmp_path, GeneratorSpec(kind="aider"))
    with pytest.raises(FatalGeneratorError, match=r"^aider not found on PATH"):
        generator_for(ctx).propose(ctx)


def test_aider_hypothesis_ignores_an_echoed_prompt(repo: Path, tmp_path: Path) -> None:
    ctx = make_ctx(repo, tmp_path, GeneratorSpec(kind="aider"),
                   prompt="Do it.\nHypothesis: <one sentence>\n")
    out = tmp_path / "out.txt"
    out.write_text("Hypothesis: <one sentence>\nok\nHypothesis: fewer layers train faster\n")
    res = ProcResult(0, False, False, 0.0, out, tmp_path / "out.err", 0)
    assert generator_for(ctx).output_hypothesis(ctx, res) == "fewer layers train faster"


# ------------------------------------------------------------------------------ all presets


@pytest.mark.parametrize("kind", ["claude", "codex", "aider"])
def test_no_api_key_in_argv_or_report(repo: Path, tmp_path: Path, agent_log: Path, kind: str) -> None:
    ctx = make_ctx(repo, tmp_path, GeneratorSpec(kind=kind))
    proposal = generator_for(ctx).propose(ctx)
    assert SECRET not in agent_log.read_text()
    assert SECRET not in json.dumps([proposal.notes, proposal.meta, proposal.hypothesis])


# ------------------------------------------------------------------------------------ helpers


def test_helpers() -> None:
    assert [_aider_count(x) for x in ("456", "1,024", "2.3k", "12k", "1.5M")] == [
        456, 1024, 2300, 12000, 1_500_000]
    assert hypothesis_in("x\n**Hypothesis:** smaller batch\n".splitlines()) == "smaller batch"
    assert hypothesis_in(["Hypothesis:", "", "  a heading"]) == "a heading"
    assert hypothesis_in(["no claim here"]) is None
    assert hypothesis_of(["  One thing.  Two things. "]) == "One thing."
    assert hypothesis_of(["no stop at all"]) == "no stop at all"
    assert hypothesis_of(["   "]) is None
    assert _sets_option(["--sandbox=read-only"], ("--sandbox",))
    assert _sets_option(["-s", "read-only"], ("--sandbox", "-s"))
    assert not _sets_option(["--sandboxed"], ("--sandbox",))
    assert not _sets_option(["-sx"], ("-s",))


def test_proposal_is_the_base_dataclass() -> None:
    assert isinstance(AgentReportError("x", Proposal()).proposal, Proposal)


def test_unrunnable_command_is_fatal(repo: Path, tmp_path: Path, agent_log: Path) -> None:
    script = tmp_path / "no-shebang"
    script.write_text("echo hi\n")
    script.chmod(0o755)
    ctx = make_ctx(repo, tmp_path, GeneratorSpec(kind="codex", command=str(script)))
    with pytest.raises(FatalGeneratorError, match="cannot run"):
        generator_for(ctx).propose(ctx)
    ctx = make_ctx(repo, tmp_path, GeneratorSpec(kind="claude", command="./missing/claude"))
    with pytest.raises(FatalGeneratorError, match="is not an executable file"):
        generator_for(ctx).propose(ctx)


# ------------------------------------------------------------------ inside autoloop's sandbox


def _wrapped(ctx: GenContext, seen: list[dict[str, Any]]) -> GenContext:
    """ctx whose sandbox wrapper records what the generator asked for and runs the command as is."""
    from dataclasses import replace

    def wrap(command: Any, **needs: Any) -> Any:
        seen.append(needs)
        return command

    return replace(ctx, wrap=wrap)


def test_codex_inside_our_sandbox_turns_its_own_off(repo: Path, tmp_path: Path, agent_log: Path) -> None:
    seen: list[dict[str, Any]] = []
    ctx = _wrapped(make_ctx(repo, tmp_path, GeneratorSpec(kind="codex")), seen)
    generator_for(ctx).propose(ctx)
    (run,) = runs(agent_log)
    assert run["argv"] == ["exec", "--json", "--sandbox", "danger-full-access", "--skip-git-repo-check", "-"]
    (needs,) = seen
    assert needs["network"] is True            # an agent preset: on unless program.md says
    state = needs["writable"][0]
    assert run["state_env"]["CODEX_HOME"] == str(state)
    assert FAKES / "codex" in needs["readable"]


def test_agent_state_is_a_private_copy(repo: Path, tmp_path: Path, agent_log: Path) -> None:
    home = Path(os.environ["HOME"])
    (home / ".claude").mkdir()
    (home / ".claude" / "settings.json").write_text('{"x": 1}')
    (home / ".claude" / "projects").mkdir()                      # transcripts: not copied
    (home / ".claude" / "projects" / "big.jsonl").write_text("{}")
    (home / ".claude.json").write_text('{"numStartups": 3}')
    seen: list[dict[str, Any]] = []
    ctx = _wrapped(make_ctx(repo, tmp_path, GeneratorSpec(kind="claude")), seen)
    generator_for(ctx).propose(ctx)
    (state,) = seen[0]["writable"]
    assert runs(agent_log)[0]["state_env"]["CLAUDE_CONFIG_DIR"] == str(state)
    assert state != home / ".claude" and not str(state).startswith(str(home))
    assert sorted(os.listdir(state)) == [".claude.json", "settings.json"]
    assert (state / "settings.json").read_text() == '{"x": 1}'
    assert oct(state.stat().st_mode & 0o777) == "0o700"


def test_codex_failed_edits_and_commands_are_notes_and_all_failed_is_gen_error(tmp_path: Path) -> None:
    from autoloop.generators.agents import CodexGenerator

    out = tmp_path / "out.jsonl"
    events = [
        {"type": "thread.started", "thread_id": "t"},
        {"type": "item.completed", "item": {"type": "command_execution", "command": "pytest -q",
                                            "exit_code": 2, "status": "failed"}},
        {"type": "item.completed", "item": {"type": "file_change", "status": "failed",
                                            "changes": [{"path": "/w/train.py", "kind": "update"}]}},
        {"type": "turn.completed", "usage": {"input_tokens": 10, "output_tokens": 2}},
    ]
    out.write_text("\n".join(json.dumps(e) for e in events) + "\n")
    (tmp_path / "err").write_text("")
    program = Program(path=tmp_path / "program.md", repo_root=tmp_path, goal="g", allowed=("train.py",),
                      verifier=VerifierSpec(command="true", direction="minimize", metric="m"))
    gen = CodexGenerator(GeneratorSpec(kind="codex"), program)
    proposal = Proposal()
    with pytest.raises(GeneratorError, match=r"every edit it tried failed \(/w/train.py\)"):
        gen.parse(out, tmp_path / "err", proposal)
    assert proposal.notes == ["codex: command failed (exit 2): pytest -q", "codex: edit failed: /w/train.py"]
    assert proposal.meta["failed_edits"] == 1 and proposal.meta["failed_commands"] == 1
    # One edit that worked: the cycle goes on (the change set decides), the failure stays a note.
    events.insert(3, {"type": "item.completed", "item": {"type": "file_change", "status": "completed",
                                                         "changes": [{"path": "/w/train.py", "kind": "update"}]}})
    out.write_text("\n".join(json.dumps(e) for e in events) + "\n")
    proposal = Proposal()
    gen.parse(out, tmp_path / "err", proposal)
    assert proposal.notes[-1] == "codex: edit failed: /w/train.py" and proposal.meta["edits"] == 1


def test_agent_network_follows_program_md_when_it_says(repo: Path, tmp_path: Path, agent_log: Path) -> None:
    from dataclasses import replace

    seen: list[dict[str, Any]] = []
    ctx = make_ctx(repo, tmp_path, GeneratorSpec(kind="aider"))
    ctx = _wrapped(replace(ctx, program=replace(ctx.program, lines={"sandbox.network": 7})), seen)
    generator_for(ctx).propose(ctx)
    assert seen[0]["network"] is None        # sandbox.network as written decides
    assert seen[0]["writable"] == []         # aider: no state folder to copy


def test_unsandboxed_agent_keeps_the_users_own_state(repo: Path, tmp_path: Path, agent_log: Path) -> None:
    ctx = make_ctx(repo, tmp_path, GeneratorSpec(kind="codex"))
    generator_for(ctx).propose(ctx)
    assert runs(agent_log)[0]["state_env"]["CODEX_HOME"] is None
