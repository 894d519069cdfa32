"""program.md → a frozen, validated Program.

Every error is one line `program.md:LINE: message` naming the key (ConfigError).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Mapping

Direction = Literal["minimize", "maximize"]


@dataclass(frozen=True)
class VerifierSpec:
    command: str
    direction: Direction
    metric: str | None = None          # NAME read as `NAME: NUMBER` (contract §4)
    pattern: str | None = None         # or a regex whose first group is the number
    timeout: float = 600.0

    @property
    def label(self) -> str:
        return self.metric or "metric"


@dataclass(frozen=True)
class GuardSpec:
    name: str
    command: str
    timeout: float = 600.0


@dataclass(frozen=True)
class PriceSpec:
    """USD per million tokens."""

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
    body: str = ""
    source: bytes = b""                 # the exact bytes read, to detect and undo tampering
    lines: Mapping[str, int] = field(default_factory=dict)  # dotted key -> line, for later messages

    @property
    def rel_path(self) -> str:
        """program.md relative to the repository root, `/`-separated."""
        return self.path.relative_to(self.repo_root).as_posix()

    @property
    def state_dir(self) -> Path:
        """Where experiments.md, results.tsv and .autoloop/ live: next to program.md."""
        return self.path.parent
