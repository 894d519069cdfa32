"""A real multi-node Ray cluster on this machine for the tests and the benchmark: `ray start
--head` and `ray start --address=...` as subprocesses, each node with its own temp folder and its
own environment (a node's speed is an environment variable the test verifier reads), and a Python
that has Ray but not autoloop (autoloop travels as the job's runtime_env py_module, as on a real
cluster). Its nodes, and the driver that waits for them, get a home of their own and none of the
caller's RAY_* variables: Ray reads `~/.ray/auth_token` and RAY_AUTH_MODE to decide whether a
cluster uses token auth, and a developer's token would otherwise turn it on for these nodes and
not for the run under test. Stopping it stops only the processes of its own temp folders: never
`ray stop`, which stops every Ray on the machine."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

START_S = 90.0      # a node on a loaded 2-core machine takes a while


def node_python(root: Path) -> Path:
    """A venv whose site-packages are Ray's, without autoloop (its editable hook left out)."""
    import ray

    site = Path(ray.__file__).resolve().parent.parent
    venv = root / "nodepy"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    shown = root / "site"
    shown.mkdir()
    for entry in site.iterdir():
        if not entry.name.lower().startswith(("autoloop", "__editable__", "_autoloop")):
            (shown / entry.name).symlink_to(entry)
    target = next((venv / "lib").glob("python3*")) / "site-packages" / "ray-only.pth"
    target.write_text(f"{shown}\n")
    py = venv / "bin" / "python"
    probe = subprocess.run([str(py), "-c", "import ray, importlib.util as u; "
                            "assert u.find_spec('autoloop') is None"], capture_output=True, text=True, cwd=root)
    assert probe.returncode == 0, probe.stderr
    return py


@dataclass
class Cluster:
    root: Path
    python: Path
    address: str = ""
    base: dict[str, str] = field(default_factory=dict)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    dirs: list[Path] = field(default_factory=list)

    @classmethod
    def start(cls, nodes: list[Mapping[str, str]], *, env: Mapping[str, str] | None = None) -> "Cluster":
        """One node per entry (its extra environment; `RESOURCES` in it: the node's custom Ray
        resources as JSON); the first is the head. 1 CPU each."""
        # short: Ray's socket paths under it must stay within the 107 bytes of a unix socket name
        root = Path(tempfile.mkdtemp(prefix="alray-", dir="/tmp"))
        c = cls(root, node_python(root))
        c.base = own_env(root, env or os.environ)
        try:
            for i, extra in enumerate(nodes):
                c._node(i, {**c.base, **extra})
            c.wait_nodes(len(nodes), nodes[0])
        except BaseException:
            c.stop()
            raise
        return c

    def restart(self, i: int, env: Mapping[str, str]) -> None:
        """Node `i` again (after it was killed), in a fresh temp folder of its own."""
        self._node(i, {**self.base, **env})

    def _node(self, i: int, env: Mapping[str, str]) -> None:
        d = self.root / f"n{i}"
        while d.exists():
            d = d.with_name(d.name + "x")   # a restarted node: its old folder keeps its logs
        d.mkdir()
        if i < len(self.dirs):
            self.dirs[i] = d
        else:
            self.dirs.append(d)
        args = [str(self.python), "-c", "from ray.scripts.scripts import main; main()", "start",
                "--num-cpus=1", "--num-gpus=0", f"--temp-dir={d}", "--disable-usage-stats",
                f"--object-store-memory={100 << 20}", "--block"]
        if env.get("RESOURCES"):
            args.append(f"--resources={env['RESOURCES']}")
        if i == 0:
            args += ["--head", "--port=0", "--include-dashboard=false"]
        else:
            args += [f"--address={self.address}"]
        log = open(self.root / f"{d.name}.log", "wb")
        self.procs.append(subprocess.Popen(args, env=dict(env), stdout=log, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, start_new_session=True, cwd=self.root))
        log.close()
        if i == 0:
            file = d / "ray_current_cluster"
            deadline = time.monotonic() + START_S
            while not (file.exists() and file.read_text().strip()):
                if time.monotonic() > deadline or self.procs[0].poll() is not None:
                    raise RuntimeError(f"the head node did not start: {(self.root / 'n0.log').read_text()[-2000:]}")
                time.sleep(0.3)
            self.address = file.read_text().strip()

    def wait_nodes(self, n: int, extra: Mapping[str, str] | None = None) -> None:
        """Until Ray counts `n` live nodes (a node's raylet registers after its `ray start` forks).
        `extra`: the head's own variables (its RAY_AUTH_* when it uses token auth)."""
        code = ("import ray,sys; ray.init(address=sys.argv[1], log_to_driver=False, logging_level='ERROR'); "
                "print(sum(1 for x in ray.nodes() if x['Alive']))")
        deadline = time.monotonic() + START_S
        while True:
            r = subprocess.run([str(self.python), "-c", code, self.address], capture_output=True, text=True,
                               env={**self.base, **(extra or {})}, timeout=START_S, cwd=self.root)
            if r.returncode == 0 and r.stdout.strip().splitlines()[-1:] == [str(n)]:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the cluster did not reach {n} nodes: {r.stdout[-500:]} {r.stderr[-1500:]}")
            time.sleep(1.0)

    def pids(self, name: str = "", node: int | None = None) -> list[int]:
        """Processes of this cluster (their command line names one of its temp folders)."""
        dirs = [self.dirs[node]] if node is not None else [self.root]
        out = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if name in cmd and any(re.search(re.escape(str(d)) + r"(/|\s|$)", cmd) for d in dirs):
                out.append(int(entry.name))
        return out

    def kill_raylet(self, node: int) -> list[int]:
        pids = [p for p in self.pids("/raylet", node) if "raylet/raylet" in _cmd(p) or _cmd(p).split()[0].endswith("raylet")]
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        return pids

    def stop(self) -> None:
        """Only this cluster's processes: its `ray start` groups, then anything left naming its folders.
        SIGKILL at once: on a SIGTERM `ray start --block` takes 15 s and more to stop its services
        (none of them ends sooner), and a test cluster has nothing to save."""
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 10
        while (left := self.pids()) and time.monotonic() < deadline:   # a worker forked meanwhile too
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.05)
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                pass
        shutil.rmtree(self.root, ignore_errors=True)


def own_env(root: Path, env: Mapping[str, str]) -> dict[str, str]:
    """`env` with a home under `root` and no RAY_* variable but ours: the memory monitor off, quick
    health checks."""
    home = root / "home"
    home.mkdir(exist_ok=True)
    base = {k: v for k, v in env.items() if not k.startswith("RAY_")}
    base.update(HOME=str(home), XDG_CACHE_HOME=str(home / ".cache"), XDG_CONFIG_HOME=str(home / ".config"),
                XDG_DATA_HOME=str(home / ".local" / "share"), XDG_STATE_HOME=str(home / ".local" / "state"))
    # a shared test machine's memory is not the cluster's: Ray's monitor would kill our tasks
    # for what other processes use
    base["RAY_memory_monitor_refresh_ms"] = "0"
    # the head's GCS marks a node dead after this many failed health checks, one a second: a
    # killed raylet refuses each at once, so the tests that kill one learn it in ~3 s, not Ray's
    # default ~15 s (5 every 3 s); a live but busy raylet still has Ray's 10 s to answer each
    base.update(RAY_health_check_period_ms="1000", RAY_health_check_failure_threshold="3")
    return base


def _cmd(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
