"""Approve mode: a person decides each cycle at a real (pseudo-)terminal, and the journal says so."""

from __future__ import annotations

import json
import re
import signal
import time

import pexpect
import pytest

from autoloop.engine.approve import Decision, Review, human_outcome, stages
from autoloop.base.numbers import pct, plain_pct, signed_pct
from autoloop.engine.verify import GuardResult
from tests.scripts.e2e import PY, git, make_project, repo_state

PLAN = {
    1: 'hyp("better: 30"); W("val.txt", "30")',
    2: 'hyp("worse: 45"); W("val.txt", "45")',
    3: 'hyp("best: 20"); W("val.txt", "20")',
}


def spawn(p, *args: str, env: dict | None = None, hangup=signal.SIG_DFL) -> pexpect.spawn:
    e = dict(p.env)
    e.update({"TERM": "xterm", "NO_COLOR": "1"})
    e.pop("PAGER", None)
    e.update(env or {})
    # a hangup as a terminal's closing delivers it, however the suite itself was started
    return pexpect.spawn(PY, ["-m", "autoloop", "run", "program.md", "--tag", p.tag, *args], cwd=str(p.repo),
                         env=e, encoding="utf-8", timeout=60, dimensions=(40, 140),
                         preexec_fn=lambda: signal.signal(signal.SIGHUP, hangup))


def ledger_cycles(p) -> dict[int, dict]:
    recs = [json.loads(line) for line in p.ledger_path().read_text().splitlines()]
    return {r["cycle"]: r for r in recs if r["t"] == "cycle"}


def test_decisions_are_applied_and_journaled_as_the_persons(tmp_path):
    p = make_project(tmp_path, PLAN)
    start = git(p.repo, "rev-parse", "HEAD", env=p.env)
    child = spawn(p, "--approve", "--cycles", "3")
    # cycle 1: the ratchet would keep 30 < 40.25; the person writes a note and discards it
    child.expect("Hypothesis: better: 30")
    child.expect(r"-40\.25\s*\n")                       # the diff is shown
    child.expect(r"score: 30 vs incumbent 40\.25 \(-25\.47%\)")
    child.expect("Ratchet recommends: keep")
    child.expect(r"\[k\]eep.*> ")
    child.send("n")
    child.expect("note")
    child.sendline("too risky for now")
    child.expect(r"> ")
    child.send("d")
    # cycle 2: the ratchet would discard 45; the person keeps it
    child.expect("Hypothesis: worse: 45")
    child.expect("Ratchet recommends: discard")
    child.expect(r"> ")
    child.send("k")
    # cycle 3: view the full diff (built-in pager), then quit
    child.expect("Hypothesis: best: 20")
    child.expect(r"vs incumbent 45")
    child.expect(r"> ")
    child.send("v")
    child.expect(r"\(end of diff\)")
    child.send("q")                                     # leaves the view, not the run
    child.expect(r"> ")
    child.send("q")
    child.expect("stopped: quit by the person")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before

    rows = {int(r["cycle"]): r for r in p.rows()}
    assert [rows[i]["status"] for i in range(4)] == ["baseline", "discard", "keep", "discard"]
    assert rows[1]["lesson"] == "too risky for now"
    assert float(rows[2]["metric"]) == 45.0
    cyc = ledger_cycles(p)
    assert [cyc[i]["decided_by"] for i in (1, 2, 3)] == ["human"] * 3
    assert [cyc[i]["recommendation"] for i in (1, 2, 3)] == ["keep", "discard", "keep"]
    assert cyc[0].get("decided_by", "ratchet") == "ratchet"
    # the branch holds exactly the person's keep
    commits = p.branch_commits(start)
    assert len(commits) == 1
    assert p.show(commits[0], "val.txt").strip() == b"45"
    assert "the person" in cyc[2]["result"]
    assert "quit" in cyc[3]["lesson"]
    ends = [json.loads(line) for line in p.ledger_path().read_text().splitlines() if '"t":"end"' in line]
    assert ends[-1]["reason"].startswith("quit by the person")
    # experiments.md carries the person's lesson too
    assert "too risky for now" in p.experiments()


