"""Watching what lies outside the generator's work tree.

Without a sandbox the generator runs as you and can write anywhere you can. Inside its work tree
autoloop sees everything (autoloop.snapshot); git's own files and program.md are kept byte for
byte (autoloop.sentinel). This module watches, cheaply, the other places a cheating generator
would write to influence a measurement or the run:

- the verification trees (`<tag>.verify-N`, next to the work tree): a file planted there by
  absolute path would be measured;
- your checkout (the run reads program.md from it and writes the journal next to it);
- the site-packages folders of the Pythons that guards and the verifier run — a `.pth` file or
  a `sitecustomize`/`usercustomize` module there runs code at every interpreter start;
- autoloop's own code, and the read-only `data` of program.md.

It compares `lstat` data only — inode, size, mode, mtime and ctime (which user space cannot
set back) — so watching costs one walk, never a read. Folders larger than `cap` entries are
watched in part (the first `cap` entries in walk order); site-packages folders only at their
top level, where interpreters look for `.pth` files and the `*customize` modules.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from autoloop.snapshot import _RACY_NS
from autoloop.proc import run_captured

Stat = tuple  # (kind, mode, size, mtime_ns, ctime_ns, ino, link target)


def lstat_entry(path: str, dir_times: bool = False) -> Stat | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    kind = "l" if stat.S_ISLNK(st.st_mode) else "d" if stat.S_ISDIR(st.st_mode) else \
        "f" if stat.S_ISREG(st.st_mode) else "o"
    target = ""
    if kind == "l":
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
    if kind == "d" and not dir_times:  # a folder's times change with every entry: its entries are compared
        return (kind, stat.S_IMODE(st.st_mode), 0, 0, 0, st.st_ino, "")
    return (kind, stat.S_IMODE(st.st_mode), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, target)


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)
_S_IFMT, _S_IFDIR, _S_IFREG, _S_IFLNK = 0o170000, stat.S_IFDIR, stat.S_IFREG, stat.S_IFLNK


def _name(entry: os.DirEntry) -> str:  # type: ignore[type-arg]
    return entry.name


@dataclass
class StatTree:
    """A stat-only picture of a file or folder tree."""

    root: Path
    label: str
    skip: frozenset[str] = frozenset()   # relative paths not to look at (or under)
    top_only: bool = False
    cap: int = 100_000
    dir_times: bool = False              # the root folder's own mtime/ctime count (an entry came or went)
    # Carried: a capture starts from the picture taken last (by a Watch's comparison, or by a
    # measurement in a verification tree) rather than walking the tree again. The watches of a
    # cycle then follow each other without a gap — what changes between the generator's check
    # and the first measurement, or between cycles, is seen by the next comparison — and each
    # place is walked half as often. Whoever changes a carried tree itself (a quarantine) drops
    # `latest`, so the next capture walks it.
    carried: bool = False
    latest: dict[str, Stat] | None = field(default=None, compare=False, repr=False)
    of_verification: bool = field(default=False, compare=False)   # a verification tree (see below)

    @classmethod
    def verification(cls, path: Path) -> "StatTree":
        """A verification tree: every entry but .git, however many (its picture is also the
        proof that the tree holds a commit: Worktree.differs_from)."""
        return cls(path, "a verification tree", skip=frozenset({".git"}), cap=sys.maxsize, carried=True,
                   of_verification=True)

    def take(self) -> dict[str, Stat]:
        out = self._take()
        if self.carried:
            self.latest = out
        return out

    def _take(self) -> dict[str, Stat]:
        out: dict[str, Stat] = {}
        top = lstat_entry(str(self.root), self.dir_times)
        if top is None:
            return out
        out[""] = top
        if top[0] != "d":
            return out
        # Taken several times a cycle (site folders, verification trees): each folder is opened
        # once and its entries are stat'ed relative to it, so the kernel resolves one name per
        # entry rather than the whole path (the same entries and values as lstat by path).
        todo = [("", str(self.root))]
        skip, cap, top_only = self.skip, self.cap, self.top_only
        while todo and len(out) < cap:
            rel_dir, abs_dir = todo.pop()
            try:
                fd = os.open(abs_dir, _DIR_FLAGS)
            except OSError:
                out[rel_dir + "/?"] = ("o", 0, 0, 0, 0, 0, "unreadable")
                continue
            try:
                try:
                    with os.scandir(fd) as it:
                        # in name order when only part is watched: the same part every time
                        entries = list(it) if cap == sys.maxsize else sorted(it, key=_name)
                except OSError:
                    out[rel_dir + "/?"] = ("o", 0, 0, 0, 0, 0, "unreadable")
                    continue
                prefix = rel_dir + "/" if rel_dir else ""
                for e in entries:
                    name = e.name
                    rel = prefix + name
                    if skip and rel in skip:
                        continue
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    mode = st.st_mode
                    fmt = mode & _S_IFMT
                    if fmt == _S_IFDIR:
                        out[rel] = ("d", mode & 0o7777, 0, 0, 0, st.st_ino, "")
                        if not top_only:
                            todo.append((rel, f"{abs_dir}/{name}"))
                    elif fmt == _S_IFREG:
                        out[rel] = ("f", mode & 0o7777, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, "")
                    else:
                        target = ""
                        if fmt == _S_IFLNK:
                            try:
                                target = os.readlink(name, dir_fd=fd)
                            except OSError:
                                target = "?"
                        out[rel] = ("l" if fmt == _S_IFLNK else "o", mode & 0o7777, st.st_size,
                                    st.st_mtime_ns, st.st_ctime_ns, st.st_ino, target)
                    if len(out) >= cap:
                        break
            finally:
                os.close(fd)
        return out


@dataclass
class NameTree(StatTree):
    """A folder's own times and the names in it, nothing more: cheap enough for every folder on
    PATH (a new `python3` in ~/.local/bin shows as a new name).

    A folder's mtime and ctime change whenever an entry is added, removed or renamed, and ctime
    cannot be set back from user space; so while they stay as they were, the names are the ones
    listed last time and only the folder is stat'ed (/usr/bin holds a thousand names and is
    looked at several times a cycle). A listing made within _RACY_NS of the folder's last
    change is not reused: a change in the same clock tick would not move the times.
    """

    def __post_init__(self) -> None:
        self._listed: tuple[Stat, float, list[str]] | None = None

    def _take(self) -> dict[str, Stat]:
        top = lstat_entry(str(self.root), dir_times=True)
        if top is None:
            self._listed = None
            return {}
        out: dict[str, Stat] = {"": top}
        listed = self._listed
        if listed is not None and listed[0] == top and max(top[3], top[4]) + _RACY_NS < listed[1]:
            names = listed[2]
        else:
            listed_at = time.time_ns()
            try:
                names = os.listdir(self.root)
            except OSError:
                names = []
            self._listed = (top, listed_at, names)
        out.update((name, ("n",)) for name in names)
        return out


def changed_paths(before: dict[str, Stat], after: dict[str, Stat]) -> list[str]:
    out = []
    for rel in sorted(set(before) | set(after)):
        if before.get(rel) != after.get(rel):
            out.append(rel or ".")
    return out


@dataclass
class Changed:
    """What changed in one watched tree since the capture."""

    tree: StatTree
    paths: list[str]        # every path that differs ("." for the root itself)
    new: list[str]          # of those, the ones that did not exist at the capture


class Watch:
    """Several StatTrees, captured together and compared together."""

    def __init__(self, trees: Iterable[StatTree]) -> None:
        self.trees = list(trees)
        self._saved: dict[int, dict[str, Stat]] | None = None

    def capture(self) -> None:
        self._saved = {i: _current(t) for i, t in enumerate(self.trees)}

    def add(self, tree: StatTree) -> None:
        """Watch one more tree, from its state now."""
        self.trees.append(tree)
        if self._saved is not None:
            self._saved[len(self.trees) - 1] = _current(tree)

    def refresh(self, tree: StatTree | None) -> None:
        """Take `tree` as it is now as its captured state (a change of our own)."""
        for i, t in enumerate(self.trees):
            if t is tree and self._saved is not None and i in self._saved:
                self._saved[i] = t.take()

    def saved(self, tree: StatTree) -> dict[str, Stat] | None:
        """The picture of `tree` the last capture holds."""
        for i, t in enumerate(self.trees):
            if t is tree and self._saved is not None:
                return self._saved.get(i)
        return None

    def changes(self) -> list[Changed]:
        # Comparing against nothing would call every existing file new — and new files in a
        # site folder are acted on — so a missing capture is a bug, never "all changed".
        if self._saved is None:
            raise RuntimeError("internal error: Watch.changes() before capture()")
        out = []
        for i, t in enumerate(self.trees):
            if i not in self._saved:
                continue
            before = self._saved[i]
            paths = changed_paths(before, t.take())
            if paths:
                out.append(Changed(t, paths, [p for p in paths if p != "." and p not in before]))
        return out


def _current(tree: StatTree) -> dict[str, Stat]:
    """The tree as it is now: a carried tree's last picture, else a new one."""
    if tree.carried and tree.latest is not None:
        return tree.latest
    return tree.take()


