"""Watching, by lstat data only (never a read), what lies outside the generator's work tree: the
verification trees, your checkout, the site folders of the measuring Pythons (a `.pth` or a
`*customize` module there runs code at every interpreter start), autoloop's own code and the
read-only data. ctime cannot be set back from user space, so equal entries mean no change."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from autoloop.process.running import run_captured
from autoloop.base.walk import UNREADABLE, Entry, StatCache, entry_of, lstat_entry, walk

_NAME = Entry("n", 0)       # a NameTree's entries: the name alone
_SITE_QUERY = ("import json, site\n"
               "print(json.dumps([*getattr(site, 'getsitepackages', lambda: [])(), site.getusersitepackages()]))")
_SITE_TIMEOUT_S = 30


@dataclass
class StatTree:
    """A stat-only picture of a file or folder tree; one larger than `cap` entries is watched
    in part (the first `cap` in name order)."""

    root: Path
    label: str
    skip: frozenset[str] = frozenset()   # relative paths not to look at (or under)
    top_only: bool = False               # site folders: where interpreters look for .pth files
    cap: int = 100_000
    dir_times: bool = False              # the root folder's own times count (an entry came or went)
    # Carried: a capture starts from the last picture (a Watch's comparison, or a measurement's
    # proof of its verification tree) instead of walking again, so the watches of a cycle follow
    # each other without a gap. Whoever changes a carried tree itself (a quarantine) drops `latest`.
    carried: bool = False
    latest: dict[str, Entry] | None = field(default=None, compare=False, repr=False)
    of_verification: bool = field(default=False, compare=False)

    @classmethod
    def verification(cls, path: Path) -> StatTree:
        """Every entry but .git (the picture is also the proof that the tree holds a commit)."""
        return cls(path, "a verification tree", skip=frozenset({".git"}), cap=sys.maxsize, carried=True,
                   of_verification=True)

    def take(self) -> dict[str, Entry]:
        out = self._take()
        if self.carried:
            self.latest = out
        return out

    def _take(self) -> dict[str, Entry]:
        top = lstat_entry(str(self.root), self.dir_times)
        out = {} if top is None else {"": top}
        if top is None or top.kind != "d" or self.cap <= len(out):
            return out
        for rel, _, entry in walk(str(self.root), skip=self.skip, top_only=self.top_only,
                                  ordered=self.cap != sys.maxsize, limit=self.cap - 1,
                                  make=entry_of):   # a folder's times only for the top, as lstat_entry above
            out[rel + "/?" if entry is None else rel] = UNREADABLE if entry is None else entry
        return out


@dataclass
class NameTree(StatTree):
    """A folder's own times and the names in it: cheap enough for every folder on PATH (a new
    `python3` in ~/.local/bin is a new name). The listing stands while the folder's stat does."""

    def __post_init__(self) -> None:
        self._listing: StatCache[list[str]] = StatCache()

    def _take(self) -> dict[str, Entry]:
        root = str(self.root)
        try:
            st = os.lstat(root)
        except OSError:
            return {}
        at = time.time_ns()
        names = self._listing.get(root, st)
        if names is None:
            try:
                names = os.listdir(root)
            except OSError:
                names = []
            self._listing.put(root, st, names, at)
        return {"": entry_of(st, root, dir_times=True), **dict.fromkeys(names, _NAME)}


def changed_paths(before: dict[str, Entry], after: dict[str, Entry]) -> list[str]:
    return [rel or "." for rel in sorted(before.keys() | after.keys()) if before.get(rel) != after.get(rel)]


@dataclass
class Changed:
    tree: StatTree
    paths: list[str]        # every path that differs ("." for the root itself)
    new: list[str]          # of those, the ones that did not exist at the capture


class Watch:
    """Several StatTrees, captured together and compared together."""

    def __init__(self, trees: Iterable[StatTree]) -> None:
        self.trees = list(trees)
        self._saved: dict[int, dict[str, Entry]] | None = None   # by id() of a tree in self.trees

    def capture(self) -> None:
        self._saved = {id(t): _current(t) for t in self.trees}

    def add(self, tree: StatTree) -> None:
        """Watch one more tree, from its state now."""
        self.trees.append(tree)
        if self._saved is not None:
            self._saved[id(tree)] = _current(tree)

    def refresh(self, tree: StatTree | None) -> None:
        """Take `tree` as it is now as its captured state (a change of our own)."""
        if tree is not None and self._saved is not None and id(tree) in self._saved:
            self._saved[id(tree)] = tree.take()

    def saved(self, tree: StatTree) -> dict[str, Entry] | None:
        return None if self._saved is None else self._saved.get(id(tree))

    def changes(self) -> list[Changed]:
        # against no capture every file would be new (and new files in a site folder are acted on)
        if self._saved is None:
            raise RuntimeError("internal error: Watch.changes() before capture()")
        out = []
        for t in self.trees:
            before = self._saved.get(id(t))
            paths = [] if before is None else changed_paths(before, t.take())
            if paths:
                out.append(Changed(t, paths, [p for p in paths if p != "." and p not in before]))  # type: ignore[operator]
        return out


def _current(tree: StatTree) -> dict[str, Entry]:
    return tree.latest if tree.carried and tree.latest is not None else tree.take()


def site_folders(python: str, env: dict[str, str] | None = None) -> list[Path]:
    """The site-packages folders (system, venv, user; existing or not) `python` reads."""
    try:
        res = run_captured([python, "-I", "-c", _SITE_QUERY], env=env, timeout=_SITE_TIMEOUT_S)
        return [Path(p) for p in json.loads(res.stdout.decode().strip().splitlines()[-1]) if isinstance(p, str)]
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return []


def site_dirs(interpreters: Sequence[str], env: dict[str, str]) -> list[Path]:
    """The site folders of this Python and of `interpreters` (names on env's PATH, or paths),
    resolved; missing ones included: creating one (a user site) is a change too."""
    import site

    out = dict.fromkeys(Path(os.path.realpath(p)) for p in [*site.getsitepackages(), site.getusersitepackages()])
    seen = {os.path.realpath(sys.executable)}
    for name in interpreters:
        exe = name if os.path.isabs(name) else shutil.which(name, path=env.get("PATH", os.defpath))
        if exe is not None and os.path.realpath(exe) not in seen:
            seen.add(os.path.realpath(exe))
            out.update(dict.fromkeys(Path(os.path.realpath(p)) for p in site_folders(exe, env)))
    return list(out)


def is_injection(name: str) -> bool:
    """A top-level entry of a site folder that runs code at every interpreter start."""
    base = name.split("/")[0]
    return base.endswith(".pth") or base.split(".")[0] in ("sitecustomize", "usercustomize")
