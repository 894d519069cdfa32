"""Black-box: parallel rounds (`parallel: {workers: N, verify: M}`, `--workers N`) through the
installed CLI, with real git repositories, scripted generators and real verifier processes."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import time

import pytest

from tests.scripts.e2e import (random_moves_plan, assert_journal_consistent, assert_valid_ledger, experiments_sections, git,
                               kill_marked, make_project, marked_pids, section_field, wait_for)


def _ledger(p) -> list[dict]:
    return assert_valid_ledger(p)


def _await(pred, proc, timeout: float = 60) -> None:
    if wait_for(lambda: pred() or proc.poll() is not None, timeout) and pred():
        return
    if proc.poll() is None:
        proc.kill()
    out, err = proc.communicate()
    raise AssertionError(f"the awaited state never came (run exit {proc.returncode}):\n{out[-2000:]}\n{err[-2000:]}")


def _sigkill_tree(proc, env) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    kill_marked(env)
    for stream in (proc.stdout, proc.stderr):
        if stream:
            stream.close()


def assert_round_consistent(p, start: str) -> None:
    """What any run, parallel or not, must leave: each finished cycle once, in order, in the ledger
    and both journal files; every begun cycle closed exactly once; the branch = the keeps."""
    recs = _ledger(p)
    assert_journal_consistent(p)
    cycles = [r["cycle"] for r in recs if r["t"] == "cycle"]
    assert cycles == list(range(len(cycles))), cycles
    # every `begin` is closed by exactly one `cycle` or `abort` before the run's `end`
    open_: set[int] = set()
    for r in recs:
        if r["t"] == "begin":
            assert r["cycle"] not in open_, f"cycle {r['cycle']} begun twice without an end"
            open_.add(r["cycle"])
        elif r["t"] in ("cycle", "abort"):
            assert r["cycle"] in open_, f"{r['t']} for cycle {r['cycle']} that was not begun"
            open_.discard(r["cycle"])
    assert not open_, f"cycles left open: {sorted(open_)}"
    rows = p.rows()
    keeps = [r["commit"] for r in rows if r["status"] == "keep"]
    commits = list(reversed(p.branch_commits(start)))
    assert len(commits) == len(keeps) and all(c.startswith(k) for c, k in zip(commits, keeps))
    head = p.branch_head()
    assert head.startswith(keeps[-1] if keeps else rows[0]["commit"])
    measured = [float(r["metric"]) for r in rows if r["status"] in ("baseline", "keep")]
    assert measured == sorted(measured, reverse=True)        # minimize: the ratchet only goes down
    assert float(p.show(p.branch(), "val.txt")) == measured[-1]


# ---------------------------------------------------------------------------------------------
# One round: the best of N is kept; every candidate is a cycle of its own


@pytest.fixture(scope="module")
def one_round(tmp_path_factory):
    plan = {
        1: 'W("val.txt", "39"); hyp("to 39")',
        2: 'W("val.txt", "35"); hyp("to 35")',         # the best of the round
        3: 'W("val.txt", "41"); hyp("to 41")',         # worse than the incumbent
        4: 'W("val.txt", "37"); hyp("to 37")',
    }
    p = make_project(tmp_path_factory.mktemp("round"), plan, extra="parallel: {workers: 4}")
    start = git(p.repo, "rev-parse", "HEAD", env=p.env)
    res = p.run("--cycles", "4")
    return p, start, res


def test_round_exit_0(one_round):
    p, _, res = one_round
    assert res.returncode == 0, res.stderr


def test_round_keeps_the_best_of_n(one_round):
    p, start, _ = one_round
    assert p.statuses() == {0: "baseline", 1: "discard", 2: "keep", 3: "discard", 4: "discard"}
    assert p.show(p.branch(), "val.txt").strip() == b"35"
    assert len(p.branch_commits(start)) == 1
    assert_round_consistent(p, start)


def test_round_every_candidate_has_ledger_entries(one_round):
    p, _, _ = one_round
    recs = _ledger(p)
    for n in range(1, 5):
        assert [r["t"] for r in recs if r.get("cycle") == n and r["t"] in ("begin", "cycle")] == ["begin", "cycle"]
    assert [r["cycle"] for r in recs if r["t"] == "intent"] == [2]
    begins = [r for r in recs if r["t"] == "begin" and r["cycle"] >= 1]
    # write-ahead: the whole round is begun before any candidate is recorded
    first_cycle = next(i for i, r in enumerate(recs) if r["t"] == "cycle" and r["cycle"] >= 1)
    assert all(recs.index(b) < first_cycle for b in begins)
    assert sorted(b["worker"] for b in begins) == [0, 1, 2, 3]


def test_round_every_candidate_has_a_lesson(one_round):
    p, _, _ = one_round
    sections = dict(experiments_sections(p.experiments()))
    assert set(sections) >= {1, 2, 3, 4}
    for n in range(1, 5):
        assert section_field(sections[n], "Hypothesis") == {1: "to 39", 2: "to 35", 3: "to 41", 4: "to 37"}[n]
        assert section_field(sections[n], "Lesson")
    # beaten in the round, not by the rule: the lesson says so
    assert "cycle 2" in section_field(sections[1], "Lesson")
    assert "cycle 2" in section_field(sections[4], "Lesson")
    assert "worse" in section_field(sections[3], "Lesson")


def test_round_workers_have_their_own_trees_and_env(one_round):
    p, _, _ = one_round
    recs = {r["cycle"]: r for r in p.records()}
    assert sorted(recs) == [1, 2, 3, 4]
    assert len({r["cwd"] for r in recs.values()}) == 4
    assert all(r["cwd"] != str(p.repo) for r in recs.values())
    assert sorted(r["env"]["AUTOLOOP_WORKER"] for r in recs.values()) == ["0", "1", "2", "3"]
    assert {r["env"]["AUTOLOOP_CYCLE"] for r in recs.values()} == {"1", "2", "3", "4"}
    # every worker saw the same incumbent and was told it is one of several
    assert {r["env"]["AUTOLOOP_BEST"] for r in recs.values()} == {"40.25"}
    assert all("Parallel round" in r["prompt"] for r in recs.values())


def test_round_user_checkout_untouched(one_round):
    p, start, _ = one_round
    assert git(p.repo, "rev-parse", "HEAD", env=p.env) == start
    assert git(p.repo, "status", "--porcelain", env=p.env) == ""


# ---------------------------------------------------------------------------------------------
# Scope: one worker's violation is its own


def test_violation_in_one_worker_leaves_the_others(tmp_path):
    plan = {
        1: 'W("val.txt", "38"); hyp("honest 38")',
        2: 'W("val.txt", "30"); open("score.py", "a").write("# cheat\\n"); hyp("cheat on the verifier")',
        3: 'W("README.md", "not allowed"); W("val.txt", "31"); hyp("touch README")',
        4: 'W("val.txt", "36"); hyp("honest 36")',
        # the next round starts from clean trees: the cheaters' edits are gone
        "*": 'assert "cheat" not in open("score.py").read(); assert "not allowed" not in open("README.md").read(); '
             'W("val.txt", str(float(open("val.txt").read()) - 1)); hyp("one less")',
    }
    p = make_project(tmp_path, plan, extra="parallel: {workers: 4}")
    start = git(p.repo, "rev-parse", "HEAD", env=p.env)
    res = p.run("--cycles", "8")
    assert res.returncode == 0, res.stderr
    st = p.statuses()
    why = [(r["cycle"], r["status"], r["lesson"]) for r in p.rows()]
    assert [st[n] for n in range(1, 5)] == ["discard", "violation", "violation", "keep"], why
    assert [st[n] for n in range(5, 9)] == ["keep", "discard", "discard", "discard"], why
    assert p.show(p.branch(), "val.txt").strip() == b"35.0"
    assert_round_consistent(p, start)
    rows = {int(r["cycle"]): r for r in p.rows()}
    assert "score.py" in rows[2]["lesson"] and "README.md" in rows[3]["lesson"]


def test_shared_tampering_voids_the_whole_round(tmp_path):
    """A change to what all workers share (git's config) cannot be pinned on one worker."""
    plan = {
        1: 'W("val.txt", "38")',
        2: 'open(common() / "config", "a").write("[alias]\\n\\tx = status\\n"); W("val.txt", "30")',
        "*": 'W("val.txt", str(40 - cycle))',
    }
    # the watching fallback; sandboxed, see the test below
    p = make_project(tmp_path, plan, extra="parallel: {workers: 2}\nsandbox: none")
    config = (p.repo / ".git" / "config").read_bytes()
    res = p.run("--cycles", "4")
    assert res.returncode == 0, res.stderr
    st = p.statuses()
    assert st[1] == st[2] == "violation"
    assert st[3] == "discard" and st[4] == "keep"
    assert (p.repo / ".git" / "config").read_bytes() == config
    rows = {int(r["cycle"]): r for r in p.rows()}
    assert "at once" in rows[1]["lesson"]


def test_shared_tampering_is_refused_by_the_sandbox(tmp_path):
    """Sandboxed, git's shared files are read-only to every worker: the tampering worker fails
    on its own and the other worker's candidate is judged on its merits."""
    plan = {
        1: 'W("val.txt", "38")',
        2: 'open(common() / "config", "a").write("[alias]\\n\\tx = status\\n"); W("val.txt", "30")',
        "*": 'W("val.txt", str(40 - cycle))',
    }
    p = make_project(tmp_path, plan, extra="parallel: {workers: 2}")
    config = (p.repo / ".git" / "config").read_bytes()
    res = p.run("--cycles", "2")
    assert res.returncode == 0, res.stderr
    st = p.statuses()
    assert (st[1], st[2]) == ("keep", "gen_error"), p.rows()
    assert (p.repo / ".git" / "config").read_bytes() == config


# ---------------------------------------------------------------------------------------------
# The verification cap: at most M verifier processes at once (timestamps from the verifier)

TIMED_VERIFIER = '''\
import os, sys, time
from pathlib import Path
out = Path(os.environ["E2E_OUT"]) / "spans"
out.mkdir(exist_ok=True)
t0 = time.time()
time.sleep(0.6)
v = open("val.txt").read().strip()
(out / f"{os.getpid()}-{time.time_ns()}").write_text(f"{t0} {time.time()} {os.environ.get('AUTOLOOP_WORKER', '-')}")
print(f"score: {v}")
'''


def _max_overlap(spans: list[tuple[float, float]]) -> int:
    events = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans], key=lambda e: (e[0], e[1]))
    cur = best = 0
    for _, d in events:
        cur += d
        best = max(best, cur)
    return best


