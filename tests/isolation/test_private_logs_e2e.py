"""`private` is absent for the generator (contract §11). The score reads it, and what the score
prints lands in the run's log folders; a score that names a wrong answer's expected value is
common. A scripted generator must not find a private value anywhere it can read: not in the
private path, not in the score's logs of earlier measurements."""

from __future__ import annotations

import os
import pwd
import shutil
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

SECRET = "label-7f3e91c2"
SCORE = '''\
import sys
expected = open({label!r}).read().strip()
print("checking against the expected answer", expected)     # the user's score talks
print("score: " + open("val.txt").read().strip())
'''
PLAN = '''
found = []
for root in [{private!r}, str(user())]:
    for dirpath, _, files in os.walk(root):
        for name in files:
            try:
                if {secret!r} in open(os.path.join(dirpath, name), errors="replace").read():
                    found.append(os.path.join(dirpath, name))
            except OSError:
                pass
(OUT / "gen" / "found.txt").write_text("\\n".join(found))
W("val.txt", "30")
hyp("look for the private labels")
'''


@pytest.fixture
def outside_tmp():
    """The repository where users keep theirs: not under /tmp, which every sandbox makes private
    (a test there would see nothing of it either way)."""
    base = Path(pwd.getpwuid(os.getuid()).pw_dir)
    if str(base.resolve()).startswith(("/tmp/", "/var/tmp/", "/dev/shm/")):
        pytest.skip("the runner's home lies under a folder every sandbox makes private")
    where = Path(tempfile.mkdtemp(prefix=".autoloop-private-logs-", dir=base))
    try:
        yield where
    finally:
        shutil.rmtree(where, ignore_errors=True)


def test_the_generator_reads_no_private_value_in_the_scores_logs(outside_tmp):
    from tests.scripts.e2e import PY, git, make_project

    tmp_path = outside_tmp
    private = tmp_path / "labels"
    private.mkdir()
    (private / "label.txt").write_text(SECRET)
    gen = tmp_path / "out" / "gen"
    gen.mkdir(parents=True)
    p = make_project(tmp_path, {}, records_in=gen,
                     files={"score_private.py": SCORE.format(label=str(private / "label.txt"))},
                     extra=f"private: [{private}]\nsandbox: {{kind: bwrap, writable: [{gen}]}}")
    text = (p.repo / "program.md").read_text().replace(
        "verifier:\n", f"verifier:\n  score: {PY} score_private.py\n", 1)
    (p.repo / "program.md").write_text(text)
    git(p.repo, "commit", "-qam", "a score that reads the private labels", env=p.env)
    look = PLAN.format(private=str(private), secret=SECRET)
    p.set_plan({1: 'W("val.txt", "31")\nhyp("first")', 2: look})   # the second sees the first's logs
    res = p.run("--cycles", "2")
    assert res.returncode == 0, res.stderr
    logs = p.repo / ".autoloop" / p.tag / "logs"
    assert (gen / "found.txt").read_text() == ""
    # a later run of the same repository (another tag) and the earlier run's logs
    (gen / "found.txt").unlink()
    p.tag = "t2"
    p.set_plan({1: look})
    res = p.run("--cycles", "1")
    assert res.returncode == 0, res.stderr
    assert any(SECRET in f.read_text(errors="replace") for f in logs.rglob("score.out"))   # it can fail
    assert (gen / "found.txt").read_text() == ""


PRODUCE = '''\
import os
open(os.path.join(os.environ["AUTOLOOP_OUTPUT"], "v"), "w").write(open("val.txt").read())
'''
FAILING_SCORE = '''\
import os, sys
got = open(os.path.join(os.environ["AUTOLOOP_OUTPUT"], "v")).read().strip()
expected = open({label!r}).read().strip()
if got != "40.25":
    sys.exit("wrong answer: expected " + expected + ", got " + got)   # a checker quoting the truth
print("score: 40.25")
'''


def test_a_failing_scores_words_reach_neither_the_journal_nor_the_prompt(outside_tmp):
    from tests.scripts.e2e import git, make_project, PY

    private = outside_tmp / "labels"
    private.mkdir()
    (private / "label.txt").write_text(SECRET)
    p = make_project(outside_tmp, {1: 'W("val.txt", "30")\nhyp("a wrong answer")', 2: 'W("val.txt", "31")\nhyp("x")'},
                     files={"produce.py": PRODUCE, "score_private.py": FAILING_SCORE.format(label=str(private / "label.txt"))},
                     extra=f"private: [{private}]\nsandbox: {{kind: bwrap, writable: [{outside_tmp / 'records'}]}}")
    text = (p.repo / "program.md").read_text().replace(
        "verifier:\n", f"verifier:\n  score: {PY} score_private.py\n", 1).replace(
        f"  command: {PY} score.py", f"  command: {PY} produce.py", 1)
    (p.repo / "program.md").write_text(text)
    git(p.repo, "commit", "-qam", "a score that checks against the private labels", env=p.env)
    res = p.run("--cycles", "2")
    assert res.returncode == 0, res.stderr
    logs = p.repo / ".autoloop" / p.tag / "logs"
    assert SECRET in (logs / "cycle-0001" / "score.err").read_text()     # it said it: the test can fail
    assert SECRET not in (p.repo / "experiments.md").read_text()
    assert SECRET not in (logs / "cycle-0002" / "prompt.md").read_text()
    assert SECRET not in res.stdout + res.stderr
