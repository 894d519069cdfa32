"""Real bwrap: the home's credential places and `sandbox.hide` are out of sight in the generator's
sandbox and in a measurement's, and no unix socket of the host is reached: decoys planted in a home
outside /tmp (a home under /tmp would vanish behind the private /tmp and prove nothing), sockets of
"daemons" under /var/lib, /srv and the home, one bound after the sandbox started. Ordinary tools
(multiprocessing, asyncio, git, node, pytest) keep working."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from autoloop.base.specs import SandboxSpec
from autoloop.isolation import hidden, seccomp
from autoloop.isolation.sandbox import Bwrap, Confinement, Sandboxed
from autoloop.process import proc
from autoloop.process.line import Line, Wrap

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

DECOY = "DECOY-SECRET-4c1d"
PLACES = [*hidden.HOME_FOLDERS, *hidden.HOME_FILES]


_OPEN: list[Bwrap] = []


def _box(**spec: object) -> Bwrap:
    """A sandbox as a run makes it: with the network on, its egress proxy started (closed after
    the test by `_close_proxies`)."""
    box = Bwrap(SandboxSpec(kind="bwrap", **spec))   # type: ignore[arg-type]
    if box.spec.network:
        box.start_egress()
        _OPEN.append(box)
    return box


@pytest.fixture(autouse=True)
def _close_proxies():
    yield
    while _OPEN:
        egress = _OPEN.pop().egress
        if egress is not None:
            egress.close()


def plant(home: Path) -> None:
    for rel in hidden.HOME_FOLDERS:
        (home / rel).mkdir(parents=True, exist_ok=True)
        (home / rel / "decoy").write_text(DECOY)
    for rel in hidden.HOME_FILES:
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / rel).write_text(DECOY)
    (home / "visible.txt").write_text("shown")
    (home / "projects" / "a").mkdir(parents=True)
    (home / "projects" / "a" / ".env").write_text(DECOY)
    (home / "projects" / "a" / "main.py").write_text("shown")
    (home / "vault").mkdir()
    (home / "vault" / "key").write_text(DECOY)


@pytest.fixture(scope="module")
def home():
    """A home outside /tmp (under the test runner's own home), readable by everyone."""
    base = Path(pwd.getpwuid(os.getuid()).pw_dir)   # not $HOME: the suite points it under /tmp
    if str(base.resolve()).startswith(("/tmp/", "/var/tmp/", "/dev/shm/")):
        pytest.skip("the runner's home lies under a folder every sandbox makes private")
    home = Path(tempfile.mkdtemp(prefix=".autoloop-hide-test-", dir=base))
    home.chmod(0o755)
    try:
        plant(home)
        yield home
    finally:
        shutil.rmtree(home, ignore_errors=True)


READER = f"""
import json, os, sys
home, out = sys.argv[1], {{}}
for rel in {PLACES!r} + ["visible.txt", "projects/a/.env", "projects/a/main.py", "vault/key"]:
    path = os.path.join(home, rel)
    path = os.path.join(path, "decoy") if rel in {list(hidden.HOME_FOLDERS)!r} else path
    try:
        with open(path) as f:
            out[rel] = f.read()
    except OSError as e:
        out[rel] = type(e).__name__
print(json.dumps(out))
"""


def _run(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)


def _read_in(home: Path, tmp: Path, monkeypatch, *, measurement: bool, hide: tuple[str, ...] = ()) -> dict:
    monkeypatch.setenv("HOME", str(home))
    wt = tmp / "wt"
    wt.mkdir(exist_ok=True)
    script = wt / "read.py"
    script.write_text(READER)
    box = _box(network=True, hide=hide)
    if measurement:
        argv = Confinement(box, tree=wt, checkout=None, path=os.environ["PATH"]).argv(f"{sys.executable} read.py {home}")
    else:
        argv = box.argv([sys.executable, str(script), str(home)], workdir=wt)
    res = _run(argv)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


@pytest.fixture(scope="module")
def seen(home, tmp_path_factory):
    """What the generator's and a measurement's sandboxes read of the decoy home."""
    with pytest.MonkeyPatch.context() as mp:
        hide = (f"{home}/projects/*/.env", f"{home}/vault")
        return {m: _read_in(home, tmp_path_factory.mktemp(m), mp, measurement=m == "measurement", hide=hide)
                for m in ("generator", "measurement")}


@pytest.mark.parametrize("rel", PLACES)
@pytest.mark.parametrize("who", ["generator", "measurement"])
def test_each_default_place_is_hidden(seen, who, rel):
    assert seen[who]["visible.txt"] == "shown"     # the home itself is there: the test can fail
    assert DECOY not in seen[who][rel], (who, rel, seen[who][rel])


@pytest.mark.parametrize("who", ["generator", "measurement"])
def test_sandbox_hide_hides_the_users_own_paths(seen, who):
    assert seen[who]["projects/a/main.py"] == "shown"
    assert DECOY not in seen[who]["projects/a/.env"] and DECOY not in seen[who]["vault/key"]


def test_a_place_that_is_a_link_is_hidden_where_it_points(tmp_path, home, monkeypatch):
    elsewhere = home / "keys-elsewhere"
    elsewhere.mkdir()
    (elsewhere / "id").write_text(DECOY)
    linked = home / "linked"
    (linked).mkdir()
    (linked / ".ssh").symlink_to(elsewhere)
    monkeypatch.setenv("HOME", str(linked))
    assert (os.path.realpath(elsewhere), True) in hidden.places()
    assert not any(p.startswith(str(home / "nowhere")) for p, _ in hidden.places([str(home / "nowhere" / "x")]))
    wt = tmp_path / "wt"
    wt.mkdir()
    res = _run(Bwrap(SandboxSpec(kind="bwrap")).argv(f"cat {linked}/.ssh/id; ls -A {elsewhere}", workdir=wt))
    assert DECOY not in res.stdout and res.stdout.strip() == ""


# ---- sockets -----------------------------------------------------------------------------------


class Daemon:
    """A pathname unix socket that answers "hello" to whoever connects."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(str(path))
        os.chmod(path, 0o777)
        self.sock.listen(8)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        try:
            while True:
                conn = self.sock.accept()[0]
                conn.sendall(b"hello")
                conn.close()
        except OSError:
            pass

    def close(self) -> None:
        self.sock.close()
        self.path.unlink(missing_ok=True)


def _system_dirs() -> list[Path]:
    out = []
    for top in ("/var/lib", "/srv", "/opt"):
        if os.access(top, os.W_OK):
            out.append(Path(tempfile.mkdtemp(prefix="autoloop-test-", dir=top)))
    return out


@pytest.fixture
def daemons(home):
    dirs = _system_dirs()
    for d in dirs:
        d.chmod(0o755)
    ds = [Daemon(d / "d.sock") for d in dirs] + [Daemon(home / ".local" / "share" / "app" / "d.sock")]
    yield ds
    for d in ds:
        d.close()
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)


CONNECT = """
import json, os, socket, sys, time
out = {}
def reach(path):
    try:
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(3)
        s.connect(path)
        return "reached: " + s.recv(5).decode()
    except OSError as e:
        return type(e).__name__
for path in sys.argv[2:]:
    out[path] = reach(path)
flag = sys.argv[1]
open(flag + ".started", "w").close()
for _ in range(200):
    if os.path.exists(flag + ".ready"):
        break
    time.sleep(0.05)
out["late"] = reach(open(flag + ".ready").read())
print(json.dumps(out))
"""


def _late_daemon(flag: Path, where: Path) -> list[Daemon]:
    made: list[Daemon] = []

    def later() -> None:
        for _ in range(400):
            if flag.with_name(flag.name + ".started").exists():
                break
            time.sleep(0.05)
        made.append(Daemon(where))
        flag.with_name(flag.name + ".ready").write_text(str(where))

    threading.Thread(target=later, daemon=True).start()
    return made


@pytest.mark.parametrize("network", [True, False], ids=["network", "no-network"])
def test_the_generator_reaches_no_socket_of_the_host(tmp_path, home, daemons, monkeypatch, network):
    if not seccomp.supported():
        pytest.skip("no seccomp filter for this machine")
    monkeypatch.setenv("HOME", str(home))
    wt = tmp_path / "wt"
    wt.mkdir()
    flag = wt / "flag"
    late = _late_daemon(flag, home / ".local" / "share" / "app" / f"late-{network}.sock")
    script = tmp_path / "connect.py"
    script.write_text(CONNECT)
    paths = [str(d.path) for d in daemons]
    # outside the sandbox, each answers: the test can fail
    assert [_reach(p) for p in paths] == ["hello"] * len(paths)
    res = _run(_box(network=network).argv(
        [sys.executable, str(script), str(flag), *paths], workdir=wt))
    try:
        assert res.returncode == 0, res.stderr
        out = json.loads(res.stdout)
        assert late and _reach(str(late[0].path)) == "hello"
        assert len(out) == len(paths) + 1
        assert not [k for k, v in out.items() if v.startswith("reached")], out
        assert set(out.values()) == {"PermissionError"}    # made no socket at all
    finally:
        for d in late:
            d.close()


def _reach(path: str) -> str:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(3)
        s.connect(path)
        return s.recv(5).decode()


def test_a_measurement_sees_none_of_the_sockets_bound_before_it(tmp_path, home, daemons, monkeypatch):
    """Measured code may make its own sockets (multiprocessing's Manager below); the host's bound
    at the start are hidden. (One bound later is the documented gap of measurements.)"""
    monkeypatch.setenv("HOME", str(home))
    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / "probe.py").write_text(
        "import json, socket, sys, multiprocessing as mp\n"
        "def reach(p):\n"
        "    try:\n"
        "        s = socket.socket(socket.AF_UNIX); s.settimeout(3); s.connect(p); return 'reached'\n"
        "    except OSError as e:\n"
        "        return type(e).__name__\n"
        "with mp.Manager() as m:\n"
        "    d = m.dict(a=1)\n"
        "    managed = d['a']\n"
        "print(json.dumps({'managed': managed, **{p: reach(p) for p in sys.argv[1:]}}))\n")
    paths = [str(d.path) for d in daemons]
    box = Confinement(Bwrap(SandboxSpec(kind="bwrap")), tree=wt, checkout=None, path=os.environ["PATH"])
    res = _run(box.argv(f"{sys.executable} probe.py {' '.join(paths)}"))
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out.pop("managed") == 1
    assert out and not [k for k, v in out.items() if v == "reached"], out


class _VanishingAfterTheLine:
    """The race of a real host, made certain: the line is made while a service's socket is bound,
    and the service removes its socket's folder before bwrap sets up (the line made once more
    finds it gone)."""

    def __init__(self, box: Wrap, daemon: Daemon) -> None:
        self.box, self.daemon, self.lines = box, daemon, 0

    def line(self, command: str | list[str]) -> Line:
        line = self.box.line(command)
        self.lines += 1
        if self.lines == 1:
            at = line.argv.index(str(self.daemon.path))
            assert line.argv[at - 2:at] == ["--ro-bind", "/dev/null"]
            self.daemon.close()
            shutil.rmtree(self.daemon.path.parent)
        return line


@pytest.mark.parametrize("who", ["measurement", "generator"])
def test_a_host_socket_gone_before_the_sandbox_is_set_up_costs_a_new_start_not_the_run(tmp_path, home, who):
    """A socket's folder removed between the scan that hid it and bwrap's set-up (seen in a full
    suite: 'bwrap: Can't mkdir parents for /var/lib/…/d.sock: Read-only file system', blamed on the
    verifier) is the host changing, not the command failing: the line is made again and run. The
    generator's sandbox hides the host's sockets too where it may make its own (unix_sockets)."""
    wt = tmp_path / "wt"
    wt.mkdir()
    if who == "measurement":
        box: Wrap = Confinement(Bwrap(SandboxSpec(kind="bwrap")), tree=wt, checkout=None, path=os.environ["PATH"])
    else:
        bwrap = Bwrap(SandboxSpec(kind="bwrap", unix_sockets=True))
        box = Sandboxed(lambda command: bwrap.argv(command, workdir=wt))
    racing = _VanishingAfterTheLine(box, Daemon(home / ".local" / "share" / "vanishing" / "d.sock"))
    res = proc.run_wrapped("echo ran", racing, cwd=wt, env=dict(os.environ), timeout=30,
                           log_stem=tmp_path / "logs" / who)
    assert (res.exit_code, res.stdout_path.read_text()) == (0, "ran\n")
    assert racing.lines >= 2   # more where the host churns sockets of its own meanwhile


def test_a_command_that_prints_bwraps_failure_is_not_started_again(tmp_path, daemons):
    """Whether the command started is bwrap's word (its status descriptor), not what the command
    printed: one that prints bwrap's words about a socket it sees hidden, and fails, failed."""
    wt = tmp_path / "wt"
    wt.mkdir()
    box = Confinement(Bwrap(SandboxSpec(kind="bwrap")), tree=wt, checkout=None, path=os.environ["PATH"])
    sock = str(daemons[-1].path)
    daemons[-1].close()   # gone from the host too: only the status can tell
    lines = []

    class Counting:
        def line(self, command: str | list[str]) -> Line:
            lines.append(command)
            return box.line(command)

    command = f"echo \"bwrap: Can't mkdir parents for {sock}: Read-only file system\" >&2; exit 1"
    res = proc.run_wrapped(command, Counting(), cwd=wt, env=dict(os.environ), timeout=30,
                           log_stem=tmp_path / "logs" / "verifier")
    assert res.exit_code == 1 and "Can't mkdir parents" in res.stderr_tail()
    assert len(lines) == 1


ORDINARY = r"""
set -e
cd "$1"
{py} -c '
import asyncio, multiprocessing as mp, subprocess
with mp.Pool(2) as p:
    assert p.map(abs, [-1, -2]) == [1, 2]
for ctx in ("fork", "spawn"):
    with mp.get_context(ctx).Pool(1) as p:
        assert p.apply(abs, (-3,)) == 3
async def main():
    proc = await asyncio.create_subprocess_exec("true")
    return await proc.wait()
assert asyncio.run(main()) == 0
print("python ok")
'
git init -q g && git -C g -c user.name=a -c user.email=a@b commit -q --allow-empty -m x && git -C g log --oneline | wc -l
node -e 'require("child_process").execFile("node", ["-e", "process.stdout.write(\"node ok\")"], (e, out) => console.log(out))'
printf 'def test_a():\n    assert 1\n' > test_x.py && {py} -m pytest -q -p no:cacheprovider test_x.py 2>&1 | tail -1
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node")
def test_ordinary_tools_work_in_the_generators_sandbox(tmp_path, home, monkeypatch):
    monkeypatch.setenv("HOME", str(home))
    wt = tmp_path / "wt"
    wt.mkdir()
    script = tmp_path / "ordinary.sh"
    script.write_text(ORDINARY.replace("{py}", sys.executable))
    res = _run(_box(network=True).argv(["/bin/sh", str(script), str(wt)], workdir=wt))
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.split("\n")
    assert lines[:3] == ["python ok", "1", "node ok"], res.stdout
    assert "1 passed" in lines[3], res.stdout


SYSTEM_PY = "/usr/bin/python3"   # the test's own may live where nobody cannot enter (/root/.pyenv)
UNPRIVILEGED = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
# What nobody imports is autoloop (PYTHONPATH) and the standard library: CI's venv lies in a folder
# only root may enter, so nobody's Python never sees its packages. Made so here too, wherever the venv is.
NO_SITE = ["-S"]


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root to become nobody")
def test_unprivileged_the_same(request):
    """bwrap run by an ordinary user makes a user namespace: the places are hidden and the filter
    holds there too (the decisions made by autoloop running as that user)."""
    if not os.path.exists(SYSTEM_PY) or not os.access(str(Path(hidden.__file__).parent), os.R_OK):
        pytest.skip("this Python or autoloop is not readable by nobody")
    tmp_path = Path(tempfile.mkdtemp(prefix="autoloop-nobody-", dir="/tmp"))   # not the per-test TMPDIR: root's alone
    home = Path(tempfile.mkdtemp(prefix="autoloop-nobody-home-", dir="/var/lib"))   # outside /tmp and /root
    request.addfinalizer(lambda: [shutil.rmtree(d, ignore_errors=True) for d in (tmp_path, home)])
    home.chmod(0o755)
    plant(home)
    wt = tmp_path / "wt"
    wt.mkdir()
    os.chmod(tmp_path, 0o777)
    os.chmod(wt, 0o777)
    (tmp_path / "read.py").write_text(READER)
    os.chmod(tmp_path / "read.py", 0o644)
    driver = (
        "import subprocess, sys\n"
        "from autoloop.base.specs import SandboxSpec\n"
        "from autoloop.isolation.sandbox import Bwrap\n"
        "box = Bwrap(SandboxSpec(kind='bwrap'))\n"
        f"argv = box.argv([{SYSTEM_PY!r}, {str(tmp_path / 'read.py')!r}, "
        f"{str(home)!r}], workdir=__import__('pathlib').Path({str(wt)!r}))\n"
        "res = subprocess.run(argv, capture_output=True, text=True)\n"
        "print(res.stdout.strip() if res.returncode == 0 else res.stderr.replace(chr(10), ' '))\n"
        f"sock = subprocess.run(Bwrap(SandboxSpec(kind='bwrap')).argv([{SYSTEM_PY!r}, '-c', "
        "'import socket; socket.socket(socket.AF_UNIX)'], workdir=__import__('pathlib').Path("
        f"{str(wt)!r})), capture_output=True, text=True)\n"
        "print('PermissionError' in sock.stderr)\n")
    env = {"HOME": str(home), "PATH": os.environ["PATH"], "TMPDIR": str(tmp_path),
           "PYTHONPATH": str(Path(hidden.__file__).parents[2])}
    res = _run([*UNPRIVILEGED, sys.executable, *NO_SITE, "-c", driver], env=env)
    assert res.returncode == 0, res.stderr
    first, flag = res.stdout.strip().splitlines()[0], res.stdout.strip().splitlines()[-1]
    assert first.startswith("{"), first
    out = json.loads(first)
    assert out["visible.txt"] == "shown"
    assert not [rel for rel in PLACES if DECOY in out[rel]], out
    assert flag == ("True" if seccomp.supported() else "False")


def test_an_agent_installed_inside_a_hidden_place_still_starts(tmp_path, home, monkeypatch):
    """Claude Code's local installer puts it under ~/.claude/local: what the command needs from a
    hidden place is shown again, read-only, and nothing else of it."""
    monkeypatch.setenv("HOME", str(home))
    local = home / ".claude" / "local"
    local.mkdir(parents=True, exist_ok=True)
    exe = local / "agent"
    exe.write_text("#!/bin/sh\necho started\n")
    exe.chmod(0o755)
    wt = tmp_path / "wt"
    wt.mkdir()
    argv = _box(network=True).argv(
        f"{exe}; cat {home}/.claude/decoy", workdir=wt, readable=[local])
    res = _run(argv)
    assert res.stdout.strip() == "started" and DECOY not in res.stdout, (res.stdout, res.stderr)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root to become nobody")
def test_unprivileged_a_measurement_sees_no_socket_of_the_host(request):
    if not os.path.exists(SYSTEM_PY) or not os.access("/var/lib", os.W_OK):
        pytest.skip("needs /usr/bin/python3 and a writable /var/lib")
    tmp = Path(tempfile.mkdtemp(prefix="autoloop-nobody-", dir="/tmp"))
    where = Path(tempfile.mkdtemp(prefix="autoloop-test-", dir="/var/lib"))
    where.chmod(0o755)
    daemon = Daemon(where / "d.sock")
    request.addfinalizer(lambda: (daemon.close(), [shutil.rmtree(d, ignore_errors=True) for d in (tmp, where)]))
    (tmp / "wt").mkdir()
    os.chmod(tmp, 0o777)
    os.chmod(tmp / "wt", 0o777)
    probe = f"import socket; s = socket.socket(socket.AF_UNIX); s.connect({str(daemon.path)!r}); print(s.recv(5))"
    driver = (
        "import pathlib, shlex, subprocess\n"
        "from autoloop.base.specs import SandboxSpec\n"
        "from autoloop.isolation.sandbox import Bwrap, Confinement\n"
        f"box = Confinement(Bwrap(SandboxSpec(kind='bwrap')), tree=pathlib.Path({str(tmp / 'wt')!r}), checkout=None, "
        "path='/usr/bin:/bin')\n"
        f"res = subprocess.run(box.argv({SYSTEM_PY!r} + ' -c ' + shlex.quote({probe!r})), capture_output=True, text=True)\n"
        "print(res.returncode, (res.stderr.strip().splitlines() or [''])[-1])\n")
    env = {"HOME": "/nonexistent", "PATH": "/usr/bin:/bin", "TMPDIR": str(tmp),
           "PYTHONPATH": str(Path(hidden.__file__).parents[2])}
    assert _reach(str(daemon.path)) == "hello"
    res = _run([*UNPRIVILEGED, sys.executable, *NO_SITE, "-c", driver], env=env)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "1 ConnectionRefusedError: [Errno 111] Connection refused", res.stdout


def test_with_unix_sockets_on_the_generator_makes_its_own_and_reaches_none_of_the_hosts(tmp_path, home, daemons, monkeypatch):
    """`sandbox.unix_sockets: true`: no filter, so a Manager (and headless Chromium, which makes
    a socket for its single-instance lock) works; the host's sockets bound before are hidden."""
    monkeypatch.setenv("HOME", str(home))
    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / "probe.py").write_text(
        "import json, socket, sys, multiprocessing as mp\n"
        "def reach(p):\n"
        "    try:\n"
        "        s = socket.socket(socket.AF_UNIX); s.settimeout(3); s.connect(p); return 'reached'\n"
        "    except OSError as e:\n"
        "        return type(e).__name__\n"
        "with mp.Manager() as m:\n"
        "    managed = m.dict(a=1)['a']\n"
        "print(json.dumps({'managed': managed, **{p: reach(p) for p in sys.argv[1:]}}))\n")
    paths = [str(d.path) for d in daemons]
    assert [_reach(p) for p in paths] == ["hello"] * len(paths)
    argv = _box(unix_sockets=True).argv([sys.executable, "probe.py", *paths], workdir=wt)
    assert "--seccomp" not in argv
    res = _run(argv)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out.pop("managed") == 1
    assert out and not [k for k, v in out.items() if v == "reached"], out
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        return
    page = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--user-data-dir=/tmp/profile",
            "--dump-dom", "data:text/html,<p>hi</p>"]
    shown = _run(_box(unix_sockets=True).argv(page, workdir=wt))
    assert "<p>hi</p>" in shown.stdout, shown.stderr[-500:]
    refused = _run(_box().argv(page, workdir=wt))            # the default: it aborts, as documented
    assert "<p>hi</p>" not in refused.stdout and "socket() failed: Permission denied" in refused.stderr
