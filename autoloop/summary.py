"""Numbers about a run from its ledger's cycle records only (anyone can recompute them): the
practice-gym summary `autoloop log` prints."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from autoloop.journal import STATUSES
from autoloop.numbers import formatter, pct, signed_pct
from autoloop.ratchet import better


@dataclass(frozen=True)
class Summary:
    cycles: int                       # cycles after the baseline
    baseline: float | None
    best: float | None
    gain_pct: float | None            # signed relative change baseline → best
    kept: int
    keep_rate: float | None
    by_status: dict[str, int] = field(default_factory=dict)
    trend: str = ""
    cost_usd: float = 0.0
    tokens: int = 0

    @property
    def cost_per_keep(self) -> float | None:
        return self.cost_usd / self.kept if self.kept and self.cost_usd else None

    @property
    def cost_per_unit_gain(self) -> float | None:
        """Dollars per unit of metric moved from baseline to best (in the metric's own units)."""
        if not self.cost_usd or self.baseline is None or self.best is None or self.best == self.baseline:
            return None
        return self.cost_usd / abs(self.best - self.baseline)


def overruled_keep(cycle: Mapping[str, Any]) -> bool:
    """A person kept a candidate the ratchet would not have: its metric is no evidence of "best"."""
    return (cycle.get("status") == "keep" and cycle.get("decided_by") == "human"
            and cycle.get("recommendation") != "keep")


def best_measured(cycles: Sequence[Mapping[str, Any]], direction: str, incumbent: float | None) -> float | None:
    """What a run may call its best: the incumbent's metric, unless a person kept a regression
    (approve mode), then the best metric measured at the baseline or a keep."""
    if incumbent is None or not any(overruled_keep(c) for c in cycles):
        return incumbent
    best = summarize(cycles, direction).best
    return best if best is not None and better(direction, best, incumbent) else incumbent


def summarize(cycles: Sequence[Mapping[str, Any]], direction: str, recent: int = 10) -> Summary:
    baseline = next((c.get("metric") for c in cycles if c["status"] == "baseline"), None)
    best = baseline
    for c in cycles:
        m = c.get("metric")
        if c["status"] == "keep" and m is not None and (best is None or better(direction, m, best)):
            best = m
    done = [c for c in cycles if c["cycle"] > 0]
    counts = Counter(c["status"] for c in done)
    gen = [c.get("gen") or {} for c in done]
    return Summary(
        cycles=len(done), baseline=baseline, best=best, gain_pct=pct(baseline, best),
        kept=counts["keep"], keep_rate=counts["keep"] / len(done) if done else None,
        by_status={k: counts[k] for k in dict.fromkeys([*STATUSES[1:], *counts]) if counts[k]},
        trend=_trend(cycles, done[-recent:]),
        cost_usd=sum(g.get("cost_usd") or 0.0 for g in gen),
        tokens=sum((g.get("tokens_in") or 0) + (g.get("tokens_out") or 0) for g in gen))


def _trend(cycles: Sequence[Mapping[str, Any]], window: Sequence[Mapping[str, Any]]) -> str:
    if not window:
        return "no cycles yet"
    before = [c for c in cycles if c["cycle"] < window[0]["cycle"]]
    start, end = (before[-1].get("best") if before else None), window[-1].get("best")
    keeps = sum(1 for c in window if c["status"] == "keep")
    d, fmt = pct(start, end), formatter([start, end])
    moved = f", best {fmt(start)} → {fmt(end)} ({signed_pct(d)})" if d is not None else ""
    return f"last {len(window)} cycles: {keeps} kept{moved}"
