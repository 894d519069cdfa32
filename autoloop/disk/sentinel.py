"""A handful of files and folders the generator must not touch — what git itself obeys (config,
hooks, info/, alternates, a worktree's admin files) and program.md — kept byte for byte: a change
is reported and undone."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path
from typing import Iterable, NamedTuple, Union

from autoloop.base.walk import StatCache, remove_tree, walk

_MAX_BYTES = 4 << 20     # a hooks folder or config bigger than this is not something we back up
_MAX_CACHED = 10_000     # files come and go in a hooks folder: the cache is dropped beyond this


class File(NamedTuple):
    data: bytes
    mode: int


# rel path ("" for the watched path itself) -> a file, a symlink's target, or a folder's mode
Saved = dict[str, Union[File, str, int]]


def _read_tree(path: Path, cache: StatCache[bytes] | None = None) -> Saved:
    """The exact state of `path` (a file, a folder tree, a symlink); {} when it does not exist."""
    try:
        st = os.lstat(path)
    except OSError:
        return {}
    out: Saved = {"": _state(str(path), st, cache)}
    if stat.S_ISDIR(st.st_mode):
        for rel, full, sub in walk(str(path)):
            if sub is not None:   # parents come before children: restore() relies on it
                out[rel] = _state(full, sub, cache)
    return out


def _state(path: str, st: os.stat_result, cache: StatCache[bytes] | None) -> File | str | int:
    if stat.S_ISLNK(st.st_mode):
        return os.readlink(path)
    if stat.S_ISDIR(st.st_mode):
        return stat.S_IMODE(st.st_mode)
    return File(_read(path, st, cache), stat.S_IMODE(st.st_mode))


def _read(path: str, st: os.stat_result, cache: StatCache[bytes] | None) -> bytes:
    if cache is not None and (hit := cache.get(path, st)) is not None:
        return hit
    at = time.time_ns()
    try:
        # O_NONBLOCK: a FIFO planted here must not hang us (it reads as empty)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return b"\0unreadable"
    try:
        with open(fd, "rb", closefd=False) as f:
            data = f.read(_MAX_BYTES + 1)
        fst = os.fstat(fd)
        if cache is not None and stat.S_ISREG(fst.st_mode):
            cache.put(path, fst, data, at)
        return data
    except OSError:
        return b"\0unreadable"
    finally:
        os.close(fd)


class Sentinel:
    """Remembers the exact state of some paths; reports and undoes any change to them."""

    def __init__(self, paths: Iterable[Path], *, label: dict[Path, str] | None = None) -> None:
        self.paths = list(paths)
        self.label = label or {}
        self._state: dict[Path, Saved] = {}
        self._cache: StatCache[bytes] = StatCache()

    def capture(self) -> None:
        if len(self._cache.known) > _MAX_CACHED:
            self._cache = StatCache()
        self._state = {p: _read_tree(p, self._cache) for p in self.paths}

    def changed(self) -> list[str]:
        """Human names of the watched paths that differ from the capture."""
        return [self.label.get(p, str(p)) for p, saved in self._state.items() if _read_tree(p, self._cache) != saved]

    def restore(self) -> None:
        for p, saved in self._state.items():
            if _read_tree(p) == saved:
                continue
            remove_tree(p)
            folders: list[tuple[Path, int]] = []
            for rel, content in saved.items():
                target = p / rel if rel else p
                target.parent.mkdir(parents=True, exist_ok=True)
                if isinstance(content, int):
                    target.mkdir(exist_ok=True)
                    folders.append((target, content))
                elif isinstance(content, str):
                    os.symlink(content, target)
                else:
                    target.write_bytes(content.data)
                    os.chmod(target, content.mode)
            for folder, mode in reversed(folders):   # modes last: a read-only folder is filled first
                os.chmod(folder, mode)
