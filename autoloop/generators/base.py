"""The Generator protocol: what every backend receives and returns."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

from autoloop.program.reader import Program

_HYPOTHESIS = re.compile(r"\bHypothesis[\s*_`]*:(.*)", re.IGNORECASE)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s")
MAX_HYPOTHESIS = 1000


@dataclass(frozen=True)
class GenContext:
    """Everything a generator may use for one cycle. It edits `workdir` and nothing else."""

    program: Program
    cycle: int                      # 1-based
    workdir: Path                   # the work tree it may edit (cwd for command generators)
    prompt: str
    prompt_file: Path               # the prompt, already written
    hypothesis_file: Path           # where a command generator may write its hypothesis
    log_dir: Path                   # this cycle's log folder (transcripts go here)
    best: float | None              # the incumbent's metric
    baseline: float | None
    history: Sequence[Mapping[str, Any]]   # the ledger's finished cycle records, oldest first
    is_allowed: Callable[[str], bool]      # repo-relative path -> may the generator write it?
    env: Mapping[str, str]          # environment for subprocesses (already scrubbed of our secrets)
    timeout: float
    run_marker: str                 # value of AUTOLOOP_RUN_MARKER; lets us find leftover processes
    # a subprocess generator's command goes through `wrap` (the sandbox) and runs under
    # `limits` (autoloop.process.rlimits.Limits)
    wrap: Callable[[Any], Any] | None = None
    limits: Any = None


@dataclass
class Proposal:
    """What a generator reports. autoloop never trusts it about *what changed*."""

    hypothesis: str = "(none given)"
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float | None = None
    turns: int = 0
    transcript: Path | None = None
    notes: list[str] = field(default_factory=list)   # e.g. permission denials, refused edits
    no_change_reason: str | None = None              # a generator that knowingly proposes nothing
    meta: dict[str, Any] = field(default_factory=dict)  # backend data journaled as `gen_meta` (JSON-able)
    finished: bool = False   # the generator has nothing left to propose: the run stops after this cycle


def preflight_context(program: Program, scratch: Path, *, env: Mapping[str, str], run_marker: str,
                      wrap: Callable[[Any], Any] | None) -> GenContext:
    """A context for `preflight` (can the generator start at all?) before the baseline; `scratch`,
    an empty folder, stands in for the work tree and the logs."""
    prompt = scratch / "prompt.md"
    prompt.write_text("autoloop preflight: this run has not started; change nothing.\n")
    return GenContext(program=program, cycle=0, workdir=scratch, prompt=prompt.read_text(),
                      prompt_file=prompt, hypothesis_file=scratch / "hypothesis.txt", log_dir=scratch,
                      best=None, baseline=None, history=(), is_allowed=lambda _rel: False,
                      env=env, timeout=120.0, run_marker=run_marker, wrap=wrap)


class Generator(Protocol):
    """Optional `preflight(ctx) -> str | None`: FatalGeneratorError unless the generator can start
    as the cycles will run it (in the sandbox); its version when it says."""

    def propose(self, ctx: GenContext) -> Proposal:
        """Edit ctx.workdir once. Raise GeneratorError for a failed attempt (cycle = gen_error),
        FatalGeneratorError when no attempt can ever succeed (run stops, exit 1)."""
        ...


def _clean(text: str) -> str:
    return " ".join(text.replace("**", " ").split()).strip(" *_`")


def hypothesis_in(lines: Iterable[str], limit: int = MAX_HYPOTHESIS) -> str | None:
    """The text after the first `Hypothesis:` (markdown emphasis tolerated; a label alone on its
    line takes the next non-empty line), or None. `lines` may be a lazy, bounded reader."""
    rest = iter(lines)
    for line in rest:
        m = _HYPOTHESIS.search(line)
        found = m and (_clean(m.group(1)) or next((c for ln in rest if (c := _clean(ln))), ""))
        if found:
            return found[:limit]
    return None


def hypothesis_of(replies: Sequence[str], extra: Iterable[str] = (),
                  limit: int = MAX_HYPOTHESIS) -> str | None:
    """A model's hypothesis: after `Hypothesis:` in its replies (then in `extra`, e.g. its
    thinking), else the first sentence of its last non-empty reply."""
    said = [r for r in replies if r.strip()]
    for text in (*said, *extra):
        found = hypothesis_in(text.splitlines(), limit)
        if found:
            return found
    if not said:
        return None
    return _clean(_SENTENCE_END.split(" ".join(said[-1].split()), maxsplit=1)[0])[:limit] or None