DRIFT_PY = """import os, pathlib
count = pathlib.Path(os.environ["E2E_OUT"]) / "runs"
n = int(count.read_text()) if count.exists() else 0
count.write_text(str(n + 1))
print("score:", float(open("val.txt").read()) + n / 100)
"""


def test_paired_review_compares_with_the_incumbent_measured_beside_it(tmp_path):
    """Paired, the candidate is judged against the incumbent's runs in the same cycle: the screen
    must compare it with those, not with the stored baseline (a verifier that drifts makes the
    two differ), or its change contradicts the verdict printed under it."""
    script = tmp_path / "drift.py"
    script.write_text(DRIFT_PY)
    # alpha 0.005: kept after 3 pairs (ranked with the calibration's 12 runs), an odd count, so the
    # drift moves the two medians apart from the estimate (after balanced ABBA pairs they agree to
    # the shown digits)
    p = make_project(tmp_path, {1: 'W("val.txt", "30")'}, verifier=f"{PY} {script}", guards=False,
                     extra="accept: {rule: paired, pairs: 6, alpha: 0.005, final_pairs: 0}")
    child = spawn(p, "--approve", "--cycles", "1")
    # the two medians, with no % between them: the change is the verdict's, on the next line
    child.expect(r"score: (\S+) vs incumbent (\S+) \(medians of this cycle's pairs\)")
    shown_b, shown_a = float(child.match.group(1)), float(child.match.group(2))
    child.expect(r"Ratchet recommends: keep\s+— keep: score ([-+][\d.]+%) ")
    stated = child.match.group(1)
    child.expect(r"> ")
    child.send("d")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before
    cyc = ledger_cycles(p)
    pooled = cyc[1]["stats"]["pooled"]
    assert shown_a == pytest.approx(pooled["median_a"]) and shown_b == pytest.approx(pooled["median_b"])
    assert shown_a != pytest.approx(cyc[0]["metric"])   # the drift moved it: the test can tell
    assert stated == signed_pct(pooled["change_pct"]) != signed_pct(pct(shown_a, shown_b))
    # the person decided, and the record still holds every run it was shown (it held none)
    assert cyc[1]["decided_by"] == "human" and cyc[1]["recommendation"] == "keep"
    assert all(b["a"] and b["b"] for b in cyc[1]["stats"]["batches"])


NOISY_PY = """import os, pathlib, random
count = pathlib.Path(os.environ["E2E_OUT"]) / "runs"
n = int(count.read_text()) if count.exists() else 0
count.write_text(str(n + 1))
print("score:", round(float(open("val.txt").read()) * (1 + 0.03 * random.Random(n).gauss(0, 1)), 4))
"""


def test_a_paired_cycle_kept_by_the_person_states_the_verdicts_change(tmp_path):
    """A person keeps a paired cycle the ratchet discarded: the commit message, the result and the
    progress line under it must state the change the verdict states (the estimate over the
    pairs), not stored best → candidate median, nor the change between the two medians (on a
    noisy verifier, seeded by its run count, all three differ)."""
    script = tmp_path / "noisy.py"
    script.write_text(NOISY_PY)
    p = make_project(tmp_path, {1: 'W("val.txt", "40.5")'}, verifier=f"{PY} {script}", guards=False,
                     extra="accept: {rule: paired, pairs: 6, final_pairs: 0}")
    start = git(p.repo, "rev-parse", "HEAD", env=p.env)
    child = spawn(p, "--approve", "--cycles", "1")
    child.expect(r"Ratchet recommends: discard\s+— discard: (score .+?), LR=")
    stated = child.match.group(1)            # the change the verdict states
    child.expect(r"> ")
    child.send("k")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before
    out = child.before
    cyc = ledger_cycles(p)
    pooled = cyc[1]["stats"]["pooled"]
    assert cyc[1]["status"] == "keep" and cyc[1]["recommendation"] == "discard"
    verdict_change = signed_pct(pooled["change_pct"])
    assert stated.startswith(f"score {verdict_change} (")
    others = {signed_pct(pct(cyc[0]["metric"], cyc[1]["metric"])),            # stored best → median
              signed_pct(pct(pooled["median_a"], pooled["median_b"]))}        # median → median
    assert verdict_change not in others        # the drift makes them differ: the test can tell
    (commit,) = p.branch_commits(start)
    message = p.message(commit)
    assert f"{stated}; estimated against the incumbent measured beside it" in message
    assert f"noise ±{plain_pct(cyc[1]['stats']['step_pct'])} over {pooled['n']} pairs" in stated
    assert not any(o in message for o in others), message
    assert cyc[1]["result"] == (f"keep (the person's decision; the ratchet said discard): {stated} "
                                "against the incumbent measured beside it")
    # the generator is told the coarse change, as for any paired cycle
    assert cyc[1]["lesson"] == f"kept by the person: {cyc[1]['feedback']} (the ratchet said discard)"
    row = next(ln for ln in out.splitlines() if ln.startswith("cycle    1  keep"))
    assert f" est. {verdict_change} " in row and not any(o in row for o in others), row


