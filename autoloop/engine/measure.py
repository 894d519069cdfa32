"""Measuring for the decide step: binds autoloop.decide's Runner to real verifier processes run
through one lane of an executor (autoloop.engine.executors): side B the candidate (or the best), side A
the incumbent (or the start), every run a fresh process."""

from __future__ import annotations

import dataclasses
import re
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, TypeVar

from autoloop.decide.core import Baseline, Sample, Session, Verdict
from autoloop.decide import baseline as calibrate, cycle, end
from autoloop.errors import ClusterLost, NodeLost
from autoloop.engine.executors import LocalLane, RayLane
from autoloop.engine.hints import plain
from autoloop.program.reader import Program, VerifierSpec
from autoloop.engine.metric import Measurement, MetricError, parse_metric
from autoloop.engine.testcount import TestCount, baseline_counts, shortfall
from autoloop.engine.verify import new_seed
from autoloop.process.logfile import log_folder


def pair_key(label: str) -> str:
    """The runs of one pair share this ("B3"/"A3" → "3", "cB2"/"cA2" → "c2"): and their seed."""
    return re.sub(r"[AB](?=\d+$)", "", label)


T = TypeVar("T")
OnLost = Callable[[NodeLost, str, int], None]     # (what failed, "cycle 5's measurement", attempt)
# A measurement cut short by a lost node runs again, whole, at most this many times: a cluster
# losing node after node is not a run to go on with
MAX_REMEASURE = 3


def again_elsewhere(lane: LocalLane | RayLane, during: str, on_lost: OnLost, measurement: Callable[[], T]) -> T:
    """`measurement()` (every run of one comparison), run again from its start on another node
    when its node fails under it: the candidate's verdict comes only from its verifier's
    outcome. ClusterLost when it keeps failing or no node is left."""
    for attempt in range(1, MAX_REMEASURE + 2):
        try:
            return measurement()
        except NodeLost as exc:
            lane.lose(exc)
            if attempt > MAX_REMEASURE:
                raise ClusterLost(f"{during} lost its Ray node {attempt} times (the last, "
                                  f"{exc.host} ({(exc.node_id or '?')[:12]}): {exc}); stopping") from None
            on_lost(exc, during, attempt)
    raise AssertionError("unreachable")


def sample(m: Measurement, side: str, label: str, program: Program | None = None) -> Sample:
    """A Measurement as the decide step sees it (with `program`'s limits read from its log)."""
    if not m.guards_ok:
        g = m.failed_guard
        assert g is not None
        return Sample(side, label, None, g.detail, g.name, measurement=m, seconds=m.duration_s)
    secondary: dict[str, float | None] = {}
    if program is not None and m.metric is not None and m.log_stem is not None:
        out = m.log_stem.with_name(m.log_stem.name + ".out")
        for lim in program.limits:
            try:
                secondary[lim.label] = parse_metric(out, lim)
            except (MetricError, OSError):
                secondary[lim.label] = None
    # text from outside (a crash's last line, Ray's error): no terminal escape reaches a record
    return Sample(side, label, m.metric, None if m.error is None else plain(m.error), None, secondary, m,
                  m.duration_s)


def enforce_counts(m: Measurement, base: Mapping[str, TestCount]) -> Measurement:
    """`m` with its first guard whose test counts fall short of the starting commit's (`base`,
    testcount.baseline_counts) failed, naming the counts; the guards after it are dropped, as if
    the measurement had stopped there (a failing guard stops it)."""
    for i, g in enumerate(m.guards):
        why = shortfall(base.get(g.name), g.tests) if g.ok else None
        if why is not None:
            failed = dataclasses.replace(g, ok=False, detail=why)
            return dataclasses.replace(m, guards=(*m.guards[:i], failed), metric=None, error=None)
    return m


def judge_one(program: Program, m: Measurement, best: float) -> Verdict:
    """Contract §5 on the one measurement the plain path made: the decide step's strict rule."""
    return cycle.judge_strict(Session(lambda side, label, _: sample(m, side, label)), program, best, {})


