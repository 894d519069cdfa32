"""Parallel rounds: `parallel: {workers: N, verify: M}` in program.md, or `autoloop run --workers N`.

A round is the six steps of `Run.cycle` done by N workers at once, from the same incumbent:

    1 prepare   each worker's own git worktree == incumbent (worker 0 edits the run's own tree)
    2 generate  N generators, one per tree, at the same time (threads; each a process or an SDK call)
    3 scope     per tree, from the disk (Run._scope, with the guardrails' after_generate); git's
                files, the ledger, the branch and what the guardrails watch outside the trees are
                shared, so a change to them voids every candidate of the round
    4 verify    candidate commits measured through the executor, at most M at once; each
                worker's tree is reverted while its candidate is measured; what the guardrails
                watch outside the trees is captured once before and checked once after them all
    5 decide    each against the incumbent by the usual rule (Run._decide / the judge); of those
                that pass, the best is kept and the others are discarded ("beaten in the round")
    6 record    one commit at most; every candidate gets its own cycle number, ledger entry and
                lesson, written in cycle order

Crash safety is the single-worker loop's write-ahead scheme applied to the round: every
candidate's `begin` is in the ledger before any generator starts, the winner's `intent` before
the branch moves, and the `cycle` records follow in order. A run killed anywhere in a round
resumes by rolling back every cycle without a `cycle` record (Run._attach, Journal.unfinished).

Only the main thread writes the ledger, moves the branch or reports progress; worker threads
run git in their own worktrees, generators and verifications.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from autoloop import proc
from autoloop.errors import Interrupted, UsageError
from autoloop.executors import LaneJudge, LocalExecutor, make_executor
from autoloop.hardening import Tampered
from autoloop.generators.base import Generator, Proposal
from autoloop.generators.registry import make_generator
from autoloop.journal import Record, escape_controls
from autoloop.numbers import num as fmt
from autoloop.loop import Run, RunOptions, _file_changes, _Outcome
from autoloop.memory import near_duplicate
from autoloop.program import Program
from autoloop.ratchet import better
from autoloop.snapshot import Change
from autoloop.watch import StatTree
from autoloop.workspace import Worktree

# After Ctrl-C, how long the round waits for its workers to notice before it cleans up anyway
# (commands die at once; an SDK call in flight cannot be interrupted from another thread).
STOP_GRACE_S = 15.0


@dataclass
class _Slot:
    """One worker's candidate in a round."""

    worker: int
    n: int                                   # its cycle number
    tree: Worktree
    env: dict[str, str]
    marker: str
    log_dir: Path
    t0: float
    before: dict | None = None               # snapshot of the tree at the incumbent
    proposal: Proposal = field(default_factory=Proposal)
    gen_error: str | None = None
    changes: list[Change] = field(default_factory=list)
    outcome: _Outcome | None = None
    candidate: str | None = None             # the candidate commit (not on any branch)
    tree_hash: str | None = None
    files: list[str] = field(default_factory=list)
    stat: str | None = None
    restored: bool = False                   # the tree is back at the incumbent, exactly


