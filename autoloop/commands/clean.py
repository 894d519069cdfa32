"""`autoloop clean`: what a tag leaves behind, listed, then removed. A tag's worktrees and
private state (logs, report) go; the run branch (with the tag's refs that keep every cycle's
change, refs/autoloop/TAG/) and the journal stay unless asked for: they are the results. So do
the temporary folders of any autoloop process of this user that is gone."""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

from autoloop.base.numbers import num
from autoloop.base.walk import kind_of, left_behind, remove_tree, walk
from autoloop.errors import AutoloopError, LockedError, UsageError
from autoloop.git.workspace import Workspace
from autoloop.journal.ledger import Journal, has_baseline, run_of
from autoloop.program.reader import Program, load_program


@dataclass
class Plan:
    tag: str | None                                        # None: no run here, only `temps`
    branch: str = ""
    trees: list[Path] = field(default_factory=list)        # worktrees, scratch, lock
    state: list[Path] = field(default_factory=list)        # logs, report, other private files
    journal: list[Path] = field(default_factory=list)      # only with --journal
    branch_head: str | None = None                         # only with --branch
    cycle_refs: int = 0                                    # only with --branch: refs/autoloop/TAG/*
    keeps: list[str] = field(default_factory=list)         # what stays, in words
    after: str = "resumes it"                              # what `run --tag` does afterwards
    temps: list[Path] = field(default_factory=list)        # temporary folders of gone processes

    @property
    def empty(self) -> bool:
        return not (self.trees or self.state or self.journal or self.branch_head or self.cycle_refs
                    or self.temps)


def plan(program: Program | None, tag: str | None, *, branch: bool = False, journal: bool = False) -> Plan:
    """What to remove for `tag` (None: only the temporary folders) and what stays."""
    temps = left_behind()
    if program is None or tag is None:
        return Plan(None, temps=temps)
    ws = Workspace(program.repo_root, tag)
    ws.check_tag()
    j = Journal(program.state_dir, tag)
    p = Plan(tag, ws.branch, trees=ws.leftovers(), temps=temps)
    if j.dir.is_dir():
        p.state = sorted(x for x in j.dir.iterdir() if x != j.ledger)
    head = ws.branch_head()
    refs = len(ws.cycle_refs.listing())
    if journal:
        p.journal = [x for x in (j.ledger, *_rendered_for(j, tag)) if x.exists()]
        if j.dir.is_dir():
            p.state.append(j.dir)
    elif j.ledger.exists():
        # experiments.md and results.tsv are this tag's only when its run rendered them last
        shown = [_rel(program, j.ledger), *(x.name for x in _rendered_for(j, tag))]
        p.keeps.append(f"the journal ({', '.join(shown)}): --journal removes it")
    if branch:
        p.branch_head, p.cycle_refs = head, refs
    elif head is not None or refs:
        kept = _kept(j.ledger)
        what = f"with {kept} kept commit{'s' * (kept != 1)}" if kept else "nothing kept on it"
        shown = [f"branch {ws.branch} at {head[:12]} ({what})"] if head is not None else []
        shown += [refs_text(refs, tag)] if refs else []
        p.keeps.append(f"{' and '.join(shown)}: --branch removes {'them' if len(shown) > 1 or refs else 'it'}")
    branch_gone = branch or head is None
    # a ledger without a measured baseline is not resumed: such a tag starts afresh from HEAD
    journal_gone = journal or not has_baseline(j.ledger)
    if branch_gone != journal_gone:
        p.keeps.append(f"note: with only one of the branch and the journal left, tag '{tag}' can neither "
                       "resume nor start afresh; remove both (--branch --journal) to reuse the tag")
        p.after = "cannot reuse the tag (see above)"
    elif branch_gone:
        p.after = "starts the tag afresh from HEAD"
    return p


def refs_text(refs: int, tag: str) -> str:
    return (f"{refs} cycle ref{'s' * (refs != 1)} under refs/autoloop/{tag}/ (every cycle's change, "
            "for `autoloop show`)")


def temps_text(temps: list[Path]) -> str:
    entries = (st for t in temps for _, _, st in walk(str(t)))
    size = sum(st.st_size for st in entries if st and kind_of(st.st_mode) != "d") / (1 << 20)
    return (f"{len(temps)} temporary folder{'s' * (len(temps) > 1)} ({num(size, 3)} MB) in {temps[0].parent} "
            "left by autoloop processes that are gone")


def _rendered_for(j: Journal, tag: str) -> list[Path]:
    """experiments.md and results.tsv are shared by every tag of a program.md: only when the
    last run rendered them for this tag are they this tag's journal."""
    try:
        head = j.experiments.read_text(encoding="utf-8", errors="replace").split("\n", 1)[0]
    except OSError:
        return []
    return [j.experiments, j.results] if head.endswith(f"run `autoloop/{tag}`") else []


