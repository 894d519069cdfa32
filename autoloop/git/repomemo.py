"""What git says about a repository's commits, asked once and shared by all its worktrees:
each commit's folders and files, and which paths git converts between blob and disk."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Iterable

from autoloop.git.gitrun import git, nul_list
from autoloop.git.objects import Trees

KEEP = 9             # the incumbent, and the candidates of a round (one each worker) to spare
REGULAR = ("100644", "100755")


class RepoMemo:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._trees: dict[str, Trees] = {}             # commit -> its folders
        self._converted: dict[str, frozenset[str]] = {}  # commit -> its converted paths
        # git's answers, valid while the .gitattributes files are attr_key's
        self.attr_key: tuple[tuple[str, str], ...] | None = None
        self.converts: dict[str, bool] = {}
        self._convert_true: set[str] = set()
        self._algo: str | None = None

    def object_format(self, repo_root: Path) -> str:
        if self._algo is None:
            out = git(repo_root, "rev-parse", "--show-object-format", check=False).strip()
            self._algo = "sha256" if out == "sha256" else "sha1"
        return self._algo

    def trees(self, repo_root: Path, commit: str) -> Trees:
        with self.lock:
            got = self._trees.get(commit)
        if got is None:
            tree = git(repo_root, "rev-parse", commit + "^{tree}").strip()
            got = Trees.parse(git(repo_root, "ls-tree", "-r", "-t", "-z", "--full-tree", commit), tree)
            self.remember(commit, got)
        return got

    def remember(self, commit: str, trees: Trees) -> None:
        with self.lock:
            put_newest(self._trees, commit, trees)

    def learn_converts(self, cwd: Path, paths: Iterable[str]) -> None:
        """Ask `git check-attr` in `cwd` which of `paths` it converts (call with the lock held)."""
        ask = sorted(p for p in paths if p not in self.converts)
        if ask:
            items = git(cwd, "check-attr", "-z", "--stdin", "filter", "text", "eol", "ident",
                        "working-tree-encoding", input=nul_list(ask)).split("\0")
            converted = {items[i] for i in range(0, len(items) - 2, 3)   # path, attribute, value
                         if items[i + 2] not in ("unspecified", "unset")}
            self.converts.update((p, p in converted) for p in ask)
            self._convert_true |= converted

    def converted(self, repo_root: Path, commit: str, cwd: Path) -> frozenset[str]:
        """Paths of `commit` that git converts (eol, filter, ident, working-tree-encoding). As
        attributes follow from the path and the .gitattributes (those outside the tree are
        guarded), git is asked only about paths new since the .gitattributes last changed."""
        with self.lock:
            got = self._converted.get(commit)
        if got is not None:
            return got
        trees = self.trees(repo_root, commit)
        listed = trees.by_path()
        with self.lock:
            if self.attr_key != trees.attr_key():
                self.attr_key, self.converts, self._convert_true = trees.attr_key(), {}, set()
            self.learn_converts(cwd, (p for p, e in listed.items() if e.mode in REGULAR))
            if len(self.converts) > 2 * len(listed) + 1000:  # paths of old commits pile up
                self.converts = {p: self.converts[p] for p in listed if p in self.converts}
                self._convert_true &= self.converts.keys()
            got = frozenset(p for p in self._convert_true if p in listed and listed[p].mode in REGULAR)
            put_newest(self._converted, commit, got)
        return got


def put_newest(memo: dict[str, Any], key: str, value: object) -> None:
    memo.pop(key, None)
    memo[key] = value
    while len(memo) > KEEP:
        del memo[next(iter(memo))]   # dicts keep insertion order: the oldest


_MEMOS: dict[Path, RepoMemo] = {}
_MEMOS_LOCK = threading.Lock()


def memo_for(common_dir: Path) -> RepoMemo:
    with _MEMOS_LOCK:
        return _MEMOS.setdefault(common_dir, RepoMemo())
