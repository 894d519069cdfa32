"""Black-box: `autoloop show N` on a real run through every status (the CLI as a subprocess, a
scripted generator): each cycle's change is kept under the tag's own refs, survives `git gc
--prune=now`, is shown as a diff against its parent (or a diffstat, or JSON), and goes with
`autoloop clean --branch`. A missing commit and bad input are one line each."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from tests.scripts.e2e import PY, error_lines, git, make_project

PLAN = {
    1: 'hyp("lower to 30"); W("val.txt", "30")',
    2: 'hyp("try 35"); W("val.txt", "35"); W("src/x", ""); Path("src/latin.txt").write_bytes(b"caf\\xe9\\n")',
    3: 'hyp("crash it"); W("val.txt", "exit")',
    4: 'hyp("guard fails"); W("val.txt", "12"); W("notes.txt", "FAIL")',
    5: 'hyp("cheat"); open("score.py", "a").write("print(\'score: -5\')\\n")',
    6: 'hyp("nothing")',
    7: 'hyp("fails half-way"); W("val.txt", "11"); sys.exit(1)',
    8: 'hyp("fails at once"); sys.exit(1)',
}
STATUSES = {0: "baseline", 1: "keep", 2: "discard", 3: "crash", 4: "guard_fail", 5: "violation",
            6: "no_change", 7: "gen_error", 8: "gen_error"}
# the line of each cycle's diff that says what it changed
ADDED = {1: "+30", 2: "+35", 3: "+exit", 4: "+FAIL", 5: "+print('score: -5')", 7: "+11"}
NO_CHANGE = {0: "no change: cycle 0 is the baseline", 6: "no change to show", 8: "no change to show"}
HASH = re.compile(r"[0-9a-f]{40}")


@pytest.fixture(scope="module")
def shown(tmp_path_factory):
    """The run, then every ref log expired and `git gc --prune=now`: what is unreachable is gone."""
    p = make_project(tmp_path_factory.mktemp("show"), PLAN)
    res = p.run("--cycles", str(len(PLAN)))
    assert res.returncode == 0, res.stderr
    assert p.statuses() == STATUSES
    git(p.repo, "reflog", "expire", "--expire=now", "--all", env=p.env)
    git(p.repo, "gc", "-q", "--prune=now", env=p.env)
    return p


def _show(p, *args: str) -> subprocess.CompletedProcess[str]:
    """`autoloop show`, its output read as bytes (a diff holds a file's bytes, UTF-8 or not)."""
    res = subprocess.run([PY, "-m", "autoloop", "show", *args], cwd=p.repo, env=p.env, capture_output=True,
                         stdin=subprocess.DEVNULL, timeout=120)
    return subprocess.CompletedProcess(res.args, res.returncode, res.stdout.decode(errors="surrogateescape"),
                                       res.stderr.decode(errors="surrogateescape"))


def _json(p, n: int, *extra: str) -> dict:
    res = _show(p, str(n), "--json", *extra)
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    return json.loads(res.stdout)


def _refs(p) -> dict[str, str]:
    out = git(p.repo, "for-each-ref", "--format=%(refname) %(objectname)", "refs/autoloop/", env=p.env)
    return dict(line.split() for line in out.splitlines())


def _copy(p, tmp_path):
    """The project's repository and journal copied, for a test that breaks something."""
    repo = tmp_path / "repo"
    shutil.copytree(p.repo, repo, symlinks=True)
    return type(p)(p.base, repo, p.env, p.tag, p.plan_path, p.rec_dir)


def test_every_cycle_with_a_change_has_its_ref_and_nothing_else_does(shown):
    refs = _refs(shown)
    assert sorted(refs) == sorted(f"refs/autoloop/t1/cycles/{n}" for n in ADDED)
    ledger = [json.loads(line) for line in shown.ledger_path().read_text().splitlines()]
    named = {r["cycle"]: r.get("change") for r in ledger if r["t"] == "cycle"}
    for n in STATUSES:
        assert refs.get(f"refs/autoloop/t1/cycles/{n}") == named[n], n
    # the kept cycle's is its commit on the branch; the branch gained one commit per keep only
    assert named[1] == shown.branch_head()
    assert git(shown.repo, "rev-list", "--count", "main..autoloop/t1", env=shown.env) == "1"
    assert "cycles" not in git(shown.repo, "branch", "-a", env=shown.env) + git(shown.repo, "tag", env=shown.env)


@pytest.mark.parametrize("n", sorted(STATUSES))
def test_show_prints_each_cycle_after_gc(shown, n):
    res = _show(shown, str(n))
    assert res.returncode == 0 and res.stderr == "", res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == f"cycle {n} of run autoloop/t1: {STATUSES[n]}"
    assert re.match(r"hypothesis +\S", lines[1]) and any(ln.startswith("lesson ") for ln in lines)
    if n in ADDED:
        assert "diff --git" in res.stdout and ADDED[n] in lines, res.stdout
        assert any(ln.startswith("parent ") for ln in lines)
    else:
        assert NO_CHANGE[n] in res.stdout and "diff --git" not in res.stdout


def test_show_numbers_as_log_writes_them(shown):
    out = _show(shown, "2").stdout
    assert "score       35 (best before 30, change +16.67%)" in out, out
    log = shown.cli("log", "--wide").stdout
    assert re.search(r"^\s+2\s+discard\s+35\s+30\s+\+16\.67%", log, re.M), log
    assert "reverted" in out and "refs/autoloop/t1/cycles/2" in out


def test_a_file_that_is_not_utf8_is_shown_byte_for_byte(shown):
    res = _show(shown, "2")
    assert res.returncode == 0 and "\n+caf\udce9\n" in res.stdout, res.stderr
    out = shown.base / "r.html"
    res = shown.cli("report", "-o", str(out))
    assert res.returncode == 0, res.stderr
    assert "+caf\ufffd" in out.read_text(encoding="utf-8")


def test_a_violation_shows_what_was_reverted(shown):
    out = _show(shown, "5").stdout
    assert "violation: changed score.py" in out and "+print('score: -5')" in out


def test_json_has_the_facts_the_hashes_and_the_diff(shown):
    one, two = _json(shown, 1), _json(shown, 2)
    assert set(two) >= {"tag", "branch", "cycle", "status", "hypothesis", "lesson", "metric", "best",
                        "judged_against", "change_pct", "display", "commit", "parent", "ref", "files",
                        "stat", "diff", "note", "error"}
    assert (two["cycle"], two["status"], two["metric"], two["best"], two["judged_against"]) == (2, "discard", 35, 30, 30)
    assert two["display"] == {"metric": "35", "best": "30", "judged_against": "30", "change": "+16.67%"}
    assert HASH.fullmatch(two["commit"]) and two["parent"] == one["commit"] == shown.branch_head()
    assert two["ref"] == "refs/autoloop/t1/cycles/2" and two["files"] == ["src/latin.txt", "src/x", "val.txt"]
    assert two["diff"].startswith("diff --git a/src/latin.txt b/src/latin.txt") and "+35" in two["diff"]
    assert "+caf\ufffd" in two["diff"].splitlines()      # not UTF-8 in the file: U+FFFD in JSON text
    assert "3 files changed" in two["stat"] and two["note"] is None and two["error"] is None
    base = _json(shown, 0)
    assert base["commit"] is None and base["diff"] is None and base["note"].startswith("no change")
    assert HASH.fullmatch(base["kept_commit"])
    assert _json(shown, 2, "--stat")["diff"] is None


def test_stat_gives_a_diffstat_instead_of_the_diff(shown):
    out = _show(shown, "4", "--stat").stdout
    assert re.search(r"^ notes\.txt \| 2 \+-$", out, re.M) and "2 files changed" in out, out
    assert "diff --git" not in out


@pytest.mark.parametrize("args,words", [
    (["x"], "N is a cycle number"),
    (["-1"], "N is a cycle number"),
    (["99"], "has no cycle 99: its cycles are 0–8"),
    (["2", "--tag", "nope"], "no run 'nope'"),
])
def test_bad_input_is_one_line_and_exit_2(shown, args, words):
    res = _show(shown, *args)
    assert res.returncode == 2 and "Traceback" not in res.stderr and res.stdout == ""
    errs = error_lines(res.stderr)
    assert len(errs) == 1 and words in errs[0], res.stderr


def test_a_missing_commit_says_so_and_exits_1(shown, tmp_path):
    p = _copy(shown, tmp_path)
    git(p.repo, "update-ref", "-d", "refs/autoloop/t1/cycles/2", env=p.env)
    git(p.repo, "gc", "-q", "--prune=now", env=p.env)
    res = _show(p, "2")
    assert res.returncode == 1 and "Traceback" not in res.stderr
    errs = error_lines(res.stderr)
    assert len(errs) == 1 and "is not in this repository" in errs[0], res.stderr
    assert "git fetch origin 'refs/autoloop/t1/*:refs/autoloop/t1/*'" in errs[0]
    assert res.stdout.startswith("cycle 2 of run autoloop/t1: discard")
    res = _show(p, "2", "--json")
    assert res.returncode == 1 and json.loads(res.stdout)["error"] == errs[0].removeprefix("autoloop: error: ")


def test_a_run_made_before_cycles_were_kept_says_so(shown, tmp_path):
    # its ledger names no `change`: only kept cycles' commits exist (on the branch)
    p = _copy(shown, tmp_path)
    ledger = p.ledger_path()
    recs = [json.loads(line) for line in ledger.read_text().splitlines()]
    ledger.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "change"}) + "\n" for r in recs))
    res = _show(p, "2")
    assert res.returncode == 1 and "Traceback" not in res.stderr
    errs = error_lines(res.stderr)
    assert len(errs) == 1 and "change was not kept" in errs[0] and "val.txt" in errs[0], res.stderr
    res = _show(p, "1")    # a kept cycle's commit is on the branch
    assert res.returncode == 0 and "+30" in res.stdout.splitlines(), res.stderr


