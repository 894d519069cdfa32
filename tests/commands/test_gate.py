"""`autoloop gate`: base and head measured here, paired and interleaved; exit 1 when head is worse."""

from __future__ import annotations

import json
import math
import shutil
import subprocess

import pytest

from autoloop.commands.gate import compare, parse_tolerance
from tests.scripts.e2e import PY, git, isolated_env

# A real timing benchmark: the verifier runs the workload and prints how long it took.
BENCH = """\
import subprocess, sys, time
t0 = time.perf_counter()
subprocess.run([sys.executable, "work.py"], check=True)
print(f"seconds: {time.perf_counter() - t0:.6f}")
"""
WORK_FAST = "import time\ntime.sleep(0.05)\n"
WORK_SLOW = "import time\ntime.sleep(0.25)\n"

PROGRAM = f"""---
goal: Keep work.py fast
allowed: [work.py]
verifier:
  command: {PY} bench.py
  metric: seconds
  direction: minimize
  timeout: 60
---
"""


def make_repo(tmp_path, files: dict[str, str]) -> tuple:
    env = isolated_env(tmp_path)
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", env=env)
    all_files = {"bench.py": BENCH, "program.md": PROGRAM, "work.py": WORK_FAST}
    all_files.update(files)
    for rel, text in all_files.items():
        (repo / rel).write_text(text)
    git(repo, "add", "-A", env=env)
    git(repo, "commit", "-qm", "base", env=env)
    return repo, env


def commit(repo, env, files: dict[str, str], msg: str) -> str:
    for rel, text in files.items():
        (repo / rel).write_text(text)
    git(repo, "add", "-A", env=env)
    git(repo, "commit", "-qm", msg, "--allow-empty", env=env)
    return git(repo, "rev-parse", "HEAD", env=env)


def gate(repo, env, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PY, "-m", "autoloop", "gate", *args], cwd=repo, env=env, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def test_slower_head_fails_with_exit_1(tmp_path):
    repo, env = make_repo(tmp_path, {})
    base = git(repo, "rev-parse", "HEAD", env=env)
    commit(repo, env, {"work.py": WORK_SLOW}, "make it slow")
    summary = tmp_path / "summary.md"
    res = gate(repo, {**env, "GITHUB_STEP_SUMMARY": str(summary)}, "--base", base, "--pairs", "6")
    assert res.returncode == 1, res.stdout + res.stderr
    md = res.stdout
    assert md.startswith("### ❌ autoloop gate: FAIL")
    assert "| median |" in md and "| runs | 6 | 6 |" in md
    assert "ABBA" in md and "worse" in md
    assert md in summary.read_text()
    # interleaved: base first in even pairs, head first in odd ones
    assert "| 1 | base → head |" in md and "| 2 | head → base |" in md
    # every pair is a fresh process in a clean tree: no worktree is left behind
    assert git(repo, "worktree", "list", "--porcelain", env=env).count("worktree ") == 1


