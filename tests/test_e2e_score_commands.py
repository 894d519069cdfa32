"""Black-box: `verifier.score` outside a run's cycles — `verify` and `doctor` score HEAD with
HEAD's score, `gate` scores both sides with the base's — and the score's tree of the start commit
holding when the candidate's code goes after it (sandboxed: read-only; unsandboxed: made exactly
the start commit again before each score)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.scripts.e2e import PY, make_project
from tests.test_e2e_score import HELPERS_PY, LABELS, MODEL_PY, PRODUCE_PY, SCORE_PY
from tests.isolation.test_sandbox import PROBLEM
from tests.conftest import git

pytestmark = pytest.mark.skipif(PROBLEM is not None, reason=PROBLEM or "")

# the candidate's code, run by the command, rewrites the scoring helper in every score tree it finds
REACH_SCORE_TREE = '''W("model.py", """import glob, os
for root in (os.environ.get("XDG_CACHE_HOME", ""), os.path.expanduser("~/.cache")):
    for f in glob.glob(os.path.join(root, "autoloop", "worktrees", "*", "*.score", "helpers.py")):
        try:
            open(f, "w").write("def accuracy(preds, labels):\\\\n    return 1.0\\\\n")
        except OSError:
            pass
def predict(x):
    return 0
""")'''


def project(base: Path, sandbox: str = "", plan: dict | None = None):
    private = base / "private"
    private.mkdir(parents=True)
    labels = private / "labels.txt"
    labels.write_text(LABELS)
    out = base / "out"
    extra = f"private: [{private}]\n" if sandbox != "none" else ""
    extra += f"sandbox: {{kind: {sandbox or 'auto'}, writable: [{base / 'records'}, {out}]}}"
    return make_project(base, plan or {}, guards=False, metric="acc", direction="maximize",
                        allowed="[model.py, helpers.py]",
                        files={"model.py": MODEL_PY, "helpers.py": HELPERS_PY, "produce.py": PRODUCE_PY,
                               "score.py": SCORE_PY},
                        verifier=f"{PY} produce.py {labels} {out}\n  score: {PY} score.py {labels}",
                        extra=extra)


def test_verify_and_doctor_read_the_metric_from_the_score(tmp_path: Path) -> None:
    p = project(tmp_path)
    res = p.cli("verify", "program.md")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "\nacc: 0.65  (maximize" in res.stdout, res.stdout   # the command printed acc: 0.0
    res = p.cli("doctor", "program.md")
    assert "acc = 0.65 on HEAD" in res.stdout, res.stdout + res.stderr


def test_gate_scores_both_sides_with_the_base_score(tmp_path: Path) -> None:
    p = project(tmp_path)
    base = git(p.repo, "rev-parse", "HEAD")
    # the head improves the model and rewrites the scoring helper to agree: only the first counts
    (p.repo / "model.py").write_text("def predict(x):\n    return int(x % 6 == 0)\n")
    (p.repo / "helpers.py").write_text("def accuracy(preds, labels):\n    return 1.0\n")
    git(p.repo, "commit", "-qam", "head")
    res = p.cli("gate", "program.md", "--base", base, "--pairs", "6")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "| min … max | 0.65 … 0.65 | 0.85 … 0.85 |" in res.stdout, res.stdout


@pytest.mark.parametrize("sandbox", ["auto", "none"])
def test_candidate_code_cannot_change_the_score_tree(tmp_path: Path, sandbox: str) -> None:
    p = project(tmp_path, sandbox, {1: REACH_SCORE_TREE})
    res = p.run("--cycles", "1")
    assert res.returncode == 0, res.stdout + res.stderr
    rows = {int(r["cycle"]): r for r in p.rows()}
    assert rows[1]["status"] != "keep", rows[1]
    assert float(rows[1]["metric"] or 0.65) == pytest.approx(0.65)


def test_parallel_lanes_share_the_score_tree(tmp_path: Path) -> None:
    p = project(tmp_path, plan={1: 'W("model.py", "def predict(x):\\n    return int(x % 6 == 0)\\n")',
                                2: 'W("helpers.py", "def accuracy(preds, labels):\\n    return 1.0\\n")'})
    text = (p.repo / "program.md").read_text().replace("\n---\n", "\nparallel: {workers: 2}\n---\n", 1)
    (p.repo / "program.md").write_text(text)
    git(p.repo, "commit", "-qam", "two workers")
    res = p.run("--cycles", "2", timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    rows = {int(r["cycle"]): r for r in p.rows()}
    assert rows[1]["status"] == "keep" and float(rows[1]["metric"]) == pytest.approx(0.85), rows
    assert rows[2]["status"] != "keep" and float(rows[2]["metric"] or 0.65) == pytest.approx(0.65), rows
    assert any(line.endswith(".score") for line in git(p.repo, "worktree", "list").splitlines()[1:]
               for line in [line.split()[0]])
    res = p.cli("clean", "program.md", "--tag", "t1", "--yes")
    assert res.returncode == 0, res.stdout + res.stderr
    assert len(git(p.repo, "worktree", "list").splitlines()) == 1   # the score's tree went too
