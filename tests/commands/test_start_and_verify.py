"""Black-box: where a run starts and what `verify` measures (issue 14, items 2 and 3).

- the run branch exists only once a baseline was measured; a tag whose baseline failed starts
  afresh from HEAD (the user commits the fix and runs the same command again);
- resuming says from which commit, and warns when HEAD has moved on;
- files the verifier or a guard names that are untracked or modified in the checkout are
  warned about before the baseline, by `run` and `verify` alike;
- `verify` measures HEAD in a private tree (not the checkout's uncommitted files), refuses what
  `run` refuses, and leaves no temporary folder or worktree behind."""

from __future__ import annotations

import json
import re

import pytest

from tests.scripts.e2e import git, kill_marked, make_project

SCORE_FROM_FILE = "{py} measure.py"
MEASURE_PY = 'print("score:", open("val.txt").read().strip())\n'


def _project(tmp_path, **kw):
    p = make_project(tmp_path, {"*": 'W("val.txt", str(40 - cycle))'}, **kw)
    return p


def _failing_verifier(p) -> None:
    """Commit a measure.py that prints no score: the baseline fails (a verifier that does not
    exist at all is refused before the baseline, exit 2)."""
    (p.repo / "measure.py").write_text('raise SystemExit("no score yet")\n')
    git(p.repo, "add", "measure.py", env=p.env)
    git(p.repo, "commit", "-qm", "a verifier that fails", env=p.env)


def _ledger(p) -> list[dict]:
    return [json.loads(line) for line in p.ledger_path().read_text().splitlines()]


def test_failed_baseline_makes_no_branch_and_the_next_run_starts_from_head(tmp_path):
    # the verifier names measure.py, which is not committed yet
    p = _project(tmp_path, verifier=SCORE_FROM_FILE)
    (p.repo / "measure.py").write_text(MEASURE_PY)
    first = p.run("--cycles", "1")
    assert first.returncode == 1, first.stderr
    assert "measure.py (named by verifier.command) is untracked" in first.stderr
    assert git(p.repo, "branch", "--list", p.branch(), env=p.env) == ""
    git(p.repo, "add", "measure.py", env=p.env)
    git(p.repo, "commit", "-qm", "the verifier", env=p.env)
    head = git(p.repo, "rev-parse", "HEAD", env=p.env)
    second = p.run("--cycles", "1")
    kill_marked(p.env)
    assert second.returncode == 0, second.stderr
    assert "starting afresh from HEAD " + head[:12] in second.stderr
    assert "untracked" not in second.stderr
    rows = p.rows()
    assert [r["status"] for r in rows] == ["baseline", "keep"]
    assert rows[0]["commit"].startswith(head[:7]) or head.startswith(rows[0]["commit"])
    assert git(p.repo, "rev-parse", f"{p.branch()}~1", env=p.env) == head


def test_a_branch_left_by_an_older_failed_baseline_is_restarted_from_head(tmp_path):
    """Older autoloop made the branch before its baseline: a tag with no measured cycle whose
    branch still sits where it started is moved to HEAD, not resumed."""
    p = _project(tmp_path, verifier=SCORE_FROM_FILE)
    _failing_verifier(p)
    old = git(p.repo, "rev-parse", "HEAD", env=p.env)
    assert p.run("--cycles", "1").returncode == 1     # measure.py prints no score
    git(p.repo, "branch", p.branch(), old, env=p.env)  # what the older version left
    (p.repo / "measure.py").write_text(MEASURE_PY)
    git(p.repo, "add", "measure.py", env=p.env)
    git(p.repo, "commit", "-qm", "the verifier", env=p.env)
    res = p.run("--cycles", "1")
    kill_marked(p.env)
    assert res.returncode == 0, res.stderr
    assert [r["status"] for r in p.rows()] == ["baseline", "keep"]
    assert git(p.repo, "rev-parse", f"{p.branch()}~1", env=p.env) == git(p.repo, "rev-parse", "HEAD", env=p.env)


def test_a_branch_moved_elsewhere_before_any_baseline_is_refused(tmp_path):
    p = _project(tmp_path, verifier=SCORE_FROM_FILE)
    _failing_verifier(p)
    assert p.run("--cycles", "1").returncode == 1
    git(p.repo, "commit", "-q", "--allow-empty", "-m", "elsewhere", env=p.env)
    git(p.repo, "branch", p.branch(), "HEAD", env=p.env)   # not where any attempt started
    res = p.run("--cycles", "1")
    assert res.returncode == 2, res.stderr
    assert "moved outside autoloop" in res.stderr and "Traceback" not in res.stderr


def test_a_branch_autoloop_did_not_make_is_refused_and_left_alone(tmp_path):
    p = _project(tmp_path)
    head = git(p.repo, "rev-parse", "HEAD", env=p.env)
    git(p.repo, "branch", p.branch(), "HEAD", env=p.env)   # the user's own, no ledger anywhere
    res = p.run("--cycles", "1")
    assert res.returncode == 2, res.stderr
    assert "exists but was not made by autoloop" in res.stderr and "Traceback" not in res.stderr
    assert git(p.repo, "rev-parse", p.branch(), env=p.env) == head
    assert not p.ledger_path().exists() or "cycle" not in p.ledger_path().read_text()


