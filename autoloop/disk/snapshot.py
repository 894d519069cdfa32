"""What is really on disk in a work tree: lstat and a content hash of every entry — tracked,
untracked and ignored — because git can be blinded (ignore rules, assume-unchanged,
skip-worktree, a tampered index). Hashes are cached by stat identity, so an unchanged tree
costs a walk of lstat calls and no reads."""

from __future__ import annotations

import hashlib
import os
import stat
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Collection, Iterable, Mapping

from autoloop.base.walk import RACY_NS, UNREADABLE, Entry, StatCache, ident_of, kind_of, read_link, walk

__all__ = ["RACY_NS", "Change", "Entry", "Snapshot", "Snapshotter", "diff"]

Snapshot = Mapping[str, Entry]
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Change:
    path: str
    what: str            # added | deleted | modified | mode | type
    before: Entry | None
    after: Entry | None

    def describe(self) -> str:
        if self.what == "mode" and self.before and self.after:
            return f"{self.path} (mode {self.before.mode:o} -> {self.after.mode:o})"
        return f"{self.path} ({self.what})"


class Snapshotter:
    """Walks one tree; keeps the hash cache between calls."""

    def __init__(self, root: Path, skip_top: Iterable[str] = (".git",)) -> None:
        self.root = root
        self.skip_top = frozenset(skip_top)
        self._cache: StatCache[Entry] = StatCache()

    def take(self) -> dict[str, Entry]:
        out = self._under(str(self.root), "", self.skip_top)
        self._cache.retain(out)   # paths that are gone are forgotten: it never outgrows the tree
        return out

    def take_paths(self, paths: Iterable[str]) -> dict[str, Entry]:
        """Entries of just these paths (those that exist) and of everything under the ones that
        are folders: the entries a full walk would give them."""
        out: dict[str, Entry] = {}
        for rel in sorted(set(paths)):
            if rel in out or rel.split("/", 1)[0] in self.skip_top:
                continue
            full = os.path.join(self.root, rel)
            try:
                st = os.lstat(full)
            except OSError:
                self._cache.known.pop(rel, None)
                continue
            out[rel] = self._entry(rel, full, st)
            if stat.S_ISDIR(st.st_mode):
                out.update(self._under(full, rel + "/"))
        return out

    def _under(self, path: str, prefix: str, skip: Collection[str] = ()) -> dict[str, Entry]:
        out: dict[str, Entry] = {}
        known = self._cache.known
        for rel, full, st in walk(path, skip=skip):
            if st is None:
                out[prefix + rel if rel else prefix[:-1] or "."] = UNREADABLE
                continue
            rel = prefix + rel
            # StatCache.get inline: an unchanged file, the common case, costs its lstat and a lookup
            hit = known.get(rel)
            out[rel] = hit.value if hit is not None and hit.ident == ident_of(st) else self._entry(rel, full, st)
        return out

    def _entry(self, rel: str, full: str, st: os.stat_result) -> Entry:
        kind, mode = kind_of(st.st_mode), stat.S_IMODE(st.st_mode)
        if kind == "f":
            hit = self._cache.get(rel, st)
            return hit if hit is not None else self._hash(rel, full, st, mode)
        if kind == "d":
            return _dir_entry(mode)
        if kind == "l":
            return Entry("l", mode, digest=read_link(full))
        return Entry("o", mode, digest=f"type {stat.S_IFMT(st.st_mode):o}")

    def _hash(self, rel: str, full: str, st: os.stat_result, mode: int) -> Entry:
        at = time.time_ns()
        h = hashlib.blake2b(digest_size=20)
        try:
            with open(full, "rb") as f:
                while chunk := f.read(_CHUNK):
                    h.update(chunk)
        except OSError:
            self._cache.known.pop(rel, None)
            return Entry("f", mode, st.st_size, digest="unreadable", nlink=st.st_nlink)
        return self._cache.put(rel, st, Entry("f", mode, st.st_size, digest=h.hexdigest(), nlink=st.st_nlink), at)


@lru_cache(maxsize=None)
def _dir_entry(mode: int) -> Entry:
    return Entry("d", mode)   # one object per mode: diff's identity test then skips folders


def diff(before: Snapshot, after: Snapshot) -> list[Change]:
    """Every path whose entry differs, sorted by path. Folders count only when added, removed,
    re-typed or re-moded."""
    changes: list[Change] = []
    added = 0
    for path, a in after.items():
        b = before.get(path)
        if b is a or b == a:
            continue   # unchanged files keep their cached entry: the identity test is the common case
        if b is None:
            added += 1
            changes.append(Change(path, "added", None, a))
        elif a.kind != b.kind:
            changes.append(Change(path, "type", b, a))
        elif a.digest != b.digest or a.size != b.size:
            changes.append(Change(path, "modified", b, a))
        elif a.mode != b.mode:
            changes.append(Change(path, "mode", b, a))
        else:
            changes.append(Change(path, "modified", b, a))   # a hard link appeared or went
    if len(before) != len(after) - added:   # some paths of `before` are gone
        changes.extend(Change(path, "deleted", b, None) for path, b in before.items() if path not in after)
    changes.sort(key=lambda c: c.path)
    return changes
