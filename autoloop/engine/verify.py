"""Guards + verifier on a tree → a Measurement (the metric read by autoloop.engine.metric)."""

from __future__ import annotations

import dataclasses
import os
import re
import secrets
import stat
from pathlib import Path
from typing import Callable, Mapping, Sequence

from autoloop.isolation import editable
from autoloop.isolation.hardening import refuse_writable_pythons
from autoloop.process import proc
from autoloop.engine import testcount
from autoloop.errors import RunFailure
from autoloop.journal.ledger import UNSANDBOXED
from autoloop.engine.hints import missing_path_hint, near_miss, plain, root_hint, uncommitted_module_hint
from autoloop.engine.metric import GuardResult, Measurement, MetricError, parse_metric
from autoloop.program.reader import HoldoutSpec, Program, VerifierSpec
from autoloop.isolation.failures import failure_hint
from autoloop.isolation.sandbox import Bwrap, Confinement, probed
from autoloop.base.walk import remove_tree, walk

OUTPUT_VAR = "AUTOLOOP_OUTPUT"   # the folder `verifier.command` writes and `score` reads
# `verifier.score` run on the command's output: (env, output folder, log_dir, marker) → its result
Score = Callable[[Mapping[str, str], Path, Path, str], proc.ProcResult]

SEED_VAR = "AUTOLOOP_SEED"
MEASURE_VAR = "AUTOLOOP_MEASURE"   # verifier.measure, for the command (and its score)
INPUTS_VAR = "AUTOLOOP_INPUTS"     # for the score: the file verifier.inputs wrote (the command's stdin)


def new_seed() -> int:
    """A fresh $AUTOLOOP_SEED, drawn here in autoloop's process (after the generator finished):
    nothing the candidate saw before predicts it."""
    return secrets.randbits(63)


def steps(program: Program, with_guards: bool = True,
          verifier: VerifierSpec | HoldoutSpec | None = None) -> list[proc.Step]:
    """What one measurement runs, in order: the guards (if asked), then the verifier (the
    program's, or the given one: the holdout). Each command's timeout travels only in these."""
    v = verifier or program.verifier
    return [*(proc.Step(g.name, g.command, g.timeout, True) for g in (program.guards if with_guards else ())),
            proc.Step("verifier", v.command, v.timeout, False)]


def label(step: proc.Step) -> str:
    """How a step is named to `after_step` (and in Tampered's messages)."""
    return f"guard '{step.name}'" if step.guard else "the verifier"


