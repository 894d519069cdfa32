"""The anthropic and openai generators through the REAL SDK clients against a loopback fake
server (tests/fake_llm_server.py), in a real work tree. No network."""

from __future__ import annotations

import json
from dataclasses import replace
from fnmatch import fnmatch
from pathlib import Path
from typing import Any, Iterator

import pytest

from autoloop.errors import FatalGeneratorError, GeneratorError
from autoloop.generators import anthropic_api, openai_api
from autoloop.generators.anthropic_api import AnthropicGenerator
from autoloop.generators.base import GenContext, Proposal, hypothesis_of
from autoloop.generators.edit_tool import EditTool
from autoloop.generators.llm_common import (
    STREAM_ENV,
    Redactor,
    Session,
    price_for,
    system_prompt,
)
from autoloop.generators.openai_api import OpenAIGenerator, official_api
from autoloop.generators.registry import make_generator
from autoloop.program.reader import GeneratorSpec, PriceSpec, Program, VerifierSpec
from tests.fake_llm_server import Fail, FakeLLMServer, Recorded, Reply, ToolCall, edit

ANTHROPIC_KEY = "sk-ant-api03-DUMMYdummyDUMMY0123456789"
OPENAI_KEY = "sk-proj-DUMMYdummyDUMMY9876543210"
OTHER_SECRET = "hunter2-very-secret-value"
VENDORS = ("anthropic", "openai")
TRAIN = "lr = 0.1\nepochs = 3\n"
VERIFY = "print('m: 1.0')\n"


# ---------------------------------------------------------------------------- fixtures

@pytest.fixture(autouse=True)
def dummy_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("MY_SERVICE_TOKEN", OTHER_SECRET)
    for var in ("ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_PROFILE", "ANTHROPIC_CUSTOM_HEADERS", "OPENAI_ADMIN_KEY",
                "OPENAI_ORG_ID", "OPENAI_PROJECT_ID", "OPENAI_CUSTOM_HEADERS", STREAM_ENV):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def srv() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        yield server


@pytest.fixture
def tree(make_repo: Any) -> Path:
    repo: Path = make_repo({"train.py": TRAIN, "verify.py": VERIFY, "model/net.py": "layers = 2\n"})
    return repo


ALLOWED = ("train.py", "model/**")


def make_ctx(tree: Path, *, timeout: float = 60.0) -> GenContext:
    program = Program(path=tree / "program.md", repo_root=tree, goal="Lower m", allowed=ALLOWED,
                      verifier=VerifierSpec(command="true", direction="minimize", metric="m"))
    log_dir = tree.parent / "logs" / "cycle-1"
    return GenContext(
        program=program, cycle=1, workdir=tree, prompt="Make m lower. Goal: Lower m.",
        prompt_file=tree.parent / "prompt.md", hypothesis_file=tree.parent / "hypothesis.txt",
        log_dir=log_dir, best=1.0, baseline=1.0, history=[],
        is_allowed=lambda rel: any(fnmatch(rel, g) for g in ALLOWED),
        env={"PATH": "/usr/bin", "MY_SERVICE_TOKEN": OTHER_SECRET}, timeout=timeout, run_marker="test",
    )


def make_gen(vendor: str, srv: FakeLLMServer, monkeypatch: pytest.MonkeyPatch, *, via: str = "spec",
             stream: bool | None = True, max_retries: int = 2, **spec_kw: Any) -> AnthropicGenerator | OpenAIGenerator:
    url = srv.anthropic_url if vendor == "anthropic" else srv.openai_url
    if via == "env":
        monkeypatch.setenv("ANTHROPIC_BASE_URL" if vendor == "anthropic" else "OPENAI_BASE_URL", url)
    else:
        spec_kw["base_url"] = url
    spec = GeneratorSpec(kind=vendor, **spec_kw)
    program = make_ctx(Path("/nonexistent")).program
    cls = AnthropicGenerator if vendor == "anthropic" else OpenAIGenerator
    return cls(spec, program, stream=stream, max_retries=max_retries)


