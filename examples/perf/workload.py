"""The inputs produce.py, score.py and check.py use: drawn from a seed (produce.py and score.py
get $AUTOLOOP_SEED, fresh for every measurement), deterministic, standard library only."""

from __future__ import annotations

import random
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent

_COMMON = "the a of to in it's don't ratchet loop keep".split()
_SYLLABLES = "ka lo mi ne ru sa ti vo ze ba".split()


def text(n_words: int, seed: int) -> str:
    rng = random.Random(seed)
    seps = [" ", " ", " ", ", ", ". ", "\n", " -- ", "; "]
    out = []
    for _ in range(n_words):
        if rng.random() < 0.3:
            word = rng.choice(_COMMON)
        else:   # a large vocabulary, with a long tail of rare words, like real text
            word = "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 4)))
        if rng.random() < 0.1:
            word = word.capitalize()
        if rng.random() < 0.05:
            word += str(rng.randint(0, 9))     # digits split words
        out.append(word + rng.choice(seps))
    return "".join(out)


def numbers(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randint(-50, 150) for _ in range(n)]


def inputs(seed: int) -> dict[str, Any]:
    """One measurement's workload: a different text, list of numbers and bound for the primes
    for every seed, of about the same sizes (so the cost compares across seeds; both runs of a
    pair share a seed). Every argument is drawn: a fixed one (the primes' bound was 2000) lets
    answers recorded at one measurement pass at the next, as `doctor --probe` found."""
    rng = random.Random(seed)
    return {"text": text(4000, rng.randrange(2**32)), "k": 10,
            "numbers": numbers(1200, rng.randrange(2**32)), "target": 100, "n": rng.randrange(1800, 2200)}


def load_target() -> ModuleType:
    """slowstats.py compiled from its source, by path: found whatever the working directory,
    and never a stale cached .pyc of an earlier version."""
    path = HERE / "slowstats.py"
    module = ModuleType("perf_slowstats")
    module.__file__ = str(path)
    sys.modules[module.__name__] = module   # as an import would: dataclasses, pickle need it
    exec(compile(path.read_bytes(), str(path), "exec", dont_inherit=True), module.__dict__)
    return module
