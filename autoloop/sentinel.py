"""Watch a handful of files and folders the generator must not touch, and put them back.

Used for what git itself obeys (config, hooks, info/, alternates, the worktree's admin files)
and for the user-side files of a run (program.md). These are small, so we keep their bytes.
"""

from __future__ import annotations

import os
import shutil
import stat
import time
from pathlib import Path
from typing import Iterable

_MAX_BYTES = 4 << 20   # a hooks folder or config bigger than this is not something we back up


Saved = dict[str, "tuple[bytes, int] | str | int"]
# rel path -> (bytes, mode) for a file, link target (str) for a symlink, mode (int) for a folder;
# "" is the watched path itself.


# full path -> (stat identity, bytes, trusted): a file whose identity is unchanged since it was
# read, and had last changed well before that read, still holds the same bytes (as in the
# snapshot's hash cache: ctime cannot be set from user space). The hooks folder alone is a dozen
# files, read twice a cycle.
_Cache = dict[str, "tuple[tuple[int, int, int, int, int], bytes, bool]"]
_RACY_NS = 100_000_000


def _read_tree(path: Path, cache: _Cache | None = None) -> Saved:
    """The exact state of `path` (a file, a folder tree, a symlink); {} when it does not exist."""
    if path.is_symlink():
        return {"": os.readlink(path)}
    if not path.exists():
        return {}
    if path.is_file():
        return {"": (_read(path, cache), stat.S_IMODE(path.stat().st_mode))}
    out: Saved = {"": stat.S_IMODE(path.lstat().st_mode)}
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, path).replace(os.sep, "/")
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = os.readlink(full)
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = stat.S_IMODE(st.st_mode)
            else:
                out[rel] = (_read(full, cache, st), stat.S_IMODE(st.st_mode))
    return out


def _read(path: Path | str, cache: _Cache | None = None, st: os.stat_result | None = None) -> bytes:
    key = str(path)
    if cache is not None:
        try:
            st = st or os.lstat(key)
            hit = cache.get(key)
            if hit is not None and hit[2] and hit[0] == _ident(st):
                return hit[1]
        except OSError:
            pass
    at = time.time_ns()
    try:
        # O_NONBLOCK: a FIFO planted here must not hang us (it reads as empty)
        fd = os.open(key, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return b"\0unreadable"
    try:
        with open(fd, "rb", closefd=False) as f:
            data = f.read(_MAX_BYTES + 1)
        if cache is not None:
            fst = os.fstat(fd)
            if stat.S_ISREG(fst.st_mode):
                cache[key] = (_ident(fst), data, max(fst.st_mtime_ns, fst.st_ctime_ns) + _RACY_NS < at)
        return data
    except OSError:
        return b"\0unreadable"
    finally:
        os.close(fd)


def _ident(st: os.stat_result) -> tuple[int, int, int, int, int]:
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_dev)


class Sentinel:
    """Remembers the exact state of some paths; reports and undoes any change to them."""

    def __init__(self, paths: Iterable[Path], *, label: dict[Path, str] | None = None) -> None:
        self.paths = list(paths)
        self.label = label or {}
        self._state: dict[Path, Saved] = {}
        self._cache: _Cache = {}

    def capture(self) -> None:
        if len(self._cache) > 10_000:
            self._cache = {}  # files come and go in a hooks folder: keep the cache bounded
        self._state = {p: _read_tree(p, self._cache) for p in self.paths}

    def changed(self) -> list[str]:
        """Human names of the watched paths that differ from the capture."""
        out = []
        for p, saved in self._state.items():
            if _read_tree(p, self._cache) != saved:
                out.append(self.label.get(p, str(p)))
        return out

    def restore(self) -> None:
        for p, saved in self._state.items():
            if _read_tree(p) == saved:
                continue
            _remove(p)
            folders: list[tuple[Path, int]] = []
            # parents come before children in the saved order (os.walk is top-down)
            for rel, content in saved.items():
                target = p / rel if rel else p
                target.parent.mkdir(parents=True, exist_ok=True)
                if isinstance(content, int):
                    target.mkdir(exist_ok=True)
                    folders.append((target, content))
                elif isinstance(content, str):
                    os.symlink(content, target)
                else:
                    data, mode = content
                    with open(target, "wb") as f:
                        f.write(data)
                    os.chmod(target, mode)
            for folder, mode in reversed(folders):  # modes last: a read-only folder is filled first
                os.chmod(folder, mode)


def _remove(p: Path) -> None:
    if p.is_symlink() or p.is_file():
        p.unlink()
    elif p.is_dir():
        remove_tree(p)


def remove_tree(p: Path) -> None:
    """rmtree that first gives back the permissions a generator may have taken away."""

    def onerror(func, path, _exc):  # type: ignore[no-untyped-def]
        parent = os.path.dirname(path)
        try:
            os.chmod(parent, 0o700)
            if not os.path.islink(path):
                os.chmod(path, 0o700)
        except OSError:
            pass
        func(path)

    shutil.rmtree(p, onerror=onerror)