def test_approve_before_skips_without_measuring(tmp_path):
    p = make_project(tmp_path, PLAN)
    child = spawn(p, "--approve=before", "--cycles", "2")
    child.expect("review before verification")
    child.expect("not measured yet")
    child.expect(r"\[y\] verify.*> ")
    child.send("s")
    child.expect("review before verification")
    child.expect(r"> ")
    child.send("y")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before
    rows = {int(r["cycle"]): r for r in p.rows()}
    assert rows[1]["status"] == "discard" and rows[1]["metric"] == ""
    assert "skipped" in rows[1]["lesson"]
    # cycle 1's verifier never ran
    logs = p.repo / ".autoloop" / p.tag / "logs"
    assert not (logs / "cycle-0001" / "verifier.out").exists()
    assert (logs / "cycle-0002" / "verifier.out").exists()
    # cycle 2 was verified, then the ratchet decided (before-only mode)
    assert rows[2]["status"] == "discard" and float(rows[2]["metric"]) == 45.0
    assert ledger_cycles(p)[2]["decided_by"] == "ratchet"


def test_approve_both_asks_twice(tmp_path):
    p = make_project(tmp_path, {1: 'hyp("h1"); W("val.txt", "30")'})
    child = spawn(p, "--approve=both", "--cycles", "1")
    child.expect("review before verification")
    child.expect(r"> ")
    child.send("y")
    child.expect("review after verification")
    child.expect("Ratchet recommends: keep")
    child.expect(r"> ")
    child.send("d")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert p.statuses()[1] == "discard"


def test_pager_env_is_used_for_the_full_diff(tmp_path):
    p = make_project(tmp_path, {1: 'hyp("h1"); W("val.txt", "30")'})
    marker = tmp_path / "paged.txt"
    child = spawn(p, "--approve", "--cycles", "1", env={"PAGER": f"cat > {marker}"})
    child.expect(r"> ")
    child.send("v")
    child.expect(r"> ")
    child.send("k")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert "+30" in marker.read_text()


def test_q_in_the_diff_view_leaves_the_view_not_the_run(tmp_path):
    long = "\n".join(f"line {i}" for i in range(120))
    for name, plan in (("short", {1: 'hyp("short"); W("val.txt", "30")'}),     # q at its end
                       ("long", {1: f'hyp("long"); W("val.txt", "30"); W("notes.txt", {long!r})'})):
        p = make_project(tmp_path / name, plan)
        child = spawn(p, "--approve", "--cycles", "1")
        child.expect(r"> ")
        child.send("v")
        child.expect(r"(end of diff|lines: space/enter more)")
        child.send("q")
        child.expect(r"> ")
        child.send("k")
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == 0, child.before
        assert "quit by the person" not in child.before
        assert [r["status"] for r in p.rows()] == ["baseline", "keep"]