@pytest.mark.parametrize("workers,verify,cap", [(4, 2, 2), (3, None, 3)])
def test_verify_cap_is_honoured(tmp_path, workers, verify, cap):
    par = f"parallel: {{workers: {workers}" + (f", verify: {verify}" if verify else "") + "}"
    p = make_project(tmp_path, {"*": 'W("val.txt", str(40 - cycle))'}, verifier="{py} timed.py",
                     files={"timed.py": TIMED_VERIFIER}, extra=par, guards=False)
    res = p.run("--cycles", str(2 * workers))
    assert res.returncode == 0, res.stderr
    spans = []
    for f in (p.out / "spans").iterdir():
        a, b, worker = f.read_text().split()
        if worker != "-":            # round verifications (the baseline runs before any round)
            spans.append((float(a), float(b)))
    assert len(spans) == 2 * workers, [(r["cycle"], r["status"], r["lesson"]) for r in p.rows()]
    assert _max_overlap(spans) == cap


# ---------------------------------------------------------------------------------------------
# Resource hints: worker i gets env[i]


def test_worker_env_hints(tmp_path):
    verifier = ("{py} -c \"import os; print('seen', os.environ.get('SLOT')); "
                "print('score:', open('val.txt').read())\"")
    extra = 'parallel:\n  workers: 2\n  env:\n    - {SLOT: "a"}\n    - {SLOT: 7}'
    plan = {"*": 'W("val.txt", str(40 - cycle)); (OUT / f"gen-{os.environ[\'AUTOLOOP_WORKER\']}").write_text(os.environ["SLOT"])'}
    p = make_project(tmp_path, plan, verifier=verifier, extra=extra, guards=False)
    res = p.run("--cycles", "2")
    assert res.returncode == 0, res.stderr
    assert (p.out / "gen-0").read_text() == "a" and (p.out / "gen-1").read_text() == "7"
    logs = p.repo / ".autoloop" / p.tag / "logs"
    seen = {}
    for n in (1, 2):
        worker = next(r["worker"] for r in _ledger(p) if r["t"] == "cycle" and r["cycle"] == n)
        seen[worker] = (logs / f"cycle-{n:04d}" / "verifier.out").read_text().split()[1]
    assert seen == {0: "a", 1: "7"}


