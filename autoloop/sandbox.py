"""`sandbox: bwrap` — the generator in a bubblewrap sandbox (Linux).

What the generator sees:

- the whole file system read-only (`--ro-bind / /`), so it cannot change the verifier's tree,
  your checkout, program.md, the journal, `.git`, your home, the Python installation or
  autoloop itself — whatever their permissions say;
- its own work tree read-write, and this cycle's log folder (where the prompt and the
  hypothesis file are), plus any `sandbox.writable` paths;
- the repository's `.git` read-only (git commands that only read work; commits do not);
- a private, empty /tmp and /var/tmp (`TMPDIR=/tmp`); a minimal /dev; its own /proc;
- its own PID namespace: when the generator exits, the kernel kills everything it left
  behind, detached or not; and `--die-with-parent`: if autoloop dies, so does the sandbox;
- no capabilities (`--cap-drop ALL`, so even root inside cannot remount anything writable),
  a new session (no terminal injection), its own IPC and host name;
- no network (`--unshare-net`) unless `sandbox.network: true` — which agent CLIs (claude,
  codex, aider) need to reach their API. With the network on, the sockets through which it
  could ask a daemon outside to run something for it (/run/user, /run/dbus, docker,
  containerd, podman) are hidden; DNS (/run/systemd/resolve) stays.

It fails closed: a missing bwrap, or one that cannot create namespaces here (some containers
forbid unprivileged user namespaces), stops the run before anything changes (exit 2).

The sandbox confines *subprocess* generators (command, claude, codex, aider). The in-process
generators (anthropic, openai) write only through autoloop's edit tool, which refuses every
path outside `allowed` before it reaches the disk; `tune` is autoloop's own code.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Sequence

from autoloop.program import SandboxSpec, command_words

# Hidden when the network is on: ways to have a process started outside the sandbox.
_DAEMON_DIRS = ("/run/user", "/run/dbus", "/run/containerd", "/run/podman", "/run/docker",
                "/var/run/dbus")
_DAEMON_SOCKETS = ("/run/docker.sock", "/var/run/docker.sock", "/run/podman/podman.sock")
_PRIVATE = ("/tmp", "/var/tmp")


class SandboxUnavailable(Exception):
    """bwrap is missing or cannot make a sandbox here; the message says why and what to do."""


class Bwrap:
    def __init__(self, spec: SandboxSpec, *, executable: str | None = None) -> None:
        self.spec = spec
        self.exe = executable or shutil.which("bwrap") or ""

    # ---- fail closed -------------------------------------------------------------------------

    def probe(self) -> None:
        """Raise SandboxUnavailable unless a sandbox like the generator's can be made here."""
        if not sys.platform.startswith("linux"):
            raise SandboxUnavailable("bwrap (bubblewrap) works on Linux only; use sandbox: none")
        if not self.exe:
            raise SandboxUnavailable("bwrap is not installed (not found on PATH); install bubblewrap "
                                     "(Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install "
                                     "bubblewrap) or use sandbox: none")
        argv = [self.exe, *self._base(self.spec.network), "--", "/bin/sh", "-c", "exit 0"]
        try:
            res = subprocess.run(argv, capture_output=True, stdin=subprocess.DEVNULL, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SandboxUnavailable(f"cannot run {self.exe}: {exc}") from None
        if res.returncode != 0:
            why = (res.stderr.decode(errors="replace").strip().splitlines() or [f"exit {res.returncode}"])[-1]
            raise SandboxUnavailable(
                f"bwrap cannot create a sandbox here ({why[:200]}); unprivileged user namespaces "
                "may be disabled (sysctl kernel.unprivileged_userns_clone=1, or AppArmor's "
                "kernel.apparmor_restrict_unprivileged_userns=0), or the container forbids them; "
                "use sandbox: none to run without one")

    # ---- the command line --------------------------------------------------------------------

    def _base(self, network: bool) -> list[str]:
        args = ["--die-with-parent", "--new-session", "--cap-drop", "ALL",
                "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
                "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        for d in _PRIVATE:
            if os.path.isdir(d):
                args += ["--tmpfs", d]
        if not network:
            args += ["--unshare-net"]
            if os.path.isdir("/run"):
                args += ["--tmpfs", "/run"]
        else:
            seen: set[str] = set()
            for d in _DAEMON_DIRS:
                real = os.path.realpath(d)
                if os.path.isdir(real) and real not in seen:
                    seen.add(real)
                    args += ["--tmpfs", real]
            for sock in _DAEMON_SOCKETS:
                real = os.path.realpath(sock)
                if os.path.exists(real) and real not in seen and not _under(real, sorted(seen)):
                    seen.add(real)
                    args += ["--ro-bind", "/dev/null", real]
        return args

    def argv(self, command: str | Sequence[str], *, workdir: Path, writable: Sequence[Path] = (),
             readable: Sequence[Path] = (), network: bool | None = None) -> list[str]:
        """`command` (a shell string or an argv) wrapped to run in the sandbox, cwd `workdir`.
        `network` overrides `sandbox.network` (an agent preset's default when the key is unset)."""
        net = self.spec.network if network is None else network
        args = [self.exe, *self._base(net)]
        hidden = list(_PRIVATE) + ([] if net else ["/run"])
        # What a private /tmp (or /run) would hide but the command needs to read: the Python
        # running autoloop and its venv (CI makes venvs under /tmp), PATH folders, the repository.
        ro: list[str] = []
        for p in [Path(sys.prefix), Path(sys.base_prefix), Path(sys.exec_prefix), *readable,
                  *(Path(d) for d in os.environ.get("PATH", "").split(os.pathsep) if os.path.isabs(d)),
                  *_named_folders(command)]:
            real = os.path.realpath(p)
            if os.path.exists(real) and _under(real, hidden) and real not in ro:
                ro.append(real)
        for real in ro:
            args += ["--ro-bind", real, real]
        rw = [os.path.realpath(workdir)]
        for p in writable:
            real = os.path.realpath(p)
            if real not in rw:
                rw.append(real)
        for extra in self.spec.writable:
            real = os.path.realpath(os.path.expanduser(extra))
            if os.path.exists(real) and real not in rw:
                rw.append(real)
        for real in rw:
            args += ["--bind", real, real]
        args += ["--chdir", os.path.realpath(workdir), "--setenv", "TMPDIR", "/tmp",
                 "--setenv", "TMP", "/tmp", "--setenv", "TEMP", "/tmp", "--"]
        if isinstance(command, str):
            return [*args, "/bin/sh", "-c", command]
        return [*args, *command]


def _named_folders(command: str | Sequence[str]) -> list[Path]:
    """The folders of absolute paths the command names (`python /tmp/x/gen.py`): a script kept
    under /tmp must stay readable behind the private /tmp, with the files beside it."""
    words = command_words(command) if isinstance(command, str) else list(command)
    out = []
    for w in words:
        if os.path.isabs(w) and os.path.exists(w):
            out.append(Path(w) if os.path.isdir(w) else Path(w).parent)
    return out


def _under(path: str, roots: Sequence[str]) -> bool:
    return any(path == r or path.startswith(r + "/") for r in roots)
