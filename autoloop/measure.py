"""Measuring for the decide step: binds autoloop.decide's Runner to real verifier processes in
pristine trees (the incumbent, side A, in verification slot 1; the candidate, side B, in slot 0;
every run a fresh process through the guardrails)."""

from __future__ import annotations

import dataclasses
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence

from autoloop.decide.core import Baseline, Sample, Session, Verdict
from autoloop.decide import baseline as calibrate, cycle, end
from autoloop.program import Program, VerifierSpec
from autoloop.sandbox import Confinement
from autoloop.metric import Measurement, MetricError, parse_metric
from autoloop.verify import measure


class Guarded(Protocol):
    """What the guardrails (autoloop.hardening.Guardrails) offer a measurement: the environment
    for measuring a commit in a tree proven to hold exactly it, and a check after each step."""

    def measuring(self, tree: Any, commit: str,
                  base_env: Mapping[str, str]) -> AbstractContextManager[dict[str, str]]: ...

    def after_step(self, step: str) -> None: ...

    def confine(self, tree: Path, env: Mapping[str, str]) -> Confinement | None: ...


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
    return Sample(side, label, m.metric, m.error, None, secondary, m, m.duration_s)


def judge_one(program: Program, m: Measurement, best: float) -> Verdict:
    """Contract §5 on the one measurement the plain path made: the decide step's strict rule."""
    return cycle.judge_strict(Session(lambda side, label, _: sample(m, side, label)), program, best, {})


class TreeRunner:
    """Runs the verifier (or the holdout) as a fresh process in a prepared tree per side,
    every run through the guardrails; each run logs to log_dir/runs/LABEL/."""

    def __init__(self, program: Program, sides: Mapping[str, tuple[Any, str]], *,
                 env: Mapping[str, str], log_dir: Path, marker: str,
                 check_signal: Callable[[], None], guard: Guarded,
                 spec: VerifierSpec | None = None, first_log_dir: Path | None = None) -> None:
        self.program = program if spec is None else dataclasses.replace(program, verifier=spec, guards=())
        self.limits_of = program if spec is None else None     # the holdout has no limits
        self.sides = sides               # side -> (verification tree, the commit it holds)
        self.guard, self.env, self.log_dir = guard, env, log_dir
        self.marker, self.check_signal, self.first_log_dir = marker, check_signal, first_log_dir
        # Sides whose tree holds its commit. A tree is checked out when first measured, never
        # before: the guardrails carry each verification tree's picture from its last
        # measurement to the next generator check, and a tree reset to another commit but never
        # measured (a guard failing on B ends the batch before A runs) would no longer match
        # that picture — the next cycle then blamed its generator for "changing" it.
        self.checked_out: set[str] = set()

    def __call__(self, side: str, label: str, with_guards: bool) -> Sample:
        if self.first_log_dir is not None:
            d, self.first_log_dir = self.first_log_dir, None
        else:
            d = self.log_dir / "runs" / label
            d.mkdir(parents=True, exist_ok=True)
        m = self._measure(side, d, with_guards)
        self.check_signal()
        return sample(m, side, label, self.limits_of)

    def _measure(self, side: str, log_dir: Path, with_guards: bool) -> Measurement:
        """One run in this side's tree, through the guardrails; autoloop.executors overrides it
        to run elsewhere."""
        tree, commit = self.sides[side]
        if side not in self.checked_out:
            tree.checkout(commit, clean=False)   # measuring() cleans it
            self.checked_out.add(side)
        with self.guard.measuring(tree, commit, self.env) as env:
            return measure(self.program, cwd=tree.path, env=env, log_dir=log_dir, marker=self.marker,
                           with_guards=with_guards, after_step=self.guard.after_step,
                           box=self.guard.confine(tree.path, env))


def holdout_spec(program: Program) -> VerifierSpec | None:
    h = program.holdout
    return None if h is None else VerifierSpec(command=h.command, direction=h.direction,
                                               metric=h.metric, pattern=h.pattern, timeout=h.timeout)


class Judge:
    """The loop's view: baseline, cycle and end-of-run measurements on real trees."""

    def __init__(self, program: Program, ws: Any, marker: str,
                 check_signal: Callable[[], None], guard: Guarded) -> None:
        self.program, self.ws, self.marker = program, ws, marker
        self.check_signal, self.guard = check_signal, guard

    @property
    def plain(self) -> bool:
        """Contract section 5 exactly: one run of the candidate against the stored incumbent."""
        p, a = self.program, self.program.accept
        return (a.rule == "strict" and p.verifier.repeats == 1 and a.min_effect.value == 0
                and a.warmup == 0 and not p.limits and p.holdout is None)

    def _runners(self, a: str, b: str, env: Mapping[str, str], log_dir: Path,
                 first_log_dir: Path | None = None, need_a: bool = True) -> tuple[TreeRunner, TreeRunner | None]:
        # checked out by the runner at each side's first measurement (TreeRunner.checked_out)
        sides: dict[str, tuple[Any, str]] = {"B": (self.ws.verify_tree(0), b)}
        if need_a:
            sides["A"] = (self.ws.verify_tree(1), a)
        kw: dict[str, Any] = dict(env=env, log_dir=log_dir, marker=self.marker,
                                  check_signal=self.check_signal, guard=self.guard)
        main = TreeRunner(self.program, sides, first_log_dir=first_log_dir, **kw)
        spec = holdout_spec(self.program)
        hold = None if spec is None else TreeRunner(self.program, sides, spec=spec, **kw)
        if hold is not None:
            hold.checked_out = main.checked_out   # the same trees: one checkout each
        return main, hold

    def baseline(self, commit: str, log_dir: Path, env: Mapping[str, str]) -> Baseline:
        paired = self.program.accept.rule == "paired"
        # the first run logs where a single-run baseline always has (log_dir/verifier.*)
        main, _ = self._runners(commit, commit, env, log_dir, first_log_dir=log_dir, need_a=paired)
        rule = calibrate.calibrate_paired if paired else calibrate.calibrate_strict
        return rule(Session(main), self.program)

    def cycle(self, candidate: str, incumbent: str, best: float, log_dir: Path,
              env: Mapping[str, str], history: Sequence[Mapping[str, Any]]) -> Verdict:
        paired = self.program.accept.rule == "paired"
        main, hold = self._runners(incumbent, candidate, env, log_dir,
                                   need_a=paired or self.program.holdout is not None)
        session, holdout = Session(main), Session(hold, guards=False) if hold is not None else None
        secondary = end.baseline_secondary(history)
        if paired:
            cal = end.calibration(history)
            noise, noise_scale = cycle.calibration_noise(history)
            return cycle.judge_paired(session, self.program, secondary, cal.get("step"),
                                      noise_scale or cal.get("scale"), holdout, noise)
        return cycle.judge_strict(session, self.program, best, secondary, holdout)

    def final(self, start: str, best: str, log_dir: Path, env: Mapping[str, str],
              history: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
        def sessions(both: bool) -> tuple[Session, Session | None]:
            main, hold = self._runners(start, best, env, log_dir, need_a=both)
            return Session(main, guards=False), Session(hold, guards=False) if hold is not None else None

        return end.end_of_run(self.program, history, start, best,
                              lambda: bool(self.ws.tree_of(start) == self.ws.tree_of(best)), sessions)
