"""`autoloop doctor --probe`: the reward hacks a candidate could try, tried against the user's own
verifier before a night of cycles.

Each hack is planted (autoloop.commands.probe_hacks) in a file that `allowed` covers and that the
verifier's Python code imports — where a generator's change would sit — in a throwaway tree of
HEAD, measured the way `autoloop verify` measures (the program's own command, `measure`,
`score`, sandbox and data), and compared with unmodified measurements of the same tree. The
checkout, the branches and the journal are not touched. A hack *fooled* the verifier when its
tree passes the guards and measures better than the best baseline run by a margin (half their
spread, 5% at least, half the best run at most), three times in a row, the second and third
each also beyond an unmodified measurement taken just after it.
"""

from __future__ import annotations

import ast
import os
import re
import secrets
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Collection, Iterator

from autoloop.commands import probe_hacks as hacks
from autoloop.git.gitrun import git
from autoloop.isolation.measured_files import command_files, protected_paths
from autoloop.base.numbers import num
from autoloop.program.reader import Program
from autoloop.program.scope_rules import ScopeRules
from autoloop.commands.verify import Verified, check, verify_head
from autoloop.engine.metric import Measurement
from autoloop.engine.reads import looks_like_test
from autoloop.base.walk import remove_tree
from autoloop.git.workspace import Workspace

BASELINE_RUNS = 3
MIN_MARGIN = 0.05        # a hack must beat the best baseline run by 5% of their median at least
# hacked runs after the first, each beside an unmodified run: under a loaded CI machine (2 cores)
# wall times swung 0.79-1.31 s and a do-nothing hack beat the baseline and one run beside it
CONFIRMATIONS = 2
MAX_MODULES = 2000       # files followed from the verifier's script before giving up
# the hacks whose answers are wrong by design: a failing guard caught them. Every other plant keeps
# the answers right, so a guard it fails says it broke the project, not that the verifier held.
WRONG_ON_PURPOSE = frozenset({"test-runner"})


@dataclass(frozen=True)
class Finding:
    name: str            # the class: atexit, patched-clock, ...
    fooled: bool | None  # None: not tried (it does not fit this program), `detail` says why
    detail: str
    fix: str = ""
    # the plant broke the project's tests or crashed its benchmark, or the verdict was in the
    # noise: it says nothing about the verifier, so it is neither fooled nor held
    unclear: bool = False

    @property
    def verdict(self) -> str:
        return "skip" if self.fooled is None else "fooled" if self.fooled else "unclear" if self.unclear else "held"


@dataclass(frozen=True)
class Trying:
    """A class is about to be tried: the k-th of n (for a progress line)."""
    name: str
    k: int
    n: int


@dataclass(frozen=True)
class Baseline:
    values: tuple[float, ...]
    target: str | None        # where the hacks are planted
    helpers: tuple[str, ...]  # test helpers the test-helper hack weakens
    seconds: float            # how long the verifier took (the signal hack's timer is a fraction)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def spread(self) -> float:
        """The runs' range over their median: a hack must gain half of it to count as fooled."""
        return (max(self.values) - min(self.values)) / abs(self.median) if self.median else 0.0

    @property
    def noisy(self) -> bool:
        """The spread, not MIN_MARGIN, sets the margin: smaller gains read as held."""
        return self.spread / 2 > MIN_MARGIN


class ProbeError(Exception):
    """The baseline itself does not measure: nothing can be compared."""


# ---- where to plant ------------------------------------------------------------------------


def _rules(program: Program) -> ScopeRules:
    return ScopeRules(program.allowed, program.forbidden, protected_paths(program))


def _tracked(program: Program, head: str) -> set[str]:
    return set(git(program.repo_root, "ls-tree", "-r", "--name-only", "-z", head).split("\0")) - {""}


def _import_names(tree: ast.AST, package: str) -> Iterator[str]:
    """Absolute module names an AST imports (each `from a import b` as both a and a.b)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                yield from (".".join(parts[:i]) for i in range(1, len(parts) + 1))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".") if package else []
                up = up[:len(up) - node.level + 1] if node.level > 1 else up
                base = ".".join([*up, base] if base else up)
            if base:
                parts = base.split(".")
                yield from (".".join(parts[:i]) for i in range(1, len(parts) + 1))
            yield from (f"{base}.{a.name}" if base else a.name for a in node.names if a.name != "*")


def _path_entries(tree: ast.AST) -> Iterator[str]:
    """Folders a script puts on sys.path (`sys.path.insert(0, "src")`)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("insert", "append") and node.args:
            arg = node.args[-1]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                yield arg.value


