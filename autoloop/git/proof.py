"""The proof that a tree holds exactly a commit: every tracked path's bytes, executable bit and
type on disk, hashed the way git hashes blobs — nothing relies on git's stat cache (which
trusts size and mtime, both settable)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Mapping, NamedTuple

from autoloop.git.gitrun import git
from autoloop.git.objects import Entry, blob_id, file_blob_id
from autoloop.git.repomemo import RepoMemo
from autoloop.base.walk import RACY_NS, Entry as Stat, lstat_entry
from autoloop.disk.watch import StatTree

GITLINK, SYMLINK, EXECUTABLE = "160000", "120000", "100755"
_MAX_RESET_PATHS = 10_000   # beyond this many paths a reset touched, a full walk is as cheap


class _Hashed(NamedTuple):
    seen: Stat     # the file's lstat data when hashed, well after it had last changed
    digest: str


class TreeProof:
    """Proofs of one tree, each looking again only at what can differ from the last one."""

    def __init__(self, root: Path, repo_root: Path, memo: RepoMemo) -> None:
        self.root = root
        self.repo_root = repo_root
        self.memo = memo
        self._hashes: dict[str, _Hashed] = {}      # path -> its blob id, while its lstat holds
        self._proven: dict[str, Stat] = {}         # path -> lstat data it was proven with
        self._listed: dict[str, Entry] | None = None   # the commit last proven
        self._picture: Mapping[str, Stat] | None = None  # the picture of the last passing proof

    def differs_from(self, commit: str, picture: Mapping[str, Stat] | None = None) -> list[str]:
        """Tracked paths of `commit` that differ on disk, each with why. `picture`: the tree's
        lstat data as StatTree.verification takes it (a caller walking the tree anyway passes
        its walk). Run before and after every measurement step, so only paths whose lstat data
        changed since the last proof, and whose blob or mode differ between the two commits,
        are looked at — set operations on the picture (milliseconds at 100k files)."""
        if picture is None:
            picture = StatTree.verification(self.root).take()
        trees = self.memo.trees(self.repo_root, commit)
        listed = trees.by_path()
        converted = self.memo.converted(self.repo_root, commit, self.root)
        stats = self._proven
        if self._listed is None:
            todo = set(listed)
        else:
            for path in self._listed.keys() - listed.keys():
                stats.pop(path, None)
            todo = {path for path, _ in listed.items() - self._listed.items()}   # new blob or mode
            todo.update(path for path, _ in stats.items() - picture.items())      # changed on disk
            todo.update(listed.keys() - stats.keys())   # not proven last time (racy, failed, converted)
        algo = self.memo.object_format(self.repo_root)
        bad: dict[str, str] = {}
        for path in todo:
            mode, oid = listed[path]
            stats.pop(path, None)
            if mode == GITLINK or path in converted:
                continue  # a gitlink: nothing on disk to compare; converted files: below
            st = picture.get(path)
            why, trusted = self._check_file(path, mode, oid, st, algo)
            if why is not None:
                bad[path] = why
            elif trusted and st is not None:
                stats[path] = st
        self._listed = listed
        self._picture = picture if not bad and not converted else None
        out = [f"{f.path} ({bad[f.path]})" for f in trees.files() if f.path in bad] if bad else []
        if converted:
            out += self._differs_converted([f.path for f in trees.files() if f.path in converted], listed)
        return out

    def _differs_converted(self, paths: list[str], listed: Mapping[str, Entry]) -> list[str]:
        """Files whose bytes git converts (eol, a filter such as LFS, ident): git is asked what
        it would store for them."""
        present = [p for p in paths if os.path.isfile(self.root / p) and not os.path.islink(self.root / p)]
        out = [f"{p} (missing)" for p in paths if p not in present]
        if present:
            got = git(self.root, "hash-object", "--stdin-paths",
                      input="\n".join(present).encode("utf-8", "surrogateescape") + b"\n").split()
            out += [f"{p} (content)" for p, oid in zip(present, got) if oid != listed[p].oid]
        return out

    def _check_file(self, path: str, mode: str, oid: str, st: Stat | None, algo: str) -> tuple[str | None, bool]:
        """What is wrong with `path` on disk (lstat data `st`) for blob `oid` with `mode`, or
        None; and whether its hash can stand for as long as its lstat data do."""
        if st is None:
            return "missing", False
        kind, target = st.kind, st.digest   # a link's target
        if kind == "o" and target == "unreadable":
            return "missing", False
        if mode == SYMLINK:
            if kind != "l":
                return "not a symlink", False
            return (None if blob_id(os.fsencode(target), algo) == oid else "link target"), True
        if kind != "f":
            return "not a file", False
        if bool(st.mode & 0o100) != (mode == EXECUTABLE):
            return "mode", False
        hit = self._hashes.get(path)
        if hit is not None and hit.seen == st:
            return (None if hit.digest == oid else "content"), True
        hashed_at = time.time_ns()
        try:
            digest = file_blob_id(os.path.join(self.root, path), algo)
        except OSError:
            return "unreadable", False
        # a file changed within a clock tick of its hash may change again with the same lstat data
        trusted = max(st.mtime_ns, st.ctime_ns) + RACY_NS < hashed_at
        if trusted:
            self._hashes[path] = _Hashed(st, digest)
        else:
            self._hashes.pop(path, None)
        return (None if digest == oid else "content"), trusted

    def picture_after_reset(self, proved: Mapping[str, Stat], commit: str) -> dict[str, Stat] | None:
        """This tree's picture after `git reset --hard commit`, when just before it the tree was
        exactly `proved` — the picture of its last passing proof: that picture with the paths
        whose blob or mode differ between the two commits (the ones the reset writes or removes)
        looked at again. None when `proved` is not that picture, or too much changed."""
        if self._listed is None or self._picture is not proved:
            return None
        was = self._listed
        listed = self.memo.trees(self.repo_root, commit).by_path()
        touched = {path for path, _ in listed.items() - was.items()} | (was.keys() - listed.keys())
        if len(touched) > _MAX_RESET_PATHS:
            return None
        out = dict(proved)
        for rel in touched:
            st = lstat_entry(os.path.join(self.root, rel))
            if st is None:
                out.pop(rel, None)
                continue
            out[rel] = st
            parent = rel.rpartition("/")[0]
            while parent and parent not in out:   # a folder the reset made
                made = lstat_entry(os.path.join(self.root, parent))
                if made is not None:
                    out[parent] = made
                parent = parent.rpartition("/")[0]
        return out
