"""Black-box: bad program.md files, bad command lines and repository states autoloop must refuse —
exit 2, one error line (program.md errors as `program.md:LINE: ...` naming the key), no traceback,
and nothing changed: git refs, HEAD, status, the whole file tree (.git included), no worktree."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.scripts.e2e import (BASE_FILES, PY, error_lines, git, isolated_env, make_project,
                               repo_state)

VALID = """\
---
goal: Lower the score
allowed: [val.txt]
verifier:
  command: {py} score.py
  metric: score
  direction: minimize
generator:
  kind: command
  command: "true"
---
Body.
"""


def _lines(text: str) -> list[str]:
    return text.format(py=PY).splitlines(keepends=True)


def _edit(line_no: int, new: str | None) -> str:
    """VALID with line `line_no` (1-based) replaced (None: removed)."""
    lines = _lines(VALID)
    if new is None:
        del lines[line_no - 1]
    else:
        lines[line_no - 1] = new + "\n"
    return "".join(lines)


def _without(first: int, last: int) -> str:
    lines = _lines(VALID)
    del lines[first - 1:last]
    return "".join(lines)


# (id, program.md text, expected line or None, words the message must contain)
PROGRAMS = [
    ("malformed-yaml", _edit(3, "allowed: [val.txt"), None, []),
    ("bad-indentation", _edit(6, "    metric: score\n   bad"), None, []),
    ("unknown-top-key", _edit(3, "alowed: [val.txt]"), 3, ["alowed", "allowed"]),
    ("unknown-nested-key", _edit(7, "  direcion: minimize"), 7, ["direcion", "direction"]),
    ("missing-verifier", _without(4, 7), None, ["verifier"]),
    ("missing-goal", _edit(2, None), None, ["goal"]),
    ("missing-allowed", _edit(3, None), None, ["allowed"]),
    ("empty-allowed", _edit(3, "allowed: []"), 3, ["allowed"]),
    ("bad-direction", _edit(7, "  direction: lower"), 7, ["direction"]),
    ("missing-metric", _edit(6, None), None, ["metric"]),
    ("negative-timeout", _edit(6, "  metric: score\n  timeout: -5"), 7, ["timeout"]),
    ("string-timeout", _edit(6, "  metric: score\n  timeout: soon"), 7, ["timeout"]),
    ("unknown-generator-kind", _edit(9, "  kind: telepathy"), 9, ["kind"]),
    ("generator-command-missing", _edit(10, None), None, ["command"]),
    ("zero-patience", VALID.format(py=PY).replace("---\nBody", "stop:\n  patience: 0\n---\nBody"), 12,
     ["patience"]),
    ("unknown-stop-key", VALID.format(py=PY).replace("---\nBody", "stop:\n  max_cycle: 3\n---\nBody"), 12,
     ["max_cycle", "max_cycles"]),
    ("no-front-matter", "goal: x\nJust text, no front matter.\n", None, []),
    ("unterminated-front-matter", "".join(_lines(VALID)[:10]), None, []),
    ("front-matter-is-a-list", "---\n- a\n- b\n---\nbody\n", None, []),
    ("empty-file", "", None, []),
]


def _repo(tmp_path: Path, program: str | None = None, *, commit: bool = True):
    env = isolated_env(tmp_path)
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", env=env)
    for rel, content in BASE_FILES.items():
        (repo / rel).write_text(content)
    (repo / "program.md").write_text(VALID.format(py=PY) if program is None else program)
    if commit:
        git(repo, "add", "-A", env=env)
        git(repo, "commit", "-q", "-m", "initial", env=env)
    return repo, env


def _cli(repo: Path, env: dict, *args: str):
    import subprocess
    return subprocess.run([PY, "-m", "autoloop", *args], cwd=repo, env=env, capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)


def _refused(repo: Path, env: dict, *args: str):
    """Run the CLI, check exit 2 / one line / no traceback / nothing changed; return stderr."""
    before = repo_state(repo, env) if (repo / ".git").exists() else None
    tree_before = sorted(p.relative_to(repo).as_posix() for p in repo.rglob("*"))
    res = _cli(repo, env, *args)
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr + res.stdout
    errs = error_lines(res.stderr)
    assert len(errs) == 1, res.stderr
    if before is not None:
        after = repo_state(repo, env)
        for key in before:
            assert before[key] == after[key], f"{key} changed"
    assert sorted(p.relative_to(repo).as_posix() for p in repo.rglob("*")) == tree_before
    cache = Path(env["XDG_CACHE_HOME"])
    assert not list(cache.rglob(".git")), "a worktree was created"
    return errs[0]


@pytest.mark.parametrize("name,text,line,words", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_bad_program_refused(tmp_path, name, text, line, words):
    repo, env = _repo(tmp_path, text)
    msg = _refused(repo, env, "run", "program.md", "--tag", "t1", "--cycles", "1")
    assert re.match(r"program\.md:\d+: ", msg), msg
    if line is not None:
        assert msg.startswith(f"program.md:{line}: "), msg
    for w in words:
        assert w in msg, msg


@pytest.mark.parametrize("name,text,line,words", PROGRAMS[:6], ids=[p[0] for p in PROGRAMS[:6]])
def test_bad_program_refused_by_verify(tmp_path, name, text, line, words):
    repo, env = _repo(tmp_path, text)
    msg = _refused(repo, env, "verify", "program.md")
    assert re.match(r"program\.md:\d+: ", msg), msg


def test_valid_program_is_accepted(tmp_path):
    """The baseline for the table above: the unedited program runs."""
    repo, env = _repo(tmp_path)
    res = _cli(repo, env, "run", "program.md", "--tag", "t1", "--cycles", "0")
    assert res.returncode == 0, res.stderr


CLI_CASES = [
    ("cycles-negative", ["run", "program.md", "--tag", "t1", "--cycles", "-1"]),
    ("cycles-not-a-number", ["run", "program.md", "--tag", "t1", "--cycles", "x"]),
    ("cycles-float", ["run", "program.md", "--tag", "t1", "--cycles", "1.5"]),
    ("missing-tag", ["run", "program.md", "--cycles", "1"]),
    ("empty-tag", ["run", "program.md", "--tag", "", "--cycles", "1"]),
    ("tag-with-space", ["run", "program.md", "--tag", "a b", "--cycles", "1"]),
    ("tag-with-dotdot", ["run", "program.md", "--tag", "../x", "--cycles", "1"]),
    ("tag-with-tilde", ["run", "program.md", "--tag", "x~1", "--cycles", "1"]),
    ("tag-with-colon", ["run", "program.md", "--tag", "a:b", "--cycles", "1"]),
    ("tag-ending-lock", ["run", "program.md", "--tag", "x.lock", "--cycles", "1"]),
    ("tag-with-slash-dot", ["run", "program.md", "--tag", "a/.b", "--cycles", "1"]),
    ("unknown-subcommand", ["frobnicate"]),
    ("no-subcommand", []),
    ("unknown-option", ["run", "program.md", "--tag", "t1", "--frob"]),
    ("missing-program-file", ["run", "nope.md", "--tag", "t1", "--cycles", "1"]),
    ("program-is-a-directory", ["run", ".git", "--tag", "t1", "--cycles", "1"]),
]


@pytest.mark.parametrize("name,args", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_bad_command_line_refused(tmp_path, name, args):
    repo, env = _repo(tmp_path)
    _refused(repo, env, *args)


def test_missing_default_program(tmp_path):
    repo, env = _repo(tmp_path)
    (repo / "program.md").unlink()
    git(repo, "commit", "-qam", "no program", env=env)
    _refused(repo, env, "run", "--tag", "t1")


def test_not_a_git_repository(tmp_path):
    env = isolated_env(tmp_path)
    d = tmp_path / "plain"
    d.mkdir()
    for rel, content in BASE_FILES.items():
        (d / rel).write_text(content)
    (d / "program.md").write_text(VALID.format(py=PY))
    env["GIT_CEILING_DIRECTORIES"] = str(tmp_path)
    _refused(d, env, "run", "program.md", "--tag", "t1", "--cycles", "1")
    assert not (d / ".git").exists()


def test_repository_without_commits(tmp_path):
    repo, env = _repo(tmp_path, commit=False)
    _refused(repo, env, "run", "program.md", "--tag", "t1", "--cycles", "1")


def test_existing_branch_not_made_by_autoloop(tmp_path):
    repo, env = _repo(tmp_path)
    git(repo, "branch", "autoloop/mine", env=env)
    msg = _refused(repo, env, "run", "program.md", "--tag", "mine", "--cycles", "1")
    assert "autoloop/mine" in msg


def test_merge_in_progress(tmp_path):
    repo, env = _repo(tmp_path)
    git(repo, "checkout", "-q", "-b", "side", env=env)
    (repo / "README.md").write_text("side\n")
    git(repo, "commit", "-qam", "side", env=env)
    git(repo, "checkout", "-q", "main", env=env)
    (repo / "README.md").write_text("main\n")
    git(repo, "commit", "-qam", "main", env=env)
    git(repo, "merge", "side", env=env, check=False)
    assert (repo / ".git" / "MERGE_HEAD").exists()
    _refused(repo, env, "run", "program.md", "--tag", "t1", "--cycles", "1")


def test_verifier_changed_since_run_began(tmp_path):
    p = make_project(tmp_path, {1: 'W("val.txt", "30")'})
    assert p.run("--cycles", "1").returncode == 0
    text = (p.repo / "program.md").read_text().replace("score.py", "score.py --fast")
    (p.repo / "program.md").write_text(text)
    git(p.repo, "commit", "-qam", "other verifier", env=p.env)
    before = repo_state(p.repo, p.env)
    res = p.run("--cycles", "1")
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr and len(error_lines(res.stderr)) == 1
    assert repo_state(p.repo, p.env) == before


def test_corrupt_ledger_middle_line(tmp_path):
    p = make_project(tmp_path, {"*": 'W("val.txt", str(40 - cycle))'})
    assert p.run("--cycles", "2").returncode == 0
    lines = p.ledger_path().read_bytes().split(b"\n")
    lines[1] = b'{"t": "cycle", broken'
    p.ledger_path().write_bytes(b"\n".join(lines))
    before = repo_state(p.repo, p.env)
    res = p.run("--cycles", "1")
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr and len(error_lines(res.stderr)) == 1
    assert repo_state(p.repo, p.env) == before


def test_run_branch_moved_by_user(tmp_path):
    p = make_project(tmp_path, {"*": 'W("val.txt", str(40 - cycle))'})
    assert p.run("--cycles", "1").returncode == 0
    git(p.repo, "update-ref", f"refs/heads/{p.branch()}", "main", env=p.env)
    before = repo_state(p.repo, p.env)
    res = p.run("--cycles", "1")
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr and len(error_lines(res.stderr)) == 1
    assert repo_state(p.repo, p.env) == before


def test_log_of_unknown_tag(tmp_path):
    repo, env = _repo(tmp_path)
    _refused(repo, env, "log", "program.md", "--tag", "nope")


def test_program_outside_repo_path_with_spaces_works(tmp_path):
    """Not an error: a repository path with spaces and a program in a subfolder are fine."""
    base = tmp_path / "with space"
    base.mkdir()
    repo, env = _repo(base)
    sub = repo / "exp"
    sub.mkdir()
    shutil.copy(repo / "program.md", sub / "program.md")
    git(repo, "add", "-A", env=env)
    git(repo, "commit", "-qm", "sub", env=env)
    res = _cli(sub, env, "run", "program.md", "--tag", "t1", "--cycles", "0")
    assert res.returncode == 0, res.stderr
    assert (sub / "results.tsv").exists()


@pytest.mark.parametrize("args", [["run", "program.md", "--tag", "t1"], ["run", "nope.md", "--tag", "t1"]],
                         ids=["bad-program", "missing-program"])
def test_refusal_is_cheap(tmp_path, args):
    """Bad input is refused at once: well under half a second of CPU (Python itself needs ~0.05 s)."""
    import resource
    repo, env = _repo(tmp_path, _edit(3, None))
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    res = _cli(repo, env, *args)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert res.returncode == 2, res.stderr
    cpu = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    assert cpu < 0.5, f"{cpu:.2f} s of CPU to refuse bad input"
