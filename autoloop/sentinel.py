"""Watch a handful of files and folders the generator must not touch, and put them back.

Used for what git itself obeys (config, hooks, info/, alternates, the worktree's admin files)
and for the user-side files of a run (program.md). These are small, so we keep their bytes.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path
from typing import Iterable

_MAX_BYTES = 4 << 20   # a hooks folder or config bigger than this is not something we back up


Saved = dict[str, "tuple[bytes, int] | str | int"]
# rel path -> (bytes, mode) for a file, link target (str) for a symlink, mode (int) for a folder;
# "" is the watched path itself.


def _read_tree(path: Path) -> Saved:
    """The exact state of `path` (a file, a folder tree, a symlink); {} when it does not exist."""
    if path.is_symlink():
        return {"": os.readlink(path)}
    if not path.exists():
        return {}
    if path.is_file():
        return {"": (_read(path), stat.S_IMODE(path.stat().st_mode))}
    out: Saved = {"": stat.S_IMODE(path.lstat().st_mode)}
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            full = Path(dirpath, name)
            rel = full.relative_to(path).as_posix()
            st = full.lstat()
            if stat.S_ISLNK(st.st_mode):
                out[rel] = os.readlink(full)
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = stat.S_IMODE(st.st_mode)
            else:
                out[rel] = (_read(full), stat.S_IMODE(st.st_mode))
    return out


def _read(path: Path) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(_MAX_BYTES + 1)
    except OSError:
        return b"\0unreadable"


class Sentinel:
    """Remembers the exact state of some paths; reports and undoes any change to them."""

    def __init__(self, paths: Iterable[Path], *, label: dict[Path, str] | None = None) -> None:
        self.paths = list(paths)
        self.label = label or {}
        self._state: dict[Path, Saved] = {}

    def capture(self) -> None:
        self._state = {p: _read_tree(p) for p in self.paths}

    def changed(self) -> list[str]:
        """Human names of the watched paths that differ from the capture."""
        out = []
        for p, saved in self._state.items():
            if _read_tree(p) != saved:
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
