"""The ratchet loop: baseline, then cycles of prepare → generate → scope → verify → decide →
record, with stop conditions, a lock, signals and resume. `Run.cycle` reads top to bottom."""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import signal
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, TypeVar

from filelock import FileLock, Timeout

from autoloop import envs, proc, trust
from autoloop.errors import (ConfigError, FatalGeneratorError, GeneratorError, Interrupted, LockedError,
                             RepoStateError, RunFailure, UsageError)
from autoloop.generators.base import GenContext, Generator, Proposal, preflight_context
from autoloop.generators.registry import make_generator
from autoloop.globs import PathRules
from autoloop.hardening import Guardrails, Tampered
from autoloop.journal import Journal, Record, escape_controls, pct, quote_path
from autoloop.numbers import formatter, num as fmt, signed_pct
from autoloop.judge import Judge, final_estimate, final_text, needs_scipy
from autoloop.memory import near_duplicate
from autoloop.program import Program
from autoloop.prompt import build_prompt
from autoloop.ratchet import better, reached
from autoloop.redact import Redactor
from autoloop.scope_rules import ScopeRules, library_shadow
from autoloop.snapshot import Change, diff
from autoloop.summary import best_measured
from autoloop.approve import Review, Reviewer, human_outcome
from autoloop.persist import restore_persisted_journal
from autoloop.verify import Measurement, measure
from autoloop.gitrun import thaw_outer_config
from autoloop.workspace import Workspace, Worktree

Reporter = Callable[[str, Mapping[str, Any]], None]
T = TypeVar("T")
BACKOFF_MAX_S = 60.0


@dataclass
class RunOptions:
    tag: str
    cycles: int | None = None            # overrides stop.max_cycles for this invocation
    report: Reporter = field(default=lambda event, data: None)
    # hooks for the people-and-CI features (autoloop.approve, autoloop.ci); all optional
    reviewer: Reviewer | None = None     # a person decides (before verify and/or at decide)
    stop_check: Callable[[], str] = field(default=lambda: "")  # extra stop reason ("" = go on)
    on_finish: Callable[[Run], None] | None = None  # under the lock, once attached, however it ends
    # seconds left of this invocation's wall-clock budget (None: no budget); the end-of-run
    # check is skipped, and says so, when it would not fit
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
    final: dict[str, Any] | None = None     # the end-of-run re-measurement (judge.final_check)


@dataclass
class _Outcome:
    status: str
    lesson: str
    result: str
    metric: float | None = None
    changed: list[str] = field(default_factory=list)
    measurement: Measurement | None = None
    tree: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)   # judge's fields for the cycle record
    diffstat: str | None = None
    decided_by: str = "ratchet"          # or "human" (approve mode)
    recommendation: str | None = None    # the ratchet's status when a person overruled or confirmed it
    measured: str | None = None          # the candidate commit that was measured


def command_files(program: Program) -> list[tuple[str, str]]:
    """(key, repo-relative path) of each file of the checkout that the verifier, a guard or the
    holdout names on its command line (`python prepare.py --eval` names prepare.py; `python -m
    evaluate` names evaluate.py or evaluate/__main__.py)."""
    out: list[tuple[str, str]] = []
    root = program.repo_root.resolve()
    commands = [("verifier.command", program.verifier.command)]
    commands += [(f"guards[{i}]", g.command) for i, g in enumerate(program.guards)]
    if program.holdout is not None:
        commands.append(("holdout.command", program.holdout.command))
    for key, cmd in commands:
        words = all_words(cmd)
        for prev, w in zip(["", *words], words):
            candidate = program.repo_root / w
            if prev == "-m":
                base = program.repo_root / w.replace(".", "/")
                for c in (base.with_name(base.name + ".py"), base / "__main__.py", base / "__init__.py"):
                    if c.is_file():
                        candidate = c
                        break
            if w.startswith("-") or not candidate.is_file():
                continue
            try:
                rel = candidate.resolve().relative_to(root).as_posix()
            except ValueError:
                continue  # outside the repository: not the generator's to reach through the tree
            out.append((key, rel))
    return out


def protected_paths(program: Program) -> dict[str, str]:
    """Paths the generator may never change even when `allowed` matches them: the program and
    the run's own files (Program.protected), plus files of the repository that the verifier or
    a guard names on its command line (`python prepare.py --eval` protects prepare.py).

    A judge the generator may rewrite is no judge: a program whose verifier or guard names a file
    that `allowed` gives the generator is refused (ConfigError) rather than run to no effect."""
    out = dict(program.protected)
    editable = PathRules(program.allowed, program.forbidden)
    for key, rel in command_files(program):
        if editable.allows(rel):
            line = program.lines.get(key) or program.lines.get(key.split("[")[0], 1)
            raise ConfigError(
                f"{program.path.name}:{line}: {key} runs {rel}, which 'allowed' lets the "
                f"generator change, so it could rewrite its own judge; keep the measurement in "
                f"a file the generator cannot edit (e.g. prepare.py) and allow only what it tunes")
        out.setdefault(rel, "used by the verifier")
    return out


def uncommitted_warnings(program: Program, ws: Workspace, commit: str) -> list[str]:
    """One line per file the measurement commands name that the checkout has but `commit` (what
    is measured) has not as it is: untracked, ignored or modified files are not measured."""
    named = command_files(program)
    state = ws.uncommitted([rel for _, rel in named])
    out = []
    for key, rel in named:
        how = state.get(rel)
        if how is None:
            continue
        what = {"untracked": "is untracked", "ignored": "is ignored by git",
                "modified": "has uncommitted changes"}[how]
        measured = "does not have it" if how != "modified" else "has another version"
        out.append(f"{rel} (named by {key}) {what} in your checkout; measurements use the committed "
                   f"files of {commit[:12]}, which {measured} — commit it first")
    return out


_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "busybox"})
_SHELL_C = re.compile(r"-[a-zA-Z]*c[a-zA-Z]*")   # -c, -lc, -ec, -exc ...


