"""Step 5: each measured candidate against the incumbent by the acceptance rule (the strict one
and the noise-aware ones in autoloop.decide), a person's decision in approve mode, and of the
round's keeps the best: the others are discarded as beaten in the round."""

from __future__ import annotations

import dataclasses
from typing import Any

from autoloop.engine.approve import Review, human_outcome
from autoloop.engine.cycle import Cycle, Outcome, Round, RunState, violation
from autoloop.decide.cycle import stated_change
from autoloop.errors import Interrupted
from autoloop.engine.measure import judge_one
from autoloop.base.numbers import num as fmt
from autoloop.decide.ratchet import better
from autoloop.engine.verify import Measurement


def decide(state: RunState, rnd: Round) -> None:
    after = state.guard.after_verify() if rnd.measuring else []
    measured = [c for c in rnd.cycles if c.measured]
    for c in measured:
        if c.outcome is None:
            c.outcome = _judged(c.verdict, c.files) if c.verdict is not None else \
                _strict(state, c.measurement, c.files, rnd.best_before)
        if after:
            # what the measurements changed outside their trees cannot be told apart
            why = "; ".join(after) + (f" (while {len(measured)} candidates were measured at once)"
                                      if len(measured) > 1 else "")
            o = c.outcome
            own = [o.lesson.removeprefix("violation: ")] if o.status == "violation" else []
            c.outcome = violation([*own, why], c.files)
        c.outcome = review(state, "after", c, rnd, c.outcome) or c.outcome
    for c in rnd.cycles:
        if c.candidate is not None or c.found is not None:
            assert c.outcome is not None and c.stat is not None
            c.outcome.diffstat = c.stat()
    rnd.winner = _choose(state, rnd)


def _strict(state: RunState, m: Measurement | None, changed: list[str], best: float | None) -> Outcome:
    assert m is not None and best is not None
    v = judge_one(state.program, m, best)   # the decide step's one strict rule
    return Outcome(v.status, v.lesson, v.result, metric=v.metric, changed=changed, measurement=m)


def _judged(v: Any, changed: list[str]) -> Outcome:
    extra: dict[str, Any] = {"stats": v.stats, "delta_pct": None if v.delta_pct is None else round(v.delta_pct, 4)}
    extra.update({k: x for k, x in (("feedback", v.feedback), ("note", v.note)) if x})
    return Outcome(v.status, v.lesson, v.result, metric=v.metric, changed=changed,
                   measurement=v.measurement, extra=extra)


def review(state: RunState, when: str, c: Cycle, rnd: Round, outcome: Outcome | None) -> Outcome | None:
    """Approve mode: show the candidate to the person and apply their decision. None: go on as
    the ratchet would (no reviewer for `when`, or `verify` before measuring)."""
    reviewer = state.reviewer
    if reviewer is None or when not in reviewer.when:
        return None
    assert c.candidate is not None and c.stat is not None
    v = state.program.verifier
    m = outcome.measurement if outcome is not None else None
    # a paired cycle was judged against the incumbent measured beside it, as progress and log
    # show it: its stored value would give a change the verdict under it contradicts
    stats = (outcome.extra.get("stats") or {}) if outcome is not None else {}
    pooled = stats.get("pooled")
    against = pooled["median_a"] if isinstance(pooled, dict) and pooled.get("median_a") is not None \
        else state.best
    rv = Review(when=when, cycle=c.n, hypothesis=c.proposal.hypothesis, incumbent=rnd.incumbent,
                candidate=c.candidate, files=tuple(c.files), diffstat=c.stat(),
                diff=state.ws.diff_text(rnd.incumbent, c.candidate), metric_name=v.label,
                direction=v.direction, best=against, metric=None if outcome is None else outcome.metric,
                guards=() if m is None else m.guards, recommendation=None if outcome is None else outcome.status,
                verdict="" if outcome is None else outcome.result,
                change=stated_change(stats, v.label))
    state.in_python = True   # Ctrl-C at the prompt abandons the cycle at once
    try:
        if state.signal is not None:
            raise Interrupted("interrupted")
        decision = reviewer.decide(rv)
    finally:
        state.in_python = False
    if decision.action == "verify":
        return None
    status, lesson, result = human_outcome(rv, decision, None if outcome is None else outcome.lesson,
                                           None if outcome is None else outcome.extra.get("feedback"))
    # the judge's fields (a paired cycle's samples and statistics, its coarse feedback) describe
    # the measurement, whoever decided: the ledger keeps them, and tune reads side A from them
    return Outcome(status, lesson, result, metric=None if outcome is None else outcome.metric,
                   changed=c.files, measurement=m, extra={} if outcome is None else dict(outcome.extra),
                   decided_by="human", recommendation=rv.recommendation)


def _choose(state: RunState, rnd: Round) -> Cycle | None:
    """Of the candidates the rule would keep, the best (the earliest on a tie)."""
    keeps = [(c, c.outcome) for c in rnd.cycles
             if c.outcome is not None and c.outcome.status == "keep"]
    if not keeps:
        return None
    direction = state.program.verifier.direction
    winner, w = keeps[0]
    for c, o in keeps[1:]:
        if o.metric is not None and (w.metric is None or better(direction, o.metric, w.metric)):
            winner, w = c, o
    name, best = state.program.verifier.label, rnd.best_before
    for c, o in keeps:
        if c is winner:
            continue
        c.outcome = dataclasses.replace(
            o, status="discard",
            lesson=(f"discarded: {fmt(o.metric)} beat best {fmt(best)}, but cycle {winner.n} "
                    f"of the same round did better ({fmt(w.metric)}) and was kept"),
            result=(f"discard: {name} {fmt(best)} → {fmt(o.metric)} passed, but cycle "
                    f"{winner.n} of this round measured {fmt(w.metric)} and was kept instead"))
    return winner
