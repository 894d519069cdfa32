"""Black-box: the installed CLI under stress — verifier timeouts with grandchildren and setsid
escapees, huge verifier output, a second concurrent run, Ctrl-C / SIGTERM in each phase, and
`kill -9` at random moments followed by resume."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time

import pytest

from tests.scripts.e2e import (random_moves_plan, PY, SCRIPTS, alive, assert_journal_consistent, assert_valid_ledger,
                               git, kill_marked, make_project, marked_pids, wait_for)

# These tests follow the pids a command's tree records and check each is dead: autoloop.process.proc's
# process-group, marker and subreaper nets, which are the fallback without a sandbox. Sandboxed,
# recorded pids are those of the command's own PID namespace (meaningless outside it), and the
# kernel kills the whole namespace: test_sandbox.py and test_measure_sandbox.py check that.
PIDS_SEEN = "sandbox: none"


def _signal_when(pred, proc, sig: int, timeout: float = 30) -> tuple[str, str]:
    """Once pred() holds, signal the run's group as a terminal would; its (stdout, stderr)."""
    try:
        _await(pred, proc)
        os.killpg(proc.pid, sig)
        return proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()


def _await(pred, proc, timeout: float = 60, interval: float = 0.02) -> None:
    """Wait for pred() while the run `proc` is alive; on failure show what the run printed."""
    if wait_for(lambda: pred() or proc.poll() is not None, timeout, interval) and pred():
        return
    if proc.poll() is None:
        proc.kill()
    out, err = proc.communicate()
    raise AssertionError(f"the awaited state never came (run exit {proc.returncode}):\n{out[-2000:]}\n{err[-2000:]}")


@pytest.fixture
def reaper():
    """Kill whatever a test's processes left behind, after the test has checked for them."""
    envs = []
    yield envs.append
    for env in envs:
        kill_marked(env)


# ---------------------------------------------------------------------------------------------
# Verifier timeouts: the whole tree dies, within a bounded time


@pytest.fixture(scope="module")
def hang_run(tmp_path_factory):
    p = make_project(tmp_path_factory.mktemp("hang"), {1: 'W("val.txt", "hang")', 2: 'W("val.txt", "30")'},
                     verifier=f"sh {SCRIPTS / 'verify_hang.sh'}", vtimeout=1.5, guards=False, extra=PIDS_SEEN)
    t0 = time.monotonic()
    res = p.run("--cycles", "2", timeout=90)
    took = time.monotonic() - t0
    leftovers = marked_pids(p.env)
    pids = {n: int((p.out / f"{n}.pid").read_text()) for n in ("verifier", "inner", "bg")}
    kill_marked(p.env)
    return p, res, took, leftovers, pids


def test_verifier_timeout_is_a_crash(hang_run):
    p, res, *_ = hang_run
    assert res.returncode == 0, res.stderr
    assert [r["status"] for r in p.rows()] == ["baseline", "crash", "keep"]


def test_verifier_timeout_bounded_time(hang_run):
    # 1.5 s timeout + kill grace; the sleeps would take 300 s
    assert hang_run[2] < 20


def test_verifier_timeout_leaves_no_process(hang_run):
    assert hang_run[3] == []


@pytest.mark.parametrize("name", ["verifier", "inner", "bg"])
def test_verifier_timeout_grandchild_dead(hang_run, name):
    assert not alive(hang_run[4][name])


@pytest.mark.parametrize("mode,status", [("escape", "crash"), ("daemon", "keep")])
def test_setsid_escapee_is_killed(tmp_path, reaper, mode, status):
    p = make_project(tmp_path, {1: f'W("val.txt", "{mode}")'},
                     verifier=f"{PY} {SCRIPTS / 'verify_escape.py'}", vtimeout=2, guards=False, extra=PIDS_SEEN)
    reaper(p.env)
    t0 = time.monotonic()
    res = p.run("--cycles", "1", timeout=90)
    assert res.returncode == 0, res.stderr
    assert time.monotonic() - t0 < 20
    assert p.rows()[1]["status"] == status
    pid = int((p.out / "tick.pid").read_text())
    assert not alive(pid), "the setsid child survived the run"
    size = (p.out / "tick").stat().st_size
    time.sleep(0.5)
    assert (p.out / "tick").stat().st_size == size, "something is still writing"
    assert marked_pids(p.env) == []