# ---------------------------------------------------------------------------------------------
# kill -9 in the middle of a 4-worker run, then resume

KILL_PLAN = random_moves_plan(max_sleep=0.3)


@pytest.fixture(scope="module")
def killed_round(tmp_path_factory):
    p = make_project(tmp_path_factory.mktemp("kill9p"), KILL_PLAN, extra="parallel: {workers: 4}")
    start = git(p.repo, "rev-parse", "HEAD", env=p.env)
    user_status = git(p.repo, "status", "--porcelain", "--untracked-files=all", env=p.env)
    assert p.run("--cycles", "0").returncode == 0
    seed = int(os.environ.get("E2E_KILL_SEED", time.time_ns() % 10**9))
    rng = random.Random(seed)
    for _ in range(8):
        proc = p.popen("--cycles", "1000")
        time.sleep(rng.uniform(0.2, 2.5))
        _sigkill_tree(proc, p.env)
    final = p.run("--cycles", "8", timeout=180)
    leftovers = marked_pids(p.env)
    kill_marked(p.env)
    return p, start, final, seed, user_status, leftovers


def test_kill9_parallel_resume_succeeds(killed_round):
    p, _, final, seed, *_ = killed_round
    assert final.returncode == 0, (seed, final.stderr)


def test_kill9_parallel_journal_consistent(killed_round):
    p, start, _, seed, *_ = killed_round
    assert_round_consistent(p, start)
    assert len(p.rows()) >= 9, seed


