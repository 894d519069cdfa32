"""The Ray executor against a local Ray instance started by the run itself (`executor: ray`
without an address): candidates are shipped as their commit's files and verified in a temporary
folder on the Ray worker, never in the run's worktrees, in a sandbox made there; the ratchet
decides as with `local`."""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path

import pytest

from tests.scripts.e2e import git, make_project

pytest.importorskip("ray")

pytestmark = pytest.mark.ray

# what every run prints first (its folder, its worker hints), then the sandbox probes: it plants
# files in $HOME, beside the repository and in /tmp (each measurement says which it finds), and
# connects to a listener of ours on the loopback
RSCORE = '''\
import os, socket, sys
v = open("val.txt").read().strip()
print("cwd", os.getcwd())
print("worker", os.environ.get("AUTOLOOP_WORKER", "-"), os.environ.get("SLOT", "-"))
if v == "exit":
    sys.exit(3)
for target in {targets!r}:
    print("found" if os.path.exists(target) else "fresh", target)
    try:
        with open(target, "w") as f:
            f.write("planted")
    except OSError:
        pass
try:
    socket.create_connection(("127.0.0.1", {port}), 5).close()
    print("network open")
except OSError:
    print("network closed")
print(f"score: {{v}}")
'''


@pytest.fixture(scope="module")
def ray_run(tmp_path_factory):
    """One run (one private Ray instance) that the statuses, the shipped copy, the worker hints
    and the sandbox on the node are all judged on."""
    plan = {
        1: 'W("notes.txt", "FAIL")',                 # guard fails (on the Ray worker)
        2: 'W("val.txt", "38")',
        3: 'W("val.txt", "exit")',                   # verifier exits 3: crash
        4: 'W("val.txt", "37")',
    }
    extra = "parallel:\n  workers: 2\n  executor: ray\n  env:\n    - {SLOT: a}\n    - {SLOT: b}"
    base = tmp_path_factory.mktemp("ray")
    targets = [str(base / "home" / "planted"), str(base / "beside-repo"), f"/tmp/autoloop-rayjail-{uuid.uuid4().hex}"]
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        script = RSCORE.format(targets=targets, port=listener.getsockname()[1])
        p = make_project(base, plan, verifier="{py} rscore.py", vtimeout=120, files={"rscore.py": script},
                         extra=extra)
        start = git(p.repo, "rev-parse", "HEAD", env=p.env)
        res = p.run("--cycles", "4", timeout=300)
    yield p, start, res, targets
    Path(targets[-1]).unlink(missing_ok=True)


def _log(p, cycle: int, name: str = "verifier.out") -> str:
    return (p.repo / ".autoloop" / p.tag / "logs" / f"cycle-{cycle:04d}" / name).read_text()


def test_ray_run_succeeds(ray_run):
    p, _, res, _ = ray_run
    assert res.returncode == 0, res.stderr[-3000:]


def test_ray_statuses_as_local(ray_run):
    p, start, _, _ = ray_run
    assert p.statuses() == {0: "baseline", 1: "guard_fail", 2: "keep", 3: "crash", 4: "keep"}
    assert p.show(p.branch(), "val.txt").strip() == b"37"
    assert len(p.branch_commits(start)) == 2


def test_ray_verifies_in_a_shipped_copy(ray_run):
    """Baseline and candidates ran in a temp folder unpacked from the commit, not in a worktree;
    on a local instance that folder is shown at the checkout's path, where the command runs."""
    p, start, _, _ = ray_run
    for cycle in (0, 2, 4):
        out = _log(p, cycle)
        assert out.splitlines()[0] == f"cwd {p.repo}", out
        assert "ran on" in _log(p, cycle, "verifier.err")
    rows = {int(r["cycle"]): r for r in p.rows()}
    assert "notes" in rows[1]["lesson"] and "exit 3" in rows[3]["lesson"]
    # what was measured there is each candidate, not the checkout (still at the start)
    assert [rows[c]["metric"] for c in (2, 4)] == ["38", "37"]
    assert git(p.repo, "rev-parse", "HEAD", env=p.env) == start
    assert (p.repo / "val.txt").read_text() == p.show(start, "val.txt").decode()


