"""The search behind `generator.kind: tune`: Optuna's TPE sampler over the marked parameters.

Stateless by design: every proposal rebuilds the study from the observations the ledger holds
(`create_trial` + `add_trial`), so a resumed run, a fresh process and a parallel worker all see
the same study, and the next point depends only on (seed, observations, worker index).

Optuna is imported here, lazily, and this module is imported only by `tune` runs: no other run
pays for it (measured in benchmarks/tune_search.py --import-cost).
"""

from __future__ import annotations

import hashlib
import math
import random
import statistics
import warnings
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

Value = float | str
Config = Mapping[str, Value]

# Spread-out points measured before TPE models the space. Optuna's default is 10; with the
# user's starting values already measured (the baseline), 5 gave better results after 10 and 20
# cycles on benchmarks/tune_search.py (--engine n_startup=10 to compare), not worse after 40.
N_STARTUP = 5
# After the start, every LOCAL_EVERY-th point is a Gaussian step from the best point measured
# (per dimension, the spread of the best quarter of the points, within LOCAL_SIGMA_MIN..
# LOCAL_SIGMA of the range); the rest are TPE's. Every 2nd beat every 3rd and 5th in the valley.
LOCAL_EVERY = 2
LOCAL_SIGMA = 0.15
LOCAL_SIGMA_MIN = 0.002
# Univariate TPE (Optuna's default): multivariate TPE was worse on the int/log/categorical mix
# and in the valley (benchmarks/tune_search.py --variants).
MULTIVARIATE = False
# Candidates TPE scores per proposal (Optuna's default: 24).
N_EI_CANDIDATES = 24
# How many times a point TPE proposes may turn out to be measured already before tune falls
# back to a random unmeasured point (ints and categoricals repeat; floats practically never).
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
        if isinstance(value, str):
            return False
        if self.is_int and not float(value).is_integer():
            return False
        return self.lo <= value <= self.hi

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
            step = (self.hi - self.lo) / 1000        # 1/1000 of the range
            digits = max(0, -math.floor(math.log10(step))) if step > 0 else 6
            text = f"{round(x, digits):.{digits}f}"
        return min(self.hi, max(self.lo, float(text)))

    def from_unit(self, u: float) -> Value:
        """A point of [0, 1] → a value (log-spaced for log; every int and choice an equal share)."""
        u = min(max(u, 0.0), 1.0)
        if self.choices is not None:
            return self.choices[min(int(u * len(self.choices)), len(self.choices) - 1)]
        if self.is_int:
            lo, hi = (math.log(self.lo - 0.5), math.log(self.hi + 0.5)) if self.log and self.lo > 0.5 \
                else (self.lo - 0.5, self.hi + 0.5)
            x = lo + u * (hi - lo)
            return self.tidy(math.exp(x) if self.log and self.lo > 0.5 else x)
        if self.log:
            return self.tidy(math.exp(math.log(self.lo) + u * (math.log(self.hi) - math.log(self.lo))))
        return self.tidy(self.lo + u * (self.hi - self.lo))

    def to_unit(self, value: Value) -> float:
        if self.choices is not None:
            return (self.choices.index(str(value)) + 0.5) / len(self.choices)
        x = float(value)
        if self.is_int:
            lo, hi = (math.log(self.lo - 0.5), math.log(self.hi + 0.5)) if self.log and self.lo > 0.5 \
                else (self.lo - 0.5, self.hi + 0.5)
            return ((math.log(x) if self.log and self.lo > 0.5 else x) - lo) / (hi - lo)
        if self.log:
            return (math.log(x) - math.log(self.lo)) / (math.log(self.hi) - math.log(self.lo))
        return (x - self.lo) / (self.hi - self.lo)

    def size(self) -> float:
        """How many distinct values it can take (inf for floats)."""
        if self.choices is not None:
            return len(self.choices)
        if self.is_int:
            return self.hi - self.lo + 1
        return math.inf


@dataclass(frozen=True)
class Observation:
    config: Config
    value: float | None        # None: measured and failed (crash, guard failure)


@dataclass(frozen=True)
class Suggestion:
    config: dict[str, Value]
    how: str                   # explore (Sobol start) | model (TPE) | local (near the best) | random
    n_observed: int


def canonical(config: Config) -> tuple[tuple[str, Value], ...]:
    return tuple(sorted((k, v if isinstance(v, str) else float(v)) for k, v in config.items()))


def _primes(k: int) -> list[int]:
    out: list[int] = []
    candidate = 2
    while len(out) < k:
        if all(candidate % p for p in out):
            out.append(candidate)
        candidate += 1
    return out


def _radical_inverse(index: int, base: int) -> float:
    """index's digits in `base`, mirrored behind the point: 1, 2, 3 → 1/2, 1/4, 3/4 in base 2."""
    value, scale = 0.0, 1.0 / base
    while index:
        index, digit = divmod(index, base)
        value += digit * scale
        scale /= base
    return value


