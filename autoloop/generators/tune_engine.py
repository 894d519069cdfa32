"""The search behind `generator.kind: tune`: Optuna's TPE sampler over the marked parameters.

Stateless by design: every proposal rebuilds the study from the observations the ledger holds
(`create_trial` + `add_trial`), so a resumed run, a fresh process and a parallel worker all see
the same study, and the next point depends only on (seed, observations, worker index). Optuna is
imported lazily, and only by `tune` runs (its cost: benchmarks/tune_search.py --import-cost).
"""

from __future__ import annotations

import hashlib
import itertools
import math
import random
import warnings
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

Value = float | str
Config = Mapping[str, Value]

# Random points TPE takes before it models the space (Optuna's default: 10). 5 was ahead in 7 of
# the 9 synthetic columns on seeds 0..99 (within noise), and the table is on fresh seeds.
N_STARTUP = 5
# Multivariate TPE (Optuna 5's default for one objective): it models the parameters jointly,
# which follows a curved valley; univariate lost there (`--engine multivariate=0`).
MULTIVARIATE = True
# Measured points TPE may propose before tune takes a random unmeasured one (ints, categoricals).
_RETRIES = 24


@dataclass(frozen=True)
class Param:
    """One dimension of the search space (a marker, without where it stands in a file)."""

    key: str
    lo: float = 0.0
    hi: float = 1.0
    is_int: bool = False
    log: bool = False
    choices: tuple[str, ...] | None = None

    def distribution(self) -> Any:
        from optuna.distributions import (CategoricalDistribution, FloatDistribution,
                                          IntDistribution)
        if self.choices is not None:
            return CategoricalDistribution(self.choices)
        if self.is_int:
            return IntDistribution(int(self.lo), int(self.hi), log=self.log)
        return FloatDistribution(self.lo, self.hi, log=self.log)

    def contains(self, value: Value) -> bool:
        if self.choices is not None:
            return value in self.choices
        if isinstance(value, str) or (self.is_int and not float(value).is_integer()):
            return False
        return self.lo <= value <= self.hi

    def native(self, value: Value) -> Value | int:
        """The value as Optuna and the files take it: str, int or float."""
        if self.choices is not None:
            return str(value)
        return int(round(float(value))) if self.is_int else float(value)

    def tidy(self, value: Value) -> Value:
        """A value as it is written into a file: ints whole, floats short (0.0372, not 0.03726192)."""
        if self.choices is not None:
            return str(value)
        x = float(value)
        if self.is_int:
            return float(min(self.hi, max(self.lo, round(x))))
        if self.log:
            text = f"{x:.3g}"                        # 3 significant digits: 0.1% of a decade
        else:
            digits = max(0, -math.floor(math.log10((self.hi - self.lo) / 1000)))  # 1/1000 of the range
            text = f"{round(x, digits):.{digits}f}"
        return min(self.hi, max(self.lo, float(text)))

    def values(self) -> list[Value] | None:
        """Every value it can take, or None for a float."""
        ints = [float(v) for v in range(int(self.lo), int(self.hi) + 1)] if self.is_int else None
        return list(self.choices) if self.choices is not None else ints

    def draw(self, rng: random.Random) -> Value:
        if self.choices is not None:
            return rng.choice(self.choices)
        if self.log:
            return self.tidy(math.exp(rng.uniform(math.log(self.lo), math.log(self.hi))))
        return self.tidy(rng.uniform(self.lo, self.hi))


@dataclass(frozen=True)
class Observation:
    config: Config
    value: float | None        # None: measured and failed (crash, guard failure)
    # False for a point tune did not propose (your starting values, another generator's keep): not
    # proposed again, but out of TPE's model, whose densities it skews (tune_search.py --variants)
    proposed: bool = True


@dataclass(frozen=True)
class Suggestion:
    config: dict[str, Value]
    how: str                   # start (TPE's random start) | model (TPE) | random (TPE repeated itself)
    n_observed: int            # measurements it was chosen from (your starting values included)


