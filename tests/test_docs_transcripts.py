"""The transcripts the documentation quotes from the quickstart (docs/quickstart.md, README.md)
are what a fresh quickstart run prints today: the same cycles, statuses, values, changes, keeps
and gain, compared with the times and commit hashes taken out. scripts/docs_transcripts.py
rewrites them (and docs/report.png) from such a run."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
try:
    import docs_transcripts as script
finally:
    sys.path.remove(str(ROOT / "scripts"))


@pytest.mark.slow   # the quickstart run for real
def test_every_quoted_transcript_matches_a_fresh_quickstart_run(tmp_path: Path) -> None:
    fresh = script.quickstart(tmp_path)
    compared = 0
    for page in script.PAGES:
        for name, text in script.quoted(page).items():
            assert script.normalised(text) == script.normalised(fresh[name]), \
                f"{page.name}: {name} differs from a fresh run: python scripts/docs_transcripts.py"
            compared += 1
    assert compared == 5
    # what the comparison leaves out is only what varies: the values stay in
    assert "0.171156" in script.normalised(fresh["quickstart-run"])
    assert "-67.86%" in script.normalised(fresh["quickstart-run"])


def test_the_comparison_sees_a_changed_number() -> None:
    quoted = script.quoted(ROOT / "docs" / "quickstart.md")["quickstart-run"]
    assert script.normalised(quoted) != script.normalised(quoted.replace("0.171156", "0.171157"))
    other_times = re.sub(r"\b\d+\.\ds\b", "9.9s", quoted)
    assert other_times != quoted and script.normalised(quoted) == script.normalised(other_times)