@dataclasses.dataclass
class LaneRunner:
    """The verifier (or, with `spec`, the holdout) run through a lane; each run logs to
    log_dir/runs/LABEL/ (the first to `first_log_dir` when given)."""

    lane: LocalLane | RayLane
    program: Program
    env: Mapping[str, str]
    log_dir: Path
    marker: str
    check_signal: Callable[[], None]
    spec: VerifierSpec | None = None
    first_log_dir: Path | None = None
    # $AUTOLOOP_SEED by pair (pair_key): drawn at a pair's first verifier, the same for its second;
    # `seeds` is what each run got, by label, for the ledger
    pair_seeds: dict[str, int] = dataclasses.field(default_factory=dict)
    seeds: dict[str, int] = dataclasses.field(default_factory=dict)
    # each run's seconds by part, by label, for the ledger: the timed metric, the command's own
    # wall seconds, the score's, verifier.inputs', the guards'
    parts: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)
    tests: Mapping[str, TestCount] = dataclasses.field(default_factory=dict)   # the baseline's counts
    # sides whose runs skip a score that only checks correctness (measure: wall|cpu): the
    # incumbent's beside a candidate. Its answers were checked when it was kept (and the
    # end-of-run check scores them again); a wrong one could only make it look faster, which
    # makes a keep harder, never easier. Half the scoring of a cycle saved (issue 38's run cost).
    unchecked: frozenset[str] = frozenset()
    # failures may say what to set in program.md: measuring the user's own code (the baseline),
    # never a candidate's (verify.measure)
    hints: bool = False

    def __call__(self, side: str, label: str, with_guards: bool) -> Sample:
        if self.first_log_dir is not None:
            d, self.first_log_dir = self.first_log_dir, None
        else:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            d = log_folder(self.log_dir, "runs", label)   # not through a link the generator planted
        p = self.program
        run = p if self.spec is None else dataclasses.replace(p, verifier=self.spec, guards=())
        key = pair_key(label)
        # drawn when the run's verifier starts, after its guards: the pair's second run reuses it
        m = self.lane.measure(run, side, env=self.env, log_dir=d, marker=self.marker,
                              with_guards=with_guards, holdout=self.spec is not None,
                              seed=lambda: self.pair_seeds.setdefault(key, new_seed()), hints=self.hints,
                              check=side not in self.unchecked)
        if m.seed is not None:
            self.seeds[label] = m.seed
        if m.metric is not None and (run.verifier.score is not None or run.verifier.inputs is not None):
            # every run, also one with neither part (an incumbent's beside a candidate, whose
            # pair's first run drew the inputs): a mean over the runs is the cost of a run
            guards = sum(g.duration_s for g in m.guards)
            self.parts[label] = {k: round(v, 4) for k, v in (
                ("timed", m.metric), ("command", max(0.0, m.verifier_s - m.score_s)), ("score", m.score_s),
                ("inputs", m.inputs_s), ("guards", guards))}
        self.check_signal()
        if with_guards:
            m = enforce_counts(m, self.tests)
        return sample(m, side, label, p if self.spec is None else None)   # a holdout: no limits


