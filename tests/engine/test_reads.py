"""What the measurements read (CONTRACT §10): recorded once, at the baseline and in `verify` and
`doctor`; a verifier that read none of the files `allowed` covers, and test code a guard reads
that the generator may change, are named before cycle 1 with the fix."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from autoloop.process import proc
from autoloop.engine.reads import in_tree, opened, looks_like_test, traced
from tests.scripts.e2e import PY, git, make_project

needs_strace = pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace")
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

# the verifier imports `lib` from a copy outside the repository, as from an installed package
INSTALLED_SCORE = "import sys\nsys.path.insert(0, {copy!r})\nimport lib\nprint(f'score: {{lib.VALUE}}')\n"
TESTS = {"tests/__init__.py": "", "tests/helpers.py": "def check(x):\n    assert x\n",
         "tests/test_a.py": "from tests.helpers import check\n\ndef test_a():\n    check(True)\n"}
GUARD = f"guards:\n  - {{name: tests, command: {PY} -m pytest -q -p no:cacheprovider tests, timeout: 60}}\n"


@needs_strace
def test_strace_records_what_a_command_opened_for_reading(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("x")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.py").write_text("import os\n")
    trace = tmp_path / "t.trace"
    cmd = traced(f"cat a.txt >/dev/null; {PY} sub/b.py; echo hi > out.txt", trace, "strace")
    res = proc.run(cmd, cwd=tmp_path, env=dict(os.environ), timeout=60, log_stem=tmp_path / "log")
    assert res.ok
    got = in_tree(opened(trace, "strace", str(tmp_path)), [str(tmp_path)])
    assert "a.txt" in got and "sub/b.py" in got
    assert "out.txt" not in got and "t.trace" not in got   # written, not read


def test_a_modules_cached_bytecode_counts_as_a_read_of_its_source() -> None:
    """After a guard imported src/m.py, the verifier's import opens only the .pyc the guard left:
    that is still the tree's m.py, so no "read none of the files `allowed` covers" warning."""
    got = in_tree(["/t/src/__pycache__/m.cpython-311.pyc", "/t/__pycache__/top.cpython-312.opt-1.pyc",
                   "/t/bench/run.py", "/t/src/__pycache__/notes.txt"], ["/t"])
    assert got == ["bench/run.py", "src/__pycache__/notes.txt", "src/m.py", "top.py"]
    # autoloop's measurements keep bytecode under PYTHONPYCACHEPREFIX, at the source's own path
    prefixed = in_tree(["/s/pycache/t/src/m.cpython-311.pyc", "/s/pycache/elsewhere/x.cpython-311.pyc"],
                       ["/t"], "/s/pycache")
    assert prefixed == ["src/m.py"]


def test_calls_strace_split_between_processes_are_joined(tmp_path: Path) -> None:
    # with -f, a call another process interrupts is printed in two lines; timing decides when,
    # so the case is written out as strace 6 prints it
    trace = tmp_path / "t.trace"
    trace.write_text('12 openat(AT_FDCWD</t>, "a.py", O_RDONLY|O_CLOEXEC <unfinished ...>\n'
                     '13 openat(AT_FDCWD</t>, "w.txt", O_WRONLY|O_CREAT|O_TRUNC, 0666 <unfinished ...>\n'
                     '13 <... openat resumed>) = 4</t/w.txt>\n'
                     '12 <... openat resumed>) = 3</t/a.py>\n'
                     '12 openat2(AT_FDCWD</t>, "b.py", {flags=O_RDONLY, resolve=0}, 24) = 3</t/b.py>\n'
                     '12 openat(AT_FDCWD</t>, "c.py", O_RDONLY) = -1 ENOENT (No such file or directory)\n')
    assert opened(trace, "strace", "/t") == ["/t/a.py", "/t/b.py"]


def test_what_looks_like_test_code() -> None:
    assert all(map(looks_like_test, ["test_x.py", "a/x_test.py", "conftest.py", "tests/data.json", "pkg/testing/u.py",
                             "markdown/test_tools.py", "pkg/testing.py"]))
    assert not any(map(looks_like_test, ["lib.py", "contest.py", "src/attest.py", "latest/x.py"]))


def _installed_copy(tmp_path: Path) -> Path:
    # in the project's scratch (E2E_OUT), which its sandbox.writable makes visible to measurements
    copy = tmp_path / "p" / "out" / "site"
    copy.mkdir(parents=True)
    (copy / "lib.py").write_text("VALUE = 40\n")
    return copy


