"""The integrity of what git itself obeys and stores, checked around every generator step: the
files git reads during our calls, every ref, and the objects that make the incumbent."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple, Sequence

from autoloop.git.gitrun import git, outer_git_config
from autoloop.process.logfile import fresh_log
from autoloop.git.objects import Trees
from autoloop.disk.sentinel import Sentinel
from autoloop.base.walk import ident_of, lstat_entry, walk


def watch_git(common_dir: Path, admin_dir: Path, frozen: dict[Path, str],
              extra: Sequence[Path] = ()) -> Sentinel:
    """A sentinel over the files git obeys during our own calls, plus `extra` user-side files."""
    watched = {common_dir / rel: ".git/" + rel for rel in
               ("config", "config.worktree", "hooks", "info", "objects/info", "commondir")}
    watched |= {admin_dir / name: "worktree " + name.removesuffix(".worktree")
                for name in ("config.worktree", "commondir", "gitdir")}
    # a filter or attributes file planted in your or the system's config would run in our calls
    for path, label in [*outer_git_config().items(), *frozen.items()]:
        watched.setdefault(path, label)
    watched.update({p: p.name for p in extra})
    sentinel = Sentinel(watched, label=watched)
    sentinel.capture()
    return sentinel


class RefGuard:
    """Every ref of the repository (loose, packed, refs/replace, tags, stash, notes) but the run
    branch, which the loop checks itself."""

    def __init__(self, repo_root: Path, common_dir: Path, own_ref: str) -> None:
        self.repo_root = repo_root
        self.common_dir = common_dir
        self.own_ref = own_ref
        self._refs: dict[str, str] | None = None
        self._seen: tuple[tuple[str, object], ...] = ()

    def _read(self) -> dict[str, str]:
        """name -> object id, or `ref: target`."""
        raw = git(self.repo_root, "for-each-ref", "--format=%(refname)%00%(objectname)%00%(symref)")
        out: dict[str, str] = {}
        for line in raw.splitlines():
            name, oid, sym = (line.split("\0") + ["", ""])[:3]
            if name != self.own_ref:
                out[name] = f"ref: {sym}" if sym else oid
        return out

    def _picture(self) -> tuple[tuple[str, object], ...]:
        """The lstat data of all that holds refs: unchanged, so are the refs."""
        out: list[tuple[str, object]] = []
        for top in ("refs", "packed-refs", "reftable"):
            root = str(self.common_dir / top)
            out.append((top, lstat_entry(root, dir_times=True)))
            if os.path.isdir(root) and not os.path.islink(root):
                out += [(rel, st and ident_of(st)) for rel, _, st in walk(root, ordered=True)]
        return tuple(out)

    def capture(self) -> None:
        picture = self._picture()
        if self._refs is None or picture != self._seen:
            self._refs = self._read()
            self._seen = self._picture()

    def changed(self) -> list[str]:
        """The refs made, moved or deleted since capture, each put back as it was."""
        if self._refs is None or self._picture() == self._seen:
            return []
        now = self._read()
        problems = []
        for name in sorted(set(now) | set(self._refs)):
            was, is_ = self._refs.get(name), now.get(name)
            if was == is_:
                continue
            verb = "made" if was is None else "deleted" if is_ is None else "moved"
            problems.append(f"{verb} ref {name}")
            if was is None:
                git(self.repo_root, "update-ref", "--no-deref", "-d", name, check=False)
            elif was.startswith("ref: "):
                git(self.repo_root, "symbolic-ref", name, was[len("ref: "):], check=False)
            else:
                git(self.repo_root, "update-ref", "--no-deref", "-m", "autoloop: undo a ref change by the generator",
                    name, was, check=False)
        self._refs = self._read()
        self._seen = self._picture()
        return problems


class Loose(NamedTuple):
    ident: tuple[int, ...]   # walk.ident_of: unchanged, the same bytes (ctime cannot be set back)
    data: bytes
    mode: int


@dataclass
class ObjectGuard:
    """The pack files and the loose objects that make a commit's protected paths: git trusts an
    object's file to hold what its name says, and never checks on read."""

    objects: Path
    _ids: dict[str, set[str]] = field(default_factory=dict)
    _packs: dict[str, tuple[int, ...]] | None = None
    _loose: dict[str, Loose] = field(default_factory=dict)

    def capture(self, commit: str, trees: Trees, paths: Sequence[str]) -> None:
        ids = self._ids.get(commit)
        if ids is None:
            ids = {commit, trees.root}   # the commit, the trees down to the paths, their blobs
            for path in paths:
                parent = ""
                for name in path.split("/"):
                    entry = trees.folders.get(parent, {}).get(name)
                    if entry is None:
                        break
                    ids.add(entry.oid)
                    parent = f"{parent}/{name}" if parent else name
            self._ids = {commit: ids}
        self._packs = _pack_idents(self.objects / "pack")
        self._loose = {}
        for oid in ids:
            f = self.objects / oid[:2] / oid[2:]
            try:
                st = os.lstat(f)
                self._loose[oid] = Loose(ident_of(st), f.read_bytes(), stat.S_IMODE(st.st_mode))
            except OSError:
                pass

    def changed(self) -> list[str]:
        """What changed in the captured part of the object store, loose files put back."""
        if self._packs is None:
            return []
        problems = []
        packs = _pack_idents(self.objects / "pack")
        if any(packs.get(name) != ident for name, ident in self._packs.items()):
            problems.append("rewrote or removed git's pack files (objects/pack; `git fsck` tells what is left)")
        for oid, was in self._loose.items():
            f = self.objects / oid[:2] / oid[2:]
            try:
                same = ident_of(os.lstat(f)) == was.ident
            except OSError:
                same = False
            if not same:
                problems.append(f"rewrote git's object {oid[:12]}")
                f.parent.mkdir(parents=True, exist_ok=True)
                with fresh_log(f) as out:
                    out.write(was.data)
                os.chmod(f, was.mode)
        if problems:
            self._packs = None
        return problems


def _pack_idents(folder: Path) -> dict[str, tuple[int, ...]]:
    try:
        with os.scandir(folder) as it:
            return {e.name: ident_of(e.stat(follow_symlinks=False)) for e in it
                    if e.name.endswith((".pack", ".idx", ".rev", ".bitmap"))}
    except OSError:
        return {}