def test_generator_timeout_kills_its_children(tmp_path, reaper):
    plan = {1: '''
        import subprocess
        c = subprocess.Popen(["setsid", sys.executable, "-c", "import time; time.sleep(300)"])
        (OUT / "gen-child.pid").write_text(str(c.pid))
        subprocess.Popen(["sleep", "300"])
        time.sleep(300)
    '''}
    p = make_project(tmp_path, plan, gtimeout=1.5, extra=PIDS_SEEN)
    reaper(p.env)
    t0 = time.monotonic()
    res = p.run("--cycles", "1", timeout=90)
    assert res.returncode == 0
    assert time.monotonic() - t0 < 20
    assert p.rows()[1]["status"] == "gen_error"
    assert not alive(int((p.out / "gen-child.pid").read_text()))
    assert marked_pids(p.env) == []


def test_verifier_deaf_to_sigterm_is_killed(tmp_path, reaper):
    p = make_project(tmp_path, {1: 'W("val.txt", "stubborn")', 2: 'W("val.txt", "30")'},
                     verifier=f"sh {SCRIPTS / 'verify_hang.sh'}", vtimeout=1.5, guards=False)
    reaper(p.env)
    t0 = time.monotonic()
    res = p.run("--cycles", "2", timeout=90)
    assert res.returncode == 0, res.stderr
    assert time.monotonic() - t0 < 25
    assert [r["status"] for r in p.rows()] == ["baseline", "crash", "keep"]
    assert marked_pids(p.env) == []


def test_interrupt_with_verifier_deaf_to_sigterm(tmp_path, reaper):
    p = make_project(tmp_path, {1: 'W("val.txt", "stubborn")'}, verifier=f"sh {SCRIPTS / 'verify_hang.sh'}",
                     vtimeout=120, guards=False)
    reaper(p.env)
    proc = p.popen("--cycles", "1")
    try:
        _await((p.out / "bg.pid").exists, proc)
        t0 = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert took < 15
    assert marked_pids(p.env) == []


def test_generator_daemon_cannot_change_the_candidate_after_it_exits(tmp_path, reaper):
    """The generator leaves a setsid daemon that keeps rewriting val.txt; what is kept must be
    what was measured, and the daemon must be gone."""
    plan = {1: '''
        code = ("import time\\n"
                "time.sleep(0.3)\\n"
                "while True:\\n"
                "    open('val.txt', 'w').write('1')\\n"
                "    time.sleep(0.02)\\n")
        c = subprocess.Popen(["setsid", sys.executable, "-c", code], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        (OUT / "daemon.pid").write_text(str(c.pid))
        W("val.txt", "30")
    ''', 2: 'time.sleep(0.5); W("val.txt", "29")'}
    p = make_project(tmp_path, plan, verifier="sh -c 'sleep 0.5; {py} score.py'", extra=PIDS_SEEN)
    reaper(p.env)
    res = p.run("--cycles", "2")
    assert res.returncode == 0, res.stderr
    for row in p.rows():
        if row["status"] in ("baseline", "keep"):
            assert float(p.show(row["commit"], "val.txt")) == float(row["metric"]), row
    assert not alive(int((p.out / "daemon.pid").read_text()))
    assert marked_pids(p.env) == []


# ---------------------------------------------------------------------------------------------
# Huge verifier output


