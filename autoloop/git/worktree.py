"""One git worktree of the repository, detached at a commit, that we can make exactly equal to
any commit and check byte for byte. The generator edits one; verification runs in others."""

from __future__ import annotations

import os
import re
import stat
import time
from pathlib import Path
from typing import Iterable, Mapping

from autoloop.errors import RunFailure
from autoloop.git.gitrun import GitError, git, nul_list
from autoloop.process.logfile import read_regular
from autoloop.git.objects import Trees
from autoloop.git.proof import TreeProof
from autoloop.git.repomemo import RepoMemo, memo_for
from autoloop.disk.snapshot import Change, Snapshot, Snapshotter, diff
from autoloop.disk.watch import StatTree
from autoloop.base.walk import Entry, StatCache, ident_of, remove_tree

_HEAD_MAX = 200


class Worktree:
    def __init__(self, repo_root: Path, common_dir: Path, path: Path) -> None:
        self.repo_root = repo_root
        self.common_dir = common_dir
        self.path = path
        self.snapshotter = Snapshotter(self.path)
        self.memo: RepoMemo = memo_for(common_dir)
        self.proof = TreeProof(self.path, repo_root, self.memo)
        self._admin_dir: Path | None = None
        self._dotgit: bytes | None = None
        # what our own last command left: HEAD detached at _at, and the index's bytes (no
        # flags), to tell cheaply that nobody wrote it since (9 MB for 100k files)
        self._at: str | None = None
        self._index: bytes | None = None
        self._index_cache: StatCache[bytes] = StatCache()

    def open(self, commit: str) -> None:
        """Create (or reuse) the private worktree, detached at `commit`, exactly equal to it."""
        self._forget()
        if not self._reusable():
            self._discard()
            self.path.parent.mkdir(parents=True, exist_ok=True)
            git(self.repo_root, "worktree", "add", "--detach", "-f", str(self.path), commit)
        self._admin_dir = self._find_admin_dir()
        self._dotgit = (self.path / ".git").read_bytes()
        self.reset_hard(commit)

    def _discard(self) -> None:
        """Forget a worktree, even one not fully made (a kill -9 in `git worktree add`)."""
        for admin in self._own_admin_dirs():
            remove_tree(admin)
        remove_path(self.path)
        git(self.repo_root, "worktree", "prune")

    def clear_stale_locks(self) -> None:
        """After a kill -9 mid-git-call: git's lock files would block every later call, a
        half-made admin folder `git worktree list`. Only ours (we hold the run lock)."""
        for admin in self._own_admin_dirs():
            if not all(_nonempty(admin / name) for name in ("gitdir", "commondir", "HEAD")):
                remove_tree(admin)  # half-made: open() makes the worktree afresh
                continue
            for lock in admin.glob("*.lock"):
                lock.unlink(missing_ok=True)

    def _own_admin_dirs(self) -> list[Path]:
        """Admin folders whose `gitdir` points at this tree, or (before `gitdir` was written)
        named as this tree, git-style numbered."""
        root = self.common_dir / "worktrees"
        if not root.is_dir():
            return []
        mine = (self.path / ".git").resolve()
        out = []
        for admin in root.iterdir():
            try:
                points_to: Path | None = Path((admin / "gitdir").read_text().strip()).resolve()
            except (OSError, UnicodeDecodeError):
                points_to = None
            if points_to == mine or (points_to is None and re.fullmatch(
                    re.escape(self.path.name) + r"[0-9]*", admin.name)):
                out.append(admin)
        return out

    def checkout(self, commit: str, clean: bool = True) -> Path:
        """Make this tree exactly `commit`; its path. `clean=False`: untracked files are left to
        the caller, whose walk removes them anyway (one git process fewer)."""
        if self._admin_dir is None or self.path.is_symlink() or not self.path.is_dir():
            # never made, or swapped for a link to someone else's tree (or removed): made
            # afresh — measuring through the link would void every later cycle, or worse
            self.open(commit)
        else:
            if self.dotgit_tampered():
                self.restore_dotgit()
            self.reset_hard(commit, clean=clean)
        return self.path

    def _reusable(self) -> bool:
        """Is the worktree there, whole, and linked to this repository (not by a rewritten link)?"""
        dotgit = self.path / ".git"
        if self.path.is_symlink() or dotgit.is_symlink() or not dotgit.is_file():
            return False   # a tree swapped for a link resolves everything below through it
        try:
            admin = self._find_admin_dir()
            back = Path((admin / "gitdir").read_text().strip()).resolve()
        except (GitError, OSError, UnicodeDecodeError):
            return False
        return ((admin / "commondir").is_file() and (admin / "HEAD").is_file()
                and admin.parent == (self.common_dir / "worktrees").resolve() and back == dotgit.resolve())

    def _find_admin_dir(self) -> Path:
        text = (self.path / ".git").read_text().strip()
        if not text.startswith("gitdir: "):
            raise GitError(f"{self.path}/.git is not a worktree link")
        return Path(text[len("gitdir: "):]).resolve()

    def dotgit_tampered(self) -> bool:
        p = self.path / ".git"
        return p.is_symlink() or not p.is_file() or p.read_bytes() != self._dotgit

    def restore_dotgit(self) -> None:
        assert self._dotgit is not None
        remove_path(self.path / ".git")
        (self.path / ".git").write_bytes(self._dotgit)

    def _forget(self) -> None:
        self._at = self._index = None

    def _sealed(self, commit: str) -> None:
        """Our own command just left HEAD detached at `commit` and an index without flags."""
        self._at = commit
        self._index = self._read_index()

    def _read_index(self) -> bytes | None:
        if self._admin_dir is None:
            return None
        path, at = self._admin_dir / "index", time.time_ns()
        try:
            st = os.lstat(path)
            data = read_regular(path, -1)
            if not stat.S_ISREG(st.st_mode) or ident_of(st) != ident_of(os.lstat(path)):
                return None  # not a file, or written while we read it
        except OSError:
            return None
        return self._index_cache.put("", st, data, at)

    def _index_intact(self) -> bool:
        if self._index is None or self._admin_dir is None:
            return False
        try:
            known = self._index_cache.get("", os.stat(self._admin_dir / "index"))
        except OSError:
            return False
        if known is not None:
            # the cache holds the last index read, which may be a tampered one a check read
            # (index_flags): only our own bytes are intact
            return known is self._index or known == self._index
        return self._read_index() == self._index

    def _as_we_left_it(self, commit: str) -> bool:
        """Is git's view of the tree (HEAD, index, .git link) still what our last command left?"""
        if self._at != commit or self._admin_dir is None or self.dotgit_tampered():
            return False
        head = read_regular(self._admin_dir / "HEAD", _HEAD_MAX)
        return head == (commit + "\n").encode() and self._index_intact()

    def index_flags(self) -> list[str]:
        """Paths the worktree's index hides from git (assume-unchanged / skip-worktree)."""
        if self._index_intact():
            return []
        out = git(self.path, "ls-files", "-v", "-z")
        return [item[2:] for item in out.split("\0") if len(item) > 2 and (item[0].islower() or item[0] == "S")]

    def reset_hard(self, commit: str, clean: bool = True) -> None:
        """Work tree, index and HEAD at `commit`; untracked and ignored files gone if `clean`."""
        hidden = self.index_flags()
        if hidden:
            # one flag per call: update-index applies only the first of the two per path
            git(self.path, "update-index", "--no-skip-worktree", "-z", "--stdin", input=nul_list(hidden))
            git(self.path, "update-index", "--no-assume-unchanged", "-z", "--stdin", input=nul_list(hidden))
        self._forget()
        git(self.path, "reset", "-q", "--hard", commit)
        if clean:
            git(self.path, "clean", "-ffdxq")
        self._sealed(commit)

    def tracked_names(self, commit: str) -> Trees:
        return self.memo.trees(self.repo_root, commit)

    def remove_untracked(self, picture: Mapping[str, Entry], commit: str, keep: frozenset[str]) -> set[str]:
        """Remove what `picture` (this tree's walk) holds beyond `commit` and `keep`, as `git
        clean -ffdx` would; returns the paths removed (a folder stands for all under it)."""
        tracked = self.tracked_names(commit)
        removed: set[str] = set()
        for rel in sorted((r for r in picture.keys() - tracked.names() - keep if r),
                          key=lambda r: r.count("/")):
            parent = rel.rpartition("/")[0]
            while parent and parent not in removed:
                parent = parent.rpartition("/")[0]
            if parent:
                continue   # went with a folder above it
            try:
                remove_path(self.path / rel)
            except OSError:
                pass       # the proof that follows finds whatever could not go
            removed.add(rel)
        return removed

    def reseal(self, commit: str, keep: frozenset[str] = frozenset(),
               picture: Mapping[str, Entry] | None = None) -> list[str]:
        """Between two steps of one measurement: everything here that `commit` does not track
        goes (untracked and ignored alike, as `git clean -ffdx`; `keep`: the data links autoloop
        made), tracked files a step changed are checked out again, and the tree is proven to
        hold exactly `commit` and nothing more. `picture`: a walk taken after the step ended
        (the caller's after-step check; by then every process of the step is gone), else one is
        taken. Returns what is still wrong (empty: sealed)."""
        picture = StatTree.verification(self.path).take() if picture is None else picture
        if self.differs_from(commit, picture):
            self.checkout(commit)   # reset and clean: a formatter guard in `verify`, say
            picture = StatTree.verification(self.path).take()
            removed: set[str] = set()
        else:
            removed = self.remove_untracked(picture, commit, keep)
        # what was removed is looked at again, not assumed gone; the rest of the walk stands
        left = sorted(r for r in removed if os.path.lexists(self.path / r))
        extra = sorted(r for r in picture.keys() - self.tracked_names(commit).names() - keep - removed
                       if r and not r.startswith(tuple(f"{d}/" for d in removed)))
        return [f"{r} (left behind, could not be removed)" for r in [*left, *extra][:5]]

    def snapshot(self) -> Snapshot:
        return self.snapshotter.take()

    def differs_from(self, commit: str, picture: Mapping[str, Entry] | None = None) -> list[str]:
        return self.proof.differs_from(commit, picture)

    def picture_after_reset(self, proved: Mapping[str, Entry], commit: str) -> dict[str, Entry] | None:
        return self.proof.picture_after_reset(proved, commit)

    def restore_changes(self, commit: str, reference: Snapshot, changes: list[Change]) -> None:
        """restore() when a full walk found the tree's whole change set since `reference`: put
        back and check just those paths (and all under a folder among them), while git's view
        is still the one our own command left; else, or if a path is not equal after, restore()."""
        if not self._as_we_left_it(commit):
            self.restore(commit, reference)
            return
        if not changes:
            return
        paths = {c.path for c in changes}
        try:
            unlock_folders(self.path, paths)
            if self._force_checkout(changes, update_index=True):
                self._sealed(commit)  # checkout-index -u wrote the index (stat data only)
            ok = _matches(reference, self.snapshotter.take_paths(paths), paths)
        except (OSError, GitError):
            ok = False
        if not ok:
            self.restore(commit, reference)

    def restore(self, commit: str, reference: Snapshot) -> None:
        """Put the work tree back to `reference` (taken at `commit`) exactly: git's reset trusts
        stat data, which can be faked, and ignores modes, so what still differs is put back."""
        if self.dotgit_tampered():
            self.restore_dotgit()
        for folder, names, _ in os.walk(self.path):  # a generator may chmod folders so git cannot clean them
            unlock_folders(Path(folder), names)                # top-down: before the walk goes in
        self.reset_hard(commit)
        remaining = diff(reference, self.snapshot())
        if remaining:
            self._forget()
            self._force_checkout(remaining)
            self._sealed(commit)
            remaining = diff(reference, self.snapshot())
        if remaining:
            raise RunFailure("could not restore the work tree exactly: "
                             + ", ".join(c.describe() for c in remaining[:5]))

    def _force_checkout(self, changes: list[Change], update_index: bool = False) -> bool:
        """Undo `changes` from the index; whether git ran."""
        tracked = clear_changes(self.path, changes)
        if tracked:
            git(self.path, "checkout-index", "-f", "--ignore-skip-worktree-bits", "-z", "--stdin",
                *(["-u"] if update_index else []), input=nul_list(tracked))
        restore_folder_modes(self.path, changes)
        return bool(tracked)


