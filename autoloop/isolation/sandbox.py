"""bubblewrap sandboxes (Linux) for the generator and for measurements: the whole file system
read-only (whatever its permissions say), a private /tmp and /var/tmp, a minimal /dev, their own
/proc and PID namespace (what they leave running dies with them), a new session, no capabilities,
their own network namespace: empty, or with the network on holding only the egress proxy's
listener (autoloop.isolation.egress; no sockets of daemons that would start a process for them).
The generator writes only its work tree, its cycle's log folder and `sandbox.writable`; a
measurement only what its Confinement says. (The SDK generators write only through the edit tool.)
Neither reads the home's credential places or `sandbox.hide` (autoloop.isolation.hidden); the
generator can make no unix socket (autoloop.isolation.seccomp), a measurement sees none of the
host's bound when it starts.
"""

from __future__ import annotations

import atexit
import fcntl
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, NamedTuple, Sequence

from autoloop.errors import ConfigError
from autoloop.isolation import seccomp
from autoloop.isolation.hidden import bwrap_args as hide_args, host_sockets, outermost, places as hidden_places
from autoloop.process.executables import all_words
from autoloop.process.line import Line
from autoloop.process.running import run_captured
from autoloop.base.specs import SandboxSpec
from autoloop.base.walk import inside, remove_tree, temp_dir, under
from autoloop.base.hosts import Rule, parse_entry
from autoloop.isolation.egress import launch as egress_launch
from autoloop.isolation.egress.allowlist import PRESET_HOSTS
from autoloop.isolation.egress.policy import policy
from autoloop.isolation.egress.proxy import PORT as PROXY_PORT, EgressProxy

if TYPE_CHECKING:   # a Ray node imports this module: nothing that reads program.md
    from autoloop.program.reader import Program

# With the network on, the sockets of daemons that would start a process outside the sandbox
# are hidden. /run/systemd holds systemd's private bus, which root's `systemd-run` reaches without
# D-Bus; of it, what resolves host names (resolv.conf's stub, nss-resolve) is shown again.
_DAEMON_DIRS = ("/run/user", "/run/dbus", "/run/containerd", "/run/podman", "/run/docker", "/var/run/dbus",
                "/run/systemd")
_DAEMON_KEEP = ("/run/systemd/resolve",)
_DAEMON_SOCKETS = ("/run/docker.sock", "/var/run/docker.sock", "/run/podman/podman.sock")
_PRIVATE = ("/tmp", "/var/tmp")
_ACCELERATORS = ("dri", "kfd", "accel")     # and /dev/nvidia*: GPUs stay usable in measurements
_PROBE_TIMEOUT_S = 30
GIT_IN_SANDBOX = "/tmp/.autoloop-git"   # where a measurement sees the repository's git folder


class GitLink(NamedTuple):
    folder: Path   # the repository's git folder, shown read-only at GIT_IN_SANDBOX
    link: Path     # a `.git` link file pointing there, shown as the tree's .git


class SandboxUnavailable(Exception):
    """bwrap is missing or cannot make a sandbox here; the message says why and what to do."""