def canonical(config: Config) -> tuple[tuple[str, Value], ...]:
    return tuple(sorted((k, v if isinstance(v, str) else float(v)) for k, v in config.items()))


def _seed(seed: int | None, n: int, index: int) -> int:
    # A fresh, reproducible stream per (seed, number of observations, use): re-seeding with the
    # seed alone would make every cycle of the random start propose the same point.
    return int.from_bytes(hashlib.sha256(f"{seed}:{n}:{index}".encode()).digest()[:4], "big")


class Engine:
    """Proposes the next configuration(s) from what was measured."""

    def __init__(self, space: Sequence[Param], direction: str, seed: int | None,
                 n_startup: int = N_STARTUP, multivariate: bool = MULTIVARIATE, with_start: bool = False) -> None:
        self.space, self.direction, self.seed = tuple(space), direction, seed
        self.n_startup, self.multivariate, self.with_start = n_startup, multivariate, with_start

    def _usable(self, observations: Sequence[Observation]) -> list[tuple[dict[str, Value | int], float]]:
        """Observations that fit today's space, failures scored as the worst value measured:
        TPE drops failed trials entirely, and a region that crashes should look bad, not unknown."""
        keys = {p.key: p for p in self.space}
        values = [o.value for o in observations if o.value is not None]
        worst = (max(values) if self.direction == "minimize" else min(values)) if values else None
        out = []
        for o in observations:
            value = o.value if o.value is not None else worst
            if value is not None and (o.proposed or self.with_start) and set(o.config) == set(keys) \
                    and all(keys[k].contains(v) for k, v in o.config.items()):
                out.append(({k: keys[k].native(v) for k, v in o.config.items()}, float(value)))
        return out

    def propose(self, observations: Sequence[Observation], count: int = 1) -> list[Suggestion]:
        """`count` distinct unmeasured configurations (the i-th is worker i's), in order; fewer
        only when the space has fewer left. Deterministic given (seed, observations, count)."""
        import optuna
        from optuna.trial import TrialState, create_trial

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        usable = self._usable(observations)
        seen = {canonical(o.config) for o in observations}
        dists = {p.key: p.distribution() for p in self.space}
        with warnings.catch_warnings():
            # Optuna marks constant_liar experimental: a warning on the terminal of every tune
            # cycle would say nothing the user can act on
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            sampler = optuna.samplers.TPESampler(
                seed=_seed(self.seed, len(observations), 0), n_startup_trials=self.n_startup,
                multivariate=self.multivariate, constant_liar=True)
        study = optuna.create_study(direction=self.direction, sampler=sampler)
        for params, value in usable:
            study.add_trial(create_trial(params=params, distributions=dists, value=value))
        rng = random.Random(_seed(self.seed, len(observations), 1))
        out: list[Suggestion] = []
        while len(out) < count:
            how = "start" if len(usable) < self.n_startup else "model"
            config = None
            for _ in range(_RETRIES):
                # each trial is left running: TPE's constant liar keeps the next worker's away
                trial = study.ask(dists)
                candidate = {p.key: p.tidy(trial.params[p.key]) for p in self.space}
                if canonical(candidate) not in seen:
                    config = candidate
                    break
                study.tell(trial, state=TrialState.FAIL)
            if config is None:
                how, config = "random", self._random_unmeasured(rng, seen)
            if config is None:
                break
            seen.add(canonical(config))
            out.append(Suggestion(config, how, len(observations)))
        return out

    def _random_unmeasured(self, rng: random.Random, seen: set[Any]) -> dict[str, Value] | None:
        keys = [p.key for p in self.space]
        grids = [p.values() for p in self.space]
        if all(g is not None for g in grids) and math.prod(len(g) for g in grids) <= 50_000:  # type: ignore[arg-type]
            left = [c for c in itertools.product(*grids) if canonical(dict(zip(keys, c))) not in seen]  # type: ignore[arg-type]
            return dict(zip(keys, rng.choice(left))) if left else None
        for _ in range(1000):
            config = {p.key: p.draw(rng) for p in self.space}
            if canonical(config) not in seen:
                return config
        return None
