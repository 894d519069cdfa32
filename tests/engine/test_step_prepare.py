"""Step 1 (autoloop.engine.steps.prepare): each worker's tree is exactly the incumbent before its
generator runs, ignored files included, and a tree the last round proved exact is not walked."""

from __future__ import annotations

import os

from tests.engine_fixture import engine  # noqa: F401 (fixture)
from tests.scripts.e2e import git


def test_prepare_puts_back_edits_untracked_and_ignored_files(engine):
    e = engine()
    (e.tree / "val.txt").write_text("1\n")
    (e.tree / "stray.txt").write_text("x")
    (e.tree / "debug.log").write_text("ignored by .gitignore")
    os.chmod(e.tree / "score.py", 0o755)
    rnd = e.round(upto="prepare")
    c = rnd.cycles[0]
    assert (e.tree / "val.txt").read_text() == "40.25\n"
    assert not (e.tree / "stray.txt").exists() and not (e.tree / "debug.log").exists()
    assert not os.access(e.tree / "score.py", os.X_OK)
    assert c.before is not None and "val.txt" in c.before and "stray.txt" not in c.before
    assert git(e.tree, "rev-parse", "HEAD", env=e.project.env) == rnd.incumbent


def test_prepare_takes_the_proven_snapshot_instead_of_resetting(engine):
    e = engine()
    proof = {"val.txt": "the snapshot the last restore proved"}
    e.state.exact[0] = (e.state.incumbent, proof)
    (e.tree / "val.txt").write_text("2\n")   # not looked at: the proof says the tree is exact
    c = e.round(upto="prepare").cycles[0]
    assert c.before is proof and 0 not in e.state.exact
    assert (e.tree / "val.txt").read_text() == "2\n"


def test_a_proof_of_another_commit_is_not_used(engine):
    e = engine()
    e.state.exact[0] = ("0" * 40, {"val.txt": "stale"})
    (e.tree / "val.txt").write_text("3\n")
    c = e.round(upto="prepare").cycles[0]
    assert c.before is not None and c.before.get("val.txt") != "stale"
    assert (e.tree / "val.txt").read_text() == "40.25\n"
