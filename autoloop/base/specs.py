"""The frozen values a program.md becomes (read by autoloop.program.schema, re-exported by
autoloop.program.reader)."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Mapping

Direction = Literal["minimize", "maximize"]
Rule = Literal["strict", "paired"]
MAX_WORKERS = 64   # each worker is a git worktree on disk; more is a typo, not a plan
# generator.kind values; autoloop.generators.registry maps each to its backend (and a test
# checks the two agree): program.md's reader must not import the generators.
GENERATOR_KINDS = ("command", "claude", "codex", "aider", "anthropic", "openai", "tune")


@dataclass(frozen=True)
class VerifierSpec:
    command: str
    direction: Direction
    metric: str | None = None          # NAME read as `NAME: NUMBER` (contract §4)
    pattern: str | None = None         # or a regex whose first group is the number
    timeout: float = 600.0
    repeats: int = 1                   # strict rule: runs per side, the median of them decides
    network: bool = False              # measurements keep the network (sandboxed: off unless true)
    hosts: tuple[str, ...] = ()        # with the network on, what the egress proxy lets them reach
    measure: str = "output"            # output: read the metric; wall | cpu: autoloop times the command
    score: str | None = None           # run in the start commit's tree after `command` (contract §10)
    inputs: str | None = None          # run where `score` runs, before `command`: its stdout is the command's stdin

    @property
    def label(self) -> str:
        return self.metric or "metric"


@dataclass(frozen=True)
class Amount:
    """A threshold: `value` percent of a reference (`"1%"`), or `value` in metric units."""
    value: float
    relative: bool

    def of(self, reference: float) -> float:
        return self.value / 100.0 * abs(reference) if self.relative else self.value

    def __str__(self) -> str:
        return f"{self.value:g}%" if self.relative else f"{self.value:g}"


@dataclass(frozen=True)
class AcceptSpec:   # how a candidate is judged (autoloop.decide); the defaults are contract §5
    rule: Rule = "strict"
    min_effect: Amount = Amount(0.0, False)   # 1% when rule is paired and it is not given
    alpha: float = 0.05                  # paired: the bound on false keeps (default 0.005 there)
    pairs: int = 8                       # paired: the most pairs one decision takes (default 16)
    confirm: bool = False                # paired: a second, fresh sequential test must pass too
    warmup: int = 0                      # runs per side measured first and discarded
    final_pairs: int = 20                # end-of-run re-measurement of best vs start (0: none)


@dataclass(frozen=True)
class LimitSpec:   # a secondary metric that must not move past a one-sided limit from the baseline
    metric: str | None = None
    pattern: str | None = None
    max_increase: Amount | None = None
    max_decrease: Amount | None = None

    @property
    def label(self) -> str:
        return self.metric or f"pattern {self.pattern!r}"


@dataclass(frozen=True)
class HoldoutSpec(VerifierSpec):
    """A held-out verifier: never shown to the generator, run on a passed candidate and at the
    end (its program.md keys are VerifierSpec's but repeats and network)."""

    @property
    def label(self) -> str:
        return self.metric or "holdout"


@dataclass(frozen=True)
class GuardSpec:
    name: str
    command: str
    timeout: float = 600.0


@dataclass(frozen=True)
class PriceSpec:   # USD per million tokens
    input: float
    output: float


@dataclass(frozen=True)
class GeneratorSpec:
    kind: str = "claude"
    command: str | None = None
    timeout: float = 1800.0
    args: tuple[str, ...] = ()          # extra arguments appended to a CLI preset
    model: str | None = None
    base_url: str | None = None
    max_turns: int = 30
    max_tokens: int = 8192
    price: PriceSpec | None = None
    seed: int | None = None             # for generators with randomness (tune)


@dataclass(frozen=True)
class ParallelSpec:   # `workers` generators propose from one incumbent, `verify` measured at once
    workers: int = 1
    verify: int | None = None          # verifications at once; None: as many as workers
    executor: str = "local"            # local | ray
    address: str | None = None         # ray: "auto", "ray://host:10001"; none: a private instance
    num_cpus: float | None = None      # ray: resources one verification task asks for
    num_gpus: float | None = None
    accelerator_type: str | None = None      # ray: only nodes of this kind ("A100"; Ray's accelerator_type)
    resources: Mapping[str, float] = field(default_factory=dict)   # ray: custom resources a task asks for
    # ray with verifier.score: the most of $AUTOLOOP_OUTPUT one measurement may send back to the driver
    max_output_mb: float = 512.0
    # resource hints: worker i's generator and verifications get env[i % len(env)] on top of ours
    env: tuple[Mapping[str, str], ...] = ()

    def verify_slots(self, workers: int) -> int:
        return max(1, min(self.verify or workers, workers))

    def worker_env(self, i: int) -> Mapping[str, str]:
        return self.env[i % len(self.env)] if self.env else {}


@dataclass(frozen=True)
class SandboxSpec:
    """`auto`: bubblewrap where it works, else unsandboxed (said loudly); `bwrap`: or exit 2;
    `none`: the watches of autoloop.disk.watch are the only line."""
    kind: Literal["auto", "none", "bwrap"] = "auto"
    network: bool = False                # the generator keeps the network (agent CLIs need it)
    writable: tuple[str, ...] = ()       # more paths generator and measurements may write (~ ok)
    hosts: tuple[str, ...] = ()          # more hosts the generator's egress proxy allows
    hide: tuple[str, ...] = ()           # more paths no sandbox reads (~ and globs ok), beside the
                                         # home's credential places (autoloop.isolation.hidden)
    unix_sockets: bool = False           # the generator may make unix sockets (no seccomp filter;
                                         # the host's bound when it starts are hidden, as from a measurement)


@dataclass(frozen=True)
class ResourcesSpec:   # what one cycle's generator may consume (autoloop.process.rlimits.Limits)
    max_change_mb: float = 100.0         # bytes of files a cycle adds or modifies
    max_disk_mb: float = 2048.0          # disk it may take while it runs, and its largest file
    max_processes: int = 2048            # processes at a time (RLIMIT_NPROC; not for root)


@dataclass(frozen=True)
class DataSpec:   # data outside git: `source` (absolute) appears read-only at `target` in the repo
    source: Path
    target: str


@dataclass(frozen=True)
class StopSpec:
    max_cycles: int | None = None
    max_minutes: float | None = None
    patience: int | None = None
    target: float | None = None
    max_cost_usd: float | None = None


@dataclass(frozen=True)
class Program:
    path: Path                          # absolute path of program.md
    repo_root: Path                     # absolute top level of the git repository holding it
    goal: str
    allowed: tuple[str, ...]
    verifier: VerifierSpec
    forbidden: tuple[str, ...] = ()
    guards: tuple[GuardSpec, ...] = ()
    generator: GeneratorSpec = field(default_factory=GeneratorSpec)
    stop: StopSpec = field(default_factory=StopSpec)
    accept: AcceptSpec = field(default_factory=AcceptSpec)
    limits: tuple[LimitSpec, ...] = ()
    holdout: HoldoutSpec | None = None
    parallel: ParallelSpec = field(default_factory=ParallelSpec)
    sandbox: SandboxSpec = field(default_factory=SandboxSpec)
    resources: ResourcesSpec = field(default_factory=ResourcesSpec)
    data: tuple[DataSpec, ...] = ()
    private: tuple[Path, ...] = ()      # resolved paths outside the repo only `score` and `holdout` see
    body: str = ""
    source: bytes = b""                 # the exact bytes read, to detect and undo tampering
    lines: Mapping[str, int] = field(default_factory=dict)  # dotted key -> line, for later messages

    def line(self, key: str) -> int:
        """The line of the dotted `key`, else of the nearest key that holds it (a guard written
        as a plain string has no `guards[0].command`: it is on the line of `guards[0]`)."""
        while key and key not in self.lines:
            key = key[:max(key.rfind("."), key.rfind("["), 0)]
        return self.lines.get(key, 1)

    @property
    def rel_path(self) -> str:
        return self.path.relative_to(self.repo_root).as_posix()

    @property
    def state_dir(self) -> Path:
        """Where experiments.md, results.tsv and .autoloop/ live: next to program.md."""
        return self.path.parent

    @property
    def protected(self) -> Mapping[str, str]:
        """Paths no generator may touch whatever `allowed` says, with why (contract §3, §7)."""
        base = self.state_dir.relative_to(self.repo_root).as_posix()
        prefix = "" if base == "." else base + "/"
        return {self.rel_path: "program file", prefix + "experiments.md": "journal",
                prefix + "results.tsv": "journal", prefix + ".autoloop": "autoloop state"}


# Words that launch the command rather than name it: `python -m pytest` is "pytest".
_LAUNCHERS = re.compile(r"(python[0-9.]*|py|uv|uvx|run|poetry|pipenv|pdm|hatch|npx|npm|pnpm|"
                        r"yarn|bunx?|exec|env|sudo|time|nice|nohup|sh|bash)")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")


def guard_name(command: str, taken: set[str] | frozenset[str] = frozenset()) -> str:
    """`python -m pytest -q` -> `pytest`, `ruff check .` -> `ruff-check`; `-2`... when taken."""
    try:
        words = shlex.split(command)
    except ValueError:                  # broken quoting: plain whitespace will do for a name
        words = command.split()
    words = [w for w in words if not w.startswith("-") and "=" not in w
             and not _LAUNCHERS.fullmatch(w)]
    parts = [Path(w).stem if "/" in w else w for w in words[:1]]
    parts += [w for w in words[1:2] if _WORD.fullmatch(w)]
    base = re.sub(r"[^a-z0-9]+", "-", "-".join(parts).lower()).strip("-")[:24].strip("-") or "guard"
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}-{n}"
    return name