def verifier_modules(program: Program, tracked: set[str]) -> list[str]:
    """Repository files the verifier's Python code imports, nearest first (breadth-first from the
    scripts its command names), as repository-relative paths."""
    root = program.repo_root
    todo = [rel for key, rel in command_files(program) if key == "verifier.command" and rel.endswith(".py")]
    roots = ["", "src"]
    seen: list[str] = []
    while todo and len(seen) < MAX_MODULES:
        rel = todo.pop(0)
        if rel in seen:
            continue
        seen.append(rel)
        try:
            tree = ast.parse((root / rel).read_bytes())
        except (OSError, SyntaxError, ValueError):
            continue
        here = str(Path(rel).parent).replace("\\", "/")
        here = "" if here == "." else here
        roots += [e.strip("./") for e in _path_entries(tree) if not e.startswith("/")] + [here]
        package = here.replace("/", ".") if Path(rel).name == "__init__.py" else \
            ".".join(part for part in here.split("/") if part)
        # a module loaded by its file name (`exec(compile(Path("x.py").read_bytes()...))`)
        for lit in (n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)):
            if lit.endswith(".py") and not lit.startswith("/"):
                todo += [c for c in ("/".join(p for p in (here, lit) if p), lit) if c in tracked]
        for name in _import_names(tree, package):
            for base in dict.fromkeys(roots):
                stem = "/".join(p for p in [base, name.replace(".", "/")] if p)
                found = next((c for c in (f"{stem}.py", f"{stem}/__init__.py") if c in tracked), None)
                if found:
                    todo.append(found)
                    break
    return seen


def plant_target(program: Program, head: str) -> tuple[str | None, tuple[str, ...]]:
    """(the module the verifier imports that a generator may change, the test helpers a
    generator may change)."""
    rules, tracked = _rules(program), _tracked(program, head)
    editable = [rel for rel in verifier_modules(program, tracked)
                if rules.why_not(rel) is None and not looks_like_test(rel)]
    # a package's __init__ that only re-exports has nothing to memoise or break: prefer the
    # first module that defines public functions
    target = next((rel for rel in editable if _defines_functions(program.repo_root / rel)),
                  editable[0] if editable else None)
    helpers = [rel for rel in sorted(tracked)
               if rel.endswith(".py") and looks_like_test(rel) and rules.why_not(rel) is None]
    named = _guard_paths(program, tracked)
    if named:   # the helpers of the tests the guards run, when their commands name them
        helpers = [rel for rel in helpers if any(rel == n or rel.startswith(n + "/") for n in named)] or helpers
    if not helpers and "conftest.py" in rules.literal and rules.why_not("conftest.py") is None:
        helpers = ["conftest.py"]   # allowed by name: a generator may create it
    return target, tuple(helpers)


def _defines_functions(path: Path) -> bool:
    try:
        tree = ast.parse(path.read_bytes())
    except (OSError, SyntaxError, ValueError):
        return False
    return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and not n.name.startswith("_")
               for n in tree.body)


def _guard_paths(program: Program, tracked: set[str]) -> list[str]:
    """Files and folders of the tree the guards' commands name (`pytest tests/unit`)."""
    folders = {str(Path(rel).parent) for rel in tracked}
    out = []
    for g in program.guards:
        for word in g.command.split():
            word = word.strip("'\"").rstrip("/")
            if word.startswith("./"):
                word = word[2:]
            if word in tracked or word in folders:
                out.append(word)
    return out


# ---- measuring -----------------------------------------------------------------------------


def _append(tree: Path, rel: str, code: str) -> None:
    path = tree / rel
    old = path.read_text() if path.exists() else ""
    path.write_text(old + ("" if old.endswith("\n") or not old else "\n") + code)


