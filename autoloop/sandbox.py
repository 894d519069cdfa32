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
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from autoloop.program import Program, SandboxSpec, command_words
from autoloop.proc import run_captured

# Hidden when the network is on: ways to have a process started outside the sandbox.
_DAEMON_DIRS = ("/run/user", "/run/dbus", "/run/containerd", "/run/podman", "/run/docker",
                "/var/run/dbus")
_DAEMON_SOCKETS = ("/run/docker.sock", "/var/run/docker.sock", "/run/podman/podman.sock")
_PRIVATE = ("/tmp", "/var/tmp")
GIT_IN_SANDBOX = "/tmp/.autoloop-git"   # where a measurement sees the repository's git folder


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
            res = run_captured(argv, timeout=30)
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


    # ---- measurements ------------------------------------------------------------------------

    def measurement_argv(self, command: str, *, box: Confinement) -> list[str]:
        """`command` (a shell string) wrapped to run as a measurement: see Confinement."""
        args = [self.exe, *self._base(box.network)]
        for dev in _devices():
            args += ["--dev-bind", dev, dev]
        args += ["--tmpfs", "/dev/shm"]
        hidden = list(_PRIVATE) + ([] if box.network else ["/run"])
        wanted = [Path(sys.prefix), Path(sys.base_prefix), Path(sys.exec_prefix), *box.readable,
                  *(Path(d) for d in box.path.split(os.pathsep) if os.path.isabs(d)),
                  *_named_folders(command)]
        # a venv's bin/ is not enough: its python needs lib/…/site-packages beside it
        wanted += [_venv_root(p) or p for p in wanted]
        ro: list[str] = []
        for p in wanted:
            real = os.path.realpath(p)
            if os.path.exists(real) and _under(real, hidden) and not _under(real, ro):
                ro.append(real)
        for real in sorted(ro, key=len):
            args += ["--ro-bind", real, real]
        if box.git is not None:
            args += ["--ro-bind", str(box.git[0]), GIT_IN_SANDBOX]
        tree = os.path.realpath(box.tree)
        args += ["--bind", tree, tree]
        where = tree
        if box.checkout is not None and os.path.realpath(box.checkout) != tree:
            # The candidate at your checkout's path too: an editable install's finder or .pth,
            # pytest's rootdir, a tool that found the project by absolute path — every path
            # into the checkout now resolves to the candidate.
            where = os.path.realpath(box.checkout)
            args += ["--bind", tree, where]
            for keep in box.keep:
                real = os.path.realpath(keep)
                if os.path.exists(real):
                    args += ["--ro-bind", real, real]
        for p in box.writable:
            real = os.path.realpath(os.path.expanduser(str(p)))
            if os.path.exists(real):
                args += ["--bind", real, real]
        for rel in box.protect:
            src = os.path.join(tree, rel)
            if os.path.lexists(src) and not os.path.islink(src):
                for at in dict.fromkeys([tree, where]):
                    args += ["--ro-bind", src, os.path.join(at, rel)]
        if box.git is not None:
            for at in dict.fromkeys([tree, where]):
                args += ["--ro-bind", str(box.git[1]), os.path.join(at, ".git")]
        args += ["--chdir", where, "--"]
        return [*args, "/bin/sh", "-c", command]


@dataclass(frozen=True)
class Confinement:
    """One measurement's sandbox: the whole file system read-only, except `tree` (the
    verification tree), `writable` (its private scratch: temp and bytecode folders, plus
    `sandbox.writable`); the tree also appears at `checkout` (your checkout's path), where the
    command runs, with `keep` (virtual environments inside your checkout, data kept there)
    read-only on top. Its own PID namespace (what it leaves running dies with it), no
    capabilities, no network unless `network` (verifier.network), GPUs and /dev/shm kept.
    `protect` are paths inside the tree it must not write (the tree's .git link, a journal)."""

    bwrap: Bwrap
    tree: Path
    checkout: Path | None
    writable: tuple[Path, ...] = ()
    readable: tuple[Path, ...] = ()
    keep: tuple[Path, ...] = ()
    protect: tuple[str, ...] = ()       # relative to the tree
    git: tuple[Path, Path] | None = None  # (the repository's git folder, the .git link to show)
    network: bool = False
    path: str = ""             # the command's PATH: its folders stay readable behind a private /tmp

    def argv(self, command: str) -> list[str]:
        return self.bwrap.measurement_argv(command, box=self)


_READ_ONLY = re.compile(r"Read-only file system|EROFS|\[Errno 30\]")
_NO_NETWORK = re.compile(r"Temporary failure in name resolution|Name or service not known|"
                         r"Could not resolve host|Network is unreachable|getaddrinfo|"
                         r"\[Errno -[23]\]|\[Errno 101\]|No address associated with hostname")