def measure(program: Program, *, cwd: Path, env: Mapping[str, str], log_dir: Path, marker: str,
            with_guards: bool = True, after_step: Callable[[str], None] | None = None,
            box: Confinement | None = None, verifier: VerifierSpec | HoldoutSpec | None = None,
            seed: int | Callable[[], int] | None = None, scorer: Score | None = None,
            output: Path | None = None, reseal: Callable[[], None] | None = None,
            hints: bool = True, check: bool = True) -> Measurement:
    """Run the guards (stopping at the first failure), then the verifier (or `verifier`: the
    holdout). `after_step(name)` is called after each (it may raise, to void the measurement).
    With `box`, each runs in that sandbox; its output still goes to files opened outside it.

    No step reaches the next (contract §11): before every step but the first, `reseal()` makes
    the tree hold exactly the commit again (nothing untracked or ignored; it raises when it
    cannot), and $TMPDIR is emptied. The guards get a $AUTOLOOP_SEED of their own; the
    measurement's (`seed`, or `seed()` — both sides of a pair share one —, else a fresh one) is
    drawn after the guards have finished, so nothing they ran could know it. The score of that
    measurement sees the same.
    With `verifier.score`, `scorer` runs it on what the command wrote to $AUTOLOOP_OUTPUT
    (`output`, by default beside the measurement's TMPDIR: a folder its box may write).
    `hints`: a failure's text may say what to set in program.md (a writable path, the network):
    for the user's own code (a baseline, `verify`), never for a candidate's (its lesson is read
    by the generator as advice, and the baseline passed in the same box).
    `check=False`: a score that only checks correctness (`measure: wall|cpu`) is not run — the
    incumbent's runs beside a candidate (see measure.LaneRunner.unchecked)."""
    todo = steps(program, with_guards, verifier)
    after = None if after_step is None else (lambda s: after_step(label(s)))
    spec = verifier or program.verifier
    scored = spec.score is not None
    if scored and scorer is None:   # never measure such a program from the command's own output
        raise RunFailure("internal error: verifier.score is set but nothing can run it here")
    results: list[proc.ProcResult] = []
    given: Path | None = None   # verifier.inputs' output: the verifier's stdin, readable by its score
    inputs_s = 0.0
    for i, step in enumerate(todo):
        if i:
            _fresh_start(env, reseal)
        if step.guard:
            step_env = {**env, SEED_VAR: str(new_seed())}
        else:
            seed = seed() if callable(seed) else new_seed() if seed is None else seed
            # how the command is timed: a traced benchmark lets its worker start processes only
            # under wall (parallel speed-ups welcome), since cpu cannot count every child
            step_env = {**env, SEED_VAR: str(seed), MEASURE_VAR: spec.measure}
        if not step.guard and scored:
            # an empty folder the guards (which run the candidate's code too) never saw
            output = output or Path(env["TMPDIR"]).parent / "output"
            remove_tree(output, quiet=True)
            output.mkdir(parents=True)
            made = os.lstat(output)
            step_env[OUTPUT_VAR] = str(output)
        if not step.guard and spec.inputs is not None:
            if scorer is None or not hasattr(scorer, "inputs"):
                raise RunFailure("internal error: verifier.inputs is set but nothing can run it here")
            failed, given = scorer.inputs(step_env, marker)
            inputs_s = failed.duration_s if failed is not None else 0.0
            if given is None:
                assert failed is not None
                m = summarize(program, todo, results, box, verifier, hints=hints)
                return dataclasses.replace(m, error="verifier.inputs: " + failure_summary(failed), seed=seed)
        results += proc.run_steps([step], cwd=cwd, env=step_env, log_dir=log_dir, marker=marker,
                                  wrap=box, after=after, stdin=given)
        if step.guard and not results[-1].ok:
            break
    if not todo or todo[-1].guard or len(results) < len(todo):
        return summarize(program, todo, results, box, verifier, hints=hints)   # no verifier run: no seed drawn
    assert isinstance(seed, int)
    score = None
    if scored and results[-1].ok and (check or spec.measure == "output"):
        assert output is not None and scorer is not None
        odd = not_plain(output, made)
        score = (scorer({**step_env, INPUTS_VAR: str(given)}, output, log_dir, marker, (given,)) if given is not None
                 else scorer(step_env, output, log_dir, marker)) if not odd else (
            f"not run: ${OUTPUT_VAR} {odd}; the command must write plain files into the folder "
            "(a link could point the score at what the candidate cannot read)")
    return dataclasses.replace(summarize(program, todo, results, box, verifier, score, hints), seed=seed,
                               inputs_s=inputs_s)


def _fresh_start(env: Mapping[str, str], reseal: Callable[[], None] | None) -> None:
    """Between two steps of one measurement: the tree back to exactly its commit (`reseal`), and
    an empty $TMPDIR: nothing one step wrote is there for the next."""
    if reseal is not None:
        reseal()
    tmp = env.get("TMPDIR")
    if tmp:
        remove_tree(Path(tmp), quiet=True)
        Path(tmp).mkdir(parents=True, exist_ok=True)


