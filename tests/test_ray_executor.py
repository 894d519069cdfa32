"""The Ray executor against a local Ray instance started by the run itself (`executor: ray`
without an address): candidates are shipped as their commit's files and verified in a temporary
folder on the Ray worker, never in the run's worktrees; the ratchet decides as with `local`."""

from __future__ import annotations

import pytest

from tests.scripts.e2e import git, make_project

pytest.importorskip("ray")

pytestmark = pytest.mark.ray

RSCORE = '''\
import os, sys
v = open("val.txt").read().strip()
print("cwd", os.getcwd())
print("worker", os.environ.get("AUTOLOOP_WORKER", "-"), os.environ.get("SLOT", "-"))
if v == "exit":
    sys.exit(3)
print(f"score: {v}")
'''


@pytest.fixture(scope="module")
def ray_run(tmp_path_factory):
    plan = {
        1: 'W("notes.txt", "FAIL")',                 # guard fails (on the Ray worker)
        2: 'W("val.txt", "38")',
        3: 'W("val.txt", "exit")',                   # verifier exits 3: crash
        4: 'W("val.txt", "37")',
    }
    extra = "parallel:\n  workers: 2\n  executor: ray\n  env:\n    - {SLOT: a}\n    - {SLOT: b}"
    p = make_project(tmp_path_factory.mktemp("ray"), plan, verifier="{py} rscore.py", vtimeout=120,
                     files={"rscore.py": RSCORE}, extra=extra)
    start = git(p.repo, "rev-parse", "HEAD", env=p.env)
    res = p.run("--cycles", "4", timeout=300)
    return p, start, res


def _log(p, cycle: int, name: str = "verifier.out") -> str:
    return (p.repo / ".autoloop" / p.tag / "logs" / f"cycle-{cycle:04d}" / name).read_text()


def test_ray_run_succeeds(ray_run):
    p, _, res = ray_run
    assert res.returncode == 0, res.stderr[-3000:]


def test_ray_statuses_as_local(ray_run):
    p, start, _ = ray_run
    assert p.statuses() == {0: "baseline", 1: "guard_fail", 2: "keep", 3: "crash", 4: "keep"}
    assert p.show(p.branch(), "val.txt").strip() == b"37"
    assert len(p.branch_commits(start)) == 2


def test_ray_verifies_in_a_shipped_copy(ray_run):
    """Baseline and candidates ran in a temp folder unpacked from the commit, not in a worktree."""
    p, _, _ = ray_run
    cache = p.env["XDG_CACHE_HOME"]
    for cycle in (0, 2, 4):
        out = _log(p, cycle)
        cwd = out.splitlines()[0].split(" ", 1)[1]
        assert "autoloop-verify-" in cwd and not cwd.startswith((cache, str(p.repo))), cwd
        assert "ran on" in _log(p, cycle, "verifier.err")
    rows = {int(r["cycle"]): r for r in p.rows()}
    assert "notes" in rows[1]["lesson"] and "exit 3" in rows[3]["lesson"]


def test_ray_worker_hints_reach_the_remote_verifier(ray_run):
    p, _, _ = ray_run
    assert _log(p, 3).splitlines()[1] == "worker 0 a"
    assert _log(p, 4).splitlines()[1] == "worker 1 b"
