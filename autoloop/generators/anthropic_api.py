"""`generator.kind: anthropic` — Claude through the Messages API with Anthropic's text-editor tool.

The model gets the cycle's prompt and the `text_editor_20250728` tool
(`str_replace_based_edit_tool`); every tool call is executed by EditTool, which refuses
edits outside `allowed` as tool errors (`is_error: true`). The loop ends when a reply stops
for any reason other than `tool_use`, or after `generator.max_turns` replies.

The SDK's own configuration works unchanged: ANTHROPIC_API_KEY (or ANTHROPIC_AUTH_TOKEN, or a
profile) and ANTHROPIC_BASE_URL; `generator.base_url` overrides the latter. Requests stream by
default (the SDK refuses long non-streaming calls); AUTOLOOP_LLM_STREAM=0 or `stream=False`
switches to plain requests.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, cast

from autoloop.errors import AutoloopError, FatalGeneratorError, GeneratorError
from autoloop.generators.base import GenContext, Proposal
from autoloop.generators.edit_tool import TOOL_NAME, EditTool
from autoloop.generators.llm_common import (
    TRANSCRIPT_NAME,
    Deadline,
    LoopState,
    Redactor,
    Transcript,
    api_error_message,
    cycle_budget,
    price_for,
    status_error,
    stream_default,
    system_prompt,
)
from autoloop.program import GeneratorSpec, Program

if TYPE_CHECKING:
    import anthropic
    from anthropic.types import Message

DEFAULT_MODEL = "claude-sonnet-5-5"
"""Anthropic's current Sonnet (platform.claude.com models overview; listed in anthropic 2.14's ModelParam)."""

TOOL_TYPE = "text_editor_20250728"
"""The text-editor version for current Claude models (anthropic.types.ToolTextEditor20250728Param)."""

EDITOR_TOOL: dict[str, str] = {"type": TOOL_TYPE, "name": TOOL_NAME}


class AnthropicGenerator:
    """propose(ctx): one agent loop of Claude editing ctx.workdir through the text-editor tool."""

    def __init__(self, spec: GeneratorSpec, program: Program, *, stream: bool | None = None,
                 max_retries: int = 2) -> None:
        self.spec = spec
        self.program = program
        self.model = spec.model or DEFAULT_MODEL
        self.stream = stream_default(stream)
        self.max_retries = max_retries

    # ------------------------------------------------------------------ client

    def _client(self, timeout: float) -> anthropic.Anthropic:
        try:
            import anthropic
        except ImportError as exc:   # pragma: no cover - a dependency of the package
            raise FatalGeneratorError("generator.kind anthropic needs the `anthropic` package") from exc
        try:
            client = anthropic.Anthropic(base_url=self.spec.base_url or None, timeout=timeout,
                                         max_retries=self.max_retries)
        except anthropic.AnthropicError as exc:
            raise FatalGeneratorError(f"anthropic: cannot set up the client: {exc.__class__.__name__}") from None
        if not any(getattr(client, attr, None) for attr in ("api_key", "auth_token", "credentials")):
            raise FatalGeneratorError(
                "anthropic: no credentials; set ANTHROPIC_API_KEY (or ANTHROPIC_AUTH_TOKEN)")
        return client

    # ------------------------------------------------------------------ loop

    def propose(self, ctx: GenContext) -> Proposal:
        budget = cycle_budget(ctx, self.spec)
        deadline = Deadline(budget)
        client = self._client(budget)
        redactor = Redactor(dict(ctx.env), dict(os.environ),
                            extra=(client.api_key, client.auth_token))
        tool = EditTool(ctx.workdir, ctx.is_allowed, allowed_hint=ctx.program.allowed)
        state = LoopState(model=self.model, price=price_for(self.model, self.spec.price))
        path = ctx.log_dir / TRANSCRIPT_NAME
        system = system_prompt(ctx)
        messages: list[dict[str, Any]] = [{"role": "user", "content": ctx.prompt}]

        with Transcript(path, redactor) as log:
            log.event("start", kind="anthropic", model=self.model, base_url=str(client.base_url),
                      stream=self.stream, max_turns=self.spec.max_turns,
                      max_tokens=self.spec.max_tokens, tools=[EDITOR_TOOL], cycle=ctx.cycle)
            log.event("prompt", system=system, user=ctx.prompt)
            try:
                self._loop(client, ctx, system, messages, tool, state, log, deadline, redactor)
            except AutoloopError as exc:
                log.event("error", error=exc.__class__.__name__, message=str(exc))
                if isinstance(exc, GeneratorError) and exc.proposal is None:
                    exc.proposal = state.proposal(tool, path, redactor)  # the failed turns still cost
                raise
            finally:
                log.event("end", turns=state.turns, tokens_in=state.tokens_in,
                          tokens_out=state.tokens_out, cost_usd=state.cost(),
                          stop_reason=state.stop_reason, written=tool.written)
        return state.proposal(tool, path, redactor)

    def _loop(self, client: anthropic.Anthropic, ctx: GenContext, system: str,
              messages: list[dict[str, Any]], tool: EditTool, state: LoopState, log: Transcript,
              deadline: Deadline, redactor: Redactor) -> None:
        max_turns = max(1, self.spec.max_turns)
        while True:
            if deadline.expired():
                raise GeneratorError(f"anthropic: no final answer within {deadline.seconds:g}s "
                                     f"({state.turns} turns)")
            msg = self._request(client, system, messages, deadline.remaining(), redactor)
            state.turns += 1
            usage = msg.usage
            state.add_usage(
                (usage.input_tokens or 0) + (usage.cache_creation_input_tokens or 0)
                + (usage.cache_read_input_tokens or 0),
                usage.output_tokens)
            state.stop_reason = msg.stop_reason
            content = [_block_param(b) for b in msg.content]
            state.replies.append("".join(b["text"] for b in content if b.get("type") == "text"))
            state.thinking.extend(b["thinking"] for b in content
                                  if b.get("type") == "thinking" and b.get("thinking"))
            log.event("reply", turn=state.turns, stop_reason=msg.stop_reason,
                      usage={"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens},
                      content=content)
            if content:
                messages.append({"role": "assistant", "content": content})

            if msg.stop_reason == "tool_use":
                uses = [b for b in content if b.get("type") == "tool_use"]
                if not uses:
                    state.notes.append("the model stopped for tool_use without a tool call")
                    return
                messages.append({"role": "user", "content": [self._run_tool(b, tool, log) for b in uses]})
            elif msg.stop_reason == "pause_turn":
                pass    # the server paused a long turn; sending the reply back lets it continue
            else:
                if msg.stop_reason == "max_tokens":
                    state.notes.append(f"the last reply was cut at max_tokens ({self.spec.max_tokens})")
                return
            if state.turns >= max_turns:
                state.notes.append(f"stopped at max_turns ({max_turns}) while the model wanted to go on")
                return

    def _run_tool(self, block: dict[str, Any], tool: EditTool, log: Transcript) -> dict[str, Any]:
        log.event("tool_call", id=block.get("id"), name=block.get("name"), input=block.get("input"))
        if block.get("name") != TOOL_NAME:
            content, is_error = f"Error: unknown tool {block.get('name')!r}; only {TOOL_NAME} exists", True
        else:
            result = tool.run(block.get("input"))
            content, is_error = result.content, result.is_error
        log.event("tool_result", id=block.get("id"), is_error=is_error, content=content)
        out: dict[str, Any] = {"type": "tool_result", "tool_use_id": block.get("id"), "content": content}
        if is_error:
            out["is_error"] = True
        return out

    def _request(self, client: anthropic.Anthropic, system: str, messages: list[dict[str, Any]],
                 remaining: float, redactor: Redactor) -> Message:
        import anthropic

        kwargs: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.spec.max_tokens,
            "system": system,
            "messages": messages,
            "tools": [EDITOR_TOOL],
            "timeout": max(1.0, remaining),
        }
        try:
            if self.stream:
                with client.messages.stream(**kwargs) as stream:
                    return stream.get_final_message()
            return cast("Message", client.messages.create(**kwargs))
        except anthropic.APIStatusError as exc:
            raise status_error("anthropic", exc.status_code, api_error_message(exc, redactor),
                               "ANTHROPIC_API_KEY") from None
        except anthropic.APITimeoutError:
            raise GeneratorError("anthropic: the request timed out (after the SDK's retries)") from None
        except anthropic.APIConnectionError as exc:
            raise GeneratorError(f"anthropic: cannot reach {client.base_url}: "
                                 f"{redactor.text(str(exc.__cause__ or exc))}") from None
        except anthropic.AnthropicError as exc:
            raise GeneratorError(f"anthropic: {exc.__class__.__name__}: {redactor.text(str(exc))[:300]}") from None
        except TypeError as exc:
            if "authentication" in str(exc).lower():
                raise FatalGeneratorError(
                    "anthropic: no credentials; set ANTHROPIC_API_KEY (or ANTHROPIC_AUTH_TOKEN)") from None
            raise
        except ValueError as exc:    # e.g. a stream the SDK could not assemble
            raise GeneratorError(f"anthropic: bad response: {redactor.text(str(exc))[:300]}") from None


def _block_param(block: Any) -> dict[str, Any]:
    """A response content block as the param to send back (thinking blocks exactly as received)."""
    kind = getattr(block, "type", None)
    if kind == "text":
        return {"type": "text", "text": block.text}
    if kind == "tool_use":
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
    if kind == "thinking":
        return {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
    if kind == "redacted_thinking":
        return {"type": "redacted_thinking", "data": block.data}
    dumped: dict[str, Any] = block.to_dict(exclude_none=True) if hasattr(block, "to_dict") else dict(block)
    return dumped