def not_plain(folder: Path, made: os.stat_result) -> str | None:
    """What makes `folder` (made as `made`) more than regular files and folders, or None: the
    folder replaced (by a link to a private folder), or an entry that is a symbolic link (to a
    private answer key) or a fifo (that would hang the score)."""
    try:
        st = os.lstat(folder)
    except OSError:
        st = None
    if st is None or not stat.S_ISDIR(st.st_mode) or (st.st_dev, st.st_ino) != (made.st_dev, made.st_ino):
        return "was replaced"
    for rel, _, st in walk(str(folder), ordered=True):
        if st is not None and not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
            return f"holds {rel}, not a regular file or folder"
    return None


def summarize(program: Program, todo: Sequence[proc.Step], results: Sequence[proc.ProcResult],
              box: Confinement | None = None, verifier: VerifierSpec | HoldoutSpec | None = None,
              score: proc.ProcResult | str | None = None, hints: bool = True) -> Measurement:
    """The results of `todo` (up to the first failing guard) as a Measurement; with `score`
    (the result of `verifier.score`, or why it was not run) the metric is its, or with
    `measure: wall|cpu` its exit is a correctness check. `hints`: see measure()."""
    spec = verifier or program.verifier
    scored = spec.score is not None and spec.measure == "output"
    if score is not None and not scored:
        return _checked(summarize(program, todo, results, box, verifier, hints=hints), score, box if hints else None,
                        bool(program.private))
    if not hints:
        box = None   # failure_summary's sandbox hint is for the user's own commands only
    guards: list[GuardResult] = []
    total = 0.0
    for step, res in zip(todo, results):
        total += res.duration_s
        stem = res.stdout_path.with_suffix("")
        said = "" if res.ok else res.stderr_tail() + "\n" + res.stdout_tail()
        why = None if res.ok else failure_summary(res, box, first=step.guard) + (
            root_hint(program, said) + uncommitted_module_hint(program, said)
            + missing_path_hint(program, said, box is not None) if hints else "")
        if step.guard:
            guards.append(GuardResult(step.name, res.ok, why or res.describe(), stem, res.duration_s,
                                      testcount.parse([res.stdout_path, res.stderr_path])))
            if why:
                return Measurement(None, tuple(guards), None, None, total)
        elif why:
            return Measurement(None, tuple(guards), why, stem, total)
        elif scored:
            # the metric is the score's: the command's output, written by the candidate's code, is not read
            return _score_metric(spec, tuple(guards), score, box, total, bool(program.private))
        elif spec.measure != "output":
            # timed from outside: nothing the command printed is read for the metric
            value = res.wall_s if spec.measure == "wall" else res.cpu_s
            why = None if value is not None else \
                f"autoloop could not account for every process of the verifier (measure: {spec.measure})"
            return Measurement(value, tuple(guards), why, stem, total)
        else:
            try:
                return Measurement(parse_metric(res.stdout_path, spec), tuple(guards), None, stem, total)
            except MetricError as exc:
                key = "verifier.metric" if spec is program.verifier else "holdout.metric"
                hint = near_miss(res.stdout_tail(), spec.metric, res.stderr_tail(), key,
                                 f"{program.path.name}:{program.line(key)}") \
                    if spec.metric and spec.pattern is None else ""
                return Measurement(None, tuple(guards), str(exc) + hint, stem, total)
    return Measurement(None, tuple(guards), "the verifier did not run", None, total)


def _score_failed(score: proc.ProcResult, box: Confinement | None, private: bool) -> str:
    """Why the score failed, for the lesson. With `private` its words are not quoted: the score
    reads the private paths, and a checker that names the expected answer would hand them to
    the journal and the next prompt (contract: private never reaches either)."""
    if private:
        return f"{score.describe()} (its output stays in its log: the score reads `private`)"
    return failure_summary(score, box)