def test_kill9_parallel_rolled_back_cycles_are_aborted(killed_round):
    """Every cycle number appears in the ledger as finished exactly once, whatever was cut short."""
    p = killed_round[0]
    recs = _ledger(p)
    done = [r["cycle"] for r in recs if r["t"] == "cycle"]
    assert len(done) == len(set(done))


def test_kill9_parallel_trees_clean_and_checkout_untouched(killed_round):
    p, start, _, _, user_status, leftovers = killed_round
    wt = p.worktree()
    assert git(wt, "rev-parse", "HEAD", env=p.env) == p.branch_head()
    assert git(wt, "status", "--porcelain", "--ignored", "--untracked-files=all", env=p.env) == ""
    assert git(p.repo, "rev-parse", "HEAD", env=p.env) == start
    assert git(p.repo, "status", "--porcelain", "--untracked-files=all", env=p.env) == user_status
    assert leftovers == []


def test_kill9_while_all_workers_verify(tmp_path):
    """Killed while the four verifiers of a round run: the round is rolled back as a whole and
    its cycle numbers are used again by the resumed run."""
    plan = {"*": 'W("val.txt", str(40 - cycle))', 2: 'W("val.txt", "slow")'}
    p = make_project(tmp_path, plan, extra="parallel: {workers: 4}")
    start = git(p.repo, "rev-parse", "HEAD", env=p.env)
    proc = p.popen("--cycles", "8")
    _await((p.out / "verifier-started").exists, proc)
    _sigkill_tree(proc, p.env)
    recs = _ledger(p)
    assert [r["cycle"] for r in recs if r["t"] == "begin" and r["cycle"] > 0] == [1, 2, 3, 4]
    assert not [r for r in recs if r["t"] == "cycle" and r["cycle"] > 0]
    p.set_plan({"*": 'W("val.txt", str(40 - cycle))'})
    res = p.run("--cycles", "4")
    assert res.returncode == 0, res.stderr
    recs = _ledger(p)
    assert sorted(r["cycle"] for r in recs if r["t"] == "abort") == [1, 2, 3, 4]
    assert p.statuses() == {0: "baseline", 1: "discard", 2: "discard", 3: "discard", 4: "keep"}
    assert_round_consistent(p, start)


