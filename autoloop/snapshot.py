"""What is really on disk: a snapshot of a tree taken by walking it ourselves.

git can be blinded (ignore rules, assume-unchanged, skip-worktree, a tampered index), so the
change set of a cycle is computed from lstat + content hashes of *every* entry — tracked,
untracked and ignored — never from what git reports. Hashes are cached by stat identity
(inode, size, mtime, ctime; ctime cannot be set from user space), so an unchanged tree costs a
walk of lstat calls and no reads.
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping


# Timestamps tick coarsely (a jiffy on Linux; seconds on some filesystems). A file modified this
# close to the moment we hashed it may change again without its stat data changing.
_RACY_NS = 100_000_000


@dataclass(frozen=True)
class Entry:
    kind: str            # "f" file, "l" symlink, "d" directory, "o" other (fifo, socket, device)
    mode: int            # permission bits (st_mode & 0o7777)
    digest: str = ""     # content hash for files, link target for symlinks
    size: int = 0
    nlink: int = 1


Snapshot = Mapping[str, Entry]


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
    """Walks one tree; keeps the stat→hash cache between calls."""

    def __init__(self, root: Path, skip_top: Iterable[str] = (".git",)) -> None:
        self.root = root
        self.skip_top = frozenset(skip_top)
        # rel -> (stat identity, digest, when it was hashed)
        self._cache: dict[str, tuple[tuple[int, int, int, int], str, int]] = {}

    def take(self) -> dict[str, Entry]:
        out: dict[str, Entry] = {}
        seen: set[str] = set()
        self._walk(str(self.root), "", out, seen)
        # forget hashes of paths that are gone, so the cache never outgrows the tree
        for gone in set(self._cache) - seen:
            del self._cache[gone]
        return out

    def _walk(self, abs_dir: str, rel_dir: str, out: dict[str, Entry], seen: set[str]) -> None:
        try:
            it = os.scandir(abs_dir)
        except OSError:
            # unreadable directory (chmod 000): still a state we must see and undo
            out[rel_dir or "."] = Entry("o", 0, "unreadable")
            return
        with it:
            entries = list(it)
        for e in entries:
            rel = f"{rel_dir}/{e.name}" if rel_dir else e.name
            if not rel_dir and e.name in self.skip_top:
                continue
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            mode = st.st_mode
            if stat.S_ISDIR(mode):
                out[rel] = Entry("d", stat.S_IMODE(mode))
                self._walk(e.path, rel, out, seen)
            elif stat.S_ISLNK(mode):
                try:
                    target = os.readlink(e.path)
                except OSError:
                    target = "?"
                out[rel] = Entry("l", stat.S_IMODE(mode), target)
            elif stat.S_ISREG(mode):
                seen.add(rel)
                out[rel] = Entry("f", stat.S_IMODE(mode), self._digest(rel, e.path, st),
                                 st.st_size, st.st_nlink)
            else:
                out[rel] = Entry("o", stat.S_IMODE(mode), f"type {stat.S_IFMT(mode):o}")

    def _digest(self, rel: str, path: str, st: os.stat_result) -> str:
        key = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        hit = self._cache.get(rel)
        # like git's "racy" index entries: trust a cached hash only if the file had last changed
        # well before we hashed it, so a later change must have moved its ctime
        if hit is not None and hit[0] == key and max(st.st_mtime_ns, st.st_ctime_ns) + _RACY_NS < hit[2]:
            return hit[1]
        hashed_at = time.time_ns()
        h = hashlib.blake2b(digest_size=20)
        try:
            with open(path, "rb") as f:
                while chunk := f.read(1 << 20):
                    h.update(chunk)
        except OSError:
            return "unreadable"
        digest = h.hexdigest()
        self._cache[rel] = (key, digest, hashed_at)
        return digest


def diff(before: Snapshot, after: Snapshot) -> list[Change]:
    """Every path whose entry differs. Directories count only when added, removed or re-typed
    (their mode is restored but is not a change git could record)."""
    changes: list[Change] = []
    for path in sorted(set(before) | set(after)):
        b, a = before.get(path), after.get(path)
        if b == a:
            continue
        if b is None:
            changes.append(Change(path, "added", None, a))
        elif a is None:
            changes.append(Change(path, "deleted", b, None))
        elif a.kind != b.kind:
            changes.append(Change(path, "type", b, a))
        elif a.digest != b.digest or a.size != b.size:
            changes.append(Change(path, "modified", b, a))
        elif a.mode != b.mode:
            changes.append(Change(path, "mode", b, a))
        elif a.nlink != b.nlink:
            changes.append(Change(path, "modified", b, a))  # a hard link appeared or went
    return changes