def _score_metric(spec: VerifierSpec | HoldoutSpec, guards: tuple[GuardResult, ...],
                  score: proc.ProcResult | str | None, box: Confinement | None, total: float,
                  private: bool = False) -> Measurement:
    if score is None or isinstance(score, str):
        return Measurement(None, guards, f"verifier.score {score or 'did not run'}", None, total)
    stem, total = score.stdout_path.with_suffix(""), total + score.duration_s
    if not score.ok:
        return Measurement(None, guards, "verifier.score: " + _score_failed(score, box, private), stem, total)
    try:
        return Measurement(parse_metric(score.stdout_path, spec), guards, None, stem, total)
    except MetricError as exc:
        quote = spec.metric and spec.pattern is None and not private
        hint = near_miss(score.stdout_tail(), spec.metric) if quote else ""
        return Measurement(None, guards, f"verifier.score: {exc}{hint}", stem, total)


def _checked(m: Measurement, score: proc.ProcResult | str, box: Confinement | None,
             private: bool = False) -> Measurement:
    """`measure: wall|cpu`: the score checks the command's results; failing, the cycle is a guard_fail."""
    if m.metric is None:
        return m
    if isinstance(score, str):
        assert m.log_stem is not None
        failed = GuardResult("score", False, score, m.log_stem, 0.0)
        return Measurement(None, (*m.guards, failed), None, None, m.duration_s)
    total = m.duration_s + score.duration_s
    if score.ok:
        return dataclasses.replace(m, duration_s=total, score_said=score.stdout_tail(2000),
                                   score_s=score.duration_s)
    failed = GuardResult("score", False, _score_failed(score, box, private), score.stdout_path.with_suffix(""),
                         score.duration_s)
    return Measurement(None, (*m.guards, failed), None, None, total)


def sandbox_outside_run(program: Program) -> tuple[Bwrap | None, str | None]:
    """The sandbox of `verify`'s and `gate`'s measurements and, when there is none, the warning
    to give. ConfigError (exit 2) when `sandbox: bwrap` cannot be made or, with no sandbox, an
    installation points into the checkout (editable.refuse, as `run` does before its baseline)."""
    bwrap, why = probed(program)
    if bwrap is None:
        editable.refuse(program, why or "")
    else:
        refuse_writable_pythons(program)
    return bwrap, why and UNSANDBOXED.format(why)


# the first error a test run reports: pytest's `E   TypeError: …`, a traceback's last line, a FAILED line
_FIRST_ERROR = re.compile(r"^(?:E\s+)?((?:[A-Za-z_][\w.]*)?(?:Error|Exception|Exit|Interrupt)\b.*|FAILED .*)$")


def first_error(text: str) -> str | None:
    """The first error line of a test run's output (pytest's `E   TypeError: …`, `FAILED …`, a
    traceback's exception), or None."""
    for ln in plain(text).splitlines():
        m = _FIRST_ERROR.match(ln.strip())
        if m:
            return m.group(1)[:200]
    return None


def failure_summary(res: proc.ProcResult, box: Confinement | None = None, first: bool = False) -> str:
    """`exit 1: NameError: name 'x' is not defined`: the last meaningful line, for lessons;
    `first` (a guard): led by the first error the run reports, then its last line (a test
    runner's counts). In a sandbox (`box`), what to set when it failed for want of a writable
    path or the network."""
    head = res.describe()
    if res.timed_out or res.interrupted:
        return head
    hint = None
    if box is not None:
        hint = failure_hint(res.stderr_tail(4096) + "\n" + res.stdout_tail(4096), network=box.network)
    suffix = f" (hint: {hint})" if hint else ""
    lead = first_error(res.stdout_tail(16384) + "\n" + res.stderr_tail(16384)) if first else None
    for text in (res.stderr_tail(), res.stdout_tail()):
        lines = [ln.strip() for ln in plain(text).splitlines() if ln.strip()]
        if lines:
            last = lines[-1][:200]
            return f"{head}: {lead}; {last}{suffix}" if lead and lead != last else f"{head}: {last}{suffix}"
    return head + (f": {lead}" if lead else "") + suffix
