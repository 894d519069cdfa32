"""A generator writes its cycle's log folder; the same cycle's repeated measurements log into
`runs/LABEL/` under it, written by autoloop itself, outside every sandbox. A `runs` (or a
`runs/LABEL`) the generator planted there as a link to a folder of its choice must not take
those logs — nor autoloop's removal of what sits at a log's name — outside the run's logs."""

from __future__ import annotations

import shutil

import pytest

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

NOISY_SCORE = '''\
import random
print("score: %.4f" % (float(open("val.txt").read()) * (1 + random.gauss(0, 0.02))))
'''

PLAN = '''
logs = os.path.dirname(os.readlink("/proc/self/fd/1"))   # the cycle's log folder: generator.out's
os.symlink({away!r}, os.path.join(logs, "runs"))
os.makedirs(os.path.join({away!r}, "A1", "verifier.out"))   # what autoloop would remove there
open(os.path.join({away!r}, "A1", "verifier.out", "keep.txt"), "w").write("mine")
W("val.txt", "40.3")
hyp("a link where the repeated measurements log")
'''


def test_a_planted_runs_link_takes_no_log_outside(tmp_path):
    from tests.scripts.e2e import make_project

    away = tmp_path / "out" / "away"
    away.mkdir(parents=True)
    p = make_project(tmp_path, {}, files={"score.py": NOISY_SCORE},
                     extra=f"accept: {{rule: paired}}\nsandbox: {{kind: bwrap, writable: [{tmp_path / 'out'}, "
                           f"{tmp_path / 'records'}]}}")
    p.set_plan({1: PLAN.format(away=str(away))})
    res = p.run("--cycles", "1")
    assert res.returncode == 0, res.stderr
    cycle = p.repo / ".autoloop" / p.tag / "logs" / "cycle-0001"
    assert (cycle / "generator.out").exists()
    assert (away / "A1" / "verifier.out" / "keep.txt").read_text() == "mine"
    assert sorted(str(f.relative_to(away)) for f in away.rglob("*")) == ["A1", "A1/verifier.out",
                                                                        "A1/verifier.out/keep.txt"]
    assert list((cycle / "runs").glob("*/verifier.out"))   # they went where they belong