def test_resume_names_its_commit_and_warns_when_head_moved_on(tmp_path):
    p = _project(tmp_path)
    start = git(p.repo, "rev-parse", "HEAD", env=p.env)
    assert p.run("--cycles", "1").returncode == 0
    tip = git(p.repo, "rev-parse", p.branch(), env=p.env)
    same = p.run("--cycles", "1")
    assert same.returncode == 0, same.stderr
    assert f"resuming {p.branch()} from {tip[:12]}" in same.stdout
    assert "moved on" not in same.stderr
    git(p.repo, "commit", "-q", "--allow-empty", "-m", "newer work", env=p.env)
    head = git(p.repo, "rev-parse", "HEAD", env=p.env)
    tip = git(p.repo, "rev-parse", p.branch(), env=p.env)
    moved = p.run("--cycles", "1")
    kill_marked(p.env)
    assert moved.returncode == 0, moved.stderr
    assert f"resuming {p.branch()} from {tip[:12]}" in moved.stdout
    warning = next(line for line in moved.stderr.splitlines() if "moved on" in line)
    assert head[:12] in warning and start[:12] in warning and "--tag" in warning
    assert [int(r["cycle"]) for r in p.rows()] == [0, 1, 2, 3]


def test_run_and_verify_warn_about_a_modified_verifier_file(tmp_path):
    p = _project(tmp_path)
    with open(p.repo / "score.py", "a") as f:
        f.write("# an uncommitted edit\n")
    verify = p.cli("verify", "program.md")
    assert verify.returncode == 0, verify.stderr
    assert "score.py (named by verifier.command) has uncommitted changes" in verify.stderr
    run = p.run("--cycles", "1")
    kill_marked(p.env)
    assert run.returncode == 0, run.stderr
    assert "score.py (named by verifier.command) has uncommitted changes" in run.stderr
    # before the baseline: the warning comes before the first cycle line is printed
    assert "cycle    0" in run.stdout


def test_verify_measures_head_like_the_baseline_and_leaves_nothing(tmp_path):
    p = _project(tmp_path)
    (p.repo / "val.txt").write_text("7\n")             # uncommitted: not what a run measures
    (p.repo / "extra.txt").write_text("untracked\n")
    tmp = tmp_path / "tmpdir"
    tmp.mkdir()
    p.env["TMPDIR"] = str(tmp)
    worktrees = git(p.repo, "worktree", "list", "--porcelain", env=p.env)
    res = p.cli("verify", "program.md")
    assert res.returncode == 0, res.stderr
    assert "score: 40.25" in res.stdout
    # what a cycle costs at this program's rule (strict, one run), from the run it just made
    assert "cost: accept.rule strict: 1 verifier run a cycle" in res.stdout
    # its private tree and logs are gone (the per-user folder of the seccomp filter is reused)
    assert [x for x in tmp.iterdir() if not x.name.startswith("autoloop-filters-")] == []
    assert git(p.repo, "worktree", "list", "--porcelain", env=p.env) == worktrees
    run = p.run("--cycles", "0")
    kill_marked(p.env)
    assert run.returncode == 0, run.stderr
    assert float(p.rows()[0]["metric"]) == 40.25       # the number verify printed


def test_verify_refuses_what_run_refuses(tmp_path):
    p = _project(tmp_path, allowed='["**"]')
    run = p.run("--cycles", "1")
    verify = p.cli("verify", "program.md")
    assert run.returncode == 2 and verify.returncode == 2, (run.stderr, verify.stderr)
    assert "program.md:" in verify.stderr and "score.py" in verify.stderr
    assert verify.stderr.strip().splitlines()[-1] == run.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("what", ["missing", "in the repository"])
def test_run_verify_and_doctor_refuse_a_bad_data_entry_with_one_message(tmp_path, what):
    """One check of `data:` for all three: the same line, naming the key to fix."""
    data = tmp_path / "data"
    data.mkdir()
    source, target, key = ((tmp_path / "nope", "data", "data[0].path") if what == "missing" else
                           (data, "score.py", "data[0].as"))
    p = _project(tmp_path / "p", extra=f"data: [{{path: {source}, as: {target}}}]\nsandbox: none")
    run = p.run("--cycles", "1")
    verify = p.cli("verify", "program.md")
    doctor = p.cli("doctor", "program.md")
    assert (run.returncode, verify.returncode, doctor.returncode) == (2, 2, 1), (run.stderr, verify.stderr)
    said = run.stderr.strip().splitlines()[-1]
    assert re.search(rf"program\.md:\d+: {re.escape(key)}: ", said) and "Traceback" not in run.stderr, said
    assert verify.stderr.strip().splitlines()[-1] == said
    assert any(ln.split()[:2] == ["FAIL", "data"] and ln.endswith(said) for ln in doctor.stdout.splitlines())


def test_verify_measures_with_the_data_linked_in_as_a_run_does(tmp_path):
    data = tmp_path / "datasets" / "d1"
    data.mkdir(parents=True)
    (data / "offset.txt").write_text("2\n")
    score = "offset = float(open('data/offset.txt').read())\nprint(f\"score: {float(open('val.txt').read()) + offset}\")\n"
    p = make_project(tmp_path / "p", {}, files={"score.py": score}, extra=f"data: [{{path: {data}, as: data}}]")
    verify = p.cli("verify", "program.md")
    assert verify.returncode == 0, verify.stderr
    assert "score: 42.25" in verify.stdout, verify.stdout
    assert not (p.repo / "data").exists()        # linked only into verify's private tree
