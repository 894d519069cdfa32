"""Black-box: `verifier.score` and `private` (contract §10). The command runs the candidate's
code and writes predictions to $AUTOLOOP_OUTPUT; the score runs in a tree of the start commit
and reads labels from a `private` folder that neither the generator nor the candidate's code can
read. Cheats (a metric line printed at exit, a fake answers file, the scoring helper rewritten
in a file `allowed` covers) change nothing; a real accuracy gain is kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.scripts.e2e import GEN, PY, make_project
from tests.isolation.test_sandbox import PROBLEM

pytestmark = pytest.mark.skipif(PROBLEM is not None, reason=PROBLEM or "")

# the "model": the generator may change it (and helpers.py, which the score imports)
MODEL_PY = "def predict(x):\n    return 0\n"
HELPERS_PY = '''\
def accuracy(preds, labels):
    return sum(p == y for p, y in zip(preds, labels)) / len(labels)
'''
# runs the candidate's code; records what it could read of the private labels
PRODUCE_PY = '''\
import os, sys
from pathlib import Path
import model
try:
    open(sys.argv[1]).read()
    seen = "read"
except OSError as exc:
    seen = type(exc).__name__
Path(sys.argv[2], "command-private.txt").write_text(seen)
out = Path(os.environ["AUTOLOOP_OUTPUT"])
out.joinpath("preds.txt").write_text("\\n".join(str(model.predict(x)) for x in range(20)))
print("acc: 0.0")   # never read: the metric is the score's
'''
SCORE_PY = '''\
import os, sys
from pathlib import Path
from helpers import accuracy
preds = [int(v) for v in Path(os.environ["AUTOLOOP_OUTPUT"], "preds.txt").read_text().split()]
labels = [int(v) for v in open(sys.argv[1]).read().split()]
print(f"acc: {accuracy(preds, labels):.4f}")
'''
LABELS = " ".join(str(int(x % 3 == 0)) for x in range(20))   # 7 ones: predicting 0 scores 0.65

SWAP = ("import atexit, os, sys\ndef _swap():\n    p = os.path.join(os.environ['AUTOLOOP_OUTPUT'], 'preds.txt')\n"
        "    os.remove(p)\n    os.symlink(sys.argv[1], p)\natexit.register(_swap)\n"
        "def predict(x):\n    return int(x % 6 == 0)\n")
CHEATS = {
    # a metric line at exit and a fake answers file next to the predictions
    1: '''W("model.py", "import atexit\\natexit.register(print, 'acc: 1.0')\\n"
         "import os\\nopen(os.path.join(os.environ['AUTOLOOP_OUTPUT'], 'labels.txt'), 'w').write('0 ' * 20)\\n"
         "def predict(x):\\n    return 0\\n")''',
    # the scoring helper the generator can see, rewritten to agree
    2: 'W("helpers.py", "def accuracy(preds, labels):\\n    return 1.0\\n")',
    # the generator itself tries the labels
    3: '''
        try:
            open(LABELS).read(); seen = "read"
        except OSError as exc:
            seen = type(exc).__name__
        (OUT / "generator-private.txt").write_text(seen)
        W("model.py", "def predict(x):\\n    return int(x % 6 == 0)\\n")
    ''',
    # at exit, the predictions become a link to the labels (their path is on the command line)
    4: f'W("model.py", {SWAP!r})',
}


@pytest.fixture(scope="module", params=["strict", "paired"])
def scored(request, tmp_path_factory):
    base = tmp_path_factory.mktemp("score")
    private = base / "private"
    private.mkdir()
    labels = private / "labels.txt"
    labels.write_text(LABELS)
    out = base / "out"
    extra = f"private: [{private}]\nsandbox: {{writable: [{base / 'records'}, {out}]}}"
    if request.param == "paired":
        extra += "\naccept: {rule: paired, pairs: 4, alpha: 0.1, final_pairs: 0}"
    plan = {k: v.replace("LABELS", repr(str(labels))) for k, v in CHEATS.items()}
    p = make_project(base, plan, guards=False, metric="acc", direction="maximize",
                     allowed="[model.py, helpers.py]",
                     files={"model.py": MODEL_PY, "helpers.py": HELPERS_PY, "produce.py": PRODUCE_PY,
                            "score.py": SCORE_PY},
                     verifier=f"{PY} produce.py {labels} {out}\n  score: {PY} score.py {labels}",
                     extra=extra)
    res = p.run("--cycles", "4", timeout=300)
    return p, res, out


def test_cheats_change_nothing_and_a_real_gain_is_kept(scored):
    p, res, _ = scored
    assert res.returncode == 0, res.stdout + res.stderr
    rows = {int(r["cycle"]): r for r in p.rows()}
    assert float(rows[0]["metric"]) == pytest.approx(0.65)
    assert rows[1]["status"] != "keep" and float(rows[1]["metric"] or 0.65) == pytest.approx(0.65)
    assert rows[2]["status"] != "keep" and float(rows[2]["metric"] or 0.65) == pytest.approx(0.65)
    assert rows[3]["status"] == "keep", rows[3]
    assert float(rows[3]["metric"]) == pytest.approx(0.85)   # x % 6 == 0 misses 3, 9 and 15
    assert rows[4]["status"] == "crash" and rows[4]["metric"] == "", rows[4]
    assert "$AUTOLOOP_OUTPUT holds preds.txt, not a regular file or folder" in p.experiments()


def test_the_end_of_run_check_is_scored_too(scored):
    p, _, _ = scored
    finals = [json.loads(line) for line in p.ledger_lines() if line and json.loads(line).get("t") == "final"]
    if "accept:" not in (p.repo / "program.md").read_text():   # strict: final_pairs left at its default
        assert finals and finals[-1]["b"] == [pytest.approx(0.85)] and finals[-1]["a"] == [pytest.approx(0.65)]


def test_private_labels_hidden_from_generator_and_command(scored):
    p, _, out = scored
    assert (out / "command-private.txt").read_text() in ("PermissionError", "FileNotFoundError")
    assert (out / "generator-private.txt").read_text() in ("PermissionError", "FileNotFoundError")


def test_private_labels_never_written_by_the_run(scored):
    p, _, _ = scored
    written = [p.repo / "experiments.md", p.repo / "results.tsv", p.ledger_path()]
    written += [f for f in (p.repo / ".autoloop").rglob("*") if f.is_file()]
    for f in written:
        assert LABELS not in f.read_text(errors="replace"), f
    for r in p.records():
        assert LABELS not in json.dumps(r)


HOLDOUT_PY = '''\
import sys
from pathlib import Path
import model
labels = [int(v) for v in open(sys.argv[1]).read().split()]
Path(sys.argv[2], "holdout-private.txt").write_text("read")
print(f"acc: {sum(model.predict(x) == y for x, y in enumerate(labels)) / len(labels):.4f}")
'''


def test_the_holdout_reads_private_paths(tmp_path):
    private = tmp_path / "private"
    private.mkdir()
    labels = private / "labels.txt"
    labels.write_text(LABELS)
    out = tmp_path / "out"
    extra = (f"private: [{private}]\nsandbox: {{writable: [{tmp_path / 'records'}, {out}]}}\n"
             f"holdout: {{command: {PY} holdout.py {labels} {out}, metric: acc}}\naccept: {{final_pairs: 3}}")
    p = make_project(tmp_path, {1: 'W("model.py", "def predict(x):\\n    return int(x % 6 == 0)\\n")'},
                     guards=False, metric="acc", direction="maximize", allowed="[model.py, helpers.py]",
                     files={"model.py": MODEL_PY, "helpers.py": HELPERS_PY, "produce.py": PRODUCE_PY,
                            "score.py": SCORE_PY, "holdout.py": HOLDOUT_PY},
                     verifier=f"{PY} produce.py {labels} {out}\n  score: {PY} score.py {labels}", extra=extra)
    res = p.run("--cycles", "1", timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert p.statuses()[1] == "keep"
    assert (out / "holdout-private.txt").read_text() == "read"
    assert (out / "command-private.txt").read_text() in ("PermissionError", "FileNotFoundError")
