"""The Generator protocol: what every backend receives and returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence

from autoloop.program import Program


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
    history: Sequence[Mapping[str, Any]]   # finished cycle records from the ledger, oldest first
    # A cycle record has at least: cycle (int, 0 = baseline), status (baseline|keep|discard|crash|
    # guard_fail|violation|no_change|gen_error), metric (float|None: this candidate's), best
    # (float|None: the incumbent's metric after this cycle), hypothesis, lesson, commit (kept
    # commit or None), parent (incumbent commit the cycle started from), changed (list of paths),
    # gen_meta (the Proposal.meta the generator returned that cycle).
    is_allowed: Callable[[str], bool]      # repo-relative path -> may the generator write it?
    env: Mapping[str, str]          # environment for subprocesses (already scrubbed of our secrets)
    timeout: float
    run_marker: str                 # value of AUTOLOOP_RUN_MARKER; lets us find leftover processes
    # A subprocess generator's command goes through `wrap` (the sandbox: a bwrap command line)
    # when it is set, and runs under `limits` (resource limits, see autoloop.proc.Limits).
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
    """A context for checking, before the baseline, that a generator can start at all
    (`preflight`): `scratch` (an empty folder) stands in for the work tree and the logs."""
    prompt = scratch / "prompt.md"
    prompt.write_text("autoloop preflight: this run has not started; change nothing.\n")
    return GenContext(program=program, cycle=0, workdir=scratch, prompt=prompt.read_text(),
                      prompt_file=prompt, hypothesis_file=scratch / "hypothesis.txt", log_dir=scratch,
                      best=None, baseline=None, history=(), is_allowed=lambda _rel: False,
                      env=env, timeout=120.0, run_marker=run_marker, wrap=wrap)


class Generator(Protocol):
    def propose(self, ctx: GenContext) -> Proposal:
        """Edit ctx.workdir once. Raise GeneratorError for a failed attempt (cycle = gen_error),
        FatalGeneratorError when no attempt can ever succeed (run stops, exit 1)."""
        ...

    # Optional (subprocess generators have it): raise FatalGeneratorError unless the generator
    # can start as the cycles will run it (in the sandbox); return its version when it says.
    # def preflight(self, ctx: GenContext) -> str | None

