"""The driver's half of a produce task (autoloop.engine.ray_task.produce, executor: ray with
`verifier.score`): the task's reply, then what its verifier wrote under $AUTOLOOP_OUTPUT on the
node, taken chunk by chunk into a tar file here and unpacked into the folder the score reads.
Never whole in memory; never more than parallel.max_output_mb; only regular files and folders."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path
from typing import Any, Callable

from autoloop.base.walk import remove_tree
from autoloop.engine.ray_task import MB, RemoteReply
from autoloop.errors import Interrupted


def receive(ray: Any, gen: Any, output: Path, limit: int,
            cancelled: Callable[[], bool]) -> RemoteReply | str:
    """The reply of the generator task `gen`, its output unpacked into `output` (emptied first:
    no earlier measurement's output is ever scored). A reply whose output cannot be scored says
    why in its `output.odd`. Ray's exceptions (a lost node, a dead worker) propagate; Interrupted
    when `cancelled()` turns true meanwhile."""
    remove_tree(output, quiet=True)
    output.mkdir(parents=True)
    first = _next(ray, gen, cancelled)
    if first is None:
        return "the Ray task ended without a reply"
    reply = ray.get(first)
    del first
    if isinstance(reply, str) or reply.output is None or reply.output.odd is not None:
        return reply
    out = reply.output
    tar = output.with_name(output.name + ".tar")
    got = 0
    try:
        with open(tar, "wb") as f:
            while (ref := _next(ray, gen, cancelled)) is not None:
                chunk = ray.get(ref)
                del ref   # Ray frees the chunk once nothing here holds it
                got += len(chunk)
                if got > out.size or got > limit:
                    _stop(ray, gen)
                    return reply._replace(output=out._replace(odd=f"sent more than the {out.size} bytes it announced"))
                f.write(chunk)
        if got != out.size:
            return reply._replace(output=out._replace(odd=f"came back incomplete ({got} of {out.size} bytes)"))
        why = unpack(tar, output, limit)
    finally:
        tar.unlink(missing_ok=True)
    return reply if why is None else reply._replace(output=out._replace(odd=why))


def _next(ray: Any, gen: Any, cancelled: Callable[[], bool]) -> Any:
    """The next object ref of `gen`, or None at its end; checking `cancelled` meanwhile."""
    while True:
        if cancelled():
            raise Interrupted("interrupted")
        done, _ = ray.wait([gen], timeout=0.2)   # ready: its next item is, or it has ended
        if done:
            try:
                return next(gen)
            except StopIteration:
                return None


def _stop(ray: Any, gen: Any) -> None:
    try:
        ray.cancel(gen)
    except Exception:   # it has ended already
        pass


def unpack(tar: Path, into: Path, limit: int) -> str | None:
    """`tar` into `into` (an empty folder), or why not: a member that is not a regular file or
    folder, that would land outside `into`, or more than `limit` bytes in all. (The node packed
    only such; this is said again here, where the score will read them.)"""
    total = 0
    with tarfile.open(tar, "r:") as t:
        for m in t:
            name = os.path.normpath(m.name)
            if name.startswith(("/", "..")) or not (m.isreg() or m.isdir()):
                return f"holds {m.name!r}, not a regular file or folder inside it"
            total += m.size
            if total > limit:
                return f"holds more than parallel.max_output_mb ({limit / MB:g})"
            if m.isdir():
                (into / name).mkdir(parents=True, exist_ok=True)
                continue
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            src = t.extractfile(m)
            assert src is not None
            with src, open(into / name, "xb") as dst:
                while block := src.read(1 << 20):
                    dst.write(block)
    return None