@needs_bwrap
def test_a_verifier_that_reads_none_of_allowed_is_named_before_cycle_1(tmp_path: Path) -> None:
    copy = _installed_copy(tmp_path)
    p = make_project(tmp_path / "p", {"1": 'W("lib.py", "VALUE = 20\\n")'}, guards=False, allowed="[lib.py]",
                     files={"lib.py": "VALUE = 40\n", "score.py": INSTALLED_SCORE.format(copy=str(copy))})
    r = p.run("--cycles", "1")
    assert r.returncode == 0, r.stderr
    want = "the verifier read none of the files `allowed: [lib.py]` covers"
    assert want in r.stderr, r.stderr
    # before cycle 1: the warning is in the ledger before any cycle after the baseline
    recs = [json.loads(x) for x in p.ledger_lines() if x]
    at = next(i for i, rec in enumerate(recs) if rec["t"] == "reads")
    assert recs[at]["how"] == "strace" and recs[at]["steps"]["verifier"] == ["score.py"]
    assert not any(rec["t"] == "cycle" and rec["cycle"] >= 1 for rec in recs[:at])
    assert any(want in w for w in recs[at]["warnings"])
    assert want in p.experiments()
    # doctor and verify say it too
    doc = p.cli("doctor", "program.md")
    assert want in doc.stdout, doc.stdout
    ver = p.cli("verify", "program.md")
    assert want in ver.stderr and "reads: recorded by strace" in ver.stdout, ver.stdout + ver.stderr


@needs_bwrap
def test_test_code_a_guard_reads_inside_allowed_is_named_with_the_forbidden_line(tmp_path: Path) -> None:
    p = make_project(tmp_path / "p", guards=False, allowed='[val.txt, "tests/**"]', files=TESTS, extra=GUARD)
    r = p.cli("verify", "program.md")
    assert r.returncode == 0, r.stdout + r.stderr
    assert ("guards read test code that `allowed: [val.txt, tests/**]` lets the generator change: "
            "tests/__init__.py, tests/helpers.py, tests/test_a.py") in r.stderr, r.stderr
    assert "Add to program.md: `forbidden: [tests/**]`" in r.stderr
    # the line added as shown: no such warning any more
    text = (p.repo / "program.md").read_text().replace("allowed:", "forbidden: [tests/**]\nallowed:", 1)
    (p.repo / "program.md").write_text(text)
    git(p.repo, "commit", "-qam", "forbid the tests", env=p.env)
    r = p.cli("verify", "program.md")
    assert r.returncode == 0 and "guards read test code" not in r.stderr, r.stderr


@needs_bwrap
def test_without_strace_python_reads_are_recorded_by_an_audit_hook(tmp_path: Path) -> None:
    copy = _installed_copy(tmp_path)
    p = make_project(tmp_path / "p", guards=False, allowed="[lib.py]",
                     files={"lib.py": "VALUE = 40\n", "score.py": INSTALLED_SCORE.format(copy=str(copy))})
    # a strace that ptrace is refused to, as in a container without CAP_SYS_PTRACE
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "strace").write_text("#!/bin/sh\necho 'strace: ptrace(PTRACE_TRACEME, ...): Operation not permitted' >&2\n"
                                 "exit 1\n")
    (fake / "strace").chmod(0o755)
    p.env["PATH"] = f"{fake}{os.pathsep}{p.env['PATH']}"
    r = p.cli("verify", "program.md")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "reads: recorded by audit hook (Python only)" in r.stdout, r.stdout
    assert "strace is missing or refused here" in r.stdout
    assert "the verifier read none of the files `allowed: [lib.py]` covers (recorded by audit hook" in r.stderr


def test_a_tight_time_budget_is_not_spent_on_the_read_record(tmp_path: Path) -> None:
    # 3 s in all: a traced pass of the guards and the verifier would take a large share of it
    p = make_project(tmp_path / "p", {"*": 'W("val.txt", "30")'}, stop="max_minutes: 0.05")
    r = p.run(timeout=120)
    assert r.returncode == 0, r.stderr
    rec = next(json.loads(x) for x in p.ledger_lines() if x and json.loads(x)["t"] == "reads")
    assert rec["how"] == "" and rec["steps"] == {}
    assert "not recorded: it takes about" in rec["note"] and "of the time budget" in rec["note"]
    assert "`autoloop doctor` records it" in r.stderr + r.stdout


@needs_bwrap
def test_a_virtualenv_inside_the_checkout_is_no_file_of_the_tree(tmp_path: Path) -> None:
    """install.md makes `.venv` inside the clone; the sandbox binds it read-only at the checkout's
    path, but what the verifier's Python reads there is not the measured tree's (a count of 6 for
    the quickstart's 2 files, `.venv/pyvenv.cfg` among them)."""
    score = "open('.venv/pyvenv.cfg').read()\nprint('score: ' + open('val.txt').read().strip())\n"
    p = make_project(tmp_path / "p", guards=False, allowed="[val.txt]",
                     files={"score.py": score, ".gitignore": ".venv/\n"})
    (p.repo / ".venv").mkdir()
    (p.repo / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    r = p.cli("verify", "program.md")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "reads: recorded by strace" in r.stdout and "the verifier 2" in r.stdout, r.stdout