def _seed(seed: int | None, n: int, index: int) -> int:
    # A fresh, reproducible stream per (seed, number of observations, worker): re-seeding with
    # the seed alone would make every cycle of the random start propose the same point.
    digest = hashlib.sha256(f"{seed}:{n}:{index}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


class Engine:
    """Proposes the next configuration(s) from what was measured."""

    def __init__(self, space: Sequence[Param], direction: str, seed: int | None,
                 n_startup: int = N_STARTUP, multivariate: bool = MULTIVARIATE,
                 local_every: int = LOCAL_EVERY, n_ei_candidates: int = N_EI_CANDIDATES) -> None:
        self.space = tuple(space)
        self.direction = direction
        self.seed = seed
        self.n_startup = n_startup
        self.multivariate = multivariate
        self.local_every = local_every
        self.n_ei_candidates = n_ei_candidates

    def _usable(self, observations: Sequence[Observation]) -> list[tuple[dict[str, Value], float]]:
        """Observations that fit today's space, failures scored as the worst value measured:
        TPE drops failed trials entirely, and a region that crashes should look bad, not unknown."""
        keys = {p.key: p for p in self.space}
        values = [o.value for o in observations if o.value is not None]
        worst = (max(values) if self.direction == "minimize" else min(values)) if values else None
        out = []
        for o in observations:
            value = o.value if o.value is not None else worst
            if value is None or set(o.config) != set(keys):
                continue
            if all(keys[k].contains(v) for k, v in o.config.items()):
                out.append(({k: (v if keys[k].choices is not None else
                                 (int(v) if keys[k].is_int else float(v))) for k, v in o.config.items()},
                            float(value)))
        return out

    def kind(self, n: int) -> str:
        """How the point after `n` observations is chosen: explore, model or local."""
        if n < self.n_startup:
            return "explore"
        if self.local_every and (n - self.n_startup) % self.local_every == self.local_every - 1:
            return "local"
        return "model"

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
            # Optuna marks constant_liar (and multivariate) experimental: a warning on the
            # terminal of every tune cycle would say nothing the user can act on
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            sampler = optuna.samplers.TPESampler(
                seed=_seed(self.seed, len(observations), 0), n_startup_trials=0,
                multivariate=self.multivariate, constant_liar=True,
                n_ei_candidates=self.n_ei_candidates)
        study = optuna.create_study(direction=self.direction, sampler=sampler)
        for params, value in usable:
            study.add_trial(create_trial(params=params, distributions=dists, value=value))
        rng = random.Random(_seed(self.seed, len(observations), 1))
        out: list[Suggestion] = []
        while len(out) < count:
            n = len(usable) + len(out)
            how = self.kind(n)
            config = None
            if how == "explore":
                config = self._explore(n, seen)
            elif how == "local":
                config = self._local(usable, rng, seen)
            if config is not None:
                # a running trial at this point, so TPE's constant liar keeps later workers away
                study.enqueue_trial({k: self._optuna_value(k, v) for k, v in config.items()})
                study.ask(dists)
            else:
                how = "model"
                for _ in range(_RETRIES):
                    trial = study.ask(dists)   # left running: the constant liar keeps the next away
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
            out.append(Suggestion(config, how, len(usable)))
        return out

    def _optuna_value(self, key: str, value: Value) -> Value | int:
        p = next(q for q in self.space if q.key == key)
        if p.choices is not None:
            return value
        return int(value) if p.is_int else float(value)

    def _explore(self, n: int, seen: set[Any]) -> dict[str, Value] | None:
        """A point of a randomly shifted Halton sequence: the first points cover the space evenly
        instead of in clumps. (scipy's Sobol does the same but its import costs a tune run ~2 s
        and ~65 MB; a few points need no more than this.)"""
        shift = random.Random(_seed(self.seed, 0, 2))
        offsets = [shift.random() for _ in self.space]
        bases = _primes(len(self.space))
        for index in range(n + 1, n + 17):
            u = [(_radical_inverse(index, b) + o) % 1.0 for b, o in zip(bases, offsets)]
            config = {p.key: p.from_unit(x) for p, x in zip(self.space, u)}
            if canonical(config) not in seen:
                return config
        return None

    def _local(self, usable: Sequence[tuple[dict[str, Value], float]], rng: random.Random,
               seen: set[Any]) -> dict[str, Value] | None:
        """A small step from the best point measured: TPE spreads its bets; this refines the
        basin it found (it is what closes a narrow valley)."""
        if not usable:
            return None
        sign = 1.0 if self.direction == "minimize" else -1.0
        ranked = sorted(usable, key=lambda pv: sign * pv[1])
        best = ranked[0][0]
        # The step per dimension is the spread of the best quarter of the points measured: wide
        # while good points are far apart, narrow once they crowd into one basin (as CMA-ES's
        # covariance does, without its state, so a rebuilt study gives the same step).
        top = [cfg for cfg, _ in ranked[:max(3, len(ranked) // 4)]]
        sigmas = {}
        for p in self.space:
            if p.choices is None:
                units = [p.to_unit(cfg[p.key]) for cfg in top]
                spread = statistics.pstdev(units) if len(units) > 1 else LOCAL_SIGMA
                sigmas[p.key] = min(LOCAL_SIGMA, max(LOCAL_SIGMA_MIN, spread))
        for _ in range(32):
            config: dict[str, Value] = {}
            for p in self.space:
                if p.choices is not None:
                    config[p.key] = rng.choice(p.choices) if rng.random() < 0.2 else best[p.key]
                else:
                    config[p.key] = p.from_unit(p.to_unit(best[p.key]) + rng.gauss(0.0, sigmas[p.key]))
            if canonical(config) not in seen:
                return config
        return None

    def _random_unmeasured(self, rng: random.Random, seen: set[Any]) -> dict[str, Value] | None:
        total = math.prod(p.size() for p in self.space)
        if math.isfinite(total) and total <= 50_000:
            import itertools
            grid = [p.choices if p.choices is not None else
                    [float(v) for v in range(int(p.lo), int(p.hi) + 1)] for p in self.space]
            left = [c for c in itertools.product(*grid)
                    if canonical(dict(zip((p.key for p in self.space), c))) not in seen]
            if not left:
                return None
            return dict(zip((p.key for p in self.space), rng.choice(left)))
        for _ in range(1000):
            config = {p.key: p.from_unit(rng.random()) for p in self.space}
            if canonical(config) not in seen:
                return config
        return None
