"""Black-box: `sandbox: bwrap`. The generator runs with a read-only root, its work tree and log
folder writable, .git read-only, a private /tmp, its own PID and network namespaces (with
`network: true`, the egress proxy's listener in it). Skipped, with the reason, where bwrap is missing or cannot create namespaces
(.ci/run installs it); the fail-closed behaviour without bwrap is in test_badinput_states.py."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.scripts.e2e import git, make_project


def _bwrap_problem() -> str | None:
    exe = shutil.which("bwrap")
    if exe is None:
        return "bwrap is not installed (apt-get install bubblewrap)"
    res = subprocess.run([exe, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid",
                          "--unshare-net", "--cap-drop", "ALL", "--", "/bin/true"], capture_output=True, text=True)
    if res.returncode != 0:
        return f"bwrap cannot create namespaces here: {res.stderr.strip()[:200]}"
    return None


PROBLEM = _bwrap_problem()
pytestmark = pytest.mark.skipif(PROBLEM is not None, reason=PROBLEM or "")

PROBES = '''
import socket
res = {}
def attempt(name, fn):
    try:
        fn()
        res[name] = "ok"
    except Exception as e:
        res[name] = type(e).__name__
attempt("user_score", lambda: open(user() / "score.py", "a").write("print('score: -1000')\\n"))
attempt("git_config", lambda: open(common() / "config", "a").write("[core]\\n\\tfsmonitor = evil\\n"))
attempt("git_hook", lambda: open(common() / "hooks" / "post-commit", "w").write("#!/bin/sh\\n"))
attempt("verify_tree", lambda: open(os.getcwd() + ".verify-0/score.py", "w").write("print('score: -1000')\\n"))
attempt("autoloop_code", lambda: open(os.path.join(os.environ["AUTOLOOP_SRC"], "loop.py"), "a").write("#\\n"))
attempt("tmp", lambda: open("/tmp/autoloop-sandbox-leak-" + os.environ["E2E_ID"], "w").write("x"))
attempt("net", lambda: socket.create_connection(("127.0.0.1", int(os.environ["E2E_PORT"])), timeout=2).close())
attempt("own_tree", lambda: W("val.txt", "30"))
attempt("hypothesis", lambda: hyp("sandboxed cycle"))
beat = OUT / "gen" / "heartbeat"
subprocess.Popen(["setsid", "env", "-i", sys.executable, "-c",
                  f"import time\\nwhile True:\\n    open({str(beat)!r}, 'a').write('x')\\n    time.sleep(0.05)\\n"])
time.sleep(0.3)
(OUT / "gen" / "probes.json").write_text(json.dumps(res))
'''


def loopback_listener() -> socket.socket:
    """A TCP listener on 127.0.0.1 that accepts and closes every connection, until closed: what
    a sandboxed command with or without the network can or cannot reach."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)

    def serve():
        try:
            while True:
                server.accept()[0].close()
        except OSError:  # closed at the end of the module
            pass

    threading.Thread(target=serve, daemon=True).start()
    return server


@pytest.fixture(scope="module", params=[False, True], ids=["no-network", "network"])
def sandboxed(request, tmp_path_factory):
    base = tmp_path_factory.mktemp("sandbox")
    gen = base / "out" / "gen"
    gen.mkdir(parents=True)
    network = request.param
    server = loopback_listener()
    p = make_project(base, {}, records_in=gen,
                     extra=f"sandbox: {{kind: bwrap, network: {str(network).lower()}, writable: [{gen}]}}")
    p.set_plan({1: PROBES, 2: 'W("val.txt", "29")'})
    import autoloop
    p.env["AUTOLOOP_SRC"] = str(Path(autoloop.__file__).parent)
    p.env["E2E_PORT"] = str(server.getsockname()[1])
    originals = {f: (p.repo / f).read_bytes() for f in ("score.py", ".git/config")}
    res = p.run("--cycles", "2")
    size = (gen / "heartbeat").stat().st_size if (gen / "heartbeat").exists() else -1
    time.sleep(0.4)
    grew = ((gen / "heartbeat").stat().st_size if (gen / "heartbeat").exists() else -1) != size
    probes = json.loads((gen / "probes.json").read_text())
    yield p, res, probes, originals, grew, network
    server.close()
    Path("/tmp/autoloop-sandbox-leak-" + p.env["E2E_ID"]).unlink(missing_ok=True)


