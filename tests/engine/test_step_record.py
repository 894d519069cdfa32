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


def _ref(e, n: int) -> str:
    return git(e.project.repo, "rev-parse", "--verify", "-q", f"refs/autoloop/t1/cycles/{n}",
               env=e.project.env, check=False)


def test_every_cycles_commit_is_under_the_tags_ref_as_the_record_names_it(engine):
    e = engine({0: 'W("val.txt", "39")', 1: 'W("val.txt", "50")', 2: 'W("score.py", "x")', 3: "pass"})
    recs = [record(e.state, e.round())[0] for _ in range(4)]
    assert [r["status"] for r in recs] == ["keep", "discard", "violation", "no_change"]
    keep, discard, violation, nothing = recs
    assert _ref(e, keep["cycle"]) == keep["change"] == keep["commit"] == e.project.branch_head()
    assert _ref(e, discard["cycle"]) == discard["change"] != keep["commit"]
    assert _ref(e, violation["cycle"]) == violation["change"]
    assert "change" not in nothing and _ref(e, nothing["cycle"]) == ""
    for r in (discard, violation):   # each on the incumbent it was generated from
        assert git(e.project.repo, "rev-parse", f"{r['change']}^", env=e.project.env) == r["parent"] == keep["commit"]
    # the tag's own refs: not a branch or a tag a person sees
    assert "cycles" not in git(e.project.repo, "branch", "-a", env=e.project.env)
    assert git(e.project.repo, "tag", env=e.project.env) == ""


def test_the_ref_is_written_before_the_record_names_it(engine, monkeypatch):
    # write-ahead: a kill between the two leaves a ref no record names (the cycle is unfinished,
    # and its number's next attempt takes the ref over), never a record naming a missing ref
    e = engine({"*": 'W("val.txt", "50")'})
    rnd = e.round()
    real = e.state.journal.append

    def killed(rec):
        if rec["t"] == "cycle":
            assert _ref(e, rnd.cycles[0].n) == rnd.cycles[0].candidate
            raise KeyboardInterrupt
        return real(rec)

    monkeypatch.setattr(e.state.journal, "append", killed)
    try:
        record(e.state, rnd)
    except KeyboardInterrupt:
        pass
    assert not e.state.journal.cycles()
