"""The body of one remote verification (executor: ray). On a Ray worker autoloop arrives as a
runtime_env py_module and psutil is Ray's vendored copy: only autoloop.proc and the standard
library are imported. The commit's tar is unpacked into a fresh temporary folder and the steps
run there through proc; each result comes back with the tails of its output.
"""

from __future__ import annotations

import io
import os
import socket
import tarfile
from pathlib import Path
from typing import Mapping, NamedTuple, Sequence

from autoloop import proc
from autoloop.walk import temp_tree


class RemoteRun(NamedTuple):
    result: proc.ProcResult   # its paths name files on the node, gone when the task ends
    stdout: bytes             # the tail, from a line start (the metric parser never sees half a line)
    stderr: bytes
    stdout_size: int


class RemoteReply(NamedTuple):
    host: str
    runs: list[RemoteRun]


def run_steps(archive: bytes, steps: Sequence[proc.Step], env: Mapping[str, str],
              tail_bytes: int) -> RemoteReply:
    with temp_tree("verify") as root:
        tree, logs = root / "tree", root / "logs"
        tree.mkdir()
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:") as tar:
            # our own tar of a git tree: relative paths free of '..' already
            if hasattr(tarfile, "fully_trusted_filter"):
                tar.extractall(tree, filter="fully_trusted")
            else:
                tar.extractall(tree)
        results = proc.run_steps(steps, cwd=tree, env={**os.environ, **env}, log_dir=logs,
                                 marker=env.get(proc.MARKER_VAR) or proc.new_marker())
        return RemoteReply(socket.gethostname(), [
            RemoteRun(r, _tail(r.stdout_path, tail_bytes), _tail(r.stderr_path, tail_bytes),
                      r.stdout_path.stat().st_size) for r in results])


def _tail(path: Path, limit: int) -> bytes:
    data = proc.read_regular(path, limit + 1, tail=True)
    if len(data) > limit:   # cut: start at a line boundary
        cut = data.find(b"\n")
        data = data[cut + 1:] if cut >= 0 else data[1:]
    return data
