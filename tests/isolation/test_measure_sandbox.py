"""Black-box: the measurement sandbox of the default `sandbox: auto`. Guards and the verifier
run with the whole file system read-only except their verification tree and a private scratch,
a private /tmp, their own PID namespace and no network unless `verifier.network: true` (then what
`verifier.hosts` lists, through the egress proxy, and nothing directly); the
candidate appears at your checkout's path, where they run. Skipped, with the reason, where
bwrap cannot make a sandbox (.ci/run installs it)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.scripts.e2e import PY, git, make_project
from tests.isolation.test_sandbox import PROBLEM, loopback_listener

pytestmark = pytest.mark.skipif(PROBLEM is not None, reason=PROBLEM or "")

# The verifier: the score from val.txt, after trying what a candidate's code must not manage.
PROBING_SCORE = '''\
import json, os, socket, subprocess, sys, time
from pathlib import Path
res = {}
def attempt(name, fn):
    try:
        out = fn()
        res[name] = out if isinstance(out, str) else "ok"
    except Exception as e:
        res[name] = type(e).__name__
repo = Path(os.environ["E2E_REPO"])
attempt("cwd", lambda: os.getcwd())
attempt("git_config", lambda: open(repo / ".git" / "config", "a").write("[core]\\n\\tfsmonitor = evil\\n"))
attempt("common_config", lambda: open(os.environ["E2E_COMMON"] + "/config", "a").write("#\\n"))
attempt("ledger", lambda: open(repo / ".autoloop" / "t1" / "ledger.jsonl", "a").write("{}\\n"))
attempt("autoloop_code", lambda: open(os.path.join(os.environ["E2E_SRC"], "loop.py"), "a").write("#\\n"))
attempt("home", lambda: open(os.path.join(os.environ["E2E_HOME"], "planted"), "w").write("x"))
attempt("tmp", lambda: open("/tmp/autoloop-measure-leak-" + os.environ["E2E_ID"], "w").write("x"))
attempt("shm", lambda: open("/dev/shm/autoloop-measure-" + os.environ["E2E_ID"], "w").write("x"))
attempt("net", lambda: socket.create_connection(("127.0.0.1", int(os.environ["E2E_PORT"])), timeout=2).close())
def proxied():
    s = socket.create_connection(("127.0.0.1", 3128), timeout=2)
    s.sendall(("CONNECT 127.0.0.1:%s HTTP/1.1\\r\\n\\r\\n" % os.environ["E2E_PORT"]).encode())
    assert s.recv(100).startswith(b"HTTP/1.1 200")
attempt("proxied", proxied)
attempt("git_head", lambda: subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                           check=True).stdout.strip())
beat = Path(os.environ["E2E_MEAS"]) / "heartbeat"
subprocess.Popen(["setsid", "env", "-i", sys.executable, "-c",
                  f"import time\\nwhile True:\\n    open({str(beat)!r}, 'a').write('x')\\n    time.sleep(0.05)\\n"])
time.sleep(0.3)
(Path(os.environ["E2E_MEAS"]) / "probes.json").write_text(json.dumps(res))
print(f"score: {open('val.txt').read().strip()}")
'''


@pytest.fixture(scope="module", params=[False, True], ids=["no-network", "network"])
def measured(request, tmp_path_factory):
    base = tmp_path_factory.mktemp("measure")
    out = base / "out"
    gen, meas = out / "gen", out / "meas"
    gen.mkdir(parents=True)
    meas.mkdir(parents=True)
    network = request.param
    server = loopback_listener()
    port = server.getsockname()[1]
    net = f"\n  network: true\n  hosts: ['127.0.0.1:{port}']" if network else ""
    p = make_project(base, {}, records_in=gen, guards=False,
                     files={"score.py": PROBING_SCORE},
                     verifier=f"{PY} score.py{net}",
                     # the heartbeat it leaves behind keeps the traced run that records what the
                     # verifier reads (strace -f) alive until this timeout; a run takes ~0.5 s
                     vtimeout=8,
                     extra=f"sandbox: {{writable: [{gen}, {meas}]}}")
    p.set_plan({1: 'W("val.txt", "30")'})
    import autoloop
    common = Path(git(p.repo, "rev-parse", "--git-common-dir", env=p.env))
    p.env.update(E2E_SRC=str(Path(autoloop.__file__).parent), E2E_PORT=str(server.getsockname()[1]),
                 E2E_REPO=str(p.repo), E2E_MEAS=str(meas), E2E_HOME=p.env["HOME"],
                 E2E_COMMON=str(common if common.is_absolute() else (p.repo / common).resolve()))
    originals = {f: (p.repo / f).read_bytes() for f in ("score.py", ".git/config")}
    res = p.run("--cycles", "1")
    size = (meas / "heartbeat").stat().st_size if (meas / "heartbeat").exists() else -1
    time.sleep(0.4)
    grew = ((meas / "heartbeat").stat().st_size if (meas / "heartbeat").exists() else -1) != size
    probes = json.loads((meas / "probes.json").read_text())
    yield p, res, probes, originals, grew, network
    server.close()
    Path("/tmp/autoloop-measure-leak-" + p.env["E2E_ID"]).unlink(missing_ok=True)
    Path("/dev/shm/autoloop-measure-" + p.env["E2E_ID"]).unlink(missing_ok=True)


def test_sandboxed_measurements_keep_honest_cycles(measured):
    p, res, *_ = measured
    assert res.returncode == 0, res.stderr
    assert [(r["status"], r["metric"]) for r in p.rows()] == [("baseline", "40.25"), ("keep", "30")]
    assert "not sandboxed" not in res.stderr + res.stdout
    assert "not sandboxed" not in p.experiments()


def test_measurement_runs_at_the_checkout_path_on_the_candidate(measured):
    p, _, probes, *_ = measured
    assert probes["cwd"] == str(p.repo.resolve())
    # git works inside, read-only, and sees the candidate: the kept commit was measured last
    assert probes["git_head"] == p.branch_head()


def test_measurement_cannot_write_outside_its_tree(measured):
    p, _, probes, originals, *_ = measured
    # (a HOME under /tmp, as here, lies behind the private /tmp: only the real one matters)
    for name in ("git_config", "common_config", "ledger", "autoloop_code"):
        assert probes[name] in ("OSError", "FileNotFoundError", "NotADirectoryError", "PermissionError"), (name, probes)
    for f, data in originals.items():
        assert (p.repo / f).read_bytes() == data, f
    assert not Path(p.env["HOME"], "planted").exists()
    ledger = p.ledger_lines()
    assert all(line.strip() != b"{}" for line in ledger)


def test_measurement_temp_and_shm_are_private(measured):
    p, _, probes, *_ = measured
    assert probes["tmp"] == "ok" and probes["shm"] == "ok"
    assert not Path("/tmp/autoloop-measure-leak-" + p.env["E2E_ID"]).exists()
    assert not Path("/dev/shm/autoloop-measure-" + p.env["E2E_ID"]).exists()


def test_measurement_network_only_with_verifier_network(measured):
    # never the host's loopback directly; with verifier.network, what verifier.hosts lists
    # through the egress proxy
    _, _, probes, _, _, network = measured
    assert probes["net"] == "ConnectionRefusedError", probes["net"]
    assert (probes["proxied"] == "ok") == network, probes["proxied"]


def test_measurement_leftovers_die_with_it(measured):
    grew = measured[4]
    assert not grew


def _baseline_failure(tmp_path: Path, code: str) -> str:
    p = make_project(tmp_path, {}, guards=False, verifier="{py} probe.py", files={"probe.py": code})
    res = p.run("--cycles", "1")
    assert res.returncode == 1, res.stdout + res.stderr
    return res.stdout + res.stderr


def test_a_verifier_needing_the_network_is_told_which_key(tmp_path):
    code = "import socket\nsocket.getaddrinfo('autoloop-test.invalid', 80)\nprint('score: 1')\n"
    text = _baseline_failure(tmp_path, code)
    assert "verifier.network: true" in text, text


def test_a_verifier_writing_outside_is_told_which_key(tmp_path):
    target = f"/var/lib/autoloop-probe-{os.getpid()}"
    text = _baseline_failure(tmp_path, f"open({target!r}, 'w').write('x')\nprint('score: 1')\n")
    assert not Path(target).exists()
    assert "sandbox.writable" in text and target in text, text


def test_sandbox_none_says_it_is_not_sandboxed(tmp_path):
    p = make_project(tmp_path, {1: 'W("val.txt", "30")'}, guards=False, extra="sandbox: none")
    res = p.run("--cycles", "1")
    assert res.returncode == 0, res.stderr
    assert "not sandboxed: sandbox: none in program.md" in res.stderr
    assert "**Warning:** not sandboxed: sandbox: none in program.md" in p.experiments()
    log = p.cli("log", "program.md", "--tag", p.tag)
    assert "WARNING: not sandboxed" in log.stdout, log.stdout
    report = p.cli("report", "program.md", "--tag", p.tag, "--format", "markdown", "-o", "-")
    assert "not sandboxed: sandbox: none" in report.stdout, report.stdout + report.stderr


@pytest.mark.parametrize("form", ["{py} {script}", "sh -c '{py} {script}'"])
def test_a_script_named_under_tmp_stays_readable(tmp_path_factory, form):
    # The measurement's /tmp is private; a script the command names by absolute path there (also
    # inside `sh -c '…'`, where a plain split sees one word) must be bound back in to run.
    from autoloop.program.reader import SandboxSpec
    from autoloop.isolation.sandbox import Bwrap, Confinement, SandboxUnavailable
    bwrap = Bwrap(SandboxSpec(kind="bwrap"))
    try:
        bwrap.probe()
    except SandboxUnavailable as exc:
        pytest.skip(str(exc))
    tree, outside = tmp_path_factory.mktemp("tree"), tmp_path_factory.mktemp("scripts")
    assert str(outside).startswith("/tmp/")
    script = outside / "score.py"
    script.write_text("print('score: 7')\n")
    box = Confinement(bwrap, tree=tree, checkout=None, path=os.environ.get("PATH", ""))
    res = subprocess.run(box.argv(form.format(py=PY, script=script)), capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "score: 7" in res.stdout, res.stderr


def test_a_candidates_failure_gets_no_hint_to_widen_its_reach(tmp_path):
    """A candidate whose code writes where the sandbox keeps read-only fails its guard; its lesson,
    which the next prompt carries, leads with its own first error and names no sandbox.writable:
    following that hint would give the candidate's code a place that outlives a measurement."""
    target = f"/var/lib/autoloop-memo-{os.getpid()}.pkl"
    lib = f"with open({target!r}, 'wb') as f:\n    f.write(b'answers')\n"
    plan = {1: f'W("src/lib.py", {lib!r})\nhyp("memoise")\n'}
    p = make_project(tmp_path, plan, guards=False, files={"src/lib.py": "X = 1\n"},
                     extra=f"guards:\n  - {{name: imports, command: cd src && {PY} -c 'import lib'}}")
    res = p.run("--cycles", "1")
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert p.statuses()[1] == "guard_fail", out
    lesson = p.rows()[1]["lesson"]
    assert not Path(target).exists()
    assert "Read-only file system" in lesson and "sandbox.writable" not in lesson and "hint" not in lesson, lesson
