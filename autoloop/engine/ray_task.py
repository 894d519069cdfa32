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
import stat
import tarfile
from pathlib import Path
from typing import Any, Iterator, Mapping, NamedTuple, Sequence

from autoloop.process import logfile, proc, running
from autoloop.isolation.sandbox import Bwrap, Confinement, SandboxUnavailable
from autoloop.base.specs import SandboxSpec
from autoloop.base.walk import remove_tree, temp_tree, walk

OUTPUT_VAR = "AUTOLOOP_OUTPUT"   # as autoloop.engine.verify names it (not imported: it reads program.md)
CHUNK_BYTES = 4 << 20            # what comes back of $AUTOLOOP_OUTPUT travels in pieces this big
MB = 1 << 20

# A worker process answers for its node once per bwrap and network setting: Ray reuses workers,
# and a probe is a bubblewrap start of its own.
_probed: dict[tuple[str, bool], str | None] = {}
_egress: dict[tuple[str, bool], Any] = {}   # the worker's egress proxy per sandbox kind


class RemoteRun(NamedTuple):
    result: proc.ProcResult   # its paths name files on the node, gone when the task ends
    stdout: bytes             # the tail, from a line start (the metric parser never sees half a line)
    stderr: bytes
    stdout_size: int


class Output(NamedTuple):
    """What the verifier wrote under $AUTOLOOP_OUTPUT, as a tar of `size` bytes that follows the
    reply in chunks; or `odd`: why the score must not run on it (a link, a fifo, the folder
    replaced, over the size limit) and nothing follows."""
    size: int
    files: int
    odd: str | None = None


class RemoteReply(NamedTuple):
    host: str
    runs: list[RemoteRun]
    node_id: str = ""         # Ray's id of the node: the next run of the same comparison is pinned to it
    output: Output | None = None


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
            # verifier.network: this worker's own egress proxy, made once (sandbox.py)
            _egress[key] = bwrap.start_egress() if bwrap.spec.network else None
            _probed[key] = None
        except SandboxUnavailable as exc:
            _probed[key] = str(exc)
    bwrap.egress = _egress.get(key)
    return _probed[key]


def run_steps(archive: bytes, steps: Sequence[proc.Step], env: Mapping[str, str], tail_bytes: int,
              sandbox: SandboxSpec | None = None,
              checkout: tuple[str, Sequence[str]] | None = None, reap: bool = False,
              hidden: Sequence[str] = (), data: bytes | None = None,
              output: Path | None = None) -> RemoteReply | str:
    """With `sandbox` (its `network` is the measurement's), every step runs in one, or none runs
    and the answer is why none can be made here. `checkout`: the user's checkout path and what
    stays visible in it (its venvs); where that path exists on this node (a local Ray instance,
    a shared file system) the candidate is shown there too, as a local measurement does, so an
    editable install pointing into the checkout imports the candidate. `reap`: see
    Confinement.reap (verifier.measure: cpu); wall and cpu are taken here, on the node, by proc.
    Every step gets a tree unpacked afresh and temp folders of its own, so nothing one step
    wrote reaches the next (contract §11). `output`: the verifier's (not a guard's) $AUTOLOOP_OUTPUT,
    made empty before it starts and writable in its sandbox (see produce). `hidden`: program.md's
    `private` paths, by name only: where one exists on this node (a local instance, a shared file
    system) the sandbox hides it as a local measurement's does; their content never travels.
    `data`: program.md's `data:` folders as one tar (shipped once per run), unpacked at their
    places in every step's tree, as a local measurement links them."""
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
            if data:
                _unpack(data, tree)
            # its temp files on disk (a sandbox's own /tmp is memory), gone with the step
            step_env = {**env, "TMPDIR": str(scratch), "TMP": str(scratch), "TEMP": str(scratch)}
            mine = output if output is not None and not step.guard else None
            if mine is not None:
                remove_tree(mine, quiet=True)
                mine.mkdir(parents=True)
                step_env[OUTPUT_VAR] = str(mine)
            box = None
            if bwrap is not None:
                writable = (scratch, *(() if mine is None else (mine,)),
                            *(Path(os.path.expanduser(w)) for w in bwrap.spec.writable))
                at = Path(checkout[0]) if checkout is not None and os.path.isdir(checkout[0]) else None
                box = Confinement(bwrap, tree=tree, checkout=at, writable=writable, network=bwrap.spec.network,
                                  hosts=bwrap.spec.hosts,   # verifier.hosts (executors.py)
                                  path=step_env.get("PATH", ""),
                                  keep=tuple(map(Path, checkout[1])) if at and checkout else (), reap=reap,
                                  private=tuple(map(Path, hidden)))
            results += proc.run_steps([step], cwd=tree, env=step_env, log_dir=logs,
                                      wrap=box, marker=marker)
            remove_tree(tree, quiet=True)
            remove_tree(scratch, quiet=True)
            if step.guard and not results[-1].ok:
                break
        return RemoteReply(socket.gethostname(), [
            RemoteRun(r, _tail(r.stdout_path, tail_bytes), _tail(r.stderr_path, tail_bytes),
                      r.stdout_path.stat().st_size) for r in results], node_id())


