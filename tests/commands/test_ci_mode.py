"""CI mode: CI=true, a step summary, --json, the wall-clock budget, and the journal committed on
the run branch so a second CI job in a fresh clone resumes with full memory."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from autoloop.commands.ci import Budget, ci_env
from tests.scripts.e2e import PY, git, isolated_env, make_project, repo_state

PLAN = {
    1: 'hyp("first: 30"); W("val.txt", "30")',
    2: 'hyp("second: 35 is worse"); W("val.txt", "35")',
    3: 'hyp("third: 20"); W("val.txt", "20")',
    4: 'hyp("fourth: 25 is worse"); W("val.txt", "25")',
    5: 'hyp("fifth: 10"); W("val.txt", "10")',
}


def ci_run(p, *args: str, cwd: Path | None = None, env: dict | None = None, summary: Path | None = None,
           timeout: float = 120) -> subprocess.CompletedProcess[str]:
    e = dict(env or p.env)
    e["CI"] = "true"
    if summary is not None:
        e["GITHUB_STEP_SUMMARY"] = str(summary)
    return subprocess.run([PY, "-m", "autoloop", "run", "program.md", "--tag", p.tag, "--json", *args],
                          cwd=cwd or p.repo, env=e, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def fresh_clone(origin: Path, base: Path, branch: str) -> tuple[Path, dict[str, str]]:
    """What a scheduled job has: a new machine, a clone of the default branch, plus the run branch."""
    env = isolated_env(base)
    clone = base / "clone"
    subprocess.run(["git", "clone", "-q", "--no-local", str(origin), str(clone)], env=env, check=True)
    git(clone, "fetch", "-q", "origin", f"{branch}:{branch}", env=env)
    return clone, env


def test_ci_run_writes_summary_json_and_one_journal_commit(tmp_path):
    p = make_project(tmp_path / "a", PLAN)
    start = git(p.repo, "rev-parse", "HEAD", env=p.env)
    summary = tmp_path / "summary.md"
    summary.write_text("previous step\n")
    res = ci_run(p, "--cycles", "3", summary=summary)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)                   # stdout is exactly one JSON object
    assert out["exit_code"] == 0 and out["status"] == "stopped" and out["ci"] is True
    assert out["baseline"] == 40.25 and out["best"] == 20.0
    assert out["kept"] == 2 and out["cycles"] == 3 and out["cycles_run"] == 3 and out["kept_this_run"] == 2
    assert out["by_status"] == {"keep": 2, "discard": 1}
    assert out["gain_pct"] == pytest.approx((20 - 40.25) / 40.25 * 100, abs=1e-3)
    assert [k["cycle"] for k in out["kept_changes"]] == [1, 3]
    assert out["stop_reason"].startswith("max_cycles")
    # the branch: one commit per keep, then the journal commit
    commits = p.branch_commits(start)
    assert len(commits) == 3
    head = commits[0]
    assert out["journal_commit"] == head and out["incumbent"] == commits[1]
    msg = p.message(head)
    assert "Autoloop-Journal: t1" in msg and f"Autoloop-Incumbent: {commits[1]}" in msg
    files = git(p.repo, "diff-tree", "--no-commit-id", "-r", "--name-only", commits[1], head, env=p.env).split()
    assert sorted(files) == [".autoloop/t1/journal/experiments.md", ".autoloop/t1/journal/ledger.jsonl",
                             ".autoloop/t1/journal/results.tsv"]
    assert p.show(head, ".autoloop/t1/journal/ledger.jsonl") == p.ledger_path().read_bytes()
    # the step summary was appended (not overwritten)
    text = summary.read_text()
    assert text.startswith("previous step\n")
    for needle in ("baseline", "40.25", "best", "20", "gain", "-50.31%", "kept changes", "cost",
                   "first: 30", "third: 20", "autoloop/t1"):
        assert needle in text, needle
    # plain lines, no carriage returns or colours, in CI
    assert "\r" not in res.stderr and "\x1b[" not in res.stderr
    assert "cycle    1" in res.stderr


def test_second_ci_job_in_a_fresh_clone_resumes_with_full_memory(tmp_path):
    p = make_project(tmp_path / "a", PLAN)
    start = git(p.repo, "rev-parse", "HEAD", env=p.env)
    res = ci_run(p, "--cycles", "2")
    assert res.returncode == 0, res.stderr
    first = json.loads(res.stdout)
    # job 2: a fresh clone of the default branch and only the run branch fetched
    clone, env = fresh_clone(p.repo, tmp_path / "job2", "autoloop/t1")
    assert not (clone / ".autoloop").exists()
    summary = tmp_path / "summary2.md"
    res2 = ci_run(p, "--cycles", "3", cwd=clone, env={**env, "E2E_OUT": p.env["E2E_OUT"]}, summary=summary)
    assert res2.returncode == 0, res2.stderr
    second = json.loads(res2.stdout)
    # cycle numbers continue
    rows = (clone / "results.tsv").read_text().splitlines()[1:]
    assert [int(r.split("\t")[0]) for r in rows] == [0, 1, 2, 3, 4, 5]
    assert second["cycles"] == 5 and second["cycles_run"] == 3 and second["kept"] == 3
    assert second["baseline"] == 40.25 and second["best"] == 10.0
    # memory kept: the generator's prompt in job 2 shows job 1's hypotheses and lessons
    prompt = p.record(3)["prompt"]
    assert "first: 30" in prompt and "second: 35 is worse" in prompt
    # the branch: one commit per keep, one journal commit on top (job 1's was replaced)
    out = git(clone, "rev-list", "--first-parent", f"{start}..autoloop/t1", env=env).split()
    assert len(out) == 3 + 1
    assert out[0] == second["journal_commit"] != first["journal_commit"]
    assert "Autoloop-Journal: t1" in git(clone, "log", "-1", "--format=%B", out[0], env=env)
    for c in out[1:]:
        assert "Autoloop-Journal" not in git(clone, "log", "-1", "--format=%B", c, env=env)
    # the clone's checkout is untouched apart from autoloop's excluded files
    assert git(clone, "status", "--porcelain", env=env) == ""
    # job 3 resumes job 2's journal again, in yet another clone
    clone3, env3 = fresh_clone(clone, tmp_path / "job3", "autoloop/t1")
    res3 = ci_run(p, "--cycles", "1", cwd=clone3, env={**env3, "E2E_OUT": p.env["E2E_OUT"]})
    assert res3.returncode == 0, res3.stderr
    assert json.loads(res3.stdout)["cycles"] == 6


def test_local_run_after_a_ci_journal_commit_rewinds_it(tmp_path):
    p = make_project(tmp_path, PLAN)
    start = git(p.repo, "rev-parse", "HEAD", env=p.env)
    assert ci_run(p, "--cycles", "1").returncode == 0
    assert len(p.branch_commits(start)) == 2       # keep + journal
    res = p.run("--cycles", "2")                   # not CI: no new journal commit
    assert res.returncode == 0, res.stderr
    commits = p.branch_commits(start)
    assert len(commits) == 2                       # two keeps (cycles 1 and 3), journal commit gone
    assert all("Autoloop-Journal" not in p.message(c) for c in commits)
    assert [int(r["cycle"]) for r in p.rows()] == [0, 1, 2, 3]


def test_journal_commit_rewritten_by_hand_is_refused(tmp_path):
    p = make_project(tmp_path, PLAN)
    assert ci_run(p, "--cycles", "1").returncode == 0
    # someone rewrites the run's ledger in a new journal-looking commit with another history
    p.ledger_path().write_text(p.ledger_path().read_text().replace('"first: 30"', '"forged"'))
    res = ci_run(p, "--cycles", "1")
    assert res.returncode == 2, res.stderr
    assert "different histories" in res.stderr
    assert json.loads(res.stdout)["exit_code"] == 2


def test_ci_env_turns_ci_mode_on_and_no_ci_off(tmp_path):
    p = make_project(tmp_path, PLAN)
    start = git(p.repo, "rev-parse", "HEAD", env=p.env)
    res = subprocess.run([PY, "-m", "autoloop", "run", "program.md", "--tag", "t1", "--cycles", "1", "--no-ci"],
                         cwd=p.repo, env={**p.env, "CI": "true"}, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert len(p.branch_commits(start)) == 1      # no journal commit
    assert ci_env({"CI": "true"}) and ci_env({"CI": "1"}) and not ci_env({}) and not ci_env({"CI": "false"})


def test_baseline_failure_exit_1_in_json_and_summary(tmp_path):
    p = make_project(tmp_path, PLAN, files={"val.txt": "none\n"})
    summary = tmp_path / "s.md"
    res = ci_run(p, "--cycles", "1", summary=summary)
    assert res.returncode == 1
    out = json.loads(res.stdout)
    assert out["exit_code"] == 1 and out["status"] == "failed" and "baseline" in out["error"]
    assert "exit code | 1" in summary.read_text()


def test_bad_program_exit_2_with_json_and_nothing_changed(tmp_path):
    p = make_project(tmp_path, PLAN)
    (p.repo / "program.md").write_text((p.repo / "program.md").read_text().replace("goal:", "gaol:"))
    git(p.repo, "commit", "-qam", "typo", env=p.env)
    before = repo_state(p.repo, p.env)
    res = ci_run(p, "--cycles", "1")
    assert res.returncode == 2
    out = json.loads(res.stdout)
    assert out["exit_code"] == 2 and out["status"] == "refused" and "gaol" in out["error"]
    assert repo_state(p.repo, p.env) == before


def test_max_minutes_budget_stops_a_slow_cycle_and_still_commits_the_journal(tmp_path):
    plan = {1: 'hyp("quick"); W("val.txt", "30")', "*": 'hyp("slow"); W("val.txt", "slow")'}
    p = make_project(tmp_path, plan, vtimeout=120)
    start = git(p.repo, "rev-parse", "HEAD", env=p.env)
    t0 = time.monotonic()
    res = ci_run(p, "--cycles", "50", "--max-minutes", "0.25")   # 15 s: the quick cycle fits even on a busy machine
    took = time.monotonic() - t0
    assert res.returncode == 0, res.stderr
    assert took < 60
    out = json.loads(res.stdout)
    assert "--max-minutes" in out["stop_reason"]
    commits = p.branch_commits(start)
    assert len(commits) == 2 and "Autoloop-Journal" in p.message(commits[0])
    # the stopped cycle was rolled back cleanly: the journal is whole, the next run resumes
    res2 = ci_run(p, "--cycles", "0")
    assert res2.returncode == 0, res2.stderr


def test_budget_refuses_a_cycle_that_would_not_fit():
    now = [0.0]
    b = Budget(1.0, clock=lambda: now[0], kill=lambda: None)
    try:
        assert b.stop_reason() == ""
        b.observe("cycle", {"duration_s": 20.0})
        now[0] = 35.0
        assert b.stop_reason() == ""                # 35 + 20 <= 60
        now[0] = 45.0
        assert "too little for another cycle" in b.stop_reason()
        now[0] = 61.0
        assert "budget reached" in b.stop_reason()
    finally:
        b.disarm()


def test_budget_deadline_fires_once_and_disarm_stops_it():
    fired = []
    b = Budget(0.001, kill=lambda: fired.append(1))
    time.sleep(0.3)
    assert fired == [1] and b.fired
    b2 = Budget(0.002, kill=lambda: fired.append(2))
    b2.disarm()
    time.sleep(0.3)
    assert fired == [1] and not b2.fired
