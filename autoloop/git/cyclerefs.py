"""Every cycle's change kept reachable: one ref per cycle in the tag's own namespace,
`refs/autoloop/TAG/cycles/N` (neither a branch nor a tag: `git branch` and `git tag` do not list
it, and `git gc` keeps what it points at), and a cycle's change read back as a diff."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from autoloop.git.gitrun import git

REF_ROOT = "refs/autoloop"
_HASH = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")
_DIFF = ("diff", "--no-ext-diff", "--no-textconv", "--no-color")


def cycle_ref(tag: str, n: int) -> str:
    return f"{REF_ROOT}/{tag}/cycles/{n}"


class CycleRefs:
    """The refs of one tag. The tag is checked by the workspace (letters, digits, '.', '_', '-'),
    so every name is a valid ref."""

    def __init__(self, repo_root: Path, tag: str) -> None:
        self.repo_root = repo_root
        self.tag = tag
        self.prefix = f"{REF_ROOT}/{tag}/"

    def write(self, n: int, commit: str) -> None:
        """Point cycle `n`'s ref at `commit` (a rolled-back attempt at the same number is replaced)."""
        git(self.repo_root, "update-ref", "-m", f"autoloop: cycle {n} of run {self.tag}",
            cycle_ref(self.tag, n), commit)

    def get(self, n: int) -> str | None:
        out = git(self.repo_root, "rev-parse", "--verify", "-q", cycle_ref(self.tag, n) + "^{commit}", check=False)
        return out.strip() or None

    def listing(self) -> dict[str, str]:
        """ref name -> commit, for every ref of the tag."""
        out = git(self.repo_root, "for-each-ref", "--format=%(refname)%00%(objectname)", self.prefix)
        return dict(line.split("\0", 1) for line in out.splitlines() if "\0" in line)

    def remove_all(self) -> int:
        """Delete every ref of the tag in one transaction; how many there were."""
        refs = self.listing()
        if refs:
            lines = "".join(f"delete {name} {oid}\n" for name, oid in sorted(refs.items()))
            git(self.repo_root, "update-ref", "--stdin", input=lines.encode())
        return len(refs)


@dataclass(frozen=True)
class CycleChange:
    commit: str
    parent: str | None        # None: a root commit (autoloop never makes one)


def find_change(repo_root: Path, commit: object) -> CycleChange | None:
    """The commit named in a ledger and its parent, when the repository has it (None when it
    is not a commit hash, or its object is gone: never fetched, or collected after its ref went)."""
    if not isinstance(commit, str) or not _HASH.fullmatch(commit):
        return None
    out = git(repo_root, "rev-parse", "--verify", "-q", commit + "^{commit}", check=False).strip()
    if out != commit:
        return None
    parents = git(repo_root, "rev-list", "--parents", "-n", "1", commit).split()
    return CycleChange(commit, parents[1] if len(parents) > 1 else None)


def diff(repo_root: Path, change: CycleChange, *, stat: bool = False) -> str:
    """The change against its parent: the patch, or with `stat` the diffstat (git's own
    drivers and converters off: what is stored, as stored)."""
    base = change.parent or git(repo_root, "hash-object", "-t", "tree", "/dev/null").strip()
    return git(repo_root, *_DIFF, *(("--stat",) if stat else ()), base, change.commit)


def diffs(repo_root: Path, commits: list[str]) -> dict[str, str]:
    """Each of `commits` that the repository has, against its parent, in two git processes
    (for a report of many cycles)."""
    named = [c for c in dict.fromkeys(commits) if _HASH.fullmatch(c)]
    if not named:
        return {}
    check = git(repo_root, "cat-file", "--batch-check=%(objectname) %(objecttype)",
                input="".join(c + "\n" for c in named).encode())
    commits = [line.split()[0] for line in check.splitlines() if line.endswith(" commit")]
    if not commits:
        return {}
    out = git(repo_root, "diff-tree", "--stdin", "-p", "--no-ext-diff", "--no-textconv", "--no-color",
              input="".join(c + "\n" for c in commits).encode())
    wanted, found = set(commits), {}
    current: str | None = None
    lines: list[str] = []
    # every patch line starts with a prefix (" ", "+", "-", "@@", "diff", ...): a bare hash line
    # can only be the header diff-tree prints before each commit's patch
    for line in out.splitlines(keepends=True):
        bare = line.rstrip("\n")
        if bare in wanted:
            if current is not None:
                found[current] = "".join(lines)
            current, lines = bare, []
        elif current is not None:
            lines.append(line)
    if current is not None:
        found[current] = "".join(lines)
    return found