def _round_cut_after(p, at) -> dict:
    """One round of three, then its ledger as a kill right after the record `at(records, keep)`
    picks leaves it (the branch already at the round's winner); returns the keep's record."""
    assert p.run("--cycles", "3").returncode == 0
    ledger = p.ledger_path()
    lines = ledger.read_bytes().splitlines(keepends=True)
    recs = [json.loads(x) for x in lines]
    keep = next(r for r in recs if r["t"] == "cycle" and r["status"] == "keep")
    ledger.write_bytes(b"".join(lines[:at(recs, keep) + 1]))
    assert p.branch_head() == keep["commit"]
    return keep


def test_kill9_between_intent_and_record_rolls_back_the_keep(tmp_path):
    """The ledger as a kill right after the winner's branch move leaves it (intent written, the
    branch moved, no cycle record for it): resume moves the branch back and aborts the winner's
    cycle; the round's cycles recorded before it stand (each finished cycle once)."""
    p = make_project(tmp_path, {"*": 'W("val.txt", str(40 - cycle))'}, extra="parallel: {workers: 3}")
    start = git(p.repo, "rev-parse", "HEAD", env=p.env)
    # cycle records and `end` of the round lost
    _round_cut_after(p, lambda recs, keep: next(i for i, r in enumerate(recs) if r["t"] == "intent"))
    res = p.run("--cycles", "3")
    assert res.returncode == 0, res.stderr
    recs = _ledger(p)
    assert [r["cycle"] for r in recs if r["t"] == "abort"] == [3]
    assert_round_consistent(p, start)
    assert p.statuses() == {0: "baseline", 1: "discard", 2: "discard", 3: "discard", 4: "discard", 5: "keep"}
    assert p.show(p.branch(), "val.txt").strip() == b"35"


def test_kill9_after_the_winners_record_keeps_it_and_aborts_the_rest(tmp_path):
    """The ledger as a kill after the winner's cycle record but before the round's later ones
    leaves it (found by the kill -9 soak above in CI): the branch is at the winner, which the
    ledger records as kept; the later cycles never moved the branch, so resume aborts them and
    goes on from the winner."""
    plan = {1: 'W("val.txt", "38")', 2: 'W("val.txt", "35")', 3: 'W("val.txt", "39")',
            "*": 'W("val.txt", str(30 - cycle))'}
    p = make_project(tmp_path, plan, extra="parallel: {workers: 3}")
    start = git(p.repo, "rev-parse", "HEAD", env=p.env)
    keep = _round_cut_after(p, lambda recs, keep: recs.index(keep))   # cycle 3's record and `end` lost
    assert keep["cycle"] == 2
    res = p.run("--cycles", "3")
    assert res.returncode == 0, res.stderr
    assert [r["cycle"] for r in _ledger(p) if r["t"] == "abort"] == [3]
    assert_round_consistent(p, start)
    # the next round starts from the winner (35): cycle 3 again writes 39, 4 and 5 go below
    assert p.statuses() == {0: "baseline", 1: "discard", 2: "keep", 3: "discard", 4: "discard", 5: "keep"}
    assert p.show(p.branch(), "val.txt").strip() == b"25"


