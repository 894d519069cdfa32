"""`verifier.score` and `private` on a real two-node Ray cluster (tests/ray_cluster.py: nodes
whose Python has Ray but not autoloop): the command produces on a node (its `data:` shipped
there), its $AUTOLOOP_OUTPUT comes back, the score runs on the driver with the private labels.
One run of few cycles is the reward-hack suite on Ray: reading the labels, printing the metric, writing outputs after the
measurement ended and a link to the labels are never kept, a no-op is not kept, a real gain is;
and the labels' content is in none of the cluster's folders (temp, session, spill)."""

from __future__ import annotations

import json
import secrets
import subprocess
import time
from pathlib import Path

import pytest

from tests.scripts.e2e import PY, make_project
from tests.isolation.test_sandbox import PROBLEM

pytest.importorskip("ray")

from tests.ray_cluster import Cluster  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.skipif(PROBLEM is not None, reason=PROBLEM or "")]

TOKEN = secrets.token_hex(16)   # in the labels file only: found anywhere else, the labels leaked
MODEL_PY = "def predict(x):\n    return 0\n"
PRODUCE_PY = '''\
import os, sys
from pathlib import Path
import model
try:
    open(sys.argv[1]).read()
    seen = "read"
except OSError as exc:
    seen = type(exc).__name__
Path(sys.argv[2], "command-private.txt").write_text(seen)
out = Path(os.environ["AUTOLOOP_OUTPUT"])
n = int(Path("inputs", "n.txt").read_text())   # from `data:`, shipped to the node
out.joinpath("preds.txt").write_text("\\n".join(str(model.predict(x)) for x in range(n)))
print("acc: 0.0")   # never read: the metric is the score's
'''
SCORE_PY = '''\
import os, sys
from pathlib import Path
preds = [int(v) for v in Path(os.environ["AUTOLOOP_OUTPUT"], "preds.txt").read_text().split()]
labels = [int(v) for v in open(sys.argv[1]).read().split()[1:]]
print(f"acc: {sum(p == y for p, y in zip(preds, labels)) / len(labels):.4f}")
'''
LABELS = TOKEN + " " + " ".join(str(int(x % 3 == 0)) for x in range(20))   # predicting 0 scores 0.65
# what the candidate's own code tries, each in one cycle
LATE = ("import os, subprocess, sys\n"
        "subprocess.Popen([sys.executable, '-c', 'import os, time; time.sleep(1.5); "
        "open(os.path.join(os.environ[\\\"AUTOLOOP_OUTPUT\\\"], \\\"preds.txt\\\"), \\\"w\\\").write("
        "\\\"\\\\n\\\".join(str(int(x % 3 == 0)) for x in range(20)))'], start_new_session=True)\n"
        "def predict(x):\n    return 0\n")
READS = ("import sys\ntry:\n    _L = [int(v) for v in open(sys.argv[1]).read().split()[1:]]\n"
         "except OSError:\n    _L = None\nprint('acc: 1.0')\n"
         "def predict(x):\n    return _L[x] if _L else 0\n")
SWAP = ("import atexit, os, sys\ndef _swap():\n    p = os.path.join(os.environ['AUTOLOOP_OUTPUT'], 'preds.txt')\n"
        "    os.remove(p)\n    os.symlink(sys.argv[1], p)\natexit.register(_swap)\n"
        "def predict(x):\n    return 0\n")
PLAN = {
    1: f'W("model.py", {READS!r})',                                    # reads the labels, prints its metric
    2: 'W("notes.txt", "a no-op")',
    3: f'W("model.py", {LATE!r})',                                     # the right answers, written late
    4: f'W("model.py", {SWAP!r})',                                     # the predictions a link to the labels
    5: 'W("model.py", "def predict(x):\\n    return int(x % 6 == 0)\\n")',   # a real gain: 0.85
}


@pytest.fixture(scope="module")
def cluster():
    c = Cluster.start([{"NODE_NAME": "n0"}, {"NODE_NAME": "n1"}])
    yield c
    c.stop()


def _sealed_project(base, address: str, plan, produce: str = PRODUCE_PY, extra: str = "", accept: str = ""):
    private = base / "private"
    private.mkdir()
    labels = private / "labels.txt"
    labels.write_text(LABELS)
    out = base / "out"
    (base / "inputs").mkdir()
    (base / "inputs" / "n.txt").write_text("20\n")
    extra = (f"private: [{private}]\nsandbox: {{writable: [{base / 'records'}, {out}]}}\n"
             f"data: [{{path: {base / 'inputs'}, as: inputs}}]\n"
             f"parallel: {{executor: ray, address: {address}{extra}}}\n{accept}")
    p = make_project(base, plan, guards=False, metric="acc", direction="maximize", allowed="[model.py, notes.txt]",
                     files={"model.py": MODEL_PY, "produce.py": produce, "score.py": SCORE_PY},
                     verifier=f"{PY} produce.py {labels} {out}\n  score: {PY} score.py {labels}", extra=extra)
    return p, labels, out


def _leaks(c: Cluster, labels) -> list[str]:
    files = [f for f in c.root.rglob("*") if f.is_file() and not f.is_symlink()]
    # not vacuous: the nodes' logs, session and runtime-env folders were all searched
    assert len(files) > 50 and any("session_" in str(f) for f in files) and _holds(labels, TOKEN)
    return [str(f) for f in files if _holds(f, TOKEN)]