def all_words(command: str, depth: int = 4) -> list[str]:
    """The words of a command line and, recursively, of the command string a shell is given
    (`bash -c '… score.py'`, `sh -lc "cd x && python eval.py"`), with shell operators split off
    and `--opt=value` values included: a path named anywhere in it is a path it may run. Code
    given to an interpreter (`python -c "…"`) is not a command line and is not split."""
    try:
        lex = shlex.shlex(command, posix=True, punctuation_chars=True)
        lex.whitespace_split = True
        words = list(lex)
    except ValueError:
        words = command.split()
    out: list[str] = []
    shell = False
    for i, w in enumerate(words):
        out.append(w)
        if w.startswith("-") and "=" in w:
            out.append(w.split("=", 1)[1])
        if set(w) <= set(";|&()<>"):
            shell = False          # the next command starts
        elif os.path.basename(w) in _SHELLS or w == "eval":
            shell = True
            if w == "eval" and depth > 0:
                out += all_words(" ".join(words[i + 1:]), depth - 1)
        elif shell and depth > 0 and i > 0 and _SHELL_C.fullmatch(words[i - 1]):
            out += all_words(w, depth - 1)
    return out


def verifier_fingerprint(program: Program) -> dict[str, Any]:
    v = program.verifier
    return {"command": v.command, "metric": v.metric, "pattern": v.pattern, "direction": v.direction}


