"""`generator.kind: openai` — any Chat Completions server (OpenAI, or a local Ollama, llama.cpp,
vLLM, LM Studio, ... through `generator.base_url`).

The model gets one *function* tool named `str_replace_based_edit_tool` whose parameters mirror
Anthropic's text editor (command view/create/str_replace/insert, path, file_text, old_str,
new_str, insert_line, insert_text, view_range); every call is executed by EditTool, which
refuses edits outside `allowed` as tool errors. `tool_choice` is never sent (Ollama and
llama.cpp do not support it). Malformed argument JSON from the model goes back to it as a tool
error.

Configuration: OPENAI_API_KEY and OPENAI_BASE_URL as the SDK reads them; `generator.base_url`
overrides the latter. With a base_url and no key (a local server) a placeholder key is sent.
Requests stream by default (with `stream_options: {"include_usage": true}`);
AUTOLOOP_LLM_STREAM=0 or `stream=False` switches to plain requests. Against api.openai.com the
output cap is sent as `max_completion_tokens` (reasoning models reject `max_tokens`); other
servers get `max_tokens`, which they all understand.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from autoloop.errors import AutoloopError, FatalGeneratorError, GeneratorError
from autoloop.generators.base import GenContext, Proposal
from autoloop.generators.edit_tool import COMMANDS, TOOL_NAME, EditTool
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
    import openai

DEFAULT_MODEL = "gpt-5.5"
"""OpenAI's recommended general reasoning model (developers.openai.com reasoning guide); it takes
function tools over Chat Completions when no reasoning_effort is sent."""

PLACEHOLDER_KEY = "not-needed"

EDITOR_FUNCTION: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": (
            "View, create and edit text files in the work tree. Commands: "
            "`view` (a file with line numbers, optionally `view_range` [start, end] with end -1 "
            "for the end of the file; or a directory listing), "
            "`create` (write `file_text` to `path`, replacing any existing file), "
            "`str_replace` (replace `old_str`, which must occur exactly once, by `new_str`), "
            "`insert` (insert `insert_text` after line `insert_line`; 0 = at the top). "
            "Paths are relative to the work tree (absolute paths inside it work too)."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "command": {"type": "string", "enum": list(COMMANDS),
                            "description": "The command to run."},
                "path": {"type": "string", "description": "File or directory path."},
                "file_text": {"type": "string", "description": "`create`: the content of the file."},
                "old_str": {"type": "string",
                            "description": "`str_replace`: the exact text to replace (must match once)."},
                "new_str": {"type": "string", "description": "`str_replace`: the replacement text."},
                "insert_line": {"type": "integer",
                                "description": "`insert`: the line after which to insert (0 = top)."},
                "insert_text": {"type": "string", "description": "`insert`: the text to insert."},
                "view_range": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2,
                               "description": "`view`: [start, end] lines, 1-based; end -1 = to the end."},
            },
            "required": ["command", "path"],
        },
    },
}



@dataclass
class _Call:
    id: str = ""
    name: str = ""
    arguments: str = ""


@dataclass
class _Reply:
    text: str = ""
    calls: list[_Call] = field(default_factory=list)
    finish_reason: str | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None


class OpenAIGenerator:
    """propose(ctx): one agent loop over Chat Completions editing ctx.workdir."""

    def __init__(self, spec: GeneratorSpec, program: Program, *, stream: bool | None = None,
                 max_retries: int = 2) -> None:
        self.spec = spec
        self.program = program
        self.model = spec.model or DEFAULT_MODEL
        self.stream = stream_default(stream)
        self.max_retries = max_retries

    # ------------------------------------------------------------------ client

    def _client(self, timeout: float) -> tuple[openai.OpenAI, bool]:
        """The client, and whether it talks to OpenAI's own API."""
        try:
            import openai
        except ImportError as exc:   # pragma: no cover - a dependency of the package
            raise FatalGeneratorError("generator.kind openai needs the `openai` package") from exc
        base_url = self.spec.base_url or os.environ.get("OPENAI_BASE_URL") or None
        api_key = os.environ.get("OPENAI_API_KEY") or None
        if api_key is None:
            if base_url is None:
                raise FatalGeneratorError("openai: set OPENAI_API_KEY or generator.base_url")
            api_key = PLACEHOLDER_KEY     # local servers ignore the key, the SDK insists on one
        try:
            client = openai.OpenAI(api_key=api_key, base_url=base_url, timeout=timeout,
                                   max_retries=self.max_retries)
        except openai.OpenAIError as exc:
            raise FatalGeneratorError(f"openai: cannot set up the client: {exc.__class__.__name__}") from None
        host = urlparse(str(client.base_url)).hostname or ""
        return client, host == "api.openai.com"

    # ------------------------------------------------------------------ loop

    def propose(self, ctx: GenContext) -> Proposal:
        budget = cycle_budget(ctx, self.spec)
        deadline = Deadline(budget)
        client, official = self._client(budget)
        redactor = Redactor(dict(ctx.env), dict(os.environ), extra=(client.api_key,))
        tool = EditTool(ctx.workdir, ctx.is_allowed, allowed_hint=ctx.program.allowed)
        state = LoopState(model=self.model, price=price_for(self.model, self.spec.price))
        path = ctx.log_dir / TRANSCRIPT_NAME
        system = system_prompt(ctx)
        messages: list[dict[str, Any]] = [{"role": "system", "content": system},
                                          {"role": "user", "content": ctx.prompt}]

        with Transcript(path, redactor) as log:
            log.event("start", kind="openai", model=self.model, base_url=str(client.base_url),
                      stream=self.stream, max_turns=self.spec.max_turns,
                      max_tokens=self.spec.max_tokens, tools=[EDITOR_FUNCTION], cycle=ctx.cycle)
            log.event("prompt", system=system, user=ctx.prompt)
            try:
                self._loop(client, official, messages, tool, state, log, deadline, redactor)
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

    def _loop(self, client: openai.OpenAI, official: bool, messages: list[dict[str, Any]],
              tool: EditTool, state: LoopState, log: Transcript, deadline: Deadline,
              redactor: Redactor) -> None:
        max_turns = max(1, self.spec.max_turns)
        while True:
            if deadline.expired():
                raise GeneratorError(f"openai: no final answer within {deadline.seconds:g}s "
                                     f"({state.turns} turns)")
            reply = self._request(client, official, messages, deadline.remaining(), redactor)
            state.turns += 1
            state.add_usage(reply.tokens_in, reply.tokens_out)
            state.stop_reason = reply.finish_reason
            state.replies.append(reply.text)
            for i, call in enumerate(reply.calls):
                if not call.id:        # some local servers omit ids; the API needs them to pair results
                    call.id = f"call_{state.turns}_{i}"
            log.event("reply", turn=state.turns, finish_reason=reply.finish_reason,
                      usage={"prompt_tokens": reply.tokens_in, "completion_tokens": reply.tokens_out},
                      text=reply.text,
                      tool_calls=[{"id": c.id, "name": c.name, "arguments": c.arguments} for c in reply.calls])

            # Some servers end a tool-calling reply with finish_reason "stop"; the calls decide.
            # A reply cut at the length limit may carry truncated arguments: never run those.
            if not reply.calls or reply.finish_reason == "length":
                if reply.finish_reason == "length":
                    state.notes.append(f"the last reply was cut at the token limit ({self.spec.max_tokens})")
                return
            assistant: dict[str, Any] = {
                "role": "assistant",
                "content": reply.text or None,
                "tool_calls": [{"id": c.id, "type": "function",
                                "function": {"name": c.name, "arguments": c.arguments}} for c in reply.calls],
            }
            messages.append(assistant)
            for call in reply.calls:
                messages.append(self._run_tool(call, tool, log))
            if state.turns >= max_turns:
                state.notes.append(f"stopped at max_turns ({max_turns}) while the model wanted to go on")
                return

    def _run_tool(self, call: _Call, tool: EditTool, log: Transcript) -> dict[str, Any]:
        log.event("tool_call", id=call.id, name=call.name, arguments=call.arguments)
        if call.name != TOOL_NAME:
            content, is_error = f"Error: unknown tool {call.name!r}; only {TOOL_NAME} exists", True
        else:
            result = tool.run_json(call.arguments)
            content, is_error = result.content, result.is_error
        log.event("tool_result", id=call.id, is_error=is_error, content=content)
        return {"role": "tool", "tool_call_id": call.id, "content": content}

    def _request(self, client: openai.OpenAI, official: bool, messages: list[dict[str, Any]],
                 remaining: float, redactor: Redactor) -> _Reply:
        import openai

        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "tools": [EDITOR_FUNCTION],
            "timeout": max(1.0, remaining),
        }
        kwargs["max_completion_tokens" if official else "max_tokens"] = self.spec.max_tokens
        try:
            if self.stream:
                return self._streamed(client, kwargs)
            return self._plain(client, kwargs)
        except openai.APIStatusError as exc:
            raise status_error("openai", exc.status_code, api_error_message(exc, redactor),
                               "OPENAI_API_KEY") from None
        except openai.APITimeoutError:
            raise GeneratorError("openai: the request timed out (after the SDK's retries)") from None
        except openai.APIConnectionError as exc:
            raise GeneratorError(f"openai: cannot reach {client.base_url}: "
                                 f"{redactor.text(str(exc.__cause__ or exc))}") from None
        except openai.OpenAIError as exc:
            raise GeneratorError(f"openai: {exc.__class__.__name__}: {redactor.text(str(exc))[:300]}") from None

    @staticmethod
    def _plain(client: openai.OpenAI, kwargs: dict[str, Any]) -> _Reply:
        resp = client.chat.completions.create(**kwargs)
        if not resp.choices:
            raise GeneratorError("openai: the response has no choices")
        choice = resp.choices[0]
        msg = choice.message
        reply = _Reply(text=msg.content or "", finish_reason=choice.finish_reason)
        for tc in msg.tool_calls or []:
            fn = getattr(tc, "function", None)
            reply.calls.append(_Call(id=tc.id or "", name=getattr(fn, "name", "") or "",
                                     arguments=getattr(fn, "arguments", "") or ""))
        if resp.usage is not None:
            reply.tokens_in, reply.tokens_out = resp.usage.prompt_tokens, resp.usage.completion_tokens
        return reply

    @staticmethod
    def _streamed(client: openai.OpenAI, kwargs: dict[str, Any]) -> _Reply:
        reply = _Reply()
        text: list[str] = []
        calls: dict[int, _Call] = {}
        stream = client.chat.completions.create(**kwargs, stream=True,
                                                stream_options={"include_usage": True})
        with stream:
            for chunk in stream:
                if chunk.usage is not None:
                    reply.tokens_in, reply.tokens_out = chunk.usage.prompt_tokens, chunk.usage.completion_tokens
                for choice in chunk.choices:
                    if choice.index not in (0, None):
                        continue
                    delta = choice.delta
                    if delta is not None:
                        if delta.content:
                            text.append(delta.content)
                        for pos, tc in enumerate(delta.tool_calls or []):
                            index = tc.index if tc.index is not None else pos
                            call = calls.setdefault(index, _Call())
                            if tc.id:
                                call.id = tc.id
                            fn = tc.function
                            if fn is not None:
                                if fn.name and fn.name != call.name:
                                    call.name = fn.name if not call.name else call.name + fn.name
                                if fn.arguments:
                                    call.arguments += fn.arguments
                    if choice.finish_reason:
                        reply.finish_reason = choice.finish_reason
        reply.text = "".join(text)
        reply.calls = [calls[i] for i in sorted(calls)]
        return reply
