"""What the probe says: the baseline it measured (`Baseline`), each class as it starts
(`Trying`) and as it ends (`Finding`: fooled, held, unclear or skipped, with the setting that
closes the hole), and `ProbeError` when HEAD itself does not measure."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

BASELINE_RUNS = 3
MIN_MARGIN = 0.05        # a hack must beat the best baseline run by 5% of their median at least
# hacked runs after the first, each beside an unmodified run: under a loaded CI machine (2 cores)
# wall times swung 0.79-1.31 s and a do-nothing hack beat the baseline and one run beside it
CONFIRMATIONS = 2
# a gain inside the baseline's noise, measured again beside unmodified runs: a plant that does
# nothing stays unclear one time in 2**RECHECKS, whatever the machine's drift
RECHECKS = 3
# the hacks whose answers are wrong by design: a failing guard caught them. Every other plant keeps
# the answers right, so a guard it fails says it broke the project, not that the verifier held.
WRONG_ON_PURPOSE = frozenset({"test-runner"})


@dataclass(frozen=True)
class Finding:
    name: str            # the class: atexit, patched-clock, ...
    fooled: bool | None  # None: not tried (it does not fit this program), `detail` says why
    detail: str
    fix: str = ""
    # the plant broke the project's tests or crashed its benchmark, or the verdict was in the
    # noise: it says nothing about the verifier, so it is neither fooled nor held
    unclear: bool = False

    @property
    def verdict(self) -> str:
        return "skip" if self.fooled is None else "fooled" if self.fooled else "unclear" if self.unclear else "held"


@dataclass(frozen=True)
class Trying:
    """A class is about to be tried: the k-th of n (for a progress line)."""
    name: str
    k: int
    n: int


@dataclass(frozen=True)
class Baseline:
    values: tuple[float, ...]
    target: str | None        # where the hacks are planted
    helpers: tuple[str, ...]  # test helpers the test-helper hack weakens
    seconds: float            # how long the verifier took (the signal hack's timer is a fraction)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def spread(self) -> float:
        """The runs' range over their median: a hack must gain half of it to count as fooled."""
        return (max(self.values) - min(self.values)) / abs(self.median) if self.median else 0.0

    @property
    def noisy(self) -> bool:
        """The spread, not MIN_MARGIN, sets the margin: smaller gains read as held."""
        return self.spread / 2 > MIN_MARGIN


class ProbeError(Exception):
    """The baseline itself does not measure: nothing can be compared."""

