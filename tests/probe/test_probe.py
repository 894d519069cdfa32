"""`autoloop doctor --probe`: the reward hacks tried against the program's own verifier in a
throwaway tree. A verifier that reads the number the candidate's process prints is reported
fooled (exit 1) with the setting that closes each hole; the sealed setup (`measure: cpu` and a
seeded `score`) holds against every hack (exit 0). Nothing of the repository changes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from autoloop.probe.findings import Finding
from tests.conftest import git as git_in
from tests.scripts.e2e import git, repo_state
from tests.scripts.sealed import FORGED_FILES, SPEED_FILES, make, ml_data, ml_files, ml_program, speed_program

PROBE_TIMEOUT = 900
# A real probe runs the verifier some 20 to 60 times: `slow` (not in the quick tier), and one
# probe at a time (`xdist_group("probe")`, with the example's in test_examples.py). A test that
# asserts a plant doing nothing faster *held* (or not fooled) under wall-clock time (the
# in-process timer of `measure: output`, or `measure: wall`) is also `timing`: no other test runs
# beside it, whose bursts could make the plant look faster. A verdict of fooled for a plant
# that measures next to nothing against the loop's second (a forged number, a divided clock, a
# remembered answer) rests on no such luck, and `measure: cpu` and an accuracy metric are not
# wall-clock time: those share the machine. So the probes of the suite's one timing-free setup
# run whole beside other tests, and the one verdict of that setup that is timing, the sandbox
# holding against cached results, is asserted by a timing run of that class alone.


def _lines(out: str) -> dict[str, tuple[str, str]]:
    """class -> (fooled|held|unclear|skip, the rest of its line)."""
    found = {}
    for line in out.splitlines():
        parts = line.split(None, 2)
        if len(parts) == 3 and parts[0] in ("fooled", "held", "unclear", "skip"):
            found[parts[1]] = (parts[0], parts[2])
    return found


def _probe(tmp_path: Path, files: dict[str, str], program: str,
           only: tuple[str, ...] = ()) -> tuple[int, dict[str, tuple[str, str]], str]:
    """`autoloop doctor --probe` on a new project: (exit status, its lines by class, its output).
    With `only`, the same printing in this process for those classes alone (the rest are not
    run: a test pays for the verdicts it asserts, not the whole probe's)."""
    p = make(tmp_path / "p", files, program)
    before = repo_state(p.repo, p.env)
    if only:
        import contextlib
        import io

        from autoloop.commands.probe import print_probe
        from autoloop.probe import classes
        from autoloop.program.reader import load_program

        whole, stdout, stderr = classes.probe, io.StringIO(), io.StringIO()
        classes.probe = lambda program: whole(program, only)   # type: ignore[assignment]
        try:
            with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
                code = print_probe(load_program(p.repo / "program.md"))
        finally:
            classes.probe = whole   # type: ignore[assignment]
        printed, out = stdout.getvalue(), stdout.getvalue() + stderr.getvalue()
    else:
        res = p.cli("doctor", "--probe", timeout=PROBE_TIMEOUT)
        code, printed, out = res.returncode, res.stdout, res.stdout + res.stderr
    assert repo_state(p.repo, p.env) == before, "the probe changed the repository"
    worktrees = git(p.repo, "worktree", "list", "--porcelain", env=p.env).count("worktree ")
    assert worktrees == 1, f"the probe left worktrees behind:\n{out}"
    return code, _lines(printed), out


OUTPUT_PROGRAM = speed_program("output", allowed='[lib.py, "tests/**"]')


@pytest.mark.slow
@pytest.mark.xdist_group("probe")
def test_output_mode_is_fooled_and_each_fix_is_named(tmp_path: Path) -> None:
    """The classes this setup's verdicts are asserted for (the rest have tests of their own:
    hidden-child under cpu, cached-results by a timing run, the others in the sealed probe)."""
    code, lines, out = _probe(tmp_path, FORGED_FILES, OUTPUT_PROGRAM, only=(
        "atexit", "patched-clock", "sys-modules", "exit-0", "signal", "stdout", "special-cased-input",
        "test-helper", "test-runner", "read-answers"))
    assert code == 1, out
    assert "planted in lib.py" in out
    for name in ("atexit", "exit-0", "stdout", "signal"):
        assert lines[name][0] == "fooled" and "fix: measure: cpu (or wall) with a `score`" in lines[name][1], out
    for name in ("patched-clock", "sys-modules"):
        assert lines[name][0] == "fooled" and "fix: measure: cpu (or wall)" in lines[name][1], out
    # the benchmark's input is fixed: answers remembered for it pass
    assert lines["special-cased-input"][0] == "fooled" and "$AUTOLOOP_SEED" in lines["special-cased-input"][1], out
    # a seed is not enough when the inputs it draws repeat: the fix says so
    assert "too large to repeat" in lines["special-cased-input"][1], out
    # tests/helpers.py is the generator's to change: the tests then pass with lib.py broken
    state, detail = lines["test-helper"]
    assert state == "fooled" and "fix: forbidden: [tests/__init__.py, tests/helpers.py, tests/test_lib.py]" in detail, out
    # (cached-results, which must hold here, is asserted by a timing run below)
    # lib.py made wrong, switching pytest off when the tests import it: they pass, and the
    # benchmark times the wrong answers
    assert lines["test-runner"][0] == "fooled" and "fix: a `score` correctness check" in lines["test-runner"][1], out
    assert lines["read-answers"][0] == "skip", out
    # the last line of stdout (stderr carries the progress lines): the count and the time taken
    last = [ln for ln in out.splitlines() if ln.startswith("probe: ") and "trying" not in ln][-1]
    assert "fooled the verifier: a run could keep them (" in last, out


def _probe_only(tmp_path: Path, files: dict[str, str], program: str, *only: str) -> dict[str, Finding]:
    """The real probe (its baseline, then real runs of each class named), in this process: the
    verdicts a test needs of a setup, without the runs of every other class."""
    from autoloop.probe.classes import probe
    from autoloop.program.reader import load_program

    p = make(tmp_path / "p", files, program)
    before = repo_state(p.repo, p.env)
    found = {item.name: item for item in probe(load_program(p.repo / "program.md"), only)
             if isinstance(item, Finding)}
    assert repo_state(p.repo, p.env) == before, "the probe changed the repository"
    worktrees = git(p.repo, "worktree", "list", "--porcelain", env=p.env).count("worktree ")
    assert worktrees == 1, "the probe left worktrees behind"
    assert sorted(found) == sorted(only), found
    return found


@pytest.mark.slow
@pytest.mark.xdist_group("probe")
def test_forbidden_test_helpers_leave_nothing_to_weaken(tmp_path: Path) -> None:
    found = _probe_only(tmp_path, FORGED_FILES, speed_program("output", forbidden='["tests/**"]',
                                                             allowed='[lib.py, "tests/**"]'),
                        "test-helper", "test-runner")
    assert found["test-helper"].verdict == "skip" and "covers no test helper" in found["test-helper"].detail, found
    # forbidden test files do not stop the module the tests import from switching the runner off
    assert found["test-runner"].verdict == "fooled", found


@pytest.mark.timing
@pytest.mark.slow
@pytest.mark.xdist_group("probe")
def test_the_sandbox_forgets_results_cached_across_measurements(tmp_path: Path) -> None:
    """The setup of test_output_mode_is_fooled_and_each_fix_is_named: the sandbox gives each
    measurement its own /tmp and a read-only home, so nothing one measurement caches survives for
    the next and the plant is no faster: held."""
    found = _probe_only(tmp_path, SPEED_FILES, OUTPUT_PROGRAM, "cached-results")
    # a surviving cache would be a gain far beyond the noise (fooled, as unsandboxed below); a
    # plant that does nothing stays ahead of three re-checks beside unmodified runs one time in
    # eight on a noisy machine: unclear, said so, never broken
    finding = found["cached-results"]
    assert finding.verdict == "held" or (finding.verdict == "unclear" and "by less than their spread"
                                         in finding.detail), found


@pytest.mark.slow
@pytest.mark.xdist_group("probe")
def test_unsandboxed_results_cached_across_measurements_fool_it(tmp_path: Path) -> None:
    found = _probe_only(tmp_path, FORGED_FILES, speed_program("output", sandbox="sandbox: none\n"), "cached-results")
    assert found["cached-results"].verdict == "fooled", found
    assert "$AUTOLOOP_SEED" in found["cached-results"].fix
    assert not list(Path("/tmp").glob("autoloop-probe-*")), "the probe left its cache in /tmp"


@pytest.mark.timing
@pytest.mark.slow
@pytest.mark.xdist_group("probe")
def test_sealed_speed_setup_holds_against_every_hack(tmp_path: Path) -> None:
    """measure: wall (the speed template's) + a score that checks answers for inputs drawn from
    $AUTOLOOP_SEED: every hack held but the prefetch, which a free second core can make pay."""
    code, lines, out = _probe(tmp_path, SPEED_FILES, speed_program("wall"))
    # but the prefetch: produce.py holds its calls in its own process, and under wall time a
    # child computing some of them on a free second core is a gain (docs/trust/hacks.md)
    assert "calls found ahead" in lines["prefetch"][1], out
    fooled = [name for name, (state, _) in lines.items() if state == "fooled"]
    assert fooled in ([], ["prefetch"]) and code == (1 if fooled else 0), out
    for name in ("atexit", "patched-clock", "sys-modules", "hidden-child", "exit-0", "signal", "stdout",
                 "sniffing", "sniffed-teardown", "special-cased-input", "memo", "cached-results", "guard-leak",
                 "test-runner"):
        # a loaded machine's spread can leave a do-nothing plant inside the noise: unclear, said
        # so; never a plant that broke the project, which would say nothing of this verifier
        state, detail = lines[name]
        assert state == "held" or (state == "unclear" and "by less than their spread" in detail), out
    # the score finds the wrong answers the switched-off tests let through
    assert "guard score failed" in lines["test-runner"][1], out
    assert fooled or "every hack tried was caught" in out or "no hack fooled the verifier" in out, out


@pytest.fixture(scope="module")
def cpu_probe(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, tuple[str, str]], str]:
    """`doctor --probe` of the sealed speed setup under `measure: cpu` (every class), run once:
    the tests of that setup's verdicts read its lines."""
    return _probe(tmp_path_factory.mktemp("cpu-probe"), SPEED_FILES, speed_program("cpu"))


