"""What the Anthropic and OpenAI generators share: prices, secret redaction, the transcript,
hypothesis extraction, the system prompt and the per-cycle bookkeeping.

Kept free of any SDK import so it is cheap to load and easy to test.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Iterable, Mapping

from autoloop.errors import AutoloopError, FatalGeneratorError, GeneratorError
from autoloop.generators.base import GenContext, Proposal
from autoloop.generators.edit_tool import TOOL_NAME, EditTool, tool_notes
from autoloop.program import GeneratorSpec, PriceSpec
from autoloop.redact import Redactor

STREAM_ENV = "AUTOLOOP_LLM_STREAM"
"""Set to 0/false/no/off to make the SDK generators use plain (non-streaming) requests."""

TRANSCRIPT_NAME = "transcript.jsonl"

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
    """The price of `model`: the override, else the table (a dated snapshot id such as
    `claude-haiku-4-5-20251001` or a `provider/` prefix falls back to its base id), else None."""
    if override is not None:
        return override
    name = model.strip().lower()
    candidates = [name, name.rsplit("/", 1)[-1]]
    for cand in list(candidates):
        candidates.append(_DATE_SUFFIX.sub("", cand))
    for cand in candidates:
        if cand in PRICES:
            inp, out = PRICES[cand]
            return PriceSpec(input=inp, output=out)
    return None


def cost_usd(tokens_in: int, tokens_out: int, price: PriceSpec | None) -> float | None:
    if price is None:
        return None
    return round((tokens_in * price.input + tokens_out * price.output) / 1_000_000, 8)


# ---------------------------------------------------------------------------- secrets

# ---------------------------------------------------------------------------- transcript

class Transcript:
    """Append-only JSONL: one event per line, every string redacted, flushed per line so a
    crash or a kill leaves everything up to that point readable."""

    def __init__(self, path: Path, redactor: Redactor) -> None:
        self.path = path
        self._redactor = redactor
        self._fh: IO[str] | None = None
        self._t0 = time.monotonic()

    def __enter__(self) -> Transcript:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "a", encoding="utf-8")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def event(self, event: str, **data: Any) -> None:
        if self._fh is None:
            return
        record = {"event": event, "t": round(time.monotonic() - self._t0, 3), **data}
        line = json.dumps(self._redactor.obj(record), ensure_ascii=False, default=str)
        self._fh.write(line + "\n")
        self._fh.flush()


# ---------------------------------------------------------------------------- hypothesis

_HYPOTHESIS = re.compile(r"\bHypothesis\s*\**\s*:", re.IGNORECASE)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s")
MAX_HYPOTHESIS_CHARS = 400


def _clean(s: str) -> str:
    return " ".join(s.replace("**", " ").split()).strip(" *_`")


def extract_hypothesis(replies: Iterable[str], fallback_sources: Iterable[str] = ()) -> str:
    """The text after the first `Hypothesis:` in the replies (to the end of that line; the next
    non-empty line if that is empty), else the first sentence of the last non-empty reply, else
    `(none given)`. `fallback_sources` (e.g. thinking text) are searched for `Hypothesis:`
    only after the replies."""
    replies = [r for r in replies if r and r.strip()]
    for source in (replies, list(fallback_sources)):
        for reply in source:
            m = _HYPOTHESIS.search(reply)
            if not m:
                continue
            rest = reply[m.end():]
            lines = rest.split("\n")
            for line in lines[:3]:
                found = _clean(line)
                if found:
                    return found[:MAX_HYPOTHESIS_CHARS]
    if replies:
        last = " ".join(replies[-1].split())
        first = _SENTENCE_END.split(last, maxsplit=1)[0]
        found = _clean(first)
        if found:
            return found[:MAX_HYPOTHESIS_CHARS]
    return "(none given)"


# ---------------------------------------------------------------------------- prompt and bookkeeping

def system_prompt(ctx: GenContext) -> str:
    """The fixed part of the instructions; the cycle's own prompt is the user message."""
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


