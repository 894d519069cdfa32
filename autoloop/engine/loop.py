"""The ratchet loop: lock, signals, resume, baseline, then rounds of cycles (autoloop.engine.round, the
six steps in autoloop.engine.steps) until a stop condition, then the end-of-run check."""

from __future__ import annotations

import hashlib
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from filelock import FileLock, Timeout

from autoloop.process import envs, leftovers, logfile, running
from autoloop.process import proc
from autoloop.engine import reads
from autoloop.engine import trust
from autoloop.engine.approve import Reviewer
from autoloop.engine.cycle import Cycle, Reporter, RunState
from autoloop.errors import ClusterLost, Interrupted, LockedError, RepoStateError, RunFailure, UsageError
from autoloop.engine.executors import LocalExecutor
from autoloop.generators.base import Generator, preflight_context
from autoloop.generators.registry import make_generator
from autoloop.isolation.hardening import Guardrails, Tampered
from autoloop.journal.ledger import UNSANDBOXED, Journal, Record
from autoloop.decide.end import needs_scipy
from autoloop.isolation.measured_files import protected_paths, uncommitted_warnings, verifier_fingerprint
from autoloop.base.numbers import num as fmt
from autoloop.journal.persist import restore_persisted_journal
from autoloop.program.reader import Program
from autoloop.decide.ratchet import reached
from autoloop.journal.redact import Redactor
from autoloop.engine import ending
from autoloop.engine.round import abort, run_round
from autoloop.program.scope_rules import ScopeRules
from autoloop.engine.steps.verify import checked
from autoloop.journal.facts import best_measured, resets, run_parts_text, verifier_runs
from autoloop.git.gitrun import thaw_outer_config
from autoloop.base.walk import temp_tree
from autoloop.decide.wording import plural
from autoloop.git.workspace import VERIFY_SLOTS, Workspace

BACKOFF_MAX_S = 60.0
TAIL_LINES = 20


@dataclass
class RunOptions:   # the hooks are for autoloop.engine.approve and autoloop.commands.ci
    tag: str
    cycles: int | None = None            # overrides stop.max_cycles for this invocation
    report: Reporter = field(default=lambda event, data: None)
    reviewer: Reviewer | None = None     # a person decides (before verify and/or at decide)
    stop_check: Callable[[], str] = field(default=lambda: "")  # extra stop reason ("" = go on)
    on_finish: Callable[[Run], None] | None = None  # under the lock, once attached, however it ends
    # seconds left of the time budget (None: none): an end-of-run check that won't fit is skipped
    time_left: Callable[[], float | None] = field(default=lambda: None)


@dataclass
class RunSummary:
    tag: str
    stop_reason: str
    cycles_run: int
    baseline: float | None
    best: float | None
    incumbent: str
    kept: int
    final: dict[str, Any] | None = None     # the end-of-run re-measurement (decide.end.final_check)


