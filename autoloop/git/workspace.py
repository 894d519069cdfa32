"""A run's branch `autoloop/TAG`, the detached worktree where the generator works and the ones
where candidates are measured; the run's commits, and `autoloop clean`'s leftovers."""

from __future__ import annotations

import hashlib
import io
import os
import re
import tarfile
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Callable, Iterable, Sequence

from autoloop.git.candidate import CandidateWriter
from autoloop.git.cyclerefs import CycleRefs
from autoloop.errors import RepoStateError
from autoloop.process.logfile import read_regular
from autoloop.git.gitguard import ObjectGuard, RefGuard, watch_git
from autoloop.git.gitrun import GitError, freeze_outer_config, git, git_bytes, later
from autoloop.git.proof import GITLINK, SYMLINK
from autoloop.disk.sentinel import Sentinel
from autoloop.disk.snapshot import Change, Snapshot
from autoloop.base.walk import worktrees_root
from autoloop.git.worktree import (Worktree, clear_changes, remove_path, restore_folder_modes,
                               unlock_folders)

__all__ = ["GitError", "Identity", "Workspace", "Worktree"]

BRANCH_PREFIX = "autoloop/"
VERIFY_SLOTS = 4        # candidate, incumbent, and two to spare (paired and end-of-run checks)
_REF_MAX = 200
# a violation's or a failed generator's change is kept to be shown, not measured: past this,
# copying it into the object store would cost more than seeing it is worth
FOUND_MAX_BYTES = 64 << 20


@dataclass(frozen=True)
class Identity:
    name: str
    email: str