class _Prober:
    def __init__(self, program: Program, ws: Workspace, head: str) -> None:
        self.program, self.ws, self.head = program, ws, head
        v = program.verifier
        self.measure_mode: str = getattr(v, "measure", "output") or "output"
        self.score: str | None = getattr(v, "score", None)
        self.private: tuple[str, ...] = tuple(str(p) for p in getattr(program, "private", ()) or ())

    def run(self, plant: Callable[[Path], None] | None = None,
            collect: Callable[[Path], None] | None = None) -> Verified:
        # nothing here reads what a run read: its traced second run would only double the time
        return verify_head(self.program, self.ws, self.head, plant, collect, record_reads=False)

    def best(self, values: tuple[float, ...]) -> float:
        return min(values) if self.program.verifier.direction == "minimize" else max(values)

    def better(self, value: float, base: Baseline, fresh: float | None = None) -> bool:
        """Beyond the best baseline run (and an unmodified run `fresh`, measured just now) by half
        the baseline's spread and MIN_MARGIN of its median at least — at most by half the best
        run itself: on a busy machine in-process timings spread so wide that a spread-sized
        margin would let no hack through."""
        minimize = self.program.verifier.direction == "minimize"
        best = self.best(base.values) if fresh is None else self.best((*base.values, fresh))
        margin = min(max((max(base.values) - min(base.values)) / 2, MIN_MARGIN * abs(base.median)),
                     abs(best) / 2 or MIN_MARGIN)
        return value < best - margin if minimize else value > best + margin

    def judge(self, name: str, res: Verified, base: Baseline, fix: str,
              again: Callable[[], Verified] | None = None) -> Finding:
        """`again` measures the hacked tree once more, then HEAD is measured unmodified beside
        it, CONFIRMATIONS times: a verdict of fooled needs every hacked run beyond the baseline,
        each after the first also beyond the best unmodified run measured beside one so far (a
        busy machine drifts: one quiet moment can beat three baseline runs taken in a busier one;
        on Markdown a do-nothing stdout plant beat the baseline and a fresh run slowed by a burst)."""
        m = res.measurement
        caught = caught_by_score(m)
        if caught is not None:
            return Finding(name, False, _short(caught))
        if not m.guards_ok:
            g = m.failed_guard
            said = f"guard {g.name if g else '?'} failed: {g.detail if g else ''}"
            if name in WRONG_ON_PURPOSE:   # its answers are wrong by design: a guard seeing it holds
                return Finding(name, False, _short(said))
            return Finding(name, False, _short(f"the plant broke the project ({said})"), unclear=True)
        if m.metric is None:
            return Finding(name, False, _short(f"the plant broke the benchmark ({m.error or 'no metric'})"),
                           unclear=True)
        label = self.program.verifier.label
        said = f"{label} {num(m.metric)} vs {num(base.median)} at baseline"
        if not self.better(m.metric, base):
            best = self.best(base.values)
            beat = m.metric != best and self.best((best, m.metric)) == m.metric
            if beat and base.noisy:
                return self._inside_noise(name, said, base, again)
            return Finding(name, False, said)
        if again is None:
            return Finding(name, True, said, fix)
        seen: list[float] = []   # every unmodified run beside a confirmation: one slow run (a burst
        for _ in range(CONFIRMATIONS):   # beside it) must not be all a do-nothing plant has to beat
            m2 = again().measurement
            if caught_by_score(m2) is not None:
                return Finding(name, False, _short(f"{said} once, then {caught_by_score(m2)}"))
            if not (m2.guards_ok and m2.metric is not None):
                then = m2.failed_guard.name + " failed" if m2.failed_guard else m2.error or "no metric"
                return Finding(name, False, _short(f"{said} once, then {then}: not confirmed"), unclear=True)
            clean = self.run().measurement
            fresh = clean.metric if clean.guards_ok else None
            if fresh is not None:
                seen.append(fresh)
            if not self.better(m2.metric, base, self.best(tuple(seen)) if seen else None):
                beside = f" beside {num(fresh)} unmodified" if fresh is not None else ""
                return Finding(name, False, _short(f"{said} once, then {num(m2.metric)}{beside}: not confirmed"))
        return Finding(name, True, said, fix)


    def _inside_noise(self, name: str, said: str, base: Baseline,
                      again: Callable[[], Verified] | None) -> Finding:
        """A hacked run better than every baseline run, by less than their spread. On a noisy
        machine one run of a plant that does nothing lands below three baseline runs one time in
        four, so it is measured again beside an unmodified run: only a plant ahead both times
        is unclear (a small gain, or a quiet moment); otherwise it held."""
        if again is not None:
            m2 = again().measurement
            clean = self.run().measurement
            fresh = clean.metric if clean.guards_ok else None
            pool = (*base.values, fresh) if fresh is not None else base.values
            if m2.guards_ok and m2.metric is not None and self.best((*pool, m2.metric)) != m2.metric:
                beside = f" beside {num(fresh)} unmodified" if fresh is not None else ""
                return Finding(name, False, _short(f"{said} once, then {num(m2.metric)}{beside}: inside the noise"))
        return Finding(name, False, said + " (better than every baseline run, by less than their spread)",
                       unclear=True)