def _rss_run(p, *args):
    out = subprocess.run([PY, str(SCRIPTS / "rss_wrapper.py"), PY, "-m", "autoloop", "run", "program.md",
                          "--tag", p.tag, *args], cwd=p.repo, env=p.env, capture_output=True, text=True,
                         timeout=300)
    info = json.loads(out.stdout.strip().splitlines()[-1])
    return info["rc"], info["maxrss_kb"] / 1024, out.stderr


# The end-of-run re-measurement (accept.final_pairs, issue 5) re-runs the verifier a few times; off
# here, where it would only multiply the disk traffic (and the suite's time) of each flood.
NO_FINAL = "accept: {final_pairs: 0}"


def _big_project(base, mb, one_line=False, extra=NO_FINAL):
    p = make_project(base, {1: 'W("val.txt", "30")'}, verifier=f"{PY} {SCRIPTS / 'verify_big.py'}",
                     guards=False, extra=extra)
    p.env["E2E_BIG_MB"] = str(mb)
    if one_line:
        p.env["E2E_BIG_ONE_LINE"] = "1"
    return p


@pytest.fixture(scope="module")
def quiet_rss(tmp_path_factory):
    """Peak RSS (MB) of the same one-cycle run with a verifier that prints almost nothing."""
    rc, peak_mb, err = _rss_run(_big_project(tmp_path_factory.mktemp("quiet"), 0), "--cycles", "1")
    assert rc == 0, err
    return peak_mb


@pytest.mark.parametrize("mb,one_line", [
    (300, False),
    (300, True),
    (63, False),   # just under the size up to which logs used to be redacted whole in memory
], ids=["300MB-lines", "300MB-one-line", "63MB-lines"])
@pytest.mark.slow   # hundreds of megabytes through the verifier's pipe
def test_huge_verifier_output(tmp_path, quiet_rss, mb, one_line):
    p = _big_project(tmp_path, mb, one_line)
    rc, peak_mb, err = _rss_run(p, "--cycles", "1")
    assert rc == 0, err
    rows = p.rows()
    assert [(r["status"], float(r["metric"])) for r in rows] == [("baseline", 40.25), ("keep", 30.0)]
    assert peak_mb < 200, f"peak RSS {peak_mb:.0f} MB"
    assert peak_mb - quiet_rss < 32, f"peak RSS {peak_mb:.0f} MB vs {quiet_rss:.0f} MB with a quiet verifier"


GEN_FLOOD = '''
chunk = b"z" * (1 << 20) if {one_line} else (b"z" * 1023 + b"\\n") * 1024
for _ in range(300):
    sys.stdout.buffer.write(chunk)
sys.stdout.buffer.write(b"\\nHypothesis: after the flood\\n")
W("val.txt", "30")
'''


@pytest.mark.parametrize("one_line", [True], ids=["300MB-one-line"])
def test_huge_generator_output(tmp_path, one_line):
    p = make_project(tmp_path, {1: GEN_FLOOD.format(one_line=one_line)}, extra=NO_FINAL)
    rc, peak_mb, err = _rss_run(p, "--cycles", "1")
    assert rc == 0, err
    assert p.rows()[1]["status"] == "keep"
    assert peak_mb < 200, f"peak RSS {peak_mb:.0f} MB"


@pytest.mark.parametrize("exit_code", [1], ids=["exit1"])
def test_huge_verifier_stderr_one_line(tmp_path, exit_code):
    p = _big_project(tmp_path, 0)
    p.env.update(E2E_BIG_MB="0", E2E_BIG_STDERR="1", E2E_BIG_ONE_LINE="1")
    assert p.run("--cycles", "0").returncode == 0       # a quiet baseline
    p.env.update(E2E_BIG_MB="150", E2E_BIG_EXIT=str(exit_code))
    rc, peak_mb, err = _rss_run(p, "--cycles", "1")
    assert rc == 0, err
    assert p.rows()[1]["status"] == ("keep" if exit_code == 0 else "crash")
    assert peak_mb < 200, f"peak RSS {peak_mb:.0f} MB"


