"""The metric in a verifier's output (contract §4), and what a measurement found. Pure: it reads
files and starts nothing, so the decide step may use it."""

from __future__ import annotations

import codecs
import io
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator, Protocol

from autoloop.engine.testcount import TestCount

_BLOCK = 1 << 16
_PATTERN_WINDOW = 8 << 20    # a `pattern:` verifier's output is scanned in blocks of this size
_PATTERN_OVERLAP = 64 << 10  # ... re-reading this much of each block's end with the next


class MetricSpec(Protocol):
    """Where the number is: `metric` (a NAME line) or `pattern` (a regex's first group)."""

    @property
    def metric(self) -> str | None: ...

    @property
    def pattern(self) -> str | None: ...


class MetricError(Exception):
    """No usable metric in the verifier's output; the message says why, for the journal."""


@dataclass(frozen=True)
class GuardResult:
    name: str
    ok: bool
    detail: str          # "exit 0", "exit 1: AssertionError ...", "timed out after 120s"
    log_stem: Path
    duration_s: float
    tests: TestCount | None = None   # the test runner's summary in its output (autoloop.engine.testcount)


@dataclass(frozen=True)
class Measurement:
    metric: float | None
    guards: tuple[GuardResult, ...]
    error: str | None            # why there is no metric (crash), or None
    log_stem: Path | None        # the verifier's log (<stem>.out / <stem>.err)
    duration_s: float
    seed: int | None = None      # $AUTOLOOP_SEED of this measurement
    score_said: str = ""         # `wall`/`cpu` with a score that passed: the end of its output
    score_s: float = 0.0         # ... and the seconds that score took (in duration_s too)
    inputs_s: float = 0.0        # verifier.inputs' seconds for this run (0 when its pair's run made them)

    @property
    def verifier_s(self) -> float:
        """The verifier's own time (duration_s counts the guards that ran before it too)."""
        return max(0.0, self.duration_s - sum(g.duration_s for g in self.guards))

    @property
    def guards_ok(self) -> bool:
        return all(g.ok for g in self.guards)

    @property
    def failed_guard(self) -> GuardResult | None:
        return next((g for g in self.guards if not g.ok), None)


def metric_line_regex(name: str) -> re.Pattern[bytes]:
    return re.compile(
        rb"^[ \t]*(?:METRIC[ \t]+)?" + re.escape(name.encode()) + rb"[ \t]*[:=][ \t]*(\S+)[ \t]*\r?$",
        re.MULTILINE,
    )


def parse_metric(stdout_path: Path, spec: MetricSpec) -> float:
    """The number in the LAST `NAME: NUMBER` / `NAME=NUMBER` line (or the pattern's last match)."""
    with open(stdout_path, "rb") as f:
        return _parse(f, spec)


def parse_metric_text(text: str, spec: MetricSpec) -> float:
    """Same rule on a string."""
    return _parse(io.BytesIO(text.encode()), spec)


def _parse(f: BinaryIO, spec: MetricSpec) -> float:
    if spec.pattern is not None:
        return _parse_pattern(f, spec.pattern)
    assert spec.metric is not None
    rx = metric_line_regex(spec.metric)
    for chunk in _chunks_from_end(f):
        for match in reversed(list(rx.finditer(chunk))):
            value = _to_float(match.group(1))
            if value is None:
                continue  # `loss: n/a` is not of the form NAME: NUMBER
            return _finite(value, spec.metric)
    raise MetricError(f"no line '{spec.metric}: NUMBER' in the verifier's output")


def _parse_pattern(f: BinaryIO, pattern: str) -> float:
    """Scan the whole output forward in overlapping windows (bounded memory); keep the last match."""
    rx = re.compile(pattern, re.MULTILINE)
    last: str | None = None
    matched = False
    carry = ""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")  # a character may straddle blocks
    while True:
        block = f.read(_PATTERN_WINDOW)
        text = carry + decoder.decode(block, final=not block)
        for m in rx.finditer(text):
            # matches wholly inside the re-read carry were seen (whole) in the last round;
            # a suffix of one of them must not count as a new match
            if not carry or m.end() > len(carry):
                matched, last = True, m.group(1)
        if not block:
            break
        # a match may straddle the boundary: re-read the tail, from a line start, next round
        tail = text[-_PATTERN_OVERLAP:]
        nl = tail.find("\n")
        carry = tail[nl + 1:] if 0 <= nl < len(tail) - 1 else tail
    if not matched:
        raise MetricError(f"pattern {pattern!r} did not match the verifier's output")
    if last is None:
        raise MetricError(f"pattern {pattern!r} matched, but its first group did not take part")
    value = _to_float(last.encode())
    if value is None:
        raise MetricError(f"pattern matched {last!r}, which is not a number")
    return _finite(value, "metric")


def _to_float(token: bytes) -> float | None:
    try:
        return float(token.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        return None


def _finite(value: float, name: str) -> float:
    if math.isnan(value) or math.isinf(value):
        raise MetricError(f"{name} is {value} (not a finite number)")
    return value


def _chunks_from_end(f: BinaryIO) -> Iterator[bytes]:
    """Line-aligned byte chunks from the end of the file backwards, so the last metric line is
    found without reading a huge log into memory."""
    end = f.seek(0, os.SEEK_END)
    carry = b""   # the partial first line of the chunk after this one
    while end > 0:
        start = max(0, end - _BLOCK)
        f.seek(start)
        # the end of an enormous line is not carried on: no metric line is that long
        block = f.read(end - start) + (carry if len(carry) <= _BLOCK * 16 else b"")
        end = start
        if start > 0:
            cut = block.find(b"\n")
            if cut == -1:
                carry = block if len(block) <= _BLOCK * 16 else b""
                continue
            carry, block = block[: cut + 1], block[cut + 1:]
        yield block