class Run:
    def __init__(self, program: Program, options: RunOptions,
                 generator_factory: Callable[..., Generator] = make_generator, *,
                 workers: int | None = None) -> None:
        self.program, self.opt = program, options
        self.ws = ws = Workspace(program.repo_root, options.tag)
        self.journal = Journal(program.state_dir, options.tag)
        protected = protected_paths(program)
        self.guard = Guardrails(program, ws, self.journal, protected)
        # Fixed per repository and tag, so a resumed run can find and kill what a killed run
        # left behind (the lock guarantees no live run of this tag owns such processes).
        self.marker = hashlib.sha256(f"{ws.common_dir}\0{options.tag}".encode()).hexdigest()[:32]
        workers = workers or program.parallel.workers
        if options.reviewer is not None and workers > 1:
            raise UsageError("--approve shows one candidate at a time; it cannot be used with "
                             "parallel workers (use --workers 1)")
        self.state = RunState(
            program=program, tag=options.tag, report=options.report, ws=ws, journal=self.journal,
            rules=ScopeRules(program.allowed, program.forbidden, protected), guard=self.guard,
            marker=self.marker, workers=workers, lanes=program.parallel.verify_slots(workers),
            parallel=workers > 1 or program.parallel.executor != "local",
            generator_factory=generator_factory,
            # where Python puts a measurement script's own folder first on sys.path (and the top,
            # for `python -m`): a new module named like a library one there is a shadow
            script_dirs=sorted({""} | {rel.rpartition("/")[0] for rel, why in protected.items()
                                       if why == "used by the verifier" and rel.endswith(".py")}),
            redact=Redactor(os.environ), reviewer=options.reviewer)
        self.env = self.state.env
        self._attached = False

    @property
    def incumbent(self) -> str:
        return self.state.incumbent

    @property
    def baseline(self) -> float | None:
        return self.state.baseline

    @property
    def best(self) -> float | None:
        return self.state.best

    def execute(self) -> RunSummary:
        self.ws.check_state()           # refuse a bad repository before starting any cluster
        executor = self.state.executor
        executor.start()
        try:
            # before any generator exists: a same-uid debugger must not attach to the judge
            trust.undumpable()
            self.guard.preflight(executor.unsandboxed)
            generator = self.state.generator_factory(self.program.generator, self.program)
            # Beside the worktree, outside the repository: a refused run leaves no trace in it.
            lock_path = self.ws.path.with_name(self.ws.path.name + ".lock")
            lock_path.parent.mkdir(parents=True, exist_ok=True)
            lock = FileLock(str(lock_path), timeout=0)
            try:
                lock.acquire()
            except Timeout:
                raise LockedError(f"another autoloop run holds tag '{self.opt.tag}' in this repository "
                                  f"(lock {lock_path}); wait for it or use another --tag") from None
            old = {sig: signal.signal(sig, self._on_signal) for sig in running.STOP_SIGNALS
                   if sig != signal.SIGHUP or signal.getsignal(sig) is not signal.SIG_IGN}  # nohup
            try:
                # under the lock: a run refused for the lock must not start (or kill) anything
                self.preflight_generator(generator)
                self.state.generators[0] = generator
                return self._run(lock_path)
            finally:
                try:
                    if self._attached and self.opt.on_finish is not None:
                        self.opt.on_finish(self)
                finally:
                    thaw_outer_config()
                    for sig, h in old.items():
                        signal.signal(sig, h)
                    lock.release()
        finally:
            executor.close()

    def preflight_generator(self, generator: Generator) -> str | None:
        """A generator that cannot start stops the run before the baseline (FatalGeneratorError),
        not as a gen_error every cycle. Returns its version."""
        check = getattr(generator, "preflight", None)
        if check is None:
            return None
        marker = proc.new_marker()   # its own: what the check leaves running dies, and nothing else
        with temp_tree("preflight") as scratch:
            ctx = preflight_context(self.program, scratch, env=envs.generator_env(self.env(0)),
                                    run_marker=marker, wrap=self.guard.wrap(scratch, workdir=scratch))
            try:
                return check(ctx)
            finally:
                leftovers.kill_marked(marker)

    def _run(self, lock_path: Path) -> RunSummary:
        state = self.state
        incumbent = self.open(lock_path)
        started = time.monotonic()
        fresh = not self.journal.cycles()
        ran = 0
        try:   # the baseline inside too: a cluster lost (or a Ctrl-C) there still ends the ledger
            if fresh:
                self._baseline(incumbent)
                trust.preload(statistics=needs_scipy(self.program, self.journal.cycles()),
                              generator_kind=self.program.generator.kind)
                # beside the baseline's logs: state.log_dir(0) would set those aside as an aborted attempt
                self._record_reads(incumbent, state.log_dir(0, "cycle-0000-reads"), started)
            while not (reason := self._stop_reason(ran, started)):
                limit = self.opt.cycles if self.opt.cycles is not None else self.program.stop.max_cycles
                recs = run_round(state, state.workers if limit is None else max(1, min(state.workers, limit - ran)))
                ran += len(recs)
                self._backoff(recs[-1])
            final = ending.final_check(self)
        except Interrupted as exc:
            state.restoring = True  # from here on only the way out: a further Ctrl-C waits
            why = f"no Ray node can measure: {exc}" if isinstance(exc, ClusterLost) else "interrupted"
            self.journal.append({"t": "end", "reason": why, "cycles_run": ran})
            raise
        self.ws.reset_hard(state.incumbent)
        self.journal.append({"t": "end", "reason": reason, "cycles_run": ran})
        self.opt.report("stop", {"reason": reason})
        cycles = self.journal.cycles()
        # "best" is the best measured: never a regression a person chose to keep (approve mode)
        best = best_measured(cycles, self.program.verifier.direction, state.best, resets(self.journal.records))
        return RunSummary(self.opt.tag, reason, ran, state.baseline, best, state.incumbent,
                          sum(1 for c in cycles if c["status"] == "keep"), final)

    def open(self, lock_path: Path) -> str:
        """Under the run's lock, before the baseline: attach to the branch and the ledger, make
        the trees and start watching; returns the incumbent."""
        state, ws, guard = self.state, self.ws, self.guard
        leftovers.kill_marked(self.marker, prefix=True)   # the run's and its workers' leftovers
        ws.clear_stale_locks()
        workers = [ws.gen_tree(i) for i in range(1, state.workers)]
        lanes = state.executor.lanes if isinstance(state.executor, LocalExecutor) else []
        for tree in workers + [t for lane in lanes for t in lane.trees.values()]:
            tree.clear_stale_locks()
        incumbent = self._attach()
        self._attached = True
        for line in uncommitted_warnings(self.program, ws, incumbent):
            self.opt.report("warning", {"cycle": 0, "message": line})
        ws.open(incumbent)
        # the score's tree (autoloop.engine.score) holds the commit the run started from, made before
        # the watch of git's files starts
        guard.start_commit = next((c.get("commit") for c in self.journal.cycles() if c["status"] == "baseline"), incumbent)
        if self.program.verifier.score is not None:
            ws.score_tree().open(guard.start_commit)
        # lane k measures in slots 2k (and 2k+1 for the incumbent, unless the rule is plain)
        sides = (0,) if state.judge.plain else (0, 1)
        slots = max(VERIFY_SLOTS, 2 * state.lanes)
        ws.drop_verify_trees({2 * k + side for k in range(state.lanes) for side in sides}, slots)
        ws.freeze_config()
        extra: list[Path] = [self.program.path, *guard.user_files()]
        for tree in workers:   # made one at a time: `git worktree add` is not something to race
            tree.open(incumbent)
            admin = tree._admin_dir
            assert admin is not None
            extra += [admin / "config.worktree", admin / "commondir", admin / "gitdir"]
            guard.untrusted.append(tree.path)   # its PATH entries are not trusted either
        if len(lanes) > 1:
            for lane in lanes:
                for side in ("B",) if state.judge.plain else ("B", "A"):
                    lane.trees[side].checkout(incumbent)
        state.sentinel = ws.watch_git(extra=extra)
        guard.start(state.sentinel, lock_path, slots)
        self.journal.render(self.program.goal)
        if state.executor.description:   # where the measurements run, before anything is measured
            self.opt.report("note", {"cycle": 0, "message": state.executor.description})
        if guard.unsandboxed:
            # once, loudly: the journal's head and `autoloop log` / the report say it too
            self.opt.report("warning", {"message": UNSANDBOXED.format(guard.unsandboxed)})
        # what autoloop imports later is loaded before any generator could plant or patch it;
        # whether numpy/scipy are needed a fresh run learns at cycle 0 (_run looks again then)
        trust.preload(statistics=needs_scipy(self.program, self.journal.cycles()),
                      generator_kind=self.program.generator.kind)
        return incumbent

    def _attach(self) -> str:
        """Find the run branch (or start afresh from HEAD), roll back the cycles a crash cut
        short; returns the incumbent."""
        ws, j = self.ws, self.journal
        restore_persisted_journal(ws, j, self.program)  # a CI run's journal commit, if the head is one
        j.load()
        head = ws.branch_head()
        if head is not None and j.first_start() is None:
            raise RepoStateError(f"branch {ws.branch} exists but was not made by autoloop (no "
                                 f"ledger at {j.ledger}); use another --tag or delete the branch")
        if not j.cycles():
            return self._start_afresh(head)
        if head is None:
            raise RepoStateError(f"branch {ws.branch} is gone but {j.ledger} records a run; "
                                 "restore the branch or use another --tag")
        # the verifier of the last `start` before the first cycle (a run whose baseline failed
        # may fix its verifier and go on under the same tag)
        measured_with = None
        for r in j.records[:next(i for i, r in enumerate(j.records) if r["t"] == "cycle")]:
            measured_with = r.get("verifier") if r["t"] == "start" else measured_with
        if measured_with is not None and measured_with != verifier_fingerprint(self.program):
            raise UsageError(f"{self.program.path.name}: the verifier changed since run '{self.opt.tag}' "
                             "began, so its metrics are not comparable; start a new --tag")
        rolled_back: list[int] = []
        for pending in j.unfinished():  # several after a round of several workers
            # only a cycle with an `intent` can have moved the branch; one without (a round's
            # later cycle, cut short after its winner was recorded) is checked below, with the
            # branch against the ledger's last keep
            intent, parent = j.intent_for(pending["cycle"]), pending["parent"]
            if intent is not None and head != parent:
                if intent.get("commit") != head:
                    raise RepoStateError(f"branch {ws.branch} moved outside autoloop "
                                         f"(expected {parent[:12]}, found {head[:12]})")
                ws.rewind(parent, head)
                head = parent
            j.append({"t": "abort", "cycle": pending["cycle"],
                      "reason": "unfinished when autoloop stopped; rolled back"})
            rolled_back.append(pending["cycle"])
        expected = self._incumbent_from([r for r in j.records if r["t"] in ("cycle", "final")])
        undo = next((f["undo"] for f in reversed(j.finals()) if f.get("undo")), None)
        if undo is not None and expected == undo["to"] and head == undo["from"]:
            ending.undo(self, undo)   # the run stopped between its ledger record and the branch's move
            head = undo["to"]
        # a strict run's stored numbers are comparable only on the node that measured them
        self.state.executor.resume_on(next(((c.get("stats") or {}).get("node") for c in j.cycles()
                                            if c["status"] == "baseline"), None))
        if expected is not None and expected != head:
            raise RepoStateError(f"branch {ws.branch} is at {head[:12]} but the ledger's last kept "
                                 f"commit is {expected[:12]}; it was moved outside autoloop")
        self._journal_start(head)
        # `resuming autoloop/TAG from <commit>`, and a warning when the checkout's HEAD has moved
        # on from where the run started: those commits are not in the run
        # after a kill -9 (or a lost terminal) say what the last run left unfinished: it is gone
        undone = "" if not rolled_back else \
            f" (cycle{'s' if len(rolled_back) > 1 else ''} {', '.join(map(str, rolled_back))} " \
            "unfinished when the last run stopped: rolled back)"
        self.opt.report("resume", {"branch": ws.branch, "commit": head,
                                   "text": f"resuming {ws.branch} from {head[:12]}{undone}"})
        started = next((c.get("commit") for c in j.cycles() if c["status"] == "baseline"), None)
        now = ws.head()
        if started and now not in (started, head):
            self.opt.report("warning", {"cycle": 0, "message": (
                f"your HEAD ({now[:12]}) has moved on since run '{self.opt.tag}' started at "
                f"{started[:12]}: the run goes on from {ws.branch} without your newer commits "
                f"(use a new --tag to start from HEAD)")})
        return head

    def _start_afresh(self, head: str | None) -> str:
        """No cycle was ever measured under this tag: start from HEAD, whatever an earlier attempt
        started from (the user may have committed the fix its baseline needed)."""
        ws, j = self.ws, self.journal
        if head is not None:
            if head not in [r.get("incumbent") for r in j.records if r["t"] == "start"]:
                raise RepoStateError(f"branch {ws.branch} is at {head[:12]}, where no attempt of this run "
                                     "started, and no cycle was ever measured: it was moved outside "
                                     "autoloop; delete it or use another --tag")
            ws.delete_branch(head)   # an earlier autoloop made it before its baseline failed
        ws.cycle_refs.remove_all()   # an earlier run's of this tag, whose ledger is gone
        for pending in j.unfinished():
            j.append({"t": "abort", "cycle": pending["cycle"],
                      "reason": "unfinished when autoloop stopped; rolled back"})
        previous, start = j.first_start(), ws.head()
        self._journal_start(start)
        if previous is not None:
            self.opt.report("note", {"cycle": 0, "message": (
                f"run '{self.opt.tag}' has no measured baseline yet: starting afresh from HEAD "
                f"{start[:12]}")})
        base = self.program.path.parent.relative_to(self.program.repo_root).as_posix()
        prefix = "" if base == "." else base + "/"
        ws.exclude_in_checkout([prefix + "experiments.md", prefix + "results.tsv", prefix + ".autoloop/"])
        self.state.incumbent = start
        return start

    def _journal_start(self, incumbent: str) -> None:   # one per invocation; the first marks the branch ours
        rec = {"t": "start", "tag": self.opt.tag, "program": self.program.rel_path,
               "verifier": verifier_fingerprint(self.program), "incumbent": incumbent,
               "worktree": str(self.ws.path), "sandbox": "none" if self.guard.sandbox is None else "bwrap"}
        if self.guard.unsandboxed:
            rec["unsandboxed"] = self.guard.unsandboxed
        if self.state.executor.description:
            rec["verifying"] = self.state.executor.description
        self.journal.append(rec)

    def _incumbent_from(self, records: list[Record]) -> str | None:
        """The incumbent and its numbers by the ledger: the last keep, or where the last undo of a
        refuted best took the branch."""
        s = self.state
        commit = s.baseline = s.best = None
        for c in records:
            if c["t"] == "final" and c.get("undo"):
                commit, s.best = c["undo"]["to"], c["undo"]["best"]
            elif c["t"] != "cycle":
                continue
            elif c["status"] == "baseline":
                commit, s.baseline, s.best = c.get("commit"), c.get("metric"), c.get("metric")
            elif c["status"] == "keep":
                commit, s.best = c.get("commit"), c.get("metric")
        s.incumbent = commit or ""
        return commit

    def _baseline(self, incumbent: str) -> None:
        state = self.state
        self.opt.report("phase", {"cycle": 0, "phase": "baseline"})
        t0 = time.monotonic()
        log_dir = state.log_dir(0)
        self.journal.append({"t": "begin", "cycle": 0, "parent": incumbent})

        def calibrate() -> Any:   # the starting commit measured, twice at least (the noise calibration)
            b = state.judge.baseline(incumbent, log_dir, self.env(0))
            state.check_signal()
            return b

        try:
            b = checked(state, calibrate)
        except Tampered as exc:
            self.journal.append({"t": "abort", "cycle": 0, "reason": f"baseline: {exc}"[:300]})
            self.ws.reset_hard(incumbent)
            raise RunFailure(f"the baseline measurement is not trustworthy: {exc}") from None
        except BaseException as exc:
            abort(state, incumbent, [Cycle(0, 0, self.ws, marker=self.marker)], exc)
            raise
        m = b.measurement
        problem = None
        if m is not None and not m.guards_ok:
            g = m.failed_guard
            assert g is not None
            problem = f"guard '{g.name}' fails on the starting commit: {g.detail}\n{_tail(g.log_stem)}"
        elif b.problem is not None or b.metric is None:
            problem = (f"{b.problem or 'the baseline could not be measured'}\n"
                       f"verifier output (tail):\n{_tail(m.log_stem if m else None)}")
        if problem:
            self.journal.append({"t": "abort", "cycle": 0, "reason": problem.splitlines()[0]})
            raise RunFailure(problem)
        name, metric = self.program.verifier.label, b.metric
        if m is not None and any(g.tests for g in m.guards):
            # what a candidate's guards must still pass, kept in the ledger for a resumed run
            b.stats["guard_tests"] = {g.name: g.tests.as_dict() for g in m.guards if g.tests}
        rec = {"t": "cycle", "cycle": 0, "status": "baseline", "metric": metric, "best": metric,
               "commit": incumbent, "parent": incumbent, "hypothesis": "baseline: the starting commit, unchanged",
               "result": f"{name} = {fmt(metric)} (commit {incumbent[:12]})",
               "lesson": f"baseline: {name} = {fmt(metric)}", "changed": [],
               "duration_s": round(time.monotonic() - t0, 3), "gen": {}, "gen_meta": {}, "delta_pct": None,
               "stats": b.stats}
        if self.ws.branch_head() is None:
            # the branch exists only once its baseline is measured: a tag whose baseline failed
            # starts afresh from HEAD next time (_start_afresh)
            self.ws.create_branch(incumbent)
        self.journal.append(rec)
        self.journal.render(self.program.goal)
        state.incumbent, state.baseline, state.best = incumbent, metric, metric
        self.opt.report("cycle", rec)
        if b.warning:
            self.opt.report("warning", {"cycle": 0, "message": b.warning})
        if b.note:
            self.opt.report("note", {"cycle": 0, "message": b.note})
        cost = run_parts_text(rec)
        if cost:
            self.opt.report("note", {"cycle": 0, "message": cost})

    def _record_reads(self, incumbent: str, log_dir: Path, started: float) -> None:
        """Once a run, before cycle 1: which files of the tree the guards and the verifier read
        (autoloop.engine.reads), in the ledger, and what that says, as warnings. Not where it would take
        more than a tenth of what is left of a time budget: cycles are what a budget is for."""
        state = self.state
        need = 1.5 * (self.per_run_s() or 0.0) + 0.5   # strace's share, the probe
        stop = self.program.stop.max_minutes
        left = [x for x in (self.opt.time_left(), None if stop is None else
                            stop * 60 - (time.monotonic() - started)) if x is not None]
        if left and need > min(left) / 10:
            note = (f"which files the measurements read was not recorded: it takes about "
                    f"{need:.0f} s, more than a tenth of the {min(left):.0f} s left of the time budget "
                    "(`autoloop doctor` records it)")
            self.journal.append({"t": "reads", "cycle": 0, "how": "", "steps": {}, "note": note, "warnings": []})
            self.opt.report("note", {"cycle": 0, "message": note})
            return
        lane = state.executor.lane(0)
        got = checked(state, lambda: lane.record_reads(self.program, incumbent, env=self.env(0),
                                                       log_dir=log_dir, marker=self.marker))
        said = reads.warnings(self.program, got, self.guard.protected)
        self.journal.append({"t": "reads", "cycle": 0, **got.as_dict(), "warnings": said})
        self.journal.render(self.program.goal)
        for line in said:
            self.opt.report("warning", {"cycle": 0, "message": line})

    def per_run_s(self) -> float | None:
        """The baseline's seconds a run (its guards spread over its runs); None: no baseline."""
        base = next((c for c in self.journal.cycles() if c["status"] == "baseline"), None)
        if base is None or not base.get("duration_s"):
            return None
        return float(base["duration_s"]) / max(1, verifier_runs(base))

    def _stop_reason(self, ran: int, started: float) -> str:
        self.state.check_signal()
        self.guard.raise_if_fatal()
        stop, best = self.program.stop, self.state.best
        if self.state.finished:
            return f"generator finished: {self.state.finished}"
        extra = self.opt.stop_check()
        if extra:
            return extra
        max_cycles = self.opt.cycles if self.opt.cycles is not None else stop.max_cycles
        if max_cycles is not None and ran >= max_cycles:
            return f"max_cycles reached ({max_cycles} cycle{'' if max_cycles == 1 else 's'})"
        if stop.max_minutes is not None and (time.monotonic() - started) / 60 >= stop.max_minutes:
            return f"max_minutes reached ({stop.max_minutes:g} min)"
        if reached(self.program.verifier.direction, best, stop.target):
            return f"target reached ({fmt(best)} vs target {fmt(stop.target)})"
        cycles = [c for c in self.journal.cycles() if c["cycle"] > 0]
        if stop.patience is not None:
            streak = next((i for i, c in enumerate(reversed(cycles)) if c["status"] == "keep"), len(cycles))
            if streak >= stop.patience and ran == 0:
                # a resumed tag whose patience was spent earlier: this run can do nothing
                where = f"{self.program.path.name}:{self.program.line('stop.patience')}"
                return (f"patience exhausted ({streak} cycles without a keep) before this run "
                        f"started: to go on, raise stop.patience ({stop.patience}, {where}), or "
                        "start afresh with a new --tag")
            if streak >= stop.patience:
                return f"patience exhausted ({plural(streak, 'cycle')} without a keep)"
        if stop.max_cost_usd is not None:
            costs = [c.get("gen", {}).get("cost_usd") or 0.0 for c in cycles]
            spent, next_cost = sum(costs), max(costs[-10:], default=0.0)
            if spent + next_cost > stop.max_cost_usd:
                return f"max_cost_usd reached (${spent:.2f} spent, next cycle could cost ${next_cost:.2f})"
        return ""

    def _backoff(self, rec: Record) -> None:
        """After consecutive generator errors (rate limits), wait 1, 2, 4 ... 60 s instead of
        hammering; Ctrl-C still stops at once."""
        cycles = self.journal.cycles()
        streak = next((i for i, c in enumerate(reversed(cycles)) if c["status"] != "gen_error"), len(cycles))
        if streak < 2:
            return
        delay = min(BACKOFF_MAX_S, 2.0 ** (streak - 2))
        self.opt.report("phase", {"cycle": rec["cycle"], "phase": f"backoff {delay:g}s"})
        until = time.monotonic() + delay
        while time.monotonic() < until:
            self.state.check_signal()
            time.sleep(max(0.0, min(0.1, until - time.monotonic())))

    def _on_signal(self, signum: int, _frame: Any) -> None:
        s = self.state
        s.signal = signum
        running.stop_current()
        # Only our code that may block long without looking (an in-process generator, the approve
        # prompt) is interrupted at once, else at the next safe point. A second Ctrl-C changes
        # nothing: raising in the middle of a restore would leave the generator's edits behind.
        if s.in_python and not s.restoring:
            s.in_python = False  # once: the way out is not interrupted again
            raise Interrupted("interrupted")


def _tail(stem: Path | None) -> str:
    if stem is None:
        return ""
    parts = []
    for ext, label in ((".out", "stdout"), (".err", "stderr")):
        lines = logfile.read_tail(stem.with_name(stem.name + ext), 4000).splitlines()[-TAIL_LINES:]
        if lines:
            parts.append(f"  {label}: " + f"\n  {label}: ".join(lines))
    return "\n".join(parts) or "  (no output)"
