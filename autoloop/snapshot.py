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
        # rel -> (stat identity, entry, trusted): `trusted` when the file had last changed well
        # before it was hashed, so the same identity later means the same bytes
        self._cache: dict[str, tuple[tuple[int, ...], Entry, bool]] = {}

    def take(self) -> dict[str, Entry]:
        out: dict[str, Entry] = {}
        cache: dict[str, tuple[tuple[int, ...], Entry, bool]] = {}
        self._walk(str(self.root), "", out, cache)
        # a fresh cache each time: hashes of paths that are gone are forgotten, so it never
        # outgrows the tree
        self._cache = cache
        return out

    def take_paths(self, paths: Iterable[str]) -> dict[str, Entry]:
        """Entries of just these paths (those that exist), and of everything under the ones
        that are folders: the same entries a full walk would give them."""
        out: dict[str, Entry] = {}
        cache = self._cache
        root = str(self.root)
        for rel in sorted(set(paths)):
            if rel in out or rel.split("/", 1)[0] in self.skip_top:
                continue
            full = os.path.join(root, rel)
            try:
                st = os.lstat(full)
            except OSError:
                cache.pop(rel, None)
                continue
            if stat.S_ISDIR(st.st_mode):
                out[rel] = _dir_entry(stat.S_IMODE(st.st_mode))
                self._walk(full, rel + "/", out, cache)
            else:
                out[rel] = self._entry(rel, full, st, cache)
        return out

    def _walk(self, abs_dir: str, prefix: str, out: dict[str, Entry],
              cache: dict[str, tuple[tuple[int, ...], Entry, bool]],
              parent_fd: int | None = None) -> None:
        # By descriptor: each lstat then makes the kernel look up one name, not the whole path
        # from / (the worktree sits deep under ~/.cache) — a good part of a walk's cost.
        try:
            if parent_fd is None:
                fd = os.open(abs_dir, _DIR_FLAGS)
            else:
                fd = os.open(abs_dir.rsplit("/", 1)[1], _DIR_FLAGS, dir_fd=parent_fd)
        except OSError:
            # unreadable directory (chmod 000): still a state we must see and undo
            out[prefix[:-1] or "."] = _UNREADABLE
            return
        try:
            try:
                with os.scandir(fd) as it:
                    entries = list(it)
            except OSError:
                out[prefix[:-1] or "."] = _UNREADABLE
                return
            old = self._cache
            skip = self.skip_top if not prefix else ()
            for e in entries:
                name = e.name
                if name in skip:
                    continue
                rel = prefix + name
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                mode = st.st_mode
                kind = mode & 0o170000
                if kind == _S_IFREG:
                    # the common case, kept short: an unchanged file costs one lstat and a lookup
                    key = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, mode, st.st_nlink)
                    hit = old.get(rel)
                    if hit is not None and hit[2] and hit[0] == key:
                        cache[rel] = hit
                        out[rel] = hit[1]
                    else:
                        out[rel] = self._file(rel, f"{abs_dir}/{name}", st, key, cache)
                elif kind == _S_IFDIR:
                    out[rel] = _dir_entry(mode & 0o7777)
                    self._walk(f"{abs_dir}/{name}", rel + "/", out, cache, fd)
                else:
                    out[rel] = self._entry(rel, f"{abs_dir}/{name}", st, cache)
        finally:
            os.close(fd)

    def _entry(self, rel: str, path: str, st: os.stat_result,
               cache: dict[str, tuple[tuple[int, ...], Entry, bool]]) -> Entry:
        mode = st.st_mode
        if stat.S_ISREG(mode):
            key = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, mode, st.st_nlink)
            hit = self._cache.get(rel)
            if hit is not None and hit[2] and hit[0] == key:
                cache[rel] = hit
                return hit[1]
            return self._file(rel, path, st, key, cache)
        if stat.S_ISDIR(mode):
            return _dir_entry(stat.S_IMODE(mode))
        if stat.S_ISLNK(mode):
            try:
                target = os.readlink(path)
            except OSError:
                target = "?"
            return Entry("l", stat.S_IMODE(mode), target)
        return Entry("o", stat.S_IMODE(mode), f"type {stat.S_IFMT(mode):o}")

    def _file(self, rel: str, path: str, st: os.stat_result, key: tuple[int, ...],
              cache: dict[str, tuple[tuple[int, ...], Entry, bool]]) -> Entry:
        hashed_at = time.time_ns()
        h = hashlib.blake2b(digest_size=20)
        try:
            with open(path, "rb") as f:
                while chunk := f.read(1 << 20):
                    h.update(chunk)
        except OSError:
            cache.pop(rel, None)
            return Entry("f", stat.S_IMODE(st.st_mode), "unreadable", st.st_size, st.st_nlink)
        entry = Entry("f", stat.S_IMODE(st.st_mode), h.hexdigest(), st.st_size, st.st_nlink)
        # like git's "racy" index entries: trust a cached hash only if the file had last changed
        # well before we hashed it, so a later change must have moved its ctime
        trusted = max(st.st_mtime_ns, st.st_ctime_ns) + _RACY_NS < hashed_at
        cache[rel] = (key, entry, trusted)
        return entry


_UNREADABLE = Entry("o", 0, "unreadable")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_S_IFREG, _S_IFDIR = stat.S_IFREG, stat.S_IFDIR
_DIRS: dict[int, Entry] = {}


def _dir_entry(mode: int) -> Entry:
    e = _DIRS.get(mode)
    if e is None:
        e = _DIRS[mode] = Entry("d", mode)
    return e


def diff(before: Snapshot, after: Snapshot) -> list[Change]:
    """Every path whose entry differs, sorted by path. Directories count only when added,
    removed, re-typed or re-moded (a mode is restored but is not a change git could record)."""
    changes: list[Change] = []
    added = 0
    get = before.get
    for path, a in after.items():
        b = get(path)
        if b is a:
            continue  # unchanged files keep their cached entry: the common case is this test
        if b is None:
            added += 1
            changes.append(Change(path, "added", None, a))
            continue
        if b == a:
            continue
        if a.kind != b.kind:
            changes.append(Change(path, "type", b, a))
        elif a.digest != b.digest or a.size != b.size:
            changes.append(Change(path, "modified", b, a))
        elif a.mode != b.mode:
            changes.append(Change(path, "mode", b, a))
        elif a.nlink != b.nlink:
            changes.append(Change(path, "modified", b, a))  # a hard link appeared or went
    if len(before) != len(after) - added:  # some paths of `before` are gone
        changes.extend(Change(path, "deleted", b, None) for path, b in before.items() if path not in after)
    changes.sort(key=lambda c: c.path)
    return changes
