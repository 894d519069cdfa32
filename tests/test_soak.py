"""Soak: SIGKILL autoloop at ≥ 30 random moments across one long run, resuming after each kill.

The generator makes random moves — improve, worsen, crash the verifier, cheat, fail the guard,
leave a detached process behind — so the kills land in every phase: start-up, attach/rollback,
generate, scope, verify, commit, journal writes. Half the kills take only autoloop (its
generator or verifier lives on, orphaned, and must be dealt with by the resumed run), half take
the whole process tree (the machine dies). Afterwards:

- the run branch's HEAD is the last kept commit, and the branch holds exactly the kept commits;
- the work tree equals that commit (git sees nothing to report, not even ignored files);
- each finished cycle is journaled exactly once (ledger, results.tsv, experiments.md), no torn
  ledger lines, no finished cycle lost;
- the best metric in the journal is the metric of the branch's commit;
- nothing is left running; your checkout is untouched.

Set E2E_SOAK_SEED to replay a run; E2E_SOAK_KILLS to change the number of kills.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time

import pytest

from tests.scripts.e2e import (alive, assert_journal_consistent, assert_valid_ledger, experiments_sections, git,
                               kill_marked, make_project, marked_pids)

SOAK_PLAN = {"*": '''
    r = random.Random(cycle * 7919 + time.time_ns())
    time.sleep(r.uniform(0, 0.25))
    k = r.random()
    cur = float(open("val.txt").read())
    if k < 0.42:
        W("val.txt", str(round(cur - r.uniform(0.05, 1.0), 3)))
    elif k < 0.55:
        W("val.txt", str(cur + 5))
    elif k < 0.63:
        W("val.txt", "exit")
    elif k < 0.71:
        open("score.py", "a").write("# cheat\\n")
    elif k < 0.78:
        W("notes.txt", "FAIL")
        W("val.txt", str(round(cur - 0.5, 3)))
    elif k < 0.85:
        c = subprocess.Popen(["setsid", "sleep", "30"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        (OUT / "pids").mkdir(exist_ok=True)
        (OUT / "pids" / str(c.pid)).write_text("")
        W("val.txt", str(round(cur - 0.2, 3)))
    print(f"Hypothesis: random move {cycle} k={k:.2f}")
'''}


def _kill(proc, env, whole_tree: bool) -> int:
    """SIGKILL autoloop (and, when whole_tree, everything it started). Returns its exit status."""
    try:
        if whole_tree:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            os.kill(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    if whole_tree:
        kill_marked(env)
    proc.stdout.close()
    proc.stderr.close()
    return proc.returncode


@pytest.fixture(scope="module")
def soak(tmp_path_factory):
    # the unsandboxed fallback: its escapees' pids are the host's, so the test can check them
    # (sandboxed, a PID namespace kills them and their pids are the namespace's own)
    p = make_project(tmp_path_factory.mktemp("soak"), SOAK_PLAN, extra="sandbox: none")
    start = git(p.repo, "rev-parse", "HEAD", env=p.env)
    user_status = git(p.repo, "status", "--porcelain", "--untracked-files=all", env=p.env)
    assert p.run("--cycles", "0").returncode == 0
    seed = int(os.environ.get("E2E_SOAK_SEED", time.time_ns() % 10**9))
    kills = int(os.environ.get("E2E_SOAK_KILLS", 36))
    rng = random.Random(seed)
    log = {"seed": seed, "kills": [], "resume_failures": []}
    t0 = time.monotonic()
    for i in range(kills):
        before = len(p.rows())
        proc = p.popen("--cycles", "100000")
        # early kills land in start-up and the rollback of the last cycle; later ones mid-cycle
        delay = rng.choice([rng.uniform(0.05, 0.6), rng.uniform(0.6, 4.0), rng.uniform(0.6, 4.0)])
        time.sleep(delay)
        was_running = proc.poll() is None
        rc = _kill(proc, p.env, whole_tree=bool(i % 2))
        log["kills"].append({"i": i, "delay": round(delay, 3), "running": was_running, "rc": rc,
                             "rows_before": before})
    final = p.run("--cycles", "3", timeout=180)
    log["seconds"] = round(time.monotonic() - t0, 1)
    leftovers = marked_pids(p.env)
    escapees = [int(f.name) for f in (p.out / "pids").glob("*")] if (p.out / "pids").exists() else []
    alive_escapees = [pid for pid in escapees if alive(pid)]
    kill_marked(p.env)
    (p.base / "soak.json").write_text(json.dumps(log, indent=1))
    print(f"\nsoak: seed {seed}, {sum(k['running'] and k['rc'] == -9 for k in log['kills'])} kills of a "
          f"running autoloop in {log['seconds']} s, {len(p.rows())} cycles journaled")
    return p, start, final, log, user_status, leftovers, alive_escapees


def _kept(p):
    return [r for r in p.rows() if r["status"] in ("baseline", "keep")]


@pytest.mark.slow
def test_soak_kills_landed(soak):
    log = soak[3]
    landed = [k for k in log["kills"] if k["running"] and k["rc"] == -signal.SIGKILL]
    assert len(landed) >= 30, log


@pytest.mark.slow
def test_soak_spans_a_long_run(soak):
    # kills spread over many cycles, not only over start-up: most land mid-cycle
    p = soak[0]
    assert len(p.rows()) >= 20, len(p.rows())


@pytest.mark.slow
def test_soak_final_run_succeeds(soak):
    final, log = soak[2], soak[3]
    assert final.returncode == 0, (final.stderr, log["seed"])


@pytest.mark.slow
def test_soak_branch_head_is_last_kept_commit(soak):
    p = soak[0]
    assert p.branch_head().startswith(_kept(p)[-1]["commit"])


@pytest.mark.slow
def test_soak_branch_holds_exactly_the_keeps(soak):
    p, start = soak[0], soak[1]
    keeps = [r["commit"] for r in p.rows() if r["status"] == "keep"]
    commits = list(reversed(p.branch_commits(start)))
    assert len(commits) == len(keeps), (commits, keeps)
    assert all(c.startswith(k) for c, k in zip(commits, keeps))


@pytest.mark.slow
def test_soak_work_tree_equals_the_branch(soak):
    p = soak[0]
    wt = p.worktree()
    assert git(wt, "rev-parse", "HEAD", env=p.env) == p.branch_head()
    assert git(wt, "status", "--porcelain", "--ignored", "--untracked-files=all", env=p.env) == ""
    for name in ("val.txt", "score.py", "notes.txt", "guard.py"):
        assert (wt / name).read_bytes() == p.show(p.branch(), name), name


@pytest.mark.slow
def test_soak_each_finished_cycle_journaled_once(soak):
    p = soak[0]
    recs = assert_valid_ledger(p)                      # no torn line anywhere
    cycles = [r["cycle"] for r in recs if r["t"] == "cycle"]
    assert cycles == list(range(len(cycles))), cycles  # once each, in order, none lost
    assert [int(r["cycle"]) for r in p.rows()] == cycles
    assert [c for c, _ in experiments_sections(p.experiments())] in (cycles, cycles[1:])
    assert_journal_consistent(p)
    # every cycle that began either finished (a cycle record) or was rolled back (an abort)
    began = [r["cycle"] for r in recs if r["t"] == "begin"]
    ended = {(r["cycle"], i) for i, r in enumerate(recs) if r["t"] in ("cycle", "abort")}
    assert set(began) <= {c for c, _ in ended}


@pytest.mark.slow
def test_soak_best_metric_is_the_branch_metric(soak):
    p = soak[0]
    kept = [float(r["metric"]) for r in _kept(p)]
    assert kept == sorted(kept, reverse=True)          # minimize: each keep strictly better
    assert len(set(kept)) == len(kept)
    assert float(p.show(p.branch(), "val.txt")) == kept[-1]
    assert float(p.rows()[-1]["best"]) == kept[-1]


@pytest.mark.slow
def test_soak_nothing_left_running(soak):
    assert soak[5] == [] and soak[6] == []


@pytest.mark.slow
def test_soak_user_checkout_untouched(soak):
    p, start, _, _, user_status, *_ = soak
    assert git(p.repo, "rev-parse", "HEAD", env=p.env) == start
    assert git(p.repo, "status", "--porcelain", "--untracked-files=all", env=p.env) == user_status
