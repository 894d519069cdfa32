"""Contract §11: no step of a measurement reaches the next. A guard leaves files in the tree
(untracked and ignored), in $TMPDIR, and writes down the $AUTOLOOP_SEED it got in a folder the
program declares writable (what survives by the user's word); the verifier counts what it finds
of them, and whether its seed is the guard's. `autoloop verify` and a run's own measurement
(its baseline) must both see none of it, sandboxed and not."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.scripts.e2e import PY, git, isolated_env

GUARD = '''\
import os, sys
shared = sys.argv[1]
open(os.path.join(shared, "guard-seed"), "w").write(os.environ["AUTOLOOP_SEED"])
open("left.txt", "w").write("an untracked file")
os.makedirs("build", exist_ok=True)
open("build/answers.bin", "w").write("an ignored file")
open(os.path.join(os.environ["TMPDIR"], "answers"), "w").write("a temp file")
open("lib.py", "a").close()   # read, not changed: tracked files stay as committed
'''
CHECK = '''\
import os, sys
shared = sys.argv[1]
found = [p for p in ("left.txt", "build/answers.bin", os.path.join(os.environ["TMPDIR"], "answers"))
         if os.path.exists(p)]
guard_seed = open(os.path.join(shared, "guard-seed")).read()
if guard_seed == os.environ["AUTOLOOP_SEED"]:
    found.append("the guard's seed")
print("found:", found)
print(f"leaked: {len(found)}")
'''


def _project(tmp_path: Path, sandbox: str) -> tuple[Path, dict[str, str]]:
    env = isolated_env(tmp_path)
    shared = tmp_path / "shared"
    shared.mkdir()
    repo = tmp_path / "repo"
    repo.mkdir()
    files = {
        "lib.py": "X = 1\n", "guard.py": GUARD, "check.py": CHECK, ".gitignore": "build/\n",
        "program.md": (f"---\ngoal: nothing leaks between steps\nallowed: [lib.py]\n"
                       f"verifier:\n  command: {PY} check.py {shared}\n  metric: leaked\n  direction: minimize\n"
                       f"guards:\n  - {PY} guard.py {shared}\n"
                       f"generator: {{kind: command, command: \"true\"}}\n"
                       f"sandbox:\n  kind: {sandbox}\n  writable: [{shared}]\n---\nNothing.\n"),
    }
    git(repo, "init", "-q", env=env)
    for rel, text in files.items():
        (repo / rel).write_text(text)
    git(repo, "add", "-A", env=env)
    git(repo, "commit", "-q", "-m", "start", env=env)
    return repo, env


def _sandboxes() -> list[str]:
    return ["none", "bwrap"] if shutil.which("bwrap") else ["none"]


@pytest.mark.parametrize("sandbox", _sandboxes())
def test_verify_starts_the_verifier_from_the_commit_with_a_seed_of_its_own(tmp_path: Path, sandbox: str) -> None:
    import subprocess

    repo, env = _project(tmp_path, sandbox)
    res = subprocess.run([PY, "-m", "autoloop", "verify"], cwd=repo, env=env, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "leaked: 0" in res.stdout, res.stdout + res.stderr


@pytest.mark.parametrize("sandbox", _sandboxes())
def test_a_runs_measurement_starts_the_verifier_from_the_commit(tmp_path: Path, sandbox: str) -> None:
    import subprocess

    repo, env = _project(tmp_path, sandbox)
    res = subprocess.run([PY, "-m", "autoloop", "run", "--tag", "t", "--cycles", "1"], cwd=repo, env=env,
                         capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    rows = (repo / "results.tsv").read_text().splitlines()
    baseline = dict(zip(rows[0].split("\t"), rows[1].split("\t")))
    assert baseline["status"] == "baseline" and float(baseline["metric"]) == 0.0, out