class Run:
    def __init__(self, program: Program, options: RunOptions,
                 generator_factory: Callable[..., Generator] = make_generator) -> None:
        self.program = program
        self.opt = options
        self.ws = Workspace(program.repo_root, options.tag)
        self.journal = Journal(program.state_dir, options.tag)
        protected = protected_paths(program)
        self.rules = ScopeRules(program.allowed, program.forbidden, protected)
        # where Python puts a measurement script's own folder first on sys.path (and the top,
        # for `python -m` and scripts there): a new module named like a library one is a shadow
        self._script_dirs = sorted({""} | {rel.rpartition("/")[0] for rel, why in protected.items()
                                           if why == "used by the verifier" and rel.endswith(".py")})
        self.guard = Guardrails(program, self.ws, self.journal, protected)
        self.generator_factory = generator_factory
        self.redact = Redactor.from_env(os.environ)
        self._signal: int | None = None
        self._in_python_generator = False
        self._restoring = False   # a further Ctrl-C must not cut the restore short
        self._finished: str | None = None
        self._exact: tuple[str, dict] | None = None   # (commit, snapshot) the tree was proven equal to
        # Fixed per repository and tag, so a resumed run can find and kill what a killed run
        # left behind (the lock guarantees no live run of this tag owns such processes).
        self.marker = hashlib.sha256(f"{self.ws.common_dir}\0{options.tag}".encode()).hexdigest()[:32]
        self.judge = Judge(program, self.ws, self.marker, self._check_signal, self.guard)

    # ---- entry ---------------------------------------------------------------------------------

    def execute(self) -> RunSummary:
        # before any generator exists: a same-uid debugger must not attach to the judge
        trust.undumpable()
        self.ws.check_state()
        self.guard.preflight()
        generator = self.generator_factory(self.program.generator, self.program)
        # Beside the worktree, outside the repository: a refused run leaves no trace in it.
        lock_path = self.ws.path.with_name(self.ws.path.name + ".lock")
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(lock_path), timeout=0)
        try:
            lock.acquire()
        except Timeout:
            raise LockedError(f"another autoloop run holds tag '{self.opt.tag}' in this repository "
                              f"(lock {lock_path}); wait for it or use another --tag") from None
        old_handlers = self._install_signals()
        self._attached = False
        self._lock_path = lock_path
        try:
            # under the lock: a run refused for the lock must not start (or kill) anything
            self.preflight_generator(generator)
            return self._run(generator)
        finally:
            try:
                if self._attached and self.opt.on_finish is not None:
                    self.opt.on_finish(self)
            finally:
                thaw_outer_config()
                self._restore_signals(old_handlers)
                lock.release()

    def preflight_generator(self, generator: Generator) -> str | None:
        """Before the baseline: a generator that cannot start (not installed, not startable in
        the sandbox) stops the run now (FatalGeneratorError, exit 1), not as a gen_error every
        cycle. Returns the version it reported, if any."""
        check = getattr(generator, "preflight", None)
        if check is None:
            return None
        # Its own process marker: what the check leaves running is killed, and nothing else.
        marker = proc.new_marker()
        with tempfile.TemporaryDirectory(prefix="autoloop-preflight-") as tmp:
            scratch = Path(tmp)
            ctx = preflight_context(self.program, scratch, env=envs.generator_env(self._env(0)),
                                    run_marker=marker, wrap=self.guard.wrap(scratch, workdir=scratch))
            try:
                return check(ctx)
            finally:
                proc.kill_marked(marker)

    def _run(self, generator: Generator) -> RunSummary:
        proc.kill_marked(self.marker)
        self.ws.clear_stale_locks()
        incumbent = self._attach()
        self._attached = True
        for line in uncommitted_warnings(self.program, self.ws, incumbent):
            self.opt.report("warning", {"cycle": 0, "message": line})
        started = time.monotonic()
        self.ws.open(incumbent)
        self.ws.drop_verify_trees(*self._verify_slots())
        self.ws.freeze_config()
        self.sentinel = self.ws.watch_git(extra=[self.program.path, *self.guard.user_files()])
        self.guard.start(self.sentinel, self._lock_path)
        self.journal.render(self.program.goal)
        if self.guard.unsandboxed:
            # once, loudly: the journal's head and `autoloop log` / the report say it too
            self.opt.report("warning", {"message": f"not sandboxed: {self.guard.unsandboxed}; these "
                                                   "attacks are only detected, see README (Not covered)"})
        # what autoloop imports later is loaded now, before any generator could have planted
        # or patched it (numpy/scipy only when this run computes statistics)
        trust.preload(statistics=needs_scipy(self.program, self.journal.cycles()),
                      generator_kind=self.program.generator.kind)
        if not self.journal.cycles():
            self._baseline(incumbent)
            # a fresh run learns at cycle 0 whether its verifier is deterministic; still before
            # the first generator, load the statistics if the run now turns out to need them
            trust.preload(statistics=needs_scipy(self.program, self.journal.cycles()),
                          generator_kind=self.program.generator.kind)
        ran = 0
        reason = ""
        try:
            while True:
                self._check_signal()
                self.guard.raise_if_fatal()
                reason = self._stop_reason(ran, started)
                if reason:
                    break
                recs = self._step(generator, ran)
                ran += len(recs)
                self._backoff(recs[-1])
            final = self._final_check()
        except Interrupted:
            self._restoring = True  # from here on only the way out: a further Ctrl-C waits
            self.journal.append({"t": "end", "reason": "interrupted", "cycles_run": ran})
            raise
        self.ws.reset_hard(self.incumbent)
        self.journal.append({"t": "end", "reason": reason, "cycles_run": ran})
        self.opt.report("stop", {"reason": reason})
        cycles = self.journal.cycles()
        # "best" is the best measured: never a regression a person chose to keep (approve mode)
        best = best_measured(cycles, self.program.verifier.direction, self.best)
        return RunSummary(self.opt.tag, reason, ran, self.baseline, best, self.incumbent,
                          sum(1 for c in cycles if c["status"] == "keep"), final)

    def _verify_slots(self) -> tuple[set[int], int]:
        """The verification slots this run's cycles measure in (autoloop.parallel: its lanes'),
        and how many slots there may be."""
        return ({0} if self.judge.plain else {0, 1}), 4

    # ---- attaching to the branch and the ledger ------------------------------------------------

    def _attach(self) -> str:
        """Find the run branch (or start afresh from HEAD); roll back a cycle a crash cut short.
        Returns the incumbent."""
        ws, j = self.ws, self.journal
        restore_persisted_journal(ws, j, self.program)  # a CI run's journal commit, if the head is one
        j.load()
        head = ws.branch_head()
        if not j.cycles():
            return self._start_afresh(head)
        if head is None:
            raise RepoStateError(f"branch {ws.branch} is gone but {j.ledger} records a run; "
                                 "restore the branch or use another --tag")
        first = j.first_start()
        if first is None:
            raise RepoStateError(f"branch {ws.branch} exists but was not made by autoloop "
                                 f"(no ledger at {j.ledger}); use another --tag or delete the branch")
        measured_with = self._baseline_verifier()
        if measured_with is not None and measured_with != verifier_fingerprint(self.program):
            raise UsageError(f"{self.program.path.name}: the verifier changed since run '{self.opt.tag}' "
                             "began, so its metrics are not comparable; start a new --tag")
        for pending in j.unfinished():  # several after a parallel round (autoloop.parallel)
            parent = pending["parent"]
            if head != parent:
                intent = j.intent_for(pending["cycle"])
                if intent is None or intent.get("commit") != head:
                    raise RepoStateError(f"branch {ws.branch} moved outside autoloop "
                                         f"(expected {parent[:12]}, found {head[:12]})")
                ws.rewind(parent, head)
                head = parent
            j.append({"t": "abort", "cycle": pending["cycle"],
                      "reason": "unfinished when autoloop stopped; rolled back"})
        cycles = j.cycles()
        expected = self._incumbent_from(cycles)
        if expected is not None and expected != head:
            raise RepoStateError(f"branch {ws.branch} is at {head[:12]} but the ledger's last kept "
                                 f"commit is {expected[:12]}; it was moved outside autoloop")
        self._journal_start(head)
        self._report_resume(head)
        return head

    def _start_afresh(self, head: str | None) -> str:
        """No cycle was ever measured under this tag (a first run, or a baseline that failed or
        was cut short): start from the checkout's HEAD, whatever an earlier attempt started
        from — the user may have committed the very fix the baseline needed. The branch itself
        is made only once the baseline has been measured (_baseline)."""
        ws, j = self.ws, self.journal
        if head is not None:
            starts = [r.get("incumbent") for r in j.records if r["t"] == "start"]
            if not starts:
                raise RepoStateError(f"branch {ws.branch} exists but was not made by autoloop "
                                     f"(no ledger at {j.ledger}); use another --tag or delete the branch")
            if head not in starts:
                raise RepoStateError(f"branch {ws.branch} is at {head[:12]}, where no attempt of this run "
                                     "started, and no cycle was ever measured: it was moved outside "
                                     "autoloop; delete it or use another --tag")
            ws.delete_branch(head)   # an earlier autoloop made it before its baseline failed
        for pending in j.unfinished():
            j.append({"t": "abort", "cycle": pending["cycle"],
                      "reason": "unfinished when autoloop stopped; rolled back"})
        previous = j.first_start()
        start = ws.head()
        self._journal_start(start)
        if previous is not None:
            self.opt.report("note", {"cycle": 0, "message": (
                f"run '{self.opt.tag}' has no measured baseline yet: starting afresh from HEAD "
                f"{start[:12]}")})
        base = self.program.path.parent.relative_to(self.program.repo_root).as_posix()
        prefix = "" if base == "." else base + "/"
        ws.exclude_in_checkout([prefix + "experiments.md", prefix + "results.tsv", prefix + ".autoloop/"])
        self._set_incumbent(start, None, None)
        return start

    def _report_resume(self, incumbent: str) -> None:
        """`resuming autoloop/TAG from <commit>`, and a warning when the checkout's HEAD has
        moved on from where the run started: those commits are not in the run."""
        self.opt.report("resume", {"branch": self.ws.branch, "commit": incumbent,
                                   "text": f"resuming {self.ws.branch} from {incumbent[:12]}"})
        started = next((c.get("commit") for c in self.journal.cycles() if c["status"] == "baseline"), None)
        head = self.ws.head()
        if started and head not in (started, incumbent):
            self.opt.report("warning", {"cycle": 0, "message": (
                f"your HEAD ({head[:12]}) has moved on since run '{self.opt.tag}' started at "
                f"{started[:12]}: the run goes on from {self.ws.branch} without your newer commits "
                f"(use a new --tag to start from HEAD)")})

    def _baseline_verifier(self) -> dict[str, Any] | None:
        """The verifier the baseline was measured with (None before there is a baseline): a run
        whose baseline failed may fix its verifier and go on under the same tag."""
        fingerprint = None
        for r in self.journal.records:
            if r["t"] == "start":
                fingerprint = r.get("verifier")
            elif r["t"] == "cycle":
                return fingerprint
        return None

    def _journal_start(self, incumbent: str) -> None:
        """One `start` record per invocation; the first one marks the branch as ours."""
        rec = {"t": "start", "tag": self.opt.tag, "program": self.program.rel_path,
               "verifier": verifier_fingerprint(self.program), "incumbent": incumbent,
               "worktree": str(self.ws.path), "sandbox": "none" if self.guard.unsandboxed else "bwrap"}
        if self.guard.unsandboxed:
            rec["unsandboxed"] = self.guard.unsandboxed
        self.journal.append(rec)

    def _incumbent_from(self, cycles: list[Record]) -> str | None:
        commit = baseline = best = None
        for c in cycles:
            if c["status"] == "baseline":
                commit, baseline, best = c.get("commit"), c.get("metric"), c.get("metric")
            elif c["status"] == "keep":
                commit, best = c.get("commit"), c.get("metric")
        self.baseline, self.best = baseline, best
        self.incumbent = commit or ""
        return commit

    def _set_incumbent(self, commit: str, baseline: float | None, best: float | None) -> None:
        self.incumbent, self.baseline, self.best = commit, baseline, best

    # ---- cycle 0 -------------------------------------------------------------------------------

    def _baseline(self, incumbent: str) -> None:
        self.opt.report("phase", {"cycle": 0, "phase": "baseline"})
        t0 = time.monotonic()
        log_dir = self._log_dir(0)
        self.journal.append({"t": "begin", "cycle": 0, "parent": incumbent})
        try:
            # the starting commit measured (twice at least: the noise calibration), judge.py,
            # each run through the guardrails like every later measurement
            def calibrate() -> Any:
                b = self.judge.baseline(incumbent, log_dir, self._env(0))
                self._check_signal()
                return b

            b = self._checked(calibrate)
        except Tampered as exc:
            self.journal.append({"t": "abort", "cycle": 0, "reason": f"baseline: {exc}"[:300]})
            self.ws.reset_hard(incumbent)
            raise RunFailure(f"the baseline measurement is not trustworthy: {exc}") from None
        except BaseException as exc:
            self._abort(0, incumbent, None, "interrupted" if isinstance(exc, (Interrupted, KeyboardInterrupt))
                        else f"internal error: {type(exc).__name__}: {exc}")
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
        name = self.program.verifier.label
        metric = b.metric
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
        self._set_incumbent(incumbent, metric, metric)
        self.opt.report("cycle", rec)
        if b.warning:
            self.opt.report("warning", {"cycle": 0, "message": b.warning})
        if b.note:
            self.opt.report("note", {"cycle": 0, "message": b.note})

    # ---- one cycle -----------------------------------------------------------------------------

    def _step(self, generator: Generator, ran: int) -> list[Record]:
        """One step of the loop: a cycle here; a round of several in autoloop.parallel."""
        return [self.cycle(generator)]

    def cycle(self, generator: Generator) -> Record:
        n = self.journal.next_cycle()
        incumbent, best_before = self.incumbent, self.best
        t0 = time.monotonic()
        self.journal.append({"t": "begin", "cycle": n, "parent": incumbent})
        log_dir = self._log_dir(n)
        try:
            # 1 prepare: the tree is exactly the incumbent, ignored files included
            self.opt.report("phase", {"cycle": n, "phase": "prepare"})
            if self._exact is not None and self._exact[0] == incumbent:
                before = self._exact[1]  # restore() just proved the tree is exactly this
            else:
                self.ws.reset_hard(incumbent)
                before = self.ws.snapshot()
            self._exact = None
            self.sentinel.capture()
            self.ws.capture_refs()
            self.ws.capture_objects(incumbent, sorted(self.guard.protected))
            self.guard.before_generate()

            # 2 generate
            self.opt.report("phase", {"cycle": n, "phase": "generate"})
            proposal, gen_error = self._generate(generator, n, log_dir)
            # the hypothesis goes into the journal and a commit message: no secrets in it
            proposal.hypothesis = escape_controls(self.redact(proposal.hypothesis))
            self._check_signal()

            # 3 scope: what really changed on disk, against the rules
            self.opt.report("phase", {"cycle": n, "phase": "scope"})
            problems, changes = self._scope(incumbent, before)
            outcome = self._triage(proposal, gen_error, problems, changes)

            # 4 verify
            if outcome is None:
                tree = self.ws.candidate_tree(incumbent, changes)
                # a tree autoloop wrote itself took every unchanged entry from the incumbent's own
                # listing; one git wrote through an index is checked against git's object graph
                swapped = [] if self.ws.written_by_hand(incumbent, tree) else \
                    self.ws.differs_at(self.ws.tree_of(incumbent), tree, sorted(self.guard.protected))
                if swapped:
                    outcome = _Outcome("violation", "violation: the candidate's tree does not carry the "
                                       f"incumbent's {', '.join(swapped[:5])}", "violation: protected "
                                       "files differ in the candidate's tree", changed=swapped)
                elif tree == self.ws.tree_of(incumbent):
                    outcome = _Outcome("no_change", "no change: nothing git can record changed "
                                       "(e.g. only a mode git does not track)", "no change")
                else:
                    # the candidate is measured as a commit, in a pristine tree of its own: what
                    # is verified is exactly what would be kept (same tree hash)
                    candidate = self.ws.commit(tree, incumbent, f"autoloop candidate, cycle {n}",
                                               self.ws.identity())
                    files = [c.path for c in _file_changes(changes)]
                    stat = self.ws.diffstat_later(incumbent, candidate)  # read when recorded
                    outcome = self._review("before", n, proposal, incumbent, candidate, files, stat, None)
                    if outcome is None:
                        self.opt.report("phase", {"cycle": n, "phase": "verify"})
                        # 4 verify + 5 decide; in approve mode the ratchet only recommends
                        outcome = self._verify_and_decide(n, candidate, incumbent, best_before, log_dir, files)
                        outcome = self._review("after", n, proposal, incumbent, candidate, files, stat,
                                               outcome) or outcome
                    # what was measured (or shown to the person) is what a keep commits
                    outcome.tree, outcome.diffstat, outcome.measured = tree, stat(), candidate
        except BaseException as exc:
            reason = "interrupted" if isinstance(exc, (Interrupted, KeyboardInterrupt)) else \
                f"internal error: {type(exc).__name__}: {exc}"
            self._abort(n, incumbent, before if "before" in locals() else None, reason)
            raise

        # 6 record: commit or restore, then the ledger
        commit = None
        if outcome.status == "keep":
            assert outcome.tree is not None
            message = self._commit_message(n, proposal, outcome)
            commit = self.ws.commit(outcome.tree, incumbent, message, self.ws.identity())
            assert outcome.measured is not None
            self.guard.check_keep(commit, outcome.measured)  # the kept tree is the measured tree
            self.journal.append({"t": "intent", "cycle": n, "commit": commit, "parent": incumbent})
            self.ws.advance(commit, incumbent, f"autoloop: keep cycle {n}")
            self._set_incumbent(commit, self.baseline, outcome.metric)
            # the tree becomes exactly the kept commit (only the changed paths are touched)
            self._exact = (commit, self.ws.keep(commit, incumbent, before, changes))
        else:
            self.ws.restore_changes(incumbent, before, changes)
            self._exact = (incumbent, before)
        self._redact_logs(log_dir)
        repeat = near_duplicate(proposal.hypothesis, self.journal.cycles())
        if repeat is not None:
            outcome.result += f" (repeats foreclosed cycle {repeat['cycle']})"
        rec = self._cycle_record(n, proposal, outcome, commit=commit, incumbent=incumbent,
                                 best_before=best_before, t0=t0, log_dir=log_dir, repeat=repeat)
        rec = self.redact.obj(rec)  # lessons quote tool output, which may quote a key
        self.journal.append(rec)
        self.journal.render(self.program.goal)
        self.opt.report("cycle", rec)
        if proposal.finished:
            self._finished = proposal.no_change_reason or "the generator has nothing left to propose"
        return rec

    def _cycle_record(self, n: int, proposal: Proposal, outcome: _Outcome, *, commit: str | None,
                      incumbent: str, best_before: float | None, t0: float, log_dir: Path,
                      repeat: Record | None, more: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The ledger's `cycle` record (a parallel round adds its worker and round in `more`)."""
        p = proposal
        return {
            "t": "cycle", "cycle": n, "status": outcome.status, "metric": outcome.metric,
            "best": self.best, "commit": commit, "parent": incumbent,
            # lessons quote file names and tool output: no control character reaches a reader raw
            "hypothesis": escape_controls(p.hypothesis), "result": escape_controls(outcome.result),
            "lesson": escape_controls(outcome.lesson),
            "changed": outcome.changed, "duration_s": round(time.monotonic() - t0, 3),
            "delta_pct": _round(pct(best_before, outcome.metric)),
            "gen": {"tokens_in": p.tokens_in, "tokens_out": p.tokens_out,
                    "cost_usd": p.cost_usd, "turns": p.turns, "notes": p.notes},
            "gen_meta": p.meta,
            "repeat_of": None if repeat is None else repeat["cycle"],
            "diffstat": outcome.diffstat,
            "decided_by": outcome.decided_by,
            "recommendation": outcome.recommendation,
            "guards": [{"name": g.name, "ok": g.ok, "detail": g.detail}
                       for g in (outcome.measurement.guards if outcome.measurement else ())],
            "log_dir": str(log_dir),
            **(more or {}),
            **outcome.extra,
        }

    # ---- the steps -----------------------------------------------------------------------------

    def _generate(self, generator: Generator, n: int, log_dir: Path, tree: Worktree | None = None,
                  env: dict[str, str] | None = None, marker: str | None = None,
                  note: str = "") -> tuple[Proposal, str | None]:
        """Step 2 in `tree` (this run's own by default; a parallel worker passes its tree, its
        environment and its process marker)."""
        tree = tree or self.ws
        marker = marker or self.marker
        history = self.journal.cycles()
        prompt = build_prompt(self.program, cycle=n, best=self.best, baseline=self.baseline,
                              history=history, workdir_note=note)
        prompt_file = log_dir / "prompt.md"
        prompt_file.write_text(self.redact(prompt), errors="surrogateescape")
        hyp_file = log_dir / "hypothesis.txt"
        hyp_file.unlink(missing_ok=True)
        ctx = GenContext(program=self.program, cycle=n, workdir=tree.path, prompt=prompt,
                         prompt_file=prompt_file, hypothesis_file=hyp_file, log_dir=log_dir,
                         best=self.best, baseline=self.baseline, history=history,
                         is_allowed=self.rules.allows,
                         env=envs.generator_env(env if env is not None else self._env(n)),
                         timeout=self.program.generator.timeout, run_marker=marker,
                         wrap=self.guard.wrap(log_dir, workdir=tree.path), limits=self.guard.limits)
        self._in_python_generator = True
        try:
            if self._signal is not None:
                raise Interrupted("interrupted")
            return generator.propose(ctx), None
        except GeneratorError as exc:
            # a failed agent run may still report what it cost (AgentReportError.proposal)
            return getattr(exc, "proposal", None) or Proposal(), str(exc) or type(exc).__name__
        except FatalGeneratorError:
            raise
        finally:
            self._in_python_generator = False
            # anything the generator left running (even detached) dies before we look at the disk
            proc.kill_marked(marker)

    def _scope(self, incumbent: str, before: dict, tree: Worktree | None = None) -> tuple[list[str], list[Change]]:
        """Undo and report anything outside the tree the generator touched; return the tree's
        change set and the list of violations in it. `tree`: a parallel worker's (default ours)."""
        tree = tree or self.ws
        problems: list[str] = []
        for name in self.sentinel.changed():
            problems.append(f"changed {name} (git's or autoloop's own file)")
        if problems:
            self.sentinel.restore()
        if tree.dotgit_tampered():
            problems.append("changed the worktree's .git link")
            tree.restore_dotgit()
        if self.journal.tampered():
            problems.append("changed the ledger")
            self.journal.repair()
        if not self.journal.rendered_ok(self.program.goal):
            problems.append("changed experiments.md or results.tsv")
            self.journal.render(self.program.goal)
        head = self.ws.branch_head()
        if head != incumbent:
            problems.append(f"moved the run branch {self.ws.branch}")
            if head is None:
                self.ws.create_branch(incumbent)
            else:
                self.ws.advance(incumbent, head, "autoloop: undo a move by the generator")
        # refs/replace would swap objects in other tools' reads, a moved branch or tag rewrites
        # your history: any ref the generator made or moved is put back
        problems += [f"{what} (refs are not the generator's to change)" for what in self.ws.refs_changed()]
        problems += self.ws.objects_changed()
        hidden = tree.index_flags()
        if hidden:
            problems.append("hid files from git (assume-unchanged/skip-worktree): " + ", ".join(hidden[:5]))
        changes = diff(before, tree.snapshot())
        problems += self.guard.after_generate(changes)
        for ch in _file_changes(changes):
            a = ch.after
            if a is not None and a.kind == "l":
                problems.append(f"symlink {quote_path(ch.path)} -> {quote_path(str(a.digest))} (symlinks are not allowed)")
            elif a is not None and a.kind == "o":
                problems.append(f"special file {quote_path(ch.path)}")
            elif a is not None and a.kind == "f" and a.nlink > 1:
                problems.append(f"hard link {quote_path(ch.path)} (links are not allowed)")
            else:
                why = self.rules.why_not(ch.path)
                shadowed = library_shadow(ch.path, self._script_dirs) if ch.before is None and not why else None
                if shadowed:
                    why = (f"shadows the module '{shadowed}' that a verifier or guard script beside it "
                           "would import")
                if why:
                    problems.append(f"changed {quote_path(ch.path)} ({why})")
        return problems, changes

    def _triage(self, proposal: Proposal, gen_error: str | None, problems: list[str],
                changes: list[Change]) -> _Outcome | None:
        files = [c.path for c in _file_changes(changes)]
        if problems:
            return _Outcome("violation", "violation: " + "; ".join(problems[:5]),
                            "violation: " + "; ".join(problems[:5]), changed=files)
        if gen_error is not None:
            return _Outcome("gen_error", f"generator error: {gen_error}", f"gen_error: {gen_error}",
                            changed=files)
        if not files:
            lesson = proposal.no_change_reason or "no change: the generator left the tree as it was"
            if proposal.notes:
                # what the agent said went wrong (failed edits, denied tools) is the lesson
                lesson += " (it reported: " + "; ".join(proposal.notes[:5]) + ")"
            return _Outcome("no_change", lesson, "no change")
        return None

    def _decide(self, m: Measurement, changed: list[str]) -> _Outcome:
        v = self.program.verifier
        name = v.label
        if not m.guards_ok:
            g = m.failed_guard
            assert g is not None
            return _Outcome("guard_fail", f"guard '{g.name}' failed: {g.detail}",
                            f"guard_fail: {g.name}: {g.detail}", changed=changed, measurement=m)
        if m.metric is None:
            return _Outcome("crash", f"crash: {m.error}", f"crash: {m.error}", changed=changed, measurement=m)
        best = self.best
        assert best is not None
        fmt = formatter([best, m.metric])   # two values that differ must print differently
        if better(v.direction, m.metric, best):
            d = pct(best, m.metric)
            gain = f" ({signed_pct(d)})" if d is not None else ""
            return _Outcome("keep", f"kept: {name} {fmt(best)} → {fmt(m.metric)}{gain}",
                            f"keep: {name} {fmt(best)} → {fmt(m.metric)}{gain}",
                            metric=m.metric, changed=changed, measurement=m)
        verdict = f"{fmt(m.metric)} ties best {fmt(best)}" if m.metric == best \
            else f"{fmt(m.metric)} is worse than best {fmt(best)}"
        return _Outcome("discard", f"discarded: {verdict}", f"discard: {name} {verdict}",
                        metric=m.metric, changed=changed, measurement=m)

    def _verify_and_decide(self, n: int, candidate: str, incumbent: str, best_before: float | None,
                           log_dir: Path, files: list[str]) -> _Outcome:
        """Steps 4 and 5. Every measurement runs through the guardrails (hardening.py): in a
        pristine tree proven to hold exactly the commit, a scrubbed environment, re-checked after
        each guard and the verifier; anything that tampers makes the cycle a violation."""
        def judged() -> _Outcome:
            if self.judge.plain:
                # one measurement of the candidate against the stored incumbent (contract §5)
                vtree = self.ws.verify_tree(0)
                vtree.checkout(candidate, clean=False)   # measuring() cleans it
                with self.guard.measuring(vtree, candidate, self._env(n)) as env:
                    m = measure(self.program, cwd=vtree.path, env=env, log_dir=log_dir,
                                marker=self.marker, after_step=self.guard.after_step,
                                box=self.guard.confine(vtree.path, env))
                self._check_signal()
                return self._decide(m, files)
            # noise-aware: repeats, paired ABBA batches against a re-measured incumbent
            return self._judged(self.judge.cycle(candidate, incumbent, best_before, log_dir,
                                                 self._env(n), self.journal.cycles()), files)

        try:
            return self._checked(judged)
        except Tampered as exc:
            return _Outcome("violation", f"violation: {exc}", f"violation: {exc}", changed=files)

    def _checked(self, measurements: Callable[[], T]) -> T:
        """Run `measurements`, then check everything outside the trees they could have reached —
        also after a measurement voided by tampering: what it planted must be found now. Raises
        Tampered with every problem found."""
        try:
            result = measurements()
        except Tampered as exc:
            raise Tampered("; ".join([str(exc), *self.guard.after_verify()])) from None
        after = self.guard.after_verify()
        if after:
            raise Tampered("; ".join(after))
        return result

    @staticmethod
    def _judged(v: Any, changed: list[str]) -> _Outcome:
        extra: dict[str, Any] = {"stats": v.stats, "delta_pct": _round(v.delta_pct)}
        if v.feedback:
            extra["feedback"] = v.feedback
        if v.note:
            extra["note"] = v.note
        return _Outcome(v.status, v.lesson, v.result, metric=v.metric, changed=changed,
                        measurement=v.measurement, extra=extra)

    def final_estimate_s(self) -> float | None:
        """How long the end-of-run check would take, at most: its planned verifier runs (both
        sides, `final_pairs` pairs, and the holdout's) at the baseline's time per run (guards
        included, so on the safe side). None: nothing to go by."""
        base = next((c for c in self.journal.cycles() if c["status"] == "baseline"), None)
        if base is None or not base.get("duration_s"):
            return None
        st = base.get("stats") or {}
        runs = (len(st.get("runs") or []) + len(st.get("a") or []) + len(st.get("b") or [])
                + _count(st.get("warmup")))
        per_run = float(base["duration_s"]) / max(1, runs)
        # the judge's own plan (one run of the best on a verifier cycle 0 showed deterministic)
        planned = final_estimate(self.program, self.journal.cycles())["runs"]
        return per_run * planned + 1.0   # + the trees' checkout and proof

    def _final_check(self) -> dict[str, Any] | None:
        """When a run ends on a stop condition: best against the starting commit, re-measured
        in one interleaved batch; its gain and confidence interval go to the ledger — unless
        the run's time budget would not hold it (then the record says so)."""
        cycles = self.journal.cycles()
        start = next((c.get("commit") for c in cycles if c["status"] == "baseline"), None)
        if start is None:
            return None
        left, need = self.opt.time_left(), self.final_estimate_s()
        if left is not None and need is not None and need > left and \
                self.program.accept.final_pairs > 0 and start != self.incumbent:
            rec = {"start": start, "best": self.incumbent,
                   "skipped": (f"skipped — about {need:.0f}s of re-measurement would not fit in the "
                               f"{left:.0f}s left of --max-minutes"), "estimate_s": round(need, 1)}
            rec["text"] = final_text(rec, self.program.verifier.label)
            rec = self.journal.append({"t": "final", "after_cycle": cycles[-1]["cycle"], **rec})
            self.journal.render(self.program.goal)
            self.opt.report("final", rec)
            return rec
        self.opt.report("phase", {"cycle": cycles[-1]["cycle"], "phase": "final check"})
        log_dir = self.journal.dir / "logs" / f"final-{int(time.time() * 1000)}"
        log_dir.mkdir(parents=True)
        try:
            rec = self._checked(lambda: self.judge.final(start, self.incumbent, log_dir, self._env(0),
                                                         cycles))
        except Tampered as exc:
            # nothing is kept or undone at this point; the re-measurement just does not count
            rec = {"start": start, "best": self.incumbent, "skipped": f"not trustworthy: {exc}"[:300]}
        self._redact_logs(log_dir)
        rec["text"] = final_text(rec, self.program.verifier.label)
        rec = self.journal.append({"t": "final", "after_cycle": cycles[-1]["cycle"], **rec})
        self.journal.render(self.program.goal)
        self.opt.report("final", rec)
        return rec

    def _review(self, when: str, n: int, proposal: Proposal, incumbent: str, candidate: str,
                files: list[str], stat: Callable[[], str], outcome: _Outcome | None) -> _Outcome | None:
        """Approve mode: show the candidate to the person and apply their decision. Returns the
        outcome to record, or None to go on as the ratchet would (no reviewer for `when`, or
        `verify` before measuring)."""
        reviewer = self.opt.reviewer
        if reviewer is None or when not in reviewer.when:
            return None
        v = self.program.verifier
        m = outcome.measurement if outcome is not None else None
        review = Review(when=when, cycle=n, hypothesis=proposal.hypothesis, incumbent=incumbent,
                        candidate=candidate, files=tuple(files), diffstat=stat(),
                        diff=self.ws.diff_text(incumbent, candidate), metric_name=v.label,
                        direction=v.direction, best=self.best,
                        metric=None if outcome is None else outcome.metric,
                        guards=() if m is None else m.guards,
                        recommendation=None if outcome is None else outcome.status,
                        verdict="" if outcome is None else outcome.result)
        self._in_python_generator = True   # Ctrl-C at the prompt abandons the cycle at once
        try:
            if self._signal is not None:
                raise Interrupted("interrupted")
            decision = reviewer.decide(review)
        finally:
            self._in_python_generator = False
        if decision.action == "verify":
            return None
        status, lesson, result = human_outcome(review, decision,
                                               None if outcome is None else outcome.lesson)
        new = _Outcome(status, lesson, result, metric=None if outcome is None else outcome.metric,
                       changed=files, measurement=m, decided_by="human",
                       recommendation=review.recommendation)
        return new

    def _commit_message(self, n: int, proposal: Proposal, outcome: _Outcome) -> str:
        name = self.program.verifier.label
        hyp = " ".join(proposal.hypothesis.split())
        subject = f"autoloop cycle {n}: {hyp}"
        if len(subject) > 100:
            subject = subject[:99] + "…"
        return (f"{subject}\n\n{name}: {fmt(self.best)} → {fmt(outcome.metric)}"
                f"{_pct_text(self.best, outcome.metric)}\n"
                + (f"Measured: {outcome.extra['note']}\n" if outcome.extra.get("note") else "")
                + f"Hypothesis: {hyp}\nCycle: {n}\nRun: {self.ws.branch}\n")

    # ---- stopping, signals, aborts -------------------------------------------------------------

    def _stop_reason(self, ran: int, started: float) -> str:
        stop = self.program.stop
        if self._finished:
            return f"generator finished: {self._finished}"
        extra = self.opt.stop_check()
        if extra:
            return extra
        max_cycles = self.opt.cycles if self.opt.cycles is not None else stop.max_cycles
        if max_cycles is not None and ran >= max_cycles:
            return f"max_cycles reached ({max_cycles} cycle{'' if max_cycles == 1 else 's'})"
        if stop.max_minutes is not None and (time.monotonic() - started) / 60 >= stop.max_minutes:
            return f"max_minutes reached ({stop.max_minutes:g} min)"
        if reached(self.program.verifier.direction, self.best, stop.target):
            return f"target reached ({fmt(self.best)} vs target {fmt(stop.target)})"
        cycles = [c for c in self.journal.cycles() if c["cycle"] > 0]
        if stop.patience is not None:
            streak = 0
            for c in reversed(cycles):
                if c["status"] == "keep":
                    break
                streak += 1
            if streak >= stop.patience:
                return f"patience exhausted ({streak} cycles without a keep)"
        if stop.max_cost_usd is not None:
            costs = [c.get("gen", {}).get("cost_usd") or 0.0 for c in cycles]
            spent = sum(costs)
            next_cost = max(costs[-10:]) if costs else 0.0
            if spent + next_cost > stop.max_cost_usd:
                return f"max_cost_usd reached (${spent:.2f} spent, next cycle could cost ${next_cost:.2f})"
        return ""

    def _backoff(self, rec: Record) -> None:
        """After consecutive generator errors (rate limits, an overloaded service), wait a little
        longer each time — 1, 2, 4 ... 60 s — instead of hammering; Ctrl-C still stops at once."""
        streak = 0
        for c in reversed(self.journal.cycles()):
            if c["status"] != "gen_error":
                break
            streak += 1
        if streak < 2:
            return
        delay = min(BACKOFF_MAX_S, 2.0 ** (streak - 2))
        self.opt.report("phase", {"cycle": rec["cycle"], "phase": f"backoff {delay:g}s"})
        until = time.monotonic() + delay
        while time.monotonic() < until:
            self._check_signal()
            time.sleep(max(0.0, min(0.1, until - time.monotonic())))

    def _install_signals(self) -> dict[int, Any]:
        def handler(signum: int, _frame: Any) -> None:
            self._signal = signum
            proc.stop_current()
            # Only code of ours that may block for long without looking (an in-process
            # generator, the approve prompt) is interrupted at once; everywhere else the signal
            # is acted on at the next safe point. A second Ctrl-C changes nothing: raising in
            # the middle of a restore would leave the generator's edits behind an exit 130.
            if self._in_python_generator and not self._restoring:
                self._in_python_generator = False  # once: the way out is not interrupted again
                raise Interrupted("interrupted")

        old = {}
        for sig in (signal.SIGINT, signal.SIGTERM):
            old[sig] = signal.signal(sig, handler)
        return old

    @staticmethod
    def _restore_signals(old: dict[int, Any]) -> None:
        for sig, h in old.items():
            signal.signal(sig, h)

    def _check_signal(self) -> None:
        if self._signal is not None:
            raise Interrupted("interrupted")

    def _abort(self, n: int, incumbent: str, before: dict | None, reason: str) -> None:
        """Leave no trace of an unfinished cycle: tree back at the incumbent, ledger says so."""
        self._restoring = True
        try:
            proc.kill_marked(self.marker)  # nothing it started may write after the restore
            if getattr(self, "sentinel", None) is not None and self.sentinel.changed():
                self.sentinel.restore()
            if self.ws.dotgit_tampered():
                self.ws.restore_dotgit()
            if self.journal.tampered():
                self.journal.repair()
            if before is not None:
                self.ws.restore(incumbent, before)
            else:
                self.ws.reset_hard(incumbent)
            self.journal.append({"t": "abort", "cycle": n, "reason": reason})
            self.journal.render(self.program.goal)
        finally:
            self._restoring = False

    # ---- small helpers -------------------------------------------------------------------------

    def _log_dir(self, n: int) -> Path:
        d = self.journal.dir / "logs" / f"cycle-{n:04d}"
        if d.exists():
            # an earlier attempt at this cycle number was rolled back; keep its logs aside
            d.rename(d.with_name(f"{d.name}.aborted-{int(time.time() * 1000)}"))
        d.mkdir(parents=True)
        return d

    def _env(self, n: int) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in envs.GIT_LOCATION}
        env["AUTOLOOP_CYCLE"] = str(n)
        env["AUTOLOOP_TAG"] = self.opt.tag
        return env

    def _redact_logs(self, log_dir: Path) -> None:
        for p in log_dir.rglob("*"):      # runs/LABEL/ of repeated and paired measurements too
            if p.is_file() and not p.is_symlink():
                self.redact.file(p)


def _file_changes(changes: list[Change]) -> list[Change]:
    """Changes git could record (files, links, specials); folders come and go with them."""
    return [c for c in changes
            if not ((c.before is None or c.before.kind == "d") and (c.after is None or c.after.kind == "d"))]


def _pct_text(old: float | None, new: float | None) -> str:
    d = pct(old, new)
    return f" ({signed_pct(d)})" if d is not None else ""


def _count(x: Any) -> int:
    """Values in a calibration's warm-up record (a list, or {a: [...], b: [...]})."""
    if isinstance(x, dict):
        return sum(len(v or []) for v in x.values())
    return len(x or [])


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def _tail(stem: Path | None, lines: int = 20) -> str:
    if stem is None:
        return ""
    out = proc.read_tail(stem.with_name(stem.name + ".out"), 4000).splitlines()[-lines:]
    err = proc.read_tail(stem.with_name(stem.name + ".err"), 4000).splitlines()[-lines:]
    parts = []
    if out:
        parts.append("  stdout: " + "\n  stdout: ".join(out))
    if err:
        parts.append("  stderr: " + "\n  stderr: ".join(err))
    return "\n".join(parts) or "  (no output)"
