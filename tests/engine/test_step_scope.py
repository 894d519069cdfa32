"""Step 3 (autoloop.engine.steps.scope): the change set comes from the disk, is checked against the
rules, and what the generator changed outside its tree is undone and voids the cycle."""

from __future__ import annotations

from tests.engine_fixture import engine  # noqa: F401 (fixture)
from tests.scripts.e2e import git


def test_an_allowed_change_passes_with_its_change_set(engine):
    e = engine({"*": 'W("val.txt", "39"); W("src/new.py", "x = 1\\n")'})
    c = e.round(upto="scope").cycles[0]
    assert c.outcome is None
    assert sorted(ch.path for ch in c.changes if ch.after is not None and ch.after.kind == "f") == \
        ["src/new.py", "val.txt"]


def test_a_change_outside_allowed_is_a_violation(engine):
    e = engine({"*": 'W("val.txt", "39"); W("score.py", "print(\'score: 0\')")'})
    c = e.round(upto="scope").cycles[0]
    assert c.outcome is not None and c.outcome.status == "violation"
    assert "score.py" in c.outcome.lesson and "score.py" in c.outcome.changed


def test_a_symlink_is_a_violation(engine):
    e = engine({"*": 'os.makedirs("src"); os.symlink("../score.py", "src/link.py")'})
    c = e.round(upto="scope").cycles[0]
    assert c.outcome is not None and c.outcome.status == "violation" and "symlink" in c.outcome.lesson


def test_nothing_changed_is_no_change(engine):
    e = engine({"*": 'hyp("think only")'})
    c = e.round(upto="scope").cycles[0]
    assert c.outcome is not None and c.outcome.status == "no_change"


def test_a_moved_run_branch_is_put_back_and_voids_the_cycle(engine):
    # unsandboxed: in the sandbox git's files are read-only and the move cannot happen at all
    e = engine({"*": 'W("val.txt", "39"); sh("git commit -qam sneaky && git branch -f autoloop/t1 HEAD")'},
               extra="sandbox: none")
    c = e.round(upto="scope").cycles[0]
    assert c.outcome is not None and c.outcome.status == "violation"
    assert "moved the run branch" in c.outcome.lesson
    assert e.project.branch_head() == e.state.incumbent


def test_generator_error_comes_after_violations(engine):
    e = engine({"*": 'W("val.txt", "39"); sys.exit(2)'})
    c = e.round(upto="scope").cycles[0]
    assert c.outcome is not None and c.outcome.status == "gen_error" and c.outcome.changed == ["val.txt"]
    assert git(e.project.repo, "status", "--porcelain", env=e.project.env) == ""
