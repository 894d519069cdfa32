"""A loopback stand-in for the Anthropic Messages API and OpenAI Chat Completions.

    with FakeLLMServer() as srv:
        srv.queue(Reply(tool_calls=[edit("str_replace", "train.py", old_str="a", new_str="b")]),
                  Reply(text="Hypothesis: b beats a."))
        ... point the real SDK at srv.anthropic_url (client appends /v1/messages)
            or srv.openai_url (ends in /v1; the client appends /chat/completions) ...
        srv.requests[1].body["messages"]   # what the client sent

Each POST takes the next scripted item from one shared queue and renders it in the wire format
of the path it arrived on: JSON, or Server-Sent Events when the request has "stream": true
(Anthropic: message_start / content_block_start / content_block_delta (text_delta,
thinking_delta, signature_delta, input_json_delta) / content_block_stop / message_delta /
message_stop; OpenAI: `data: {chunk}` lines ending with `data: [DONE]`, the usage chunk when
stream_options.include_usage is set). `Fail(status)` answers with an HTTP error in the
vendor's error format, with `retry-after: 0` and `retry-after-ms: 1` so the SDKs retry at
once. When the queue is empty the server answers `default` if set, else a 500 that names
the problem.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterator, Union

TOOL_NAME = "str_replace_based_edit_tool"
_ids = itertools.count(1)


@dataclass
class ToolCall:
    input: dict[str, Any] | None = None
    name: str = TOOL_NAME
    raw_arguments: str | None = None      # OpenAI only: send exactly this (e.g. malformed JSON)
    id: str | None = None


def edit(command: str, path: str, **params: Any) -> ToolCall:
    """A text-editor tool call: edit("create", "a.py", file_text="...")."""
    return ToolCall(input={"command": command, "path": path, **params})


@dataclass
class Reply:
    text: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    thinking: str | None = None            # Anthropic only: a thinking block before the text
    input_tokens: int = 100
    output_tokens: int = 20
    usage: bool = True                     # False: report no usage at all (OpenAI-compatible servers)
    stop_reason: str | None = None         # Anthropic; default tool_use if tool calls else end_turn
    finish_reason: str | None = None       # OpenAI; default tool_calls if tool calls else stop


@dataclass
class Fail:
    status: int
    message: str = "scripted failure"
    headers: dict[str, str] = field(default_factory=dict)


Item = Union[Reply, Fail]


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]                # lower-cased names
    body: dict[str, Any]


_ANTHROPIC_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                          403: "permission_error", 404: "not_found_error", 429: "rate_limit_error",
                          529: "overloaded_error"}


class FakeLLMServer:
    def __init__(self) -> None:
        self._items: deque[Item] = deque()
        self._lock = threading.Lock()
        self.default: Item | None = None
        # Asked first for every model request: (path, body) -> an item, or None for the queue's
        # next. Real agent CLIs send side requests (titles, quota probes) the script must skip.
        self.responder: Callable[[str, dict[str, Any]], Item | None] | None = None
        self.requests: list[Recorded] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.01},
                                        name="fake-llm", daemon=True)

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> FakeLLMServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def anthropic_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # ------------------------------------------------------------------ script

    def queue(self, *items: Item) -> None:
        with self._lock:
            self._items.extend(items)

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._items)

    def _next(self) -> Item:
        with self._lock:
            if self._items:
                return self._items.popleft()
        return self.default or Fail(500, "fake server: no scripted reply left")

    def _record(self, rec: Recorded) -> None:
        with self._lock:
            self.requests.append(rec)

    # ------------------------------------------------------------------ HTTP

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:   # keep pytest output clean
                pass

            def do_GET(self) -> None:
                # model listings (agent CLIs look their model up): an empty list is an answer
                path = self.path.split("?", 1)[0]
                server._record(Recorded(path, {k.lower(): v for k, v in self.headers.items()}, {}))
                self._json(200, {"object": "list", "data": [], "models": []})

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {"_unparsed": raw.decode("utf-8", "replace")}
                path = self.path.split("?", 1)[0]
                server._record(Recorded(path, {k.lower(): v for k, v in self.headers.items()}, body))
                if path.endswith("/v1/messages/count_tokens"):
                    self._json(200, {"input_tokens": 100})
                    return
                if path.endswith("/v1/messages"):
                    flavour = "anthropic"
                elif path.endswith("/chat/completions"):
                    flavour = "openai"
                elif path.endswith("/responses"):
                    flavour = "responses"
                else:
                    self._json(404, {"error": {"message": f"fake server: no route {path}"}})
                    return
                item = server.responder(path, body) if server.responder is not None else None
                item = item if item is not None else server._next()
                if isinstance(item, Fail):
                    self._fail(flavour, item)
                elif flavour == "anthropic":
                    if body.get("stream"):
                        self._sse((f"event: {e}\ndata: {json.dumps(d)}\n\n" for e, d in
                                   anthropic_events(item, body)))
                    else:
                        self._json(200, anthropic_message(item, body))
                elif flavour == "responses":
                    if body.get("stream", True):
                        self._sse((f"event: {e['type']}\ndata: {json.dumps(e)}\n\n"
                                   for e in responses_events(item, body)))
                    else:
                        self._json(200, responses_object(item, body))
                else:
                    if body.get("stream"):
                        usage = bool((body.get("stream_options") or {}).get("include_usage"))
                        chunks = [f"data: {json.dumps(c)}\n\n" for c in openai_chunks(item, body, usage)]
                        self._sse(iter(chunks + ["data: [DONE]\n\n"]))
                    else:
                        self._json(200, openai_completion(item, body))

            def _json(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _sse(self, events: Iterator[str]) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.end_headers()
                for chunk in events:
                    self.wfile.write(chunk.encode())
                    self.wfile.flush()

            def _fail(self, flavour: str, fail: Fail) -> None:
                headers = {"retry-after": "0", "retry-after-ms": "1", **fail.headers}
                if flavour == "anthropic":
                    kind = _ANTHROPIC_ERROR_TYPES.get(fail.status, "api_error")
                    payload: dict[str, Any] = {"type": "error", "error": {"type": kind, "message": fail.message}}
                else:
                    payload = {"error": {"message": fail.message, "type": "fake_error", "code": fail.status}}
                self._json(fail.status, payload, headers)

        return Handler


# ---------------------------------------------------------------------- Anthropic wire format

def _tool_id(call: ToolCall, prefix: str) -> str:
    if call.id is None:
        call.id = f"{prefix}{next(_ids):04d}"
    return call.id


def _anthropic_blocks(reply: Reply) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if reply.thinking is not None:
        blocks.append({"type": "thinking", "thinking": reply.thinking, "signature": "sig-fake"})
    if reply.text is not None:
        blocks.append({"type": "text", "text": reply.text})
    for call in reply.tool_calls:
        blocks.append({"type": "tool_use", "id": _tool_id(call, "toolu_"), "name": call.name,
                       "input": call.input if call.input is not None else {}})
    return blocks


def _anthropic_stop(reply: Reply) -> str:
    return reply.stop_reason or ("tool_use" if reply.tool_calls else "end_turn")


def anthropic_message(reply: Reply, request: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": f"msg_{next(_ids):04d}", "type": "message", "role": "assistant",
        "model": request.get("model", "fake"), "content": _anthropic_blocks(reply),
        "stop_reason": _anthropic_stop(reply), "stop_sequence": None,
        "usage": {"input_tokens": reply.input_tokens, "output_tokens": reply.output_tokens},
    }


def _halves(s: str) -> list[str]:
    mid = len(s) // 2
    return [p for p in (s[:mid], s[mid:]) if p] or [""]


def anthropic_events(reply: Reply, request: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    message = anthropic_message(reply, request)
    start = {**message, "content": [], "stop_reason": None,
             "usage": {"input_tokens": reply.input_tokens, "output_tokens": 1}}
    yield "message_start", {"type": "message_start", "message": start}
    yield "ping", {"type": "ping"}
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            yield "content_block_start", {"type": "content_block_start", "index": index,
                                          "content_block": {"type": "text", "text": ""}}
            for piece in _halves(block["text"]):
                yield "content_block_delta", {"type": "content_block_delta", "index": index,
                                              "delta": {"type": "text_delta", "text": piece}}
        elif block["type"] == "thinking":
            yield "content_block_start", {"type": "content_block_start", "index": index,
                                          "content_block": {"type": "thinking", "thinking": "", "signature": ""}}
            for piece in _halves(block["thinking"]):
                yield "content_block_delta", {"type": "content_block_delta", "index": index,
                                              "delta": {"type": "thinking_delta", "thinking": piece}}
            yield "content_block_delta", {"type": "content_block_delta", "index": index,
                                          "delta": {"type": "signature_delta", "signature": block["signature"]}}
        else:
            yield "content_block_start", {"type": "content_block_start", "index": index,
                                          "content_block": {**block, "input": {}}}
            for piece in _halves(json.dumps(block["input"])):
                yield "content_block_delta", {"type": "content_block_delta", "index": index,
                                              "delta": {"type": "input_json_delta", "partial_json": piece}}
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    yield "message_delta", {"type": "message_delta",
                            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                            "usage": {"output_tokens": reply.output_tokens}}
    yield "message_stop", {"type": "message_stop"}


# ---------------------------------------------------------------------- OpenAI wire format

def _arguments(call: ToolCall) -> str:
    return call.raw_arguments if call.raw_arguments is not None else json.dumps(call.input or {})


def _finish(reply: Reply) -> str:
    return reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")


def _usage(reply: Reply) -> dict[str, int]:
    return {"prompt_tokens": reply.input_tokens, "completion_tokens": reply.output_tokens,
            "total_tokens": reply.input_tokens + reply.output_tokens}


def openai_completion(reply: Reply, request: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text}
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": _tool_id(c, "call_"), "type": "function",
             "function": {"name": c.name, "arguments": _arguments(c)}} for c in reply.tool_calls]
    out: dict[str, Any] = {
        "id": f"chatcmpl-{next(_ids):04d}", "object": "chat.completion", "created": 1700000000,
        "model": request.get("model", "fake"),
        "choices": [{"index": 0, "message": message, "finish_reason": _finish(reply), "logprobs": None}],
    }
    if reply.usage:
        out["usage"] = _usage(reply)
    return out


def openai_chunks(reply: Reply, request: dict[str, Any], include_usage: bool) -> list[dict[str, Any]]:
    base = {"id": f"chatcmpl-{next(_ids):04d}", "object": "chat.completion.chunk",
            "created": 1700000000, "model": request.get("model", "fake")}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}

    out = [chunk({"role": "assistant", "content": ""})]
    if reply.text:
        out += [chunk({"content": piece}) for piece in _halves(reply.text)]
    for i, call in enumerate(reply.tool_calls):
        out.append(chunk({"tool_calls": [{"index": i, "id": _tool_id(call, "call_"), "type": "function",
                                          "function": {"name": call.name, "arguments": ""}}]}))
        for piece in _halves(_arguments(call)):
            out.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}))
    out.append(chunk({}, _finish(reply)))
    if include_usage and reply.usage:
        out.append({**base, "choices": [], "usage": _usage(reply)})
    return out


# ---------------------------------------------------------------------- OpenAI Responses API
# (Codex CLI speaks it through a custom model provider with wire_api = "responses".) A tool
# call becomes a `function_call` item, or a `custom_tool_call` when the call's name is listed
# in the request as a freeform (custom) tool, such as Codex's apply_patch; its input is then
# the raw text `raw_arguments`.

def _responses_items(reply: Reply, request: dict[str, Any]) -> list[dict[str, Any]]:
    custom = {t.get("name") for t in request.get("tools") or [] if isinstance(t, dict) and t.get("type") == "custom"}
    items: list[dict[str, Any]] = []
    for call in reply.tool_calls:
        call_id = _tool_id(call, "call_")
        if call.name in custom:
            items.append({"type": "custom_tool_call", "id": f"ctc_{call_id}", "status": "completed",
                          "call_id": call_id, "name": call.name,
                          "input": call.raw_arguments if call.raw_arguments is not None else ""})
        else:
            items.append({"type": "function_call", "id": f"fc_{call_id}", "status": "completed",
                          "call_id": call_id, "name": call.name, "arguments": _arguments(call)})
    if reply.text is not None:
        items.append({"type": "message", "id": f"msg_{next(_ids):04d}", "role": "assistant",
                      "status": "completed",
                      "content": [{"type": "output_text", "text": reply.text, "annotations": []}]})
    return items


def responses_object(reply: Reply, request: dict[str, Any], items: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"id": f"resp_{next(_ids):04d}", "object": "response", "created_at": 1700000000,
            "status": "completed", "model": request.get("model", "fake"),
            "output": items if items is not None else _responses_items(reply, request),
            "usage": {"input_tokens": reply.input_tokens, "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens": reply.output_tokens,
                      "output_tokens_details": {"reasoning_tokens": 0},
                      "total_tokens": reply.input_tokens + reply.output_tokens}}


def responses_events(reply: Reply, request: dict[str, Any]) -> Iterator[dict[str, Any]]:
    items = _responses_items(reply, request)
    final = responses_object(reply, request, items)
    yield {"type": "response.created", "response": {**final, "status": "in_progress", "output": []}}
    for index, item in enumerate(items):
        yield {"type": "response.output_item.added", "output_index": index, "item": item}
        yield {"type": "response.output_item.done", "output_index": index, "item": item}
    yield {"type": "response.completed", "response": final}