def _kept(ledger: Path) -> int:
    """Keeps in the ledger, read only (loading would mend a torn line: the run's job, under its lock)."""
    try:
        with open(ledger, "rb") as f:
            cycles = [line for line in f if line.startswith(b'{"t":"cycle"')]
    except OSError:
        return 0
    return sum(_status(line) == "keep" for line in cycles)


def _status(line: bytes) -> object:
    try:
        rec = json.loads(line)
    except ValueError:
        return None            # a torn last line
    return rec.get("status") if isinstance(rec, dict) else None


def _rel(program: Program, path: Path) -> str:
    try:
        return path.relative_to(program.repo_root).as_posix()
    except ValueError:
        return str(path)


def remove(program: Program | None, p: Plan) -> None:
    """Carry the plan out: the tag's part first, under its lock (a run of this tag makes it refuse)."""
    if program is not None and p.tag is not None:
        _remove_run(program, p.tag, p)
    for path in p.temps:
        try:
            remove_tree(path)
        except OSError as exc:
            raise AutoloopError(f"cannot remove {path}: {exc.strerror or exc}; remove it by hand") from None


def _remove_run(program: Program, tag: str, p: Plan) -> None:
    from filelock import FileLock, Timeout

    ws = Workspace(program.repo_root, tag)
    lock_path = ws.path.with_name(ws.path.name + ".lock")
    lock = FileLock(str(lock_path), timeout=0) if lock_path.parent.is_dir() else None
    try:
        if lock is not None:
            lock.acquire()
    except Timeout:
        raise LockedError(f"a run of tag '{tag}' is going on (lock {lock_path}); stop it first") from None
    try:
        if p.branch_head is not None:
            ws.remove_branch()
        if p.cycle_refs:
            ws.cycle_refs.remove_all()
        ws.remove_leftovers()
        for path in [*p.state, *p.journal]:
            remove_tree(path)
        with suppress(OSError):   # the last tag gone: no empty folder
            (program.state_dir / ".autoloop").rmdir()
    finally:
        if lock is not None:
            lock.release()
            lock_path.unlink(missing_ok=True)
            with suppress(OSError):
                lock_path.parent.rmdir()


def latest_tag(program: Program) -> str:
    """The most recent run of this program file (others in its folder share `.autoloop/`)."""
    ledgers = sorted((program.state_dir / ".autoloop").glob("*/ledger.jsonl"), key=lambda x: x.stat().st_mtime)
    ledgers = [led for led in ledgers if run_of(led, program.rel_path)]
    if not ledgers:
        raise UsageError(f"no autoloop run found next to {program.path.name}; name one with --tag TAG")
    return ledgers[-1].parent.name


def main(args: argparse.Namespace) -> int:
    from autoloop.commands import clean

    program, tag, no_run = None, None, None
    try:
        program = load_program(args.program)
        tag = args.tag or clean.latest_tag(program)
    except UsageError as exc:
        if args.tag or args.branch or args.journal:
            raise
        no_run = exc   # nothing of a run to clean here: the temporary folders alone, if any
    if args.yes and not args.tag and tag is not None:
        # with no one to read the listing, a guessed tag's worktrees and logs must not go
        raise UsageError(f"clean --yes needs the tag named: add --tag {tag} (the most recent run "
                         "here), or leave out --yes to see the listing first")
    plan = clean.plan(program, tag, branch=args.branch, journal=args.journal)
    keeps = [f"  {k}" if k.startswith("note:") else f"  keeps {k}" for k in plan.keeps]
    if no_run and plan.empty:
        raise no_run
    if plan.empty:
        print("\n".join([f"nothing to remove for tag '{tag}'", *keeps]))
        return 0
    what = f"tag '{tag}'" if tag else f"no run here ({no_run})"
    print(f"autoloop clean: {what} — will remove:")
    if plan.branch_head:
        print(f"  branch {plan.branch} (at {plan.branch_head[:12]}; its kept commits stay reachable only "
              "if merged elsewhere)")
    if plan.cycle_refs:
        print(f"  {clean.refs_text(plan.cycle_refs, plan.tag or '')}")
    for p in [*plan.trees, *map(_shown, [*plan.journal, *plan.state])]:
        print(f"  {p}")
    if plan.temps:
        print(f"  {clean.temps_text(plan.temps)}")
    for k in keeps:
        print(k)
    if not args.yes:
        if not sys.stdin.isatty():
            raise UsageError("autoloop clean asks before removing anything; add --yes to run it without a terminal")
        try:
            answer = input("remove these? [y/N] ").strip().lower()
        except EOFError:
            answer = ""
        if answer not in ("y", "yes"):
            print("nothing removed")
            return 1
    clean.remove(program, plan)
    print(f"removed; `autoloop run {args.program} --tag {tag}` {plan.after}" if tag else "removed")
    return 0


def _shown(p: Path) -> str:
    try:
        return p.relative_to(Path.cwd()).as_posix()
    except ValueError:
        return str(p)
