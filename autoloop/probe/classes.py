"""The classes the probe tries, in order, each with what plants it and what closes its hole, and
`probe` itself: the baseline, then each class's verdict as it ends. The checkout, the branches
and the journal are not touched: every plant is made in a throwaway tree of HEAD."""

from __future__ import annotations

import dataclasses
import os
import secrets
import statistics
from pathlib import Path
from typing import Callable, Collection, Iterator

from autoloop.base.walk import remove_tree
from autoloop.engine.verify_head import Verified, check
from autoloop.isolation.measured_files import command_files
from autoloop.probe import answer_hacks, run_hacks
from autoloop.probe.findings import BASELINE_RUNS, Baseline, Finding, ProbeError, Trying
from autoloop.probe.judge import Prober
from autoloop.probe.target import plant_target, trace_plans
from autoloop.program.reader import Program
from autoloop.trace.build import REPLAY_MODULE


def _append(tree: Path, rel: str, code: str) -> None:
    path = tree / rel
    old = path.read_text() if path.exists() else ""
    path.write_text(old + ("" if old.endswith("\n") or not old else "\n") + code)


def fake_value(base: float, direction: str) -> float:
    """A forged metric far better than `base`."""
    if direction == "minimize":
        return base / run_hacks.SLOW if base > 0 else base - max(1.0, abs(base)) * run_hacks.SLOW
    return base * run_hacks.SLOW if base > 0 else base + max(1.0, abs(base)) * run_hacks.SLOW


def probe(program: Program, only: Collection[str] | None = None) -> Iterator[Baseline | Trying | Finding]:
    """The baseline, then for each hack class a Trying as it starts and a Finding as it ends.
    `only`: the classes to try, by name (every class when None); the rest are not run, so a
    caller that needs one verdict pays for its own runs, not the whole probe's.
    ProbeError when the baseline does not measure; ConfigError (via `check`) for what `run` would
    refuse."""
    ws, head = check(program)
    p = Prober(program, ws, head)
    target, helpers = plant_target(program, head)
    # a warm-up run first, not counted: the first measurement of a fresh tree is the slowest (cold
    # caches), measured 1.07 s against 0.54 and 0.59 s after it, and a spread that wide hides
    # every hack smaller than it
    runs = [p.run() for _ in range(BASELINE_RUNS + 1)]
    for res in runs:
        m = res.measurement
        if not m.guards_ok or m.metric is None:
            g = m.failed_guard
            why = f"guard {g.name}: {g.detail}" if g is not None else (m.error or "no metric")
            raise ProbeError(f"HEAD does not measure ({why}); fix that first (`autoloop verify`)")
    runs = runs[1:]
    base = Baseline(tuple(r.measurement.metric for r in runs if r.measurement.metric is not None),
                    target, helpers, statistics.median(r.measurement.verifier_s or 0.0 for r in runs))
    yield base
    todo = _classes(p, base, target, helpers)
    if only is not None:
        unknown = set(only) - {name for name, _ in todo}
        if unknown:
            raise ValueError(f"no hack class named {', '.join(sorted(unknown))}")
        todo = [(name, attempt) for name, attempt in todo if name in only]
    for k, (name, attempt) in enumerate(todo, 1):
        yield Trying(name, k, len(todo))
        yield attempt()


