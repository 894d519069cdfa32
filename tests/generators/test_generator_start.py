"""A generator that cannot start stops the run with exit 1 before the baseline (or, when that
only shows in a cycle — exit 126/127 — at that cycle), naming the program and the fix; it never
loops `gen_error` to `max_cycles` and exit 0."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import git, run_cli

PY = sys.executable
SCORE = 'print(f"score: {open(\'val.txt\').read().strip()}")\n'


def _repo(make_repo, generator: str, sandbox: str = "none") -> Path:  # type: ignore[no-untyped-def]
    repo = make_repo({
        "val.txt": "5\n", "score.py": SCORE,
        ".gitignore": "program.md\nexperiments.md\nresults.tsv\n.autoloop/\n",
    })
    (repo / "program.md").write_text(
        "---\ngoal: Lower the score\nallowed: [val.txt]\n"
        f"verifier: {{command: {PY} score.py, metric: score, direction: minimize}}\n"
        f"{generator}\nsandbox: {sandbox}\n---\nLower it.\n")
    return repo


def _nothing_measured(repo: Path) -> None:
    results = repo / "results.tsv"
    assert not results.exists() or len(results.read_text().splitlines()) <= 1
    assert git(repo, "branch", "--list", "autoloop/*") == ""


def _empty_path(tmp_path: Path) -> str:
    # Only what a shell and git need: no claude, codex or aider anywhere on it.
    d = tmp_path / "bin"
    d.mkdir()
    for tool in ("sh", "git", "env"):
        found = shutil.which(tool)
        assert found
        (d / tool).symlink_to(found)
    return str(d)


def test_missing_command_program_stops_before_the_baseline(make_repo, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    repo = _repo(make_repo, "generator: {kind: command, command: claude -p --verbose}")
    res = run_cli("run", "--tag", "t", "--cycles", "3", cwd=repo, env={"PATH": _empty_path(tmp_path)})
    assert res.returncode == 1, res.stdout + res.stderr
    assert "claude not found on PATH" in res.stderr and "install it" in res.stderr
    assert "Traceback" not in res.stderr
    _nothing_measured(repo)


@pytest.mark.parametrize("kind", ["claude", "codex", "aider"])
def test_missing_agent_stops_before_the_baseline(make_repo, tmp_path: Path, kind: str) -> None:  # type: ignore[no-untyped-def]
    repo = _repo(make_repo, f"generator: {{kind: {kind}}}")
    res = run_cli("run", "--tag", "t", "--cycles", "3", cwd=repo, env={"PATH": _empty_path(tmp_path)})
    assert res.returncode == 1, res.stdout + res.stderr
    assert f"{kind} not found on PATH" in res.stderr
    _nothing_measured(repo)


def test_not_executable_program_stops_before_the_baseline(make_repo) -> None:  # type: ignore[no-untyped-def]
    repo = _repo(make_repo, "generator: {kind: command, command: ./gen.sh}")
    (repo / "gen.sh").write_text("#!/bin/sh\necho 4 > val.txt\n")   # not chmod +x
    res = run_cli("run", "--tag", "t", "--cycles", "3", cwd=repo)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "gen.sh is not an executable file" in res.stderr
    _nothing_measured(repo)


def test_command_not_found_in_a_cycle_stops_the_run(make_repo) -> None:  # type: ignore[no-untyped-def]
    # The first word is a shell, found; what it runs is not (exit 127): no later cycle can work.
    repo = _repo(make_repo, "generator: {kind: command, command: sh -c 'no-such-agent-xyz --go'}")
    res = run_cli("run", "--tag", "t", "--cycles", "5", cwd=repo)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "command not found (exit 127)" in res.stderr
    statuses = [ln.split("\t")[3] for ln in (repo / "results.tsv").read_text().splitlines()[1:]]
    assert statuses == ["baseline"]     # the failed cycle stops the run; nothing looped to 5


def _bwrap_works() -> bool:
    if not shutil.which("bwrap"):
        return False
    return subprocess.run(["bwrap", "--ro-bind", "/", "/", "--", "/bin/true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _bwrap_works(), reason="bubblewrap missing or unable to make a sandbox here")
def test_agent_that_cannot_start_inside_the_sandbox_stops_before_the_baseline(make_repo, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # A fake: a CLI that must write its home to start — the home, under /tmp here, is not
    # there inside the sandbox. Outside the sandbox the same program starts.
    fake = tmp_path / "tools" / "claude"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\n[ -w "$HOME" ] || { echo "cannot write $HOME" >&2; exit 3; }\necho 9.9.9\n')
    fake.chmod(0o755)
    repo = _repo(make_repo, f"generator: {{kind: claude, command: {fake}}}", sandbox="bwrap")
    res = run_cli("run", "--tag", "t", "--cycles", "3", cwd=repo)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "cannot start inside the sandbox" in res.stderr and "cannot write" in res.stderr
    assert "sandbox: none" in res.stderr    # the fix is named
    _nothing_measured(repo)
    assert subprocess.run([str(fake)], capture_output=True, env=dict(os.environ)).returncode == 0


@pytest.mark.parametrize("command", ["./gen.sh", "cd . && ./gen.sh", "exec ./gen.sh", "X=1 ./gen.sh"])
def test_commands_the_preflight_cannot_or_need_not_resolve_still_run(make_repo, command: str) -> None:  # type: ignore[no-untyped-def]
    # A work-tree script, shell builtins, assignments: only the shell knows what they run, so
    # the preflight lets them through (a real failure is then exit 127 in the first cycle).
    repo = _repo(make_repo, f"generator: {{kind: command, command: {command!r}}}")
    (repo / "gen.sh").write_text("#!/bin/sh\necho 4 > val.txt\necho 'Hypothesis: four is less'\n")
    (repo / "gen.sh").chmod(0o755)
    git(repo, "add", "gen.sh")
    git(repo, "commit", "-qm", "generator")
    res = run_cli("run", "--tag", "t", "--cycles", "1", cwd=repo)
    assert res.returncode == 0, res.stdout + res.stderr
    statuses = [ln.split("\t")[3] for ln in (repo / "results.tsv").read_text().splitlines()[1:]]
    assert statuses == ["baseline", "keep"]


def test_missing_generator_script_stops_before_the_baseline(make_repo) -> None:  # type: ignore[no-untyped-def]
    # python3 is there; the script it is told to run is not: every cycle would be exit 2.
    repo = _repo(make_repo, "generator: {kind: command, command: python3 -u agents/gen.py --fast}")
    res = run_cli("run", "--tag", "t", "--cycles", "3", cwd=repo)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "generator.command: agents/gen.py does not exist" in res.stderr
    _nothing_measured(repo)
