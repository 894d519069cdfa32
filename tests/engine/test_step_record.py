"""Step 6 (autoloop.engine.steps.record): the winner is committed on the run branch (intent first),
every tree is put back exactly, and each cycle gets its ledger record."""

from __future__ import annotations

from autoloop.engine.steps.record import record
from tests.engine_fixture import engine  # noqa: F401 (fixture)
from tests.scripts.e2e import git


def test_a_keep_moves_the_branch_and_leaves_the_tree_at_the_kept_commit(engine):
    e = engine({"*": 'W("val.txt", "39"); hyp("lower by 1.25")'})
    rnd = e.round()
    (rec,) = record(e.state, rnd)
    head = e.project.branch_head()
    assert rec["status"] == "keep" and rec["commit"] == head and rec["metric"] == 39 and rec["best"] == 39
    assert e.state.incumbent == head and e.state.best == 39
    assert git(e.project.repo, "rev-parse", f"{head}^", env=e.project.env) == rnd.incumbent
    msg = e.project.message(head)
    assert msg.startswith(f"autoloop cycle {rnd.cycles[0].n}: lower by 1.25") and "score: 40.25 → 39 (-3.11%)" in msg
    assert (e.tree / "val.txt").read_text() == "39"
    assert e.state.exact[0][0] == head
    kinds = [r["t"] for r in e.state.journal.records]
    assert kinds[-2:] == ["intent", "cycle"]


def test_a_discard_restores_the_tree_and_keeps_the_branch(engine):
    e = engine({"*": 'W("val.txt", "50"); W("src/new.txt", "x")'})
    rnd = e.round()
    (rec,) = record(e.state, rnd)
    assert rec["status"] == "discard" and rec["commit"] is None
    assert e.project.branch_head() == rnd.incumbent
    assert (e.tree / "val.txt").read_text() == "40.25\n" and not (e.tree / "src").exists()
    assert e.state.exact[0] == (rnd.incumbent, rnd.cycles[0].before)
    assert "worker" not in rec and rec["changed"] == ["src/new.txt", "val.txt"]


def test_a_round_records_every_cycle_in_order_with_worker_and_round(engine):
    e = engine({"*": 'W("val.txt", str(40 - cycle))'}, extra="parallel: {workers: 2}")
    rnd = e.round(k=2)
    recs = record(e.state, rnd)
    assert [r["cycle"] for r in recs] == [c.n for c in rnd.cycles]
    assert [(r["worker"], r["round"]) for r in recs] == [(0, rnd.n0), (1, rnd.n0)]
    assert [r["status"] for r in recs] == ["discard", "keep"]
    for c in rnd.cycles:
        assert (c.tree.path / "val.txt").read_text() == "40.25\n" or c.tree is e.run.ws
