"""What the Anthropic and OpenAI generators share: the agent loop around one vendor request,
prices, the transcript, the system prompt and the API error mapping. Free of any SDK import,
so it is cheap to load (the agent presets use its prices too)."""

from __future__ import annotations

import json
import os
import re
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any, ClassVar, Iterator, Mapping

from autoloop.errors import AutoloopError, FatalGeneratorError, GeneratorError
from autoloop.generators.base import GenContext, Proposal, hypothesis_of
from autoloop.generators.edit_tool import TOOL_NAME, EditTool, tool_notes
from autoloop.program.reader import GeneratorSpec, PriceSpec, Program
from autoloop.journal.redact import Redactor

STREAM_ENV = "AUTOLOOP_LLM_STREAM"   # 0/false/no/off: plain (non-streaming) requests

# USD per million tokens (input, output), standard tier, short context, no caching.
# Checked against the vendors' model/pricing pages (platform.claude.com, developers.openai.com)
# in November 2026; spec.price (generator.price in program.md) overrides any entry.
PRICES: dict[str, tuple[float, float]] = {
    # Anthropic
    "claude-fable-5-2": (8.0, 40.0),
    "claude-fable-5-1": (10.0, 50.0),
    "claude-opus-5-5": (4.0, 20.0),
    "claude-opus-5": (5.0, 25.0),
    "claude-sonnet-5-5": (2.0, 10.0),
    "claude-sonnet-5": (2.0, 10.0),
    "claude-opus-4-8": (5.0, 25.0),
    "claude-opus-4-7": (5.0, 25.0),
    "claude-opus-4-6": (5.0, 25.0),
    "claude-opus-4-5": (5.0, 25.0),
    "claude-sonnet-4-6": (3.0, 15.0),
    "claude-sonnet-4-5": (3.0, 15.0),
    "claude-haiku-4-5": (1.0, 5.0),
    # OpenAI
    "gpt-6-astra": (10.0, 50.0),
    "gpt-6.1-sol": (2.0, 10.0),
    "gpt-6-sol": (2.0, 10.0),
    "gpt-6-luna": (0.10, 0.50),
    "gpt-5.6-sol": (4.0, 20.0),
    "gpt-5.6-luna": (0.20, 1.20),
    "gpt-5.5": (5.0, 30.0),
    "gpt-5": (1.25, 10.0),
    "gpt-5-mini": (0.25, 2.0),
    "gpt-5-nano": (0.05, 0.40),
    "gpt-4.1": (2.0, 8.0),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
    "gpt-4o": (2.50, 10.0),
    "gpt-4o-mini": (0.15, 0.60),
}

_DATE_SUFFIX = re.compile(r"-(\d{8}|\d{4}-\d{2}-\d{2})$")


def price_for(model: str, override: PriceSpec | None = None) -> PriceSpec | None:
    """The override, else the table (a dated snapshot id or a `provider/` prefix falls back to
    its base id), else None."""
    if override is not None:
        return override
    name = model.strip().lower()
    for cand in (name, name.rsplit("/", 1)[-1]):
        for key in (cand, _DATE_SUFFIX.sub("", cand)):
            if key in PRICES:
                return PriceSpec(*PRICES[key])
    return None


def cost_usd(tokens_in: int, tokens_out: int, price: PriceSpec | None) -> float | None:
    if price is None:
        return None
    return round((tokens_in * price.input + tokens_out * price.output) / 1_000_000, 8)


class Transcript:
    """Append-only JSONL, every string redacted, flushed per line (a kill leaves it readable)."""

    def __init__(self, path: Path, redactor: Redactor) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: IO[str] = open(path, "a", encoding="utf-8")
        self._redactor = redactor
        self._t0 = time.monotonic()

    def event(self, event: str, **data: Any) -> None:
        record = {"event": event, "t": round(time.monotonic() - self._t0, 3), **data}
        self._fh.write(json.dumps(self._redactor.obj(record), ensure_ascii=False, default=str) + "\n")
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()


