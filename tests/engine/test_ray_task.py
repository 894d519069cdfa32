"""The body of a remote verification (autoloop.engine.ray_task), run here as a plain function: no Ray
needed. It unpacks a tar, runs the steps through proc (in a sandbox when asked) and brings back
tails of their output."""

from __future__ import annotations

import io
import os
import socket
from dataclasses import replace
import sys
import tarfile
import time

import pytest

from autoloop.process import proc
from autoloop.engine.ray_task import probe, run_steps
from autoloop.isolation.sandbox import Bwrap
from autoloop.base.specs import SandboxSpec


def archive(files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_steps_run_in_the_unpacked_tree_with_the_shipped_env() -> None:
    steps = [proc.Step("check", "test -f src/a.txt", 10, True),
             proc.Step("verifier", 'echo "cwd $PWD"; echo "hint $SLOT"; cat src/a.txt', 10, False)]
    reply = run_steps(archive({"src/a.txt": "score: 3\n"}), steps, {"SLOT": "b"}, 1 << 20)
    assert [r.result.exit_code for r in reply.runs] == [0, 0]
    out = reply.runs[1].stdout.decode().splitlines()
    assert "autoloop-verify-" in out[0] and out[1:] == ["hint b", "score: 3"]
    assert not os.path.exists(out[0].split(" ", 1)[1])   # the folder is gone afterwards


def test_a_failing_guard_ends_the_remote_steps() -> None:
    steps = [proc.Step("check", "echo broken >&2; exit 1", 10, True), proc.Step("verifier", "echo v", 10, False)]
    reply = run_steps(archive({"a": ""}), steps, {}, 1 << 20)
    assert len(reply.runs) == 1 and reply.runs[0].stderr == b"broken\n"


def test_tails_start_at_a_line_and_report_the_whole_size() -> None:
    script = "for i in $(seq 1000); do echo line-$i; done; echo 'score: 1'"
    reply = run_steps(archive({"a": ""}), [proc.Step("verifier", script, 10, False)], {}, 100)
    run = reply.runs[0]
    assert run.stdout.endswith(b"score: 1\n") and run.stdout.startswith(b"line-")
    assert len(run.stdout) <= 100 and run.stdout_size > 5000


def test_the_timeout_kills_the_remote_tree_and_what_it_left() -> None:
    steps = [proc.Step("verifier", "setsid sleep 30 & echo $!; sleep 30", 0.5, False)]
    t0 = time.monotonic()
    reply = run_steps(archive({"a": ""}), steps, {}, 1 << 20)
    assert time.monotonic() - t0 < 10
    run = reply.runs[0]
    assert run.result.timed_out and run.result.exit_code is None
    pid = int(run.stdout.split()[0])
    deadline = time.monotonic() + 2
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not alive(pid)


def _sandbox(**kw) -> SandboxSpec:
    return SandboxSpec(kind="bwrap", **kw)


needs_bwrap = pytest.mark.skipif(Bwrap(SandboxSpec()).exe == "", reason="bubblewrap is not installed")


@needs_bwrap
def test_a_sandboxed_remote_run_writes_only_its_tree_and_temp_folder(tmp_path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    marker = f"/tmp/autoloop-ray-task-{os.getpid()}"
    script = (f"touch {outside}/planted; touch {marker}; touch $TMPDIR/t && echo tmpdir-ok; "
              "touch made && echo tree-ok")
    steps = [proc.Step("plant", script, 30, True),
             proc.Step("verifier", f"test -e {marker} && echo seen || echo fresh", 30, False)]
    reply = run_steps(archive({"a": ""}), steps, {}, 1 << 20, _sandbox())
    assert not isinstance(reply, str), reply
    assert reply.runs[0].stdout.decode().split() == ["tmpdir-ok", "tree-ok"]
    assert reply.runs[1].stdout == b"fresh\n"      # each command its own /tmp
    assert not (outside / "planted").exists() and not os.path.exists(marker)


@needs_bwrap
def test_the_network_of_a_sandboxed_remote_run_is_closed_unless_asked_for() -> None:
    # with verifier.network, the node's own egress proxy is the only way out: the loopback
    # service is reached through it when verifier.hosts lists it, never directly
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        port = listener.getsockname()[1]
        code = ("import os, socket\ntry:\n    socket.create_connection(('127.0.0.1', %d), 5).close(); print('open')\n"
                "except OSError:\n    print('closed')\n"
                "if os.environ.get('HTTPS_PROXY'):\n"
                "    s = socket.create_connection(('127.0.0.1', 3128), 5)\n"
                "    s.sendall(b'CONNECT 127.0.0.1:%d HTTP/1.1\\r\\n\\r\\n')\n"
                "    print(s.recv(100).split(b' ')[1].decode())\n" % (port, port))
        step = [proc.Step("verifier", f"{sys.executable} net.py", 30, False)]
        said = [run_steps(archive({"net.py": code}), step, {}, 1 << 20, replace(_sandbox(network=net), hosts=hosts)
                          ).runs[0].stdout for net, hosts in ((False, ()), (True, (f"127.0.0.1:{port}",)), (True, ()))]
    assert said == [b"closed\n", b"closed\n200\n", b"closed\n403\n"]


def test_a_node_without_bwrap_runs_nothing_and_says_why(tmp_path) -> None:
    marker = tmp_path / "ran"
    reply = run_steps(archive({"a": ""}), [proc.Step("verifier", f"touch {marker}", 30, False)],
                      {"PATH": str(tmp_path)}, 1 << 20, _sandbox())
    assert isinstance(reply, str) and "bwrap is not installed" in reply and socket.gethostname() in reply
    assert not marker.exists()
    assert probe(_sandbox(), {"PATH": str(tmp_path)})[1] == reply.split(": ", 1)[1]