class Workspace(Worktree):
    def __init__(self, repo_root: Path, tag: str) -> None:
        self.tag = tag
        self.branch = BRANCH_PREFIX + tag
        self.ref = "refs/heads/" + self.branch
        common_dir = (repo_root / git(repo_root, "rev-parse", "--git-common-dir").strip()).resolve()
        repo_id = hashlib.sha256(str(repo_root.resolve()).encode()).hexdigest()[:12]
        super().__init__(repo_root, common_dir, worktrees_root() /
                         f"{repo_root.name}-{repo_id}" / re.sub(r"[^A-Za-z0-9._-]", "_", tag))
        self._frozen: dict[Path, str] = {}
        self._beside_trees: dict[str, Worktree] = {}
        self._identity: Identity | None = None
        self._trees: dict[str, str] = {}
        self._commits: set[str] = set()   # known to be commits: the branch may be read from its file
        self._by_hand: tuple[str, str] | None = None   # the last candidate we wrote: (base, tree)
        self.refs = RefGuard(repo_root, common_dir, self.ref)
        self.cycle_refs = CycleRefs(repo_root, tag)
        self.objects = ObjectGuard(common_dir / "objects")

    def _beside(self, suffix: str) -> Worktree:
        if suffix not in self._beside_trees:
            path = self.path.with_name(self.path.name + suffix)
            self._beside_trees[suffix] = Worktree(self.repo_root, self.common_dir, path)
        return self._beside_trees[suffix]

    def verify_tree(self, slot: int = 0) -> Worktree:
        """A tree for measuring commits (slot 0 candidate, 1 incumbent, ...)."""
        return self._beside(f".verify-{slot}")

    def drop_verify_trees(self, keep: set[int], upto: int = VERIFY_SLOTS) -> None:
        """Remove the trees of slots not in `keep`: one not there costs the watch nothing."""
        for slot in set(range(upto)) - keep:
            tree = self._beside(f".verify-{slot}")
            if tree.path.exists() or tree.path.is_symlink() or tree._own_admin_dirs():
                tree._discard()
            del self._beside_trees[f".verify-{slot}"]   # one needed later is made afresh

    def score_tree(self) -> Worktree:
        """The tree of the run's start commit where `verifier.score` runs (autoloop.engine.score)."""
        return self._beside(".score")

    def gen_tree(self, worker: int) -> Worktree:
        """Worker `worker`'s tree in a parallel round (worker 0's is this run's own)."""
        return self if worker == 0 else self._beside(f".gen-{worker}")

    def clear_stale_locks(self) -> None:
        (self.common_dir / (self.ref + ".lock")).unlink(missing_ok=True)
        super().clear_stale_locks()
        for slot in range(VERIFY_SLOTS):
            self._beside(f".verify-{slot}").clear_stale_locks()
        self.score_tree().clear_stale_locks()

    def check_state(self) -> None:
        """Refuse repositories we cannot work on safely."""
        if git(self.repo_root, "rev-parse", "--is-bare-repository").strip() == "true":
            raise RepoStateError(f"{self.repo_root}: a bare repository has no work tree to run in")
        require_commit(self.repo_root)
        for marker in ("MERGE_HEAD", "REBASE_HEAD", "CHERRY_PICK_HEAD", "rebase-merge", "rebase-apply"):
            if (self.common_dir / marker).exists():
                raise RepoStateError(f"{self.repo_root}: a merge or rebase is in progress; finish it first")
        self.check_tag()

    def check_tag(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", self.tag) or ".." in self.tag \
                or self.tag.endswith((".lock", ".")):
            raise RepoStateError(f"--tag {self.tag!r}: use letters, digits, '.', '_' or '-' (at most 64)")

    def leftovers(self) -> list[Path]:
        """This tag's entries in the worktree cache: trees, scratch, frozen git config, lock."""
        parent = self.path.parent
        if not parent.is_dir():
            return []
        rx = re.compile(re.escape(self.path.name) + r"(?:\.(?:verify|gen)-\d+|\.score|\.scratch|\.lock|\.gitconfig)?")
        return sorted(p for p in parent.iterdir() if rx.fullmatch(p.name))

    def remove_leftovers(self) -> list[Path]:
        """Remove them but the lock (the caller's, removed last), and their admin folders."""
        removed = []
        for p in self.leftovers():
            if p.name.endswith(".lock"):
                continue
            if (p / ".git").is_file():
                Worktree(self.repo_root, self.common_dir, p)._discard()
            else:
                remove_path(p)
            removed.append(p)
        git(self.repo_root, "worktree", "prune")
        try:
            self.path.parent.rmdir()          # the repository's folder in the cache, once empty
        except OSError:
            pass
        return removed

    def remove_branch(self) -> str | None:
        """Delete `autoloop/TAG`, unless checked out; the commit it pointed at, or None."""
        head = self.branch_head()
        if head is None:
            return None
        if git(self.repo_root, "symbolic-ref", "-q", "HEAD", check=False).strip() == self.ref:
            raise RepoStateError(f"{self.branch} is checked out in {self.repo_root}; switch to another "
                                 "branch first (git switch -)")
        self.delete_branch(head)
        return head

    def branch_head(self) -> str | None:
        # a loose ref wins over packed-refs: naming a commit we know, it needs no git process
        got = read_regular(self.common_dir / self.ref, _REF_MAX)
        loose = got.decode("ascii", "replace").strip()
        if loose in self._commits:
            return loose
        out = git(self.repo_root, "rev-parse", "--verify", "-q", self.ref + "^{commit}", check=False).strip()
        if out:
            self._commits.add(out)
        return out or None

    def head(self) -> str:
        return git(self.repo_root, "rev-parse", "--verify", "HEAD^{commit}").strip()

    def identity(self) -> Identity:
        if self._identity is None:
            name = git(self.repo_root, "config", "user.name", check=False).strip() or "autoloop"
            email = git(self.repo_root, "config", "user.email", check=False).strip() or "autoloop@localhost"
            self._identity = Identity(name, email)
        return self._identity

    def create_branch(self, start: str) -> None:
        git(self.repo_root, "update-ref", "-m", "autoloop: start run", self.ref, start, "")
        self._commits.add(start)

    def delete_branch(self, expected: str) -> None:
        """Remove the run branch, only if it is still at `expected` (git checks atomically)."""
        git(self.repo_root, "update-ref", "-m", "autoloop: restart run", "-d", self.ref, expected)

    def advance(self, new: str, old: str, reason: str) -> None:
        """Move the run branch from `old` to `new`, refusing if someone else moved it."""
        git(self.repo_root, "update-ref", "-m", reason, self.ref, new, old)
        self._commits.update((new, old))

    def refuted_ref(self, after_cycle: int) -> str:
        """Where the commits an end-of-run check refuted stay reachable (no branch, no tag: out of
        `git branch`'s sight; `autoloop clean` removes it with the tag)."""
        return f"refs/autoloop/{self.tag}/refuted/{after_cycle}"

    def pin(self, ref: str, commit: str) -> None:
        """Make `ref` point at `commit` (made or moved)."""
        git(self.repo_root, "update-ref", "-m", "autoloop: keep for inspection", ref, commit)

    def rewind(self, to: str, current: str) -> None:
        self.advance(to, current, "autoloop: roll back an unfinished cycle")

    def uncommitted(self, paths: Sequence[str]) -> dict[str, str]:
        """Those of `paths` the user's checkout has otherwise than HEAD, and how."""
        if not paths:
            return {}
        out = git(self.repo_root, "status", "--porcelain=v1", "-z", "--ignored=matching",
                  "--untracked-files=all", "--no-renames", "--", *paths, check=False)
        kinds = {"??": "untracked", "!!": "ignored"}
        return {e[3:]: kinds.get(e[:2], "modified") for e in out.split("\0") if len(e) >= 4}

    def exclude_in_checkout(self, rel_paths: Iterable[str]) -> None:
        """Keep our files out of git's view in the user's checkout (.git/info/exclude)."""
        exclude = self.common_dir / "info" / "exclude"
        exclude.parent.mkdir(parents=True, exist_ok=True)
        existing = exclude.read_text(errors="replace").splitlines() if exclude.exists() else []
        missing = [w for w in ("/" + p.lstrip("/") for p in rel_paths) if w not in existing]
        if missing:
            with open(exclude, "a") as f:
                f.write(("\n" if existing and existing[-1] != "" else "")
                        + "# autoloop run files\n" + "".join(m + "\n" for m in missing))

    def freeze_config(self) -> None:
        dest = self.path.with_name(self.path.name + ".gitconfig")
        self._frozen = freeze_outer_config(self.repo_root, dest)

    def watch_git(self, extra: Sequence[Path] = ()) -> Sentinel:
        """Files git obeys during our own calls, plus `extra` user-side files (program.md)."""
        assert self._admin_dir is not None
        return watch_git(self.common_dir, self._admin_dir, self._frozen, extra)

    def capture_objects(self, commit: str, paths: Sequence[str]) -> None:
        self.objects.capture(commit, self.memo.trees(self.repo_root, commit), paths)

    @cached_property
    def writer(self) -> CandidateWriter:
        return CandidateWriter(self.repo_root, self.common_dir, self.memo)

    def candidate_tree(self, base: str, changes: list[Change], where: Worktree | None = None) -> str:
        """`base` plus exactly the changed files (or links) on disk in `where` (a parallel
        worker's tree; this run's own by default): folders come and go with their files."""
        paths = sorted({c.path for c in changes if (c.before is not None and c.before.kind != "d")
                        or (c.after is not None and c.after.kind != "d")})
        tree, by_hand = self.writer.write(base, paths, (where or self).path)
        self._by_hand = (base, tree) if by_hand and (where is None or where is self) else None
        return tree

    def written_by_hand(self, base: str, tree: str) -> bool:
        return self._by_hand == (base, tree)

    def commit(self, tree: str, parent: str, message: str, who: Identity) -> str:
        commit = self.writer.commit(tree, parent, who.name, who.email, message)
        self._trees[commit] = tree
        self._commits.add(commit)
        return commit

    def commit_found(self, base: str, changes: list[Change], where: Worktree, message: str) -> str:
        """A commit on `base` of what changed on disk in `where` (a violation's or a failed
        generator's change, to be shown, never measured), without a candidate's bookkeeping.
        Special files, hard links and paths through a .git folder are left out. ValueError says
        why there is none."""
        # a hard link's bytes are another file's (outside the tree, maybe yours): left out
        paths = sorted({c.path for c in changes if ((c.after is None and c.before is not None and c.before.kind != "d")
                                                   or (c.after is not None and c.after.kind in ("f", "l")
                                                       and not (c.after.kind == "f" and c.after.nlink > 1)))
                        and not _git_dir_inside(c.path)})
        size = sum(c.after.size for c in changes if c.after is not None and c.after.kind == "f")
        if size > FOUND_MAX_BYTES:
            raise ValueError(f"{size >> 20} MB changed, more than the {FOUND_MAX_BYTES >> 20} MB kept for a "
                             "change that is not measured")
        # through git's index: it refuses any path a commit must not hold, as for your own commits
        tree = self.writer.write(base, paths, where.path, by_hand=False)[0] if paths else self.tree_of(base)
        if tree == self.tree_of(base):
            raise ValueError("nothing that can be recorded changed (only special files, hard links or "
                             "git's own folders)")
        return self.commit(tree, base, message, self.identity())

    def keep(self, commit: str, parent: str, reference: Snapshot, changes: list[Change]) -> Snapshot:
        """Make the tree exactly a checkout of kept `commit` (the last candidate on `parent`);
        its snapshot. When we wrote the candidate and git's view is still ours, only the changed
        paths are rewritten and looked at again; else reset_hard and a full walk."""
        by_hand, self._by_hand = self._by_hand, None
        if by_hand != (parent, self.tree_of(commit)) or not changes or not self._as_we_left_it(parent):
            self.reset_hard(commit)
            return self.snapshot()
        paths = {c.path for c in changes}
        try:
            unlock_folders(self.path, paths)
            self._forget()
            clear_changes(self.path, changes)
            # git moves HEAD, the index and the files (only those removed above differ) in one go
            git(self.path, "reset", "-q", "--hard", commit)
            restore_folder_modes(self.path, changes)
            gone = _remove_empty_parents(self.path, paths)   # a checkout would not have them
            self._sealed(commit)
        except (OSError, GitError):
            self.reset_hard(commit)
            return self.snapshot()
        look = paths | gone
        got = self.snapshotter.take_paths(look)
        # a folder of the incumbent among them was walked whole: its old contents go
        walked = tuple(p + "/" for p in look if p in got and got[p].kind == "d" and p in reference)
        after = {k: v for k, v in reference.items() if k not in look and not (walked and k.startswith(walked))}
        after.update(got)
        return after

    def tree_of(self, commit: str) -> str:
        if commit not in self._trees:  # commits are immutable: ask git once
            self._trees[commit] = git(self.repo_root, "rev-parse", commit + "^{tree}").strip()
        return self._trees[commit]

    def differs_at(self, tree_a: str, tree_b: str, paths: Sequence[str]) -> list[str]:
        """Those of `paths` whose entries differ between two trees (replace refs ignored)."""
        if not paths:
            return []
        raw = git(self.repo_root, "diff-tree", "-r", "-z", "--no-renames", "--name-only", tree_a, tree_b, "--", *paths)
        return [p for p in raw.split("\0") if p]

    def diffstat_later(self, a: str, b: str) -> Callable[[], str]:
        """`git diff --shortstat a b`, started now (it only reads objects), read when called."""
        return later(self.repo_root, "diff", "--no-ext-diff", "--no-textconv", "--shortstat", a, b)

    def diff_text(self, a: str, b: str, limit: int = 200_000) -> str:
        return git(self.repo_root, "diff", "--no-ext-diff", "--no-textconv", a, b)[:limit]

    def archive(self, commit: str) -> bytes:
        """`commit`'s files (no submodules) as a tar, exactly as stored. Not `git archive`:
        .gitattributes in the commit (export-ignore, -subst) would change what is measured."""
        entries = [e for e in self.memo.trees(self.repo_root, commit).files() if e.mode != GITLINK]
        data = git_bytes(self.repo_root, "cat-file", "--batch", input=b"".join(e.oid.encode() + b"\n" for e in entries))
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
            pos = 0
            for mode, _, path in entries:
                nl = data.index(b"\n", pos)
                size = int(data[pos:nl].split()[-1])   # "<oid> <type> <size>"
                body = data[nl + 1: nl + 1 + size]
                pos = nl + 1 + size + 1
                info = tarfile.TarInfo(path)
                if mode == SYMLINK:
                    info.type, info.linkname = tarfile.SYMTYPE, body.decode("utf-8", "surrogateescape")
                else:
                    info.size, info.mode = size, 0o755 if mode == "100755" else 0o644
                tar.addfile(info, io.BytesIO(body))   # a link's size is 0: nothing is read
        return out.getvalue()


def _git_dir_inside(path: str) -> bool:
    """A path through a `.git` folder (as git spells it on any file system): a tree holding one
    is refused by git's checks (fsck, a server's receive), so a found change leaves it out."""
    return any(part.lower().rstrip(". ") == ".git" or part.lower() == "git~1" for part in path.split("/"))


def _remove_empty_parents(root: Path, paths: Iterable[str]) -> set[str]:
    """Remove the empty folders among `paths` and their parents, as `git clean -d` would;
    returns those now gone (git's reset removes some itself)."""
    folders = {"/".join(parts[:i]) for rel in paths for parts in [rel.split("/")] for i in range(1, len(parts) + 1)}
    removed: set[str] = set()
    for rel in sorted(folders, key=lambda p: p.count("/"), reverse=True):
        full = os.path.join(root, rel)
        try:
            if not os.path.islink(full) and os.path.isdir(full) and not os.listdir(full):
                os.rmdir(full)
        except OSError:
            pass
        if not os.path.lexists(full):
            removed.add(rel)
    return removed


def require_commit(repo_root: Path) -> None:
    """RepoStateError when the repository has no commit: nothing can be measured or kept yet."""
    if not git(repo_root, "rev-parse", "--verify", "-q", "HEAD", check=False).strip():
        raise RepoStateError(f"{repo_root}: the repository has no commit yet: the baseline is a commit, so "
                             "commit your files first: git add -A && git commit -m start")