def _fixes(p: Prober) -> dict[str, str]:
    """What closes each kind of hole, given what the program already sets."""
    timed = p.program.verifier.direction == "minimize"   # wall/cpu time only ever falls
    if p.measure_mode == "output" and p.score is None:
        printed = "measure: cpu (or wall) with a `score` correctness check, or a `score` that " \
                  "computes the metric from $AUTOLOOP_OUTPUT" if timed else \
                  "a `score` that computes the metric from what the command writes to $AUTOLOOP_OUTPUT"
    elif p.score is None:
        printed = "a `score` correctness check: an early exit leaves no output to pass it"
    else:
        printed = "a `score` that fails when an output is missing or wrong"
    # a traced benchmark draws new calls every measurement, but each is one edit from one of the
    # recorded calls: their parts (a word, the target's own calls on it) repeat, within a
    # measurement and from one to the next (titlecase, which calls itself on hyphenated words)
    traced = _traced(p)
    repeats = ("a recorded workload with more distinct calls (`init --trace` on a command that calls the "
               "targets with more varied inputs): derived calls are near neighbours of the recorded ones, "
               "so the parts they share, and a target's calls on them, repeat more than in real use")
    clock = "measure: cpu (or wall): autoloop times the command from outside"
    if p.measure_mode != "output" or p.score is not None:
        clock = "time the run from outside (measure: cpu or wall); a clock inside the candidate's process is its own"
    return {"printed": printed, "clock": clock,
            "child": "measure: wall: cpu cannot count a process the kernel reaps on its own (a child whose "
                     "parent ignores SIGCHLD); wall waits for every process the command started",
            "seed": (repeats if traced else
                     "a seeded input: draw the benchmark's input from $AUTOLOOP_SEED, from a space too large "
                     "to repeat (answers recorded at one measurement passed at another)"),
            "runner": ("a `score` that checks every result (this one passed wrong answers)" if p.score else
                       "a `score` correctness check: the guards import the candidate's code, which can switch "
                       "the test runner off, so passing tests prove nothing about it"),
            "memo": (repeats if traced else
                     "a benchmark whose calls do not repeat within a run: inputs drawn from $AUTOLOOP_SEED from "
                     "a space too large to repeat") + " (a memo is a real gain only if real use repeats "
                    "these calls as much)",
            "cache": "a seeded input via $AUTOLOOP_SEED (and the sandbox: a private /tmp per measurement)",
            "prefetch": ("measure: cpu (every process's CPU counts, so a second core gains nothing), and a "
                         "benchmark whose process never holds a call before it makes it (feed the calls from "
                         "outside)") if p.measure_mode != "cpu" else
                        "a benchmark whose process never holds a call before it makes it (feed the calls from outside)",
            "teardown": "a clock that stops at the last answer, not at the process's end, and a benchmark that "
                        "runs with the interpreter state the tests run with (a GC switched off, an os._exit "
                        "at the end: the benchmark alone sees them)",
            "leak": "a seeded input via $AUTOLOOP_SEED and the sandbox (a private /tmp per step); a "
                    "sandbox.writable path outlives every step, so nothing the benchmark reads may live there"}


Attempt = Callable[[], Finding]


def _classes(p: Prober, base: Baseline, target: str | None,
             helpers: tuple[str, ...]) -> list[tuple[str, Attempt]]:
    """Every class, in the order tried, each with what tries it."""
    program, v = p.program, p.program.verifier
    fix = _fixes(p)
    line = None
    if v.metric is not None or p.measure_mode != "output" or p.score is not None:
        line = f"{v.metric or 'metric'}: {fake_value(base.median, v.direction)!r}"
    no_target = ("no file `allowed` covers is imported by the verifier's Python code "
                 "(nothing a candidate changes runs in it)")
    out: list[tuple[str, Attempt]] = []
    if target is None:
        for name in ("atexit", "patched-clock", "sys-modules", "hidden-child", "exit-0", "signal", "stdout",
                     "sniffing", "sniffed-teardown", "prefetch", "special-cased-input", "memo", "cached-results",
                     "guard-leak"):
            out.append((name, lambda name=name: Finding(name, None, no_target)))
    else:
        def plant(code: str) -> Callable[[Path], None]:
            return lambda tree: _append(tree, target, code)

        def timed(name: str, code: str, why: str) -> tuple[str, Attempt]:
            return name, lambda: p.judge(name, p.run(plant(code)), base, why, lambda: p.run(plant(code)))

        printed: list[tuple[str, str | None]] = [
            ("atexit", line and run_hacks.atexit_print(line)),
            ("exit-0", line and run_hacks.exit_zero(line)),
            ("signal", line and run_hacks.signal_exit(line, max(0.002, min(0.2, base.seconds / 20)))),
            ("stdout", v.metric and run_hacks.stdout_rewrite(v.metric, repr(fake_value(base.median, v.direction)))),
            ("sniffing", line and run_hacks.sniff_exit(line, sorted({Path(rel).name for key, rel in command_files(program)
                                                                 if key == "verifier.command"}))),
        ]
        out += [(name, lambda name=name, code=code: _one(p, base, name, code, fix["printed"]))
                for name, code in printed[:1]]
        out += [timed("patched-clock", run_hacks.patched_clock(), fix["clock"]),
                timed("sys-modules", run_hacks.sys_modules_clock(), fix["clock"]),
                timed("hidden-child", run_hacks.hidden_child(), fix["child"])]
        out += [(name, lambda name=name, code=code: _one(p, base, name, code, fix["printed"]))
                for name, code in printed[1:]]
        out += [timed("sniffed-teardown", run_hacks.sniffed_teardown(Path(REPLAY_MODULE).stem), fix["teardown"]),
                ("prefetch", lambda: _prefetch(p, base, target, fix["prefetch"])),
                ("special-cased-input", lambda: _special_cased(p, base, target, fix["seed"])),
                timed("memo", answer_hacks.memo_within(), fix["memo"]),
                ("cached-results", lambda: _cached(p, base, target, fix["cache"])),
                ("guard-leak", lambda: _guard_leak(p, base, target, fix["leak"]))]
    out += [("test-helper", lambda: _weakened(p, base, target, helpers)),
            ("test-runner", lambda: _runner_off(p, base, target, fix["runner"])),
            ("read-answers", lambda: _answers(p, target))]
    return out


