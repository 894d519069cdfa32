"""`generator.kind: anthropic`: Claude through the Messages API with Anthropic's text-editor tool
(`text_editor_20250728`), executed by EditTool. The loop ends when a reply stops for any reason
but `tool_use`/`pause_turn`, or after `generator.max_turns` replies. The SDK's own configuration
works unchanged (`generator.base_url` overrides ANTHROPIC_BASE_URL). Requests stream by default:
the SDK refuses long non-streaming calls."""

from __future__ import annotations

from typing import Any, cast

from autoloop.errors import FatalGeneratorError, GeneratorError
from autoloop.generators.edit_tool import TOOL_NAME
from autoloop.generators.llm_common import SDKGenerator, Session

DEFAULT_MODEL = "claude-sonnet-5-5"   # Anthropic's current Sonnet (anthropic 2.14's ModelParam)
# the text-editor version of current Claude models
EDITOR_TOOL: dict[str, str] = {"type": "text_editor_20250728", "name": TOOL_NAME}
_BLOCK_FIELDS: dict[str | None, tuple[str, ...]] = {
    "text": ("text",), "tool_use": ("id", "name", "input"), "thinking": ("thinking", "signature"),
    "redacted_thinking": ("data",)}
_NO_CREDENTIALS = "anthropic: no credentials; set ANTHROPIC_API_KEY (or ANTHROPIC_AUTH_TOKEN)"


class AnthropicGenerator(SDKGenerator):
    vendor = "anthropic"
    default_model = DEFAULT_MODEL
    key_env = "ANTHROPIC_API_KEY"
    tool_schema = EDITOR_TOOL

    def client(self, timeout: float) -> Any:
        import anthropic
        try:
            client = anthropic.Anthropic(base_url=self.spec.base_url or None, timeout=timeout,
                                         max_retries=self.max_retries)
        except anthropic.AnthropicError as exc:
            raise FatalGeneratorError(f"anthropic: cannot set up the client: {exc.__class__.__name__}") from None
        if not any(getattr(client, attr, None) for attr in ("api_key", "auth_token", "credentials")):
            raise FatalGeneratorError(_NO_CREDENTIALS)
        return client

    def first_messages(self, system: str, prompt: str) -> list[dict[str, Any]]:
        return [{"role": "user", "content": prompt}]   # (the system prompt goes apart)

    def turn(self, s: Session) -> bool:
        msg = self._request(s)
        usage, content = msg.usage, [_block_param(b) for b in msg.content]
        cached = (usage.cache_creation_input_tokens or 0) + (usage.cache_read_input_tokens or 0)
        s.add_reply("".join(b["text"] for b in content if b.get("type") == "text"),
                    msg.stop_reason, (usage.input_tokens or 0) + cached, usage.output_tokens)
        s.thinking += [b["thinking"] for b in content
                       if b.get("type") == "thinking" and b.get("thinking")]
        s.log.event("reply", turn=s.turns, stop_reason=msg.stop_reason,
                    usage={"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens},
                    content=content)
        if content:
            s.messages.append({"role": "assistant", "content": content})
        if msg.stop_reason == "pause_turn":
            return True    # the server paused a long turn; sending the reply back lets it continue
        if msg.stop_reason != "tool_use":
            if msg.stop_reason == "max_tokens":
                s.notes.append(f"the last reply was cut at max_tokens ({self.spec.max_tokens})")
            return False
        uses = [b for b in content if b.get("type") == "tool_use"]
        if not uses:
            s.notes.append("the model stopped for tool_use without a tool call")
            return False
        results = []
        for b in uses:
            text, is_error = s.run_tool(b.get("id"), b.get("name"), b.get("input"))
            results.append({"type": "tool_result", "tool_use_id": b.get("id"), "content": text,
                            **({"is_error": True} if is_error else {})})
        s.messages.append({"role": "user", "content": results})
        return True

    def _request(self, s: Session) -> Any:
        import anthropic
        kwargs: dict[str, Any] = {"model": self.model, "max_tokens": self.spec.max_tokens,
                                  "system": s.system, "messages": s.messages, "tools": [EDITOR_TOOL],
                                  "timeout": max(1.0, s.remaining())}
        with self.api_errors(anthropic, anthropic.AnthropicError, s):
            try:
                if self.stream:
                    with s.client.messages.stream(**kwargs) as stream:
                        return stream.get_final_message()
                return cast(Any, s.client.messages.create(**kwargs))
            except TypeError as exc:
                if "authentication" in str(exc).lower():
                    raise FatalGeneratorError(_NO_CREDENTIALS) from None
                raise
            except ValueError as exc:    # e.g. a stream the SDK could not assemble
                raise GeneratorError(f"anthropic: bad response: {s.redactor.text(str(exc))[:300]}") from None


def _block_param(block: Any) -> dict[str, Any]:
    """A response content block as the param to send back (thinking blocks exactly as received)."""
    fields = _BLOCK_FIELDS.get(getattr(block, "type", None))
    if fields is not None:
        return {"type": block.type, **{name: getattr(block, name) for name in fields}}
    dumped: dict[str, Any] = block.to_dict(exclude_none=True) if hasattr(block, "to_dict") else dict(block)
    return dumped