@pytest.fixture(scope="module")
def sealed(cluster, tmp_path_factory):
    p, labels, out = _sealed_project(tmp_path_factory.mktemp("sealed-ray"), cluster.address, PLAN)
    doctor = p.cli("doctor", "program.md", timeout=300)
    res = p.run("--cycles", str(len(PLAN)), timeout=900)
    return p, res, out, doctor, _leaks(cluster, labels)


def _holds(path, token: str) -> bool:
    try:
        with open(path, "rb") as f:
            while block := f.read(1 << 20):
                if token.encode() in block:
                    return True
    except OSError:
        pass
    return False


def test_only_the_real_gain_is_kept(sealed):
    p, res, _, _, _ = sealed
    assert res.returncode == 0, res.stdout + res.stderr
    rows = {int(r["cycle"]): r for r in p.rows()}
    assert float(rows[0]["metric"]) == pytest.approx(0.65)
    for cycle in (1, 2, 3):
        assert rows[cycle]["status"] != "keep", rows[cycle]
        assert rows[cycle]["metric"] in ("", None) or float(rows[cycle]["metric"]) == pytest.approx(0.65), rows[cycle]
    assert rows[4]["status"] == "crash", rows[4]
    assert rows[5]["status"] == "keep", rows[5]
    assert float(rows[5]["metric"]) == pytest.approx(0.85)
    assert "$AUTOLOOP_OUTPUT holds preds.txt, not a regular file or folder" in p.experiments()
    # the command ran on a node, its score here (its log beside the command's)
    logs = p.repo / ".autoloop" / p.tag / "logs" / "cycle-0005"
    assert "(Ray node " in (logs / "verifier.err").read_text()
    assert (logs / "score.out").read_text().strip() == "acc: 0.8500"


def test_the_labels_stay_on_the_driver(sealed):
    p, _, out, _, leaks = sealed
    # the candidate's code on a node (here on this machine's file system): hidden by its sandbox
    assert (out / "command-private.txt").read_text() in ("PermissionError", "FileNotFoundError")
    assert leaks == [], leaks
    for f in (p.repo / ".autoloop").rglob("*"):
        assert not f.is_file() or not _holds(f, TOKEN), f


def test_doctor_says_where_each_step_runs(sealed):
    _, _, _, doctor, _ = sealed
    assert "produce on the nodes (sandboxed there), score here (private: 1 path)" in doctor.stdout, doctor.stdout


def test_a_node_lost_under_the_command_is_measured_again_elsewhere(cluster, tmp_path):
    """n1's raylet killed while a cycle's command runs there (after the baseline): that
    measurement runs again, whole, on n0; its score still runs here; no label reaches a node."""
    slow = PRODUCE_PY.replace('print("acc: 0.0")', CANDIDATE_SLOW_ON_N1.format(start=MODEL_PY + "ok\n"))
    p, labels, _ = _sealed_project(tmp_path, cluster.address, {1: PLAN[5], 2: PLAN[2]}, produce=slow,
                                   extra=", workers: 2",
                                   accept="accept: {rule: paired, pairs: 4, alpha: 0.1, final_pairs: 0}")
    proc = subprocess.Popen([PY, "-m", "autoloop", "run", "program.md", "--tag", p.tag, "--cycles", "2"],
                            cwd=p.repo, env=p.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ledger, killed = p.repo / ".autoloop" / p.tag / "ledger.jsonl", []
    deadline = time.monotonic() + 600
    while proc.poll() is None and not killed and time.monotonic() < deadline:
        if ledger.exists() and '"status":"baseline"' in ledger.read_text() and _produce_on(b"NODE_NAME=n1"):
            killed = cluster.kill_raylet(1)
        time.sleep(0.05)
    out, err = proc.communicate(timeout=600)
    if killed:   # the module's other tests keep their two nodes, whatever the order
        cluster.restart(1, {"NODE_NAME": "n1"})
        cluster.wait_nodes(2)
    assert killed, f"no command ran on n1 after the baseline: {err[-2000:]}"
    assert proc.returncode == 0, err[-3000:]
    recs = [json.loads(x) for x in ledger.read_text().splitlines()]
    lost = [r for r in recs if r["t"] == "node_lost"]
    assert len(lost) == 1 and lost[0]["during"].startswith("cycle "), lost
    statuses = {r["cycle"]: r["status"] for r in recs if r["t"] == "cycle"}
    assert statuses == {0: "baseline", 1: "keep", 2: "discard"}, statuses
    assert _leaks(cluster, labels) == []


# slow on n1 only, and only in a candidate's tree (not the baseline's, which may be measured
# there first): a window to kill n1's raylet under a cycle's command; once n1 is gone, the
# measurements made again on n0 need not wait
CANDIDATE_SLOW_ON_N1 = """\
import time
if os.environ.get("NODE_NAME") == "n1" and open("model.py").read() + open("notes.txt").read() != {start!r}:
    time.sleep(3)
"""


def _produce_on(name: bytes) -> bool:
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and b"produce.py" in (entry / "cmdline").read_bytes() \
                    and name in (entry / "environ").read_bytes():
                return True
        except OSError:
            continue
    return False