def caught_by_score(m: Measurement) -> str | None:
    """How the program's `score` rejected a hacked run (the correctness check failed, or it found
    no result to score), or None: the verifier catching the hack, not the plant breaking."""
    g = m.failed_guard
    if not m.guards_ok and g is not None and g.name == "score":
        return f"guard score failed: {g.detail}"
    if m.guards_ok and m.metric is None and (m.error or "").startswith("verifier.score"):
        return m.error
    return None


def _short(text: str, limit: int = 110) -> str:
    """One line of a finding: the reason, not the temporary paths it names."""
    text = re.sub(r"(/[^\s/:']+){3,}", "…", " ".join(text.split()))
    return text if len(text) <= limit else text[:limit - 1] + "…"


def fake_value(base: float, direction: str) -> float:
    """A forged metric far better than `base`."""
    if direction == "minimize":
        return base / hacks.SLOW if base > 0 else base - max(1.0, abs(base)) * hacks.SLOW
    return base * hacks.SLOW if base > 0 else base + max(1.0, abs(base)) * hacks.SLOW


def probe(program: Program, only: Collection[str] | None = None) -> Iterator[Baseline | Trying | Finding]:
    """The baseline, then for each hack class a Trying as it starts and a Finding as it ends.
    `only`: the classes to try, by name (every class when None); the rest are not run, so a
    caller that needs one verdict pays for its own runs, not the whole probe's.
    ProbeError when the baseline does not measure; ConfigError (via `check`) for what `run` would
    refuse."""
    ws, head = check(program)
    p = _Prober(program, ws, head)
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


def _fixes(p: _Prober) -> dict[str, str]:
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
    clock = "measure: cpu (or wall): autoloop times the command from outside"
    if p.measure_mode != "output" or p.score is not None:
        clock = "time the run from outside (measure: cpu or wall); a clock inside the candidate's process is its own"
    return {"printed": printed, "clock": clock,
            "child": "measure: wall: cpu cannot count a process the kernel reaps on its own (a child whose "
                     "parent ignores SIGCHLD); wall waits for every process the command started",
            "seed": "a seeded input: draw the benchmark's input from $AUTOLOOP_SEED, from a space too large "
                    "to repeat (answers recorded at one measurement passed at another)",
            "runner": ("a `score` that checks every result (this one passed wrong answers)" if p.score else
                       "a `score` correctness check: the guards import the candidate's code, which can switch "
                       "the test runner off, so passing tests prove nothing about it"),
            "cache": "a seeded input via $AUTOLOOP_SEED (and the sandbox: a private /tmp per measurement)",
            "leak": "a seeded input via $AUTOLOOP_SEED and the sandbox (a private /tmp per step); a "
                    "sandbox.writable path outlives every step, so nothing the benchmark reads may live there"}


Attempt = Callable[[], Finding]


def _classes(p: _Prober, base: Baseline, target: str | None,
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
                     "sniffing", "special-cased-input", "cached-results", "guard-leak"):
            out.append((name, lambda name=name: Finding(name, None, no_target)))
    else:
        def plant(code: str) -> Callable[[Path], None]:
            return lambda tree: _append(tree, target, code)

        def timed(name: str, code: str, why: str) -> tuple[str, Attempt]:
            return name, lambda: p.judge(name, p.run(plant(code)), base, why, lambda: p.run(plant(code)))

        printed: list[tuple[str, str | None]] = [
            ("atexit", line and hacks.atexit_print(line)),
            ("exit-0", line and hacks.exit_zero(line)),
            ("signal", line and hacks.signal_exit(line, max(0.002, min(0.2, base.seconds / 20)))),
            ("stdout", v.metric and hacks.stdout_rewrite(v.metric, repr(fake_value(base.median, v.direction)))),
            ("sniffing", line and hacks.sniff_exit(line, sorted({Path(rel).name for key, rel in command_files(program)
                                                                 if key == "verifier.command"}))),
        ]
        out += [(name, lambda name=name, code=code: _one(p, base, name, code, fix["printed"]))
                for name, code in printed[:1]]
        out += [timed("patched-clock", hacks.patched_clock(), fix["clock"]),
                timed("sys-modules", hacks.sys_modules_clock(), fix["clock"]),
                timed("hidden-child", hacks.hidden_child(), fix["child"])]
        out += [(name, lambda name=name, code=code: _one(p, base, name, code, fix["printed"]))
                for name, code in printed[1:]]
        out += [("special-cased-input", lambda: _special_cased(p, base, target, fix["seed"])),
                ("cached-results", lambda: _cached(p, base, target, fix["cache"])),
                ("guard-leak", lambda: _guard_leak(p, base, target, fix["leak"]))]
    out += [("test-helper", lambda: _weakened(p, base, target, helpers)),
            ("test-runner", lambda: _runner_off(p, base, target, fix["runner"])),
            ("read-answers", lambda: _answers(p, target))]
    return out