def test_clean_keeps_the_refs_unless_branch_and_removes_them_with_it(shown, tmp_path):
    p = _copy(shown, tmp_path)
    res = p.cli("clean", "--tag", "t1", "--yes")
    assert res.returncode == 0, res.stderr
    assert "6 cycle refs under refs/autoloop/t1/" in res.stdout and "--branch removes them" in res.stdout
    assert len(_refs(p)) == 6
    res = p.cli("clean", "--tag", "t1", "--yes", "--branch", "--journal")
    assert res.returncode == 0, res.stderr
    assert any(ln.startswith("  6 cycle refs under refs/autoloop/t1/ (") for ln in res.stdout.splitlines())
    assert _refs(p) == {}
    assert git(p.repo, "branch", "--list", "autoloop/*", env=p.env) == ""


def test_parallel_rounds_and_a_ci_resume_keep_every_cycles_change(tmp_path):
    # two workers a round (one keep, the other beaten in its round), then a resumed CI run
    # that commits its journal on the branch: every cycle has its ref, the branch only its keeps
    p = make_project(tmp_path, {"*": 'hyp(f"to {40 - cycle}"); W("val.txt", str(40 - cycle))'})
    res = p.run("--cycles", "2", "--workers", "2")
    assert res.returncode == 0, res.stderr
    res = p.run("--cycles", "2", "--workers", "2", "--ci")
    assert res.returncode == 0, res.stderr
    assert [r["status"] for r in p.rows()] == ["baseline", "discard", "keep", "discard", "keep"]
    refs = _refs(p)
    assert sorted(refs) == [f"refs/autoloop/t1/cycles/{n}" for n in range(1, 5)]
    for n in range(1, 5):
        facts = _json(p, n)
        assert facts["commit"] == refs[f"refs/autoloop/t1/cycles/{n}"] and f"+{40 - n}" in facts["diff"]
    kept = [_json(p, n)["commit"] for n in (2, 4)]
    head = p.branch_head()
    assert "Autoloop-Journal: t1" in p.message(head)      # the CI run's one journal commit on top
    assert git(p.repo, "rev-list", "--first-parent", f"main..{head}^", env=p.env).split() == kept[::-1]
    assert _json(p, 3)["parent"] == kept[0]                # generated from the first round's keep


def test_a_tag_started_afresh_drops_the_refs_an_earlier_run_of_it_left(tmp_path):
    p = make_project(tmp_path, {"*": 'W("val.txt", str(40 - cycle))'})
    assert p.run("--cycles", "3").returncode == 0
    assert len(_refs(p)) == 3
    # the branch and the journal removed by hand: the tag starts afresh, and its cycle 1 is new
    git(p.repo, "update-ref", "-d", "refs/heads/autoloop/t1", env=p.env)
    shutil.rmtree(p.repo / ".autoloop" / "t1")
    res = p.run("--cycles", "1")
    assert res.returncode == 0, res.stderr
    refs = _refs(p)
    assert list(refs) == ["refs/autoloop/t1/cycles/1"] and refs["refs/autoloop/t1/cycles/1"] == p.branch_head()
