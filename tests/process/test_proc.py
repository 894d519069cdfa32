"""proc.run: own session, whole-tree kill on timeout/interrupt/exit, output to files, stdin from a
file or /dev/null, leftovers found by the environment marker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from autoloop.process import leftovers, logfile, proc, running
from autoloop.process.line import Line

PY = sys.executable


def alive(pid: int) -> bool:
    """Running (not gone, not a zombie waiting to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def wait_dead(pid: int, within: float = 2.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.01)
    return not alive(pid)


def run(tmp_path: Path, command, **kw) -> proc.ProcResult:
    kw.setdefault("timeout", 10)
    kw.setdefault("env", dict(os.environ))
    kw.setdefault("log_stem", tmp_path / "logs" / "cmd")
    return proc.run(command, cwd=kw.pop("cwd", tmp_path), **kw)


def read_pid(path: Path) -> int:
    return int(path.read_text().strip())


@pytest.fixture(autouse=True)
def _no_process_left_registered():
    yield
    assert not running.running_now()


# ---------------------------------------------------------------------------------------------
# exit codes and the result object

@pytest.mark.parametrize("command,code", [
    ("true", 0),
    ("exit 0", 0),
    ("exit 1", 1),
    ("exit 3", 3),
    ("exit 255", 255),
    ("false", 1),
    ("kill -9 $$", -9),
    ("kill -TERM $$", -15),
    ("nonexistent-command-xyz", 127),
])
def test_exit_codes(tmp_path: Path, command: str, code: int) -> None:
    r = run(tmp_path, command)
    assert (r.exit_code, r.timed_out, r.interrupted, r.ok) == (code, False, False, code == 0)


@pytest.mark.parametrize("code", [0, 4])
def test_argv_commands(tmp_path: Path, code: int) -> None:
    r = run(tmp_path, [PY, "-c", f"import sys; sys.exit({code})"])
    assert r.exit_code == code


def test_argv_is_not_shell_interpreted(tmp_path: Path) -> None:
    r = run(tmp_path, [PY, "-c", "import sys; print(sys.argv[1])", "$HOME; echo x"])
    assert r.stdout_path.read_text() == "$HOME; echo x\n"


def test_missing_executable_is_a_result_not_an_exception(tmp_path: Path) -> None:
    r = run(tmp_path, [str(tmp_path / "no-such-tool")])
    assert (r.ok, r.exit_code) == (False, 127)
    assert "no-such-tool" in r.stderr_tail()


def test_non_executable_file_is_a_result_not_an_exception(tmp_path: Path) -> None:
    tool = tmp_path / "tool"
    tool.write_text("#!/bin/sh\necho hi\n")
    tool.chmod(0o644)
    r = run(tmp_path, [str(tool)])
    assert (r.ok, r.exit_code) == (False, 126)


def test_missing_cwd_is_a_result_not_an_exception(tmp_path: Path) -> None:
    r = run(tmp_path, "true", cwd=tmp_path / "gone")
    assert not r.ok


def test_shell_is_posix_sh(tmp_path: Path) -> None:
    r = run(tmp_path, 'test "$0" = /bin/sh && echo yes')
    assert r.stdout_path.read_text() == "yes\n"


@pytest.mark.parametrize("result,text", [
    (dict(exit_code=3, timed_out=False, interrupted=False), "exit 3"),
    (dict(exit_code=None, timed_out=True, interrupted=False), "timed out after 2s"),
    (dict(exit_code=None, timed_out=False, interrupted=True), "interrupted"),
])
def test_describe(tmp_path: Path, result: dict, text: str) -> None:
    r = proc.ProcResult(duration_s=2.2, stdout_path=tmp_path / "o", stderr_path=tmp_path / "e",
                        leftovers_killed=0, **result)
    assert r.describe() == text


def test_duration_is_measured(tmp_path: Path) -> None:
    r = run(tmp_path, "sleep 0.2")
    assert 0.15 <= r.duration_s < 5


# ---------------------------------------------------------------------------------------------
# environment, cwd, session

def test_only_the_given_env_is_passed(tmp_path: Path) -> None:
    r = run(tmp_path, [PY, "-c", "import os, json; print(json.dumps(sorted(os.environ)))"],
            env={"PATH": os.environ["PATH"], "ONLY_THIS": "1"})
    names = set(eval(r.stdout_path.read_text()))
    assert names - {"LC_CTYPE"} == {"PATH", "ONLY_THIS", running.MARKER_VAR}


def test_marker_is_set_in_the_child(tmp_path: Path) -> None:
    r = run(tmp_path, f'echo "${running.MARKER_VAR}"', marker="m-123")
    assert r.stdout_path.read_text() == "m-123\n"


def test_marker_overrides_one_in_env(tmp_path: Path) -> None:
    env = dict(os.environ, **{running.MARKER_VAR: "stale"})
    r = run(tmp_path, f'echo "${running.MARKER_VAR}"', marker="fresh", env=env)
    assert r.stdout_path.read_text() == "fresh\n"


def test_a_marker_is_made_when_none_given(tmp_path: Path) -> None:
    r = run(tmp_path, f'echo "${running.MARKER_VAR}"')
    assert len(r.stdout_path.read_text().strip()) == 32


def test_new_markers_differ() -> None:
    assert proc.new_marker() != proc.new_marker()


def test_cwd(tmp_path: Path) -> None:
    sub = tmp_path / "sub dir"
    sub.mkdir()
    r = run(tmp_path, "pwd", cwd=sub)
    assert r.stdout_path.read_text().strip() == str(sub)


def test_child_leads_its_own_session(tmp_path: Path) -> None:
    r = run(tmp_path, [PY, "-c", "import os; print(os.getsid(0) == os.getpid() == os.getpgid(0))"])
    assert r.stdout_path.read_text() == "True\n"


# ---------------------------------------------------------------------------------------------
# output goes to files

def test_stdout_and_stderr_go_to_separate_files(tmp_path: Path) -> None:
    r = run(tmp_path, "echo out; echo err >&2; echo out2")
    assert r.stdout_path == tmp_path / "logs" / "cmd.out"
    assert r.stderr_path == tmp_path / "logs" / "cmd.err"
    assert (r.stdout_path.read_text(), r.stderr_path.read_text()) == ("out\nout2\n", "err\n")


def test_log_dir_is_created(tmp_path: Path) -> None:
    r = run(tmp_path, "echo x", log_stem=tmp_path / "a" / "b" / "c")
    assert r.stdout_path.read_text() == "x\n"


def test_log_stem_with_dots_keeps_its_name(tmp_path: Path) -> None:
    r = run(tmp_path, "echo x", log_stem=tmp_path / "guard-ruff.check")
    assert r.stdout_path.name == "guard-ruff.check.out"
    assert r.stderr_path.name == "guard-ruff.check.err"


def test_output_files_are_truncated_on_rerun(tmp_path: Path) -> None:
    run(tmp_path, "echo a long first output")
    r = run(tmp_path, "echo b")
    assert r.stdout_path.read_text() == "b\n"


def test_large_output_lands_on_disk_and_tail_is_bounded(tmp_path: Path) -> None:
    r = run(tmp_path, [PY, "-c", "import sys; sys.stdout.write('x' * 9_999_999 + 'END')"])
    assert r.stdout_path.stat().st_size == 10_000_002
    tail = r.stdout_tail()
    assert len(tail) == logfile.TAIL_BYTES and tail.endswith("END")
    assert r.stdout_tail(5) == "xxEND"


def test_stderr_tail(tmp_path: Path) -> None:
    r = run(tmp_path, "echo one >&2; echo two >&2")
    assert r.stderr_tail() == "one\ntwo\n"


def test_tail_decodes_invalid_utf8(tmp_path: Path) -> None:
    r = run(tmp_path, "printf 'ok \\377\\n'")
    assert r.stdout_tail() == "ok \ufffd\n"


def test_read_tail_of_missing_file_is_empty(tmp_path: Path) -> None:
    assert logfile.read_tail(tmp_path / "nope") == ""


# ---------------------------------------------------------------------------------------------
# stdin

def test_stdin_from_a_file(tmp_path: Path) -> None:
    prompt = tmp_path / "prompt.md"
    prompt.write_bytes(b"line one\nline \xe2\x9c\x93 two\n")
    r = run(tmp_path, "cat", stdin=prompt)
    assert r.stdout_path.read_bytes() == prompt.read_bytes()


def test_stdin_defaults_to_dev_null(tmp_path: Path) -> None:
    r = run(tmp_path, [PY, "-c", "import os; print(os.readlink('/proc/self/fd/0'))"])
    assert r.stdout_path.read_text() == "/dev/null\n"


def test_reading_stdin_does_not_hang(tmp_path: Path) -> None:
    r = run(tmp_path, "cat; echo done", timeout=5)
    assert (r.exit_code, r.stdout_path.read_text()) == (0, "done\n")


# ---------------------------------------------------------------------------------------------
# timeouts kill the whole tree

def test_timeout_sets_flags(tmp_path: Path) -> None:
    r = run(tmp_path, "exec sleep 30", timeout=0.2)
    assert (r.timed_out, r.exit_code, r.ok, r.interrupted) == (True, None, False, False)
    assert r.describe().startswith("timed out")


def test_timeout_returns_promptly(tmp_path: Path) -> None:
    t0 = time.monotonic()
    run(tmp_path, "exec sleep 30", timeout=0.2)
    assert time.monotonic() - t0 < 3


def test_output_before_timeout_is_kept(tmp_path: Path) -> None:
    r = run(tmp_path, "echo partial; exec sleep 30", timeout=0.3)
    assert r.timed_out and r.stdout_path.read_text() == "partial\n"


def test_timeout_kills_grandchildren(tmp_path: Path) -> None:
    pidfile = tmp_path / "bg.pid"
    r = run(tmp_path, f"sleep 30 & echo $! > {pidfile}; sleep 30", timeout=0.3)
    assert r.timed_out
    assert wait_dead(read_pid(pidfile), 0.5)


def test_timeout_kills_a_setsid_escapee(tmp_path: Path) -> None:
    pidfile = tmp_path / "esc.pid"
    script = ("import os, time; os.setsid(); "
              f"open({str(pidfile)!r} + '.tmp', 'w').write(str(os.getpid())); "
              f"os.rename({str(pidfile)!r} + '.tmp', {str(pidfile)!r}); time.sleep(30)")
    cmd = f"{PY} -c \"{script}\" & while [ ! -s {pidfile} ]; do sleep 0.01; done; sleep 30"
    r = run(tmp_path, cmd, timeout=1.0)
    assert r.timed_out
    pid = read_pid(pidfile)
    assert os.getsid(pid) == pid if alive(pid) else True  # it really left our session
    assert wait_dead(pid, 0.5)
    assert r.leftovers_killed >= 1


def test_sigterm_ignoring_tree_is_sigkilled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(proc, "KILL_GRACE_S", 0.2)
    pidfile = tmp_path / "bg.pid"
    r = run(tmp_path, f"trap '' TERM; sleep 30 & echo $! > {pidfile}; sleep 30", timeout=0.2)
    assert r.timed_out
    assert wait_dead(read_pid(pidfile), 1.0)


# ---------------------------------------------------------------------------------------------
# what a finished command leaves behind

def test_clean_command_has_no_leftovers(tmp_path: Path) -> None:
    assert run(tmp_path, "echo hi").leftovers_killed == 0


def test_background_child_in_the_group_is_killed_on_exit(tmp_path: Path) -> None:
    pidfile = tmp_path / "bg.pid"
    r = run(tmp_path, f"sleep 30 & echo $! > {pidfile}")
    assert r.exit_code == 0
    assert wait_dead(read_pid(pidfile), 0.5)


def test_setsid_escapee_after_exit_is_killed_and_counted(tmp_path: Path) -> None:
    pidfile = tmp_path / "esc.pid"
    script = f"import os, time; os.setsid(); open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(30)"
    # double fork + setsid: the escapee is in another session and its parent is gone
    cmd = (f"( {PY} -c \"{script}\" & ) ; while [ ! -s {pidfile} ]; do sleep 0.01; done; "
           "sleep 0.05; exit 0")
    r = run(tmp_path, cmd)
    assert r.exit_code == 0
    assert r.leftovers_killed == 1
    assert wait_dead(read_pid(pidfile), 0.5)


def test_kill_marked_kills_only_its_marker(tmp_path: Path) -> None:
    mine = subprocess.Popen(["sleep", "30"], env={**os.environ, running.MARKER_VAR: "mine"})
    other = subprocess.Popen(["sleep", "30"], env={**os.environ, running.MARKER_VAR: "other"})
    try:
        assert leftovers.kill_marked("mine") == 1
        mine.wait(timeout=2)
        assert other.poll() is None
    finally:
        for p in (mine, other):
            p.kill()
            p.wait()


def test_kill_marked_does_not_match_a_marker_prefix(tmp_path: Path) -> None:
    p = subprocess.Popen(["sleep", "30"], env={**os.environ, running.MARKER_VAR: "abcdef"})
    try:
        assert leftovers.kill_marked("abc") == 0
        assert p.poll() is None
    finally:
        p.kill()
        p.wait()


def test_kill_marked_with_nothing_marked_is_zero() -> None:
    assert leftovers.kill_marked(proc.new_marker()) == 0


def test_exit_is_prompt_when_orphans_are_not_reaped(tmp_path: Path) -> None:
    # Run proc.run in a helper that is a child subreaper and never reaps orphans (like a
    # container's PID 1 without an init): the killed `sleep` stays a zombie.
    helper = (
        "import ctypes, os, sys, time\n"
        "from pathlib import Path\n"
        "ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER\n"
        "from autoloop.process import proc\n"
        "proc.KILL_GRACE_S = 1.0\n"
        "t = time.monotonic()\n"
        f"proc.run('sleep 30 &', cwd=Path({str(tmp_path)!r}), env=dict(os.environ), timeout=10,\n"
        f"         log_stem=Path({str(tmp_path)!r}) / 'h')\n"
        "print(time.monotonic() - t)\n"
    )
    out = subprocess.run([PY, "-c", helper], capture_output=True, text=True, timeout=30,
                         cwd=Path(__file__).resolve().parents[2], check=True)
    assert float(out.stdout) < 0.5


# ---------------------------------------------------------------------------------------------
# interrupts

def test_keyboard_interrupt_propagates_and_kills_the_tree(tmp_path: Path) -> None:
    pidfile = tmp_path / "bg.pid"

    def on_alarm(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, on_alarm)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(KeyboardInterrupt):
            run(tmp_path, f"sleep 30 & echo $! > {pidfile}; sleep 30", timeout=20)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert wait_dead(read_pid(pidfile), 0.5)


def test_stop_current_ends_the_running_command(tmp_path: Path) -> None:
    timer = threading.Timer(0.2, running.stop_current)
    timer.start()
    t0 = time.monotonic()
    r = run(tmp_path, "exec sleep 30", timeout=20)
    timer.join()
    assert time.monotonic() - t0 < 5
    assert not r.ok


def test_stop_current_marks_the_result_interrupted(tmp_path: Path) -> None:
    timer = threading.Timer(0.2, running.stop_current)
    timer.start()
    r = run(tmp_path, "exec sleep 30", timeout=20)
    timer.join()
    assert (r.interrupted, r.exit_code, r.describe()) == (True, None, "interrupted")


def test_stop_current_with_nothing_running_is_harmless() -> None:
    running.stop_current()


def test_stop_current_from_a_signal_handler_inside_the_bookkeeping():
    """A signal handler runs on the main thread between two bytecodes, possibly while that
    thread holds the lock of the running-commands bookkeeping: stop_current() from there must
    not wait for itself (a second Ctrl-C once hung a run this way)."""
    import threading

    def handler_inside_lock() -> None:
        with running._current_lock:
            running.stop_current()

    t = threading.Thread(target=handler_inside_lock, daemon=True)
    t.start()
    t.join(timeout=5)
    assert not t.is_alive()


# ---------------------------------------------------------------------------------------------
# run_steps: a measurement's commands in order

def test_run_steps_stops_at_the_first_failing_guard(tmp_path: Path) -> None:
    steps = [proc.Step("ok", "echo one", 10, True), proc.Step("bad one", "exit 4", 10, True),
             proc.Step("never", f"touch {tmp_path / 'ran'}", 10, True), proc.Step("verifier", "echo v", 10, False)]
    seen: list[str] = []
    results = proc.run_steps(steps, cwd=tmp_path, env=dict(os.environ), log_dir=tmp_path / "logs",
                             marker=proc.new_marker(), after=lambda s: seen.append(s.name))
    assert [r.exit_code for r in results] == [0, 4]
    assert seen == ["ok", "bad one"] and not (tmp_path / "ran").exists()
    assert [r.stdout_path.name for r in results] == ["guard-ok.out", "guard-bad_one.out"]


def test_run_steps_gives_each_step_its_own_timeout_and_wraps_commands(tmp_path: Path) -> None:
    steps = [proc.Step("slow", "sleep 5", 0.3, True), proc.Step("verifier", "echo v", 10, False)]
    results = proc.run_steps(steps, cwd=tmp_path, env=dict(os.environ), log_dir=tmp_path / "logs",
                             marker=proc.new_marker(), wrap=_Shell())
    assert len(results) == 1 and results[0].timed_out and results[0].describe() == "timed out after 0.3s"


class _Shell:
    """A wrapper that runs the command under sh and, with `failing_setup`, says of every run that
    the command never started (as bwrap's status says of a set-up that failed)."""

    def __init__(self, failing_setup: bool = False) -> None:
        self.lines: list[list[str]] = []
        self.closed = 0
        self.failing_setup = failing_setup

    def line(self, command: str | list[str]) -> Line:
        self.lines.append(["sh", "-c", str(command)])
        return Line(self.lines[-1], (), lambda: not self.failing_setup, self._close)

    def _close(self) -> None:
        self.closed += 1


@pytest.mark.parametrize("failing_setup", [False, True])
def test_a_wrapper_whose_setup_failed_starts_the_command_again_a_bounded_number_of_times(
        tmp_path: Path, failing_setup: bool) -> None:
    wrap = _Shell(failing_setup)
    res = proc.run_wrapped("echo once >> count; exit 1", wrap, cwd=tmp_path, env=dict(os.environ), timeout=10,
                           log_stem=tmp_path / "logs" / "verifier")
    runs = 1 + proc.RESTARTS if failing_setup else 1
    assert res.exit_code == 1 and len(wrap.lines) == runs and wrap.closed == runs
    assert (tmp_path / "count").read_text() == "once\n" * runs
    ok = _Shell(failing_setup=True)
    assert proc.run_wrapped("true", ok, cwd=tmp_path, env=dict(os.environ), timeout=10,
                            log_stem=tmp_path / "logs" / "ok").ok and len(ok.lines) == 1
    slow = _Shell(failing_setup=True)   # a timeout is no set-up failure
    assert proc.run_wrapped("sleep 5", slow, cwd=tmp_path, env=dict(os.environ), timeout=0.3,
                            log_stem=tmp_path / "logs" / "slow").timed_out and len(slow.lines) == 1


def test_a_failing_verifier_step_does_not_stop_the_sequence_early(tmp_path: Path) -> None:
    steps = [proc.Step("verifier", "exit 2", 10, False), proc.Step("after", "echo x", 10, False)]
    results = proc.run_steps(steps, cwd=tmp_path, env=dict(os.environ), log_dir=tmp_path / "logs",
                             marker=proc.new_marker())
    assert [r.exit_code for r in results] == [2, 0]
    assert results[0].stdout_path.name == "verifier.out"


@pytest.mark.parametrize("name,log", [("ruff check", "guard-ruff_check"), ("a/b..c", "guard-a_b..c"),
                                      ("///", "guard-_"), ("", "guard-guard"), ("x" * 80, "guard-" + "x" * 60)])
def test_step_log_names_are_safe_file_names(name: str, log: str) -> None:
    assert proc.Step(name, "true", None, True).log_name == log
