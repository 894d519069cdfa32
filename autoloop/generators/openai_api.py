"""`generator.kind: openai`: any Chat Completions server (OpenAI, or a local Ollama, llama.cpp,
vLLM, LM Studio, ... through `generator.base_url`), with a function tool that mirrors Anthropic's
text editor, executed by EditTool. `tool_choice` is never sent (Ollama and llama.cpp lack it). A
base_url without OPENAI_API_KEY (a local server) sends a placeholder key. Against api.openai.com
the output cap is `max_completion_tokens` (reasoning models reject `max_tokens`)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from autoloop.errors import FatalGeneratorError, GeneratorError
from autoloop.generators.edit_tool import COMMANDS, TOOL_NAME
from autoloop.generators.llm_common import SDKGenerator, Session

# OpenAI's recommended general reasoning model; it takes function tools over Chat Completions
# when no reasoning_effort is sent
DEFAULT_MODEL = "gpt-5.5"
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


def official_api(client: Any) -> bool:
    return urlparse(str(client.base_url)).hostname == "api.openai.com"


class OpenAIGenerator(SDKGenerator):
    vendor = "openai"
    default_model = DEFAULT_MODEL
    key_env = "OPENAI_API_KEY"
    tool_schema = EDITOR_FUNCTION

    def client(self, timeout: float) -> Any:
        import openai
        base_url = self.spec.base_url or os.environ.get("OPENAI_BASE_URL") or None
        api_key = os.environ.get("OPENAI_API_KEY") or None
        if api_key is None:
            if base_url is None:
                raise FatalGeneratorError("openai: set OPENAI_API_KEY or generator.base_url")
            api_key = PLACEHOLDER_KEY     # local servers ignore the key, the SDK insists on one
        try:
            return openai.OpenAI(api_key=api_key, base_url=base_url, timeout=timeout,
                                 max_retries=self.max_retries)
        except openai.OpenAIError as exc:
            raise FatalGeneratorError(f"openai: cannot set up the client: {exc.__class__.__name__}") from None

    def first_messages(self, system: str, prompt: str) -> list[dict[str, Any]]:
        return [{"role": "system", "content": system}, {"role": "user", "content": prompt}]

    def turn(self, s: Session) -> bool:
        reply = self._request(s)
        s.add_reply(reply.text, reply.finish_reason, reply.tokens_in, reply.tokens_out)
        for i, call in enumerate(reply.calls):
            call.id = call.id or f"call_{s.turns}_{i}"   # some local servers omit ids
        s.log.event("reply", turn=s.turns, finish_reason=reply.finish_reason,
                    usage={"prompt_tokens": reply.tokens_in, "completion_tokens": reply.tokens_out},
                    text=reply.text,
                    tool_calls=[{"id": c.id, "name": c.name, "arguments": c.arguments} for c in reply.calls])
        # Some servers end a tool-calling reply with finish_reason "stop": the calls decide. A
        # reply cut at the length limit may carry truncated arguments: never run those.
        if not reply.calls or reply.finish_reason == "length":
            if reply.finish_reason == "length":
                s.notes.append(f"the last reply was cut at the token limit "
                               f"({self.spec.max_tokens})")
            return False
        s.messages.append({"role": "assistant", "content": reply.text or None, "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in reply.calls]})
        for call in reply.calls:
            content, _ = s.run_tool(call.id, call.name, call.arguments)
            s.messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
        return True

    def _request(self, s: Session) -> _Reply:
        import openai
        kwargs: dict[str, Any] = {"model": self.model, "messages": s.messages, "tools": [EDITOR_FUNCTION],
                                  "timeout": max(1.0, s.remaining())}
        kwargs["max_completion_tokens" if official_api(s.client) else "max_tokens"] = self.spec.max_tokens
        with self.api_errors(openai, openai.OpenAIError, s):
            return self._streamed(s.client, kwargs) if self.stream else self._plain(s.client, kwargs)

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
                                if fn.name and fn.name != call.name:   # (some servers resend it)
                                    call.name += fn.name
                                if fn.arguments:
                                    call.arguments += fn.arguments
                    if choice.finish_reason:
                        reply.finish_reason = choice.finish_reason
        reply.text = "".join(text)
        reply.calls = [calls[i] for i in sorted(calls)]
        return reply
