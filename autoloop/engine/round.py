"""A round: N cycles from the same incumbent through the six steps (one worker is a round of 1).
Every candidate's `begin` is in the ledger before any generator starts; a round cut short
leaves every tree at the incumbent and an `abort` for each of its cycles."""

from __future__ import annotations

from typing import Sequence

from autoloop.process import leftovers
from autoloop.engine.cycle import Cycle, Round, RunState
from autoloop.errors import ClusterLost, Interrupted
from autoloop.journal.ledger import Record
from autoloop.engine.steps.decide import decide
from autoloop.engine.steps.generate import generate
from autoloop.engine.steps.prepare import prepare
from autoloop.engine.steps.record import record
from autoloop.engine.steps.scope import scope
from autoloop.engine.steps.verify import verify


def run_round(state: RunState, k: int) -> list[Record]:
    rnd = start_round(state, k)
    try:
        for step in (prepare, generate, scope, verify, decide):
            step(state, rnd)
    except BaseException as exc:
        abort(state, rnd.incumbent, rnd.cycles, exc)
        raise
    return record(state, rnd)


def start_round(state: RunState, k: int) -> Round:
    """The round's cycles, each with its `begin` in the ledger (write-ahead: before anything runs)."""
    n0 = state.journal.next_cycle()
    rnd = Round(n0, state.incumbent, state.best, [])
    for i in range(k):
        n = n0 + i
        state.journal.append({"t": "begin", "cycle": n, "parent": rnd.incumbent,
                              **({"worker": i, "round": n0} if state.parallel else {})})
        env = state.env(n)
        if state.parallel:
            env.update(state.program.parallel.worker_env(i))
            env["AUTOLOOP_WORKER"] = str(i)
        rnd.cycles.append(Cycle(i, n, state.ws.gen_tree(i), env, state.worker_marker(i), state.log_dir(n)))
    return rnd


def abort(state: RunState, incumbent: str, cycles: Sequence[Cycle], exc: BaseException) -> None:
    """Leave no trace of an unfinished round (cut short by `exc`): every tree back at the
    incumbent, the ledger says each of its cycles was abandoned."""
    reason = "no Ray node can measure" if isinstance(exc, ClusterLost) else \
        "interrupted" if isinstance(exc, (Interrupted, KeyboardInterrupt)) else \
        f"internal error: {type(exc).__name__}: {exc}"
    state.restoring = True   # a further Ctrl-C must not cut this short
    try:
        for c in cycles:  # nothing a worker started may write after the restore
            leftovers.kill_marked(c.marker)
        if state.sentinel is not None and state.sentinel.changed():
            state.sentinel.restore()
        if state.journal.tampered():
            state.journal.repair()
        problems = []
        for c in cycles:
            state.exact.pop(c.worker, None)
            try:
                if c.tree.dotgit_tampered():
                    c.tree.restore_dotgit()
                if c.before is not None:
                    c.tree.restore(incumbent, c.before)
                else:
                    c.tree.reset_hard(incumbent)
            except Exception as exc:  # the next round resets it again; say so, and go on with the rest
                problems.append(f"worker {c.worker}'s tree not restored: {exc}")
        for c in cycles:
            state.journal.append({"t": "abort", "cycle": c.n, "reason": "; ".join([reason, *problems])})
        state.journal.render(state.program.goal)
    finally:
        state.restoring = False
