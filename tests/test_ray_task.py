"""The body of a remote verification (autoloop.ray_task), run here as a plain function: no Ray
needed. It unpacks a tar, runs the steps through proc and brings back tails of their output."""

from __future__ import annotations

import io
import os
import tarfile
import time

from autoloop import proc
from autoloop.ray_task import run_steps


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
