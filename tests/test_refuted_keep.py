"""Contract §11: a keep the end-of-run check does not confirm is said, everywhere, and undone.
The verifier gives the candidate one lucky measurement (20 where the start measures 40.25), then
the truth: the strict rule keeps it on that one number, and the end-of-run check finds it no
better than the start. The stop line, `log`, the report, `--json`, experiments.md and the CI
journal commit say which keep did not hold and never state its gain as the result; the branch is
back at the start, the refuted commit kept at the tag's own ref; a resumed run compares with the
start's number, so a real gain of the next cycle is kept."""

from __future__ import annotations

import json
from pathlib import Path

from tests.scripts.e2e import assert_journal_consistent, assert_valid_ledger, git, make_project

LUCKY = '''\
import os
from pathlib import Path
v = open("val.txt").read().strip()
if v == "lucky":
    used = Path(os.environ["E2E_OUT"], "lucky-used")
    v = "40.25" if used.exists() else "20"
    used.write_text("once")
print(f"score: {v}")
'''


def test_a_keep_the_end_check_refutes_is_said_and_undone(tmp_path: Path) -> None:
    plan = {1: 'W("val.txt", "lucky")\nhyp("one lucky measurement")\n',
            2: 'W("val.txt", "39\\n")\nhyp("a real gain")\n'}
    p = make_project(tmp_path, plan, files={"lucky.py": LUCKY}, verifier="{py} lucky.py", guards=False)
    start = git(p.repo, "rev-parse", "HEAD", env=p.env)
    res = p.run("--cycles", "1", "--json")
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert p.statuses() == {0: "baseline", 1: "keep"}, out
    kept = p.rows()[1]["commit"]
    said = "cycle 1's keep did not hold: score re-measured 0% against the start"
    stop = next(ln for ln in out.splitlines() if ln.startswith("stopped:"))
    assert said in stop and "no confirmed gain" in stop and "-50" not in stop, stop
    assert "best 40.25" in stop, stop
    # the branch holds the last confirmed commit: the start; the refuted one stays reachable
    assert p.branch_head() == start
    assert git(p.repo, "rev-parse", "refs/autoloop/t1/refuted/1", env=p.env).startswith(kept)
    assert said in p.experiments()
    js = json.loads(res.stdout[res.stdout.index("{"):])
    assert js["confirmed"] is False and said in js["refuted"] and js["headline_gain_pct"] is None
    assert "no confirmed gain" in js["display"]["title"]
    log = p.cli("log", "program.md", "--tag", "t1")
    assert log.returncode == 0 and said in log.stdout and "none confirmed" in log.stdout, log.stdout
    rep = p.cli("report", "program.md", "--tag", "t1", "--format", "markdown")
    assert rep.returncode == 0 and said in rep.stdout and "none confirmed" in rep.stdout, rep.stdout
    html = p.cli("report", "program.md", "--tag", "t1", "-o", str(tmp_path / "r.html"))
    assert html.returncode == 0, html.stderr
    assert "did not confirm the best" in (tmp_path / "r.html").read_text()
    assert_journal_consistent(p)
    assert_valid_ledger(p)

    # resumed: the start is the incumbent again, with its own number: 39 beats 40.25
    res = p.run("--cycles", "1")
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert p.statuses()[2] == "keep", out
    assert git(p.repo, "rev-parse", f"{p.branch()}^", env=p.env) == start
    stop = next(ln for ln in out.splitlines() if ln.startswith("stopped:"))
    assert "best 39" in stop and "did not hold" not in stop, stop