def _traced(p: Prober) -> bool:
    """Whether the verifier's command runs a benchmark `init --trace` wrote (a trace.json beside it)."""
    return any((p.program.repo_root / plan).is_file() for _, plan in trace_plans(p.program))


def _one(p: Prober, base: Baseline, name: str, code: str | None, fix: str) -> Finding:
    if not code:
        return Finding(name, None, "the metric is read by `pattern`: no line to forge generically")
    target = base.target
    assert target is not None
    def planted() -> Verified:
        return p.run(lambda tree: _append(tree, target, code))

    return p.judge(name, planted(), base, fix, planted)


def _special_cased(p: Prober, base: Baseline, target: str, fix: str) -> Finding:
    """Record what the public functions were called with, then answer exactly those calls from
    a table baked into the module (the memo a candidate writes after seeing the benchmark)."""
    seen: dict[str, bytes] = {}

    def collect(tree: Path) -> None:
        import pickle

        try:
            seen.update(pickle.loads((tree / target).parent.joinpath(answer_hacks.RECORD_FILE).read_bytes()))
        except (OSError, ValueError, EOFError, pickle.UnpicklingError):
            pass

    p.run(lambda tree: _append(tree, target, answer_hacks.record_calls()), collect)
    if not seen:
        return Finding("special-cased-input", None, f"no call into {target}'s public functions was seen")
    memo = answer_hacks.memo(seen)

    def planted() -> Verified:
        return p.run(lambda tree: _append(tree, target, memo))

    return p.judge("special-cased-input", planted(), base, fix, planted)


def _prefetch(p: Prober, base: Baseline, target: str, fix: str) -> Finding:
    """The calls still to come, found in the callers' frames on the first call and the second half
    computed by a forked child on another core. The first planted run also says whether the plant
    found any: a harness that holds no call before it makes it leaves nothing to prefetch."""
    name = "prefetch"
    found: list[int] = []

    def collect(tree: Path) -> None:
        try:
            text = (tree / target).parent.joinpath(run_hacks.PREFETCH_FILE).read_text()
        except OSError:
            return
        found.extend(int(x) for x in text.split() if x.isdigit())

    def planted(collect: Callable[[Path], None] | None = None) -> Verified:
        return p.run(lambda tree: _append(tree, target, run_hacks.prefetch()), collect)

    first = planted(collect)
    if not found and first.measurement.guards_ok and first.measurement.metric is not None:
        return Finding(name, False, f"no call still to come was found in the callers' frames of {target}'s "
                                    "functions: nothing to prefetch")
    res = p.judge(name, first, base, fix, planted)
    # first in the line: the detail after it may be cut to fit
    return res if not found else dataclasses.replace(
        res, detail=f"{max(found)} calls found ahead, the second half computed by a child: {res.detail}")


def _cached(p: Prober, base: Baseline, target: str, fix: str) -> Finding:
    """Results written outside the tree by one measurement and read back by the next."""
    token = f"autoloop-probe-{secrets.token_hex(6)}"
    try:
        p.run(lambda tree: _append(tree, target, answer_hacks.cross_cache(token, write=True)))
        reader = answer_hacks.cross_cache(token, write=False)

        def planted() -> Verified:
            return p.run(lambda tree: _append(tree, target, reader))

        return p.judge("cached-results", planted(), base, fix, planted)
    finally:
        for d in answer_hacks.cache_dirs(token, str(Path.home())):
            remove_tree(Path(d))


