"""Step 6: every tree put back exactly, then on the main thread in cycle order one ledger
record per cycle, the round's winner committed on the run branch before its own (write-ahead:
its `intent` before the branch moves). A kill anywhere is rolled back on resume (loop.Run._attach)."""

from __future__ import annotations

import time
from typing import Any

from autoloop.engine.cycle import Cycle, Round, RunState
from autoloop.decide.cycle import stated_change
from autoloop.journal.ledger import Record, escape_controls
from autoloop.generators.memory import near_duplicate
from autoloop.base.numbers import num as fmt, pct, signed_pct
from autoloop.decide.wording import decided
from autoloop.engine.hints import blocked_lesson, with_sentences

SUBJECT_MAX = 100


def record(state: RunState, rnd: Round) -> list[Record]:
    ws, w = state.ws, rnd.winner
    state.each([c for c in rnd.cycles if c is not w], lambda c: _put_back(state, c, rnd.incumbent, None))
    recs = []
    for c in rnd.cycles:
        commit = None
        if c is w:
            o = c.outcome
            assert o is not None and c.tree_hash is not None and c.candidate is not None
            # what was measured (or shown to the person) is what a keep commits
            commit = ws.commit(c.tree_hash, rnd.incumbent, _message(state, c), ws.identity())
            state.guard.check_keep(commit, c.candidate)
            state.journal.append({"t": "intent", "cycle": c.n, "commit": commit, "parent": rnd.incumbent})
            ws.advance(commit, rnd.incumbent, f"autoloop: keep cycle {c.n}")
            state.incumbent, state.best = commit, o.metric
            _put_back(state, c, rnd.incumbent, commit)
        state.redact_logs(c.log_dir)
        rec = state.redact.obj(_record(state, c, rnd, commit))  # lessons quote tool output, which may quote a key
        change = commit or c.candidate or c.found
        if change is not None:
            # write-ahead: the ref exists before the record names its commit (a kill between
            # them leaves an unfinished cycle, whose number the next attempt's ref takes over)
            ws.cycle_refs.write(c.n, change)
            rec["change"] = change
        elif c.found_note:
            rec["change_note"] = state.redact(c.found_note)
        recs.append(state.journal.append(rec))
        if c.proposal.finished:
            state.finished = c.proposal.no_change_reason or "the generator has nothing left to propose"
    state.journal.render(state.program.goal)
    for rec in recs:
        state.report("cycle", rec)
    return recs


def _put_back(state: RunState, c: Cycle, incumbent: str, kept: str | None) -> None:
    assert c.before is not None
    if kept is not None and c.tree is state.ws:
        # the tree becomes exactly the kept commit (only the changed paths are touched)
        state.exact[c.worker] = (kept, state.ws.keep(kept, incumbent, c.before, c.changes))
    else:
        c.tree.restore_changes(incumbent, c.before, c.changes)
        state.exact[c.worker] = (incumbent, c.before)


def _message(state: RunState, c: Cycle) -> str:
    o = c.outcome
    assert o is not None
    hyp = " ".join(c.proposal.hypothesis.split())
    subject = f"autoloop cycle {c.n}: {hyp}"
    if len(subject) > SUBJECT_MAX:
        subject = subject[:SUBJECT_MAX - 1] + "…"
    name, stats = state.program.verifier.label, o.extra.get("stats") or {}
    stated = stated_change(stats, name)
    if stated is not None:
        # the verdict's change, whoever kept it: the stored best → this median would be another
        pooled = stats["pooled"]
        line = (f"{stated}; estimated against the incumbent measured beside it "
                f"(medians {fmt(pooled['median_a'])} → {fmt(o.metric)})")
    else:
        d = pct(state.best, o.metric)
        line = f"{name}: {fmt(state.best)} → {fmt(o.metric)}" + (f" ({signed_pct(d)})" if d is not None else "")
    return (f"{subject}\n\n{line}\n"
            + (f"Measured: {o.extra['note']}\n" if o.extra.get("note") else "")
            + f"Verdict: {decided(o.status, o.decided_by, o.recommendation)}\n"
            + f"Hypothesis: {hyp}\nCycle: {c.n}\nRun: {state.ws.branch}\n")


def _record(state: RunState, c: Cycle, rnd: Round, commit: str | None) -> dict[str, Any]:
    o, p = c.outcome, c.proposal
    assert o is not None
    repeat = near_duplicate(p.hypothesis, state.journal.cycles())
    if repeat is not None:
        o.result += f" (repeats foreclosed cycle {repeat['cycle']})"
    d = pct(rnd.best_before, o.metric)
    measured = state.guard.blocked("verifier")
    lesson = with_sentences(o.lesson, blocked_lesson(c.blocked, "sandbox.hosts"), blocked_lesson(measured, "verifier.hosts"))
    return {
        "t": "cycle", "cycle": c.n, "status": o.status, "metric": o.metric,
        "best": state.best, "commit": commit, "parent": rnd.incumbent,
        # lessons quote file names and tool output: no control character reaches a reader raw
        "hypothesis": escape_controls(p.hypothesis), "result": escape_controls(o.result),
        "lesson": escape_controls(lesson),
        "changed": o.changed, "duration_s": round(time.monotonic() - c.t0, 3),
        "delta_pct": None if d is None else round(d, 4),
        "gen": {"tokens_in": p.tokens_in, "tokens_out": p.tokens_out,
                "cost_usd": p.cost_usd, "turns": p.turns, "notes": p.notes},
        "gen_meta": p.meta,
        "repeat_of": None if repeat is None else repeat["cycle"],
        "diffstat": o.diffstat, "decided_by": o.decided_by, "recommendation": o.recommendation,
        "guards": [{"name": g.name, "ok": g.ok, "detail": g.detail}
                   for g in (o.measurement.guards if o.measurement else ())],
        "log_dir": str(c.log_dir),
        # the plain rule's one run; noise-aware verdicts carry each run's in stats.seeds
        **({"seed": o.measurement.seed} if o.measurement is not None and o.measurement.seed is not None
           and "stats" not in o.extra else {}),
        **({"worker": c.worker, "round": rnd.n0} if state.parallel else {}),
        **({"node": c.node} if c.node else {}),
        **({"blocked": c.blocked} if c.blocked else {}),
        **({"blocked_verifier": measured} if measured else {}),
        **o.extra,
    }
