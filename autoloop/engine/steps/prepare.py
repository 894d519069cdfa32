"""Step 1: every worker's tree is exactly the incumbent (ignored files included), and what the
generators could change outside their trees is captured."""

from __future__ import annotations

from autoloop.engine.cycle import Cycle, Round, RunState


def prepare(state: RunState, rnd: Round) -> None:
    state.phase(rnd, "prepare")
    state.each(rnd.cycles, lambda c: _tree(state, c, rnd.incumbent))
    assert state.sentinel is not None
    state.sentinel.capture()
    state.ws.refs.capture()
    state.ws.capture_objects(rnd.incumbent, sorted(state.guard.protected))
    state.guard.before_generate()


def _tree(state: RunState, c: Cycle, incumbent: str) -> None:
    exact = state.exact.pop(c.worker, None)
    if exact is not None and exact[0] == incumbent:
        c.before = exact[1]       # the last restore proved the tree is exactly this
    else:
        c.tree.reset_hard(incumbent)
        c.before = c.tree.snapshot()