def produce(archive: bytes, steps: Sequence[proc.Step], env: Mapping[str, str], tail_bytes: int,
            sandbox: SandboxSpec | None, checkout: tuple[str, Sequence[str]] | None, reap: bool,
            hidden: Sequence[str], data: bytes | None, limit: int) -> Iterator[RemoteReply | str | bytes]:
    """run_steps for a program with `verifier.score` (a Ray generator task): the reply, its
    `output` saying what the verifier wrote under $AUTOLOOP_OUTPUT, then that folder as a tar in
    chunks of CHUNK_BYTES, read from a file here as the driver takes them (never whole in
    memory). Packed after the verifier's processes have all ended (proc stops its marked ones,
    the sandbox's pid namespace dies with it): what anything writes later is not in it. The score
    itself never runs here: it and the private paths stay on the driver. Everything is gone from
    this node when the task ends."""
    with temp_tree("produce") as root:
        folder = root / "output"
        reply = run_steps(archive, steps, env, tail_bytes, sandbox, checkout, reap, hidden, data, output=folder)
        if isinstance(reply, str) or not reply.runs or not reply.runs[-1].result.ok or steps[-1].guard:
            yield reply
            return
        tar = root / "output.tar"
        out = _pack(folder, tar, limit)
        yield reply._replace(output=out)
        if out.odd is None:
            with open(tar, "rb") as f:
                while chunk := f.read(CHUNK_BYTES):
                    yield chunk


def _pack(folder: Path, tar: Path, limit: int) -> Output:
    """`folder` as a tar at `tar`, or why not: only regular files and folders (a link could point
    the score at what the candidate cannot read; a fifo would hang it), at most `limit` bytes."""
    try:
        st = os.lstat(folder)
    except OSError:
        st = None
    if st is None or not stat.S_ISDIR(st.st_mode):
        return Output(0, 0, "was replaced")
    entries = walk(str(folder), ordered=True)
    total, files = 0, 0
    for rel, _, est in entries:
        if est is None or not (stat.S_ISREG(est.st_mode) or stat.S_ISDIR(est.st_mode)):
            return Output(0, 0, f"holds {rel}, not a regular file or folder")
        if stat.S_ISREG(est.st_mode):
            total += est.st_size + 1024   # with its tar header and padding, about
            files += 1
    if total > limit:
        return Output(total, files, f"holds {total / MB:.1f} MB in {files} files, more than "
                                    f"parallel.max_output_mb ({limit / MB:g}) lets come back from a Ray node")
    with tarfile.open(tar, "w", format=tarfile.PAX_FORMAT) as t:
        for rel, path, _ in entries:
            t.add(path, arcname=rel, recursive=False)
    size = tar.stat().st_size
    if size > limit:   # written while we packed: the sandbox is gone, so only by the unsandboxed
        return Output(size, files, f"grew past parallel.max_output_mb ({limit / MB:g}) while it was packed")
    return Output(size, files)


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