class ParallelRun(Run):
    def __init__(self, program: Program, options: RunOptions,
                 generator_factory: Callable[..., Generator] = make_generator, *,
                 workers: int | None = None) -> None:
        super().__init__(program, options, generator_factory)
        if options.reviewer is not None:
            raise UsageError("--approve shows one candidate at a time; it cannot be used with "
                             "parallel workers (use --workers 1)")
        self.workers = workers or program.parallel.workers
        self.lanes = program.parallel.verify_slots(self.workers)
        self.executor = make_executor(program, self.ws, self.lanes, self.guard)
        # baseline and final check through lane 0: every number of the run from the same place
        self.judge = LaneJudge(program, self.ws, self.marker, self._check_signal, self.guard,
                               self.executor.lane(0))
        self._generators: dict[int, Generator] = {}
        self._exact_trees: dict[int, tuple[str, dict]] = {}   # worker -> (commit, proven snapshot)
        self._ready = False

    def _verify_slots(self) -> tuple[set[int], int]:
        """Lane k measures in slots 2k (and 2k+1 for the incumbent, unless the rule is plain)."""
        sides = (0,) if self.judge.plain else (0, 1)
        return {2 * k + side for k in range(self.lanes) for side in sides}, max(4, 2 * self.lanes)

    # ---- entry ---------------------------------------------------------------------------------

    def execute(self) -> Any:
        self.ws.check_state()           # refuse a bad repository before starting any cluster
        self.executor.start()
        try:
            return super().execute()
        finally:
            self.executor.close()

    def worker_marker(self, worker: int) -> str:
        # prefix-matched on resume (proc.kill_marked(prefix=True)), so a killed run's workers die
        return f"{self.marker}-w{worker}"

    def _attach(self) -> str:
        proc.kill_marked(self.marker + "-w", prefix=True)
        for tree in self._trees():
            tree.clear_stale_locks()
        return super()._attach()

    def _trees(self) -> list[Worktree]:
        trees = [self.ws.gen_tree(i) for i in range(1, self.workers)]
        if isinstance(self.executor, LocalExecutor):
            trees += self.executor.trees()
        return trees

    # ---- a round -------------------------------------------------------------------------------

    def _step(self, generator: Generator, ran: int) -> list[Record]:
        self._generators.setdefault(0, generator)
        limit = self.opt.cycles if self.opt.cycles is not None else self.program.stop.max_cycles
        k = self.workers if limit is None else max(1, min(self.workers, limit - ran))
        return self.round(k)

    def round(self, k: int) -> list[Record]:
        n0 = self.journal.next_cycle()
        incumbent, best_before = self.incumbent, self.best
        if not self._ready:
            self._open(incumbent)
        for i in range(k):
            if i not in self._generators:
                self._generators[i] = self.generator_factory(self.program.generator, self.program)
        slots: list[_Slot] = []
        for i in range(k):
            n = n0 + i
            # write-ahead: every candidate of the round is in the ledger before anything runs
            self.journal.append({"t": "begin", "cycle": n, "parent": incumbent, "worker": i, "round": n0})
            env = self._env(n)
            env.update(self.program.parallel.worker_env(i))
            env["AUTOLOOP_WORKER"] = str(i)
            slots.append(_Slot(i, n, self.ws.gen_tree(i), env, self.worker_marker(i), self._log_dir(n),
                               time.monotonic()))
        winner: _Slot | None = None
        try:
            # 1 prepare
            self._phase(n0, k, "prepare")
            self._threads(slots, lambda s: self._prepare(s, incumbent))
            self.sentinel.capture()
            self.ws.capture_refs()
            self.ws.capture_objects(incumbent, sorted(self.guard.protected))
            self.guard.before_generate()

            # 2 generate
            self._phase(n0, k, "generate")
            self._threads(slots, lambda s: self._generate_in(s, k, n0))
            self._check_signal()

            # 3 scope. What the workers share (git's files, the journal, the branch, the places
            # the guardrails watch, processes left running) is checked first: when any of it
            # changed, Run._scope undoes it on its first call, so the workers are checked one at
            # a time and every candidate of the round is void; else each worker's own tree is
            # checked in its own thread (the shared checks then only read). All are checked
            # before any is verified: the guardrails watch the verification trees meanwhile.
            self._phase(n0, k, "scope")
            shared = self._shared_changes(incumbent, k)
            if shared or not self.guard.outside_clean():
                for s in slots:
                    self._check(s, incumbent, shared)
            else:
                self._threads(slots, lambda s: self._check(s, incumbent, ""))

            # 4 verify + 5 decide: candidate commits made and measured in the workers' threads,
            # at most `lanes` measurements at once; the places outside the trees are captured
            # once before and checked once after all of them (they cannot be told apart)
            history = self.journal.cycles()
            lanes: queue.Queue[int] = queue.Queue()
            for lane in range(self.lanes):
                lanes.put(lane)
            todo = [s for s in slots if s.outcome is None]
            if todo:
                self.guard.capture_outside()   # here, before the measurements start at once
            self._phase(n0, k, "verify")
            self._threads(todo, lambda s: self._verify(s, incumbent, best_before, history, lanes))
            # measured, or voided while measured (Tampered): what it changed outside is checked too
            measured = [s for s in slots if s.candidate is not None and s.outcome is not None
                        and s.outcome.measured is not None]
            after = self.guard.after_verify()
            if after and measured:
                why = "; ".join(after) + (f" (while {len(measured)} candidates were measured at once)"
                                          if len(measured) > 1 else "")
                for s in measured:
                    assert s.outcome is not None
                    own = s.outcome.lesson.removeprefix("violation: ") + "; " \
                        if s.outcome.status == "violation" else ""
                    s.outcome = _Outcome("violation", f"violation: {own}{why}", f"violation: {own}{why}",
                                         changed=s.files)
            winner = self._choose(slots, best_before)

            # revert the trees not reverted yet, exactly, while nothing is journaled yet (the
            # winner's too: the next round resets it to the new incumbent in any case)
            self._threads([s for s in slots if not s.restored], lambda s: self._restore(s, incumbent))
        except BaseException as exc:
            reason = "interrupted" if isinstance(exc, (Interrupted, KeyboardInterrupt)) else \
                f"internal error: {type(exc).__name__}: {exc}"
            self._abort_round(slots, incumbent, reason)
            raise

        # 6 record (main thread, cycle order): a kill from here on is rolled back on resume
        return self._record(slots, winner, incumbent, best_before, n0)

    # ---- the steps, per worker -------------------------------------------------------------------

    def _open(self, incumbent: str) -> None:
        """First round: every worker's tree and every verification tree, made one at a time
        (`git worktree add` is not something to race), then watch the new admin folders too."""
        for i in range(1, self.workers):
            self.ws.gen_tree(i).open(incumbent)
        if isinstance(self.executor, LocalExecutor):
            for lane in range(self.lanes):
                trees = self.executor.lane(lane).trees      # type: ignore[attr-defined]
                trees["B"].checkout(incumbent)
                if not self.judge.plain:
                    trees["A"].checkout(incumbent)
        extra: list[Path] = [self.program.path, *self.guard.user_files()]
        for i in range(1, self.workers):
            tree = self.ws.gen_tree(i)
            admin = tree._admin_dir
            assert admin is not None
            extra += [admin / "config.worktree", admin / "commondir", admin / "gitdir"]
            self.guard.untrusted.append(tree.path)   # its PATH entries are not trusted either
        self.sentinel = self.ws.watch_git(extra=extra)
        self.guard.sentinel = self.sentinel
        # the guardrails watch verification slots 0-3 while generators run; lanes use 2 each
        for slot in range(4, 2 * self.lanes):
            self.guard.gen_watch.add(StatTree.verification(self.ws.verify_tree(slot).path))
        self._ready = True

    def _prepare(self, s: _Slot, incumbent: str) -> None:
        exact = self._exact_trees.pop(s.worker, None)
        if exact is not None and exact[0] == incumbent:
            s.before = exact[1]       # the last restore proved the tree is exactly this
        else:
            s.tree.reset_hard(incumbent)
            s.before = s.tree.snapshot()

    def _generate_in(self, s: _Slot, k: int, n0: int) -> None:
        note = "" if k == 1 else (
            f"Parallel round: {k} workers propose changes to this same code at once (cycles {n0}-{n0 + k - 1}; "
            f"you are worker {s.worker + 1} of {k}); the best of them is kept, so try something the "
            "others are unlikely to try.")
        s.proposal, s.gen_error = self._generate(self._generators[s.worker], s.n, s.log_dir, tree=s.tree,
                                                 env=s.env, marker=s.marker, note=note)
        # the hypothesis goes into the journal and a commit message: no secrets in it
        s.proposal.hypothesis = escape_controls(self.redact(s.proposal.hypothesis))

    def _check(self, s: _Slot, incumbent: str, shared: str) -> None:
        """Step 3 for one worker: its change set from the disk, against the rules; a candidate
        commit when it passes."""
        assert s.before is not None
        problems, s.changes = self._scope(incumbent, s.before, s.tree)
        if shared:
            problems.append(shared)
        s.outcome = self._triage(s.proposal, s.gen_error, problems, s.changes)

    def _shared_changes(self, incumbent: str, k: int) -> str:
        """What the generators changed that all of them share: it cannot be pinned on one."""
        what = []
        if self.sentinel.changed():
            what.append("git's or autoloop's own files")
        if self.journal.tampered() or not self.journal.rendered_ok(self.program.goal):
            what.append("the journal")
        if self.ws.branch_head() != incumbent:
            what.append(f"the run branch {self.ws.branch}")
        if not what or k == 1:
            return ""   # one worker: Run._scope's own message names it
        return (f"{' and '.join(what)} changed while {k} generators ran at once; no candidate of "
                "this round can be trusted")

    def _candidate(self, s: _Slot, incumbent: str) -> None:
        tree = self.ws.candidate_tree(incumbent, s.changes, where=s.tree)
        if tree == self.ws.tree_of(incumbent):
            s.outcome = _Outcome("no_change", "no change: nothing git can record changed "
                                 "(e.g. only a mode git does not track)", "no change")
            return
        s.tree_hash = tree
        s.candidate = self.ws.commit(tree, incumbent, f"autoloop candidate, cycle {s.n}", self.ws.identity())
        s.files = [c.path for c in _file_changes(s.changes)]

    def _verify(self, s: _Slot, incumbent: str, best_before: float | None, history: list[Record],
                lanes: queue.Queue[int]) -> None:
        self._candidate(s, incumbent)      # a private index per call: safe beside the others
        if s.outcome is not None:          # nothing git can record changed
            return
        # The candidate is a commit now: revert the worker's tree and take its diffstat while
        # it is measured, off the round's critical path.
        errors: list[BaseException] = []

        def meanwhile() -> None:
            try:
                self._restore(s, incumbent)
                assert s.candidate is not None
                s.stat = self.ws.diffstat(incumbent, s.candidate)
            except BaseException as exc:  # raised in the worker's thread below
                errors.append(exc)

        helper = threading.Thread(target=meanwhile, daemon=True, name=f"autoloop-restore-{s.worker}")
        helper.start()
        try:
            self._verify_on_lane(s, incumbent, best_before, history, lanes)
        finally:
            helper.join()
        if errors:
            raise errors[0]
        assert s.outcome is not None
        s.outcome.diffstat = s.stat

    def _verify_on_lane(self, s: _Slot, incumbent: str, best_before: float | None, history: list[Record],
                        lanes: queue.Queue[int]) -> None:
        lane_id = lanes.get()
        try:
            self._check_signal()
            lane = self.executor.lane(lane_id)
            assert s.candidate is not None
            try:
                outcome = self._measure_on(lane, s, incumbent, best_before, history)
            except Tampered as exc:        # a step changed what was being measured
                outcome = _Outcome("violation", f"violation: {exc}", f"violation: {exc}", changed=s.files)
            outcome.tree, outcome.diffstat, outcome.measured = s.tree_hash, s.stat, s.candidate
            s.outcome = outcome
        finally:
            lanes.put(lane_id)

    def _measure_on(self, lane: Any, s: _Slot, incumbent: str, best_before: float | None,
                    history: list[Record]) -> _Outcome:
        """Steps 4 and 5 for one candidate, on one lane (Run._verify_and_decide, per lane)."""
        assert s.candidate is not None
        if self.judge.plain:
            # contract section 5: one measurement of the candidate against the stored incumbent
            lane.prepare({"B": s.candidate})
            m = lane.measure(self.program, "B", env=s.env, log_dir=s.log_dir, marker=s.marker,
                             with_guards=True)
            self._check_signal()
            return self._decide(m, s.files)
        judge = LaneJudge(self.program, self.ws, s.marker, self._check_signal, self.guard, lane)
        assert best_before is not None
        return self._judged(judge.cycle(s.candidate, incumbent, best_before, s.log_dir, s.env, history),
                            s.files)

    def _choose(self, slots: Sequence[_Slot], best_before: float | None) -> _Slot | None:
        """Of the candidates the rule would keep, the best (the earliest on a tie); the others
        are discarded, with a lesson that says they were beaten in the round, not by the rule."""
        keeps = [s for s in slots if s.outcome is not None and s.outcome.status == "keep"]
        if not keeps:
            return None
        direction = self.program.verifier.direction
        winner = keeps[0]
        for s in keeps[1:]:
            assert s.outcome is not None and winner.outcome is not None
            if s.outcome.metric is not None and (winner.outcome.metric is None or
                                                 better(direction, s.outcome.metric, winner.outcome.metric)):
                winner = s
        name = self.program.verifier.label
        w = winner.outcome
        assert w is not None
        for s in keeps:
            if s is winner:
                continue
            o = s.outcome
            assert o is not None
            s.outcome = dataclasses.replace(
                o, status="discard",
                lesson=(f"discarded: {fmt(o.metric)} beat best {fmt(best_before)}, but cycle {winner.n} "
                        f"of the same round did better ({fmt(w.metric)}) and was kept"),
                result=(f"discard: {name} {fmt(best_before)} → {fmt(o.metric)} passed, but cycle "
                        f"{winner.n} of this round measured {fmt(w.metric)} and was kept instead"))
        return winner

    def _restore(self, s: _Slot, incumbent: str) -> None:
        assert s.before is not None
        s.tree.restore(incumbent, s.before)
        self._exact_trees[s.worker] = (incumbent, s.before)
        s.restored = True

    # ---- recording -------------------------------------------------------------------------------

    def _record(self, slots: Sequence[_Slot], winner: _Slot | None, incumbent: str,
                best_before: float | None, n0: int) -> list[Record]:
        recs: list[Record] = []
        for s in slots:
            o = s.outcome
            assert o is not None
            commit = None
            if s is winner:
                assert o.tree is not None
                message = self._commit_message(s.n, s.proposal, o)
                commit = self.ws.commit(o.tree, incumbent, message, self.ws.identity())
                assert o.measured is not None
                self.guard.check_keep(commit, o.measured)  # the kept tree is the measured tree
                self.journal.append({"t": "intent", "cycle": s.n, "commit": commit, "parent": incumbent})
                self.ws.advance(commit, incumbent, f"autoloop: keep cycle {s.n}")
                self._set_incumbent(commit, self.baseline, o.metric)
            self._redact_logs(s.log_dir)
            repeat = near_duplicate(s.proposal.hypothesis, self.journal.cycles())
            if repeat is not None:
                o.result += f" (repeats foreclosed cycle {repeat['cycle']})"
            p = s.proposal
            rec = self._cycle_record(s.n, p, o, commit=commit, incumbent=incumbent, best_before=best_before,
                                     t0=s.t0, log_dir=s.log_dir, repeat=repeat,
                                     more={"worker": s.worker, "round": n0})
            rec = self.redact.obj(rec)  # lessons quote tool output, which may quote a key
            recs.append(self.journal.append(rec))
            if p.finished:
                self._finished = p.no_change_reason or "the generator has nothing left to propose"
        self.journal.render(self.program.goal)
        for rec in recs:
            self.opt.report("cycle", rec)
        return recs

    def _abort_round(self, slots: Sequence[_Slot], incumbent: str, reason: str) -> None:
        """Leave no trace of an unfinished round: every tree back at the incumbent, the ledger
        says each of its cycles was abandoned."""
        self._restoring = True   # a further Ctrl-C must not cut this short
        try:
            self._undo_round(slots, incumbent, reason)
        finally:
            self._restoring = False

    def _undo_round(self, slots: Sequence[_Slot], incumbent: str, reason: str) -> None:
        for s in slots:  # nothing a worker started may write after the restore
            proc.kill_marked(s.marker)
        if self.sentinel.changed():
            self.sentinel.restore()
        if self.journal.tampered():
            self.journal.repair()
        problems = []
        for s in slots:
            try:
                if s.tree.dotgit_tampered():
                    s.tree.restore_dotgit()
                if s.before is not None:
                    s.tree.restore(incumbent, s.before)
                else:
                    s.tree.reset_hard(incumbent)
            except Exception as exc:  # the next round resets it again; say so, and go on with the rest
                self._exact_trees.pop(s.worker, None)
                problems.append(f"worker {s.worker}'s tree not restored: {exc}")
        for s in slots:
            self.journal.append({"t": "abort", "cycle": s.n,
                                 "reason": "; ".join([reason, *problems])})
        self.journal.render(self.program.goal)

    # ---- threads ---------------------------------------------------------------------------------

    def _threads(self, slots: Sequence[_Slot], fn: Callable[[_Slot], None]) -> None:
        """fn(slot) for every slot at once, one thread each; the main thread waits, watching for
        Ctrl-C/SIGTERM. The first worker error is raised once all of them have stopped."""
        errors: dict[int, BaseException] = {}

        def body(i: int, s: _Slot) -> None:
            try:
                fn(s)
            except BaseException as exc:  # carried to the main thread
                errors[i] = exc

        if len(slots) == 1:
            body(0, slots[0])
        else:
            threads = [threading.Thread(target=body, args=(i, s), daemon=True, name=f"autoloop-worker-{s.worker}")
                       for i, s in enumerate(slots)]
            for t in threads:
                t.start()
            try:
                for t in threads:
                    while t.is_alive():
                        t.join(0.05)
                        self._check_signal()
            except BaseException:
                # stop the commands (the signal handler did already) and remote tasks; give the
                # workers a moment to see it, so the trees are quiet before the round is undone
                proc.stop_current()
                self.executor.cancel()
                deadline = time.monotonic() + STOP_GRACE_S
                for t in threads:
                    t.join(max(0.0, deadline - time.monotonic()))
                raise
        if errors:
            if self._signal is not None:
                self.executor.cancel()
                raise Interrupted("interrupted")
            raise errors[min(errors)]

    def _phase(self, n0: int, k: int, phase: str) -> None:
        self.opt.report("phase", {"cycle": n0, "phase": phase if k == 1 else f"{phase} ({k} workers)"})


__all__ = ["ParallelRun"]