def test_sandboxed_run_keeps_honest_cycles(sandboxed):
    p, res, *_ = sandboxed
    assert res.returncode == 0, res.stderr
    assert [(r["status"], r["metric"]) for r in p.rows()] == [("baseline", "40.25"), ("keep", "30"), ("keep", "29")]
    assert p.rows()[1]["description"] == "sandboxed cycle"   # the log folder is writable


def test_sandbox_protects_what_lies_outside_the_work_tree(sandboxed):
    p, _, probes, originals, *_ = sandboxed
    # read-only (EROFS) or out of sight (a private /tmp hides paths below it): never the real file
    assert probes["git_config"] == "OSError" and probes["git_hook"] in ("OSError", "FileNotFoundError")
    assert probes["autoloop_code"] in ("OSError", "FileNotFoundError", "PermissionError")
    assert probes["verify_tree"] in ("OSError", "FileNotFoundError")
    for f, data in originals.items():
        assert (p.repo / f).read_bytes() == data, f
    vt = p.worktree().with_name(p.tag + ".verify-0")
    assert b"-1000" not in (vt / "score.py").read_bytes()


def test_sandbox_tmp_is_private(sandboxed):
    p, _, probes, *_ = sandboxed
    assert probes["tmp"] == "ok"
    assert not Path("/tmp/autoloop-sandbox-leak-" + p.env["E2E_ID"]).exists()


def test_sandbox_never_reaches_the_hosts_loopback(sandboxed):
    # its own network namespace with the network on too: the only way out is the egress proxy
    # (tests/isolation/test_egress.py), which refuses an unlisted loopback port
    _, _, probes, _, _, network = sandboxed
    assert probes["net"] == "ConnectionRefusedError", probes["net"]


def test_sandbox_kills_detached_processes_with_the_generator(sandboxed):
    """setsid + env -i escapes a process group and a marker, not a PID namespace."""
    grew = sandboxed[4]
    assert not grew


def test_sandbox_work_tree_writes_reach_the_candidate(sandboxed):
    p, _, probes, *_ = sandboxed
    assert probes["own_tree"] == "ok"
    assert p.show(p.branch(), "val.txt").strip() == b"29"
    assert git(p.worktree(), "status", "--porcelain", "--ignored", env=p.env) == ""


def test_with_the_network_on_daemons_are_hidden_and_name_resolution_stays(tmp_path, monkeypatch):
    """systemd's private bus lets root's `systemd-run` start a unit outside any sandbox, without
    D-Bus: /run/systemd is hidden when the network is on, all but its resolver (resolv.conf's
    stub). Here a folder in tmp_path stands for /run/systemd."""
    from autoloop.isolation import sandbox
    from autoloop.program.reader import SandboxSpec

    assert "/run/systemd" in sandbox._DAEMON_DIRS and "/run/systemd/resolve" in sandbox._DAEMON_KEEP
    run = tmp_path / "run" / "systemd"
    (run / "resolve").mkdir(parents=True)
    (run / "private").write_text("the manager's bus")
    (run / "resolve" / "stub-resolv.conf").write_text("nameserver 127.0.0.53\n")
    (tmp_path / "w").mkdir()
    monkeypatch.setattr(sandbox, "_PRIVATE", ())   # tmp_path shows through, as /run does
    monkeypatch.setattr(sandbox, "_DAEMON_DIRS", (str(run),))
    monkeypatch.setattr(sandbox, "_DAEMON_KEEP", (str(run / "resolve"),))
    box = sandbox.Bwrap(SandboxSpec())
    box.start_egress()
    argv = box.argv(f"ls -A {run}; cat {run}/resolve/stub-resolv.conf", workdir=tmp_path / "w", network=True)
    res = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["resolve", "nameserver", "127.0.0.53"]
    assert (run / "private").exists()   # hidden inside only