class Judge:
    """The loop's view: baseline, cycle and end-of-run measurements through one lane."""

    def __init__(self, program: Program, ws: Any, marker: str,
                 check_signal: Callable[[], None], lane: LocalLane | RayLane,
                 on_lost: OnLost = lambda exc, during, attempt: None) -> None:
        self.program, self.ws, self.marker = program, ws, marker
        self.check_signal, self.lane, self.on_lost = check_signal, lane, on_lost
        self._seeds: list[dict[str, int]] = []   # of the runners of the call going on
        self._parts: list[dict[str, dict[str, float]]] = []

    @property
    def plain(self) -> bool:
        """Contract section 5 exactly: one run of the candidate against the stored incumbent."""
        p, a = self.program, self.program.accept
        return (a.rule == "strict" and p.verifier.repeats == 1 and a.min_effect.value == 0
                and a.warmup == 0 and not p.limits and p.holdout is None)

    def _runners(self, a: str, b: str, env: Mapping[str, str], log_dir: Path,
                 first_log_dir: Path | None = None,
                 need_a: bool = True) -> tuple[LaneRunner, LaneRunner | None]:
        self.lane.prepare({"B": b, **({"A": a} if need_a else {})})
        main = LaneRunner(self.lane, self.program, env, log_dir, self.marker, self.check_signal,
                          first_log_dir=first_log_dir)
        h = self.program.holdout
        spec = None if h is None else VerifierSpec(command=h.command, direction=h.direction,
                                                   metric=h.metric, pattern=h.pattern,
                                                   timeout=h.timeout)
        hold = None if spec is None else dataclasses.replace(main, spec=spec, first_log_dir=None,
                                                             pair_seeds={}, seeds={}, parts={})
        self._seeds += [main.seeds] if hold is None else [main.seeds, hold.seeds]
        self._parts.append(main.parts)
        return main, hold

    def _with_seeds(self, stats: dict[str, Any]) -> None:
        """Each run's $AUTOLOOP_SEED into the ledger record's stats (holdout runs' labels start with h)."""
        seeds = {k: v for d in self._seeds for k, v in d.items()}
        if seeds:
            stats["seeds"] = seeds
        parts = {k: v for d in self._parts for k, v in d.items()}
        if parts:   # a run with a score: its timed seconds and the rest, by part
            stats["run_parts"] = parts

    def baseline(self, commit: str, log_dir: Path, env: Mapping[str, str]) -> Baseline:
        paired = self.program.accept.rule == "paired"
        self._seeds, self._parts = [], []
        # the first run logs where a single-run baseline always has (log_dir/verifier.*)
        rule = calibrate.calibrate_paired if paired else calibrate.calibrate_strict

        def measured() -> Baseline:
            self._seeds, self._parts = [], []
            main, _ = self._runners(commit, commit, env, log_dir, first_log_dir=log_dir, need_a=paired)
            main.hints = True   # the starting commit: the user's own code
            b = rule(Session(main), self.program)
            if self.lane.where() is not None:   # every run of the calibration on this one node
                b.stats["node"] = self.lane.where()
            self._with_seeds(b.stats)
            return b

        return again_elsewhere(self.lane, "the baseline's measurement", self.on_lost, measured)

    def cycle(self, candidate: str, incumbent: str, best: float, log_dir: Path,
              env: Mapping[str, str], history: Sequence[Mapping[str, Any]],
              during: str = "a cycle's measurement") -> Verdict:
        return again_elsewhere(self.lane, during, self.on_lost,
                               lambda: self._cycle(candidate, incumbent, best, log_dir, env, history))

    def _cycle(self, candidate: str, incumbent: str, best: float, log_dir: Path,
               env: Mapping[str, str], history: Sequence[Mapping[str, Any]]) -> Verdict:
        paired = self.program.accept.rule == "paired"
        self._seeds, self._parts = [], []
        main, hold = self._runners(incumbent, candidate, env, log_dir,
                                   need_a=paired or self.program.holdout is not None)
        main.tests = baseline_counts(history)
        main.unchecked = frozenset({"A"})   # A: the incumbent (_runners)
        session, holdout = Session(main), Session(hold, guards=False) if hold is not None else None
        secondary = end.baseline_secondary(history)
        if paired:
            cal = end.calibration(history)
            noise, noise_scale = cycle.calibration_noise(history)
            # the incumbent's recent runs on this node, ranked with the fresh ones (decide.pool)
            pool = cycle.pool_for(history, incumbent, self.lane.where(), time.time())
            v = cycle.judge_paired(session, self.program, secondary, cal.get("step"),
                                   noise_scale or cal.get("scale"), holdout, noise, pool)
        else:
            v = cycle.judge_strict(session, self.program, best, secondary, holdout)
        self._with_seeds(v.stats)
        return v

    def final(self, start: str, best: str, log_dir: Path, env: Mapping[str, str],
              history: Sequence[Mapping[str, Any]] = (),
              announce: Callable[[], None] = lambda: None) -> dict[str, Any]:
        self._seeds, self._parts = [], []

        def sessions(both: bool) -> tuple[Session, Session | None]:
            main, hold = self._runners(start, best, env, log_dir, need_a=both)
            return Session(main, guards=False), Session(hold, guards=False) if hold is not None else None

        said: list[bool] = []

        def once() -> None:   # a check measured again after a lost node is announced once
            if not said:
                said.append(True)
                announce()

        def measured() -> dict[str, Any]:
            self._seeds, self._parts = [], []
            rec = end.end_of_run(self.program, history, start, best,
                                 lambda: bool(self.ws.tree_of(start) == self.ws.tree_of(best)), sessions, once)
            self._with_seeds(rec)
            where = self.lane.where()
            return rec if where is None or rec.get("skipped") else {**rec, "node": where}

        return again_elsewhere(self.lane, "the end-of-run check", self.on_lost, measured)
