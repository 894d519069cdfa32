"""Black-box: however a run ends — a stop condition, `--max-minutes` between cycles or in the
middle of one, SIGINT, SIGTERM — it prints the summary line (baseline → best, branch) and its
`--json` object counts this invocation's cycles as results.tsv records them; in CI the journal
commit line too; and `--max-minutes` skips the end-of-run check, saying so, when it would not fit."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

from tests.scripts.e2e import PY, git, kill_marked, make_project, wait_for

# three kept cycles, then a verifier that hangs (score.py sleeps 60 s on "slow")
PLAN = {1: 'W("val.txt", "39")', 2: 'W("val.txt", "38")', 3: 'W("val.txt", "37")',
        4: 'W("val.txt", "slow")', "*": 'W("val.txt", str(40 - cycle))'}
SUMMARY = "stopped: {reason}. score: baseline 40.25 → best {best}"


def popen(p, *args: str, ci: bool = False) -> subprocess.Popen[str]:
    env = dict(p.env, **({"CI": "true"} if ci else {}))
    return subprocess.Popen([PY, "-m", "autoloop", "run", "program.md", "--tag", p.tag, "--json", *args],
                            cwd=p.repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, stdin=subprocess.DEVNULL, start_new_session=True)


def counts_match_tsv(p, out: dict, first_cycle: int) -> None:
    rows = [r for r in p.rows() if int(r["cycle"]) >= first_cycle]
    by_status: dict[str, int] = {}
    for r in rows:
        by_status[r["status"]] = by_status.get(r["status"], 0) + 1
    assert out["cycles_run"] == len(rows)
    assert out["kept_this_run"] == by_status.get("keep", 0)
    assert out["by_status_this_run"] == by_status


def finish(p, proc: subprocess.Popen[str], timeout: float = 120) -> tuple[str, str]:
    """The run's output once it ends by itself; nothing of it is left running after."""
    try:
        return proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
        kill_marked(p.env)


def interrupt(p, proc: subprocess.Popen[str], sig: signal.Signals = signal.SIGINT) -> tuple[str, str]:
    """`sig` once the verifier of val.txt "slow" runs (to the session for SIGINT, as a terminal's
    Ctrl-C goes); the run's output."""
    try:
        assert wait_for(lambda: (p.out / "verifier-started").exists() or proc.poll() is not None, 120, 0.05)
        if sig == signal.SIGINT:
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(sig)
        return proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        kill_marked(p.env)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_a_signal_ends_with_the_summary_and_true_counts(tmp_path, sig: signal.Signals) -> None:
    p = make_project(tmp_path, PLAN)
    proc = popen(p, "--cycles", "6")
    stdout, stderr = interrupt(p, proc, sig)
    assert proc.returncode == 130, stderr
    out = json.loads(stdout)
    assert out["exit_code"] == 130 and out["stop_reason"] == "interrupted"
    assert out["cycles_run"] == 3 and out["kept_this_run"] == 3
    counts_match_tsv(p, out, 1)
    tip = git(p.repo, "rev-parse", p.branch(), env=p.env)
    line = next(ln for ln in stderr.splitlines() if ln.startswith("stopped: "))
    assert line.startswith(SUMMARY.format(reason="interrupted", best="37"))
    assert f"branch {p.branch()} at {tip[:12]}" in line


@pytest.mark.slow   # waits out a 30-second --max-minutes
def test_deadline_inside_a_cycle_ends_with_the_summary_and_the_journal_commit(tmp_path) -> None:
    p = make_project(tmp_path, PLAN)
    proc = popen(p, "--cycles", "6", "--max-minutes", "0.5", ci=True)
    stdout, stderr = finish(p, proc)
    assert proc.returncode == 0, stderr
    out = json.loads(stdout)
    assert out["stop_reason"].startswith("--max-minutes budget reached")
    counts_match_tsv(p, out, 1)
    assert out["kept_this_run"] == 3
    assert out["journal_commit"] and f"journal committed on {p.branch()}: {out['journal_commit'][:12]}" in stderr
    line = next(ln for ln in stderr.splitlines() if ln.startswith("stopped: "))
    assert line.startswith("stopped: --max-minutes budget reached") and "baseline 40.25 → best 37" in line
    assert f"branch {p.branch()} at" in line


