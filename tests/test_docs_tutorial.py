"""The tutorial runs as written, and prints what it shows: its files are written where their
titles say, its `sh` blocks run in order in one shell in a fresh folder, each block that is not
run says why in its first line, and what each run block printed matches the transcript under it
(the lines that matter: scripts/docs_tutorial.py, which also rewrites them). Claude Code is the
fake CLI of tests/fakes (a real one needs an account); its edit is the obvious speed-up, so the
one cycle the tutorial runs has something to keep."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
try:
    import docs_tutorial as page
finally:
    sys.path.remove(str(ROOT / "scripts"))

TEXT = page.PAGE.read_text(encoding="utf-8")


def test_every_block_is_run_written_or_quoted_and_each_skip_says_why() -> None:
    kinds = page.blocks(TEXT)
    assert sum(1 for b in kinds if b.lang == "sh") >= 10
    for b in kinds:
        if b.body.lstrip().startswith("#") and "not run" in b.body.splitlines()[0]:
            assert b.body.startswith(page.NOT_RUN), b.body.splitlines()[0]
    _, skipped, quotes = page.script(TEXT)     # raises on a block neither run, written nor quoted
    assert all(reason.strip() for reason in skipped)
    assert len(skipped) == 4, skipped   # the venv and pip, the probe, the night, the merge
    # the steps a reader checks by their output: each has its transcript
    assert {"tutorial-pytest", "tutorial-refused", "tutorial-verify", "tutorial-doctor", "tutorial-run", "tutorial-log"} <= set(quotes)


def test_the_comparison_sees_a_changed_verdict_and_not_a_changed_time() -> None:
    run = page.quoted(TEXT)["tutorial-run"]
    assert page.comparable(run) != page.comparable(run.replace("  keep  ", "  discard  ", 1))
    other_times = re.sub(r"\b\d+(?:\.\d+)?s\b", "99.9s", run)
    assert other_times != run and page.comparable(run) == page.comparable(other_times)
    assert any(line.startswith("cycle # keep") for line in page.comparable(run))


@pytest.mark.slow   # the tutorial's commands for real, a cycle of `autoloop run` among them
def test_the_tutorial_runs_as_written_and_prints_what_it_shows(tmp_path: Path) -> None:
    res, outputs = page.run(tmp_path)
    assert res.returncode == 0, res.stdout[-6000:]
    for name, shown in page.quoted(TEXT).items():
        assert page.comparable(outputs[name]) == page.comparable(shown), \
            f"{name} differs from the page (python scripts/docs_tutorial.py rewrites it):\n{outputs[name]}"
    project = tmp_path / "textstats"
    rows = (project / "results.tsv").read_text().splitlines()
    assert [r.split("\t")[3] for r in rows[1:]] == ["baseline", "keep"], rows
    assert (project / ".autoloop" / "tonight" / "report.html").is_file()
    assert "on main, clean" in outputs["tutorial-doctor"]
