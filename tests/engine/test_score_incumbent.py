"""A score that only checks correctness (`measure: wall|cpu`) runs on the candidate's runs, and
not on the incumbent's beside them (their answers were checked when they were kept): read back
from the ledger's stats.run_parts and the runs' log folders. A wrong candidate is still caught."""

from __future__ import annotations

import json

from tests.scripts.e2e import PY, kill_marked, make_project

PRODUCE = ("import os, sys\nsys.stdin.read()\n"
           "open(os.path.join(os.environ['AUTOLOOP_OUTPUT'], 'answer'), 'w').write(open('val.txt').read())\n")
CHECK = ("import os, sys\nv = open(os.path.join(os.environ['AUTOLOOP_OUTPUT'], 'answer')).read().strip()\n"
         "sys.exit(0 if float(v) > 0 else 'wrong answer: ' + v)\n")
DRAW = "print(1)\n"


def test_the_incumbents_runs_beside_a_candidate_are_not_scored(tmp_path) -> None:
    plan = {1: 'W("val.txt", "41")', 2: 'W("val.txt", "-1")'}
    p = make_project(tmp_path, plan, files={"produce.py": PRODUCE, "check.py": CHECK, "draw.py": DRAW},
                     guards=False, verifier=f"{{py}} produce.py\n  score: {PY} check.py\n  inputs: {PY} draw.py\n"
                                            "  measure: wall",
                     extra="accept:\n  rule: paired\n  pairs: 6\n  final_pairs: 0\n")
    res = p.run("--cycles", "2")
    kill_marked(p.env)
    assert res.returncode == 0, res.stderr
    records = [json.loads(line) for line in p.ledger_path().read_text().splitlines()]
    cycles = {r["cycle"]: r for r in records if r.get("t") == "cycle"}
    assert cycles[2]["status"] == "guard_fail" and "wrong answer: -1" in cycles[2]["result"]
    base, one = cycles[0]["stats"]["run_parts"], cycles[1]["stats"]["run_parts"]
    assert base and all(part["score"] > 0 for part in base.values())      # the calibration: every run
    scored = {label for label, part in one.items() if part["score"] > 0}
    assert scored == {label for label in one if label.startswith("B")} and scored, one
    # every run is in the parts, so that their mean is a run's cost: the incumbent's too
    assert len([label for label in one if label.startswith("A")]) == len(scored), one
    logs = p.repo / ".autoloop" / p.tag / "logs" / "cycle-0001" / "runs"
    assert {d.name for d in logs.iterdir() if (d / "score.out").exists()} == scored