def test_end_of_run_check_that_would_not_fit_is_skipped_and_said(tmp_path) -> None:
    # every verifier run takes 1 s: 12 of them (final_pairs 6) cannot fit in what is left
    p = make_project(tmp_path, {"*": 'W("val.txt", str(40 - cycle))'},
                     verifier="{py} -c \"import time, runpy; time.sleep(1); runpy.run_path('score.py')\"",
                     extra="accept:\n  final_pairs: 6")
    proc = popen(p, "--cycles", "100", "--max-minutes", "0.3")
    stdout, stderr = finish(p, proc)
    assert proc.returncode == 0, stderr
    out = json.loads(stdout)
    assert out["stop_reason"].startswith("--max-minutes budget")
    counts_match_tsv(p, out, 1)
    assert "would not fit in the" in stderr and "left of --max-minutes" in stderr
    line = next(ln for ln in stderr.splitlines() if ln.startswith("stopped: "))
    assert "baseline 40.25 → best" in line and f"branch {p.branch()} at" in line
    assert "skipped" in line
    finals = [r for r in map(json.loads, p.ledger_path().read_text().splitlines()) if r["t"] == "final"]
    assert finals and "would not fit" in finals[-1]["skipped"]


def test_a_resumed_run_counts_only_its_own_cycles(tmp_path) -> None:
    p = make_project(tmp_path, {"*": 'W("val.txt", str(40 - cycle))'})
    assert p.run("--cycles", "2").returncode == 0
    res = p.cli("run", "program.md", "--tag", p.tag, "--cycles", "3", "--json")
    kill_marked(p.env)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["cycles_run"] == 3 and out["kept_this_run"] == 3 and out["kept"] == 5
    counts_match_tsv(p, out, 3)


def test_nothing_kept_is_said_once(tmp_path) -> None:
    # every candidate is worse: the end-of-run check is skipped, and its line says why; the
    # summary line says "0 kept" and best = baseline without repeating that reason
    p = make_project(tmp_path, {"*": 'W("val.txt", "45")'})
    res = p.run("--cycles", "1")
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.count("nothing was kept") == 1, res.stdout
    assert "final      not re-measured: nothing was kept: the best is the starting code\n" in res.stdout
    # nothing is measured at the end, so no line announces a re-measurement
    assert "end-of-run check" not in res.stdout, res.stdout
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("stopped: "))
    assert line.startswith(SUMMARY.format(reason="max_cycles reached (1 cycle)", best="40.25") + ", gain 0%; 0 kept"), line
    assert line.endswith(f"branch {p.branch()} at {git(p.repo, 'rev-parse', p.branch(), env=p.env)[:12]}"), line


def test_a_signal_during_the_baseline_still_ends_the_ledger(tmp_path) -> None:
    """Interrupted before cycle 1 (a Ctrl-C, or the Ray cluster lost, which ends a run the same
    way): the ledger still gets its `end` record, and the next run measures the baseline afresh."""
    p = make_project(tmp_path, PLAN, files={"val.txt": "slow"})
    proc = popen(p, "--cycles", "1")
    stdout, stderr = interrupt(p, proc)
    assert proc.returncode == 130, stderr
    ledger = p.repo / ".autoloop" / p.tag / "ledger.jsonl"
    recs = [json.loads(x) for x in ledger.read_text().splitlines()]
    assert not [r for r in recs if r["t"] == "cycle"], recs
    assert {k: recs[-1].get(k) for k in ("t", "reason", "cycles_run")} == \
        {"t": "end", "reason": "interrupted", "cycles_run": 0}, recs[-1]
    (p.repo / "val.txt").write_text("40\n")
    git(p.repo, "commit", "-qam", "a fast verifier", env=p.env)
    again = popen(p, "--cycles", "1")
    stdout, stderr = again.communicate(timeout=300)
    assert again.returncode == 0, stderr
    statuses = [r["status"] for r in (json.loads(x) for x in ledger.read_text().splitlines()) if r["t"] == "cycle"]
    assert statuses[0] == "baseline" and len(statuses) == 2, statuses
