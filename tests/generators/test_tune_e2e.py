"""`tune` through the real CLI: parallel workers, a person deciding, resume after a stop."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pexpect

from autoloop.generators.tune_engine import canonical
from tests.conftest import run_cli

PARAMS = "X = 0.5  # tune: 0..1\nN = 3  # tune: 1..8 int\nACT = 'relu'  # tune: relu|tanh|gelu\n"
# The start (X=0.5, N=3, relu) scores 1.0; every other point scores worse, so a person who keeps
# anything keeps a regression.
SCORE = """
import pathlib
values = {}
exec(pathlib.Path("params.py").read_text(), values)
start = (values["X"], values["N"], values["ACT"]) == (0.5, 3, "relu")
print("loss:", 1.0 if start else 2.0 + values["X"] + values["N"] / 10)
"""


def program(extra: str = "") -> str:
    return ("---\ngoal: Lower the loss\nallowed: [params.py]\nverifier:\n  command: python3 score.py\n"
            f"  metric: loss\n  direction: minimize\ngenerator:\n  kind: tune\n  seed: 3\n{extra}---\n"
            "Tune the marked constants.\n")


def cycles(repo: Path, tag: str) -> dict[int, dict[str, Any]]:
    recs = [json.loads(line) for line in (repo / ".autoloop" / tag / "ledger.jsonl").read_text().splitlines()]
    return {r["cycle"]: r for r in recs if r.get("t") == "cycle"}


def test_workers_of_a_round_propose_distinct_points(make_repo) -> None:
    repo = make_repo({"params.py": PARAMS, "score.py": SCORE, "program.md": program()})
    res = run_cli("run", "program.md", "--tag", "w", "--cycles", "6", "--workers", "3", cwd=repo, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    recs = cycles(repo, "w")
    assert sorted(recs) == list(range(7))
    rounds: dict[int, list[dict[str, Any]]] = {}
    for n in range(1, 7):
        assert recs[n]["status"] in ("keep", "discard"), recs[n]
        rounds.setdefault(recs[n]["round"], []).append(recs[n])
    assert len(rounds) == 2
    measured = {canonical({"params.py:X": 0.5, "params.py:N": 3, "params.py:ACT": "relu"})}
    for round_ in rounds.values():
        points = [canonical(r["gen_meta"]["config"]) for r in round_]
        assert len(set(points)) == 3, points              # distinct within the round
        assert not set(points) & measured                 # and none measured before it
        assert sorted(r["gen_meta"]["worker"] for r in round_) == [0, 1, 2]
        measured |= set(points)


def spawn(repo: Path, tag: str, *args: str) -> pexpect.spawn:
    import os
    import sys
    env = {k: v for k, v in os.environ.items() if k != "PAGER"}
    env.update({"TERM": "xterm", "NO_COLOR": "1"})
    return pexpect.spawn(sys.executable, ["-m", "autoloop", "run", "program.md", "--tag", tag, *args],
                         cwd=str(repo), env=env, encoding="utf-8", timeout=120, dimensions=(40, 160))


def test_a_persons_skip_teaches_nothing(make_repo) -> None:
    repo = make_repo({"params.py": PARAMS, "score.py": SCORE, "program.md": program()})
    child = spawn(repo, "s", "--approve=before", "--cycles", "2")
    child.expect(r"\[y\] verify.*> ")
    child.send("s")                                    # cycle 1 skipped: never measured
    child.expect(r"\[y\] verify.*> ")
    child.send("y")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before
    recs = cycles(repo, "s")
    assert recs[1]["status"] == "discard" and recs[1]["metric"] is None
    # cycle 2's study held the baseline only: the skip was not read as a measured loss
    assert recs[2]["gen_meta"]["observed"] == 1
    assert recs[2]["metric"] is not None


def test_a_kept_regression_is_not_called_best(make_repo) -> None:
    repo = make_repo({"params.py": PARAMS, "score.py": SCORE, "program.md": program()})
    child = spawn(repo, "k", "--approve", "--cycles", "2")
    seen = io.StringIO()
    child.logfile_read = seen
    child.expect("Ratchet recommends: discard")
    child.expect(r"> ")
    child.send("k")                                    # the person keeps a regression
    child.expect("Ratchet recommends: ")
    child.expect(r"> ")
    child.send("d")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before
    recs = cycles(repo, "k")
    assert recs[1]["status"] == "keep" and recs[1]["decided_by"] == "human" and recs[1]["metric"] > 2
    # cycle 2 starts from the kept point, yet the best measured is still the baseline's 1.0
    assert recs[2]["gen_meta"]["incumbent"] == recs[1]["gen_meta"]["config"]
    assert recs[2]["hypothesis"].endswith("; best measured so far 1")
    assert recs[2]["gen_meta"]["observed"] == 2
    # nor does the run call it best: the progress line and the stop line show the baseline's 1
    out = seen.getvalue()
    line1 = next(line for line in out.splitlines() if line.startswith("cycle    1  keep"))
    assert re.search(r"best\s+1\s", line1), line1
    assert re.search(r"baseline 1 → best 1[,;\s]", out), out[-600:]


def test_a_resumed_run_continues_the_same_search(make_repo) -> None:
    """Two invocations of 2 cycles propose what one of 4 does: the study comes from the ledger."""
    points = {}
    for name, chunks in (("once", ("4",)), ("twice", ("2", "2"))):
        repo = make_repo({"params.py": PARAMS, "score.py": SCORE, "program.md": program()}, name=name)
        for n in chunks:
            res = run_cli("run", "program.md", "--tag", "r", "--cycles", n, cwd=repo, timeout=300)
            assert res.returncode == 0, res.stdout + res.stderr
        points[name] = [canonical(r["gen_meta"]["config"]) for c, r in sorted(cycles(repo, "r").items()) if c]
    assert len(points["once"]) == 4 and points["once"] == points["twice"]
