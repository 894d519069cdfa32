"""The body of one remote verification (executor: ray). On a Ray worker autoloop arrives as a
runtime_env py_module and psutil is Ray's vendored copy: only autoloop.process, autoloop.isolation.sandbox
(which reads no program.md) and the standard library are imported. The commit's tar is unpacked
into a fresh temporary folder and the steps run there through proc, in a bubblewrap sandbox made
here for this node's paths when the run asks for one; each result comes back with the tails of
its output.
"""

from __future__ import annotations

import io
import os
import socket
import tarfile
from pathlib import Path
from typing import Mapping, NamedTuple, Sequence

from autoloop.process import logfile, proc, running
from autoloop.isolation.sandbox import Bwrap, Confinement, SandboxUnavailable
from autoloop.base.specs import SandboxSpec
from autoloop.base.walk import remove_tree, temp_tree

# A worker process answers for its node once per bwrap and network setting: Ray reuses workers,
# and a probe is a bubblewrap start of its own.
_probed: dict[tuple[str, bool], str | None] = {}


class RemoteRun(NamedTuple):
    result: proc.ProcResult   # its paths name files on the node, gone when the task ends
    stdout: bytes             # the tail, from a line start (the metric parser never sees half a line)
    stderr: bytes
    stdout_size: int


class RemoteReply(NamedTuple):
    host: str
    runs: list[RemoteRun]
    node_id: str = ""         # Ray's id of the node: the next run of the same comparison is pinned to it


class NodeFacts(NamedTuple):   # what `autoloop doctor` says of each node
    node_id: str
    host: str
    ray: str
    python: str
    bwrap: str | None          # why no sandbox can be made there (None: it can)


def node_id() -> str:
    """This node's Ray id ("" when not called in a Ray task: the tests call run_steps directly)."""
    try:
        import ray

        return str(ray.get_runtime_context().get_node_id()) if ray.is_initialized() else ""
    except Exception:   # no Ray here at all, or a runtime context without a node
        return ""


def facts(sandbox: SandboxSpec, env: Mapping[str, str]) -> NodeFacts:
    import platform

    import ray

    return NodeFacts(node_id(), socket.gethostname(), ray.__version__, platform.python_version(),
                     _why_not(Bwrap(sandbox, path={**os.environ, **env}.get("PATH"))))


def probe(sandbox: SandboxSpec, env: Mapping[str, str]) -> tuple[str, str | None]:
    """(this node's name, why `sandbox` cannot be made here or None); bwrap is looked up on the
    PATH the measurements get (the node's own, or the one `env` ships)."""
    f = facts(sandbox, env)
    return f.host, f.bwrap


def _why_not(bwrap: Bwrap) -> str | None:
    key = (bwrap.exe, bwrap.spec.network)
    if key not in _probed:
        try:
            bwrap.probe()
            _probed[key] = None
        except SandboxUnavailable as exc:
            _probed[key] = str(exc)
    return _probed[key]


def run_steps(archive: bytes, steps: Sequence[proc.Step], env: Mapping[str, str], tail_bytes: int,
              sandbox: SandboxSpec | None = None,
              checkout: tuple[str, Sequence[str]] | None = None, reap: bool = False) -> RemoteReply | str:
    """With `sandbox` (its `network` is the measurement's), every step runs in one, or none runs
    and the answer is why none can be made here. `checkout`: the user's checkout path and what
    stays visible in it (its venvs); where that path exists on this node (a local Ray instance,
    a shared file system) the candidate is shown there too, as a local measurement does, so an
    editable install pointing into the checkout imports the candidate. `reap`: see
    Confinement.reap (verifier.measure: cpu); wall and cpu are taken here, on the node, by proc.
    Every step gets a tree unpacked afresh and temp folders of its own, so nothing one step
    wrote reaches the next (contract §11)."""
    env = {**os.environ, **env}
    bwrap = None if sandbox is None else Bwrap(sandbox, path=env.get("PATH"))
    why = None if bwrap is None else _why_not(bwrap)
    if why is not None:
        return f"{socket.gethostname()} cannot make the sandbox every measurement of this run needs: {why}"
    marker = env.get(running.MARKER_VAR) or proc.new_marker()
    results: list[proc.ProcResult] = []
    with temp_tree("verify") as root:
        logs = root / "logs"
        for i, step in enumerate(steps):
            tree, scratch = root / f"tree-{i}", root / f"tmp-{i}"
            tree.mkdir()
            scratch.mkdir()
            _unpack(archive, tree)
            # its temp files on disk (a sandbox's own /tmp is memory), gone with the step
            step_env = {**env, "TMPDIR": str(scratch), "TMP": str(scratch), "TEMP": str(scratch)}
            box = None
            if bwrap is not None:
                writable = (scratch, *(Path(os.path.expanduser(w)) for w in bwrap.spec.writable))
                at = Path(checkout[0]) if checkout is not None and os.path.isdir(checkout[0]) else None
                box = Confinement(bwrap, tree=tree, checkout=at, writable=writable, network=bwrap.spec.network,
                                  path=step_env.get("PATH", ""),
                                  keep=tuple(map(Path, checkout[1])) if at and checkout else (), reap=reap)
            results += proc.run_steps([step], cwd=tree, env=step_env, log_dir=logs,
                                      wrap=None if box is None else box.argv, marker=marker)
            remove_tree(tree, quiet=True)
            remove_tree(scratch, quiet=True)
            if step.guard and not results[-1].ok:
                break
        return RemoteReply(socket.gethostname(), [
            RemoteRun(r, _tail(r.stdout_path, tail_bytes), _tail(r.stderr_path, tail_bytes),
                      r.stdout_path.stat().st_size) for r in results], node_id())


def _unpack(archive: bytes, tree: Path) -> None:
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:") as tar:
        # our own tar of a git tree: relative paths free of '..' already
        if hasattr(tarfile, "fully_trusted_filter"):
            tar.extractall(tree, filter="fully_trusted")
        else:
            tar.extractall(tree)


def _tail(path: Path, limit: int) -> bytes:
    data = logfile.read_regular(path, limit + 1, tail=True)
    if len(data) > limit:   # cut: start at a line boundary
        cut = data.find(b"\n")
        data = data[cut + 1:] if cut >= 0 else data[1:]
    return data