@pytest.mark.slow
@pytest.mark.xdist_group("probe")
def test_cpu_time_misses_a_child_the_kernel_reaps(cpu_probe: tuple[int, dict[str, tuple[str, str]], str]) -> None:
    """The one hole `measure: cpu` keeps (docs/trust.md): the work in a child whose parent ignores
    SIGCHLD is reaped by the kernel with no tally. The probe finds it and names wall."""
    code, lines, out = cpu_probe
    assert code == 1, out
    assert lines["hidden-child"][0] == "fooled" and "fix: measure: wall" in lines["hidden-child"][1], out
    assert [name for name, (state, _) in lines.items() if state == "fooled"] == ["hidden-child"], out


@pytest.mark.slow
@pytest.mark.xdist_group("probe")
def test_private_labels_are_out_of_the_candidates_reach(tmp_path: Path) -> None:
    labels = tmp_path / "labels"
    labels.mkdir()
    (labels / "test_y.json").write_text(json.dumps(ml_data()[1]))
    code, lines, out = _probe(tmp_path, ml_files(with_labels=False), ml_program("sealed", labels))
    assert lines["read-answers"][0] == "held" and "none of 1 private path" in lines["read-answers"][1], out
    assert code == 0, out


def test_the_hacks_go_where_a_generator_change_would_run(make_repo) -> None:  # type: ignore[no-untyped-def]
    """Breadth-first from the verifier's script: past a package __init__ that only re-exports,
    into the first module that defines functions; a module loaded by file name counts; the test
    helpers are those of the tests the guard runs."""
    from autoloop.probe.target import plant_target
    from autoloop.program.reader import load_program

    repo = make_repo({
        "bench/run.py": "import sys\nsys.path.insert(0, '.')\nimport pkg\nprint('seconds: 1')\n",
        "bench/by_name.py": "from pathlib import Path\nexec(compile(Path('loaded.py').read_bytes(), 'x', 'exec'))\n",
        "pkg/__init__.py": "from .core import *\nfrom . import util\n",
        "pkg/core.py": "from .util import helper\ndef solve(n):\n    return helper(n)\n",
        "pkg/util.py": "def helper(n):\n    return n\n",
        "loaded.py": "def f():\n    return 1\n",
        "pkg/tests/test_core.py": "def test_x():\n    assert True\n",
        "other/tests/test_y.py": "def test_y():\n    assert True\n",
    })
    head = git_in(repo, "rev-parse", "HEAD")

    def program(command: str, allowed: str) -> object:
        (repo / "program.md").write_text(
            f"---\ngoal: g\nallowed: {allowed}\nverifier: {{command: {command}, metric: seconds, "
            "direction: minimize}\nguards: ['python -m pytest -q pkg/tests']\n---\nx\n")
        return load_program(repo / "program.md")

    target, helpers = plant_target(program("python bench/run.py", '["pkg/**", "other/**"]'), head)
    assert target == "pkg/core.py"
    assert helpers == ("pkg/tests/test_core.py",)
    assert plant_target(program("python bench/run.py", '["pkg/util.py"]'), head) == ("pkg/util.py", ())
    assert plant_target(program("python bench/by_name.py", "[loaded.py]"), head) == ("loaded.py", ())
    assert plant_target(program("python bench/run.py", "[loaded.py]"), head) == (None, ())