def system_prompt(ctx: GenContext) -> str:
    never = f" Never: {', '.join(ctx.program.forbidden)}." if ctx.program.forbidden else ""
    return (
        "You are the generator of an autoloop ratchet run: you make ONE focused change to the "
        "repository that you expect to improve the metric; a separate verifier then measures it "
        "and the change is kept only if it is better.\n"
        f"The work tree is {ctx.workdir}. Use the `{TOOL_NAME}` tool to view and edit files; "
        "paths may be relative to the work tree. "
        f"You may change only these paths: {', '.join(ctx.program.allowed)}.{never} "
        "Edits elsewhere are refused.\n"
        "Start your final reply with one line `Hypothesis: <what you changed and why it should "
        "help>`, then stop calling the tool."
    )


@dataclass
class Session:
    """One propose() call: the client, the conversation and what it has cost so far."""

    ctx: GenContext
    client: Any
    messages: list[dict[str, Any]]
    tool: EditTool
    log: Transcript
    redactor: Redactor
    end: float                     # time.monotonic() deadline of the cycle
    system: str
    transcript: Path
    model: str
    price: PriceSpec | None
    tokens_in: int = 0
    tokens_out: int = 0
    turns: int = 0
    usage_missing: bool = False
    replies: list[str] = field(default_factory=list)      # visible text of each reply, in order
    thinking: list[str] = field(default_factory=list)     # a fallback hypothesis source
    notes: list[str] = field(default_factory=list)
    stop_reason: str | None = None
    started: float = field(default_factory=time.monotonic)

    def remaining(self) -> float:
        return self.end - time.monotonic()

    def add_reply(self, text: str, stop_reason: str | None, tokens_in: int | None,
                  tokens_out: int | None) -> None:
        self.turns += 1
        self.replies.append(text)
        self.stop_reason = stop_reason
        self.usage_missing |= tokens_in is None and tokens_out is None
        self.tokens_in += int(tokens_in or 0)
        self.tokens_out += int(tokens_out or 0)

    def cost(self) -> float | None:
        return None if self.usage_missing else cost_usd(self.tokens_in, self.tokens_out, self.price)

    def proposal(self) -> Proposal:
        """Hypothesis and notes redacted: they reach the journal and commit messages."""
        tool, redactor = self.tool, self.redactor
        notes = list(self.notes) + tool_notes(tool.calls)
        if self.usage_missing:
            notes.append("the server did not report token usage for every reply; cost unknown")
        said = hypothesis_of(self.replies, self.thinking, limit=400) or "(none given)"
        return Proposal(
            hypothesis=redactor.text(said),
            tokens_in=self.tokens_in, tokens_out=self.tokens_out, cost_usd=self.cost(),
            turns=self.turns, transcript=self.transcript, notes=[redactor.text(n) for n in notes],
            meta={"model": self.model, "stop_reason": self.stop_reason, "tool_calls": len(tool.calls),
                  "refused": redactor.obj([asdict(c) for c in tool.refused]),
                  "written": tool.written, "seconds": round(time.monotonic() - self.started, 3)})

    def run_tool(self, call_id: str, name: str, args: Any) -> tuple[str, bool]:
        """(content, is_error) of one tool call; `args` a mapping, or JSON text (OpenAI)."""
        self.log.event("tool_call", id=call_id, name=name,
                       **({"arguments": args} if isinstance(args, str) else {"input": args}))
        if name != TOOL_NAME:
            content, is_error = f"Error: unknown tool {name!r}; only {TOOL_NAME} exists", True
        else:
            result = self.tool.run_json(args) if isinstance(args, str) else self.tool.run(args)
            content, is_error = result.content, result.is_error
        self.log.event("tool_result", id=call_id, is_error=is_error, content=content)
        return content, is_error