def failure_hint(output: str, *, network: bool) -> str | None:
    """What to set when a sandboxed measurement failed for want of a writable path or the
    network (read from the tail of its output), or None."""
    m = _READ_ONLY.search(output)
    if m is not None:
        line = next((ln for ln in output.splitlines() if m.group(0) in ln), "")
        path = re.search(r"'(/[^']+)'", line) or re.search(r"(/[^\s:'\"]+)", line)
        where = f" ({path.group(1)})" if path else ""
        return ("the measurement sandbox keeps everything but the verification tree and its temp "
                f"folder read-only{where}; if the command must write there, add the path to "
                "sandbox.writable")
    if not network and _NO_NETWORK.search(output):
        return "the measurement sandbox has no network; set verifier.network: true if it needs one"
    return None


def git_link(tree: Path, scratch: Path, common_dir: Path) -> tuple[Path, Path] | None:
    """(the repository's git folder, a `.git` link file pointing into where the sandbox shows it)
    for a measurement of `tree`: the candidate is bound over your checkout, which hides the
    repository's .git there, so git inside a measurement finds it at GIT_IN_SANDBOX instead
    (read-only). None when the tree's .git is not a link into `common_dir`/worktrees."""
    try:
        text = (tree / ".git").read_text(errors="replace").strip()
    except OSError:
        return None
    if not text.startswith("gitdir: "):
        return None
    admin = Path(text[len("gitdir: "):])
    if admin.parent.name != "worktrees" or os.path.realpath(admin.parent.parent) != os.path.realpath(common_dir):
        return None
    link = scratch / "dotgit"
    link.write_text(f"gitdir: {GIT_IN_SANDBOX}/worktrees/{admin.name}\n")
    return (Path(os.path.realpath(common_dir)), link)


def for_measurements(spec: SandboxSpec) -> tuple[Bwrap | None, str | None]:
    """The sandbox measurements outside a run (`verify`, `gate`) use, probed: (bwrap, None), or
    (None, why there is none) for `auto` where none can be made and for `none`. Raises
    SandboxUnavailable for `bwrap` where none can be made (fail closed)."""
    if spec.kind == "none":
        return None, "sandbox: none in program.md"
    box = Bwrap(spec)
    try:
        box.probe()
    except SandboxUnavailable as exc:
        if spec.kind == "bwrap":
            raise
        return None, str(exc)
    return box, None


def tree_box(bwrap: Bwrap, program: Program, tree: Path, common_dir: Path, scratch: Path,
             path: str | None = None, keep: tuple[Path, ...] | None = None) -> Confinement:
    """A measurement of `tree` (a private worktree of the repository) — a run's, or `autoloop
    verify`'s and `autoloop gate`'s — writing only the tree and `scratch`. `keep` defaults to
    checkout_keep(program) (a run passes the one it computed at its start)."""
    scratch.mkdir(parents=True, exist_ok=True)
    git = git_link(tree, scratch, common_dir)
    root = program.repo_root
    readable = [d.source for d in program.data if not _inside(d.source, root)]
    if git is None or not _inside(common_dir, root):
        readable.append(common_dir)
    writable = [scratch, *(Path(os.path.expanduser(w)) for w in program.sandbox.writable)]
    return Confinement(bwrap, tree=tree, checkout=root, writable=tuple(writable), readable=tuple(readable),
                       keep=checkout_keep(program) if keep is None else keep, git=git,
                       protect=() if git else (".git",),
                       network=program.verifier.network,
                       path=os.environ.get("PATH", "") if path is None else path)


def checkout_keep(program: Program) -> tuple[Path, ...]:
    """What stays visible (read-only) at your checkout's path inside a measurement although
    the candidate is bound there: virtual environments at its top (`.venv/bin/python -m
    pytest`), and data kept inside it."""
    root = program.repo_root
    out: list[Path] = []
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError:
        entries = []
    for e in entries:
        if e.is_dir(follow_symlinks=False) and (Path(e.path) / "pyvenv.cfg").is_file():
            out.append(Path(e.path))
    for d in program.data:
        if _inside(d.source, root):
            out.append(d.source)
    return tuple(out)


def _inside(path: Path, root: Path) -> bool:
    p, r = os.path.realpath(path), os.path.realpath(root)
    return p == r or p.startswith(r.rstrip("/") + "/")


def _devices() -> list[str]:
    """GPUs and other accelerators, bound into measurements when present."""
    out = []
    try:
        names = sorted(os.listdir("/dev"))
    except OSError:
        return out
    for name in names:
        if name.startswith("nvidia") or name in ("dri", "kfd", "accel"):
            out.append("/dev/" + name)
    return out


def _venv_root(p: Path) -> Path | None:
    """The virtual environment `p` (a folder or file in its bin/) belongs to, if any."""
    for d in (p, p.parent, p.parent.parent):
        if (d / "pyvenv.cfg").is_file():
            return d
    return None


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