def test_huge_output_full_log_kept_on_disk(tmp_path):
    p = make_project(tmp_path, {}, verifier=f"{PY} {SCRIPTS / 'verify_big.py'}", guards=False)
    p.env["E2E_BIG_MB"] = "20"
    assert p.run("--cycles", "0").returncode == 0
    logs = list((p.repo / ".autoloop" / p.tag / "logs").rglob("*"))
    assert max(f.stat().st_size for f in logs if f.is_file()) >= 20 << 20


# ---------------------------------------------------------------------------------------------
# A second run on the same tag


@pytest.fixture(scope="module")
def concurrent(tmp_path_factory):
    p = make_project(tmp_path_factory.mktemp("conc"),
                     {"*": 'time.sleep(0.5); print(f"Hypothesis: c{cycle}"); W("val.txt", str(40 - cycle))'})
    first = p.popen("--cycles", "4")
    try:
        _await(lambda: p.rec_dir.exists() and any(p.rec_dir.glob("cycle-1-*")), first)
        t0 = time.monotonic()
        second = p.run("--cycles", "1", timeout=60)
        second_took = time.monotonic() - t0
        out, err = first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
    return p, first.returncode, err, second, second_took


def test_second_run_refused_with_exit_2(concurrent):
    second = concurrent[3]
    assert second.returncode == 2, (second.returncode, second.stderr)
    assert "Traceback" not in second.stderr


def test_second_run_refused_at_once(concurrent):
    assert concurrent[4] < 5