def _old_folder_mode(root: Path, ch: Change) -> int | None:
    """The incumbent's mode of a folder still there (git records none)."""
    full = root / ch.path
    if ch.before is not None and ch.before.kind == "d" and full.is_dir() and not full.is_symlink():
        return ch.before.mode
    return None


def clear_changes(root: Path, changes: list[Change]) -> list[str]:
    """Remove what is at the changed paths, deepest first, but the incumbent's folders (files,
    links, and the FIFOs and sockets git clean leaves alone); the files and links to put back."""
    back = []
    for ch in sorted(changes, key=lambda c: c.path.count("/"), reverse=True):
        if _old_folder_mode(root, ch) is None:
            remove_path(root / ch.path)
            if ch.before is not None and ch.before.kind in ("f", "l"):
                back.append(ch.path)
    return back


def restore_folder_modes(root: Path, changes: list[Change]) -> None:
    for ch in changes:
        mode = _old_folder_mode(root, ch)
        if mode is not None:
            os.chmod(root / ch.path, mode)


def unlock_folders(root: Path, paths: Iterable[str]) -> None:
    """Give back u+rwx to the folders among `paths` (parents first), so what is in them can go."""
    for rel in sorted(paths, key=lambda p: p.count("/")):
        full = os.path.join(root, rel)
        try:
            st = os.lstat(full)
            if stat.S_ISDIR(st.st_mode) and (st.st_mode & 0o700) != 0o700:
                os.chmod(full, st.st_mode | 0o700)
        except OSError:
            pass


def remove_path(path: Path) -> None:
    if os.path.lexists(path):   # not when a file took the place of a folder above it
        remove_tree(path)


def _matches(reference: Snapshot, got: dict[str, Entry], paths: set[str]) -> bool:
    """Do the entries of `paths` (and of all under those that are folders), taken afresh, equal
    the reference's, with nothing of the reference missing under a folder walked?"""
    if any(reference.get(rel) != got.get(rel) for rel in paths) or \
            any(reference.get(rel) != entry for rel, entry in got.items()):
        return False
    folders = tuple(rel + "/" for rel in paths if rel in got and got[rel].kind == "d")
    return not folders or sum(rel.startswith(folders) for rel in reference) == \
        sum(rel.startswith(folders) for rel in got)


def _nonempty(path: Path) -> bool:
    try:
        return path.is_file() and path.stat().st_size > 0
    except OSError:
        return False
