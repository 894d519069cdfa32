"""`autoloop init --template speed --trace COMMAND --target MODULE:NAME`, end to end on a small
real project: its own tests are the workload, recorded at HEAD, written as a sealed replay
benchmark that `verify` measures; and what it refuses."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from autoloop.program.reader import load_program
from autoloop.trace import replay
from tests.conftest import git, run_cli

PROJECT = {
    "textkit/__init__.py": "",
    "textkit/core.py": '''
        import re

        def slug(text, sep="-"):
            words = re.findall(r"[a-z0-9]+", text.lower())
            return sep.join(words)

        def squares(xs):
            return sum(x * x for x in xs)

        def gen(n):
            yield from range(n)

        def log(path, text):
            with open(path, "a") as f:
                f.write(text)

        class Counter:
            def __init__(self, k):
                self.k = k

            def count(self, text):
                return text.count(self.k)
    ''',
    "tests/test_core.py": '''
        import pytest
        from textkit import core

        WORDS = ["Hello World", "A  b c", "foo_bar baz", "The Quick Brown Fox", "x y", "Zebra 42",
                 "many small words here", "MiXeD CaSe"]

        @pytest.mark.parametrize("t", WORDS)
        def test_slug(t):
            assert core.slug(t) == "-".join(core.slug(t).split("-"))

        def test_other(tmp_path):
            for i in range(8):
                assert core.squares(list(range(i))) >= 0
                assert list(core.gen(i)) == list(range(i))
                core.log(str(tmp_path / "log"), "x")
            c = core.Counter("a")
            for t in ["banana", "apple", "aaa", "xyz", "cabal", "papaya"]:
                c.count(t)
    ''',
}


def test_init_trace_records_the_tests_and_writes_a_sealed_benchmark_that_verifies(make_repo, isolated_env,
                                                                                  monkeypatch) -> None:
    repo = make_repo(PROJECT)
    res = run_cli("init", "--template", "speed", "--trace", "python -m pytest -q tests",
                  "--target", "textkit.core:slug", "--target", "textkit.core:Counter.count",
                  "--target", "textkit.core:gen", "--target", "textkit.core:log",
                  "--replay-seconds", "0.05", "--no-probe", cwd=repo, timeout=600)
    out = res.stdout
    assert res.returncode == 0, out + res.stderr
    assert "textkit.core:slug: 16 calls, 8 distinct, 8 usable (8 can be varied)" in out
    assert "textkit.core:Counter.count: 6 calls, 6 distinct, 6 usable" in out
    assert "textkit.core:gen: not usable: no call could be recorded" in out
    assert "not used: 8 × a generator or coroutine" in out
    assert "not used: 8 × writes files" in out
    # the store is outside the repository, one folder read through data:, one private
    store = next((isolated_env / ".local/share/autoloop/traces").iterdir())
    program = load_program(repo / "program.md")
    assert program.private == ((store / "private").resolve(),)
    assert [(d.source, d.target) for d in program.data] == [((store / "inputs").resolve(), "bench/.trace")]
    assert program.verifier.measure == "cpu" and program.accept.rule == "paired"
    assert program.allowed == ("textkit/**",) and "bench/**" in program.forbidden and "tests/**" in program.forbidden
    assert [g.command for g in program.guards] == ["python -m pytest -q tests"]
    # the recorded Counter instance is the project's class: stored as its own pickle, so that the
    # feeder draws calls without importing the code under test
    inputs = replay.load(str(store / "inputs/calls.pkl"))
    assert "textkit" not in sys.modules
    counter = next(t for t in inputs if t["name"] == "textkit.core:Counter.count")["calls"][0][0][0]
    assert isinstance(counter, replay.Opaque) and counter.qualname == "Counter"
    assert {t["name"]: len(t["calls"]) for t in inputs} == {"textkit.core:slug": 8, "textkit.core:Counter.count": 6,
                                                            "textkit.core:log": 0}
    plan = json.loads((repo / "bench/trace.json").read_text())
    assert [t["name"] for t in plan["targets"]] == ["textkit.core:slug", "textkit.core:Counter.count"]
    assert not list(repo.glob("**/*.pkl")), "no recording inside the repository"
    # committed, so that a run (which measures committed files) has it; nothing else is
    assert git(repo, "show", "--stat", "--format=%s", "HEAD").splitlines()[0].startswith("bench: a replay benchmark")
    assert git(repo, "status", "--porcelain") == "?? program.md"
    # verify measured it: the tests pass, the score checked every outcome, the harness is reported
    assert "guard tests: pass" in out
    assert "score: pass (checked " in out and "of derived calls, drawn after the run) against the start commit)" in out, out
    assert "harness: " in out and "of the CPU time is not the code under test" in out
    assert re.search(r"run: .* = the timed command .* \+ the score .*× the command's own seconds", out), out


def test_init_trace_refuses_when_no_call_can_be_used_and_says_what_to_target(make_repo, isolated_env) -> None:
    repo = make_repo(PROJECT)
    res = run_cli("init", "--template", "speed", "--trace", "python -m pytest -q tests",
                  "--target", "textkit.core:log", "--target", "textkit.core:nowhere", cwd=repo, timeout=300)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "textkit.core:nowhere: not usable: never called by the command" in res.stdout
    assert "too few usable calls" in res.stderr and "writes files" in res.stderr
    assert "target a function whose arguments are plain data" in res.stderr
    assert not (repo / "program.md").exists() and not (repo / "bench").exists()
    assert not list((isolated_env / ".local/share/autoloop/traces").iterdir())
    assert "Traceback" not in res.stderr


def test_init_trace_says_a_failing_command_is_the_first_thing_to_fix(make_repo, isolated_env) -> None:
    # a conftest that fails every test before it runs: nothing is called, and the target is not
    # what is wrong (wcwidth's tests, without its C extension built, fail so)
    repo = make_repo({**PROJECT, "tests/conftest.py": "import pytest\n\n@pytest.fixture(autouse=True)\n"
                      "def _built():\n    assert False, 'C extension not loaded'\n"})
    res = run_cli("init", "--template", "speed", "--trace", "python -m pytest -q tests",
                  "--target", "textkit.core:slug", cwd=repo, timeout=300)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "textkit.core:slug: not usable: never called by the command" in res.stdout
    assert "the command exited 1 at HEAD: run it by hand and make it pass first" in res.stderr, res.stderr
    assert not (repo / "program.md").exists() and not (repo / "bench").exists()


def test_init_trace_refuses_bad_usage_before_running_anything(make_repo) -> None:
    repo = make_repo(PROJECT)
    res = run_cli("init", "--template", "ml", "--trace", "true", "--target", "a:b", cwd=repo)
    assert res.returncode == 2 and "use --template speed" in res.stderr
    res = run_cli("init", "--template", "speed", "--trace", "true", "--target", "nocolon", cwd=repo)
    assert res.returncode == 2 and "--target 'nocolon': give MODULE:NAME" in res.stderr
    res = run_cli("init", "--template", "speed", "--target", "a:b", cwd=repo)
    assert res.returncode == 2 and "give --trace COMMAND too" in res.stderr


def test_init_trace_says_when_the_command_ran_no_python_it_could_record(make_repo) -> None:
    repo = make_repo(PROJECT)
    res = run_cli("init", "--template", "speed", "--trace", "python -I -m pytest -q tests",
                  "--target", "textkit.core:slug", cwd=repo, timeout=300)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "ran no Python process that loaded the recorder" in res.stderr and "-I, -E or -S" in res.stderr
    assert not (repo / "program.md").exists() and "Traceback" not in res.stderr


SKEWED_PROJECT = {
    "greetkit/__init__.py": "",
    "greetkit/core.py": '''
        WORDS = {"en": "Hello", "fr": "Bonjour"}

        def greet(name, lang):
            return WORDS[lang] + ", " + name.strip().title() + "!"
    ''',
    "tests/test_greet.py": '''
        from greetkit import core

        NAMES = ["ada", "alan", "grace", "edsger", "barbara", "donald", "john", "ken", "dennis", "linus",
                 "guido", "bjarne"]

        def test_greet():
            for i, name in enumerate(NAMES):
                assert core.greet(name, "fr" if i == 0 else "en").endswith("!")
    ''',
}


def test_init_trace_says_which_arguments_it_keeps_and_how_skewed_the_workload_is(make_repo) -> None:
    """The tests greet in English 11 times of 12: `lang` changed mostly fails (kept as recorded), so
    nearly every replayed call says "en" — a workload as skewed as the tests, and said so."""
    import re

    repo = make_repo(SKEWED_PROJECT)
    res = run_cli("init", "--template", "speed", "--trace", "python -m pytest -q tests",
                  "--target", "greetkit.core:greet", "--replay-seconds", "0.05", "--no-check", cwd=repo, timeout=600)
    out = res.stdout
    assert res.returncode == 0, out + res.stderr
    assert "kept as recorded (changed, they mostly make the call fail): argument 2" in out, out
    share = re.search(r"note: (\d+)% of the replayed calls use one value of argument 2 \('en'\)", out)
    assert share and int(share.group(1)) >= 80, out


def test_init_trace_forbids_the_test_files_its_guard_names_inside_the_targets_package(tmp_path) -> None:
    """Found on titlecase (tests in titlecase/tests.py, targets under titlecase/**): the guard
    named a file `allowed` covered, and `run` refused the program init had just written."""
    from autoloop.commands.init_trace import TEST_FORBIDDEN, _judge_files
    from autoloop.errors import ConfigError
    from autoloop.isolation.measured_files import protected_paths
    git(tmp_path, "init", "-q")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "tests").mkdir()
    for rel in ("pkg/__init__.py", "pkg/tests.py", "pkg/checks.txt", "tests/test_a.py"):
        (tmp_path / rel).write_text("")
    named = _judge_files(tmp_path, "python -m pytest -q pkg/tests.py tests/test_a.py --doctest-glob pkg/checks.txt "
                                   "/etc/hostname -k pkg/missing.py")
    assert named == ["pkg/tests.py", "pkg/checks.txt"]   # tests/test_a.py: TEST_FORBIDDEN has it
    (tmp_path / "bench.py").write_text("")

    def program(forbid: list[str]) -> Path:
        forbidden = "".join(f'  - "{g}"\n' for g in forbid)
        (tmp_path / "program.md").write_text(
            f'---\ngoal: g\nallowed:\n  - "pkg/**"\nforbidden:\n{forbidden}verifier:\n  command: python bench.py\n'
            '  metric: m\n  direction: minimize\nguards:\n  - {name: tests, command: python -m pytest -q pkg/tests.py}\n---\n')
        return tmp_path / "program.md"

    with pytest.raises(ConfigError, match="guards.0..command runs pkg/tests.py.*could rewrite its own judge"):
        protected_paths(load_program(program(list(TEST_FORBIDDEN))))     # what init wrote before
    assert protected_paths(load_program(program([*TEST_FORBIDDEN, *named])))["pkg/tests.py"] == "used by the verifier"
