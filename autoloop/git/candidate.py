"""A candidate's tree: the incumbent's plus exactly the changed files as they are on disk —
written by autoloop itself (autoloop.git.objects) where git would store those very bytes, else by
git through a private index: ignore rules and index flags play no part either way."""

from __future__ import annotations

import threading
from pathlib import Path

from autoloop.git.gitrun import git, git_env, nul_list
from autoloop.git.objects import ObjectStore, Trees, changed_entries, derive
from autoloop.git.repomemo import RepoMemo, put_newest
from autoloop.base.walk import temp_tree

_BY_HAND_MAX_BYTES = 64 << 20   # bigger files go through git, which streams them
_BY_HAND_MAX_PATHS = 1000


class CandidateWriter:
    def __init__(self, repo_root: Path, common_dir: Path, memo: RepoMemo) -> None:
        self.repo_root = repo_root
        self.memo = memo
        self.store = ObjectStore(common_dir / "objects", memo.object_format(repo_root))
        self._file_mode: bool | None = None
        self._lock = threading.Lock()              # parallel workers make candidates at once
        self._made: dict[str, Trees] = {}          # tree id -> the folders of one written by hand

    def write(self, base: str, paths: list[str], root: Path, by_hand: bool = True) -> tuple[str, bool]:
        """`base` with `paths` as they are under `root`; and whether we wrote it by hand (never
        when not `by_hand`: git then checks every path as it would for a commit of yours)."""
        made = self._by_hand(base, paths, root) if by_hand else None
        if made is not None:
            with self._lock:
                put_newest(self._made, made.root, made)
            return made.root, True
        with temp_tree("index") as tmp:
            env = git_env()
            env["GIT_INDEX_FILE"] = str(tmp / "index")
            git(root, "read-tree", base, env=env)
            if paths:
                # --replace: a file may become a folder (train.py -> train.py/main.py) or back
                git(root, "update-index", "--add", "--remove", "--replace", "-z", "--stdin", env=env,
                    input=nul_list(paths))
            return git(root, "write-tree", env=env).strip(), False

    def _by_hand(self, base: str, paths: list[str], root: Path) -> Trees | None:
        """None where git could store other bytes than the disk holds: a path git converts, a
        changed .gitattributes, core.fileMode off, anything but a regular file, a big file."""
        if not paths or len(paths) > _BY_HAND_MAX_PATHS or any(p.rpartition("/")[2] == ".gitattributes" for p in paths):
            return None
        if self._file_mode is None:
            self._file_mode = git(self.repo_root, "config", "--bool", "core.fileMode", check=False).strip() != "false"
        if not self._file_mode:
            return None
        self.memo.converted(self.repo_root, base, root)   # git's answers for base's attributes
        trees = self.memo.trees(self.repo_root, base)
        with self.memo.lock:
            if self.memo.attr_key != trees.attr_key():
                return None   # not the attributes the answers below were given for
            # paths new to the repository: asked in `root`, whose .gitattributes are base's
            self.memo.learn_converts(root, paths)
            if any(self.memo.converts[p] for p in paths):
                return None
        try:
            changed = changed_entries(root, paths, self.store, max_bytes=_BY_HAND_MAX_BYTES)
        except (ValueError, OSError):
            return None
        made = derive(trees, changed, self.store)
        made.inherit_attr_key(trees)   # no .gitattributes among the changes (see above)
        return made

    def commit(self, tree: str, parent: str, name: str, email: str, message: str) -> str:
        """`git commit-tree`'s very bytes; the folders remembered when we made the tree."""
        commit = self.store.commit(tree, parent, name, email, message)
        with self._lock:
            made = self._made.get(tree)
        if made is not None:
            self.memo.remember(commit, made)
        return commit