def tool_results(vendor: str, req: Recorded) -> list[dict[str, Any]]:
    """The tool results a request carries back to the model, as {id, content, is_error}."""
    msgs = req.body["messages"]
    if vendor == "anthropic":
        last = msgs[-1]
        assert last["role"] == "user"
        return [{"id": b["tool_use_id"], "content": b["content"], "is_error": bool(b.get("is_error"))}
                for b in last["content"] if b.get("type") == "tool_result"]
    out: list[dict[str, Any]] = []
    for m in reversed(msgs):
        if m["role"] != "tool":
            break
        out.insert(0, {"id": m["tool_call_id"], "content": m["content"],
                       "is_error": m["content"].startswith("Error")})
    return out


def read_transcript(p: Proposal) -> list[dict[str, Any]]:
    assert p.transcript is not None and p.transcript.is_file()
    return [json.loads(line) for line in p.transcript.read_text().splitlines()]


# ---------------------------------------------------------------------------- the main path

@pytest.mark.parametrize("via", ["spec", "env"])
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
@pytest.mark.parametrize("vendor", VENDORS)
def test_edits_allowed_file_and_refuses_the_verifier(vendor: str, stream: bool, via: str, srv: FakeLLMServer,
                                                     tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    srv.queue(
        Reply(text="Hypothesis: a smaller learning rate lowers m.",
              tool_calls=[edit("view", "train.py"),
                          edit("str_replace", "train.py", old_str="lr = 0.1", new_str="lr = 0.05"),
                          edit("create", "verify.py", file_text="print('m: 0.0')\n")],
              input_tokens=120, output_tokens=30),
        Reply(text="I lowered the learning rate. The verifier is off limits.", input_tokens=300, output_tokens=15),
    )
    gen = make_gen(vendor, srv, monkeypatch, via=via, stream=stream)
    p = gen.propose(make_ctx(tree))

    # the disk: the allowed edit happened, the verifier is byte-identical
    assert (tree / "train.py").read_text() == "lr = 0.05\nepochs = 3\n"
    assert (tree / "verify.py").read_bytes() == VERIFY.encode()

    # the wire
    assert len(srv.requests) == 2
    path = "/v1/messages" if vendor == "anthropic" else "/v1/chat/completions"
    assert all(r.path == path for r in srv.requests)
    for r in srv.requests:
        assert bool(r.body.get("stream")) is stream
        assert "tool_choice" not in r.body
        key = ANTHROPIC_KEY if vendor == "anthropic" else OPENAI_KEY
        assert key in r.headers.get("authorization", "") + r.headers.get("x-api-key", "")
    if vendor == "anthropic":
        assert srv.requests[0].body["tools"] == [{"type": "text_editor_20250728",
                                                  "name": "str_replace_based_edit_tool"}]
        assert srv.requests[0].body["model"] == anthropic_api.DEFAULT_MODEL
    else:
        (fn,) = srv.requests[0].body["tools"]
        assert fn["type"] == "function" and fn["function"]["name"] == "str_replace_based_edit_tool"
        props = fn["function"]["parameters"]["properties"]
        assert props["command"]["enum"] == ["view", "create", "str_replace", "insert"]
        assert set(props) == {"command", "path", "file_text", "old_str", "new_str", "insert_line",
                              "insert_text", "view_range"}
        assert srv.requests[0].body["model"] == openai_api.DEFAULT_MODEL
        if stream:
            assert srv.requests[0].body["stream_options"] == {"include_usage": True}
        assert srv.requests[0].body["max_tokens"] == 8192    # not api.openai.com
    results = tool_results(vendor, srv.requests[1])
    assert [r["is_error"] for r in results] == [False, False, True]
    assert "lr = 0.1" in results[0]["content"]
    assert results[1]["content"].startswith("Replaced 1 occurrence in train.py")
    assert results[2]["content"].startswith("Error: refused:") and "verify.py" in results[2]["content"]

    # the proposal
    assert p.hypothesis == "a smaller learning rate lowers m."
    assert p.turns == 2
    assert (p.tokens_in, p.tokens_out) == (420, 45)
    assert p.cost_usd is not None and p.cost_usd > 0
    assert any("verify.py" in n for n in p.notes)
    assert p.meta["written"] == ["train.py"] and p.meta["refused"][0]["rel"] == "verify.py"
    assert p.transcript == make_ctx(tree).log_dir / "transcript.jsonl"


@pytest.mark.parametrize("vendor", VENDORS)
def test_create_insert_and_directory_view(vendor: str, srv: FakeLLMServer, tree: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    srv.queue(
        Reply(tool_calls=[edit("view", ".")]),
        Reply(tool_calls=[edit("create", "model/attn.py", file_text="heads = 4\n"),
                          edit("insert", str(tree / "model" / "net.py"), insert_line=1,
                               insert_text="dropout = 0.1\n")]),
        Reply(text="Hypothesis: attention helps. Done."),
    )
    p = make_gen(vendor, srv, monkeypatch).propose(make_ctx(tree))
    listing = tool_results(vendor, srv.requests[1])[0]["content"]
    assert "train.py" in listing and "model/net.py" in listing and ".git" not in listing
    assert (tree / "model" / "attn.py").read_text() == "heads = 4\n"
    assert (tree / "model" / "net.py").read_text() == "layers = 2\ndropout = 0.1\n"
    assert [r["is_error"] for r in tool_results(vendor, srv.requests[2])] == [False, False]
    assert p.turns == 3 and p.hypothesis == "attention helps. Done."


@pytest.mark.parametrize("vendor", VENDORS)
@pytest.mark.parametrize("path", ["../outside.txt", "/etc/hostname", ".git/config"])
def test_escapes_are_refused_as_tool_errors(vendor: str, path: str, srv: FakeLLMServer, tree: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    git_config = (tree / ".git" / "config").read_bytes()
    srv.queue(Reply(tool_calls=[edit("create", path, file_text="x")]), Reply(text="ok"))
    p = make_gen(vendor, srv, monkeypatch).propose(make_ctx(tree))
    (result,) = tool_results(vendor, srv.requests[1])
    assert result["is_error"] and "refused" in result["content"]
    assert not (tree.parent / "outside.txt").exists()
    assert (tree / ".git" / "config").read_bytes() == git_config
    assert p.meta["refused"] and p.meta["written"] == []


# ---------------------------------------------------------------------------- hypothesis

@pytest.mark.parametrize("vendor", VENDORS)
def test_hypothesis_first_marker_wins_over_later_replies(vendor: str, srv: FakeLLMServer, tree: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    srv.queue(Reply(text="Looking.\n**Hypothesis:** cosine schedule beats step decay.\nLet me edit.",
                    tool_calls=[edit("view", "train.py")]),
              Reply(text="Hypothesis: something else entirely. Done."))
    p = make_gen(vendor, srv, monkeypatch).propose(make_ctx(tree))
    assert p.hypothesis == "cosine schedule beats step decay."


@pytest.mark.parametrize("vendor", VENDORS)
def test_hypothesis_falls_back_to_first_sentence_of_last_reply(vendor: str, srv: FakeLLMServer, tree: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    srv.queue(Reply(text="Let me look first.", tool_calls=[edit("view", "train.py")]),
              Reply(text="Halving the learning rate should reduce overshoot. I changed train.py!"))
    p = make_gen(vendor, srv, monkeypatch).propose(make_ctx(tree))
    assert p.hypothesis == "Halving the learning rate should reduce overshoot."


@pytest.mark.parametrize("vendor", VENDORS)
def test_hypothesis_none_given_when_the_model_says_nothing(vendor: str, srv: FakeLLMServer, tree: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    srv.queue(Reply(tool_calls=[edit("view", "train.py")]), Reply(text=""))
    assert make_gen(vendor, srv, monkeypatch).propose(make_ctx(tree)).hypothesis == "(none given)"


def test_anthropic_hypothesis_from_thinking_only_as_fallback_and_thinking_sent_back(
        srv: FakeLLMServer, tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    srv.queue(Reply(thinking="Plan. Hypothesis: fewer epochs avoid overfitting.",
                    tool_calls=[edit("str_replace", "train.py", old_str="epochs = 3", new_str="epochs = 2")]),
              Reply(text=""))
    p = make_gen("anthropic", srv, monkeypatch).propose(make_ctx(tree))
    assert p.hypothesis == "fewer epochs avoid overfitting."
    sent = srv.requests[1].body["messages"][1]["content"][0]
    assert sent == {"type": "thinking", "thinking": "Plan. Hypothesis: fewer epochs avoid overfitting.",
                    "signature": "sig-fake"}


@pytest.mark.parametrize("replies,expected", [
    (["Hypothesis: a", "Hypothesis: b"], "a"),
    (["no marker", "First one. Second one."], "First one."),
    (["hypothesis:   spaced   out  \nrest"], "spaced out"),
    (["Hypothesis:\n  on the next line\n"], "on the next line"),
    (["- **Hypothesis**: bold label"], "bold label"),
    (["", "  "], None),
    ([], None),
    (["What now? Then this."], "What now?"),
])
def test_hypothesis_rules(replies: list[str], expected: str | None) -> None:
    assert hypothesis_of(replies) == expected


def test_sdk_hypothesis_is_bounded_and_none_given(tmp_path: Path) -> None:
    def session(reply: str) -> Session:
        s = Session(make_ctx(tmp_path), None, [], EditTool(tmp_path, lambda _rel: True), None,
                    Redactor({}), 0.0, "", tmp_path / "t.jsonl", "m", None)
        s.add_reply(reply, "end_turn", 1, 1)
        return s
    assert len(session("Hypothesis: " + "x" * 5000).proposal().hypothesis) == 400
    assert session("").proposal().hypothesis == "(none given)"


# ---------------------------------------------------------------------------- usage and cost

@pytest.mark.parametrize("vendor", VENDORS)
def test_cost_from_spec_price_overrides_table(vendor: str, srv: FakeLLMServer, tree: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    srv.queue(Reply(text="Hypothesis: x", input_tokens=1_000_000, output_tokens=500_000))
    p = make_gen(vendor, srv, monkeypatch, price=PriceSpec(input=3.0, output=10.0)).propose(make_ctx(tree))
    assert (p.tokens_in, p.tokens_out, p.turns) == (1_000_000, 500_000, 1)
    assert p.cost_usd == pytest.approx(8.0)


@pytest.mark.parametrize("vendor,model,expected", [
    ("anthropic", "claude-sonnet-5-5", 2.0 * 2 + 10.0 * 1),
    ("anthropic", "claude-haiku-4-5-20251001", 1.0 * 2 + 5.0 * 1),
    ("openai", "gpt-6.1-sol", 2.0 * 2 + 10.0 * 1),
    ("openai", "gpt-5.5", 5.0 * 2 + 30.0 * 1),
])
def test_cost_from_price_table(vendor: str, model: str, expected: float, srv: FakeLLMServer, tree: Path,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    srv.queue(Reply(text="ok", input_tokens=2_000_000, output_tokens=1_000_000))
    p = make_gen(vendor, srv, monkeypatch, model=model).propose(make_ctx(tree))
    assert srv.requests[0].body["model"] == model
    assert p.cost_usd == pytest.approx(expected)
    assert p.meta["model"] == model


@pytest.mark.parametrize("vendor", VENDORS)
def test_unknown_model_has_no_cost(vendor: str, srv: FakeLLMServer, tree: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    srv.queue(Reply(text="ok"))
    p = make_gen(vendor, srv, monkeypatch, model="qwen3-coder:30b").propose(make_ctx(tree))
    assert p.cost_usd is None and p.tokens_in == 100


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
def test_openai_server_without_usage_gives_unknown_cost(stream: bool, srv: FakeLLMServer, tree: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    srv.queue(Reply(text="ok", usage=False))
    p = make_gen("openai", srv, monkeypatch, stream=stream, model="gpt-5.5").propose(make_ctx(tree))
    assert p.cost_usd is None and (p.tokens_in, p.tokens_out) == (0, 0)
    assert any("usage" in n for n in p.notes)


def test_price_lookup() -> None:
    assert price_for("claude-opus-5-5") == PriceSpec(4.0, 20.0)
    assert price_for("openai/gpt-6-luna") == PriceSpec(0.10, 0.50)
    assert price_for("gpt-6.1-sol-2026-09-29") == PriceSpec(2.0, 10.0)
    assert price_for("llama3") is None
    assert price_for("llama3", PriceSpec(1, 1)) == PriceSpec(1, 1)


# ---------------------------------------------------------------------------- errors and retries

@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
@pytest.mark.parametrize("vendor", VENDORS)
def test_429_before_first_answer_is_retried_transparently(vendor: str, stream: bool, srv: FakeLLMServer,
                                                          tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    srv.queue(Fail(429, "slow down"), Reply(text="Hypothesis: retry worked."))
    p = make_gen(vendor, srv, monkeypatch, stream=stream).propose(make_ctx(tree))
    assert p.hypothesis == "retry worked." and p.turns == 1
    assert [r.headers.get("x-stainless-retry-count") for r in srv.requests] == ["0", "1"]


@pytest.mark.parametrize("status", [401, 403])
@pytest.mark.parametrize("vendor", VENDORS)
def test_auth_errors_are_fatal_without_the_key(vendor: str, status: int, srv: FakeLLMServer, tree: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    key = ANTHROPIC_KEY if vendor == "anthropic" else OPENAI_KEY
    srv.queue(Fail(status, f"invalid api key: {key}"))
    with pytest.raises(FatalGeneratorError) as err:
        make_gen(vendor, srv, monkeypatch).propose(make_ctx(tree))
    msg = str(err.value)
    assert str(status) in msg and "API_KEY" in msg
    assert key not in msg and "[REDACTED]" in msg
    assert len(srv.requests) == 1       # not retried
    log = make_ctx(tree).log_dir / "transcript.jsonl"
    assert key not in log.read_text() and '"event": "error"' in log.read_text()


@pytest.mark.parametrize("vendor", VENDORS)
def test_404_model_not_found_is_fatal(vendor: str, srv: FakeLLMServer, tree: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    srv.queue(Fail(404, "model not found"))
    with pytest.raises(FatalGeneratorError, match="not found"):
        make_gen(vendor, srv, monkeypatch).propose(make_ctx(tree))


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
@pytest.mark.parametrize("vendor", VENDORS)
def test_500_every_time_is_a_cycle_error_after_retries(vendor: str, stream: bool, srv: FakeLLMServer,
                                                       tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    srv.default = Fail(500, "boom")
    with pytest.raises(GeneratorError) as err:
        make_gen(vendor, srv, monkeypatch, stream=stream).propose(make_ctx(tree))
    assert not isinstance(err.value, FatalGeneratorError)
    assert "500" in str(err.value) and "boom" in str(err.value)
    assert len(srv.requests) == 3        # the first try and the SDK's two retries


@pytest.mark.parametrize("vendor", VENDORS)
def test_error_in_a_later_turn_is_a_cycle_error(vendor: str, srv: FakeLLMServer, tree: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    srv.queue(Reply(tool_calls=[edit("view", "train.py")]), Fail(529 if vendor == "anthropic" else 503))
    with pytest.raises(GeneratorError):
        make_gen(vendor, srv, monkeypatch, max_retries=0).propose(make_ctx(tree))


@pytest.mark.parametrize("vendor", VENDORS)
def test_connection_refused_is_a_cycle_error(vendor: str, tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeLLMServer() as dead:
        url = dead.anthropic_url if vendor == "anthropic" else dead.openai_url
    spec = GeneratorSpec(kind=vendor, base_url=url)
    cls = AnthropicGenerator if vendor == "anthropic" else OpenAIGenerator
    with pytest.raises(GeneratorError, match="cannot reach") as err:
        cls(spec, make_ctx(tree).program, max_retries=0).propose(make_ctx(tree))
    assert not isinstance(err.value, FatalGeneratorError)


@pytest.mark.parametrize("vendor", VENDORS)
def test_out_of_time_before_asking_is_a_cycle_error(vendor: str, srv: FakeLLMServer, tree: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(GeneratorError, match="no final answer within"):
        make_gen(vendor, srv, monkeypatch).propose(make_ctx(tree, timeout=1e-9))
    assert srv.requests == []


def test_anthropic_without_credentials_is_fatal(srv: FakeLLMServer, tree: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    with pytest.raises(FatalGeneratorError, match="ANTHROPIC_API_KEY"):
        make_gen("anthropic", srv, monkeypatch).propose(make_ctx(tree))
    assert srv.requests == []


def test_openai_without_key_or_base_url_is_fatal(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    gen = OpenAIGenerator(GeneratorSpec(kind="openai"), make_ctx(tree).program)
    with pytest.raises(FatalGeneratorError, match="set OPENAI_API_KEY or generator.base_url"):
        gen.propose(make_ctx(tree))


@pytest.mark.parametrize("via", ["spec", "env"])
def test_openai_local_server_needs_no_key(via: str, srv: FakeLLMServer, tree: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    srv.queue(Reply(text="Hypothesis: local works."))
    p = make_gen("openai", srv, monkeypatch, via=via, model="llama3.1:8b").propose(make_ctx(tree))
    assert p.hypothesis == "local works."
    assert srv.requests[0].headers["authorization"] == "Bearer not-needed"


def test_openai_recognises_the_official_endpoint(tree: Path) -> None:
    # api.openai.com gets max_completion_tokens (reasoning models reject max_tokens); this is
    # the switch that decides it. No request is made.
    gen = OpenAIGenerator(GeneratorSpec(kind="openai"), make_ctx(tree).program)
    client = gen.client(10.0)
    assert official_api(client) and str(client.base_url).startswith("https://api.openai.com/")
    local = OpenAIGenerator(GeneratorSpec(kind="openai", base_url="http://127.0.0.1:1/v1"),
                            make_ctx(tree).program).client(10.0)
    assert not official_api(local)


def test_system_prompt_names_the_tool_the_paths_and_the_hypothesis_line(tree: Path) -> None:
    ctx = make_ctx(tree)
    program = Program(path=ctx.program.path, repo_root=tree, goal="g", allowed=("src/**",),
                      forbidden=("src/vendor/**",), verifier=ctx.program.verifier)
    text = system_prompt(replace(ctx, program=program))
    assert "str_replace_based_edit_tool" in text and str(tree) in text
    assert "src/**" in text and "Never: src/vendor/**" in text and "Hypothesis:" in text


# ---------------------------------------------------------------------------- malformed model output

@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
def test_openai_malformed_tool_json_goes_back_as_a_tool_error(stream: bool, srv: FakeLLMServer, tree: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    srv.queue(Reply(tool_calls=[ToolCall(raw_arguments='{"command": "create", "path": "train.py", "file_te'),
                                ToolCall(raw_arguments='["not", "an", "object"]')]),
              Reply(text="Sorry. Hypothesis: retry later."))
    p = make_gen("openai", srv, monkeypatch, stream=stream).propose(make_ctx(tree))
    results = tool_results("openai", srv.requests[1])
    assert [r["is_error"] for r in results] == [True, True]
    assert "JSON" in results[0]["content"]
    assert (tree / "train.py").read_text() == TRAIN
    assert p.turns == 2 and p.hypothesis == "retry later."


@pytest.mark.parametrize("vendor", VENDORS)
def test_unknown_tool_name_is_a_tool_error(vendor: str, srv: FakeLLMServer, tree: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    srv.queue(Reply(tool_calls=[ToolCall(name="bash", input={"command": "rm -rf /"})]), Reply(text="ok"))
    make_gen(vendor, srv, monkeypatch).propose(make_ctx(tree))
    (result,) = tool_results(vendor, srv.requests[1])
    assert result["is_error"] and "unknown tool" in result["content"]


def test_openai_tool_calls_with_finish_reason_stop_are_still_run(srv: FakeLLMServer, tree: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # Some OpenAI-compatible servers end a tool-calling reply with finish_reason "stop".
    srv.queue(Reply(tool_calls=[edit("str_replace", "train.py", old_str="epochs = 3", new_str="epochs = 4")],
                    finish_reason="stop"),
              Reply(text="done"))
    make_gen("openai", srv, monkeypatch).propose(make_ctx(tree))
    assert "epochs = 4" in (tree / "train.py").read_text()


@pytest.mark.parametrize("vendor", VENDORS)
def test_reply_cut_at_the_length_limit_runs_no_tool(vendor: str, srv: FakeLLMServer, tree: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    call = edit("create", "train.py", file_text="lr = 0.0")
    cut = (Reply(tool_calls=[call], stop_reason="max_tokens") if vendor == "anthropic"
           else Reply(tool_calls=[call], finish_reason="length"))
    srv.queue(cut)
    p = make_gen(vendor, srv, monkeypatch).propose(make_ctx(tree))
    assert (tree / "train.py").read_text() == TRAIN
    assert p.turns == 1 and any("cut" in n for n in p.notes)


# ---------------------------------------------------------------------------- max_turns and streaming switch

@pytest.mark.parametrize("vendor", VENDORS)
def test_max_turns_is_respected(vendor: str, srv: FakeLLMServer, tree: Path,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    srv.default = Reply(text="Hypothesis: keep looking.", tool_calls=[edit("view", "train.py")])
    p = make_gen(vendor, srv, monkeypatch, max_turns=3).propose(make_ctx(tree))
    assert len(srv.requests) == 3 and p.turns == 3
    assert any("max_turns (3)" in n for n in p.notes)


@pytest.mark.parametrize("vendor", VENDORS)
def test_streaming_switch_by_environment(vendor: str, srv: FakeLLMServer, tree: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    srv.queue(Reply(text="a"), Reply(text="b"))
    monkeypatch.setenv(STREAM_ENV, "0")
    make_gen(vendor, srv, monkeypatch, stream=None).propose(make_ctx(tree))
    monkeypatch.delenv(STREAM_ENV)
    make_gen(vendor, srv, monkeypatch, stream=None).propose(make_ctx(tree))
    assert [bool(r.body.get("stream")) for r in srv.requests] == [False, True]


# ---------------------------------------------------------------------------- transcript

@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
@pytest.mark.parametrize("vendor", VENDORS)
def test_transcript_records_everything_and_no_secret(vendor: str, stream: bool, srv: FakeLLMServer, tree: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    leaked = "sk-ant-admin01-LEAKEDleakedLEAKED"
    srv.queue(Reply(text=f"Hypothesis: cache it. My key is {ANTHROPIC_KEY} and {OPENAI_KEY} and {leaked}",
                    tool_calls=[edit("create", "model/secret.py", file_text=f"TOKEN = '{OTHER_SECRET}'\n"),
                                edit("create", "verify.py", file_text="x")]),
              Reply(text="done"))
    p = make_gen(vendor, srv, monkeypatch, stream=stream).propose(make_ctx(tree))
    raw = p.transcript.read_text() if p.transcript else ""
    for secret in (ANTHROPIC_KEY, OPENAI_KEY, leaked, OTHER_SECRET):
        assert secret not in raw
    assert "[REDACTED]" in raw
    events = read_transcript(p)
    kinds = [e["event"] for e in events]
    assert kinds == ["start", "prompt", "reply", "tool_call", "tool_result", "tool_call", "tool_result",
                     "reply", "end"]
    assert events[1]["user"] == "Make m lower. Goal: Lower m."
    assert "Hypothesis:" in events[1]["system"]
    assert events[4]["is_error"] is False and events[6]["is_error"] is True
    assert "refused" in events[6]["content"]
    assert events[-1]["turns"] == 2 and events[-1]["written"] == ["model/secret.py"]
    # the hypothesis goes to the journal and commit messages: secrets are redacted there too
    assert p.hypothesis == "cache it. My key is [REDACTED] and [REDACTED] and [REDACTED]"


def test_redactor() -> None:
    r = Redactor({"A_KEY": "abcdef123", "DB_PASSWORD": "pw-123456", "SHORT_TOKEN": "1", "PATH": "/usr/bin",
                  "GH_TOKEN": "ghp_abcdef", "X_SECRET": "abcdef123456"})
    out = r.text("abcdef123456 abcdef123 pw-123456 /usr/bin 1 ghp_abcdef sk-abcdefgh sk-ant-xyz123456")
    assert out == "[REDACTED] [REDACTED] [REDACTED] /usr/bin 1 [REDACTED] [REDACTED] [REDACTED]"
    assert r.obj({"k": ["abcdef123", {"n": 1}]}) == {"k": ["[REDACTED]", {"n": 1}]}


# ---------------------------------------------------------------------------- registry

@pytest.mark.parametrize("kind,cls", [("anthropic", AnthropicGenerator), ("openai", OpenAIGenerator)])
def test_registry_builds_the_sdk_generators(kind: str, cls: type, tree: Path) -> None:
    gen = make_generator(GeneratorSpec(kind=kind, model="m1"), make_ctx(tree).program)
    assert isinstance(gen, cls) and getattr(gen, "model") == "m1"