def test_long_diff_is_cut_on_screen(tmp_path):
    big = "\n".join(f"line {i}" for i in range(300))
    p = make_project(tmp_path, {1: f'hyp("long"); W("val.txt", "30"); W("notes.txt", {big!r})'})
    child = spawn(p, "--approve", "--cycles", "1")
    child.expect(r"more diff lines: press v to view the full diff")
    child.expect(r"> ")
    child.send("d")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_crashed_candidate_cannot_be_kept(tmp_path):
    p = make_project(tmp_path, {1: 'hyp("boom"); W("val.txt", "exit")'})
    child = spawn(p, "--approve", "--cycles", "1")
    child.expect("Ratchet recommends: crash")
    child.expect(r"> ")
    child.send("k")                      # not offered: unknown key
    child.expect("unknown key")
    child.expect(r"> ")
    child.send("d")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert p.statuses()[1] == "crash"


def test_ctrl_c_at_the_prompt_interrupts_cleanly(tmp_path):
    p = make_project(tmp_path, {1: 'hyp("h1"); W("val.txt", "30")'})
    start = git(p.repo, "rev-parse", "HEAD", env=p.env)
    child = spawn(p, "--approve", "--cycles", "1")
    child.expect(r"> ")
    child.sendintr()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 130
    assert p.branch_commits(start) == []
    assert p.statuses() == {0: "baseline"}
    recs = [json.loads(line) for line in p.ledger_path().read_text().splitlines()]
    assert recs[-1]["t"] == "end" and recs[-1]["reason"] == "interrupted"
    # and the run resumes normally afterwards
    assert p.run("--cycles", "1").returncode == 0
    assert p.statuses()[1] == "keep"


def test_no_terminal_refuses_before_anything_changes(tmp_path):
    p = make_project(tmp_path, PLAN)
    before = repo_state(p.repo, p.env)
    res = p.run("--approve", "--cycles", "1")
    assert res.returncode == 2, res.stderr
    assert "terminal" in res.stderr
    assert "Traceback" not in res.stderr
    assert repo_state(p.repo, p.env) == before
    assert not p.ledger_path().exists()


def test_approve_is_refused_in_ci_mode(tmp_path):
    p = make_project(tmp_path, PLAN)
    before = repo_state(p.repo, p.env)
    res = p.run("--approve", "--ci", "--cycles", "1")
    assert res.returncode == 2
    assert "CI mode" in res.stderr
    assert repo_state(p.repo, p.env) == before


def test_bare_approve_does_not_swallow_the_program(tmp_path):
    p = make_project(tmp_path, PLAN)
    res = p.cli("run", "--approve", "program.md", "--tag", "t1", "--cycles", "1")
    assert res.returncode == 2 and "terminal" in res.stderr, res.stderr


# ---- the pure mapping of decisions ---------------------------------------------------------------


def _review(when="after", metric=30.0, rec="keep", guards_ok=True) -> Review:
    g = (GuardResult("notes", guards_ok, "exit 0" if guards_ok else "exit 1", None, 0.1),)  # type: ignore[arg-type]
    return Review(when=when, cycle=3, hypothesis="h", incumbent="a" * 40, candidate="b" * 40, files=("x",),
                  diffstat="", diff="", metric_name="score", direction="minimize", best=40.0,
                  metric=metric if when == "after" else None, guards=g if when == "after" else (),
                  recommendation=rec if when == "after" else None, verdict="keep: score 40 → 30")


@pytest.mark.parametrize("rec,action,status", [
    ("keep", "keep", "keep"), ("keep", "discard", "discard"), ("discard", "keep", "keep"),
    ("discard", "discard", "discard"), ("keep", "quit", "discard"), ("discard", "quit", "discard"),
])
def test_human_outcome_status(rec, action, status):
    s, lesson, result = human_outcome(_review(rec=rec), Decision(action), "ratchet lesson")
    assert s == status
    assert "the person" in result


