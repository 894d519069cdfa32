"""Step 3: what really changed, from the disk, against the rules. What the workers share (git's
files, the journal, the branch, the places the guardrails watch) is checked first: when any of it
changed it cannot be pinned on one worker, so every candidate of the round is void."""

from __future__ import annotations

from autoloop.engine.cycle import Cycle, Outcome, Round, RunState, file_changes, violation
from autoloop.git.workspace import GitError
from autoloop.journal.ledger import quote_path
from autoloop.program.scope_rules import library_shadow
from autoloop.disk.snapshot import diff


def scope(state: RunState, rnd: Round) -> None:
    state.phase(rnd, "scope")
    if len(rnd.cycles) == 1:
        _check(state, rnd.cycles[0], rnd.incumbent, "")   # its own check names what changed
        return
    shared = _shared(state, rnd)
    if shared or not state.guard.outside_clean():
        # the first check undoes what changed outside the trees: one at a time
        for c in rnd.cycles:
            _check(state, c, rnd.incumbent, shared)
    else:
        state.each(rnd.cycles, lambda c: _check(state, c, rnd.incumbent, ""))


def _shared(state: RunState, rnd: Round) -> str:
    assert state.sentinel is not None
    what = []
    if state.sentinel.changed():
        what.append("git's or autoloop's own files")
    if state.journal.tampered() or not state.journal.rendered_ok(state.program.goal):
        what.append("the journal")
    if state.ws.branch_head() != rnd.incumbent:
        what.append(f"the run branch {state.ws.branch}")
    if not what:
        return ""
    return (f"{' and '.join(what)} changed while {len(rnd.cycles)} generators ran at once; no candidate of "
            "this round can be trusted")


def _check(state: RunState, c: Cycle, incumbent: str, shared: str) -> None:
    problems = _problems(state, c, incumbent)
    if shared:
        problems.append(shared)
    files = [ch.path for ch in file_changes(c.changes)]
    if problems:
        # a generator stopped for its disk, output or time is said beside what it touched
        said = [f"generator error: {c.gen_error}"] if c.gen_error is not None else []
        c.outcome = violation([*said, *problems][:5], files)
    elif c.gen_error is not None:
        c.outcome = Outcome("gen_error", f"generator error: {c.gen_error}", f"gen_error: {c.gen_error}",
                            changed=files)
    elif not files:
        p = c.proposal
        lesson = p.no_change_reason or "no change: the generator left the tree as it was"
        if p.notes:
            # what the agent said went wrong (failed edits, denied tools) is the lesson
            lesson += " (it reported: " + "; ".join(p.notes[:5]) + ")"
        c.outcome = Outcome("no_change", lesson, "no change")
    if c.outcome is not None and files:
        keep_found(state, c, incumbent)


def keep_found(state: RunState, c: Cycle, incumbent: str, tree: str | None = None) -> None:
    """Commit what a cycle that has no candidate changed on disk (a violation, a failed
    generator; `tree` when already written), so that `autoloop show` can show it. It is reverted
    all the same, and never measured."""
    assert c.outcome is not None
    ws = state.ws
    message = (f"autoloop cycle {c.n}: {c.outcome.status}, reverted\n\nWhat the generator changed, as autoloop "
               f"found it on disk; never measured, never kept.\nCycle: {c.n}\nRun: {ws.branch}\n")
    try:
        c.found = ws.commit(tree, incumbent, message, ws.identity()) if tree is not None else \
            ws.commit_found(incumbent, c.changes, c.tree, message)
        c.stat = ws.diffstat_later(incumbent, c.found)
    except (ValueError, GitError, OSError) as exc:   # the cycle's verdict stands without it
        c.found_note = str(exc)


def _problems(state: RunState, c: Cycle, incumbent: str) -> list[str]:
    """Undo and report anything outside the tree the generator touched; set the tree's change
    set and return the violations in it."""
    ws, journal, sentinel = state.ws, state.journal, state.sentinel
    assert sentinel is not None and c.before is not None
    problems = [f"changed {name} (git's or autoloop's own file)" for name in sentinel.changed()]
    if problems:
        sentinel.restore()
    if c.tree.dotgit_tampered():
        problems.append("changed the worktree's .git link")
        c.tree.restore_dotgit()
    if journal.tampered():
        problems.append("changed the ledger")
        journal.repair()
    if not journal.rendered_ok(state.program.goal):
        problems.append("changed experiments.md or results.tsv")
        journal.render(state.program.goal)
    head = ws.branch_head()
    if head != incumbent:
        problems.append(f"moved the run branch {ws.branch}")
        if head is None:
            ws.create_branch(incumbent)
        else:
            ws.advance(incumbent, head, "autoloop: undo a move by the generator")
    # refs/replace would swap objects in other tools' reads, a moved branch or tag rewrites
    # your history: any ref the generator made or moved is put back
    problems += [f"{what} (refs are not the generator's to change)" for what in ws.refs.changed()]
    problems += ws.objects.changed()
    hidden = c.tree.index_flags()
    if hidden:
        problems.append("hid files from git (assume-unchanged/skip-worktree): " + ", ".join(hidden[:5]))
    c.changes = diff(c.before, c.tree.snapshot())
    problems += state.guard.after_generate(c.changes)
    for ch in file_changes(c.changes):
        a = ch.after
        if a is not None and a.kind == "l":
            problems.append(f"symlink {quote_path(ch.path)} -> {quote_path(str(a.digest))} (symlinks are not allowed)")
        elif a is not None and a.kind == "o":
            problems.append(f"special file {quote_path(ch.path)}")
        elif a is not None and a.kind == "f" and a.nlink > 1:
            problems.append(f"hard link {quote_path(ch.path)} (links are not allowed)")
        else:
            why = state.rules.why_not(ch.path)
            shadowed = library_shadow(ch.path, state.script_dirs) if ch.before is None and not why else None
            if shadowed:
                why = f"shadows the module '{shadowed}' that a verifier or guard script beside it would import"
            if why:
                problems.append(f"changed {quote_path(ch.path)} ({why})")
    return problems
