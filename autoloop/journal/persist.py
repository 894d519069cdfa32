"""A CI run's journal, kept on the run branch so the next job (a fresh clone) resumes with full
memory: one commit on the last kept commit (contract §3 allows exactly this one), trailers
`Autoloop-Journal: TAG` and `Autoloop-Incumbent: <its only parent>`, adding copies of the ledger,
experiments.md and results.tsv under `.autoloop/TAG/journal/` next to program.md — never the
live paths, so a merged pull request leaves only an inert record. A run that finds its branch
ending in one restores the ledger from it and moves the branch back to the parent."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

from autoloop.errors import RepoStateError
from autoloop.git.gitrun import GitError, git, git_bytes
from autoloop.journal.ledger import atomic_write
from autoloop.git.objects import Entry, derive
from autoloop.decide.wording import plural
from autoloop.git.workspace import Workspace

if TYPE_CHECKING:
    from autoloop.journal.ledger import Journal
    from autoloop.program.reader import Program

TRAILER = "Autoloop-Journal"
PARENT_TRAILER = "Autoloop-Incumbent"


def journal_dir(program: Program, tag: str) -> str:
    folder = program.state_dir / ".autoloop" / tag / "journal"
    return folder.relative_to(program.repo_root).as_posix()


def is_journal_commit(ws: Workspace, commit: str, tag: str, program: Program) -> str | None:
    """The parent (incumbent) if `commit` is this run's journal commit, else None."""
    info = git(ws.repo_root, "log", "-1", "--format=%P%n%B", commit, check=False)
    first, _, body = info.partition("\n")   # nothing when git fails: no parent, not ours
    parents = first.split()
    m_tag = re.search(rf"^{TRAILER}: (\S+)\s*$", body, re.M)
    m_par = re.search(rf"^{PARENT_TRAILER}: ([0-9a-f]{{40,64}})\s*$", body, re.M)
    if len(parents) != 1 or not m_tag or not m_par or m_tag.group(1) != tag or m_par.group(1) != parents[0]:
        return None
    touched = git(ws.repo_root, "diff-tree", "--no-commit-id", "-r", "--name-only", "-z",
                  parents[0], commit).split("\0")
    folder = journal_dir(program, tag) + "/"
    if any(p and not p.startswith(folder) for p in touched):
        return None  # it changes more than the journal: not ours to rewind
    return parents[0]


def save(ws: Workspace, journal: Journal, program: Program, incumbent: str) -> str | None:
    """Commit the journal on `incumbent` and move the branch there: the commit, or None (nothing
    done) when the branch is not at the incumbent."""
    if ws.branch_head() != incumbent:
        return None
    folder = journal_dir(program, journal.tag)
    store = ws.writer.store
    files = {f"{folder}/{p.name}": Entry("100644", store.write("blob", p.read_bytes()))
             for p in (journal.ledger, journal.experiments, journal.results) if p.exists()}
    tree = derive(ws.memo.trees(ws.repo_root, incumbent), files, store).root
    cycles = journal.cycles()
    last = cycles[-1]["cycle"] if cycles else 0
    kept = sum(1 for c in cycles if c["status"] == "keep")
    undo = next((f["undo"] for f in reversed(journal.finals()) if f.get("undo")), None)
    # a best the end-of-run check refuted is said where the branch's history is read, too
    refuted = f"The end-of-run check did not confirm the best: {undo['text']}.\n\n" \
        if undo is not None and undo.get("to") == incumbent else ""
    message = (f"autoloop: journal of run {journal.tag} ({plural(last, 'cycle')}, {kept} kept)\n\n"
               f"{refuted}The run's ledger and journal, so that the next job resumes with full memory.\n"
               f"autoloop moves the branch back to the parent when it resumes.\n\n"
               f"{TRAILER}: {journal.tag}\n{PARENT_TRAILER}: {incumbent}\n")
    commit = ws.commit(tree, incumbent, message, ws.identity())
    ws.advance(commit, incumbent, f"autoloop: journal of run {journal.tag}")
    return commit


def restore_persisted_journal(ws: Workspace, journal: Journal, program: Program) -> str | None:
    """If the run branch ends in a journal commit: bring its ledger back (when ours is missing or
    a prefix of it), check it stands at the commit's parent, and rewind the branch there.
    Returns the parent, or None."""
    head = ws.branch_head()
    parent = None if head is None else is_journal_commit(ws, head, journal.tag, program)
    if head is None or parent is None:
        return None
    folder = journal_dir(program, journal.tag)
    try:
        committed = git_bytes(ws.repo_root, "cat-file", "blob", f"{head}:{folder}/ledger.jsonl")
    except GitError:
        raise RepoStateError(f"branch {ws.branch} ends in a journal commit without a ledger "
                             f"({head[:12]}); move it back to {parent[:12]} or use another --tag") from None
    local = journal.ledger.read_bytes() if journal.ledger.exists() else b""
    local = local[: local.rfind(b"\n") + 1]  # whole lines only (a torn tail is cut on load anyway)
    if committed.startswith(local):
        chosen = committed
    elif local.startswith(committed):
        chosen = local  # this machine's ledger is newer: it already holds everything
    else:
        raise RepoStateError(f"the ledger {journal.ledger} and the journal on branch {ws.branch} "
                             f"({head[:12]}) tell different histories; move one of them aside")
    expected = _incumbent_of(chosen)
    if expected != parent:
        raise RepoStateError(f"the journal on branch {ws.branch} ({head[:12]}) says the run is at "
                             f"{(expected or '?')[:12]}, but its parent is {parent[:12]}; "
                             "the branch was changed outside autoloop")
    if chosen is committed and committed != local:
        atomic_write(journal.ledger, committed)
    prefix = folder.removesuffix(f".autoloop/{journal.tag}/journal")
    ws.exclude_in_checkout([prefix + "experiments.md", prefix + "results.tsv", prefix + ".autoloop/"])
    git(ws.repo_root, "update-ref", "-m", "autoloop: resume after the journal commit", ws.ref, parent, head)
    return parent


def _incumbent_of(ledger: bytes) -> str | None:
    """A ledger's last kept commit, else its baseline's, else its first start's incumbent."""
    commit = start = None
    for line in ledger.splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if r.get("t") == "start" and start is None:
            start = r.get("incumbent")
        elif r.get("t") == "cycle" and r.get("status") in ("baseline", "keep") and r.get("commit"):
            commit = r["commit"]
    return commit or start