def test_note_becomes_the_lesson():
    assert human_outcome(_review(), Decision("discard", "  a  note\nhere "), None)[1] == "a note here"


def test_crash_stays_crash_and_cannot_be_kept():
    r = _review(metric=None, rec="crash")
    assert not r.keepable
    assert human_outcome(r, Decision("keep"), "crash: exit 1")[0] == "crash"


def test_guard_fail_cannot_be_kept():
    r = _review(rec="guard_fail", guards_ok=False)
    assert not r.keepable
    assert human_outcome(r, Decision("keep"), "guard")[0] == "guard_fail"


def test_before_skip_is_a_discard():
    s, lesson, _ = human_outcome(_review(when="before"), Decision("skip"), None)
    assert s == "discard" and "skipped" in lesson


def test_stages():
    assert stages("after") == {"after"}
    assert stages("before") == {"before"}
    assert stages("both") == {"before", "after"}


def test_keep_lesson_says_it_overruled_the_ratchet():
    _, lesson, _ = human_outcome(_review(rec="discard", metric=45.0), Decision("keep"), None)
    assert re.search(r"ratchet said discard", lesson)


def test_a_closed_terminal_at_the_prompt_stops_the_run_cleanly(tmp_path):
    """The ssh session drops while the run waits for the person: the hangup stops it as Ctrl-C
    would — the candidate undone, the journal closed — and the next run goes on from there."""
    p = make_project(tmp_path, PLAN)
    start = git(p.repo, "rev-parse", "HEAD", env=p.env)
    child = spawn(p, "--approve", "--cycles", "3")
    child.expect(r"\[k\]eep.*> ")
    child.close(force=False)          # the terminal goes away: the kernel sends SIGHUP
    recs = [json.loads(line) for line in p.ledger_path().read_text().splitlines()]
    assert recs[-1]["t"] == "end" and "interrupted" in recs[-1]["reason"], recs[-1]
    assert git(p.worktree(), "status", "--porcelain", "--untracked-files=all", env=p.env) == ""
    assert p.branch_head() == start
    res = p.run("--cycles", "1")
    assert res.returncode == 0, res.stderr
    assert "unfinished" not in res.stdout + res.stderr


def test_a_closed_terminal_whose_hangup_is_ignored_ends_the_run_with_its_own_exit_code(tmp_path):
    """The same, to the process's end: what was left to print (the summary) has no reader; the
    run exits as it ended (0: stopped on a stop condition), never with an internal error."""
    p = make_project(tmp_path, PLAN)
    child = spawn(p, "--approve", "--cycles", "3", hangup=signal.SIG_IGN)
    child.expect(r"\[k\]eep.*> ")
    child.ptyproc.fileobj.close()      # the terminal's window closed: no SIGINT after it, as pexpect's close sends
    assert child.ptyproc.wait() == 0
    recs = [json.loads(line) for line in p.ledger_path().read_text().splitlines()]
    assert recs[-1]["t"] == "end" and recs[-1]["reason"] == "quit by the person (approve mode)", recs[-1]


def test_a_closed_terminal_whose_hangup_is_ignored_quits_at_the_prompt(tmp_path):
    """Started with hangups ignored (`trap '' HUP`), the run outlives its terminal; at the prompt
    nobody can answer any more (reads and writes fail with EIO): it quits there, as at the end of
    input, the journal closed; never an internal error."""
    p = make_project(tmp_path, PLAN)
    start = git(p.repo, "rev-parse", "HEAD", env=p.env)
    child = spawn(p, "--approve", "--cycles", "3", hangup=signal.SIG_IGN)
    child.expect(r"\[k\]eep.*> ")
    child.close(force=False)
    for _ in range(200):
        recs = [json.loads(line) for line in p.ledger_path().read_text().splitlines()]
        if recs[-1]["t"] in ("end", "abort"):
            break
        time.sleep(0.05)
    assert recs[-1]["t"] == "end" and recs[-1]["reason"] == "quit by the person (approve mode)", recs[-1]
    assert git(p.repo, "rev-parse", "HEAD", env=p.env) == start