def stream_default(explicit: bool | None) -> bool:
    """Streaming unless told otherwise (constructor argument, else $AUTOLOOP_LLM_STREAM)."""
    if explicit is not None:
        return explicit
    value = os.environ.get(STREAM_ENV, "").strip().lower()
    return value not in ("0", "false", "no", "off")


@dataclass
class LoopState:
    """What one propose() call accumulates, turned into a Proposal at the end."""

    model: str
    price: PriceSpec | None
    tokens_in: int = 0
    tokens_out: int = 0
    turns: int = 0
    usage_missing: bool = False
    replies: list[str] = field(default_factory=list)      # visible text of each reply, in order
    thinking: list[str] = field(default_factory=list)     # thinking text, a fallback hypothesis source
    notes: list[str] = field(default_factory=list)
    stop_reason: str | None = None
    started: float = field(default_factory=time.monotonic)

    def add_usage(self, tokens_in: int | None, tokens_out: int | None) -> None:
        if tokens_in is None and tokens_out is None:
            self.usage_missing = True
            return
        self.tokens_in += int(tokens_in or 0)
        self.tokens_out += int(tokens_out or 0)

    def cost(self) -> float | None:
        if self.usage_missing:
            return None
        return cost_usd(self.tokens_in, self.tokens_out, self.price)

    def proposal(self, tool: EditTool, transcript: Path, redactor: Redactor) -> Proposal:
        """The Proposal; hypothesis and notes redacted, as they reach the journal and commits."""
        notes = list(self.notes) + tool_notes(tool.calls)
        if self.usage_missing:
            notes.append("the server did not report token usage for every reply; cost unknown")
        return Proposal(
            hypothesis=redactor.text(extract_hypothesis(self.replies, self.thinking)),
            tokens_in=self.tokens_in,
            tokens_out=self.tokens_out,
            cost_usd=self.cost(),
            turns=self.turns,
            transcript=transcript,
            notes=[redactor.text(n) for n in notes],
            meta={
                "model": self.model,
                "stop_reason": self.stop_reason,
                "tool_calls": len(tool.calls),
                "refused": redactor.obj([c.to_dict() for c in tool.refused]),
                "written": tool.written,
                "seconds": round(time.monotonic() - self.started, 3),
            },
        )


class Deadline:
    """The cycle's time budget, shared by every request of the loop."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._end = time.monotonic() + seconds

    def remaining(self) -> float:
        return self._end - time.monotonic()

    def expired(self) -> bool:
        return self.remaining() <= 0


def cycle_budget(ctx: GenContext, spec: GeneratorSpec) -> float:
    """Seconds this propose() may take: the tighter of the cycle's and the spec's timeout."""
    candidates = [t for t in (ctx.timeout, spec.timeout) if t and t > 0]
    return min(candidates) if candidates else 1800.0


# ---------------------------------------------------------------------------- API errors

FATAL_STATUS: dict[int, str] = {
    401: "the API key was refused",
    402: "billing: payment required",
    403: "permission denied",
    404: "not found (check generator.model and generator.base_url)",
}
"""HTTP statuses that no retry can fix: the run stops instead of burning cycles."""


def status_error(vendor: str, status: int, message: str, key_env: str) -> AutoloopError:
    """An HTTP error the SDK gave up on -> FatalGeneratorError (credentials, billing, wrong
    model or URL) or GeneratorError (429, 5xx, anything else: this cycle only)."""
    if status in FATAL_STATUS:
        hint = f" (check {key_env})" if status in (401, 403) else ""
        return FatalGeneratorError(f"{vendor}: HTTP {status}, {FATAL_STATUS[status]}{hint}: {message}")
    return GeneratorError(f"{vendor}: HTTP {status} (after the SDK's retries): {message}")


def api_error_message(exc: BaseException, redactor: Redactor) -> str:
    """The server's own error message from an SDK status error, redacted and bounded."""
    body = getattr(exc, "body", None)
    message: Any = None
    if isinstance(body, Mapping):
        err = body.get("error")
        message = err.get("message") if isinstance(err, Mapping) else body.get("message")
    return redactor.text(str(message or getattr(exc, "message", "") or exc))[:300]