class SDKGenerator:
    """One agent loop of a model editing ctx.workdir through the edit tool; subclasses make the
    client and carry out one turn (a request and the tool calls it asks)."""

    vendor: ClassVar[str]
    default_model: ClassVar[str]
    key_env: ClassVar[str]
    tool_schema: ClassVar[Mapping[str, Any]]

    def __init__(self, spec: GeneratorSpec, program: Program, *, stream: bool | None = None,
                 max_retries: int = 2) -> None:
        self.spec, self.program, self.max_retries = spec, program, max_retries
        self.model = spec.model or self.default_model
        # streaming unless told otherwise (this argument, else $AUTOLOOP_LLM_STREAM)
        self.stream = stream if stream is not None else (
            os.environ.get(STREAM_ENV, "").strip().lower() not in ("0", "false", "no", "off"))

    def client(self, timeout: float) -> Any:
        raise NotImplementedError

    def first_messages(self, system: str, prompt: str) -> list[dict[str, Any]]:
        raise NotImplementedError

    def turn(self, s: Session) -> bool:
        """One request and its tool calls; False when the model has given its final answer."""
        raise NotImplementedError

    def propose(self, ctx: GenContext) -> Proposal:
        # the tighter of the cycle's and the spec's timeout
        budget = min((t for t in (ctx.timeout, self.spec.timeout) if t and t > 0), default=1800.0)
        end = time.monotonic() + budget
        client = self.client(budget)
        redactor = Redactor(dict(ctx.env), dict(os.environ),
                            extra=(client.api_key, getattr(client, "auth_token", None)))
        tool = EditTool(ctx.workdir, ctx.is_allowed, allowed_hint=ctx.program.allowed)
        path, system = ctx.log_dir / "transcript.jsonl", system_prompt(ctx)
        log = Transcript(path, redactor)
        s = Session(ctx, client, self.first_messages(system, ctx.prompt), tool, log, redactor, end,
                    system, path, self.model, price_for(self.model, self.spec.price))
        log.event("start", kind=self.vendor, model=self.model, base_url=str(client.base_url),
                  stream=self.stream, max_turns=self.spec.max_turns, max_tokens=self.spec.max_tokens,
                  tools=[self.tool_schema], cycle=ctx.cycle)
        log.event("prompt", system=system, user=ctx.prompt)
        max_turns = max(1, self.spec.max_turns)
        try:
            while True:
                if s.remaining() <= 0:
                    raise GeneratorError(f"{self.vendor}: no final answer within {budget:g}s "
                                         f"({s.turns} turns)")
                if not self.turn(s):
                    break
                if s.turns >= max_turns:
                    s.notes.append(f"stopped at max_turns ({max_turns}) while the model wanted "
                                   "to go on")
                    break
        except AutoloopError as exc:
            log.event("error", error=exc.__class__.__name__, message=str(exc))
            if isinstance(exc, GeneratorError) and exc.proposal is None:
                exc.proposal = s.proposal()  # the failed turns still cost
            raise
        finally:
            log.event("end", turns=s.turns, tokens_in=s.tokens_in, tokens_out=s.tokens_out,
                      cost_usd=s.cost(), stop_reason=s.stop_reason, written=tool.written)
            log.close()
        return s.proposal()

    @contextmanager
    def api_errors(self, sdk: Any, base_error: type[BaseException], s: Session) -> Iterator[None]:
        """The SDK's errors, after its own retries, as ours: a status no retry can fix stops the
        run (FatalGeneratorError), anything else fails this cycle only."""
        try:
            yield
        except sdk.APIStatusError as exc:
            status, message = exc.status_code, _api_message(exc, s.redactor)
            if status in FATAL_STATUS:
                hint = f" (check {self.key_env})" if status in (401, 403) else ""
                raise FatalGeneratorError(f"{self.vendor}: HTTP {status}, {FATAL_STATUS[status]}{hint}: "
                                          f"{message}") from None
            raise GeneratorError(f"{self.vendor}: HTTP {status} (after the SDK's retries): {message}") from None
        except sdk.APITimeoutError:
            raise GeneratorError(f"{self.vendor}: the request timed out (after the SDK's retries)") from None
        except sdk.APIConnectionError as exc:
            raise GeneratorError(f"{self.vendor}: cannot reach {s.client.base_url}: "
                                 f"{s.redactor.text(str(exc.__cause__ or exc))}") from None
        except base_error as exc:
            raise GeneratorError(f"{self.vendor}: {exc.__class__.__name__}: "
                                 f"{s.redactor.text(str(exc))[:300]}") from None


FATAL_STATUS: dict[int, str] = {
    401: "the API key was refused",
    402: "billing: payment required",
    403: "permission denied",
    404: "not found (check generator.model and generator.base_url)",
}


def _api_message(exc: BaseException, redactor: Redactor) -> str:
    """The server's own error message from an SDK status error, redacted and bounded."""
    body = getattr(exc, "body", None)
    message: Any = None
    if isinstance(body, Mapping):
        err = body.get("error")
        message = err.get("message") if isinstance(err, Mapping) else body.get("message")
    return redactor.text(str(message or getattr(exc, "message", "") or exc))[:300]