def test_second_run_message_is_one_line(concurrent):
    lines = [ln for ln in concurrent[3].stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, lines


def test_first_run_unharmed(concurrent):
    p, rc, err, *_ = concurrent
    assert rc == 0, err
    assert [r["status"] for r in p.rows()] == ["baseline"] + ["keep"] * 4
    assert [r["cycle"] for r in p.records()] == [1, 2, 3, 4]
    assert_valid_ledger(p)
    assert_journal_consistent(p)


def test_other_tag_runs_concurrently(tmp_path):
    p = make_project(tmp_path, {"*": 'time.sleep(0.4); W("val.txt", str(40 - cycle))'})
    first = p.popen("--cycles", "3")
    try:
        _await(lambda: p.rec_dir.exists() and any(p.rec_dir.glob("cycle-1-*")), first)
        p.tag = "other"
        second = p.run("--cycles", "1", timeout=60)
        _, err = first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
    assert (first.returncode, second.returncode) == (0, 0), (err, second.stderr)


# ---------------------------------------------------------------------------------------------
# Ctrl-C and SIGTERM


# SIGHUP: the terminal or ssh session the run was started from went away (the kernel signals
# its foreground group, as Ctrl-C does)
SIGNAL_CASES = [(signal.SIGINT, "generator"), (signal.SIGINT, "verifier"),
                (signal.SIGTERM, "generator"), (signal.SIGTERM, "verifier"),
                (signal.SIGHUP, "generator"), (signal.SIGHUP, "verifier")]


@pytest.fixture(scope="module", params=SIGNAL_CASES, ids=lambda c: f"{c[0].name}-{c[1]}")
def interrupted(request, tmp_path_factory):
    sig, phase = request.param
    plan = {1: 'W("val.txt", "30"); (OUT / "gen-started").write_text(""); time.sleep(60)'} \
        if phase == "generator" else {1: 'W("val.txt", "slow")'}
    p = make_project(tmp_path_factory.mktemp(f"sig-{sig.name}-{phase}"), plan)
    start = git(p.repo, "rev-parse", "HEAD", env=p.env)
    marker = p.out / ("gen-started" if phase == "generator" else "verifier-started")
    proc = p.popen("--cycles", "3")
    try:
        _await(marker.exists, proc)
        time.sleep(0.2)
        t0 = time.monotonic()
        if sig in (signal.SIGINT, signal.SIGHUP):
            os.killpg(proc.pid, sig)               # like Ctrl-C or a hangup: the terminal signals the group
        else:
            proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    state = {
        "rc": proc.returncode, "err": err, "took": took, "start": start,
        "leftovers": marked_pids(p.env),
        "wt_head": git(p.worktree(), "rev-parse", "HEAD", env=p.env),
        "wt_status": git(p.worktree(), "status", "--porcelain", "--ignored", "--untracked-files=all", env=p.env),
        "wt_val": (p.worktree() / "val.txt").read_text(),
        "branch": p.branch_head(),
        "refs": git(p.repo, "for-each-ref", "refs/autoloop/", env=p.env),
    }
    kill_marked(p.env)
    p.set_plan({"*": 'print(f"Hypothesis: after-{cycle}"); W("val.txt", str(40 - cycle))'})
    state["resume"] = p.run("--cycles", "2")
    return p, state


def test_interrupt_exit_130(interrupted):
    assert interrupted[1]["rc"] == 130, interrupted[1]["err"]


def test_interrupt_is_prompt(interrupted):
    assert interrupted[1]["took"] < 10


def test_interrupt_no_traceback(interrupted):
    assert "Traceback" not in interrupted[1]["err"]


def test_interrupt_worktree_back_at_incumbent(interrupted):
    s = interrupted[1]
    assert s["wt_head"] == s["branch"] == s["start"]
    assert s["wt_status"] == ""
    assert s["wt_val"] == "40.25\n"


def test_interrupt_leaves_no_process(interrupted):
    assert interrupted[1]["leftovers"] == []


def test_interrupt_then_resume_works(interrupted):
    p, s = interrupted
    assert s["resume"].returncode == 0, s["resume"].stderr
    assert [r["status"] for r in p.rows()] == ["baseline", "keep", "keep"]


def test_interrupt_ledger_whole(interrupted):
    assert_valid_ledger(interrupted[0])


def test_interrupt_journal_consistent(interrupted):
    assert_journal_consistent(interrupted[0])


def test_interrupt_branch_has_only_resumed_keeps(interrupted):
    p, s = interrupted
    assert len(p.branch_commits(s["start"])) == 2


def test_a_nohup_run_goes_on_through_a_hangup(tmp_path):
    """`nohup autoloop run ... &`: the hangup stays ignored, the run ends on its own stop."""
    p = make_project(tmp_path, {1: 'W("val.txt", "30"); (OUT / "gen-started").write_text(""); time.sleep(1)'})
    proc = p.popen("--cycles", "2", nohup=True)
    _, err = _signal_when((p.out / "gen-started").exists, proc, signal.SIGHUP, timeout=60)
    assert proc.returncode == 0, err
    assert [r["status"] for r in p.rows()] == ["baseline", "keep", "no_change"], p.rows()


def test_double_ctrl_c_still_restores_the_worktree(tmp_path):
    """The impatient user: Ctrl-C twice in quick succession during the generator."""
    for attempt, gap in enumerate((0.005, 0.015, 0.002, 0.01, 0.02)):
        p = make_project(tmp_path / f"a{attempt}",
                         {1: 'W("val.txt", "30"); W("notes.txt", "x"); (OUT / "gen-started").write_text(""); '
                             'time.sleep(60)'})
        proc = p.popen("--cycles", "3")
        try:
            _await((p.out / "gen-started").exists, proc)
            time.sleep(0.2)
            os.killpg(proc.pid, signal.SIGINT)
            time.sleep(gap)
            try:
                os.killpg(proc.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
        kill_marked(p.env)
        assert proc.returncode in (130, -signal.SIGINT), err     # -2 is 130 to a shell
        assert "Traceback" not in err
        wt = p.worktree()
        assert git(wt, "status", "--porcelain", "--ignored", "--untracked-files=all", env=p.env) == "", \
            f"attempt {attempt} (gap {gap * 1000:.0f} ms): exit {proc.returncode}, {err.strip()[-200:]}"
        assert_valid_ledger(p)


def test_interrupt_during_baseline(tmp_path):
    p = make_project(tmp_path, {"*": 'W("val.txt", str(40 - cycle))'})
    (p.repo / "val.txt").write_text("slow\n")
    git(p.repo, "commit", "-qam", "slow baseline", env=p.env)
    proc = p.popen("--cycles", "1")
    _, err = _signal_when((p.out / "verifier-started").exists, proc, signal.SIGINT)
    kill_marked(p.env)
    assert proc.returncode == 130, err
    assert_valid_ledger(p)


# ---------------------------------------------------------------------------------------------
# kill -9


KILL_PLAN = random_moves_plan(max_sleep=0.15)


def _sigkill_tree(proc, env):
    """kill -9 the run's process group and everything it started (the machine 'dies')."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    kill_marked(env)


@pytest.fixture(scope="module")
def killed(tmp_path_factory):
    p = make_project(tmp_path_factory.mktemp("kill9"), KILL_PLAN)
    start = git(p.repo, "rev-parse", "HEAD", env=p.env)
    user_status = git(p.repo, "status", "--porcelain", "--untracked-files=all", env=p.env)
    # The baseline first, in a clean run: a kill inside the very first start is its own test
    # (test_kill9_right_after_branch_created), so this soak stays about resuming cycles.
    assert p.run("--cycles", "0").returncode == 0
    seed = int(os.environ.get("E2E_KILL_SEED", time.time_ns() % 10**9))
    rng = random.Random(seed)
    outcomes = [("seed", seed)]
    for i in range(12):
        proc = p.popen("--cycles", "1000")
        time.sleep(rng.uniform(0, 1.5))
        _sigkill_tree(proc, p.env)
        outcomes.append((proc.returncode, proc.stderr.read()[-300:]))
        proc.stdout.close()
        proc.stderr.close()
    final = p.run("--cycles", "2", timeout=120)
    leftovers = marked_pids(p.env)
    kill_marked(p.env)
    return p, start, final, outcomes, user_status, leftovers


@pytest.mark.slow
def test_kill9_final_run_succeeds(killed):
    p, _, final, outcomes, *_ = killed
    assert final.returncode == 0, (final.stderr, outcomes)


@pytest.mark.slow
def test_kill9_no_torn_ledger_lines(killed):
    assert_valid_ledger(killed[0])


@pytest.mark.slow
def test_kill9_each_cycle_once(killed):
    p = killed[0]
    cycles = [int(r["cycle"]) for r in p.rows()]
    assert cycles == list(range(len(cycles))) and len(cycles) >= 3


@pytest.mark.slow
def test_kill9_branch_head_is_last_keep(killed):
    p = killed[0]
    keeps = [r["commit"] for r in p.rows() if r["status"] == "keep"]
    head = p.branch_head()
    assert head.startswith(keeps[-1] if keeps else p.rows()[0]["commit"])


@pytest.mark.slow
def test_kill9_branch_has_exactly_the_keeps(killed):
    p, start = killed[0], killed[1]
    keeps = [r["commit"] for r in p.rows() if r["status"] == "keep"]
    commits = list(reversed(p.branch_commits(start)))
    assert len(commits) == len(keeps)
    assert all(c.startswith(k) for c, k in zip(commits, keeps))


@pytest.mark.slow
def test_kill9_best_metric_consistent(killed):
    p = killed[0]
    rows = p.rows()
    measured = [float(r["metric"]) for r in rows if r["status"] in ("baseline", "keep")]
    # the ratchet only moves down (minimize) and the branch head holds the best
    assert measured == sorted(measured, reverse=True)
    assert float(p.show(p.branch(), "val.txt")) == measured[-1]
    if "best" in rows[-1]:
        assert float(rows[-1]["best"]) == measured[-1]


@pytest.mark.slow
def test_kill9_worktree_clean(killed):
    p = killed[0]
    wt = p.worktree()
    assert git(wt, "rev-parse", "HEAD", env=p.env) == p.branch_head()
    assert git(wt, "status", "--porcelain", "--ignored", "--untracked-files=all", env=p.env) == ""


@pytest.mark.slow
def test_kill9_journal_consistent(killed):
    assert_journal_consistent(killed[0])


@pytest.mark.slow
def test_kill9_user_checkout_untouched(killed):
    p, start, _, _, user_status, _ = killed
    assert git(p.repo, "rev-parse", "HEAD", env=p.env) == start
    assert git(p.repo, "status", "--porcelain", "--untracked-files=all", env=p.env) == user_status


def test_kill9_during_journal_write_leaves_no_file_in_checkout(tmp_path):
    """Kill the run the moment anything new appears next to program.md (e.g. a temp file of an
    atomic write), then resume: the user's checkout must still look untouched to git."""
    p = make_project(tmp_path, {}, command='"true"', guards=False)   # fast no_change cycles
    assert p.run("--cycles", "0").returncode == 0
    known = set(os.listdir(p.repo))
    status = git(p.repo, "status", "--porcelain", "--untracked-files=all", env=p.env)
    for _ in range(4):
        proc = p.popen("--cycles", "100000")
        end = time.monotonic() + 1.0
        while time.monotonic() < end and not set(os.listdir(p.repo)) - known:
            pass
        _sigkill_tree(proc, p.env)
        proc.stdout.close()
        proc.stderr.close()
        if set(os.listdir(p.repo)) - known:
            break
    res = p.run("--cycles", "1")
    assert res.returncode == 0, res.stderr
    assert git(p.repo, "status", "--porcelain", "--untracked-files=all", env=p.env) == status


@pytest.mark.slow
def test_kill9_no_leftover_processes(killed):
    assert killed[5] == []


@pytest.mark.parametrize("delay_ms", [200, 400])
def test_kill9_soon_after_branch_created(tmp_path, delay_ms):
    """Kill the very first run soon after autoloop/TAG appears (baseline or first cycle): the tag
    must stay usable. (Killing inside `git worktree add` is test_kill9_during_worktree_creation.)"""
    p = make_project(tmp_path, {"*": 'W("val.txt", str(40 - cycle))'})
    ref = p.repo / ".git" / "refs" / "heads" / "autoloop" / p.tag
    proc = p.popen("--cycles", "1")
    _await(ref.exists, proc, interval=0.0002)
    time.sleep(delay_ms / 1000)
    _sigkill_tree(proc, p.env)
    res = p.run("--cycles", "1")
    assert res.returncode == 0, res.stderr
    # the killed run may or may not have finished its one cycle
    assert [r["status"] for r in p.rows()] in (["baseline", "keep"], ["baseline", "keep", "keep"])
    assert_journal_consistent(p)


def test_kill9_during_worktree_creation(tmp_path):
    """Kill the first run inside `git worktree add`, between git writing the new admin dir's HEAD and
    its commondir, then resume. The kill is aimed by polling for HEAD; where it lands a few syscalls
    late (commondir already written, checkout not begun: `locked` still there, no `index`), commondir
    is removed to recreate the exact state of the intended instant."""
    for attempt in range(10):
        p = make_project(tmp_path / f"a{attempt}", {"*": 'W("val.txt", str(40 - cycle))'})
        admin = p.repo / ".git" / "worktrees" / p.tag
        proc = p.popen("--cycles", "1")
        _await((admin / "HEAD").exists, proc, interval=0.00005)
        _sigkill_tree(proc, p.env)
        proc.stdout.close()
        proc.stderr.close()
        if (admin / "locked").exists() and not (admin / "index").exists():
            (admin / "commondir").unlink(missing_ok=True)
            break
    else:
        pytest.skip("never caught git inside `worktree add`")
    res = p.run("--cycles", "1")
    assert res.returncode == 0, res.stderr
    assert [r["status"] for r in p.rows()] == ["baseline", "keep"]


def test_kill9_while_git_moves_the_worktree_head(tmp_path):
    """Kill the run the moment git locks the run worktree's HEAD (a reset to a new incumbent),
    then resume."""
    p = make_project(tmp_path, {"*": 'W("val.txt", str(40 - cycle))'})
    assert p.run("--cycles", "0").returncode == 0
    head_lock = p.repo / ".git" / "worktrees" / p.tag / "HEAD.lock"
    proc = p.popen("--cycles", "1000")
    wait_for(head_lock.exists, 10, interval=0.00002)
    _sigkill_tree(proc, p.env)
    proc.stdout.close()
    proc.stderr.close()
    res = p.run("--cycles", "1")
    assert res.returncode == 0, res.stderr
    assert_journal_consistent(p)


@pytest.mark.parametrize("phase", ["generator", "verifier"])
def test_kill9_at_phase_then_resume(tmp_path, phase):
    plan = {"*": 'W("val.txt", str(40 - cycle))'}
    if phase == "generator":
        plan[1] = 'W("val.txt", "30"); (OUT / "gen-started").write_text(""); time.sleep(60)'
    else:
        plan[1] = 'W("val.txt", "slow")'
    p = make_project(tmp_path, plan)
    proc = p.popen("--cycles", "3")
    marker = p.out / ("gen-started" if phase == "generator" else "verifier-started")
    _await(marker.exists, proc)
    _sigkill_tree(proc, p.env)
    p.set_plan({"*": 'W("val.txt", str(40 - cycle))'})
    res = p.run("--cycles", "2")
    assert res.returncode == 0, res.stderr
    assert [r["status"] for r in p.rows()] == ["baseline", "keep", "keep"]
    assert p.show(p.branch(), "val.txt").strip() == b"38"


def test_kill9_orphaned_generator_cannot_leak_into_resumed_run(tmp_path, reaper):
    """Only autoloop itself is killed (kill -9 PID); its generator, in its own session, lives on and
    writes late. The resumed run must neither keep that write nor leave the orphan running."""
    plan = {1: '''
        (OUT / "gen-started").write_text(str(os.getpid()))
        time.sleep(1.5)
        W("notes.txt", "written by an orphan")
        time.sleep(60)
    '''}
    p = make_project(tmp_path, plan, extra=PIDS_SEEN)
    reaper(p.env)
    proc = p.popen("--cycles", "3")
    _await((p.out / "gen-started").exists, proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    p.set_plan({"*": 'time.sleep(0.8); W("val.txt", str(40 - cycle))'})
    res = p.run("--cycles", "3")
    assert res.returncode == 0, res.stderr
    # the person is told what the kill left unfinished and what became of it
    assert "(cycle 1 unfinished when the last run stopped: rolled back)" in res.stdout, res.stdout
    orphan = int((p.out / "gen-started").read_text())
    for rev in git(p.repo, "rev-list", p.branch(), env=p.env).split():
        assert b"orphan" not in p.show(rev, "notes.txt"), "a kept commit contains the orphan's write"
    assert not alive(orphan), "the previous run's generator is still running"


def test_interrupt_leaves_no_ref_and_the_resumed_cycles_have_theirs(interrupted):
    # the cut cycle was never recorded: no ref of it; its number's next attempt has its own
    p, s = interrupted
    assert s["refs"] == ""
    ledger = [json.loads(line) for line in p.ledger_path().read_text().splitlines()]
    named = {f"refs/autoloop/t1/cycles/{r['cycle']}": r["change"] for r in ledger if r["t"] == "cycle" and r["cycle"]}
    out = git(p.repo, "for-each-ref", "--format=%(refname) %(objectname)", "refs/autoloop/", env=p.env)
    assert dict(line.split() for line in out.splitlines()) == named and len(named) == 2