# ---- the site folders of the interpreters guards and the verifier run ---------------------


_SITE_QUERY = ("import json, site, sys\n"
               "dirs = list(getattr(site, 'getsitepackages', lambda: [])())\n"
               "user = site.getusersitepackages() if hasattr(site, 'getusersitepackages') else None\n"
               "print(json.dumps(dirs + ([user] if user else [])))\n")


def site_dirs(interpreters: Sequence[str], env: dict[str, str]) -> list[Path]:
    """The site-packages folders (system, venv and user) of this Python and of `interpreters`
    (names looked up on env's PATH, or paths; each asked once, ~20 ms). Missing folders are
    included: creating one (a user site) is a change too."""
    out: list[Path] = []

    def add(paths: Iterable[str]) -> None:
        for p in paths:
            real = Path(os.path.realpath(p))
            if real not in out:
                out.append(real)

    import site
    add(list(site.getsitepackages()) + [site.getusersitepackages()])
    seen = {os.path.realpath(sys.executable)}
    for name in interpreters:
        exe = name if os.path.isabs(name) else _which(name, env.get("PATH", os.defpath))
        if exe is None or os.path.realpath(exe) in seen:
            continue
        seen.add(os.path.realpath(exe))
        try:
            res = run_captured([exe, "-I", "-c", _SITE_QUERY], timeout=20, env=env)
            add(json.loads(res.stdout.decode().strip().splitlines()[-1]))
        except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
            continue
    return out


def _which(name: str, path: str) -> str | None:
    import shutil
    return shutil.which(name, path=path)


INJECTING = (".pth",)
CUSTOMIZE = ("sitecustomize", "usercustomize")


def is_injection(name: str) -> bool:
    """A top-level entry of a site folder that runs code at every interpreter start."""
    base = name.split("/")[0]
    stem = base.split(".")[0]
    return base.endswith(INJECTING) or stem in CUSTOMIZE
