"""autoloop on a real two-node Ray cluster started on this machine (tests/ray_cluster.py): the
nodes' Python has Ray but not autoloop, and node n1 is 1.3x slower than n0 (NODE_SPEED in its
environment, read by the verifier). Every run of a comparison stays on one node; a node killed
under a measurement is measured again elsewhere, not blamed on the candidate; a cluster with no
node left stops the run cleanly (exit 4); token auth is refused in one line that says what to set."""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import time
from pathlib import Path

import pytest

from tests.scripts.e2e import PY, git, make_project

pytest.importorskip("ray")

from tests.ray_cluster import Cluster  # noqa: E402

pytestmark = pytest.mark.ray

# the value, times the node's speed, with 0.5% noise; how long each run takes on that node
SCORE = '''\
import os, random, time
v = float(open("val.txt").read())
print("node", os.environ.get("NODE_NAME", "?"))
time.sleep(float(os.environ.get("NODE_SLEEP", "0")))
print(f"score: {v * float(os.environ.get('NODE_SPEED', '1')) * (1 + random.gauss(0, 0.005)):.6f}")
'''
N0 = {"NODE_NAME": "n0", "NODE_SPEED": "1.0"}
N1 = {"NODE_NAME": "n1", "NODE_SPEED": "1.3", "RESOURCES": '{"bench": 1}'}
NOOPS_AND_A_GAIN = {1: 'W("notes.txt", "no-op 1")', 2: 'W("val.txt", "95")',
                    3: 'W("notes.txt", "no-op 3")', 4: 'W("notes.txt", "no-op 4")'}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Started from the home of a developer who has used Ray's token auth (a token in
    ~/.ray/auth_token, RAY_AUTH_MODE unset), which would turn token auth on for nodes that read
    it: the cluster and the runs must not depend on what that home holds."""
    home = tmp_path_factory.mktemp("developer-home")
    (home / ".ray").mkdir()
    (home / ".ray" / "auth_token").write_text(secrets.token_hex(16))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(home))
        mp.delenv("RAY_AUTH_MODE", raising=False)
        c = Cluster.start([N0, N1])
    yield c
    c.stop()


def _project(base: Path, address: str, extra: str = "", rule: str = "paired", plan=None):
    parallel = f"parallel:\n  workers: 2\n  executor: ray\n  address: {address}\n{extra}"
    accept = "accept:\n  rule: paired\n  pairs: 8\n  final_pairs: 6" if rule == "paired" else ""
    return make_project(base, NOOPS_AND_A_GAIN if plan is None else plan, verifier="{py} score.py",
                        guards=False, vtimeout=60, files={"score.py": SCORE, "val.txt": "100\n"},
                        extra=parallel + accept)


def _ledger(p) -> list[dict]:
    return [json.loads(x) for x in (p.repo / ".autoloop" / p.tag / "ledger.jsonl").read_text().splitlines()]


def _run_killing(p, cluster: Cluster, node: int, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """The run, with node `node`'s raylet killed while a cycle's verifier runs there."""
    proc = subprocess.Popen([PY, "-m", "autoloop", "run", "program.md", "--tag", p.tag, "--cycles", "4"],
                            cwd=p.repo, env=p.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ledger, name = p.repo / ".autoloop" / p.tag / "ledger.jsonl", f"NODE_NAME=n{node}".encode()
    deadline, killed = time.monotonic() + timeout, []
    while proc.poll() is None and not killed and time.monotonic() < deadline:
        if ledger.exists() and '"status":"baseline"' in ledger.read_text() and _verifier_on(name):
            killed = cluster.kill_raylet(node)
        time.sleep(0.05)
    out, err = proc.communicate(timeout=timeout)
    assert killed, f"no verifier ran on n{node} after the baseline: {err[-2000:]}"
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _verifier_on(name: bytes) -> bool:
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and b"score.py" in (entry / "cmdline").read_bytes() \
                    and name in (entry / "environ").read_bytes():
                return True
        except OSError:
            continue
    return False


def _runs_nodes(p, cycle: int) -> set[str]:
    """The NODE_NAME every verifier run of a cycle printed."""
    d = p.repo / ".autoloop" / p.tag / "logs" / f"cycle-{cycle:04d}"
    return {m for f in d.rglob("verifier.out") for m in re.findall(r"^node (\S+)$", f.read_text(), re.M)}


def test_every_pair_stays_on_one_node_of_a_mixed_cluster(cluster, tmp_path):
    p = _project(tmp_path, cluster.address)
    res = p.run("--cycles", "4", timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    cycles = {r["cycle"]: r for r in _ledger(p) if r["t"] == "cycle"}
    for n in range(5):   # one node per comparison (the calibration's pairs too)
        assert len(_runs_nodes(p, n)) == 1, (n, _runs_nodes(p, n))
    nodes = {}
    for n in range(5):   # the one the ledger names
        node = cycles[n].get("node") or cycles[n]["stats"]["node"]
        assert set(node) == {"ray_node", "host"}, node
        nodes[n] = node["ray_node"]
    assert len(set(nodes.values())) == 2, nodes            # and the rounds used both nodes
    # within-node pairs: the no-ops read as nothing, the 5% gain as 5%, whatever the node
    assert [cycles[n]["status"] for n in (1, 2, 3, 4)] == ["discard", "keep", "discard", "discard"], cycles
    for n in (1, 3, 4):
        assert abs(cycles[n]["delta_pct"]) < 2.0, cycles[n]
    assert abs(cycles[2]["delta_pct"] + 5.0) < 2.0, cycles[2]
    final = next(r for r in _ledger(p) if r["t"] == "final")
    assert "node" in final and abs(final["change_pct"] + 5.0) < 2.0, final
    assert f"verifying on Ray at {cluster.address}: 2 nodes, 2 CPUs, 0 GPUs, sandboxed on the nodes" in res.stderr
    start = next(r for r in _ledger(p) if r["t"] == "start")
    assert start["verifying"].startswith(f"verifying on Ray at {cluster.address}: 2 nodes"), start


def test_a_strict_run_measures_everything_on_its_baselines_node(cluster, tmp_path):
    """The strict rule compares with a stored number: only comparable on the node that made it."""
    p = _project(tmp_path, cluster.address, rule="strict")
    res = p.run("--cycles", "4", timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    cycles = {r["cycle"]: r for r in _ledger(p) if r["t"] == "cycle"}
    assert len({n for c in range(5) for n in _runs_nodes(p, c)}) == 1, cycles
    assert len({cycles[c]["node"]["ray_node"] for c in range(1, 5)}) == 1, cycles
    assert [cycles[n]["status"] for n in (1, 2, 3, 4)].count("keep") >= 1


def test_a_resumed_strict_run_goes_on_where_its_numbers_were_measured(cluster, tmp_path):
    """Resumed, a strict run measures on the baseline's node again; a ledger whose node is no
    longer in the cluster stops the resume (exit 4) instead of comparing across machines."""
    p = _project(tmp_path, cluster.address, rule="strict")
    assert p.run("--cycles", "1", timeout=600).returncode == 0
    assert p.run("--cycles", "2", timeout=600).returncode == 0
    cycles = {r["cycle"]: r for r in _ledger(p) if r["t"] == "cycle"}
    assert sorted(cycles) == [0, 1, 2, 3]
    home = cycles[0]["stats"]["node"]
    assert {cycles[c]["node"]["ray_node"] for c in (1, 2, 3)} == {home["ray_node"]}, cycles
    assert len({n for c in range(4) for n in _runs_nodes(p, c)}) == 1
    ledger = p.repo / ".autoloop" / p.tag / "ledger.jsonl"
    gone = ledger.read_text().replace(home["ray_node"], "f" * len(home["ray_node"])) \
        .replace(f'"host":"{home["host"]}"', '"host":"gone.example"')
    ledger.write_text(gone)
    res = p.run("--cycles", "1", timeout=600)
    assert res.returncode == 4, res.stderr[-3000:]
    said = [ln for ln in res.stderr.splitlines() if ln.startswith("autoloop: ")]
    assert len(said) == 1 and "gone.example (ffffffffffff)" in said[0] and "new --tag" in said[0], res.stderr
    assert [r["cycle"] for r in _ledger(p) if r["t"] == "cycle"] == [0, 1, 2, 3]


def test_doctor_reports_each_node_against_the_driver(cluster, tmp_path):
    import platform

    import ray

    p = _project(tmp_path, cluster.address, rule="strict")
    res = p.cli("doctor", "program.md", timeout=300)
    lines = res.stdout.splitlines()
    assert any(ln.startswith("ok    ray ") and f"verifying on Ray at {cluster.address}: 2 nodes" in ln
               for ln in lines), res.stdout + res.stderr
    nodes = [ln for ln in lines if ln.startswith("ok    ray node ")]
    assert len(nodes) == 2, res.stdout
    for ln in nodes:
        assert f"Ray {ray.__version__}, Python {platform.python_version()}, bubblewrap makes a sandbox there" in ln
    assert not (p.repo / ".autoloop").exists()      # doctor writes nothing in the checkout


def test_no_node_left_to_measure_stops_the_run_cleanly(cluster, tmp_path):
    """Only n1 has the `bench` resource the run asks for: once its raylet is killed no node can
    measure, and the run stops as an interruption does, with exit 4; nothing is blamed."""
    p = _project(tmp_path, cluster.address, extra="  resources: {bench: 1}\n")
    start = git(p.repo, "rev-parse", "HEAD", env=p.env)
    res = _run_killing(p, cluster, 1)
    assert res.returncode == 4, res.stderr[-3000:]
    said = [ln for ln in res.stderr.splitlines() if ln.startswith("autoloop: stopped:")]
    assert len(said) == 1 and "no node of the Ray cluster is left that can measure" in said[0], res.stderr
    recs = _ledger(p)
    assert not [r for r in recs if r["t"] == "cycle" and r["status"] == "crash"], recs
    assert not [r for r in recs if r["t"] == "node_lost"]     # nothing is measured again
    assert recs[-1]["t"] == "end" and recs[-1]["reason"].startswith("no Ray node can measure"), recs[-1]
    assert "lost: " in recs[-1]["reason"] and "measuring again" not in res.stderr, recs[-1]
    # the branch at its last keep (the start here: round 1 was undone), the checkout untouched
    assert git(p.repo, "rev-parse", "HEAD", env=p.env) == start
    assert git(p.repo, "status", "--porcelain", env=p.env) == ""
    assert "Raylet is terminated" not in res.stdout + res.stderr
    cluster.restart(1, N1)
    cluster.wait_nodes(2)


def test_a_node_killed_mid_run_is_not_the_candidates_fault(cluster, tmp_path):
    p = _project(tmp_path, cluster.address)
    res = _run_killing(p, cluster, 1)
    assert res.returncode == 0, res.stderr[-3000:]
    recs = _ledger(p)
    cycles = [r for r in recs if r["t"] == "cycle"]
    assert sorted(r["cycle"] for r in cycles) == [0, 1, 2, 3, 4]          # every cycle once
    assert [r["status"] for r in sorted(cycles, key=lambda r: r["cycle"])] == \
        ["baseline", "discard", "keep", "discard", "discard"], cycles
    lost = [r for r in recs if r["t"] == "node_lost"]
    assert len(lost) == 1 and lost[0]["during"].startswith("cycle "), lost
    about = [ln for ln in (res.stdout + res.stderr).splitlines() if "Ray node" in ln]
    assert len(about) == 1 and about[0].endswith("; measuring again"), about
    assert lost[0]["ray_node"][:12] in about[0]
    # Ray's dump of the dead raylet (its last log lines) went to the run's Ray log, not between
    # the table's rows
    stray = [ln for ln in res.stderr.splitlines() if ln.strip() and not ln.startswith("autoloop: ")]
    assert not stray, stray                                    # no line of Ray's own
    dump = "Raylet is terminated"
    assert dump not in res.stdout + res.stderr and "state-dump" not in res.stdout + res.stderr
    assert dump in (p.repo / ".autoloop" / p.tag / "ray.log").read_text()
    # the re-measured cycle's runs all came from the node that survived
    again = int(lost[0]["during"].split()[1].rstrip("'s"))
    assert _runs_nodes(p, again) == {"n0"}


def test_token_auth_is_refused_in_one_line_that_says_what_to_set(tmp_path):
    token = secrets.token_hex(16)
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
    c = Cluster.start([{**N0, **auth}])
    try:
        p = _project(tmp_path / "without", c.address, rule="strict", plan={1: 'W("val.txt", "95")'})
        t0 = time.monotonic()
        res = p.run("--cycles", "1", timeout=300)
        took = time.monotonic() - t0
        assert res.returncode == 2, res.stderr[-3000:]
        lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1, res.stderr
        assert "cannot start or reach Ray" in lines[0] and "RAY_AUTH_MODE=token" in lines[0], lines
        assert "RAY_AUTH_TOKEN" in lines[0]
        assert took < 20, took      # Ray alone retried for 20 s
        print(f"\ntoken refusal: exit 2 after {took:.1f} s")
        p = _project(tmp_path / "with", c.address, rule="strict", plan={1: 'W("val.txt", "95")'})
        p.env.update(auth)
        res = p.run("--cycles", "1", timeout=300)
        assert res.returncode == 0, res.stderr[-3000:]
        assert p.statuses() == {0: "baseline", 1: "keep"}
    finally:
        c.stop()
