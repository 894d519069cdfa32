"""Step 4 (autoloop.engine.steps.verify): the candidate becomes a commit (on no branch) holding exactly
the changed files, and that commit is what is measured, in a tree of its own."""

from __future__ import annotations

from autoloop.isolation.hardening import Tampered
from autoloop.engine.steps.verify import checked
from tests.engine_fixture import engine  # noqa: F401 (fixture)
from tests.scripts.e2e import git


def test_the_candidate_commit_is_measured(engine):
    e = engine({"*": 'W("val.txt", "39.5")'})
    rnd = e.round(upto="verify")
    c = rnd.cycles[0]
    env = e.project.env
    assert c.candidate is not None and c.measured and c.outcome is None
    assert git(e.project.repo, "show", f"{c.candidate}:val.txt", env=env) == "39.5"
    assert git(e.project.repo, "rev-parse", f"{c.candidate}^", env=env) == rnd.incumbent
    assert git(e.project.repo, "branch", "--contains", c.candidate, env=env) == ""
    assert c.measurement is not None and c.measurement.metric == 39.5 and c.measurement.guards_ok
    assert c.files == ["val.txt"] and c.stat is not None and "1 file changed" in c.stat()


def test_a_mode_git_does_not_track_is_no_change(engine):
    e = engine({"*": 'os.chmod("val.txt", 0o600)'})
    c = e.round(upto="verify").cycles[0]
    assert c.outcome is not None and c.outcome.status == "no_change" and c.candidate is None


def test_a_crashing_verifier_is_measured_without_a_metric(engine):
    e = engine({"*": 'W("val.txt", "exit")'})
    c = e.round(upto="verify").cycles[0]
    assert c.measurement is not None and c.measurement.metric is None and c.measurement.error


def test_checked_reports_what_a_measurement_changed_outside_its_tree(engine):
    e = engine()
    e.round(upto="verify")    # the watches are captured as a cycle captures them
    ledger = e.state.journal.ledger

    def tamper() -> int:
        e.state.guard.capture_outside()
        with open(ledger, "ab") as f:
            f.write(b'{"t": "forged"}\n')
        return 1

    try:
        checked(e.state, tamper)
    except Tampered as exc:
        assert "changed the ledger" in str(exc)
    else:
        raise AssertionError("a changed ledger went unnoticed")
    assert b"forged" not in ledger.read_bytes()
