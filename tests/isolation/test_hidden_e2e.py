"""Real bwrap, continued: a scripted `generator: command` with the network on, through `autoloop
run`, reads no decoy secret of the home it runs with and reaches no daemon's socket; hiding the
whole home (`sandbox.hide: [~]`) keeps a venv in it working."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from autoloop.isolation import hidden
from tests.isolation.test_hidden_places import (DECOY, PLACES, _box, _close_proxies, _late_daemon,  # noqa: F401
                                                _reach, _run, daemons, home)

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


# ---- through `autoloop run` ----------------------------------------------------------------------

E2E_PLAN = '''
import json, socket
home, out = {home!r}, {{}}
for rel in {places!r}:
    path = os.path.join(home, rel, "decoy") if rel in {folders!r} else os.path.join(home, rel)
    try:
        out[rel] = open(path).read()
    except OSError as e:
        out[rel] = type(e).__name__
out["visible.txt"] = open(os.path.join(home, "visible.txt")).read()
def reach(path):
    try:
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(3)
        s.connect(path)
        return "reached: " + s.recv(5).decode()
    except OSError as e:
        return type(e).__name__
for path in {sockets!r}:
    out[path] = reach(path)
flag = {flag!r}
open(flag + ".started", "w").close()
for _ in range(200):
    if os.path.exists(flag + ".ready"):
        break
    time.sleep(0.05)
out["late"] = reach(open(flag + ".ready").read())
(OUT / "gen" / "probes.json").write_text(json.dumps(out))
W("val.txt", "30")
hyp("probe the home and the sockets")
'''


def test_a_scripted_generator_with_the_network_reads_no_secret_and_reaches_no_socket(tmp_path, home, daemons):
    from tests.scripts.e2e import make_project

    gen = tmp_path / "out" / "gen"
    gen.mkdir(parents=True)
    late = _late_daemon(gen / "flag", home / ".local" / "share" / "app" / "late-e2e.sock")
    p = make_project(tmp_path, {}, records_in=gen,
                     extra=f"sandbox: {{kind: bwrap, network: true, writable: [{gen}]}}")
    p.set_plan({1: E2E_PLAN.format(home=str(home), places=PLACES, folders=list(hidden.HOME_FOLDERS),
                                   sockets=[str(d.path) for d in daemons], flag=str(gen / "flag"))})
    p.env["HOME"] = str(home)      # the home autoloop runs with
    try:
        res = p.run("--cycles", "1")
        assert res.returncode == 0, res.stderr
        out = json.loads((gen / "probes.json").read_text())
        # every one answers outside the sandbox: the test can fail
        assert [_reach(str(d.path)) for d in [*daemons, *late]] == ["hello"] * (len(daemons) + 1)
    finally:
        for d in late:
            d.close()
    assert out.pop("visible.txt") == "shown"
    assert [r["status"] for r in p.rows()] == ["baseline", "keep"]   # the cycle ran as any other
    assert not [k for k, v in out.items() if DECOY in v or v.startswith("reached")], out
    assert len(out) == len(PLACES) + len(daemons) + 1


@pytest.mark.slow
def test_hiding_the_whole_home_keeps_a_venv_in_it_working(tmp_path, monkeypatch):
    """`sandbox.hide: [~]`: a project venv under the home still runs (pip, a module of it), the
    rest of the home is gone, and a credential place inside a folder shown again stays hidden."""
    base = Path(pwd.getpwuid(os.getuid()).pw_dir)   # not $HOME: the suite points it under /tmp
    if str(base.resolve()).startswith(("/tmp/", "/var/tmp/", "/dev/shm/")):
        pytest.skip("the runner's home lies under a folder every sandbox makes private")
    mine = Path(tempfile.mkdtemp(prefix=".autoloop-wholehome-", dir=base))
    try:
        (mine / "notes.txt").write_text(DECOY)
        (mine / ".ssh").mkdir()
        (mine / ".ssh" / "id").write_text(DECOY)
        subprocess.run([sys.executable, "-m", "venv", str(mine / "venv")], check=True, timeout=300)
        (mine / "venv" / ".ssh").mkdir()           # a credential place's name inside what is shown
        (mine / "venv" / "mod.py").write_text("print('mod ok')\n")
        monkeypatch.setenv("HOME", str(mine))
        monkeypatch.setenv("PATH", f"{mine / 'venv' / 'bin'}{os.pathsep}{os.environ['PATH']}")
        wt = tmp_path / "wt"
        wt.mkdir()
        box = _box(network=True, hide=("~",))
        command = (f"python -m pip --version | cut -c1-3; cd {mine}/venv && python mod.py; cd {wt}; "
                   f"cat {mine}/notes.txt {mine}/.ssh/id; ls {mine}")
        res = _run(box.argv(command, workdir=wt))
        assert res.stdout.split("\n")[:2] == ["pip", "mod ok"], (res.stdout, res.stderr)
        assert DECOY not in res.stdout
        assert res.stdout.split("\n")[2:] == ["venv", ""], res.stdout    # nothing else of the mine
    finally:
        shutil.rmtree(mine, ignore_errors=True)
