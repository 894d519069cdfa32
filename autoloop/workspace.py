"""The only module that runs git: the run branch, its private worktree, the candidate commit,
the exact restore, and the integrity of what git itself obeys.

Every git command runs with hooks and config-defined commands switched off, so nothing a
generator plants in `.git` can run through us.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import stat
import subprocess
import tarfile
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Container, Iterable, Mapping, Sequence, TypeVar

from autoloop.errors import RepoStateError, RunFailure
from autoloop.objects import ObjectStore, Trees, changed_entries, derive
from autoloop.proc import run_captured
from autoloop.sentinel import Sentinel, remove_tree
from autoloop.snapshot import RACY_NS, Change, Entry, Snapshot, Snapshotter, diff
from autoloop.watch import StatTree, lstat_entry

BRANCH_PREFIX = "autoloop/"

K = TypeVar("K")
V = TypeVar("V")

# Settings that would let a repository (or a generator that wrote to it) run code or change
# bytes during our own git calls. Filters from .gitattributes still apply, but only with drivers
# defined in config, which the integrity check guards.
_SAFE_CONFIG = (
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.untrackedCache=false",
    "core.splitIndex=false",
    "core.sparseCheckout=false",
    "core.autocrlf=false",
    # git's "is this file unchanged?" shortcut compares stat data (times in whole seconds); a
    # user's config must not weaken it further for our calls, or update-index would take a
    # changed file for an unchanged one
    "core.trustctime=true",
    "core.checkStat=default",
    "core.ignoreStat=false",
    "core.safecrlf=false",
    "core.symlinks=true",
    "core.pager=cat",
    "commit.gpgSign=false",
    "gc.auto=0",
    "maintenance.auto=false",
    "submodule.recurse=false",
    "advice.detachedHead=false",
    "diff.external=",
    "credential.helper=",
)


class GitError(RunFailure):
    pass


def _git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GIT_") or k in ("GIT_CONFIG_GLOBAL", "GIT_CONFIG_NOSYSTEM", "GIT_CONFIG_SYSTEM")}
    # replace refs (refs/replace/*) would let anyone who can write a ref swap the incumbent's
    # tree for another one inside our own reads: git's object graph is taken as it is stored
    env.update(GIT_TERMINAL_PROMPT="0", GIT_OPTIONAL_LOCKS="0", LC_ALL="C", GIT_NO_REPLACE_OBJECTS="1")
    env.update(_FROZEN_ENV)
    return env


# Set for the length of a run by freeze_outer_config: git then reads a private copy of your
# global and system config as they were when the run started.
_FROZEN_ENV: dict[str, str] = {}


def git_executable() -> str:
    """git, resolved once on the PATH autoloop started with: a `git` a generator later puts in
    a folder earlier on PATH (~/.local/bin) is never the one autoloop runs."""
    global _GIT
    if _GIT is None:
        _GIT = shutil.which("git") or "git"
    return _GIT


_GIT: str | None = None


def run_git_process(cmd: list[str], *, cwd: Path, env: dict[str, str],
                    input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    """Run git out of reach of a Ctrl-C meant for autoloop: a terminal's SIGINT goes to
    autoloop's whole process group, and git killed half-way through a checkout would turn an
    orderly exit 130 into a failed one. A new session is not enough by itself — between fork
    and setsid the child is still in our group, with default signal handling — so SIGINT and
    SIGTERM are also blocked across the spawn (the child keeps them blocked; a signal meant for
    us stays pending here until the spawn returns)."""
    # registered with autoloop.proc too: never mistaken for a leftover of a command running
    # beside it in a parallel round
    return run_captured(cmd, cwd=cwd, input=input, env=env, shielded=True)


def git(cwd: Path, *args: str, input: bytes | None = None, check: bool = True,
        env: dict[str, str] | None = None) -> str:
    cmd = [git_executable()]
    for item in _SAFE_CONFIG:
        cmd += ["-c", item]
    cmd += list(args)
    proc = run_git_process(cmd, cwd=cwd, input=input, env=env or _git_env())
    if check and proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip().splitlines()
        raise GitError(f"git {' '.join(args[:3])} failed: {err[-1] if err else proc.returncode}")
    return proc.stdout.decode(errors="surrogateescape")


def git_bytes(cwd: Path, *args: str, input: bytes | None = None) -> bytes:
    """git with the same safe settings, for binary output (object contents)."""
    cmd = [git_executable()]
    for item in _SAFE_CONFIG:
        cmd += ["-c", item]
    proc = run_git_process(cmd + list(args), cwd=cwd, input=input, env=_git_env())
    if proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip().splitlines()
        raise GitError(f"git {' '.join(args[:3])} failed: {err[-1] if err else proc.returncode}")
    return proc.stdout


def repo_root_of(path: Path) -> Path:
    try:
        out = git(path if path.is_dir() else path.parent, "rev-parse", "--show-toplevel")
    except GitError:
        raise RepoStateError(f"{path}: not inside a git repository") from None
    return Path(out.strip())


class IndexSeal:
    """What an index file held right after one of our own git commands wrote it, to tell cheaply
    that nobody has written it since (and so that it still has no hidden-file flags and still
    lists the commit we checked out).

    Same rule as the snapshot's hash cache: the stat identity (inode, size, mtime, ctime — ctime
    cannot be set from user space) is trusted only once the file had last changed well before
    we last read it; otherwise it is read again and compared byte for byte. (An index is a few
    hundred bytes per file: 9 MB for 100k files.)
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._known: tuple[tuple[int, int, int, int], bytes, int] | None = None
        self._written_ns = 0   # the file's mtime as our own command left it

    def seal(self) -> None:
        """Call right after our own command wrote the file."""
        self._known = self._read()
        self._written_ns = self._known[0][2] if self._known is not None else 0

    def forget(self) -> None:
        self._known = None

    def written_ns(self) -> int:
        """The mtime the file had when our own command wrote it (not whatever a `touch` since
        gave it). For an index this is git's "racy" reference: entries whose files changed in
        the same second are re-checked by content, not trusted by their stat data."""
        return self._written_ns

    def intact(self) -> bool:
        return self.read_intact() is not None

    def read_intact(self) -> bytes | None:
        """The file's bytes if it is unchanged since seal(); else None."""
        if self._known is None:
            return None
        ident, data, at = self._known
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        if _ident(st) == ident and max(st.st_mtime_ns, st.st_ctime_ns) + RACY_NS < at:
            return data
        got = self._read()
        if got is None or got[1] != data:
            return None
        self._known = got
        return data

    def _read(self) -> tuple[tuple[int, int, int, int], bytes, int] | None:
        at = time.time_ns()
        got = _read_regular(self.path)
        if got is None:
            return None
        st, data = got
        try:
            after = os.stat(self.path)
        except OSError:
            return None
        if _ident(st) != _ident(after):
            return None  # written while we read it
        return _ident(st), data, at


