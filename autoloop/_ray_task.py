"""The body of one remote verification (autoloop.executors, `executor: ray`).

Shipped to the cluster *by value* (ray.cloudpickle.register_pickle_by_value), so a node needs
Ray and Python, not autoloop: this module imports nothing but the standard library.

It unpacks the candidate commit (a tar of its files) into a fresh temporary folder, runs the
guards (stopping at the first failure) and the verifier there from the tree's root, each in its
own session with a timeout that kills the whole group, and returns what the local side needs to
judge: exit codes, durations and the tails of stdout and stderr. Nothing is assumed about the
node's filesystem but a writable temporary folder.
"""

from __future__ import annotations

import io
import os
import shutil
import signal
import socket
import subprocess
import tarfile
import tempfile
import time
from typing import Any, Mapping, Sequence

KILL_GRACE_S = 3.0


def run_commands(archive: bytes, commands: Sequence[Mapping[str, Any]], env: Mapping[str, str],
                 tail_bytes: int) -> dict[str, Any]:
    """`commands`: [{name, command, timeout, guard}] in order. Returns {host, results: [...]}."""
    root = tempfile.mkdtemp(prefix="autoloop-verify-")
    logs = tempfile.mkdtemp(prefix="autoloop-logs-")
    results: list[dict[str, Any]] = []
    try:
        tree = os.path.join(root, "tree")
        os.mkdir(tree)
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:") as tar:
            # our own tar of a git tree: git paths are relative and free of '..' already
            if hasattr(tarfile, "fully_trusted_filter"):
                tar.extractall(tree, filter="fully_trusted")
            else:
                tar.extractall(tree)
        child_env = dict(os.environ)
        child_env.update(env)
        for i, spec in enumerate(commands):
            res = _run_one(spec, tree, child_env, os.path.join(logs, str(i)), tail_bytes)
            results.append(res)
            if spec.get("guard") and not (res["exit_code"] == 0 and not res["timed_out"]):
                break
        return {"host": socket.gethostname(), "results": results}
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(logs, ignore_errors=True)


def _run_one(spec: Mapping[str, Any], cwd: str, env: Mapping[str, str], stem: str,
             tail_bytes: int) -> dict[str, Any]:
    out_path, err_path = stem + ".out", stem + ".err"
    started = time.monotonic()
    timed_out = False
    with open(out_path, "wb") as out, open(err_path, "wb") as err, open(os.devnull, "rb") as null:
        proc = subprocess.Popen(spec["command"], shell=True, cwd=cwd, env=dict(env), stdin=null,
                                stdout=out, stderr=err, start_new_session=True, executable="/bin/sh")
        try:
            proc.wait(timeout=spec.get("timeout"))
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            # also on a cancel (KeyboardInterrupt raised in the task): no verifier outlives it
            _kill_group(proc)
    return {
        "name": spec["name"],
        "exit_code": None if timed_out else proc.returncode,
        "timed_out": timed_out,
        "duration_s": time.monotonic() - started,
        "stdout": _tail(out_path, tail_bytes),
        "stderr": _tail(err_path, tail_bytes),
        "stdout_size": os.path.getsize(out_path),
    }


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        if sig == signal.SIGTERM and proc.returncode is None:
            try:
                proc.wait(timeout=KILL_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
    if proc.returncode is None:
        proc.wait()


def _tail(path: str, limit: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - limit))
        data = f.read()
    if size > limit:
        # start at a line boundary, so the metric parser never sees half a line
        cut = data.find(b"\n")
        data = data[cut + 1:] if cut >= 0 else data
    return data