def test_resume_parallel_run_with_one_worker(tmp_path):
    """A round cut short, resumed by a single-worker run: the single-worker loop rolls back
    every unfinished cycle of the round, not just the last one."""
    plan = {"*": 'W("val.txt", str(40 - cycle))', 3: 'W("val.txt", "slow")'}
    p = make_project(tmp_path, plan, extra="parallel: {workers: 4}")
    start = git(p.repo, "rev-parse", "HEAD", env=p.env)
    proc = p.popen("--cycles", "4")
    _await((p.out / "verifier-started").exists, proc)
    _sigkill_tree(proc, p.env)
    p.set_plan({"*": 'W("val.txt", str(40 - cycle))'})
    res = p.run("--cycles", "2", "--workers", "1")
    assert res.returncode == 0, res.stderr
    assert p.statuses() == {0: "baseline", 1: "keep", 2: "keep"}
    assert_round_consistent(p, start)


# ---------------------------------------------------------------------------------------------
# --workers on the command line


def test_workers_flag_overrides_program(tmp_path):
    p = make_project(tmp_path, {"*": 'W("val.txt", str(40 - cycle))'}, extra="parallel: {workers: 4}")
    res = p.run("--cycles", "4", "--workers", "2")
    assert res.returncode == 0, res.stderr
    begins = [r for r in _ledger(p) if r["t"] == "begin" and r["cycle"] > 0]
    assert [b["worker"] for b in begins] == [0, 1, 0, 1]
    assert p.statuses() == {0: "baseline", 1: "discard", 2: "keep", 3: "discard", 4: "keep"}


def test_workers_flag_bad_value(tmp_path):
    p = make_project(tmp_path, {})
    for bad in ("0", "x", "65"):
        res = p.run("--workers", bad)
        assert res.returncode == 2
        assert "--workers" in res.stderr


def test_approve_with_workers_refused(tmp_path):
    p = make_project(tmp_path, {})
    res = p.run("--workers", "2", "--approve")
    assert res.returncode == 2
    assert "parallel" in res.stderr
    assert git(p.repo, "branch", "--list", "autoloop/*", env=p.env) == ""


# ---------------------------------------------------------------------------------------------
# The noise-aware path (repeats) and the sandbox, with workers


def test_repeats_judged_per_candidate_in_parallel(tmp_path):
    """With verifier.repeats the keep rule (autoloop.decide) judges each candidate, measured through its lane."""
    plan = {1: 'W("val.txt", "39")', 2: 'W("val.txt", "38")', 3: 'W("val.txt", "45")', 4: 'W("val.txt", "37")'}
    p = make_project(tmp_path, plan, extra="parallel: {workers: 2}", guards=False)
    text = (p.repo / "program.md").read_text().replace("  timeout: 30\n", "  timeout: 30\n  repeats: 3\n", 1)
    (p.repo / "program.md").write_text(text)
    git(p.repo, "commit", "-qam", "repeats", env=p.env)
    start = git(p.repo, "rev-parse", "HEAD", env=p.env)
    res = p.run("--cycles", "4")
    assert res.returncode == 0, res.stderr
    assert p.statuses() == {0: "baseline", 1: "discard", 2: "keep", 3: "discard", 4: "keep"}
    rows = {int(r["cycle"]): r for r in p.rows()}
    assert all(rows[n]["samples"].count(",") == 2 for n in (1, 2, 4))   # three runs each
    assert_round_consistent(p, start)


@pytest.mark.skipif(not shutil.which("bwrap"), reason="bubblewrap (bwrap) is not installed")
def test_sandboxed_workers_edit_only_their_own_tree(tmp_path):
    gen = tmp_path / "out" / "gen"
    gen.mkdir(parents=True)
    p = make_project(tmp_path, {}, records_in=gen,
                     extra=f"sandbox: {{kind: bwrap, writable: [{gen}]}}\nparallel: {{workers: 2}}")
    p.set_plan({"*": 'W("val.txt", str(40 - cycle)); W("notes.txt", os.getcwd())'})
    res = p.run("--cycles", "2")
    assert res.returncode == 0, res.stderr
    assert p.statuses() == {0: "baseline", 1: "discard", 2: "keep"}
    assert p.show(p.branch(), "val.txt").strip() == b"38"