def test_equal_head_passes_with_exit_0(tmp_path):
    repo, env = make_repo(tmp_path, {})
    base = git(repo, "rev-parse", "HEAD", env=env)
    commit(repo, env, {"README.md": "docs only\n"}, "docs")
    # real timings on a shared machine are noisy: a stricter alpha and a tolerance above the noise
    # keep this test honest without making it flaky (the deterministic verdicts are tested below)
    res = gate(repo, env, "--base", base, "--pairs", "8", "--alpha", "0.01", "--tolerance", "15%", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    out = json.loads(res.stdout)
    assert out["passed"] is True and out["exit_code"] == 0
    assert len(out["base"]["values"]) == len(out["head"]["values"]) == 8
    assert out["order"][0] == ["base", "head"] and out["order"][1] == ["head", "base"]
    # the interval of level 1 - 2 alpha (as near as 8 pairs allow): the one-sided tests' dual
    assert out["ci_level"] == pytest.approx(1 - 2 * 2 / 256)


def _det_repo(tmp_path, base_value: str, head_value: str, *, head_files: dict | None = None):
    """A deterministic verifier: prints the number in value.txt."""
    prog = PROGRAM.replace(f"{PY} bench.py", f"{PY} score.py").replace("seconds", "score")
    repo, env = make_repo(tmp_path, {"program.md": prog, "score.py": "print('score:', open('value.txt').read().strip())\n",
                                     "value.txt": base_value})
    base = git(repo, "rev-parse", "HEAD", env=env)
    commit(repo, env, {"value.txt": head_value, **(head_files or {})}, "head")
    return repo, env, base


@pytest.mark.parametrize("base_v,head_v,args,code", [
    ("100", "100", [], 0),                                  # equal
    ("100", "101.5", [], 0),                                # worse, within the 2% tolerance
    ("100", "103", [], 1),                                  # worse beyond it
    ("100", "103", ["--tolerance", "5%"], 0),
    ("100", "90", [], 0),                                   # better
    ("100", "100", ["--require-improvement"], 1),           # not better
    ("100", "99", ["--require-improvement"], 0),            # better
])
def test_verdicts(tmp_path, base_v, head_v, args, code):
    repo, env, base = _det_repo(tmp_path, base_v, head_v)
    res = gate(repo, env, "--base", base, *args)
    assert res.returncode == code, res.stdout + res.stderr


@pytest.mark.parametrize("args,never", [(["--pairs", "3"], "fail"), (["--pairs", "4"], "fail"),
                                        (["--pairs", "5", "--alpha", "0.01", "--require-improvement"], "pass")])
def test_pairs_that_can_never_reach_alpha_are_refused(tmp_path, args, never):
    repo, env, base = _det_repo(tmp_path, "100", "103")
    res = gate(repo, env, "--base", base, *args)
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stdout == ""
    assert f"so this gate could never {never}; use --pairs" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
    assert git(repo, "worktree", "list", "--porcelain", env=env).count("worktree ") == 1


def test_gate_measures_with_the_data_linked_in_as_a_run_does(tmp_path):
    data = tmp_path / "datasets" / "d1"
    data.mkdir(parents=True)
    (data / "offset.txt").write_text("1000\n")
    score = "print('score:', float(open('value.txt').read()) + float(open('data/offset.txt').read()))\n"
    prog = PROGRAM.replace(f"{PY} bench.py", f"{PY} score.py").replace("seconds", "score")
    prog = prog.replace("verifier:", f"data: [{{path: {data}, as: data}}]\nverifier:")
    repo, env = make_repo(tmp_path, {"program.md": prog, "score.py": score, "value.txt": "100"})
    base = git(repo, "rev-parse", "HEAD", env=env)
    commit(repo, env, {"value.txt": "90"}, "head")
    res = gate(repo, env, "--base", base, "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    out = json.loads(res.stdout)
    assert out["base"]["values"] == [1100.0] * 6 and out["head"]["values"] == [1090.0] * 6, out
    assert not (repo / "data").exists()


def test_gate_refuses_data_whose_place_the_head_uses(tmp_path):
    data = tmp_path / "d"
    data.mkdir()
    prog = PROGRAM.replace("verifier:", f"data: [{{path: {data}, as: data}}]\nverifier:")
    repo, env = make_repo(tmp_path, {"program.md": prog, "bench.py": "print('seconds: 1')\n"})
    base = git(repo, "rev-parse", "HEAD", env=env)
    (repo / "data").mkdir()
    commit(repo, env, {"data/x.txt": "mine"}, "head uses data/")
    res = gate(repo, env, "--base", base)
    assert res.returncode == 2 and res.stdout == "", res.stdout + res.stderr
    assert "data[0].as: 'data' is a path of the repository at" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


def test_head_whose_verifier_crashes_fails(tmp_path):
    repo, env, base = _det_repo(tmp_path, "100", "not a number")
    res = gate(repo, env, "--base", base)
    assert res.returncode == 1
    assert "verifier fails on the head" in res.stdout


def test_broken_base_exits_3(tmp_path):
    repo, env, _ = _det_repo(tmp_path, "100", "100")
    broken = commit(repo, env, {"value.txt": "oops"}, "break")
    head = commit(repo, env, {"value.txt": "100"}, "fix")
    res = gate(repo, env, "--base", broken, "--head", head)
    assert res.returncode == 3, res.stdout + res.stderr
    assert "cannot be measured" in res.stderr
    assert git(repo, "worktree", "list", "--porcelain", env=env).count("worktree ") == 1   # cleaned up


def test_unknown_ref_is_usage_error(tmp_path):
    repo, env, _ = _det_repo(tmp_path, "100", "100")
    res = gate(repo, env, "--base", "origin/nope")
    assert res.returncode == 2
    assert "unknown revision 'origin/nope'" in res.stderr and "fetch-depth" in res.stderr
    assert res.stderr.startswith("autoloop: error: unknown revision")      # no header before it


def test_bad_tolerance_is_usage_error(tmp_path):
    repo, env, _ = _det_repo(tmp_path, "100", "100")
    res = gate(repo, env, "--base", "HEAD~1", "--tolerance", "lots")
    assert res.returncode == 2 and "--tolerance" in res.stderr


def test_change_to_the_verifier_is_flagged(tmp_path):
    repo, env, base = _det_repo(tmp_path, "100", "100",
                                head_files={"score.py": "print('score:', open('value.txt').read().strip())  # edited\n"})
    res = gate(repo, env, "--base", base)
    assert res.returncode == 0
    assert "touches what the verifier runs" in res.stdout and "`score.py`" in res.stdout


def test_markdown_file_and_user_checkout_untouched(tmp_path):
    repo, env, base = _det_repo(tmp_path, "100", "100")
    status = git(repo, "status", "--porcelain", "--ignored", env=env)
    head = git(repo, "rev-parse", "HEAD", env=env)
    out = tmp_path / "gate.md"
    res = gate(repo, env, "--base", base, "--markdown", str(out))
    assert res.returncode == 0
    assert out.read_text() == res.stdout
    assert git(repo, "status", "--porcelain", "--ignored", env=env) == status
    assert git(repo, "rev-parse", "HEAD", env=env) == head


def test_guards_option_fails_a_head_that_breaks_a_guard(tmp_path):
    prog_guard = "guards:\n  - {name: check, command: " + PY + " -c \"import sys; sys.exit('bad' in open('value.txt').read())\"}\n---\n"
    repo, env, base = _det_repo(tmp_path, "100", "100")
    text = (repo / "program.md").read_text().replace("---\n", "", 1)
    text = "---\n" + text.rsplit("---\n", 1)[0] + prog_guard
    (repo / "program.md").write_text(text)
    head = commit(repo, env, {"value.txt": "100 bad"}, "bad")
    res = gate(repo, env, "--base", base, "--head", head, "--guards")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "FAIL: the head fails guard check: exit 1" in res.stdout + res.stderr
    assert "the head guard" not in res.stdout + res.stderr and "on the head" not in res.stdout


def test_guards_option_says_when_the_guards_pass(tmp_path):
    prog_guard = "guards:\n  - {name: check, command: " + PY + " -c \"import sys; sys.exit('bad' in open('value.txt').read())\"}\n---\n"
    repo, env, base = _det_repo(tmp_path, "100", "100")
    text = (repo / "program.md").read_text().replace("---\n", "", 1)
    text = "---\n" + text.rsplit("---\n", 1)[0] + prog_guard
    (repo / "program.md").write_text(text)
    head = commit(repo, env, {"value.txt": "101"}, "fine")
    res = gate(repo, env, "--base", base, "--head", head, "--guards", "--pairs", "2", "--alpha", "0.25")
    assert "gate: guards pass on the base and the head (check)" in res.stderr, res.stderr


# ---- the statistics --------------------------------------------------------------------------------


def test_compare_equal():
    s = compare([10.0] * 6, [10.0] * 6, "minimize")
    assert s.change_pct == 0 and s.p_worse == 1 and s.p_better == 1


def test_compare_log_scale_change_and_interval():
    base = [10, 10.1, 9.9, 10, 10.2, 9.8]
    s = compare(base, [b * 1.1 for b in base], "minimize")
    assert s.scale == "log"
    assert s.change_pct == pytest.approx(10.0)
    assert s.ci_pct[0] <= 10.0 + 1e-9 <= s.ci_pct[1] + 1e-9
    assert s.p_worse == pytest.approx(1 / 64)
    assert s.ci_level == pytest.approx(1 - 2 / 64)


def test_the_gates_interval_agrees_with_its_one_sided_test():
    # five pairs clearly better, one a little worse: significant at 0.05 (p = 2/64)
    base, head = [100.0] * 6, [90.0, 91.0, 92.0, 93.0, 94.0, 100.5]
    s = compare(base, head, "minimize", level=0.9)
    assert s.p_better == pytest.approx(2 / 64)
    assert s.ci_pct[1] < 0, s.ci_pct                  # the whole interval is better
    # the 95% interval would hold 0 beside that p-value: the contradiction the trial saw
    assert compare(base, head, "minimize").ci_pct[1] > 0


def test_compare_direction():
    s = compare([10.0] * 6, [11.0] * 6, "maximize")
    assert s.p_better < 0.05 and s.p_worse == 1


def test_compare_difference_scale_with_nonpositive_values():
    s = compare([0.0, -1.0, 1.0, 0.5, 0.0, 0.2], [1.0, 0.0, 2.0, 1.5, 1.0, 1.2], "maximize")
    assert s.scale == "diff"
    assert s.p_better < 0.05


def test_parse_tolerance():
    assert parse_tolerance("2%") == 2 and parse_tolerance("0.5") == 0.5 and parse_tolerance(" 3 % ") == 3
    for bad in ("x", "-1%", "inf"):
        with pytest.raises(ValueError):
            parse_tolerance(bad)
    assert math.isfinite(parse_tolerance("0"))


@pytest.mark.parametrize("kind,code", [("bwrap", 2), ("auto", 0)])
def test_no_temporary_folder_is_left_when_bwrap_cannot_make_a_sandbox(tmp_path, kind, code):
    # a bwrap that cannot make namespaces: `bwrap` refuses (exit 2), `auto` measures unsandboxed
    repo, env, base = _det_repo(tmp_path, "100", "100")
    (repo / "program.md").write_text((repo / "program.md").read_text().replace(
        "  timeout: 60\n", f"  timeout: 60\nsandbox: {kind}\n"))
    head = commit(repo, env, {}, "sandbox")
    bin_dir, tmp = tmp_path / "bin", tmp_path / "tmp"
    bin_dir.mkdir()
    tmp.mkdir()
    for name in ("git", "sh", "env"):
        (bin_dir / name).symlink_to(shutil.which(name))
    (bin_dir / "bwrap").write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    (bin_dir / "bwrap").chmod(0o755)
    res = gate(repo, {**env, "PATH": str(bin_dir), "TMPDIR": str(tmp)}, "--base", base, "--head", head,
               "--pairs", "2", "--alpha", "0.25")
    assert res.returncode == code, res.stdout + res.stderr
    assert "bwrap cannot create a sandbox here" in res.stderr
    assert [x for x in tmp.iterdir() if not x.name.startswith("autoloop-filters-")] == []
    assert git(repo, "worktree", "list", "--porcelain", env=env).count("worktree ") == 1
