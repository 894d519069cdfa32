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
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from autoloop.errors import RepoStateError, RunFailure
from autoloop.proc import run_captured
from autoloop.sentinel import Sentinel, remove_tree
from autoloop.snapshot import Change, Snapshotter, diff

BRANCH_PREFIX = "autoloop/"

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
           if not k.startswith("GIT_") or k in ("GIT_CONFIG_GLOBAL", "GIT_CONFIG_NOSYSTEM")}
    env.update(GIT_TERMINAL_PROMPT="0", GIT_OPTIONAL_LOCKS="0", LC_ALL="C")
    return env


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

    def open(self, commit: str) -> None:
        """Create (or reuse) the private worktree, detached at `commit`, exactly equal to it."""
        if self._reusable():
            self._admin_dir = self._find_admin_dir()
        else:
            self._discard()
            self.path.parent.mkdir(parents=True, exist_ok=True)
            git(self.repo_root, "worktree", "add", "--detach", "-f", str(self.path), commit)
            self._admin_dir = self._find_admin_dir()
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

    def checkout(self, commit: str) -> Path:
        """Make this tree exactly `commit` (opening it the first time); returns its path."""
        if self._admin_dir is None:
            self.open(commit)
        else:
            if self.dotgit_tampered():
                self.restore_dotgit()
            self.reset_hard(commit)
        return self.path

    def _reusable(self) -> bool:
        """Is the worktree there, whole, registered, and linked to *this* repository? A killed
        run may leave a half-made admin folder, or a `.git` link a generator rewrote to point
        elsewhere: then we rebuild."""
        dotgit = self.path / ".git"
        if dotgit.is_symlink() or not dotgit.is_file():
            return False
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

    def index_flags(self) -> list[str]:
        """Paths the worktree's index hides from git (assume-unchanged / skip-worktree)."""
        out = git(self.path, "ls-files", "-v", "-z")
        hidden = []
        for item in out.split("\0"):
            if len(item) > 2 and (item[0].islower() or item[0] == "S"):
                hidden.append(item[2:])
        return hidden

    def reset_hard(self, commit: str) -> None:
        """Work tree, index and HEAD exactly at `commit`; untracked and ignored files removed."""
        hidden = self.index_flags()
        if hidden:
            # one flag per call: update-index applies only the first of the two per path
            paths = "\0".join(hidden).encode("utf-8", "surrogateescape") + b"\0"
            git(self.path, "update-index", "--no-skip-worktree", "-z", "--stdin", input=paths)
            git(self.path, "update-index", "--no-assume-unchanged", "-z", "--stdin", input=paths)
        git(self.path, "reset", "-q", "--hard", commit)
        git(self.path, "clean", "-ffdxq")

    def snapshot(self) -> dict:
        return self.snapshotter.take()

    def differs_from(self, commit: str) -> list[str]:
        """Tracked paths of `commit` whose bytes, executable bit or type on disk are not what
        the commit says — hashed the way git hashes blobs, so nothing relies on git's stat cache
        (which trusts size and mtime, both settable). Hashes are cached by lstat identity (inode,
        size, mtime, ctime — ctime cannot be set back) and re-read when that changes."""
        entries = self._tree_entries(commit)
        algo = self._object_format()
        cache = self.__dict__.setdefault("_blob_cache", {})
        converted = self._converted(commit, entries)
        out = []
        for mode, oid, path in entries:
            if mode == "160000" or path in converted:
                continue  # a gitlink: nothing on disk to compare; converted files: below
            full = os.path.join(self.path, path)
            try:
                st = os.lstat(full)
            except OSError:
                out.append(f"{path} (missing)")
                continue
            if mode == "120000":
                if not stat.S_ISLNK(st.st_mode):
                    out.append(f"{path} (not a symlink)")
                elif _blob_id(os.fsencode(os.readlink(full)), algo) != oid:
                    out.append(f"{path} (link target)")
                continue
            if not stat.S_ISREG(st.st_mode):
                out.append(f"{path} (not a file)")
                continue
            if bool(st.st_mode & 0o100) != (mode == "100755"):
                out.append(f"{path} (mode)")
                continue
            key = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            hit = cache.get(path)
            if hit is not None and hit[0] == key and max(st.st_mtime_ns, st.st_ctime_ns) + 100_000_000 < hit[2]:
                digest = hit[1]
            else:
                hashed_at = time.time_ns()
                try:
                    digest = _file_blob_id(full, algo)
                except OSError:
                    out.append(f"{path} (unreadable)")
                    continue
                cache[path] = (key, digest, hashed_at)
            if digest != oid:
                out.append(f"{path} (content)")
        if converted:
            # files whose bytes on disk git converts (eol, a filter such as LFS, ident): ask git
            # what it would store for them
            paths = [path for _, _, path in entries if path in converted]
            oids = {path: oid for _, oid, path in entries}
            for path in paths:
                full = os.path.join(self.path, path)
                if not os.path.isfile(full) or os.path.islink(full):
                    out.append(f"{path} (missing)")
            present = [p for p in paths if os.path.isfile(os.path.join(self.path, p))]
            if present:
                got = git(self.path, "hash-object", "--stdin-paths",
                          input="\n".join(present).encode("utf-8", "surrogateescape") + b"\n").split()
                for path, oid in zip(present, got):
                    if oid != oids[path]:
                        out.append(f"{path} (content)")
        return out

    def _converted(self, commit: str, entries: list[tuple[str, str, str]]) -> set[str]:
        """Paths of `commit` that git converts between blob and disk (eol, filter, ident,
        working-tree-encoding attributes) — asked once per commit."""
        memo = self.__dict__.setdefault("_converted_memo", {})
        if commit in memo:
            return memo[commit]
        paths = [path for mode, _, path in entries if mode in ("100644", "100755")]
        found: set[str] = set()
        if paths:
            raw = git(self.path, "check-attr", "-z", "--stdin", "filter", "text", "eol", "ident",
                      "working-tree-encoding",
                      input=b"\0".join(p.encode("utf-8", "surrogateescape") for p in paths) + b"\0")
            items = raw.split("\0")
            for i in range(0, len(items) - 2, 3):
                path, attr, info = items[i], items[i + 1], items[i + 2]
                if info not in ("unspecified", "unset"):
                    found.add(path)
        memo.clear()
        memo[commit] = found
        return found

    def _tree_entries(self, commit: str) -> list[tuple[str, str, str]]:
        memo = self.__dict__.setdefault("_entries_memo", {})
        if commit not in memo:
            raw = git(self.repo_root, "ls-tree", "-r", "-z", "--full-tree", commit)
            entries = []
            for item in raw.split("\0"):
                if not item:
                    continue
                meta, _, path = item.partition("\t")
                mode, _kind, oid = meta.split(" ")
                entries.append((mode, oid, path))
            memo.clear()  # one commit at a time is all a verification tree needs
            memo[commit] = entries
        return memo[commit]

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
            self._force_checkout(remaining)
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

    def _force_checkout(self, changes: list[Change]) -> None:
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
                input="\0".join(tracked).encode("utf-8", "surrogateescape") + b"\0")
        for ch in changes:  # modes of folders re-created above
            if ch.before is not None and ch.before.kind == "d" and (self.path / ch.path).is_dir():
                os.chmod(self.path / ch.path, ch.before.mode)



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
        self._verify_trees: dict[int, Worktree] = {}
        self._gen_trees: dict[int, Worktree] = {}
        self._identity: Identity | None = None
        self._trees: dict[str, str] = {}

    def verify_tree(self, slot: int = 0) -> Worktree:
        """A pristine tree for measuring commits (slot 0 candidate, 1 incumbent, ...), beside the
        generator's: nothing the generator left behind — caches, ignored files, processes'
        output — is there, and it holds exactly the commit it is checked out at."""
        tree = self._verify_trees.get(slot)
        if tree is None:
            tree = Worktree(self.repo_root, self.common_dir, self.path.with_name(f"{self.path.name}.verify-{slot}"))
            self._verify_trees[slot] = tree
        return tree

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
            raise RepoStateError(f"{self.repo_root}: the repository has no commit yet (commit your files first)")
        for marker in ("MERGE_HEAD", "REBASE_HEAD", "CHERRY_PICK_HEAD", "rebase-merge", "rebase-apply"):
            if (self.common_dir / marker).exists():
                raise RepoStateError(f"{self.repo_root}: a merge or rebase is in progress; finish it first")
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", self.tag) or ".." in self.tag \
                or self.tag.endswith((".lock", ".")):
            raise RepoStateError(f"--tag {self.tag!r}: use letters, digits, '.', '_' or '-' (at most 64)")

    def branch_head(self) -> str | None:
        out = git(self.repo_root, "rev-parse", "--verify", "-q", self.ref + "^{commit}", check=False).strip()
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
        for p in extra:
            watched[p] = p.name
        self._sentinel = Sentinel(watched, label=watched)
        self._sentinel.capture()
        return self._sentinel

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
        with tempfile.TemporaryDirectory(prefix="autoloop-index-") as tmp:
            env = _git_env()
            env["GIT_INDEX_FILE"] = os.path.join(tmp, "index")
            git(root, "read-tree", base, env=env)
            if paths:
                # --replace: a file may become a folder (train.py -> train.py/main.py) or back
                git(root, "update-index", "--add", "--remove", "--replace", "-z", "--stdin", env=env,
                    input="\0".join(paths).encode("utf-8", "surrogateescape") + b"\0")
            return git(root, "write-tree", env=env).strip()

    def tree_of(self, commit: str) -> str:
        if commit not in self._trees:  # commits are immutable: ask git once
            self._trees[commit] = git(self.repo_root, "rev-parse", commit + "^{tree}").strip()
        return self._trees[commit]

    def commit(self, tree: str, parent: str, message: str, who: Identity) -> str:
        env = _git_env()
        env.update(GIT_AUTHOR_NAME=who.name, GIT_AUTHOR_EMAIL=who.email,
                   GIT_COMMITTER_NAME=who.name, GIT_COMMITTER_EMAIL=who.email)
        return git(self.repo_root, "commit-tree", tree, "-p", parent, "-F", "-",
                   input=message.encode(), env=env).strip()

    def advance(self, new: str, old: str, reason: str) -> None:
        """Move the run branch from `old` to `new`, refusing if someone else moved it."""
        git(self.repo_root, "update-ref", "-m", reason, self.ref, new, old)

    def rewind(self, to: str, current: str) -> None:
        git(self.repo_root, "update-ref", "-m", "autoloop: roll back an unfinished cycle",
            self.ref, to, current)

    def is_ancestor(self, a: str, b: str) -> bool:
        return run_git_process([git_executable(), "-c", "core.hooksPath=/dev/null", "merge-base", "--is-ancestor", a, b],
                               cwd=self.repo_root, env=_git_env()).returncode == 0

    def commit_message(self, commit: str) -> str:
        return git(self.repo_root, "log", "-1", "--format=%B", commit)

    def diffstat(self, a: str, b: str) -> str:
        return git(self.repo_root, "diff", "--no-ext-diff", "--no-textconv", "--shortstat", a, b).strip()

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