class Bwrap:
    def __init__(self, spec: SandboxSpec, *, executable: str | None = None, path: str | None = None,
                 private: Sequence[Path] = ()) -> None:
        self.spec = spec
        self.exe = executable or shutil.which("bwrap", path=path) or ""   # path: PATH (default ours)
        self.private = tuple(private)   # program.md `private`: hidden from the generator
        self.egress: EgressProxy | None = None   # the run's proxy: the only way out with the network on

    def probe(self) -> None:
        """Raise SandboxUnavailable unless a sandbox like the generator's can be made here."""
        if not sys.platform.startswith("linux"):
            raise SandboxUnavailable("bwrap (bubblewrap) works on Linux only; use sandbox: none")
        if not self.exe:
            raise SandboxUnavailable("bwrap is not installed (not found on PATH); install bubblewrap "
                                     "(Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install "
                                     "bubblewrap) or use sandbox: none")
        try:
            # with the generator's seccomp filter: a kernel without seccomp fails here, not each cycle
            res = run_captured(seccomp.sealed([self.exe, *self._base(self.spec.network), "--", "/bin/sh", "-c", "exit 0"]),
                               timeout=_PROBE_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SandboxUnavailable(f"cannot run {self.exe}: {exc}") from None
        if res.returncode != 0:
            why = (res.stderr.decode(errors="replace").strip().splitlines() or [f"exit {res.returncode}"])[-1]
            raise SandboxUnavailable(
                f"bwrap cannot create a sandbox here ({why[:200]}); unprivileged user namespaces "
                "may be disabled (sysctl kernel.unprivileged_userns_clone=1, or AppArmor's "
                "kernel.apparmor_restrict_unprivileged_userns=0), or the container forbids them; "
                "use sandbox: none to run without one")

    # ---- egress (autoloop.isolation.egress): with the network on, the sandbox's own namespace
    # holds the proxy's listener and nothing else

    def start_egress(self) -> EgressProxy:
        """Start the run's proxy and prove a sandbox gets its listener (SandboxUnavailable if not:
        the run fails closed before its first cycle)."""
        if self.egress is None:
            try:
                self.egress = EgressProxy()
            except OSError as exc:
                raise SandboxUnavailable(f"autoloop's egress proxy cannot start: {exc}") from None
        argv = self._egress_prefix((), "probe", ()) + [self.exe, *self._base(True), "--", "/bin/sh", "-c", "exit 0"]
        try:
            res = run_captured(argv, timeout=_PROBE_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SandboxUnavailable(f"cannot run {self.exe} with the egress proxy: {exc}") from None
        if res.returncode != 0:
            why = (res.stderr.decode(errors="replace").strip().splitlines() or [f"exit {res.returncode}"])[-1]
            raise SandboxUnavailable(f"the sandbox's only way out, autoloop's egress proxy, cannot be made "
                                     f"({why[:300]})")
        return self.egress

    def allowlist(self, hosts: Sequence[Rule] = (), extra: Sequence[str] = ()) -> list[Rule]:
        """The rules a sandbox with the network on gets: `hosts` (an agent preset's API hosts and
        base URLs) and `extra` (sandbox.hosts / verifier.hosts entries)."""
        return [*hosts, *(parse_entry(e) for e in extra)]

    def _egress_prefix(self, rules: Sequence[Rule], label: str, extra: Sequence[str]) -> list[str]:
        if self.egress is None:
            raise SandboxUnavailable("the network is on but autoloop's egress proxy is not running "
                                     "(Bwrap.start_egress)")
        key = "verifier.hosts" if label == "verifier" else "sandbox.hosts"
        token = self.egress.lease(policy(self.allowlist(rules, extra)), label, key)
        return [sys.executable, "-I", "-S", egress_launch.__file__, self.egress.name, token.decode(), str(PROXY_PORT)]

    def _with_egress(self, argv: list[str], rules: Sequence[Rule], label: str, extra: Sequence[str]) -> list[str]:
        """`argv` (bwrap's) started by the egress launcher, the proxy named in the environment."""
        url = f"http://127.0.0.1:{PROXY_PORT}"
        env = [a for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY") for v in (name, name.lower())
               for a in ("--setenv", v, url)]
        # nothing bypasses the proxy: there is nothing else to reach (a loopback API host too)
        env += ["--setenv", "NO_PROXY", "", "--setenv", "no_proxy", ""]
        return [*self._egress_prefix(rules, label, extra), argv[0], *env, *argv[1:]]

    def _base(self, network: bool) -> list[str]:
        args = ["--die-with-parent", "--new-session", "--cap-drop", "ALL",
                "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
                "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-net"]
        args += [a for d in _PRIVATE if os.path.isdir(d) for a in ("--tmpfs", d)]
        if not network:
            return args + (["--tmpfs", "/run"] if os.path.isdir("/run") else [])
        hidden: list[str] = []
        for d in map(os.path.realpath, _DAEMON_DIRS):
            if os.path.isdir(d) and d not in hidden:
                hidden.append(d)
                args += ["--tmpfs", d]
        for sock in map(os.path.realpath, _DAEMON_SOCKETS):
            if os.path.exists(sock) and not any(inside(sock, d) for d in hidden):
                hidden.append(sock)
                args += ["--ro-bind", "/dev/null", sock]
        for keep in map(os.path.realpath, _DAEMON_KEEP):
            if os.path.isdir(keep) and any(inside(keep, d) for d in hidden):
                args += ["--ro-bind", keep, keep]
        return args

    def _sockets(self, network: bool, places: Sequence[tuple[str, bool]]) -> list[tuple[str, bool]]:
        """The host's pathname sockets outside what the sandbox hides anyway (its private folders,
        /run without the network, the daemons' folders with it, the hidden places)."""
        roots = [*_PRIVATE, "/dev/shm", *(["/run"] if not network else _DAEMON_DIRS), *(p for p, d in places if d)]
        return [(sock, False) for sock in host_sockets([os.path.realpath(r) for r in roots])]

    def _readable(self, network: bool, path: str, wanted: Iterable[Path], command: str | Sequence[str],
                  places: Sequence[tuple[str, bool]] = ()) -> list[str]:
        """Read-only binds of what a private /tmp (or /run) or a hidden place would hide but the
        command needs: the Python running autoloop and its venv (CI makes venvs under /tmp), the
        PATH folders (a venv's bin/ with its lib/ beside it), the folders of absolute paths the
        command names. Never a hidden place itself; the hidden places inside one shown are hidden
        again right after it, under what is shown inside them (an agent in ~/.claude/local)."""
        folders = [p for p, folder in places if folder]
        roots = [os.path.realpath(h) for h in (*_PRIVATE, *([] if network else ["/run"]))] + folders
        paths = [Path(sys.prefix), Path(sys.base_prefix), Path(sys.exec_prefix), *wanted,
                 *(Path(d) for d in path.split(os.pathsep) if os.path.isabs(d)), *_named_folders(command)]
        ro: list[str] = []
        for p in [*paths, *(_venv_root(p) or p for p in paths)]:
            real = os.path.realpath(p)
            if (os.path.exists(real) and real not in folders and any(under(real, h) for h in roots)
                    and not any(under(real, r) for r in ro)):
                ro.append(real)
        args: list[str] = []
        for real in sorted(ro, key=len):
            inside = [(p, d) for p, d in places if p != real and under(p, real)]
            args += ["--ro-bind", real, real, *hide_args(outermost(inside))]
        return args

    def argv(self, command: str | Sequence[str], *, workdir: Path, writable: Sequence[Path] = (),
             readable: Sequence[Path] = (), network: bool | None = None, hosts: Sequence[Rule] = (),
             label: str = "", unseen: Sequence[Path] = ()) -> list[str]:
        """The generator's `command` (a shell string or an argv) in the sandbox, cwd `workdir`.
        `network` overrides `sandbox.network` (an agent preset's default when the key is unset);
        with it on, the proxy allows `hosts` and sandbox.hosts, refusals counted under `label`.
        `unseen`: folders shown empty, but for what `writable` binds again inside them."""
        net = self.spec.network if network is None else network
        places = hidden_places(self.spec.hide)
        # no unix socket can be made (autoloop.isolation.seccomp); without the filter (a machine
        # it does not know, or sandbox.unix_sockets), at least the host's sockets bound now are hidden
        sealed = seccomp.supported() and not self.spec.unix_sockets
        sockets = [] if sealed else self._sockets(net, places)
        args = [self.exe, *self._base(net), *hide_args(outermost(places)), *hide_args(sockets),
                *self._readable(net, os.environ.get("PATH", ""), readable, command, places)]
        extra = [os.path.expanduser(w) for w in self.spec.writable]
        rw = dict.fromkeys(os.path.realpath(p) for p in [workdir, *writable, *(w for w in extra if os.path.exists(w))])
        args += hide_args((real, True) for real in map(os.path.realpath, unseen) if os.path.isdir(real))
        args += [a for real in rw for a in ("--bind", real, real)]
        args += hide(self.private)
        args += ["--chdir", os.path.realpath(workdir), "--setenv", "TMPDIR", "/tmp",
                 "--setenv", "TMP", "/tmp", "--setenv", "TEMP", "/tmp", "--"]
        args = [*args, "/bin/sh", "-c", command] if isinstance(command, str) else [*args, *command]
        # the launcher starts bwrap, which inherits the filter's descriptor opened before both
        args = self._with_egress(args, hosts, label, self.spec.hosts) if net else args
        return seccomp.sealed(args) if sealed else args

    def measurement_argv(self, command: str, *, box: Confinement) -> list[str]:
        """`command` (a shell string) run as a measurement: see Confinement."""
        args = [self.exe, *self._base(box.network)]
        if box.reap:
            args.remove("--die-with-parent")
        for name in _devices():
            args += ["--dev-bind", f"/dev/{name}", f"/dev/{name}"]
        places = hidden_places(self.spec.hide)
        # Measured code may make unix sockets (multiprocessing's Manager and forkserver, torch's
        # DataLoader passing descriptors): no filter, but every socket of the host bound by now
        # is hidden; its own sockets live in its private /tmp and scratch.
        args += ["--tmpfs", "/dev/shm", *hide_args(outermost(places)), *hide_args(self._sockets(box.network, places)),
                 *self._readable(box.network, box.path, box.readable, command, places)]
        if box.git is not None:
            args += ["--ro-bind", str(box.git.folder), GIT_IN_SANDBOX]
        tree = where = os.path.realpath(box.tree)
        bind = "--bind" if box.tree_writable else "--ro-bind"
        args += [bind, tree, tree]
        if box.checkout is not None and os.path.realpath(box.checkout) != tree:
            # The candidate at your checkout's path too: an editable install's finder or .pth,
            # pytest's rootdir, a tool that found the project by absolute path now resolve to it.
            where = os.path.realpath(box.checkout)
            args += [bind, tree, where]
            args += [a for real in map(os.path.realpath, box.keep) if os.path.exists(real) for a in ("--ro-bind", real, real)]
        for p in box.writable:
            real = os.path.realpath(os.path.expanduser(str(p)))
            if os.path.exists(real):
                args += ["--bind", real, real]
        at = dict.fromkeys([tree, where])
        for rel in box.protect:
            src = os.path.join(tree, rel)
            if os.path.lexists(src) and not os.path.islink(src):
                args += [a for t in at for a in ("--ro-bind", src, os.path.join(t, rel))]
        if box.git is not None:
            args += [a for t in at for a in ("--ro-bind", str(box.git.link), os.path.join(t, ".git"))]
        # last, so that no writable or readable bind above can undo them
        args += [a for real in map(os.path.realpath, box.read_only) for a in ("--ro-bind", real, real)]
        if box.show_private:
            args += [a for real in map(os.path.realpath, box.private) for a in ("--ro-bind", real, real)]
        else:
            args += hide(box.private)
        args += ["--chdir", where, "--", "/bin/sh", "-c", command]
        return self._with_egress(args, (), box.label, box.hosts) if box.network else args


@dataclass(frozen=True)
class Confinement:
    """One measurement's sandbox: everything read-only but `tree` (the verification tree) and
    `writable` (its scratch, `sandbox.writable`); the tree also appears at `checkout`, where the
    command runs, with `keep` (venvs and data inside your checkout) read-only on top."""
    bwrap: Bwrap
    tree: Path
    checkout: Path | None
    writable: tuple[Path, ...] = ()
    readable: tuple[Path, ...] = ()
    keep: tuple[Path, ...] = ()
    protect: tuple[str, ...] = ()          # in the tree, not writable (its .git link, a journal)
    git: GitLink | None = None
    network: bool = False
    hosts: tuple[str, ...] = ()    # verifier.hosts: what the proxy allows with the network on
    label: str = "verifier"        # its refusals are counted under this
    path: str = ""             # the command's PATH: its folders stay readable behind a private /tmp
    # verifier.measure: cpu. The namespace's init outlives the command's first process while
    # others run, reaping each (their CPU reaches autoloop through it; proc kills them, not the
    # kernel, which reaps a dying namespace without a tally). A killed autoloop's measurement
    # then lives on until the marker sweep finds it.
    reap: bool = False
    tree_writable: bool = True             # False: the score's tree of the start commit
    read_only: tuple[Path, ...] = ()       # bound read-only over everything (the score's $AUTOLOOP_OUTPUT)
    private: tuple[Path, ...] = ()         # program.md `private`: hidden unless `show_private`
    show_private: bool = False             # the score and the holdout read them

    def argv(self, command: str | list[str]) -> list[str]:
        return self.bwrap.measurement_argv(command if isinstance(command, str) else shlex.join(command), box=self)

    def line(self, command: str | list[str]) -> Line:
        return status_line(self.argv(command))


class Sandboxed:
    """A generator's sandbox line (Guardrails.wrap, with what an agent adds) as a proc.Wrap."""

    def __init__(self, wrap: Callable[[str | list[str]], list[str]]) -> None:
        self.wrap = wrap

    def line(self, command: str | list[str]) -> Line:
        return status_line(self.wrap(command))


def status_line(argv: list[str]) -> Line:
    """bwrap's `argv` with a status descriptor (`--json-status-fd`): bwrap writes the command's
    exit code there only once it has set the sandbox up and started the command, so a run whose
    status has none failed in bwrap's set-up, before the command (seen: a host socket it hid,
    gone before its mount point was made). The command cannot write there (bwrap closes it in
    the sandbox) and cannot take back what bwrap writes: whether it ran is bwrap's word, not its
    own output's. Where bwrap has no such option, every run counts as started."""
    at = argv.index("--new-session") if "--new-session" in argv else -1   # one of bwrap's own options
    fd = _status_fd(next((a for a in argv if os.path.basename(a) == "bwrap"), "bwrap")) if at >= 0 else None
    if fd is None:
        return Line(argv, (), lambda: True, lambda: None)
    return Line([*argv[:at], "--json-status-fd", str(fd), *argv[at:]], (fd,),
                lambda: b'"exit-code"' in os.pread(fd, 1 << 16, 0), lambda: os.close(fd))


_STATUS_FD: dict[str, bool] = {}


def _status_fd(exe: str) -> int | None:
    """A fresh memfd for this bwrap's --json-status-fd, above the descriptors the launchers name
    (the filter's 3); None where bwrap has no such option (before 0.4, asked once) or the kernel
    or a container refuses memfd_create: no restarts, as before."""
    if exe not in _STATUS_FD:
        try:
            said = run_captured([exe, "--help"], timeout=10)
            _STATUS_FD[exe] = b"--json-status-fd" in said.stdout + said.stderr
        except (OSError, subprocess.SubprocessError):
            _STATUS_FD[exe] = False
    if not _STATUS_FD[exe]:
        return None
    try:
        made = os.memfd_create("autoloop-bwrap-status", os.MFD_CLOEXEC)
    except OSError:
        return None
    fd = fcntl.fcntl(made, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(made)
    return fd


def hide(paths: Sequence[Path]) -> list[str]:
    """bwrap arguments that make each path unreadable: a folder becomes an empty one nobody may
    enter, a file one nobody may read (no capability in the sandbox overrides the mode)."""
    args: list[str] = []
    for real in map(os.path.realpath, paths):
        if os.path.isdir(real):
            args += ["--perms", "0000", "--tmpfs", real]
        elif os.path.lexists(real):
            args += ["--ro-bind", _unreadable_file(), real]
    return args


_UNREADABLE: list[str] = []


def _unreadable_file() -> str:
    """An empty file of mode 000, made once per process and removed at its exit (in a temp_dir:
    `autoloop clean` finds it when the process was killed first)."""
    if not _UNREADABLE:
        folder = temp_dir("hidden")
        name = folder / "unreadable"
        name.touch()
        os.chmod(name, 0)
        atexit.register(remove_tree, folder, quiet=True)
        _UNREADABLE.append(str(name))
    return _UNREADABLE[0]


def git_link(tree: Path, scratch: Path, common_dir: Path) -> GitLink | None:
    """The candidate bound over your checkout hides the repository's .git there, so git in a
    measurement finds it at GIT_IN_SANDBOX. None when the tree's .git is no link into `common_dir`."""
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
    return GitLink(Path(os.path.realpath(common_dir)), link)


def probed(program: Program) -> tuple[Bwrap | None, str | None]:
    """The sandbox program.md asks for, probed: (bwrap, None), or (None, why there is none) for
    `auto` and `none`; ConfigError (exit 2) when `sandbox: bwrap` cannot be made."""
    if program.sandbox.kind == "none":
        return None, "sandbox: none in program.md"
    box = Bwrap(program.sandbox, private=program.private)
    try:
        box.probe()
    except SandboxUnavailable as exc:
        if program.sandbox.kind == "bwrap":
            where = f"{program.path.name}:{program.lines.get('sandbox', 1)}"
            raise ConfigError(f"{where}: sandbox: {exc}") from None
        if program.private:
            # without a sandbox every process could read them: refused, not said (and
            # `sandbox: none`, the probe's usual way out, is refused with private too)
            why = re.sub(r"[;,]? *(or )?use sandbox: none( to run without one)?", "", str(exc))
            raise ConfigError(f"{program.path.name}:{program.line('private')}: private: needs a sandbox to keep "
                              f"these paths from the generator and the candidate's code, and none can be "
                              f"made here ({why}); make bubblewrap work, or remove private") from None
        return None, str(exc)
    if needs_network(program):
        try:
            box.start_egress()
        except SandboxUnavailable as exc:   # fail closed: no network rather than all of it
            key = "verifier.network" if program.verifier.network else "sandbox"
            raise ConfigError(f"{program.path.name}:{program.line(key)}: {key}: {exc}; sandbox: none "
                              "runs without a sandbox") from None
    return box, None


def needs_network(program: Program) -> bool:
    """Could a sandbox of this run have the network on (and so need the egress proxy)?"""
    preset = program.generator.kind in PRESET_HOSTS and "sandbox.network" not in program.lines
    return program.sandbox.network or program.verifier.network or preset


def tree_box(bwrap: Bwrap, program: Program, tree: Path, common_dir: Path, scratch: Path,
             path: str | None = None, keep: tuple[Path, ...] | None = None, *,
             show_private: bool = False) -> Confinement:
    """A measurement of `tree` (a private worktree: a run's, `verify`'s, `gate`'s) writing only
    the tree and `scratch`; `keep` defaults to checkout_keep(program). `private` stays hidden
    unless `show_private` (the holdout)."""
    scratch.mkdir(parents=True, exist_ok=True)
    git = git_link(tree, scratch, common_dir)
    root = program.repo_root
    readable = [d.source for d in program.data if not inside(d.source, root)]
    if git is None or not inside(common_dir, root):
        readable.append(common_dir)
    writable = [scratch, *(Path(os.path.expanduser(w)) for w in program.sandbox.writable)]
    return Confinement(bwrap, tree=tree, checkout=root, writable=tuple(writable), readable=tuple(readable),
                       keep=checkout_keep(program) if keep is None else keep, git=git,
                       protect=() if git else (".git",), network=program.verifier.network,
                       hosts=program.verifier.hosts,
                       reap=program.verifier.measure == "cpu",
                       path=os.environ.get("PATH", "") if path is None else path,
                       private=program.private, show_private=show_private)


def checkout_keep(program: Program) -> tuple[Path, ...]:
    """What stays visible read-only at your checkout's path in a measurement: virtual
    environments at its top (`.venv/bin/python -m pytest`) and data kept inside it."""
    root = program.repo_root
    try:
        venvs = sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink() and (p / "pyvenv.cfg").is_file())
    except OSError:
        venvs = []
    return (*venvs, *(d.source for d in program.data if inside(d.source, root)))


def make_mount_points(program: Program, tree: Path) -> None:
    """Empty stand-ins in `tree` for what `checkout_keep` binds there that git does not hold (a
    gitignored `.venv`): bwrap makes a missing mount point itself, but not in a tree it binds
    read-only (the score's), where the measurement then failed before it began."""
    root = program.repo_root
    for keep in checkout_keep(program):
        try:
            spot = tree / keep.relative_to(root)
        except ValueError:
            continue
        if os.path.lexists(spot):
            continue
        if keep.is_dir():
            spot.mkdir(parents=True, exist_ok=True)
        else:
            spot.parent.mkdir(parents=True, exist_ok=True)
            spot.touch()


def _devices() -> list[str]:
    return sorted(n for n in os.listdir("/dev") if n.startswith("nvidia") or n in _ACCELERATORS)


def _venv_root(p: Path) -> Path | None:
    # os.path.isfile: a PATH folder this user may not enter is no venv (not a PermissionError)
    return next((d for d in (p, p.parent, p.parent.parent) if os.path.isfile(d / "pyvenv.cfg")), None)


def _named_folders(command: str | Sequence[str]) -> list[Path]:
    """The folders of absolute paths the command names (`python /tmp/x/gen.py`, `--opt=/tmp/x`,
    in `sh -c '…'`): a script under /tmp stays readable, with its neighbours, behind our /tmp."""
    words = all_words(command) if isinstance(command, str) else list(command)
    return [Path(w) if os.path.isdir(w) else Path(w).parent for w in words if os.path.isabs(w) and os.path.exists(w)]