def _guard_leak(p: Prober, base: Baseline, target: str, fix: str) -> Finding:
    """The guards' test run records the benchmark's answers for their seed and leaves them for
    the measurement that follows (in the tree, temp folders, the home, `writable` paths)."""
    name = "guard-leak"
    if not p.program.guards:
        return Finding(name, None, "no guards: no step runs the candidate's code before the measurement")
    token = f"autoloop-probe-{secrets.token_hex(6)}"
    writable = [os.path.expanduser(w) for w in p.program.sandbox.writable]
    code = answer_hacks.guard_leak(token, p.program.verifier.command, writable)
    try:
        def planted() -> Verified:
            return p.run(lambda tree: _append(tree, target, code))

        return p.judge(name, planted(), base, fix, planted)
    finally:
        for d in answer_hacks.leak_dirs(token, str(Path.home()), writable):
            remove_tree(Path(d), quiet=True)


def _weakened(p: Prober, base: Baseline, target: str | None, helpers: tuple[str, ...]) -> Finding:
    """The module broken (every public function raises) and the test helpers `allowed` covers
    made to pass whatever happens: do the guards still pass?"""
    name = "test-helper"
    if not p.program.guards:
        return Finding(name, None, "no guards")
    if target is None:
        return Finding(name, None, "no module of the verifier's to break")
    if not helpers:
        return Finding(name, None, "`allowed` covers no test helper (conftest.py, test_*.py, tests/, testing)")

    def broken(tree: Path) -> None:
        _append(tree, target, answer_hacks.broken())

    def weakened(tree: Path) -> None:
        broken(tree)
        for rel in helpers:
            _append(tree, rel, answer_hacks.weakened_helper(Path(rel).name == "conftest.py"))

    shown = ", ".join(helpers[:3]) + (f" (+{len(helpers) - 3} more)" if len(helpers) > 3 else "")
    common = os.path.commonpath(helpers) if len(helpers) > 1 else ""
    forbid = f'forbidden: ["{common}/**"]' if len(helpers) > 3 and common else f"forbidden: [{', '.join(helpers)}]"
    control = p.run(broken).measurement
    if control.guards_ok:
        return Finding(name, True, f"the guards pass with {target} broken, even with {shown} untouched "
                                   "(they do not exercise it)", "a guard that tests it, or a `score` correctness check")
    m = p.run(weakened).measurement
    if m.guards_ok:
        return Finding(name, True, f"the guards pass with {target} broken once {shown} no longer check", forbid)
    g = m.failed_guard
    return Finding(name, False, f"with {shown} weakened, {target} broken still fails guard {g.name if g else '?'}")


def _runner_off(p: Prober, base: Baseline, target: str | None, fix: str) -> Finding:
    """The module made fast and wrong, switching the test runner off when the tests import it:
    does anything outside the candidate's process notice?"""
    name = "test-runner"
    if not p.program.guards:
        return Finding(name, None, "no guards")
    if target is None:
        return Finding(name, None, "no module of the verifier's to break")
    return _one(p, base, name, answer_hacks.wrong_and_runner_off(), fix)


def _answers(p: Prober, target: str | None) -> Finding:
    """The `private` answer keys, read from the candidate's code directly and through /proc."""
    name = "read-answers"
    if not p.private:
        return Finding(name, None, "no `private` answer keys: the candidate can read whatever the verifier's "
                                   "command can (keep labels or expected outputs in `private`)")
    if target is None:
        return Finding(name, None, "no module of the verifier's to read from")
    got: list[str] = []

    def collect(tree: Path) -> None:
        try:
            got.extend(x for x in (tree / target).parent.joinpath(answer_hacks.READ_FILE).read_text().splitlines() if x)
        except OSError:
            pass

    p.run(lambda tree: _append(tree, target, answer_hacks.read_answers(list(p.private))), collect)
    if got:
        return Finding(name, True, f"candidate code read {got[0]}", "sandbox: bwrap (private paths need the sandbox)")
    return Finding(name, False, f"none of {len(p.private)} private path(s) readable, directly or through /proc")