def _read_regular(path: Path, limit: int = -1) -> tuple[os.stat_result, bytes] | None:
    """A regular file's stat and bytes; None for anything else. A generator may have put a FIFO
    (which would block a plain open) or a symlink where git keeps a file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        with open(fd, "rb", closefd=False) as f:
            return st, f.read(limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def _ident(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


_BY_HAND_MAX = 64 << 20   # bigger files go through git, which streams them


class _Shared:
    """What the worktrees of one repository share: listings of recent commits (a paired
    measurement alternates two; parallel lanes measure several), and which paths git converts."""

    KEEP = 8

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.listings: dict[str, list[tuple[str, str, str]]] = {}
        self.attr_key: tuple[tuple[str, str], ...] | None = None
        self.converts: dict[str, bool] = {}     # path -> converted, for attr_key's attributes
        self.convert_true: set[str] = set()     # the paths converts says True of
        self.conv: dict[str, frozenset[str]] = {}            # commit -> its converted paths
        self.maps: dict[str, dict[str, tuple[str, str]]] = {}  # commit -> path -> (mode, oid)
        self.names: dict[str, Tracked] = {}

    def learn_converts(self, asked: Iterable[str], converted: set[str]) -> None:
        """Record git's answers for `asked` (call with the lock held)."""
        for path in asked:
            self.converts[path] = path in converted
        self.convert_true |= converted

    def remember_names(self, commit: str, names: "Tracked") -> None:
        with self.lock:
            _put_newest(self.names, commit, names, self.KEEP // 2)   # each can be a few hundred thousand strings

    def remember(self, commit: str, entries: list[tuple[str, str, str]]) -> None:
        with self.lock:
            _put_newest(self.listings, commit, entries, self.KEEP)


class Tracked:
    """The paths of a commit and the folders above them, for `in`: asked of its folders."""

    def __init__(self, folders: Mapping[str, Container[str]]) -> None:
        self.folders = folders

    def __contains__(self, rel: object) -> bool:
        if not isinstance(rel, str) or not rel:
            return False
        parent, _, name = rel.rpartition("/")
        names = self.folders.get(parent)
        return names is not None and name in names


_SHARED: dict[Path, _Shared] = {}
_SHARED_LOCK = threading.Lock()


def _shared(common_dir: Path) -> _Shared:
    with _SHARED_LOCK:
        return _SHARED.setdefault(common_dir, _Shared())


def _put_newest(memo: dict[K, V], key: K, value: V, keep: int) -> None:
    """Put `key` in `memo` as its newest entry and drop the oldest beyond `keep` (dicts keep
    insertion order)."""
    memo.pop(key, None)
    memo[key] = value
    while len(memo) > keep:
        del memo[next(iter(memo))]


def _converting(cwd: Path, paths: list[str]) -> set[str]:
    """Those of `paths` that an attribute makes git convert between blob and disk (eol, filter,
    ident, working-tree-encoding), by `git check-attr` in `cwd`."""
    raw = git(cwd, "check-attr", "-z", "--stdin", "filter", "text", "eol", "ident", "working-tree-encoding",
              input=b"\0".join(p.encode("utf-8", "surrogateescape") for p in paths) + b"\0")
    items = raw.split("\0")
    return {items[i] for i in range(0, len(items) - 2, 3)   # path, attribute, value
            if items[i + 2] not in ("unspecified", "unset")}


def attr_key(entries: Iterable[tuple[str, str, str]]) -> tuple[tuple[str, str], ...]:
    """The .gitattributes files of a listing (path, blob): what its paths' attributes follow from."""
    return tuple((path, oid) for _, oid, path in entries
                 if path == ".gitattributes" or path.endswith("/.gitattributes"))


@dataclass(frozen=True)
class Identity:
    name: str
    email: str


class Worktree:
    """One git worktree of the repository, detached at a commit, that we can make exactly equal
    to any commit and check byte for byte. The generator edits one; verification runs in others."""

    def __init__(self, repo_root: Path, common_dir: Path, path: Path) -> None:
        self.repo_root = repo_root
        self.common_dir = common_dir
        self.path = path
        self.snapshotter = Snapshotter(self.path)
        self._admin_dir: Path | None = None
        self._dotgit: bytes | None = None
        # the state our own last command left: HEAD detached at _at, index sealed (no flags)
        self._at: str | None = None
        self._seal: IndexSeal | None = None

    def open(self, commit: str) -> None:
        """Create (or reuse) the private worktree, detached at `commit`, exactly equal to it."""
        self._forget()
        if self._reusable():
            self._admin_dir = self._find_admin_dir()
        else:
            self._discard()
            self.path.parent.mkdir(parents=True, exist_ok=True)
            git(self.repo_root, "worktree", "add", "--detach", "-f", str(self.path), commit)
            self._admin_dir = self._find_admin_dir()
        self._seal = IndexSeal(self._admin_dir / "index")
        self._dotgit = (self.path / ".git").read_bytes()
        self.reset_hard(commit)

    def _discard(self) -> None:
        """Forget a worktree that is not fully usable — e.g. a kill -9 during `git worktree add`
        left a half-made admin folder, still `locked` — so it can be made afresh."""
        for admin in self._own_admin_dirs():
            remove_tree(admin)
        if self.path.exists() or self.path.is_symlink():
            if self.path.is_dir() and not self.path.is_symlink():
                remove_tree(self.path)
            else:
                self.path.unlink()
        git(self.repo_root, "worktree", "prune")

    def clear_stale_locks(self) -> None:
        """After a kill -9 mid-git-call, git's own lock files (index.lock, HEAD.lock,
        ORIG_HEAD.lock, ...) would block every later call, and a kill inside `git worktree add`
        leaves a half-made admin folder that makes `git worktree list` fail for good. Only ours
        (we hold the run lock, so nobody else uses this tree)."""
        for admin in self._own_admin_dirs():
            if not all(_nonempty(admin / name) for name in ("gitdir", "commondir", "HEAD")):
                remove_tree(admin)  # half-made: open() makes the worktree afresh
                continue
            for lock in admin.glob("*.lock"):
                lock.unlink(missing_ok=True)

    def _own_admin_dirs(self) -> list[Path]:
        """Admin folders under .git/worktrees that belong to this tree: their `gitdir` points at
        it, or (written before `gitdir` was) their name is this tree's name, git-style
        suffixed with a number."""
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
        """Make this tree exactly `commit` (opening it the first time); returns its path.
        `clean=False`: leave untracked files for the caller, whose walk of the tree removes them
        anyway (Guardrails.measuring) — one git process and one walk fewer."""
        if self._admin_dir is None or self.path.is_symlink() or not self.path.is_dir():
            # never made, or swapped for a link to a tree of someone else's (or removed): made
            # afresh — measuring through the link would void every later cycle, or worse
            self.open(commit)
        else:
            if self.dotgit_tampered():
                self.restore_dotgit()
            self.reset_hard(commit, clean=clean)
        return self.path

    def _reusable(self) -> bool:
        """Is the worktree there, whole, registered, and linked to *this* repository? A killed
        run may leave a half-made admin folder, or a `.git` link a generator rewrote to point
        elsewhere: then we rebuild."""
        dotgit = self.path / ".git"
        if self.path.is_symlink() or dotgit.is_symlink() or not dotgit.is_file():
            return False   # a tree swapped for a link resolves everything below through it
        try:
            admin = self._find_admin_dir()
            back = Path((admin / "gitdir").read_text().strip()).resolve()
        except (GitError, OSError, UnicodeDecodeError):
            return False
        # a kill -9 inside `git worktree add` can leave the admin folder without these
        if not ((admin / "commondir").is_file() and (admin / "HEAD").is_file()):
            return False
        if admin.parent != (self.common_dir / "worktrees").resolve() or back != dotgit.resolve():
            return False
        try:
            return self._registered()
        except GitError:
            return False

    def _registered(self) -> bool:
        """Does some admin folder of the repository point at this tree? Read directly: `git
        worktree list` fails outright when any admin folder is half-made (a kill -9)."""
        return bool(self._own_admin_dirs()) and any(
            (a / "gitdir").is_file() for a in self._own_admin_dirs())

    def _find_admin_dir(self) -> Path:
        text = (self.path / ".git").read_text().strip()
        if not text.startswith("gitdir: "):
            raise GitError(f"{self.path}/.git is not a worktree link")
        return Path(text[len("gitdir: "):]).resolve()

    def close(self) -> None:
        """Leave the worktree in place for inspection; nothing to release but file handles."""

    def dotgit_tampered(self) -> bool:
        p = self.path / ".git"
        return p.is_symlink() or not p.is_file() or p.read_bytes() != self._dotgit

    def restore_dotgit(self) -> None:
        p = self.path / ".git"
        if p.is_symlink() or p.is_file():
            p.unlink()
        elif p.exists():
            remove_tree(p)
        assert self._dotgit is not None
        p.write_bytes(self._dotgit)

    # ---- what our own last command left, and whether it is still so ----------------------------

    def _forget(self) -> None:
        self._at = None
        if self._seal is not None:
            self._seal.forget()

    def _sealed(self, commit: str) -> None:
        """Our own command just left HEAD detached at `commit` and an index without flags."""
        self._at = commit
        if self._seal is not None:
            self._seal.seal()

    def _as_we_left_it(self, commit: str) -> bool:
        """HEAD still detached at `commit`, the index byte for byte as our last command wrote
        it, the .git link untouched: then git's view of the tree is still ours and only the
        files can differ."""
        if self._at != commit or self._seal is None or self._admin_dir is None or self.dotgit_tampered():
            return False
        head = _read_regular(self._admin_dir / "HEAD", 200)
        return head is not None and head[1] == (commit + "\n").encode() and self._seal.intact()

    def index_flags(self) -> list[str]:
        """Paths the worktree's index hides from git (assume-unchanged / skip-worktree)."""
        if self._seal is not None and self._seal.intact():
            return []  # the index our own command wrote, without flags, and nobody wrote it since
        out = git(self.path, "ls-files", "-v", "-z")
        hidden = []
        for item in out.split("\0"):
            if len(item) > 2 and (item[0].islower() or item[0] == "S"):
                hidden.append(item[2:])
        return hidden

    def reset_hard(self, commit: str, clean: bool = True) -> None:
        """Work tree, index and HEAD exactly at `commit`; untracked and ignored files removed
        (unless not `clean`)."""
        hidden = self.index_flags()
        if hidden:
            # one flag per call: update-index applies only the first of the two per path
            paths = "\0".join(hidden).encode("utf-8", "surrogateescape") + b"\0"
            git(self.path, "update-index", "--no-skip-worktree", "-z", "--stdin", input=paths)
            git(self.path, "update-index", "--no-assume-unchanged", "-z", "--stdin", input=paths)
        self._forget()
        git(self.path, "reset", "-q", "--hard", commit)
        if clean:
            git(self.path, "clean", "-ffdxq")
        self._sealed(commit)

    def tracked_names(self, commit: str) -> "Tracked":
        """Every path of `commit` and every folder above one, for `in` (a candidate autoloop
        wrote answers from the folders it built; another commit's are gathered from its listing
        once — a 100k-file tree makes a few hundred thousand strings)."""
        memo = _shared(self.common_dir)
        with memo.lock:
            got = memo.names.get(commit)
        if got is None:
            folders: dict[str, set[str]] = {}
            for _, _, path in self._tree_entries(commit):
                parent, _, name = path.rpartition("/")
                while True:
                    names = folders.get(parent)
                    if names is None:
                        folders[parent] = names = set()
                    elif name in names:
                        break
                    names.add(name)
                    if not parent:
                        break
                    parent, _, name = parent.rpartition("/")
            got = Tracked(folders)
            memo.remember_names(commit, got)
        return got

    def remove_untracked(self, picture: Mapping[str, tuple], commit: str, keep: frozenset[str]) -> set[str]:
        """Remove what `picture` (this tree's StatTree.verification walk) holds beyond `commit`
        and `keep` — what `git clean -ffdx` would remove. Returns the paths removed (a removed
        folder stands for everything under it)."""
        tracked = self.tracked_names(commit)
        removed: set[str] = set()
        for rel in sorted((r for r in picture if r and r not in tracked and r not in keep),
                          key=lambda r: r.count("/")):
            parent = rel.rpartition("/")[0]
            while parent and parent not in removed:
                parent = parent.rpartition("/")[0]
            if parent:
                continue   # went with a folder above it
            full = os.path.join(self.path, rel)
            try:
                if os.path.isdir(full) and not os.path.islink(full):
                    remove_tree(Path(full))
                else:
                    os.unlink(full)
            except OSError:
                pass       # the proof that follows finds whatever could not go
            removed.add(rel)
        return removed

    def snapshot(self) -> dict:
        return self.snapshotter.take()

    def restore_changes(self, commit: str, reference: dict, changes: list[Change]) -> None:
        """restore() when the tree's whole change set since `reference` is known (a full walk
        found `changes`, and nothing was written to the tree since): put back just those paths
        and check just those paths (and everything under any that is a folder). The rest of the
        tree is as the walk saw it, equal to `reference`.

        Only while git's view is still the one our own command left (HEAD, index, .git link):
        checkout-index then writes the incumbent's bytes. Anything else — or a path that does
        not come back equal — takes the full restore()."""
        if not self._as_we_left_it(commit):
            self.restore(commit, reference)
            return
        if not changes:
            return
        paths = {c.path for c in changes}
        try:
            self._unlock(paths)
            if self._force_checkout(changes, update_index=True):
                self._sealed(commit)  # checkout-index -u wrote the index (stat data only)
            ok = _matches(reference, self.snapshotter.take_paths(paths), paths)
        except (OSError, GitError):
            ok = False
        if not ok:
            self.restore(commit, reference)

    def _unlock(self, paths: Iterable[str]) -> None:
        """Give back u+rwx to the folders among `paths` (parents first), so that what is in
        them can be put back; restore() does this for every folder of the tree."""
        for rel in sorted(paths, key=lambda p: p.count("/")):
            full = os.path.join(self.path, rel)
            try:
                st = os.lstat(full)
                if stat.S_ISDIR(st.st_mode) and (st.st_mode & 0o700) != 0o700:
                    os.chmod(full, st.st_mode | 0o700)
            except OSError:
                pass

    def differs_from(self, commit: str, picture: Mapping[str, tuple] | None = None) -> list[str]:
        """Tracked paths of `commit` whose bytes, executable bit or type on disk are not what
        the commit says — hashed the way git hashes blobs, so nothing relies on git's stat cache
        (which trusts size and mtime, both settable). A file's hash stands while its lstat
        identity does (inode, size, mtime, ctime — ctime cannot be set back; not within a clock
        tick of the hash).

        `picture`: the tree's lstat data as autoloop.watch.StatTree.verification takes it (a
        caller that walks the tree anyway passes its walk; else one is taken here).

        Run before and after every measurement step, over every tracked file: so only what can
        differ from the last proof of this tree is looked at — files whose lstat data changed
        since, and paths whose blob or mode differ between the two commits — found with set
        operations on the picture (at 100k files, milliseconds instead of a Python loop)."""
        if picture is None:
            picture = StatTree.verification(self.path).take()
        entries = self._tree_entries(commit)
        listed = self._listing_map(commit)
        converted = self._converted(commit, entries)
        proof: tuple[dict[str, tuple], dict[str, tuple[str, str]]] | None = self.__dict__.get("_proof")
        if proof is None:
            stats: dict[str, tuple] = {}
            todo: Iterable[str] = listed.keys()
        else:
            was, was_listed = proof
            stats = dict(was)
            for path in was_listed.keys() - listed.keys():
                stats.pop(path, None)
            look = {path for path, _ in listed.items() - was_listed.items()}    # new blob or mode
            look.update(path for path, _ in stats.items() - picture.items())    # changed on disk
            look.update(listed.keys() - stats.keys())   # not proven last time (racy, failed, converted)
            todo = look
        algo = self._object_format()
        cache = self.__dict__.setdefault("_blob_cache", {})
        root = str(self.path)
        bad: dict[str, str] = {}
        for path in todo:
            mode, oid = listed[path]
            if mode == "160000" or path in converted:
                stats.pop(path, None)
                continue  # a gitlink: nothing on disk to compare; converted files: below
            st = picture.get(path)  # (kind, mode bits, size, mtime_ns, ctime_ns, ino, link target)
            why, trusted = _check_file(root, path, mode, oid, st, algo, cache)
            if why is None and trusted:
                stats[path] = st
            else:
                stats.pop(path, None)
                if why is not None:
                    bad[path] = why
        self.__dict__["_proof"] = (stats, listed)
        self.__dict__["_proved_with"] = picture if not bad and not converted else None
        out = [f"{path} ({bad[path]})" for _, _, path in entries if path in bad] if bad else []
        if converted:
            # files whose bytes on disk git converts (eol, a filter such as LFS, ident): ask git
            # what it would store for them
            paths = [path for _, _, path in entries if path in converted]
            for path in paths:
                full = os.path.join(self.path, path)
                if not os.path.isfile(full) or os.path.islink(full):
                    out.append(f"{path} (missing)")
            present = [p for p in paths if os.path.isfile(os.path.join(self.path, p))]
            if present:
                got = git(self.path, "hash-object", "--stdin-paths",
                          input="\n".join(present).encode("utf-8", "surrogateescape") + b"\n").split()
                for path, oid in zip(present, got):
                    if oid != listed[path][1]:
                        out.append(f"{path} (content)")
        return out

    def picture_after_reset(self, proved: Mapping[str, tuple], commit: str) -> dict[str, tuple] | None:
        """This tree's picture after `git reset --hard commit`, when just before it the tree was
        exactly `proved` — the picture of its last passing proof: that picture, with the paths
        whose blob or mode differ between the two commits (the ones reset writes or removes)
        looked at again. None when `proved` is not that picture, or too much changed."""
        proof = self.__dict__.get("_proof")
        if proof is None or self.__dict__.get("_proved_with") is not proved:
            return None
        was = proof[1]
        listed = self._listing_map(commit)
        touched = {path for path, _ in listed.items() - was.items()}
        touched.update(was.keys() - listed.keys())
        if len(touched) > 10_000:
            return None
        out = dict(proved)
        root = str(self.path)
        for rel in touched:
            st = lstat_entry(os.path.join(root, rel))
            if st is None:
                out.pop(rel, None)
                continue
            out[rel] = st
            parent = rel.rpartition("/")[0]
            while parent and parent not in out:   # a folder the reset made
                made = lstat_entry(os.path.join(root, parent))
                if made is not None:
                    out[parent] = made
                parent = parent.rpartition("/")[0]
        return out

    def _listing_map(self, commit: str) -> dict[str, tuple[str, str]]:
        """path -> (mode, oid) of every file of `commit`."""
        memo = _shared(self.common_dir)
        with memo.lock:
            got = memo.maps.get(commit)
        if got is None:
            got = {path: (mode, oid) for mode, oid, path in self._tree_entries(commit)}
            with memo.lock:
                _put_newest(memo.maps, commit, got, 4)
        return got

    def _converted(self, commit: str, entries: list[tuple[str, str, str]]) -> frozenset[str]:
        """Paths of `commit` that git converts between blob and disk (eol, filter, ident,
        working-tree-encoding attributes). A path's attributes follow from the path and the
        attribute files: the commit's .gitattributes, and files outside the tree that the
        integrity check keeps as they were (.git/info, your global attributes and config). So
        the answers are kept while the commit's .gitattributes are the same ones, and git is
        asked only about paths it has not been asked about (none, when a cycle edits files)."""
        memo = _shared(self.common_dir)
        with memo.lock:
            got = memo.conv.get(commit)
        if got is not None:
            return got
        listed = self._listing_map(commit)
        key = attr_key(entries)
        with memo.lock:
            if memo.attr_key != key:
                memo.attr_key, memo.converts, memo.convert_true = key, {}, set()
            known = memo.converts
            ask = sorted(p for p in listed.keys() - known.keys() if listed[p][0] in ("100644", "100755"))
            if ask:
                memo.learn_converts(ask, _converting(self.path, ask))
            if len(known) > 2 * len(listed) + 1000:  # paths of old commits pile up: start afresh
                memo.converts = {path: known[path] for path in listed if path in known}
                memo.convert_true &= memo.converts.keys()
            got = frozenset(p for p in memo.convert_true if p in listed and listed[p][0] in ("100644", "100755"))
            _put_newest(memo.conv, commit, got, 4)
        return got

    def _tree_entries(self, commit: str) -> list[tuple[str, str, str]]:
        """(mode, oid, path) of every file of `commit` (a listing the worktrees of the repository
        share: the one autoloop made a candidate from is there without asking git)."""
        memo = _shared(self.common_dir)
        with memo.lock:
            got = memo.listings.get(commit)
        if got is not None:
            return got
        raw = git(self.repo_root, "ls-tree", "-r", "-z", "--full-tree", commit)
        entries = []
        for item in raw.split("\0"):
            if not item:
                continue
            meta, _, path = item.partition("\t")
            mode, _kind, oid = meta.split(" ")
            entries.append((mode, oid, path))
        memo.remember(commit, entries)
        return entries

    def _object_format(self) -> str:
        fmt = self.__dict__.get("_objfmt")
        if fmt is None:
            out = git(self.repo_root, "rev-parse", "--show-object-format", check=False).strip()
            fmt = "sha256" if out == "sha256" else "sha1"
            self.__dict__["_objfmt"] = fmt
        return fmt

    def restore(self, commit: str, reference: dict) -> None:
        """Put the work tree back to `reference` (a snapshot taken at `commit`), exactly.

        git's reset relies on stat data, which a generator can fake (same size and mtime, other
        bytes) and ignores mode bits it does not track; so after it we compare our own snapshot
        and re-check-out whatever still differs.
        """
        if self.dotgit_tampered():
            self.restore_dotgit()
        self._unlock_dirs()
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

    def _unlock_dirs(self) -> None:
        """A generator may chmod folders so git cannot clean them; give the permission back."""
        for dirpath, dirnames, _ in os.walk(self.path):
            for d in dirnames:
                full = os.path.join(dirpath, d)
                if not os.path.islink(full):
                    try:
                        st = os.lstat(full)
                        if (st.st_mode & 0o700) != 0o700:
                            os.chmod(full, st.st_mode | 0o700)
                    except OSError:
                        pass

    def _force_checkout(self, changes: list[Change], update_index: bool = False,
                        env: dict[str, str] | None = None) -> bool:
        """Remove what `changes` added, put back what they changed from the index (the
        worktree's, or env's GIT_INDEX_FILE). Returns whether git ran."""
        tracked: list[str] = []
        for ch in sorted(changes, key=lambda c: c.path.count("/"), reverse=True):
            full = self.path / ch.path
            if ch.before is not None and ch.before.kind == "d":
                if full.is_dir() and not full.is_symlink():
                    os.chmod(full, ch.before.mode)
                    continue
            if full.is_dir() and not full.is_symlink():
                remove_tree(full)
            elif full.is_symlink() or full.exists():
                full.unlink()  # files, links, and the FIFOs and sockets git clean leaves alone
            if ch.before is not None and ch.before.kind in ("f", "l"):
                tracked.append(ch.path)
        if tracked:
            git(self.path, "checkout-index", "-f", "--ignore-skip-worktree-bits", "-z", "--stdin",
                *(["-u"] if update_index else []),
                input="\0".join(tracked).encode("utf-8", "surrogateescape") + b"\0", env=env)
        for ch in changes:  # modes of folders re-created above
            if ch.before is not None and ch.before.kind == "d" and (self.path / ch.path).is_dir():
                os.chmod(self.path / ch.path, ch.before.mode)
        return bool(tracked)



class Workspace(Worktree):
    """A run's branch `autoloop/TAG` and the detached worktree where the generator works."""

    def __init__(self, repo_root: Path, tag: str) -> None:
        self.repo_root = repo_root
        self.tag = tag
        self.branch = BRANCH_PREFIX + tag
        self.ref = "refs/heads/" + self.branch
        common = git(repo_root, "rev-parse", "--git-common-dir").strip()
        self.common_dir = (repo_root / common).resolve()
        repo_id = hashlib.sha256(str(repo_root.resolve()).encode()).hexdigest()[:12]
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        # Outside the repository on purpose: tools that walk up from their cwd looking for
        # configuration (pytest, ruff, setuptools) must not find the user's checkout.
        super().__init__(repo_root, self.common_dir,
                         cache / "autoloop" / "worktrees" / f"{repo_root.name}-{repo_id}" / _slug(tag))
        self._sentinel: Sentinel | None = None
        self._refs: dict[str, str] | None = None
        self._refs_seen: tuple = ()
        self._objects: dict | None = None
        self._obj_ids: dict[str, set[str]] = {}
        self._frozen: dict[Path, str] = {}
        self._verify_trees: dict[int, Worktree] = {}
        self._gen_trees: dict[int, Worktree] = {}
        self._identity: Identity | None = None
        self._trees: dict[str, str] = {}
        self._commits: set[str] = set()   # known to be commits: the branch may be read from its file
        # the last candidate's private index, when it was made from our sealed worktree index
        # (so its stat data is this tree's): (base, tree, seal)
        self._candidate: tuple[str, str, IndexSeal] | None = None
        # the last candidate written by hand (autoloop.objects): (base, tree)
        self._by_hand: tuple[str, str] | None = None
        self._folders: dict[str, Trees] = {}     # tree id -> its folders (the last few)
        self._folders_lock = threading.Lock()     # parallel workers make candidates at once
        self._store: ObjectStore | None = None
        self._file_mode: bool | None = None

    def verify_tree(self, slot: int = 0) -> Worktree:
        """A pristine tree for measuring commits (slot 0 candidate, 1 incumbent, ...), beside the
        generator's: nothing the generator left behind — caches, ignored files, processes'
        output — is there, and it holds exactly the commit it is checked out at."""
        tree = self._verify_trees.get(slot)
        if tree is None:
            tree = Worktree(self.repo_root, self.common_dir, self.path.with_name(f"{self.path.name}.verify-{slot}"))
            self._verify_trees[slot] = tree
        return tree

    def drop_verify_trees(self, keep: set[int], upto: int = 4) -> None:
        """Remove the verification trees of slots not in `keep` (below `upto`): the cycles of
        this run do not measure there, and the generators' watch of a tree that is not there
        costs nothing (one that appears is still seen). A slot needed later (the end-of-run
        check) is made afresh then."""
        for slot in range(upto):
            if slot in keep:
                continue
            path = self.path.with_name(f"{self.path.name}.verify-{slot}")
            if path.exists() or path.is_symlink() or any(True for _ in Worktree(
                    self.repo_root, self.common_dir, path)._own_admin_dirs()):
                Worktree(self.repo_root, self.common_dir, path)._discard()
            self._verify_trees.pop(slot, None)

    def gen_tree(self, worker: int) -> Worktree:
        """Worker `worker`'s tree in a parallel round (autoloop.parallel): worker 0 edits this
        run's own tree, the others each their own one beside it, kept across rounds."""
        if worker == 0:
            return self
        tree = self._gen_trees.get(worker)
        if tree is None:
            tree = Worktree(self.repo_root, self.common_dir, self.path.with_name(f"{self.path.name}.gen-{worker}"))
            self._gen_trees[worker] = tree
        return tree

    def clear_stale_locks(self) -> None:
        (self.common_dir / (self.ref + ".lock")).unlink(missing_ok=True)
        super().clear_stale_locks()
        for slot in range(4):
            Worktree(self.repo_root, self.common_dir,
                     self.path.with_name(f"{self.path.name}.verify-{slot}")).clear_stale_locks()

    # ---- checks before anything changes -------------------------------------------------

    def check_state(self) -> None:
        """Refuse repositories we cannot work on safely (RepoStateError = exit 2)."""
        if git(self.repo_root, "rev-parse", "--is-bare-repository").strip() == "true":
            raise RepoStateError(f"{self.repo_root}: a bare repository has no work tree to run in")
        if not git(self.repo_root, "rev-parse", "--verify", "-q", "HEAD", check=False).strip():
            raise RepoStateError(f"{self.repo_root}: the repository has no commit yet: the baseline is a commit, so "
                                 "commit your files first: git add -A && git commit -m start")
        for marker in ("MERGE_HEAD", "REBASE_HEAD", "CHERRY_PICK_HEAD", "rebase-merge", "rebase-apply"):
            if (self.common_dir / marker).exists():
                raise RepoStateError(f"{self.repo_root}: a merge or rebase is in progress; finish it first")
        self.check_tag()

    def check_tag(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", self.tag) or ".." in self.tag \
                or self.tag.endswith((".lock", ".")):
            raise RepoStateError(f"--tag {self.tag!r}: use letters, digits, '.', '_' or '-' (at most 64)")

    # ---- `autoloop clean` -------------------------------------------------------------------

    def leftovers(self) -> list[Path]:
        """This tag's entries in the worktree cache: the generator's tree, the verification and
        parallel workers' trees, the scratch folder, the frozen git config and the lock file."""
        parent = self.path.parent
        if not parent.is_dir():
            return []
        rx = re.compile(re.escape(self.path.name) + r"(?:\.(?:verify|gen)-\d+|\.scratch|\.lock|\.gitconfig)?")
        return sorted(p for p in parent.iterdir() if rx.fullmatch(p.name))

    def remove_leftovers(self) -> list[Path]:
        """Remove them (a tree with its admin folder under .git/worktrees), then let git forget
        every worktree whose folder is gone. The caller holds the tag's lock."""
        removed = []
        for p in self.leftovers():
            if p.name.endswith(".lock"):
                continue                      # the caller's lock: it removes it last
            if (p / ".git").is_file():
                Worktree(self.repo_root, self.common_dir, p)._discard()
            elif p.is_dir() and not p.is_symlink():
                remove_tree(p)
            else:
                p.unlink(missing_ok=True)
            removed.append(p)
        git(self.repo_root, "worktree", "prune")
        try:
            self.path.parent.rmdir()          # the repository's folder in the cache, once empty
        except OSError:
            pass
        return removed

    def remove_branch(self) -> str | None:
        """`autoloop clean --branch`: delete `autoloop/TAG` (returns the commit it pointed at,
        None when there was none). Refused while the user's checkout has it checked out."""
        head = self.branch_head()
        if head is None:
            return None
        current = git(self.repo_root, "symbolic-ref", "-q", "HEAD", check=False).strip()
        if current == self.ref:
            raise RepoStateError(f"{self.branch} is checked out in {self.repo_root}; switch to another "
                                 "branch first (git switch -)")
        self.delete_branch(head)
        return head

    def branch_head(self) -> str | None:
        # A loose ref file wins over packed-refs, so when it names a commit we made or checked,
        # that is the answer without a git process; anything else (packed, symbolic, another
        # ref backend, a stranger's value) is git's to resolve.
        got = _read_regular(self.common_dir / self.ref, 200)
        loose = got[1].decode("ascii", "replace").strip() if got is not None else None
        if loose in self._commits:
            return loose
        out = git(self.repo_root, "rev-parse", "--verify", "-q", self.ref + "^{commit}", check=False).strip()
        if out:
            self._commits.add(out)
        return out or None

    def head(self) -> str:
        return git(self.repo_root, "rev-parse", "--verify", "HEAD^{commit}").strip()

    def identity(self) -> Identity:
        if self._identity is not None:
            return self._identity
        name = git(self.repo_root, "config", "user.name", check=False).strip() or "autoloop"
        email = git(self.repo_root, "config", "user.email", check=False).strip() or "autoloop@localhost"
        self._identity = Identity(name, email)
        return self._identity

    # ---- setup -----------------------------------------------------------------------------

    def create_branch(self, start: str) -> None:
        git(self.repo_root, "update-ref", "-m", "autoloop: start run", self.ref, start, "")
        self._commits.add(start)

    def uncommitted(self, paths: Sequence[str]) -> dict[str, str]:
        """Which of `paths` (repo-relative) the user's checkout has otherwise than HEAD:
        'untracked', 'ignored' or 'modified' (in the index or on disk)."""
        if not paths:
            return {}
        out = git(self.repo_root, "status", "--porcelain=v1", "-z", "--ignored=matching",
                  "--untracked-files=all", "--no-renames", "--", *paths, check=False)
        found: dict[str, str] = {}
        for entry in out.split("\0"):
            if len(entry) < 4:
                continue
            xy, rel = entry[:2], entry[3:]
            found[rel] = "untracked" if xy == "??" else "ignored" if xy == "!!" else "modified"
        return found

    def delete_branch(self, expected: str) -> None:
        """Remove the run branch, only if it is still at `expected` (git checks, atomically)."""
        git(self.repo_root, "update-ref", "-m", "autoloop: restart run", "-d", self.ref, expected)

    def exclude_in_checkout(self, rel_paths: Iterable[str]) -> None:
        """Keep our files out of git's view in the user's checkout (.git/info/exclude)."""
        exclude = self.common_dir / "info" / "exclude"
        exclude.parent.mkdir(parents=True, exist_ok=True)
        existing = exclude.read_text(errors="replace").splitlines() if exclude.exists() else []
        wanted = ["/" + p.lstrip("/") for p in rel_paths]
        missing = [w for w in wanted if w not in existing]
        if missing:
            with open(exclude, "a") as f:
                if existing and existing[-1] != "":
                    f.write("\n")
                f.write("# autoloop run files\n" + "".join(m + "\n" for m in missing))

    # ---- integrity of git's own files --------------------------------------------------------

    def freeze_config(self) -> None:
        """Our git calls read your global/system config as it is now (freeze_outer_config); the
        private copy lives beside the work tree, outside the repository."""
        self._frozen = freeze_outer_config(self.repo_root, self.path.with_name(self.path.name + ".gitconfig"))

    def watch_git(self, extra: Sequence[Path] = ()) -> Sentinel:
        """Files git obeys during our own calls, plus `extra` user-side files (program.md)."""
        assert self._admin_dir is not None
        c = self.common_dir
        watched = {
            c / "config": ".git/config",
            c / "config.worktree": ".git/config.worktree",
            c / "hooks": ".git/hooks",
            c / "info": ".git/info",
            c / "objects" / "info": ".git/objects/info",
            c / "commondir": ".git/commondir",
            self._admin_dir / "config.worktree": "worktree config",
            self._admin_dir / "commondir": "worktree commondir",
            self._admin_dir / "gitdir": "worktree gitdir",
        }
        # git reads the user's and the system's config too: a filter or an attributes file
        # planted there would run (or change bytes) inside our own git calls
        for path, label in _outer_git_config().items():
            watched.setdefault(path, label)
        for path, label in self._frozen.items():
            watched.setdefault(path, label)
        for p in extra:
            watched[p] = p.name
        self._sentinel = Sentinel(watched, label=watched)
        self._sentinel.capture()
        return self._sentinel

    # ---- refs ---------------------------------------------------------------------------------

    def _read_refs(self) -> dict[str, str]:
        """Every ref of the repository (loose, packed, refs/replace, tags, stash, notes) but the
        run branch, which the loop checks itself: name -> object id, or `ref: target`."""
        raw = git(self.repo_root, "for-each-ref", "--format=%(refname)%00%(objectname)%00%(symref)")
        out: dict[str, str] = {}
        for line in raw.splitlines():
            name, oid, sym = (line.split("\0") + ["", ""])[:3]
            if name != self.ref:
                out[name] = f"ref: {sym}" if sym else oid
        return out

    def _refs_picture(self) -> tuple:
        """The stat identity of every file and folder that holds refs (loose refs, packed-refs,
        the reftable folder): unchanged, the refs are unchanged (ctime cannot be set back)."""
        out = []
        for top in ("refs", "packed-refs", "reftable"):
            for dirpath, dirnames, filenames in os.walk(self.common_dir / top) if (self.common_dir / top).is_dir() \
                    else [(str(self.common_dir), [], [top])]:
                for name in sorted(dirnames) + sorted(filenames):
                    full = os.path.join(dirpath, name)
                    try:
                        st = os.lstat(full)
                    except OSError:
                        continue
                    out.append((full, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
        return tuple(out)

    def capture_refs(self) -> None:
        picture = self._refs_picture()
        if self._refs is None or picture != self._refs_seen:
            self._refs = self._read_refs()
            self._refs_seen = self._refs_picture()

    def refs_changed(self) -> list[str]:
        """The refs made, moved or deleted since capture_refs, each put back as it was (git's
        reflog keeps what they pointed at); one line each."""
        if self._refs is None or self._refs_picture() == self._refs_seen:
            return []
        now = self._read_refs()
        problems = []
        for name in sorted(set(now) | set(self._refs)):
            was, is_ = self._refs.get(name), now.get(name)
            if was == is_:
                continue
            if was is None:
                problems.append(f"made ref {name}")
                git(self.repo_root, "update-ref", "--no-deref", "-d", name, check=False)
                continue
            problems.append(f"{'deleted' if is_ is None else 'moved'} ref {name}")
            if was.startswith("ref: "):
                git(self.repo_root, "symbolic-ref", name, was[len("ref: "):], check=False)
            else:
                git(self.repo_root, "update-ref", "--no-deref", "-m", "autoloop: undo a ref change by the generator",
                    name, was, check=False)
        self._refs = self._read_refs()
        self._refs_seen = self._refs_picture()
        return problems

    # ---- the object store -----------------------------------------------------------------------

    def capture_objects(self, commit: str, paths: Sequence[str]) -> None:
        """Remember the pack files of the object store and the loose files of the objects that
        make `commit`'s `paths` what they are (the commit, the trees down to them, their blobs):
        git trusts an object's file to hold what its name says, and never checks on read."""
        ids = self._obj_ids.get(commit)
        if ids is None:
            # from the commit's folders (kept commits are made, and remembered, by autoloop:
            # no git call for them)
            folders = self.folders_of(commit).folders
            ids = {commit, self.tree_of(commit)}
            for path in paths:
                parent = ""
                for name in path.split("/"):
                    entry = folders.get(parent, {}).get(name)
                    if entry is None:
                        break
                    ids.add(entry[1])
                    parent = f"{parent}/{name}" if parent else name
            self._obj_ids = {commit: ids}
        objects = self.common_dir / "objects"
        self._objects = {"packs": _idents(objects / "pack"), "loose": {}}
        for oid in ids:
            f = objects / oid[:2] / oid[2:]
            try:
                st = os.lstat(f)
                self._objects["loose"][oid] = (_object_ident(st), f.read_bytes(), stat.S_IMODE(st.st_mode))
            except OSError:
                pass

    def objects_changed(self) -> list[str]:
        """What changed in the captured part of the object store, loose files put back."""
        if self._objects is None:
            return []
        objects = self.common_dir / "objects"
        problems = []
        packs = _idents(objects / "pack")
        was = self._objects["packs"]
        if any(packs.get(name) != ident for name, ident in was.items()):
            problems.append("rewrote or removed git's pack files (objects/pack; `git fsck` tells what is left)")
        for oid, (ident, data, mode) in self._objects["loose"].items():
            f = objects / oid[:2] / oid[2:]
            try:
                same = _object_ident(os.lstat(f)) == ident
            except OSError:
                same = False
            if not same:
                problems.append(f"rewrote git's object {oid[:12]}")
                _clear_path(f)
                f.parent.mkdir(parents=True, exist_ok=True)
                _write_file(f, data)
                os.chmod(f, mode)
        if problems:
            self._objects = None
        return problems

    # ---- commits ------------------------------------------------------------------------------

    def candidate_tree(self, base: str, changes: list[Change], where: Worktree | None = None) -> str:
        """The tree of `base` plus exactly the changed files as they are on disk now — written
        through a private index, so ignore rules and index flags play no part. `where` is the
        tree the files are in (a parallel worker's), this run's own tree by default."""
        root = (where or self).path
        # every path that is or was a file/link; folders come and go with their files
        paths = sorted({c.path for c in changes
                        if (c.before is not None and c.before.kind != "d")
                        or (c.after is not None and c.after.kind != "d")})
        self._candidate = None
        self._by_hand = None
        tree = self._by_hand_tree(base, paths, root)
        if tree is not None:
            self._by_hand = (base, tree)
            return tree
        if where is not None and where is not self:
            # a parallel worker's tree: its files through a fresh index (the copy of the sealed
            # index below is this tree's, with this tree's stat data)
            with tempfile.TemporaryDirectory(prefix="autoloop-index-") as tmp:
                return self._write_candidate(base, paths, Path(tmp) / "index", fresh=True, root=root)
        # The private index starts as the tree of `base`: a copy of the worktree's own index
        # when that is byte for byte what our own command wrote at `base` (then it keeps this
        # tree's stat data, and can become the worktree's index if the candidate is kept), else
        # read from the commit in a temporary folder.
        ours = self._seal.read_intact() if self._seal is not None and self._at == base else None
        if ours is None or self._admin_dir is None or self.dotgit_tampered():
            with tempfile.TemporaryDirectory(prefix="autoloop-index-") as tmp:
                return self._write_candidate(base, paths, Path(tmp) / "index", fresh=True)
        index = self._admin_dir / "autoloop-candidate-index"
        try:
            _write_file(index, ours)
            # The copy keeps the mtime git gave the original. git trusts an entry whose stat data
            # (times in whole seconds) match the file unless the file changed no earlier than
            # the index was written; a copy dated now would make an entry written in the same
            # second as the original index look safely old, and update-index would take a
            # same-size rewrite of it for the incumbent's bytes (the candidate then silently
            # equals the incumbent: "no_change").
            written = self._seal.written_ns()
            os.utime(index, ns=(written, written))
        except OSError:
            with tempfile.TemporaryDirectory(prefix="autoloop-index-") as tmp:
                return self._write_candidate(base, paths, Path(tmp) / "index", fresh=True)
        tree = self._write_candidate(base, paths, index, fresh=False)
        seal = IndexSeal(index)
        seal.seal()
        self._candidate = (base, tree, seal)
        return tree

    def _by_hand_tree(self, base: str, paths: list[str], root: Path) -> str | None:
        """The candidate's tree written by autoloop itself (autoloop.objects) — None where git
        could store other bytes than the disk holds: attributes that convert a changed path, a
        changed .gitattributes, core.fileMode off, anything but a regular file, a big file."""
        if not paths or len(paths) > 1000 or any(p.rpartition("/")[2] == ".gitattributes" for p in paths):
            return None
        if not self._tracks_file_mode():
            return None
        trees = self.folders_of(base)
        memo = _shared(self.common_dir)
        with memo.lock:
            if memo.attr_key != trees.attr_key():
                return None   # not the attributes the answers below were given for
            ask = [p for p in paths if p not in memo.converts]
            if ask:
                # paths new to the repository (or not asked yet): asked in the generator's tree,
                # whose .gitattributes are the incumbent's (a changed one never comes here)
                memo.learn_converts(ask, _converting(self.path, ask))
            if any(memo.converts[p] for p in paths):
                return None
        store = self.object_store()
        try:
            changed = changed_entries(root, paths, store, max_bytes=_BY_HAND_MAX)
        except (ValueError, OSError):
            return None
        made = derive(trees, changed, store)
        made.inherit_attr_key(trees)   # no .gitattributes among the changes (see above)
        self._remember_folders(made)
        return made.root

    def _tracks_file_mode(self) -> bool:
        if self._file_mode is None:
            out = git(self.repo_root, "config", "--bool", "core.fileMode", check=False).strip()
            self._file_mode = out != "false"
        return self._file_mode

    def object_store(self) -> ObjectStore:
        if self._store is None:
            self._store = ObjectStore(self.common_dir / "objects", self._object_format())
        return self._store

    def folders_of(self, commit: str) -> Trees:
        """`commit`'s folders: made by us (a kept candidate), or listed by git once."""
        tree = self.tree_of(commit)
        with self._folders_lock:
            got = self._folders.get(tree)
        if got is None:
            got = Trees.parse(git(self.repo_root, "ls-tree", "-r", "-t", "-z", "--full-tree", commit), tree)
            self._remember_folders(got)
        return got

    def _remember_folders(self, trees: Trees) -> None:
        with self._folders_lock:
            # the incumbent, and the candidates of a round (one each worker) to spare
            _put_newest(self._folders, trees.root, trees, 9)

    def _write_candidate(self, base: str, paths: list[str], index: Path, fresh: bool,
                         root: Path | None = None) -> str:
        root = root or self.path
        env = _git_env()
        env["GIT_INDEX_FILE"] = str(index)
        if fresh:
            git(root, "read-tree", base, env=env)
        if paths:
            # --replace: a file may become a folder (train.py -> train.py/main.py) or back
            git(root, "update-index", "--add", "--remove", "--replace", "-z", "--stdin", env=env,
                input="\0".join(paths).encode("utf-8", "surrogateescape") + b"\0")
        return git(root, "write-tree", env=env).strip()

    def keep(self, commit: str, parent: str, reference: dict, changes: list[Change]) -> dict:
        """After `commit` (the last candidate on `parent`) is kept: make the tree exactly a
        checkout of `commit` and return its snapshot, cheaply when we can — only the changed
        paths are rewritten (from the candidate's index, which then becomes the worktree's) and
        looked at again; anything else takes reset_hard + a full walk.

        Like a checkout, this drops what git does not record (modes other than +x, empty
        folders) and writes what its filters would."""
        cand, by_hand = self._candidate, self._by_hand
        self._candidate = self._by_hand = None
        tree = self.tree_of(commit)
        via_index = cand is not None and cand[0] == parent and cand[1] == tree
        if not (via_index or by_hand == (parent, tree)) or not changes or not self._as_we_left_it(parent):
            self.reset_hard(commit)
            return self.snapshot()
        assert self._admin_dir is not None and self._seal is not None
        paths = {c.path for c in changes}
        env = _git_env()
        if cand is not None:
            env["GIT_INDEX_FILE"] = str(cand[2].path)
        try:
            self._unlock(paths)
            self._forget()
            # out with everything the generator changed, then the kept files from the index
            # that holds exactly the candidate tree
            new = []
            for ch in sorted(changes, key=lambda c: c.path.count("/"), reverse=True):
                full = self.path / ch.path
                if ch.before is not None and ch.before.kind == "d" and full.is_dir() and not full.is_symlink():
                    continue  # a folder of the incumbent: its mode is put back below
                if full.is_dir() and not full.is_symlink():
                    remove_tree(full)
                elif full.is_symlink() or full.exists():
                    full.unlink()
                if ch.after is not None and ch.after.kind in ("f", "l"):
                    new.append(ch.path)
            if via_index:
                assert cand is not None
                if not cand[2].intact():
                    raise GitError("the candidate's index changed")
                if new:
                    git(self.path, "checkout-index", "-f", "-u", "-z", "--stdin", env=env,
                        input="\0".join(new).encode("utf-8", "surrogateescape") + b"\0")
            else:
                # written by hand, so there is no candidate index: git moves HEAD, the index and
                # the files (only those removed above differ) to the commit in one go
                git(self.path, "reset", "-q", "--hard", commit)
            for ch in changes:  # folder modes are not recorded: the incumbent's stay
                full = self.path / ch.path
                if ch.before is not None and ch.before.kind == "d" and full.is_dir() and not full.is_symlink():
                    os.chmod(full, ch.before.mode)
            # folders left empty are not in the commit: a checkout would not have them
            gone = _remove_empty_parents(self.path, paths)
            if via_index:
                assert cand is not None
                os.replace(cand[2].path, self._admin_dir / "index")
                git(self.path, "update-ref", "--no-deref", "-m", "autoloop: keep", "HEAD", commit, parent)
            self._sealed(commit)
        except (OSError, GitError):
            self.reset_hard(commit)
            return self.snapshot()
        look = paths | gone
        got = self.snapshotter.take_paths(look)
        after = dict(reference)
        for rel in look:
            after.pop(rel, None)
        # a folder of the incumbent among them was walked whole: its old contents go (one pass)
        walked = tuple(p + "/" for p in look if p in got and got[p].kind == "d" and p in reference)
        if walked:
            for rel in [k for k in after if k.startswith(walked)]:
                del after[rel]
        after.update(got)
        return after

    def tree_of(self, commit: str) -> str:
        if commit not in self._trees:  # commits are immutable: ask git once
            self._trees[commit] = git(self.repo_root, "rev-parse", commit + "^{tree}").strip()
        return self._trees[commit]

    def written_by_hand(self, base: str, tree: str) -> bool:
        """Was `tree` (the last candidate on `base`) written by autoloop itself?"""
        return self._by_hand == (base, tree)

    def differs_at(self, tree_a: str, tree_b: str, paths: Sequence[str]) -> list[str]:
        """Those of `paths` (files or folders) whose entries differ between two trees — by git's
        own object graph, replace refs ignored: a candidate must carry the incumbent's blob for
        every protected path, whatever wrote its tree."""
        if not paths:
            return []
        raw = git(self.repo_root, "diff-tree", "-r", "-z", "--no-renames", "--name-only", tree_a, tree_b,
                  "--", *paths)
        return [p for p in raw.split("\0") if p]

    def commit(self, tree: str, parent: str, message: str, who: Identity) -> str:
        """A commit of `tree` on `parent`, written as `git commit-tree` would (same bytes)."""
        commit = self.object_store().commit(tree, parent, who.name, who.email, message)
        self._trees[commit] = tree
        self._commits.add(commit)
        with self._folders_lock:
            made = self._folders.get(tree)
        if made is not None:   # its listing is known: the verification trees need not ask git
            memo = _shared(self.common_dir)
            memo.remember(commit, made.files())
            memo.remember_names(commit, Tracked(made.folders))
        return commit

    def advance(self, new: str, old: str, reason: str) -> None:
        """Move the run branch from `old` to `new`, refusing if someone else moved it."""
        git(self.repo_root, "update-ref", "-m", reason, self.ref, new, old)
        self._commits.update((new, old))

    def rewind(self, to: str, current: str) -> None:
        git(self.repo_root, "update-ref", "-m", "autoloop: roll back an unfinished cycle",
            self.ref, to, current)
        self._commits.add(to)

    def is_ancestor(self, a: str, b: str) -> bool:
        return run_git_process([git_executable(), "-c", "core.hooksPath=/dev/null", "merge-base", "--is-ancestor", a, b],
                               cwd=self.repo_root, env=_git_env()).returncode == 0

    def commit_message(self, commit: str) -> str:
        return git(self.repo_root, "log", "-1", "--format=%B", commit)

    def diffstat(self, a: str, b: str) -> str:
        return self.diffstat_later(a, b)()

    def diffstat_later(self, a: str, b: str) -> "Later":
        """`git diff --shortstat a b`, started now and read when called: it only reads objects,
        so it runs beside whatever comes next (the verify tree's reset, the verifier)."""
        return Later(self.repo_root, ["diff", "--no-ext-diff", "--no-textconv", "--shortstat", a, b])

    def archive(self, commit: str) -> bytes:
        """`commit`'s files as an uncompressed tar, exactly as stored: blob bytes, modes and
        symlinks from the object database (autoloop.executors ships it to remote verifiers).
        Not `git archive`: .gitattributes in the commit (export-ignore, export-subst) would
        let a candidate change what is measured."""
        listing = git_bytes(self.repo_root, "ls-tree", "-r", "-z", "--full-tree", commit)
        entries: list[tuple[str, str, bytes]] = []
        for item in listing.split(b"\0"):
            if not item:
                continue
            meta, path = item.split(b"\t", 1)
            mode, kind, sha = meta.decode().split()
            entries.append((mode, sha, path))
        blobs = [e for e in entries if e[0] != "160000"]   # submodules are not part of the tree's bytes
        data = git_bytes(self.repo_root, "cat-file", "--batch",
                         input=b"".join(sha.encode() + b"\n" for _, sha, _ in blobs))
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
            pos = 0
            for mode, sha, path in blobs:
                nl = data.index(b"\n", pos)
                size = int(data[pos:nl].split()[2])
                body = data[nl + 1: nl + 1 + size]
                pos = nl + 1 + size + 1
                info = tarfile.TarInfo(path.decode("utf-8", "surrogateescape"))
                if mode == "120000":
                    info.type, info.linkname = tarfile.SYMTYPE, body.decode("utf-8", "surrogateescape")
                    tar.addfile(info)
                else:
                    info.size, info.mode = size, 0o755 if mode == "100755" else 0o644
                    tar.addfile(info, io.BytesIO(body))
        return out.getvalue()

    def diff_text(self, a: str, b: str, limit: int = 200_000) -> str:
        out = git(self.repo_root, "diff", "--no-ext-diff", "--no-textconv", a, b)
        return out[:limit]


class Later:
    """A read-only git command running in the background (a thread waiting on `git()`, so the
    child is started, shielded and registered like every git of ours); calling it waits for its
    output, or raises what `git()` raised."""

    def __init__(self, cwd: Path, args: list[str]) -> None:
        self._out: str | None = None
        self._exc: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(cwd, args), daemon=True)
        self._thread.start()

    def _run(self, cwd: Path, args: list[str]) -> None:
        try:
            self._out = git(cwd, *args)
        except BaseException as exc:  # handed to the caller
            self._exc = exc

    def __call__(self) -> str:
        self._thread.join()
        if self._exc is not None:
            raise self._exc
        assert self._out is not None
        return self._out.strip()


def _write_file(path: Path, data: bytes) -> None:
    """A file of our own in git's admin folder: made afresh, never written through whatever a
    generator may have put at that name (a symlink to a file of the user's)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644)
    with open(fd, "wb") as f:
        f.write(data)


def _remove_empty_parents(root: Path, paths: Iterable[str]) -> set[str]:
    """Remove the folders among `paths` and their parents that are empty (deepest first), as
    `git clean -d` would; returns the ones removed."""
    folders: set[str] = set()
    for rel in paths:
        parts = rel.split("/")
        for i in range(1, len(parts) + 1):
            folders.add("/".join(parts[:i]))
    removed: set[str] = set()
    for rel in sorted(folders, key=lambda p: p.count("/"), reverse=True):
        full = os.path.join(root, rel)
        try:
            if not os.path.islink(full) and os.path.isdir(full) and not os.listdir(full):
                os.rmdir(full)
                removed.add(rel)
        except OSError:
            pass
    return removed


def _matches(reference: Snapshot, got: dict[str, Entry], paths: set[str]) -> bool:
    """Do the entries of `paths` (and of everything under those that are folders), taken
    afresh, equal the reference's?"""
    for rel in paths:
        if reference.get(rel) != got.get(rel):
            return False
    for rel, entry in got.items():
        if reference.get(rel) != entry:
            return False
    folders = [rel + "/" for rel in paths if rel in got and got[rel].kind == "d"]
    if folders:  # nothing of the reference may be missing under a folder we walked
        prefixes = tuple(folders)
        if sum(1 for rel in reference if rel.startswith(prefixes)) != sum(1 for rel in got if rel.startswith(prefixes)):
            return False
    return True


def _outer_git_config() -> dict[Path, str]:
    """The global and system git config files (and the global attributes file) git would read."""
    home = Path.home()
    xdg = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config") / "git"
    out: dict[Path, str] = {}
    if os.environ.get("GIT_CONFIG_GLOBAL"):
        out[Path(os.environ["GIT_CONFIG_GLOBAL"])] = "your global git config"
    else:
        out[home / ".gitconfig"] = "your global git config"
        out[xdg / "config"] = "your global git config"
    out[xdg / "attributes"] = "your global git attributes"
    if not os.environ.get("GIT_CONFIG_NOSYSTEM") and not os.environ.get("GIT_CONFIG_SYSTEM"):
        out[Path("/etc/gitconfig")] = "the system git config"
    elif os.environ.get("GIT_CONFIG_SYSTEM"):
        out[Path(os.environ["GIT_CONFIG_SYSTEM"])] = "the system git config"
    return {p: label for p, label in out.items() if str(p) not in ("/dev/null", "")}


def _check_file(root: str, path: str, mode: str, oid: str, st: tuple | None, algo: str,
                cache: dict[str, tuple[tuple[int, ...], str, int]]) -> tuple[str | None, bool]:
    """What is wrong with `path` on disk (lstat data `st`) for blob `oid` with `mode`, or None;
    and whether its hash can stand for as long as its lstat data do (not within a clock tick)."""
    if st is None or st[0] == "o" and st[6] == "unreadable":
        return "missing", False
    kind = st[0]
    if mode == "120000":
        if kind != "l":
            return "not a symlink", False
        return (None if _blob_id(os.fsencode(st[6]), algo) == oid else "link target"), True
    if kind != "f":
        return "not a file", False
    if bool(st[1] & 0o100) != (mode == "100755"):
        return "mode", False
    key = (st[5], st[2], st[3], st[4])
    hit = cache.get(path)
    if hit is not None and hit[0] == key and max(st[3], st[4]) + RACY_NS < hit[2]:
        digest, trusted = hit[1], True
    else:
        hashed_at = time.time_ns()
        try:
            digest = _file_blob_id(os.path.join(root, path), algo)
        except OSError:
            return "unreadable", False
        cache[path] = (key, digest, hashed_at)
        trusted = max(st[3], st[4]) + RACY_NS < hashed_at
    return (None if digest == oid else "content"), trusted


def _blob_id(data: bytes, algo: str) -> str:
    h = hashlib.new(algo)
    h.update(b"blob %d\0" % len(data))
    h.update(data)
    return h.hexdigest()


def _file_blob_id(path: str, algo: str) -> str:
    """git's id of the file's bytes as a blob, read in chunks (a tracked file may be large)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        h = hashlib.new(algo)
        h.update(b"blob %d\0" % size)
        seen = 0
        while chunk := f.read(1 << 20):
            seen += len(chunk)
            h.update(chunk)
    return h.hexdigest() if seen == size else "changing"


def _nonempty(path: Path) -> bool:
    try:
        return path.is_file() and path.stat().st_size > 0
    except OSError:
        return False


def _slug(tag: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", tag)


# ---- your global and system git config, frozen for the run --------------------------------------

def _config_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t") + '"'


def _outer_entries(repo_root: Path) -> list[tuple[str, str, str | None]]:
    """(origin file, key, value or None for a bare boolean) of the system and global config, in
    the order git reads them, includes (`include.path`, `includeIf` as they apply to this
    repository) resolved."""
    out: list[tuple[str, str, str | None]] = []
    env = _git_env()
    scopes = ["--global"]
    if not env.get("GIT_CONFIG_NOSYSTEM"):
        scopes.insert(0, "--system")
    for scope in scopes:
        proc = run_git_process([git_executable(), "config", scope, "--includes", "--show-origin", "--list", "-z"],
                               cwd=repo_root, env=env)
        if proc.returncode != 0:
            continue   # no such file: nothing to freeze
        items = proc.stdout.decode("utf-8", "surrogateescape").split("\0")
        for origin, entry in zip(items[0::2], items[1::2]):
            key, sep, value = entry.partition("\n")
            out.append((origin.removeprefix("file:"), key, value if sep else None))
    return out


def freeze_outer_config(repo_root: Path, dest: Path) -> dict[Path, str]:
    """Write the system and global git config as they are now, includes resolved, into one file
    in `dest` (with a copy of the global attributes file), and point every later git call of
    autoloop at it: a filter or attributes file planted in them (or in a file they include)
    during the run never runs inside our git calls — LFS and the other filters you had keep
    working. Returns the files the copy came from, for the integrity check (a change to them is
    a violation, undone)."""
    thaw_outer_config()
    entries = _outer_entries(repo_root)
    sources: dict[Path, str] = {}
    lines: list[str] = []
    attributes: str | None = None
    for origin, key, value in entries:
        if origin and origin not in ("-", "command line:"):
            sources.setdefault(Path(origin), "a file your git config includes")
        section, _, rest = key.partition(".")
        sub, _, name = rest.rpartition(".")
        if section.lower() == "core" and not sub and name.lower() == "attributesfile" and value is not None:
            attributes = value
            continue
        lines.append(f"[{section} {_config_quote(sub)}]" if sub else f"[{section}]")
        lines.append(f"\t{name}" if value is None else f"\t{name} = {_config_quote(value)}")
    if attributes is None:
        xdg = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
        attributes = os.path.join(xdg, "git", "attributes")
    attr_src = Path(os.path.expanduser(attributes))
    if not attr_src.is_absolute():
        attr_src = repo_root / attr_src
    dest.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(attr_src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            data = os.read(fd, 4 << 20) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
        finally:
            os.close(fd)
    except OSError:
        data = b""
    sources.setdefault(attr_src, "your global git attributes")
    _write_file(dest / "attributes", data)
    # an attributes file that did not exist when the run started stays empty for our calls
    lines += ["[core]", f"\tattributesFile = {_config_quote(str(dest / 'attributes'))}"]
    _write_file(dest / "config", ("\n".join(lines) + "\n").encode("utf-8", "surrogateescape"))
    _FROZEN_ENV.update(GIT_CONFIG_GLOBAL=str(dest / "config"), GIT_CONFIG_NOSYSTEM="1")
    sources.update({dest: "autoloop's copy of your git config"})
    return sources


def thaw_outer_config() -> None:
    _FROZEN_ENV.clear()


def _object_ident(st: os.stat_result) -> tuple[int, int, int, int, int]:
    # ctime cannot be set back from user space: the same identity means the same bytes
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _idents(folder: Path) -> dict[str, tuple[int, int, int, int, int]]:
    out = {}
    try:
        with os.scandir(folder) as it:
            for e in it:
                if e.name.endswith((".pack", ".idx", ".rev", ".bitmap")):
                    out[e.name] = _object_ident(e.stat(follow_symlinks=False))
    except OSError:
        pass
    return out


def _clear_path(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        remove_tree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