def test_a_noisy_baseline_is_said_and_a_gain_inside_its_spread_is_not_called_plainly_held(
        monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    """Runs of 1.0, 1.5 and 2.0 s: a hack measuring 0.8 s beats every one of them but not by half
    their spread; the probe cannot tell, and says so rather than reporting it held."""
    from types import SimpleNamespace

    from autoloop.commands import probe as probe_cmd
    from autoloop.probe import classes
    from autoloop.probe.findings import Baseline
    from autoloop.probe.judge import Prober

    base = Baseline((1.0, 1.5, 2.0), "lib.py", (), 1.5)
    assert base.noisy and round(base.spread, 3) == 0.667
    assert not Baseline((1.0, 1.02, 1.05), "lib.py", (), 1.0).noisy
    prober = object.__new__(Prober)
    prober.program = SimpleNamespace(verifier=SimpleNamespace(direction="minimize", label="seconds"))

    def result(metric: float) -> object:
        return SimpleNamespace(measurement=SimpleNamespace(guards_ok=True, metric=metric, failed_guard=None))

    prober.run = lambda plant=None, collect=None: result(1.5)   # type: ignore[method-assign]
    unclear = prober.judge("atexit", result(0.8), base, "fix", lambda: result(0.8))   # type: ignore[arg-type]
    assert unclear.verdict == "unclear" and "by less than their spread" in unclear.detail
    plain = prober.judge("atexit", result(1.2), base, "fix", lambda: result(1.2))   # type: ignore[arg-type]
    assert plain.verdict == "held" and "spread" not in plain.detail
    # measured again, each time beside an unmodified run: a plant ahead once by luck then behind
    # is held; one ahead in every re-check (three) stays unclear
    prober.run = lambda plant=None, collect=None: result(0.9)   # type: ignore[method-assign]
    lucky = prober.judge("atexit", result(0.8), base, "fix", lambda: result(1.1))   # type: ignore[arg-type]
    assert lucky.verdict == "held" and "then 1.1 beside 0.9 unmodified: inside the noise" in lucky.detail
    twice = prober.judge("atexit", result(0.8), base, "fix", lambda: result(0.85))   # type: ignore[arg-type]
    assert twice.verdict == "unclear" and "by less than their spread" in twice.detail
    # each re-check is its own pair: a plant ahead twice, then behind the run beside it, held
    # (whatever the baseline, measured earlier in a busier moment, said)
    later, calls = iter([0.85, 0.85, 0.95]), []
    prober.run = lambda plant=None, collect=None: calls.append(1) or result(0.9)   # type: ignore[method-assign]
    third = prober.judge("atexit", result(0.8), base, "fix", lambda: result(next(later)))   # type: ignore[arg-type]
    assert third.verdict == "held" and "then 0.95 beside 0.9 unmodified" in third.detail and len(calls) == 3
    # a plant far ahead of the baseline is confirmed beside unmodified runs, and every one of
    # them counts: an unmodified run slowed by a burst is not all the plant has to beat
    fresh, hacked = iter([0.9, 5.0]), iter([0.1, 0.47])
    prober.run = lambda plant=None, collect=None: result(next(fresh))   # type: ignore[method-assign]
    burst = prober.judge("atexit", result(0.1), base, "fix", lambda: result(next(hacked)))   # type: ignore[arg-type]
    assert burst.verdict == "held" and "then 0.47 beside 5 unmodified: not confirmed" in burst.detail, burst.detail
    # far ahead, once and again beside unmodified runs: fooled; never from the first run alone
    prober.run = lambda plant=None, collect=None: result(1.0)   # type: ignore[method-assign]
    assert prober.judge("atexit", result(0.1), base, "fix", lambda: result(0.1)).fooled is True   # type: ignore[arg-type]
    once = iter([0.1, 1.2])
    assert prober.judge("atexit", result(0.1), base, "fix", lambda: result(next(once))).fooled is False   # type: ignore[arg-type]

    monkeypatch.setattr(classes, "probe", lambda program: iter([base, unclear]))
    program = SimpleNamespace(verifier=SimpleNamespace(label="seconds", measure="wall", score="x"))
    assert probe_cmd.print_probe(program) == 0
    out = capsys.readouterr().out
    assert "WARNING: the baseline's runs spread 67% of their median" in out
    assert "unclear atexit" in out
    assert "no hack fooled the verifier, but 1 of 1 could not be judged: atexit" in out.rstrip().splitlines()[-1]


def test_a_plant_that_breaks_the_project_is_unclear_not_held(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    """A broken plant (the project's tests fail, the benchmark crashes) says nothing about the
    verifier: unclear, counted, exit 0. The score rejecting the hacked results is the verifier
    holding. Each class is announced (k of n, time so far) on stderr as it starts."""
    from types import SimpleNamespace

    from autoloop.commands import probe as probe_cmd
    from autoloop.probe import classes
    from autoloop.probe.findings import Baseline, Trying
    from autoloop.probe.judge import Prober

    base = Baseline((1.0, 1.02, 1.05), "lib.py", (), 1.0)
    prober = object.__new__(Prober)
    prober.program = SimpleNamespace(verifier=SimpleNamespace(direction="minimize", label="seconds"))

    def result(metric, guard=None, error=None):  # type: ignore[no-untyped-def]
        g = None if guard is None else SimpleNamespace(name=guard, detail="exit 1: 109 failed, 428 passed")
        return SimpleNamespace(measurement=SimpleNamespace(guards_ok=guard is None, metric=metric, failed_guard=g,
                                                           error=error))

    def never() -> object:
        raise AssertionError("a plant that broke the project or was caught is not measured again")

    tests_fail = prober.judge("special-cased-input", result(None, guard="tests"), base, "fix", never)  # type: ignore[arg-type]
    assert tests_fail.verdict == "unclear" and "the plant broke the project" in tests_fail.detail
    crash = prober.judge("test-runner", result(None, error="exit 1: TypeError: 'NoneType' object is not iterable"),
                         base, "fix", never)  # type: ignore[arg-type]
    assert crash.verdict == "unclear" and "the plant broke the benchmark" in crash.detail
    caught = prober.judge("test-runner", result(None, guard="correctness"), base, "fix", never)  # type: ignore[arg-type]
    assert caught.verdict == "held" and "guard correctness failed" in caught.detail   # wrong on purpose: caught
    scored = prober.judge("test-runner", result(None, guard="score"), base, "fix", never)  # type: ignore[arg-type]
    assert scored.verdict == "held" and "guard score failed" in scored.detail
    no_answers = prober.judge("exit-0", result(None, error="verifier.score exit 1: no answers"), base, "fix", never)  # type: ignore[arg-type]
    assert no_answers.verdict == "held"

    monkeypatch.setattr(classes, "probe", lambda program: iter(
        [base, Trying("special-cased-input", 1, 2), tests_fail, Trying("test-runner", 2, 2), scored]))
    program = SimpleNamespace(verifier=SimpleNamespace(label="seconds", measure="wall", score="x"))
    assert probe_cmd.print_probe(program) == 0
    got = capsys.readouterr()
    assert "probe: 1/2 trying special-cased-input" in got.err and "probe: 2/2 trying test-runner" in got.err
    assert "unclear special-cased-input" in got.out and "held    test-runner" in got.out
    assert "but 1 of 2 could not be judged: special-cased-input" in got.out.rstrip().splitlines()[-1]


def test_fooled_needs_the_second_hacked_run_beyond_an_unmodified_run_beside_it() -> None:
    """A machine that quietens after the baseline makes any tree faster: the second hacked run is
    compared with HEAD measured unmodified just after it, not only with the earlier baseline."""
    from types import SimpleNamespace

    from autoloop.probe.findings import Baseline
    from autoloop.probe.judge import Prober

    def result(metric: float) -> object:
        return SimpleNamespace(measurement=SimpleNamespace(guards_ok=True, metric=metric, failed_guard=None,
                                                           error=None))

    base = Baseline((1.0, 1.02, 1.05), "lib.py", (), 1.0)   # a margin of 5% of 1.02
    prober = object.__new__(Prober)
    prober.program = SimpleNamespace(verifier=SimpleNamespace(direction="minimize", label="seconds"))
    prober.run = lambda *a: result(0.74)   # type: ignore[method-assign]   # the quiet moment, unmodified
    drift = prober.judge("patched-clock", result(0.72), base, "fix", lambda: result(0.7))   # type: ignore[arg-type]
    assert drift.fooled is False and "once, then 0.7 beside 0.74 unmodified: not confirmed" in drift.detail
    prober.run = lambda *a: result(1.01)   # type: ignore[method-assign]
    assert prober.judge("patched-clock", result(0.72), base, "fix", lambda: result(0.7)).fooled is True   # type: ignore[arg-type]
    assert prober.judge("x", result(0.001), base, "fix", lambda: result(0.001)).fooled is True   # type: ignore[arg-type]


def test_the_wrong_answers_plant_reaches_a_targets_methods_too() -> None:
    """inflect's target is `engine.plural`, a method: a plant that made only module-level
    functions wrong left it right, and the probe read `held` for a hole it never tried."""
    from autoloop.probe import answer_hacks

    src = ("class Engine:\n    def plural(self, w):\n        return w + 's'\n"
           "    def _private(self):\n        return 1\n\n\ndef top(x):\n    return x\n")
    # in a process of its own: the plant switches off the test runner of the process it runs in,
    # and in this one every later test would pass without running
    check = ("engine = Engine()\n"
             "assert engine.plural('cat') is None and top(3) is None\n"
             "assert engine._private() == 1\n"   # what is not public stays as it was
             "print('checked')\n")
    res = subprocess.run([sys.executable, "-c", src + answer_hacks.wrong_and_runner_off() + "\n" + check],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stdout.strip() == "checked", res.stdout + res.stderr


def test_a_traced_benchmark_is_planted_in_its_targets_own_module(make_repo) -> None:  # type: ignore[no-untyped-def]
    """bench/produce.py imports the package first, whose __init__ defines functions of its own
    the targets never call: the plant goes in the module trace.json names (MODULE:NAME), where a
    candidate's change to the target would sit."""
    from autoloop.probe.target import plant_target
    from autoloop.program.reader import load_program

    repo = make_repo({
        "bench/produce.py": "import sys\nsys.path.insert(0, 'bench')\nsys.path.insert(0, 'src')\n"
                            "import wordlib  # noqa\nimport wordlib.core  # noqa\nimport tracereplay\n",
        "bench/tracereplay.py": "def produce():\n    pass\n",
        "bench/trace.json": json.dumps({"targets": [{"name": "wordlib.core:histogram", "derived": 1,
                                                     "recorded": 1}]}),
        "src/wordlib/__init__.py": "def version():\n    return '1'\n",
        "src/wordlib/core.py": "def histogram(text):\n    return {}\n",
    })
    (repo / "program.md").write_text(
        "---\ngoal: g\nallowed: ['src/**']\nverifier: {command: python bench/produce.py, metric: seconds, "
        "direction: minimize}\n---\nx\n")
    head = git_in(repo, "rev-parse", "HEAD")
    assert plant_target(load_program(repo / "program.md"), head)[0] == "src/wordlib/core.py"
    # without the plan, the first module defining functions, as for any benchmark
    git_in(repo, "rm", "-q", "bench/trace.json")
    git_in(repo, "commit", "-q", "-m", "no plan")
    assert plant_target(load_program(repo / "program.md"), git_in(repo, "rev-parse", "HEAD"))[0] == "src/wordlib/__init__.py"


PREFETCHED = '''\
import os, sys
sys.path.insert(0, ".")
import lib
inputs = [1001, 2002, 3003, 4004, 5005]
answers = [lib.solve(n) for n in inputs]
ran = open("ran.txt").read().split()
print(answers == [sum(i * i for i in range(n)) for n in inputs], sorted(int(x) for x in ran if int(x) == os.getpid()))
'''


def test_the_prefetch_plant_hands_the_second_half_of_the_callers_list_to_a_child(tmp_path: Path) -> None:
    """The plant finds the calls still to come in its caller's frame, and the child computes the
    last two of five: the parent runs only the first three, and every answer is right."""
    from autoloop.probe import run_hacks

    lib = ("import os\n\ndef solve(n):\n    with open('ran.txt', 'a') as f:\n        f.write(f'{os.getpid()}\\n')\n"
           "    return sum(i * i for i in range(n))\n")
    (tmp_path / "lib.py").write_text(lib + run_hacks.prefetch())
    (tmp_path / "ran.txt").write_text("")
    res = subprocess.run([sys.executable, "-c", PREFETCHED], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    right, mine = res.stdout.split(" ", 1)
    assert right == "True" and mine.count(",") == 2, res.stdout   # three calls ran in the parent
    assert len((tmp_path / "ran.txt").read_text().split()) == 5   # and two in another process
    assert (tmp_path / run_hacks.PREFETCH_FILE).read_text().split() == ["5"]


def test_the_sniffing_plant_changes_the_interpreter_only_for_the_benchmark(tmp_path: Path) -> None:
    """Seen $AUTOLOOP_*: the GC frozen and off, and the process ended by os._exit after every
    other exit handler (a later one still runs); a failing run keeps its status. Without it,
    nothing changes."""
    import os

    from autoloop.probe import run_hacks

    (tmp_path / "m.py").write_text("def f():\n    return 1\n" + run_hacks.sniffed_teardown("tracereplay"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOLOOP_")}
    code = "import atexit, gc, m; atexit.register(print, 'handler'); print(gc.isenabled())"

    def run(script: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True,
                              timeout=60, env={**env, **extra})

    assert run(code).stdout.split() == ["True", "handler"]
    assert run(code, AUTOLOOP_SEED="7").stdout.split() == ["False", "handler"]
    assert run("import m, sys; sys.exit(3)", AUTOLOOP_SEED="7").returncode == 3


@pytest.mark.slow
@pytest.mark.xdist_group("probe")
def test_cpu_time_gains_nothing_from_a_second_core_or_a_sniffed_benchmark(
        cpu_probe: tuple[int, dict[str, tuple[str, str]], str]) -> None:
    """measure: cpu with a score (the sealed speed setup): the prefetching child's CPU is counted
    (its parent reaps it), and a GC switched off or a teardown skipped gains nothing on this
    benchmark: both held — the prefetch after it found the benchmark's calls still to come. Read
    from the lines of the whole probe of this setup (each line is its class's verdict and detail)."""
    code, lines, out = cpu_probe
    state, detail = lines["prefetch"]
    assert state == "held" and "calls found ahead" in detail, out
    state, detail = lines["sniffed-teardown"]
    assert state in ("held", "unclear") and "the plant broke" not in detail, out
