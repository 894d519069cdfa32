"""Black-box: the installed CLI (`python -m autoloop run`) on throwaway repositories with a scripted
generator — every status, the journal files of contract §7, the run branch, the user's checkout,
the generator protocol of §6, resume, stop conditions and a failing baseline."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from tests.scripts.e2e import (BODY, GOAL, TSV_HEAD, assert_journal_consistent, assert_valid_ledger,
                               experiments_sections, git, make_project, section_field, tree_state)

# ---------------------------------------------------------------------------------------------
# One run through every status (baseline val.txt = 40.25, minimize).

STATUS_PLAN = {
    1: 'hyp("H1 via file"); print("Hypothesis: stdout-H1 loses"); W("val.txt", "31.5")',
    2: 'hyp("worse\\tvalue\\nline two"); W("val.txt", "33.75")',
    3: 'print("Hypothesis: tie-H3"); W("val.txt", "31.50")',
    4: 'print("Hypothesis: exit-H4"); W("val.txt", "exit")',
    5: 'print("Hypothesis: nometric-H5"); W("val.txt", "none")',
    6: 'print("Hypothesis: nan-H6"); W("val.txt", "nan")',
    7: 'print("Hypothesis: guard-H7"); W("val.txt", "12"); W("notes.txt", "FAIL")',
    8: 'print("Hypothesis: cheat-H8"); open("score.py", "a").write("print(\'score: -5\')\\n")',
    9: 'print("Hypothesis: nothing-H9")',
    10: 'print("Hypothesis: exit1-H10"); W("val.txt", "11"); sys.exit(1)',
    11: 'print("Hypothesis: hang-H11", flush=True); W("val.txt", "11"); time.sleep(60)',
    12: 'print("Hypothesis: keep-H12"); W("val.txt", "27.125")',
    13: 'print("Hypothesis: fake-H13"); W("val.txt", "55"); print("score: -1000")',
}
EXPECTED = {0: "baseline", 1: "keep", 2: "discard", 3: "discard", 4: "crash", 5: "crash",
            6: "crash", 7: "guard_fail", 8: "violation", 9: "no_change", 10: "gen_error",
            11: "gen_error", 12: "keep", 13: "discard"}
N = 13


@pytest.fixture(scope="module")
def status_run(tmp_path_factory):
    p = make_project(tmp_path_factory.mktemp("status"), STATUS_PLAN, gtimeout=2)
    start = git(p.repo, "rev-parse", "HEAD", env=p.env)
    score_py = (p.repo / "score.py").read_bytes()
    t0 = time.monotonic()
    res = p.run("--cycles", str(N))
    return p, res, start, score_py, time.monotonic() - t0


def test_status_run_exits_zero(status_run):
    p, res, *_ = status_run
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize("cycle", sorted(EXPECTED))
def test_status_of_each_cycle(status_run, cycle):
    p = status_run[0]
    assert p.statuses().get(cycle) == EXPECTED[cycle], p.statuses()


def test_status_run_is_fast_despite_the_hanging_generator(status_run):
    # 13 cycles with a 2 s generator timeout in one of them
    assert status_run[4] < 45


def test_tsv_header_columns(status_run):
    header, _ = status_run[0].tsv()
    assert header[:5] == TSV_HEAD


def test_tsv_one_row_per_cycle_in_order(status_run):
    rows = status_run[0].rows()
    assert [int(r["cycle"]) for r in rows] == list(range(N + 1))


@pytest.mark.parametrize("cycle,metric", [(0, 40.25), (1, 31.5), (2, 33.75), (3, 31.5), (12, 27.125), (13, 55.0)])
def test_tsv_metric_values(status_run, cycle, metric):
    row = status_run[0].rows()[cycle]
    assert float(row["metric"]) == metric


@pytest.mark.parametrize("cycle", [4, 5, 6, 8, 9, 10, 11])
def test_tsv_metric_empty_without_measurement(status_run, cycle):
    assert status_run[0].rows()[cycle]["metric"] == ""


def test_generator_fake_metric_line_is_ignored(status_run):
    row = status_run[0].rows()[13]
    assert (row["status"], float(row["metric"])) == ("discard", 55.0)


def test_tsv_commit_of_keep_rows_is_the_kept_commit(status_run):
    p, _, start, *_ = status_run
    commits = list(reversed(p.branch_commits(start)))
    keeps = [r for r in p.rows() if r["status"] == "keep"]
    assert len(keeps) == len(commits) == 2
    for row, commit in zip(keeps, commits):
        assert row["commit"] and commit.startswith(row["commit"]), (row, commit)


def test_tsv_commit_of_baseline_is_the_start_commit(status_run):
    p, _, start, *_ = status_run
    row = p.rows()[0]
    assert row["commit"] and start.startswith(row["commit"])


@pytest.mark.parametrize("cycle,desc", [(1, "H1 via file"), (3, "tie-H3"), (9, "nothing-H9"),
                                        (12, "keep-H12"), (13, "fake-H13")])
def test_tsv_description_is_the_hypothesis(status_run, cycle, desc):
    assert status_run[0].rows()[cycle]["description"] == desc


def test_hypothesis_file_beats_stdout(status_run):
    assert "stdout-H1" not in status_run[0].rows()[1]["description"]


def test_tsv_description_tabs_and_newlines_become_spaces(status_run):
    desc = status_run[0].rows()[2]["description"]
    assert re.sub(r" +", " ", desc) == "worse value line two"


def test_experiments_has_one_section_per_cycle_in_order(status_run):
    secs = [c for c, _ in experiments_sections(status_run[0].experiments())]
    assert secs in (list(range(N + 1)), list(range(1, N + 1)))


@pytest.mark.parametrize("field", ["Hypothesis", "Result", "Lesson"])
def test_experiments_sections_have_field(status_run, field):
    for cycle, sec in experiments_sections(status_run[0].experiments()):
        value = section_field(sec, field)
        assert value, f"cycle {cycle} has no non-empty {field} line:\n{sec}"


def test_experiments_hypothesis_matches_tsv(status_run):
    p = status_run[0]
    rows = p.rows()
    for cycle, sec in experiments_sections(p.experiments()):
        assert " ".join(section_field(sec, "Hypothesis").split()) == \
            " ".join(rows[cycle]["description"].split()), cycle


def test_journal_files_hidden_from_git_in_checkout(status_run):
    p = status_run[0]
    assert git(p.repo, "status", "--porcelain", "--untracked-files=all", env=p.env) == ""


def test_branch_gains_one_commit_per_keep(status_run):
    p, _, start, *_ = status_run
    commits = git(p.repo, "rev-list", f"{start}..{p.branch()}", env=p.env).split()
    assert len(commits) == 2
    # a straight line from the start commit
    assert git(p.repo, "rev-parse", f"{commits[-1]}^", env=p.env) == start
    assert git(p.repo, "rev-parse", f"{commits[0]}^", env=p.env) == commits[1]


@pytest.mark.parametrize("which,cycle,hyp,old,new", [(1, 1, "H1 via file", "40.25", "31.5"),
                                                     (0, 12, "keep-H12", "31.5", "27.125")])
def test_keep_commit_message(status_run, which, cycle, hyp, old, new):
    p, _, start, *_ = status_run
    msg = p.message(p.branch_commits(start)[which])
    assert re.search(rf"cycle\W*{cycle}\b", msg, re.I), msg
    assert hyp in msg, msg
    assert re.search(rf"{re.escape(old)}\D+{re.escape(new)}\b", msg), msg


def test_branch_head_holds_the_best_candidate(status_run):
    p = status_run[0]
    assert p.show(p.branch(), "val.txt").strip() == b"27.125"


def test_verifier_byte_identical_everywhere(status_run):
    p, _, _, score_py, _ = status_run
    assert p.show(p.branch(), "score.py") == score_py
    assert (p.worktree() / "score.py").read_bytes() == score_py
    assert (p.repo / "score.py").read_bytes() == score_py


def test_worktree_left_at_incumbent(status_run):
    p = status_run[0]
    wt = p.worktree()
    assert git(wt, "rev-parse", "HEAD", env=p.env) == p.branch_head()
    assert git(wt, "status", "--porcelain", "--ignored", "--untracked-files=all", env=p.env) == ""


def test_ledger_is_valid_jsonl(status_run):
    assert assert_valid_ledger(status_run[0])


# ---- the generator protocol (§6)


def test_generator_called_once_per_cycle_with_its_number(status_run):
    recs = status_run[0].records()
    assert [r["cycle"] for r in recs] == list(range(1, N + 1))
    assert all(r["env"]["AUTOLOOP_CYCLE"] == str(r["cycle"]) for r in recs)


def test_generator_runs_in_the_worktree_not_the_checkout(status_run):
    p = status_run[0]
    wt = p.worktree().resolve()
    for r in p.records():
        assert str(wt) == str(Path(r["cwd"]).resolve())


def test_prompt_on_stdin_equals_prompt_file(status_run):
    for r in status_run[0].records():
        assert r["prompt"] is not None and r["stdin"] == r["prompt"], r["cycle"]


@pytest.mark.parametrize("needle", [GOAL, "val.txt", "notes.txt", "src/**", BODY, "31.5", "40.25"])
def test_prompt_contains(status_run, needle):
    # cycle 2: best 31.5 (kept in cycle 1), baseline 40.25
    assert needle in status_run[0].record(2)["stdin"]


def test_prompt_remembers_earlier_cycles(status_run):
    prompt = status_run[0].record(13)["stdin"]
    assert "H1 via file" in prompt and "keep-H12" in prompt


@pytest.mark.parametrize("cycle,best", [(1, 40.25), (2, 31.5), (12, 31.5), (13, 27.125)])
def test_autoloop_best(status_run, cycle, best):
    assert float(status_run[0].record(cycle)["env"]["AUTOLOOP_BEST"]) == best


def test_hypothesis_file_is_given(status_run):
    for r in status_run[0].records():
        assert r["env"].get("AUTOLOOP_HYPOTHESIS_FILE"), r["cycle"]


def test_maximize_direction(tmp_path):
    p = make_project(tmp_path, {1: 'W("val.txt", "50")', 2: 'W("val.txt", "45")', 3: 'W("val.txt", "50.0")'},
                     direction="maximize")
    assert p.run("--cycles", "3").returncode == 0
    assert [r["status"] for r in p.rows()] == ["baseline", "keep", "discard", "discard"]


def test_metric_equals_form_and_prefix(tmp_path):
    p = make_project(tmp_path, {}, verifier="{py} emit.py",
                     files={"emit.py": "print('METRIC score=7.5')\nprint('score: oops')\n"})
    assert p.run("--cycles", "0").returncode == 0
    assert float(p.rows()[0]["metric"]) == 7.5


def test_last_metric_line_wins(tmp_path):
    p = make_project(tmp_path, {}, verifier="{py} emit.py",
                     files={"emit.py": "print('score: 1')\nprint('  score = 2 ')\nprint('done')\n"})
    assert p.run("--cycles", "0").returncode == 0
    assert float(p.rows()[0]["metric"]) == 2.0


def test_no_hypothesis_gives_none_given(tmp_path):
    p = make_project(tmp_path, {1: 'W("val.txt", "30")'})
    assert p.run("--cycles", "1").returncode == 0
    assert p.rows()[1]["description"] == "(none given)"


# ---------------------------------------------------------------------------------------------
# The user's checkout is not touched


def test_user_checkout_byte_identical(tmp_path):
    p = make_project(tmp_path, {1: 'print("Hypothesis: k"); W("val.txt", "30")',
                                2: 'open("score.py", "a").write("# evil\\n")',
                                3: 'W("val.txt", "35"); W("scratch.txt", "gen")',
                                4: 'W("val.txt", "36")'})
    r = p.repo
    git(r, "checkout", "-q", "-b", "feature", env=p.env)
    (r / "README.md").write_text("# staged change\n")
    git(r, "add", "README.md", env=p.env)
    (r / "README.md").write_text("# staged change, then unstaged\n")
    (r / "val.txt").write_text("999\n")          # unstaged edit of an allowed file
    (r / "scratch.txt").write_text("user's untracked file\n")
    (r / "debug.log").write_text("user's ignored file\n")
    git(r, "status", env=p.env)  # let git settle the index once, as a user's shell would
    skip = (".git", "experiments.md", "results.tsv", ".autoloop")

    def status() -> str:
        out = git(r, "status", "--porcelain=v2", "--untracked-files=all", "--ignored", env=p.env)
        return "\n".join(ln for ln in out.splitlines()
                         if not ln.startswith(("! .autoloop/", "! experiments.md", "! results.tsv")))

    before = (tree_state(r, skip), (r / ".git" / "index").read_bytes(),
              git(r, "symbolic-ref", "HEAD", env=p.env), git(r, "rev-parse", "HEAD", env=p.env),
              status(),
              git(r, "for-each-ref", "--format=%(refname) %(objectname)", "refs/heads/feature",
                  "refs/heads/main", "refs/tags", env=p.env))
    res = p.run("--cycles", "4")
    assert res.returncode == 0, res.stderr
    assert [x["status"] for x in p.rows()] == ["baseline", "keep", "violation", "violation", "discard"]
    after = (tree_state(r, skip), (r / ".git" / "index").read_bytes(),
             git(r, "symbolic-ref", "HEAD", env=p.env), git(r, "rev-parse", "HEAD", env=p.env),
             status(),
             git(r, "for-each-ref", "--format=%(refname) %(objectname)", "refs/heads/feature",
                 "refs/heads/main", "refs/tags", env=p.env))
    names = ["files", "index", "branch", "HEAD", "status", "refs"]
    for name, a, b in zip(names, before, after):
        assert a == b, f"the user's {name} changed"


def test_baseline_is_the_committed_head_not_the_dirty_checkout(tmp_path):
    p = make_project(tmp_path, {})
    (p.repo / "val.txt").write_text("999\n")
    assert p.run("--cycles", "0").returncode == 0
    assert float(p.rows()[0]["metric"]) == 40.25


# ---------------------------------------------------------------------------------------------
# Resume


RESUME_PLAN = {"*": 'print(f"Hypothesis: distinct-hyp-c{cycle}"); W("val.txt", str(40 - cycle))'}


@pytest.fixture(scope="module")
def resumed(tmp_path_factory):
    p = make_project(tmp_path_factory.mktemp("resume"), RESUME_PLAN)
    first = p.run("--cycles", "2")
    second = p.run("--cycles", "3")
    return p, first, second


def test_resume_exit_codes(resumed):
    _, first, second = resumed
    assert (first.returncode, second.returncode) == (0, 0), (first.stderr, second.stderr)


def test_resume_continues_cycle_numbers(resumed):
    p = resumed[0]
    assert [int(r["cycle"]) for r in p.rows()] == list(range(6))


def test_resume_does_not_redo_baseline(resumed):
    p = resumed[0]
    assert [r["status"] for r in p.rows()].count("baseline") == 1
    assert [r["cycle"] for r in p.records()] == [1, 2, 3, 4, 5]


def test_resume_keeps_memory_in_prompt(resumed):
    prompt = resumed[0].record(3)["stdin"]
    assert "distinct-hyp-c1" in prompt and "distinct-hyp-c2" in prompt


def test_resume_best_carries_over(resumed):
    assert float(resumed[0].record(3)["env"]["AUTOLOOP_BEST"]) == 38.0


def test_resume_branch_has_all_keeps(resumed):
    p = resumed[0]
    start = p.rows()[0]["commit"]
    full = git(p.repo, "rev-parse", start, env=p.env)
    assert len(p.branch_commits(full)) == 5
    assert p.show(p.branch(), "val.txt").strip() == b"35"


def test_resume_experiments_consistent(resumed):
    assert_journal_consistent(resumed[0])


def test_cycles_zero_is_baseline_only(tmp_path):
    p = make_project(tmp_path, RESUME_PLAN)
    res = p.run("--cycles", "0")
    assert res.returncode == 0, res.stderr
    assert [r["status"] for r in p.rows()] == ["baseline"]
    assert p.records() == []


def test_cycles_overrides_max_cycles(tmp_path):
    p = make_project(tmp_path, RESUME_PLAN, stop="max_cycles: 1")
    assert p.run("--cycles", "3").returncode == 0
    assert len(p.rows()) == 4


def test_max_cycles_counts_each_invocation(tmp_path):
    p = make_project(tmp_path, RESUME_PLAN, stop="max_cycles: 2")
    assert p.run().returncode == 0
    assert p.run().returncode == 0
    assert [int(r["cycle"]) for r in p.rows()] == [0, 1, 2, 3, 4]


def test_resume_after_cycles_zero_runs_cycles(tmp_path):
    p = make_project(tmp_path, RESUME_PLAN)
    assert p.run("--cycles", "0").returncode == 0
    assert p.run("--cycles", "1").returncode == 0
    assert [r["status"] for r in p.rows()] == ["baseline", "keep"]


# ---------------------------------------------------------------------------------------------
# Stop conditions


def test_stop_patience(tmp_path):
    p = make_project(tmp_path, {"*": 'W("val.txt", "50")'}, stop="patience: 3")
    res = p.run(timeout=60)
    assert res.returncode == 0, res.stderr
    assert [r["status"] for r in p.rows()] == ["baseline"] + ["discard"] * 3


def test_stop_patience_resets_on_keep(tmp_path):
    p = make_project(tmp_path, {1: 'W("val.txt", "50")', 2: 'W("val.txt", "30")', "*": 'W("val.txt", "50")'},
                     stop="patience: 2")
    assert p.run(timeout=60).returncode == 0
    assert [r["status"] for r in p.rows()] == ["baseline", "discard", "keep", "discard", "discard"]


def test_stop_target_minimize(tmp_path):
    p = make_project(tmp_path, {"*": 'W("val.txt", str(40 - 3 * cycle))'}, stop="target: 35")
    res = p.run(timeout=60)
    assert res.returncode == 0, res.stderr
    # 37, 34 (reaches 35) -> stop
    assert [r["status"] for r in p.rows()] == ["baseline", "keep", "keep"]


def test_stop_target_maximize(tmp_path):
    p = make_project(tmp_path, {"*": 'W("val.txt", str(40 + 3 * cycle))'}, stop="target: 46",
                     direction="maximize")
    assert p.run(timeout=60).returncode == 0
    assert len(p.rows()) == 3


def test_stop_max_minutes(tmp_path):
    # a 3 s budget and cycles of about a second; checked on the ledger's own clock, so a busy
    # machine (slower cycles, fewer of them) cannot make it fail
    p = make_project(tmp_path, {"*": 'time.sleep(0.7); W("val.txt", "50")'}, stop="max_minutes: 0.05")
    res = p.run(timeout=120)
    assert res.returncode == 0, res.stderr
    recs = [json.loads(line) for line in p.ledger_lines() if line]
    assert next(r for r in recs if r["t"] == "end")["reason"] == "max_minutes reached (0.05 min)"
    begins = {r["cycle"]: r["ts"] for r in recs if r["t"] == "begin"}
    assert len(begins) >= 2, begins                      # the baseline and at least one cycle
    # the budget runs from before the baseline: no cycle begins after it is spent
    assert max(begins.values()) - begins[0] < 3.0 + 1.0, begins


# ---------------------------------------------------------------------------------------------
# A baseline that cannot be measured


def test_baseline_failure_exit_one_with_tail(tmp_path):
    p = make_project(tmp_path, {})
    (p.repo / "val.txt").write_text("exit\n")
    git(p.repo, "commit", "-qam", "broken", env=p.env)
    res = p.run("--cycles", "3")
    assert res.returncode == 1, (res.returncode, res.stderr)
    assert "VERIFIER-STDERR-TAIL exit 3" in res.stderr + res.stdout
    assert "Traceback" not in res.stderr
    assert p.records() == []


def test_baseline_without_metric_exit_one_with_tail(tmp_path):
    p = make_project(tmp_path, {})
    (p.repo / "val.txt").write_text("none\n")
    git(p.repo, "commit", "-qam", "no metric", env=p.env)
    res = p.run("--cycles", "3")
    assert res.returncode == 1
    assert "nothing parsable here" in res.stderr + res.stdout


def test_baseline_nan_is_a_failure(tmp_path):
    p = make_project(tmp_path, {})
    (p.repo / "val.txt").write_text("nan\n")
    git(p.repo, "commit", "-qam", "nan", env=p.env)
    assert p.run("--cycles", "1").returncode == 1


def test_baseline_failure_leaves_checkout_alone(tmp_path):
    p = make_project(tmp_path, {})
    (p.repo / "val.txt").write_text("exit\n")
    git(p.repo, "commit", "-qam", "broken", env=p.env)
    head = git(p.repo, "rev-parse", "HEAD", env=p.env)
    status = git(p.repo, "status", "--porcelain", "--untracked-files=all", env=p.env)
    p.run("--cycles", "1")
    assert git(p.repo, "rev-parse", "HEAD", env=p.env) == head
    assert git(p.repo, "status", "--porcelain", "--untracked-files=all", env=p.env) == status


@pytest.mark.parametrize("cycle,numbers", [(1, ["40.25", "31.5"]), (2, ["33.75", "31.5"]), (3, ["31.5"])])
def test_lesson_is_concrete(status_run, cycle, numbers):
    sec = dict(experiments_sections(status_run[0].experiments()))[cycle]
    lesson = section_field(sec, "Lesson")
    for n in numbers:
        assert n in lesson, lesson


def test_violation_lesson_names_the_file(status_run):
    sec = dict(experiments_sections(status_run[0].experiments()))[8]
    assert "score.py" in section_field(sec, "Lesson")


def test_log_lists_every_cycle(status_run):
    p = status_run[0]
    res = p.cli("log", "program.md", "--tag", p.tag)
    assert res.returncode == 0, res.stderr
    for cycle, status in EXPECTED.items():
        assert re.search(rf"^\s*{cycle}\s+{status}\b", res.stdout, re.M), (cycle, res.stdout)


def test_new_and_deleted_allowed_files_are_committed(tmp_path):
    p = make_project(tmp_path, {1: 'W("src/new.txt", "hello\\n"); W("val.txt", "30")',
                                2: 'os.remove("src/new.txt"); W("val.txt", "20")'})
    start = git(p.repo, "rev-parse", "HEAD", env=p.env)
    assert p.run("--cycles", "2").returncode == 0
    assert [r["status"] for r in p.rows()] == ["baseline", "keep", "keep"]
    second, first = p.branch_commits(start)
    assert git(p.repo, "diff", "--name-status", start, first, env=p.env).split() == ["A", "src/new.txt",
                                                                                   "M", "val.txt"]
    assert git(p.repo, "diff", "--name-status", first, second, env=p.env).split() == ["D", "src/new.txt",
                                                                                    "M", "val.txt"]


# ---------------------------------------------------------------------------------------------
# Reading the metric (§4), through a baseline-only run


METRIC_LINES = [
    ("score: 5", 5.0),
    ("score=5", 5.0),
    ("  score :  -0.5  ", -0.5),
    ("METRIC score: 3", 3.0),
    ("METRIC score=2.5e-3", 0.0025),
    ("score: +7", 7.0),
    ("score: 1_000", 1000.0),        # a float Python accepts
    ("score: 5\r", 5.0),
    ("score: nan", None),
    ("score: inf", None),
    ("score: -Infinity", None),
    ("score: 0x10", None),
    ("score: 5 points", None),
    ("myscore: 5", None),
    ("score_x: 5", None),
]


EMIT_FORM = """\
import json, sys
v = open("val.txt").read().strip()
forms = json.load(open("forms.json"))
sys.stdout.write("verifier output\\n" + (forms[v] if v in forms else f"score: {v}") + "\\n")
"""


@pytest.fixture(scope="module")
def metric_forms(tmp_path_factory):
    """One run, one metric line form per cycle (cycle k prints METRIC_LINES[k - 1])."""
    import json
    forms = {f"f{k}": line for k, (line, _) in enumerate(METRIC_LINES, 1)}
    plan = {k: f'W("val.txt", "f{k}")' for k in range(1, len(METRIC_LINES) + 1)}
    p = make_project(tmp_path_factory.mktemp("forms"), plan, verifier="{py} emit.py", guards=False,
                     files={"emit.py": EMIT_FORM, "forms.json": json.dumps(forms)})
    res = p.run("--cycles", str(len(METRIC_LINES)))
    assert res.returncode == 0, res.stderr
    return p


@pytest.mark.parametrize("k", range(1, len(METRIC_LINES) + 1), ids=[repr(m[0]) for m in METRIC_LINES])
def test_metric_line_forms(metric_forms, k):
    line, value = METRIC_LINES[k - 1]
    row = metric_forms.rows()[k]
    if value is None:
        assert (row["status"], row["metric"]) == ("crash", ""), row
    else:
        assert row["status"] in ("keep", "discard") and float(row["metric"]) == value, row


def test_metric_name_dot_is_literal(tmp_path):
    p = make_project(tmp_path, {}, verifier="{py} emit.py", metric="acc.top1", guards=False,
                     files={"emit.py": "print('acc.top1: 5')\nprint('accXtop1: 9')\n"})
    assert p.run("--cycles", "0").returncode == 0
    assert float(p.rows()[0]["metric"]) == 5.0


def test_metric_pattern_last_match_first_group(tmp_path):
    p = make_project(tmp_path, {1: 'W("val.txt", "30")'}, verifier="{py} emit.py", guards=False,
                     files={"emit.py": "v = open('val.txt').read().strip()\n"
                                       "print('loss=99.0 (warmup)')\nprint(f'step 9 loss={v} done')\n"})
    prog = (p.repo / "program.md").read_text().replace("  metric: score\n", "  pattern: 'loss=([0-9.]+) done'\n")
    (p.repo / "program.md").write_text(prog)
    git(p.repo, "commit", "-qam", "pattern", env=p.env)
    res = p.run("--cycles", "1")
    assert res.returncode == 0, res.stderr
    assert [(r["status"], float(r["metric"])) for r in p.rows()] == [("baseline", 40.25), ("keep", 30.0)]


def test_verify_measures_without_changing_anything(tmp_path):
    from tests.scripts.e2e import repo_state
    p = make_project(tmp_path, {})
    (p.repo / "val.txt").write_text("12.5\n")     # not committed: a run's baseline would not see it
    before = repo_state(p.repo, p.env)
    res = p.cli("verify", "program.md")
    assert res.returncode == 0, res.stderr
    assert "score: 40.25" in res.stdout and "12.5" not in res.stdout
    assert repo_state(p.repo, p.env) == before


def test_verify_reports_a_failing_guard(tmp_path):
    p = make_project(tmp_path, {})
    (p.repo / "notes.txt").write_text("FAIL\n")
    git(p.repo, "commit", "-qam", "a failing guard", env=p.env)
    res = p.cli("verify", "program.md")
    assert res.returncode != 0
    assert "notes" in res.stdout + res.stderr


def test_guard_timeout_is_guard_fail(tmp_path):
    # The guard reads the generator's file through a glob: a file it named would be protected
    # (and allowed to the generator, so the program refused), inside `sh -c` too.
    guard = "{name: slow, command: sh -c 'cat *.txt | grep -q SLOW && sleep 300; exit 0', timeout: 1}"
    p = make_project(tmp_path, {1: 'W("val.txt", "30"); W("notes.txt", "SLOW")', 2: 'W("val.txt", "31")'},
                     guards=False, extra=f"guards:\n  - {guard}")
    t0 = time.monotonic()
    res = p.run("--cycles", "2")
    assert res.returncode == 0, res.stderr
    assert time.monotonic() - t0 < 20
    assert [r["status"] for r in p.rows()] == ["baseline", "guard_fail", "keep"]


def test_guard_fail_is_not_committed(tmp_path):
    p = make_project(tmp_path, {1: 'W("val.txt", "1"); W("notes.txt", "FAIL")'})
    start = git(p.repo, "rev-parse", "HEAD", env=p.env)
    assert p.run("--cycles", "1").returncode == 0
    assert p.statuses()[1] == "guard_fail"
    assert p.branch_commits(start) == []
    assert (p.worktree() / "val.txt").read_text() == "40.25\n"


def test_program_in_a_subfolder(tmp_path):
    """program.md in exp/: the journal lives next to it, hidden from git; paths stay repo-relative."""
    p = make_project(tmp_path, {1: 'print("Hypothesis: sub"); W("val.txt", "30")',
                                2: 'open("exp/program.md", "a").write("TAMPERED\\n")'})
    (p.repo / "exp").mkdir()
    (p.repo / "program.md").rename(p.repo / "exp" / "program.md")
    git(p.repo, "add", "-A", env=p.env)
    git(p.repo, "commit", "-qm", "program in exp/", env=p.env)
    res = p.cli("run", "exp/program.md", "--tag", p.tag, "--cycles", "2")
    assert res.returncode == 0, res.stderr
    assert (p.repo / "exp" / "results.tsv").exists() and (p.repo / "exp" / "experiments.md").exists()
    assert not (p.repo / "results.tsv").exists()
    statuses = [ln.split("\t")[3] for ln in (p.repo / "exp" / "results.tsv").read_text().splitlines()[1:]]
    assert statuses == ["baseline", "keep", "violation"]
    assert git(p.repo, "status", "--porcelain", "--untracked-files=all", env=p.env) == ""


def test_odd_hypotheses_keep_the_journal_whole(tmp_path):
    plan = {
        1: 'hyp("naïve → ünïcode ✓ \\u00e9\\r\\nsecond\\tline"); W("val.txt", "30")',
        2: 'sys.stdout.buffer.write(b"\\xff\\xfe junk \\x00\\nHypothesis: after bad bytes \\xe9\\n"); W("val.txt", "29")',
        3: 'hyp("x" * 20000); W("val.txt", "28")',
    }
    p = make_project(tmp_path, plan)
    res = p.run("--cycles", "3")
    assert res.returncode == 0, res.stderr
    assert_valid_ledger(p)
    rows = p.rows()
    assert [r["status"] for r in rows] == ["baseline", "keep", "keep", "keep"]
    assert "naïve → ünïcode ✓" in rows[1]["description"]
    assert "after bad bytes" in rows[2]["description"]
    assert_journal_consistent(p)
    start = git(p.repo, "rev-parse", "HEAD", env=p.env)
    for commit in p.branch_commits(start):
        subject = p.message(commit).splitlines()[0]
        assert len(subject) < 300


def test_verifier_and_guards_get_no_terminal_stdin(tmp_path):
    """A verifier or guard that reads stdin must see EOF, not autoloop's own (open) stdin."""
    import subprocess
    from tests.scripts.e2e import PY
    p = make_project(tmp_path, {1: 'W("val.txt", "30")'}, verifier="sh -c 'cat >/dev/null; {py} score.py'",
                     guards=False, vtimeout=20, extra="guards:\n  - {name: reads, command: cat, timeout: 20}")
    proc = subprocess.Popen([PY, "-m", "autoloop", "run", "program.md", "--tag", p.tag, "--cycles", "1"],
                            cwd=p.repo, env=p.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    t0 = time.monotonic()
    try:
        proc.wait(timeout=60)          # stdin stays open: a pass-through would hang to the timeout
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdin.close()
    assert proc.returncode == 0, proc.stderr.read()
    assert time.monotonic() - t0 < 15
    assert [r["status"] for r in p.rows()] == ["baseline", "keep"]


def test_resume_after_the_worktree_cache_was_deleted(tmp_path):
    import shutil
    p = make_project(tmp_path, RESUME_PLAN)
    assert p.run("--cycles", "1").returncode == 0
    shutil.rmtree(p.worktree())
    res = p.run("--cycles", "1")
    assert res.returncode == 0, res.stderr
    assert [r["status"] for r in p.rows()] == ["baseline", "keep", "keep"]


def test_journal_files_regenerated_when_deleted(tmp_path):
    p = make_project(tmp_path, RESUME_PLAN)
    assert p.run("--cycles", "2").returncode == 0
    (p.repo / "results.tsv").unlink()
    (p.repo / "experiments.md").unlink()
    assert p.run("--cycles", "1").returncode == 0
    assert [int(r["cycle"]) for r in p.rows()] == [0, 1, 2, 3]
    assert_journal_consistent(p)


def test_resume_after_user_commits_on_their_branch(tmp_path):
    p = make_project(tmp_path, RESUME_PLAN)
    assert p.run("--cycles", "1").returncode == 0
    head = p.branch_head()
    (p.repo / "README.md").write_text("user's later work\n")
    git(p.repo, "commit", "-qam", "user work", env=p.env)
    assert p.run("--cycles", "1").returncode == 0
    assert git(p.repo, "rev-parse", f"{p.branch()}^", env=p.env) == head     # the run goes on from its own head
    assert p.show(p.branch(), "README.md") == b"# demo\n"
