"""The search behind `generator.kind: tune`: Optuna's TPE sampler over the marked parameters.

Stateless: every proposal rebuilds the study from the ledger's observations, so a resumed run, a
fresh process and a parallel worker see the same study; the next point depends only on (seed,
observations, worker). Optuna is imported lazily, by `tune` runs only.
"""

from __future__ import annotations

import itertools
import math
import random
import warnings
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from autoloop.decide.ratchet import orientation

Value = float | str
Config = Mapping[str, Value]

# Points before TPE models the space (Optuna's default: 10): picked with benchmarks/tune_search.py
# on its choosing family, judged on the held-out family (`--family heldout`, docs: tune).
N_STARTUP = 5
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
        kind = IntDistribution if self.is_int else FloatDistribution
        return kind(self.lo, self.hi, log=self.log)

    def contains(self, value: Value) -> bool:
        if self.choices is not None or isinstance(value, str):
            return value in (self.choices or ())
        return self.lo <= value <= self.hi and (not self.is_int or float(value).is_integer())

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

    def at(self, u: float) -> Value:
        """The value at quantile u in [0, 1) of its range, uniform on its scale."""
        if self.choices is not None:
            return self.choices[int(u * len(self.choices))]
        hi = self.hi + 1 if self.is_int else self.hi   # an int's bins are [k, k + 1)
        if self.log:
            x = math.exp(math.log(self.lo) + u * (math.log(hi) - math.log(self.lo)))
        else:
            x = self.lo + u * (hi - self.lo)
        return self.tidy(math.floor(x) if self.is_int else x)


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
    how: str                   # start (the Latin hypercube) | model (TPE) | random (TPE repeated)
    n_observed: int            # measurements it was chosen from (your starting values included)


def canonical(config: Config) -> tuple[tuple[str, Value], ...]:
    return tuple(sorted((k, v if isinstance(v, str) else float(v)) for k, v in config.items()))


@dataclass(frozen=True)
class Engine:
    """Proposes the next configuration(s) from what was measured."""

    space: Sequence[Param]
    direction: str
    seed: int | None
    n_startup: int = N_STARTUP
    multivariate: bool = True      # Optuna 5's default: models the parameters jointly
    with_start: bool = False       # your starting values in TPE's model (tune_search.py --variants)
    lhs: bool = True               # the start is a Latin hypercube, not independent random points

    def _design(self) -> list[dict[str, Value]]:
        """The seed's Latin hypercube: each range cut into n_startup slices, one point in each,
        the slices paired at random across parameters (random points leave slices empty)."""
        rng = random.Random(f"lhs:{self.seed}")
        n = self.n_startup
        cols = {p.key: [(i + rng.random()) / n for i in rng.sample(range(n), n)]
                for p in self.space}
        return [{p.key: p.at(cols[p.key][i]) for p in self.space} for i in range(n)]

    def _usable(self, observations: Sequence[Observation]) -> list[tuple[dict[str, Value | int], float]]:
        """Observations that fit today's space, failures scored as the worst value measured:
        TPE drops failed trials entirely, and a region that crashes should look bad, not unknown."""
        keys = {p.key: p for p in self.space}
        values = [o.value for o in observations if o.value is not None]
        worst = min(values, key=lambda v: orientation(self.direction) * v) if values else None
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
        # a fresh stream per (seed, observations): the seed alone would repeat one cycle's draws
        rng = random.Random(f"{self.seed}:{len(observations)}")
        with warnings.catch_warnings():
            # Optuna marks constant_liar experimental: a warning every cycle the user cannot act on
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            sampler = optuna.samplers.TPESampler(
                seed=rng.getrandbits(32), n_startup_trials=self.n_startup,
                multivariate=self.multivariate, constant_liar=True)
        study = optuna.create_study(direction=self.direction, sampler=sampler)
        for params, value in usable:
            study.add_trial(create_trial(params=params, distributions=dists, value=value))
        out: list[Suggestion] = []
        while len(out) < count:
            how = "start" if len(usable) < self.n_startup else "model"
            config = None
            if self.lhs and how == "start":
                config = next((c for c in self._design() if canonical(c) not in seen), None)
            for _ in range(0 if config else _RETRIES):
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
        grids = [p.choices or [float(v) for v in range(int(p.lo), int(p.hi) + 1)]
                 for p in self.space if p.choices or p.is_int]      # a float has no grid
        if len(grids) == len(keys) and math.prod(len(g) for g in grids) <= 50_000:
            left = [c for c in itertools.product(*grids)
                    if canonical(dict(zip(keys, c))) not in seen]
            return dict(zip(keys, rng.choice(left))) if left else None
        for _ in range(1000):
            config = {p.key: p.at(rng.random()) for p in self.space}
            if canonical(config) not in seen:
                return config
        return None
