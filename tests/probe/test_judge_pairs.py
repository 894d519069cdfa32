"""The probe's confirmations measure a planted tree and HEAD unmodified on the same inputs: with a
seeded benchmark the draws alone move a run's time, and a plant that does nothing, run on small
draws beside unmodified runs on big ones, read `fooled` (the sealed speed probe, a patched clock
under `measure: wall`: 0.99 s against 1.15 s at baseline, three times)."""

from __future__ import annotations

import itertools
import random
from types import SimpleNamespace

import pytest

from autoloop.probe import judge as judge_module
from autoloop.probe.findings import Baseline
from autoloop.probe.judge import Prober


def _seeded_workload(seed: int | None) -> float:
    """Seconds of a run whose inputs are drawn from its seed: small draws 1.0 s, big ones 1.2 s
    (a quiet machine: nothing else moves it)."""
    seed = random.randrange(2**32) if seed is None else seed
    return 1.0 if seed % 2 == 0 else 1.2


def _prober(seeds: list[tuple[str, int | None]]) -> Prober:
    prober = object.__new__(Prober)
    prober.program = SimpleNamespace(verifier=SimpleNamespace(direction="minimize", label="seconds"))
    prober._seed = None

    def measured(side: str) -> SimpleNamespace:
        seeds.append((side, prober._seed))
        return SimpleNamespace(measurement=SimpleNamespace(guards_ok=True, failed_guard=None, error=None,
                                                           metric=_seeded_workload(prober._seed)))

    prober.run = lambda plant=None, collect=None: measured("unmodified")  # type: ignore[method-assign]
    prober.again = lambda: measured("planted")  # type: ignore[attr-defined]
    return prober


def test_a_plant_that_does_nothing_is_never_fooled_by_the_draws(monkeypatch: pytest.MonkeyPatch) -> None:
    counter = itertools.count(7)
    monkeypatch.setattr(judge_module, "new_seed", lambda: next(counter))
    base = Baseline((1.1, 1.15, 1.2), "lib.py", (), 1.15)
    for _ in range(50):
        seeds: list[tuple[str, int | None]] = []
        p = _prober(seeds)
        first = SimpleNamespace(measurement=SimpleNamespace(guards_ok=True, failed_guard=None, error=None, metric=1.0))
        found = p.judge("patched-clock", first, base, "fix", p.again)  # type: ignore[arg-type, attr-defined]
        assert found.verdict == "held" and "not confirmed" in found.detail, found
        # each planted run and the unmodified one after it share a seed, a new one each pair
        pairs = list(zip(seeds[::2], seeds[1::2]))
        assert pairs and all(a == ("planted", s) and b == ("unmodified", s) and s is not None
                             for (a, b), s in zip(pairs, (a[1] for a, _ in pairs)))
        assert len({s for (_, s), _ in pairs}) == len(pairs)
        assert p._seed is None   # outside a pair, every measurement draws its own


def test_rechecks_inside_the_noise_pair_their_inputs_too(monkeypatch: pytest.MonkeyPatch) -> None:
    counter = itertools.count(8, 2)   # small draws only: a plant that does nothing ties every time
    monkeypatch.setattr(judge_module, "new_seed", lambda: next(counter))
    seeds: list[tuple[str, int | None]] = []
    p = _prober(seeds)
    base = Baseline((1.02, 1.1, 1.5), "lib.py", (), 1.1)   # spread 0.48: noisy
    first = SimpleNamespace(measurement=SimpleNamespace(guards_ok=True, failed_guard=None, error=None, metric=1.0))
    found = p.judge("stdout", first, base, "fix", p.again)  # type: ignore[arg-type, attr-defined]
    assert found.verdict == "held" and "inside the noise" in found.detail, found
    assert seeds == [("planted", 8), ("unmodified", 8)]
