"""verifier.measure: the program.md key, and what autoloop.process.proc counts as the command's wall and
CPU time: real processes, real bwrap (the daemons here are setsid'd double forks)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import psutil
import pytest

from autoloop.process import proc
from autoloop.errors import ConfigError
from autoloop.program.reader import parse_program
from autoloop.isolation.sandbox import Bwrap, Confinement, SandboxUnavailable
from autoloop.base.specs import SandboxSpec

HEAD = "---\ngoal: g\nallowed: [a.py]\nverifier:\n  command: python b.py\n"


def _parse(tmp_path: Path, verifier: str) -> object:
    return parse_program(HEAD + verifier + "---\n", tmp_path / "program.md", tmp_path).verifier


@pytest.mark.parametrize(("keys", "message"), [
    ("  measure: cpuu\n  direction: minimize\n",
     "program.md:6: verifier.measure: 'cpuu' is not one of output, wall, cpu (did you mean 'cpu'?)"),
    ("  measure: wall\n  direction: maximize\n",
     "program.md:7: verifier.direction: must be minimize with verifier.measure: wall (fewer seconds "
     "is better); measure: output reads a number to maximize"),
    ("  measure: cpu\n  pattern: 'x(1)'\n  direction: minimize\n",
     "program.md:7: verifier.pattern: not read with verifier.measure: cpu (autoloop times the command "
     "itself); remove it and name the number with metric:"),
])
def test_bad_measure_settings_are_refused_at_their_line(tmp_path: Path, keys: str, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        _parse(tmp_path, keys)
    assert str(exc.value) == message


def test_metric_names_the_timed_number(tmp_path: Path) -> None:
    v = _parse(tmp_path, "  measure: wall\n  metric: bench_s\n  direction: minimize\n")
    assert (v.measure, v.metric) == ("wall", "bench_s")
    v = _parse(tmp_path, "  measure: cpu\n  direction: minimize\n")
    assert (v.measure, v.metric) == ("cpu", "seconds")
    v = _parse(tmp_path, "  metric: loss\n  direction: maximize\n")
    assert v.measure == "output"


# A command that burns `own` CPU seconds itself and starts a setsid'd double-forked daemon that
# burns CPU until it is killed (it records its pid, to be checked afterwards).
BURNER = '''
import os, sys, time
def burn(s):
    t = time.process_time()
    while time.process_time() - t < s:
        pass
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        with open(sys.argv[1], "w") as f:
            f.write(str(os.getpid()))
        burn(1000)
    os._exit(0)
while not os.path.exists(sys.argv[1]) or not open(sys.argv[1]).read():
    time.sleep(0.01)
burn(0.3)
'''


def _running(script: Path) -> list[int]:
    """Live processes running `script` (by command line: in a sandbox the pid it saw is its
    namespace's, not ours)."""
    out = []
    for p in psutil.process_iter(["cmdline", "status"]):
        if p.info["status"] != psutil.STATUS_ZOMBIE and str(script) in (p.info["cmdline"] or []):
            out.append(p.pid)
    return out


def _box(tmp_path: Path, reap: bool) -> Confinement:
    bwrap = Bwrap(SandboxSpec(kind="bwrap"))
    try:
        bwrap.probe()
    except SandboxUnavailable as exc:
        pytest.skip(str(exc))
    tree = tmp_path / "tree"
    tree.mkdir()
    return Confinement(bwrap, tree=tree, checkout=None, writable=(tmp_path / "w",), reap=reap,
                       path=os.environ.get("PATH", ""))


@pytest.mark.parametrize("sandboxed", [False, True])
def test_cpu_counts_a_daemon_left_running_and_it_does_not_outlive_the_command(tmp_path: Path,
                                                                               sandboxed: bool) -> None:
    (tmp_path / "w").mkdir()
    pidfile, script = tmp_path / "w" / "daemon.pid", tmp_path / "burn.py"
    script.write_text(BURNER)
    command = f"{sys.executable} {script} {pidfile}"
    argv = _box(tmp_path, reap=True).argv(command) if sandboxed else command
    r = proc.run(argv, cwd=tmp_path, env=dict(os.environ), timeout=60, log_stem=tmp_path / "log")
    assert r.exit_code == 0, r.stderr_tail()
    assert pidfile.read_text() and not _running(script)   # it ran, and runs no more
    assert r.cpu_s is not None and r.wall_s is not None
    # the command's own 0.3 s and the daemon's share of the same stretch (it burnt from its
    # start until it was killed): well above the command's alone
    assert r.cpu_s >= 0.3 + 0.1, (r.cpu_s, r.wall_s)
    assert r.wall_s <= r.duration_s + 1e-6


def test_wall_is_until_the_last_process_ended(tmp_path: Path) -> None:
    # the shell ends at once; what it left in the background sleeps 0.2 s more
    r = proc.run("(sleep 0.2 &) ; true", cwd=tmp_path, env=dict(os.environ), timeout=30, log_stem=tmp_path / "log")
    assert r.exit_code == 0 and r.wall_s is not None
    assert r.wall_s >= 0.2


def test_a_failed_command_has_no_time(tmp_path: Path) -> None:
    r = proc.run("exit 3", cwd=tmp_path, env=dict(os.environ), timeout=30, log_stem=tmp_path / "log")
    assert r.exit_code == 3 and r.wall_s is not None   # proc times it; verify makes it a crash
    r = proc.run("sleep 5", cwd=tmp_path, env=dict(os.environ), timeout=0.2, log_stem=tmp_path / "log")
    assert r.timed_out and r.wall_s is None and r.cpu_s is None


def test_a_ray_task_times_on_the_node_and_counts_the_daemon(tmp_path: Path) -> None:
    """autoloop.engine.ray_task.run_steps, the body a Ray worker runs (here as a plain function): the
    node's own proc takes the time, in a sandbox that keeps its namespace's init to reap."""
    import io
    import tarfile

    from autoloop.engine.ray_task import run_steps

    _box(tmp_path, reap=True)   # skips where no sandbox can be made
    (tmp_path / "w").mkdir()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = BURNER.encode()
        info = tarfile.TarInfo("burn.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    pidfile = tmp_path / "w" / "daemon.pid"
    step = proc.Step("verifier", f"{sys.executable} burn.py {pidfile}", 60, False)
    reply = run_steps(buf.getvalue(), [step], {}, 1 << 20,
                      sandbox=SandboxSpec(kind="bwrap", writable=(str(tmp_path / "w"),)), reap=True)
    assert not isinstance(reply, str), reply
    r = reply.runs[0].result
    assert r.exit_code == 0, reply.runs[0].stderr
    assert r.cpu_s is not None and r.cpu_s >= 0.4 and r.wall_s is not None