def test_ray_worker_hints_reach_the_remote_verifier(ray_run):
    p, _, _, _ = ray_run
    assert _log(p, 3).splitlines()[1] == "worker 0 a"
    assert _log(p, 4).splitlines()[1] == "worker 1 b"


# ---- the sandbox on the node ------------------------------------------------------------------

def test_a_verifier_on_ray_writes_nothing_outside_its_tree(ray_run):
    p, _, res, targets = ray_run
    assert res.returncode == 0, res.stderr[-3000:]
    assert not [t for t in targets if os.path.exists(t)]
    assert "not sandboxed" not in res.stderr + p.experiments()


def test_what_a_verifier_on_ray_planted_is_not_there_for_the_next(ray_run):
    p, _, _, targets = ray_run
    for cycle in (0, 2, 4):   # the baseline planted them all first (cycle 1's guard failed, 3 exited)
        out = _log(p, cycle)
        assert all(f"fresh {t}" in out for t in targets), out


def test_a_verifier_on_ray_has_no_network_unless_asked_for(ray_run):
    p, _, _, _ = ray_run
    for cycle in (0, 2, 4):
        assert "network closed" in _log(p, cycle), _log(p, cycle)


PLANTS_ON_PATH = """\
v = open("val.txt").read().strip()
if v == "38":
    open({target!r}, "w").write("#!/bin/sh\\necho 'score: -1000'\\n")
print(f"score: {{v}}")
"""


def _without_bwrap(tmp_path, kind: str):
    """A run whose cycles' measurements find no bwrap on the node: the worker's env hint gives
    them a PATH without it (the baseline gets no hint). Cycle 1's verifier plants a `python3` in
    a folder on autoloop's PATH."""
    nobin, onpath = tmp_path / "nobin", tmp_path / "onpath"
    nobin.mkdir()
    onpath.mkdir()
    sandbox = f"sandbox:\n  kind: {kind}\n  writable: [{tmp_path / 'records'}, {tmp_path / 'out'}]"
    p = make_project(tmp_path, {1: 'W("val.txt", "38")'}, verifier="{py} plant.py", guards=False, vtimeout=120,
                     files={"plant.py": PLANTS_ON_PATH.format(target=str(onpath / "python3"))},
                     extra=f"parallel:\n  executor: ray\n  env:\n    - {{PATH: {nobin}}}\n{sandbox}")
    p.env["PATH"] = f"{onpath}:{p.env['PATH']}"
    return p, p.run("--cycles", "1", timeout=300)


def test_auto_on_a_node_without_bwrap_says_not_sandboxed_everywhere(tmp_path):
    p, res = _without_bwrap(tmp_path, "auto")
    assert res.returncode == 0, res.stderr[-3000:]
    why = "not sandboxed: on the Ray node "
    assert why in res.stderr and "bwrap is not installed" in res.stderr, res.stderr
    assert f"**Warning:** {why}" in p.experiments()
    log = p.cli("log", "program.md", "--tag", p.tag)
    assert why in log.stdout, log.stdout
    report = p.cli("report", "program.md", "--tag", p.tag, "--format", "markdown", "-o", "-")
    assert why in report.stdout, report.stdout + report.stderr
    # unsandboxed measurements could write outside their tree: the walks that catch it ran
    row = {int(r["cycle"]): r for r in p.rows()}[1]
    assert row["status"] == "violation" and "a folder on PATH" in row["lesson"], row


def test_bwrap_on_a_node_without_it_is_a_crash_not_an_unsandboxed_run(tmp_path):
    p, res = _without_bwrap(tmp_path, "bwrap")
    assert "not sandboxed" not in res.stderr + p.experiments()
    assert p.statuses() == {0: "baseline", 1: "crash"}
    lesson = {int(r["cycle"]): r for r in p.rows()}[1]["lesson"]
    assert "cannot make the sandbox" in lesson and "bwrap is not installed" in lesson, lesson
    assert not (tmp_path / "onpath" / "python3").exists()