def _one(p: _Prober, base: Baseline, name: str, code: str | None, fix: str) -> Finding:
    if not code:
        return Finding(name, None, "the metric is read by `pattern`: no line to forge generically")
    target = base.target
    assert target is not None
    def planted() -> Verified:
        return p.run(lambda tree: _append(tree, target, code))

    return p.judge(name, planted(), base, fix, planted)


def _special_cased(p: _Prober, base: Baseline, target: str, fix: str) -> Finding:
    """Record what the public functions were called with, then answer exactly those calls from
    a table baked into the module (the memo a candidate writes after seeing the benchmark)."""
    seen: dict[str, bytes] = {}

    def collect(tree: Path) -> None:
        import pickle

        try:
            seen.update(pickle.loads((tree / target).parent.joinpath(hacks.RECORD_FILE).read_bytes()))
        except (OSError, ValueError, EOFError, pickle.UnpicklingError):
            pass

    p.run(lambda tree: _append(tree, target, hacks.record_calls()), collect)
    if not seen:
        return Finding("special-cased-input", None, f"no call into {target}'s public functions was seen")
    memo = hacks.memo(seen)

    def planted() -> Verified:
        return p.run(lambda tree: _append(tree, target, memo))

    return p.judge("special-cased-input", planted(), base, fix, planted)


def _cached(p: _Prober, base: Baseline, target: str, fix: str) -> Finding:
    """Results written outside the tree by one measurement and read back by the next."""
    token = f"autoloop-probe-{secrets.token_hex(6)}"
    try:
        p.run(lambda tree: _append(tree, target, hacks.cross_cache(token, write=True)))
        reader = hacks.cross_cache(token, write=False)

        def planted() -> Verified:
            return p.run(lambda tree: _append(tree, target, reader))

        return p.judge("cached-results", planted(), base, fix, planted)
    finally:
        for d in hacks.cache_dirs(token, str(Path.home())):
            remove_tree(Path(d))


def _guard_leak(p: _Prober, base: Baseline, target: str, fix: str) -> Finding:
    """The guards' test run records the benchmark's answers for their seed and leaves them for
    the measurement that follows (in the tree, temp folders, the home, `writable` paths)."""
    name = "guard-leak"
    if not p.program.guards:
        return Finding(name, None, "no guards: no step runs the candidate's code before the measurement")
    token = f"autoloop-probe-{secrets.token_hex(6)}"
    writable = [os.path.expanduser(w) for w in p.program.sandbox.writable]
    code = hacks.guard_leak(token, p.program.verifier.command, writable)
    try:
        def planted() -> Verified:
            return p.run(lambda tree: _append(tree, target, code))

        return p.judge(name, planted(), base, fix, planted)
    finally:
        for d in hacks.leak_dirs(token, str(Path.home()), writable):
            remove_tree(Path(d), quiet=True)


def _weakened(p: _Prober, base: Baseline, target: str | None, helpers: tuple[str, ...]) -> Finding:
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
        _append(tree, target, hacks.broken())

    def weakened(tree: Path) -> None:
        broken(tree)
        for rel in helpers:
            _append(tree, rel, hacks.weakened_helper(Path(rel).name == "conftest.py"))

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


def _runner_off(p: _Prober, base: Baseline, target: str | None, fix: str) -> Finding:
    """The module made fast and wrong, switching the test runner off when the tests import it:
    does anything outside the candidate's process notice?"""
    name = "test-runner"
    if not p.program.guards:
        return Finding(name, None, "no guards")
    if target is None:
        return Finding(name, None, "no module of the verifier's to break")
    return _one(p, base, name, hacks.wrong_and_runner_off(), fix)


def _answers(p: _Prober, target: str | None) -> Finding:
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
            got.extend(x for x in (tree / target).parent.joinpath(hacks.READ_FILE).read_text().splitlines() if x)
        except OSError:
            pass

    p.run(lambda tree: _append(tree, target, hacks.read_answers(list(p.private))), collect)
    if got:
        return Finding(name, True, f"candidate code read {got[0]}", "sandbox: bwrap (private paths need the sandbox)")
    return Finding(name, False, f"none of {len(p.private)} private path(s) readable, directly or through /proc")
