"""Guards that run tests are counted (CONTRACT §10): a candidate whose test guard passes fewer
tests than the starting commit's, prints no summary where it printed one, or runs none, is a
guard_fail naming the counts, however the guard's exit status reads; one that adds tests is not."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from autoloop.engine.testcount import TestCount, parse, shortfall
from tests.scripts.e2e import PY, make_project

TESTS = {f"tests/test_{k}.py": f"def test_{k}1():\n    assert True\n\ndef test_{k}2():\n    assert True\n"
         for k in ("a", "b", "c")}


def _real_output(tmp_path: Path, files: dict[str, str], *cmd: str) -> list[Path]:
    """What a real runner printed over `files`: its stdout and stderr as a guard's logs."""
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    r = subprocess.run([PY, *cmd], cwd=tmp_path, capture_output=True)
    (tmp_path / "g.out").write_bytes(r.stdout)
    (tmp_path / "g.err").write_bytes(r.stderr)
    return [tmp_path / "g.out", tmp_path / "g.err"]


@pytest.mark.parametrize("flags", [["-q"], [], ["-rA", "--color=yes"]])
def test_pytest_summaries_are_counted(tmp_path: Path, flags: list[str]) -> None:
    files = dict(TESTS, **{"tests/test_d.py": "import pytest\n\ndef test_f():\n    assert False\n\n"
                           "@pytest.mark.skip\ndef test_s():\n    pass\n"})
    got = parse(_real_output(tmp_path, files, "-m", "pytest", "-p", "no:cacheprovider", *flags, "tests"))
    assert got == TestCount("pytest", 6, 1, 1, 1)


def test_unittest_summaries_are_counted(tmp_path: Path) -> None:
    files = {"tests/__init__.py": "", "tests/test_u.py": (
        "import unittest\n\nclass T(unittest.TestCase):\n"
        "    def test_ok(self):\n        pass\n"
        "    def test_ok2(self):\n        pass\n"
        "    def test_bad(self):\n        self.fail('no')\n"
        "    @unittest.skip('later')\n    def test_skip(self):\n        pass\n")}
    got = parse(_real_output(tmp_path, files, "-m", "unittest", "discover", "-s", "tests", "-t", "."))
    assert got == TestCount("unittest", 2, 1, 1, 1)


def test_no_tests_ran_and_a_missing_summary(tmp_path: Path) -> None:
    none = parse(_real_output(tmp_path, {"tests/conftest.py": ""}, "-m", "pytest", "-q", "tests"))
    assert none is not None and none.passed == 0
    base = TestCount("pytest", 1141, 0, 0, 1)
    assert shortfall(base, none) == ("0 passed, baseline 1,141 (no tests ran): fewer tests pass "
                                     "than on the starting commit")
    assert (shortfall(base, TestCount("pytest", 1137, 4, 0, 1)) or "").startswith(
        "1,137 passed, 4 failed, baseline 1,141")
    assert "no test summary" in (shortfall(base, None) or "")
    assert shortfall(base, TestCount("pytest", 1150, 0, 0, 1)) is None   # added tests are fine
    assert shortfall(None, None) is None                                  # no summary to keep


def test_an_ordinary_guard_has_no_summary(tmp_path: Path) -> None:
    (tmp_path / "o").write_text("checked 12 files in 0.2s\nall good\n")
    assert parse([tmp_path / "o"]) is None


# ---- end to end: the cheats a generator can do to a test suite it may edit -----------------

CHEATS = {
    # a conftest that skips every test: pytest exits 0
    "skip-all": 'W("tests/conftest.py", "import pytest\\ndef pytest_collection_modifyitems(items):\\n'
                '    for i in items:\\n        i.add_marker(pytest.mark.skip)\\n")',
    # the run ends early with exit 0 and no summary
    "os-exit": 'W("tests/conftest.py", "import os\\nos._exit(0)\\n")',
    "sys-exit": 'W("tests/conftest.py", "import sys\\nsys.exit(0)\\n")',
    # tests deleted
    "delete": 'os.remove("tests/test_b.py")',
    # every test's body made a no-op: still counted as passing; what this does not catch
}


def _project(tmp_path: Path, plan: dict, extra: str = ""):
    return make_project(
        tmp_path / "p", plan, files=TESTS, guards=False,
        allowed='[val.txt, notes.txt, "tests/**", tests/conftest.py]',
        extra=(f"guards:\n  - {{name: tests, command: {PY} -m pytest -q -p no:cacheprovider tests, "
               f"timeout: 60}}\n" + extra))


def _cycle(cheat: str, val: int) -> str:
    return f'{CHEATS[cheat]}\nW("val.txt", "{val}")\nhyp("{cheat}")\n' if cheat in CHEATS else \
        f'W("val.txt", "{val}")\nhyp("{cheat}")\n'


@pytest.mark.parametrize("extra", ["", "accept:\n  warmup: 1\n"], ids=["plain", "noise-aware"])
def test_cheats_on_the_tests_are_guard_fails_and_added_tests_are_kept(tmp_path: Path, extra: str) -> None:
    plan = {str(i + 1): _cycle(name, 30 - i) for i, name in enumerate(CHEATS)}
    n = len(CHEATS)
    plan[str(n + 1)] = ('W("tests/test_e.py", "def test_e():\\n    assert True\\n")\n'
                        'W("val.txt", "20")\nhyp("more tests")\n')
    p = _project(tmp_path, plan, extra)
    r = p.run("--cycles", str(n + 1), timeout=300)
    assert r.returncode == 0, r.stderr
    assert p.statuses() == {0: "baseline", **{i: "guard_fail" for i in range(1, n + 1)}, n + 1: "keep"}
    ledger = [json.loads(x) for x in p.ledger_lines() if x]
    cycles = {c["cycle"]: c for c in ledger if c.get("t") == "cycle"}
    assert cycles[0]["stats"]["guard_tests"]["tests"]["passed"] == 6
    assert "4 passed, baseline 6" in cycles[4]["result"]
    assert "0 passed, 6 skipped, baseline 6: fewer tests pass" in cycles[1]["result"]
    assert "no test summary in its output, baseline 6 passed" in cycles[2]["result"]


def test_a_resumed_run_still_has_the_baseline_counts(tmp_path: Path) -> None:
    p = _project(tmp_path, {"1": _cycle("plain", 30), "2": _cycle("delete", 20)})
    assert p.run("--cycles", "1", timeout=200).returncode == 0
    r = p.run("--cycles", "1", timeout=200)
    assert r.returncode == 0, r.stderr
    assert p.statuses() == {0: "baseline", 1: "keep", 2: "guard_fail"}
    assert "4 passed, baseline 6" in p.rows()[-1]["description"] or \
        "4 passed, baseline 6" in p.experiments()
