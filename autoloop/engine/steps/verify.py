"""Step 4: each candidate becomes a commit and is measured in a pristine tree of its own, through
the executor's lanes (at most `parallel.verify` at once); every measurement runs through the
guardrails (autoloop.isolation.hardening), so what is verified is exactly what a keep commits."""

from __future__ import annotations

import queue
from typing import Callable, TypeVar

from autoloop.engine.cycle import Cycle, Outcome, Round, RunState, file_changes, violation
from autoloop.isolation.hardening import Tampered
from autoloop.journal.ledger import Record
from autoloop.engine.metric import Measurement
from autoloop.engine.measure import Judge, again_elsewhere, enforce_counts
from autoloop.engine.steps.decide import review
from autoloop.engine.steps.scope import keep_found
from autoloop.engine.testcount import baseline_counts

T = TypeVar("T")


def verify(state: RunState, rnd: Round) -> None:
    history = state.journal.cycles()
    lanes: queue.Queue[int] = queue.Queue()
    for lane in range(state.lanes):
        lanes.put(lane)
    todo = [c for c in rnd.cycles if c.outcome is None]
    if todo:
        state.guard.capture_outside()   # once, before the measurements start at once
        state.phase(rnd, "verify")
        rnd.measuring = True
    state.each(todo, lambda c: _candidate(state, c, rnd, history, lanes))


def checked(state: RunState, measurements: Callable[[], T]) -> T:
    """Run `measurements`, then check everything outside the trees they could have reached (also
    after one voided by tampering: what it planted must be found now). Raises Tampered."""
    try:
        result = measurements()
    except Tampered as exc:
        raise Tampered("; ".join([str(exc), *state.guard.after_verify()])) from None
    after = state.guard.after_verify()
    if after:
        raise Tampered("; ".join(after))
    return result


def _candidate(state: RunState, c: Cycle, rnd: Round, history: list[Record], lanes: queue.Queue[int]) -> None:
    ws, incumbent = state.ws, rnd.incumbent
    tree = ws.candidate_tree(incumbent, c.changes, where=c.tree)
    # a tree autoloop wrote itself took every unchanged entry from the incumbent's own listing;
    # one git wrote through an index is checked against git's object graph
    swapped = [] if ws.written_by_hand(incumbent, tree) else \
        ws.differs_at(ws.tree_of(incumbent), tree, sorted(state.guard.protected))
    if swapped:
        c.outcome = Outcome("violation", f"violation: the candidate's tree does not carry the incumbent's "
                            f"{', '.join(swapped[:5])}", "violation: protected files differ in the "
                            "candidate's tree", changed=swapped)
        keep_found(state, c, incumbent, tree)
        return
    if tree == ws.tree_of(incumbent):
        c.outcome = Outcome("no_change", "no change: nothing git can record changed (e.g. only a mode "
                            "git does not track)", "no change")
        return
    c.tree_hash = tree
    c.candidate = ws.commit(tree, incumbent, f"autoloop candidate, cycle {c.n}", ws.identity())
    c.files = [ch.path for ch in file_changes(c.changes)]
    c.stat = ws.diffstat_later(incumbent, c.candidate)
    c.outcome = review(state, "before", c, rnd, None)
    if c.outcome is not None:
        return
    lane_id = lanes.get()
    try:
        state.check_signal()
        c.measured = True
        lane = state.executor.lane(lane_id)
        during = f"cycle {c.n}'s measurement"
        if state.judge.plain:
            # contract §5: one measurement of the candidate against the stored incumbent
            def plain() -> Measurement:
                assert c.candidate is not None
                lane.prepare({"B": c.candidate})
                return enforce_counts(lane.measure(state.program, "B", env=c.env, log_dir=c.log_dir,
                                                   marker=c.marker, with_guards=True, hints=False),
                                      baseline_counts(history))

            c.measurement = again_elsewhere(lane, during, state.node_lost, plain)
        else:
            # noise-aware: repeats, paired batches against a re-measured incumbent
            judge = Judge(state.program, ws, c.marker, state.check_signal, lane, state.node_lost)
            assert rnd.best_before is not None
            c.verdict = judge.cycle(c.candidate, incumbent, rnd.best_before, c.log_dir, c.env, history, during)
        c.node = lane.where()
        state.check_signal()
    except Tampered as exc:        # a step changed what was being measured
        c.outcome = violation([str(exc)], c.files)
    finally:
        lanes.put(lane_id)
