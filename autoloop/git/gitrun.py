"""The one way autoloop runs git: hooks and config-defined commands off, one environment
(`git_env`), so nothing a generator plants in `.git` or the environment runs through us. During
a run git reads a frozen copy of your global and system config: a filter or attributes file
planted there (or in a file they include) never runs inside our calls; LFS and the filters you
had keep working."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
from concurrent.futures import Future
from functools import cache
from pathlib import Path
from typing import Callable, Iterable

from autoloop.errors import RunFailure
from autoloop.process.logfile import fresh_log, read_regular
from autoloop.process.running import run_captured

# Settings that would let a repository run code or change bytes during our own git calls
# (filters from .gitattributes still apply, with drivers only from config, which is guarded).
SAFE_CONFIG = (
    "core.hooksPath=/dev/null", "core.fsmonitor=false", "core.untrackedCache=false", "core.splitIndex=false",
    "core.sparseCheckout=false", "core.autocrlf=false", "core.safecrlf=false", "core.symlinks=true",
    # git's "is this file unchanged?" shortcut compares stat data: a user's config must not
    # weaken it further, or update-index would take a changed file for an unchanged one
    "core.trustctime=true", "core.checkStat=default", "core.ignoreStat=false",
    "core.pager=cat", "commit.gpgSign=false", "gc.auto=0", "maintenance.auto=false",
    "submodule.recurse=false", "advice.detachedHead=false", "diff.external=", "credential.helper=",
)
_SAFE_ARGS = [arg for item in SAFE_CONFIG for arg in ("-c", item)]
_CONFIG_CHOICE = ("GIT_CONFIG_GLOBAL", "GIT_CONFIG_NOSYSTEM", "GIT_CONFIG_SYSTEM")


class GitError(RunFailure):
    pass


_frozen: dict[str, str] = {}   # set by freeze_outer_config for the length of a run


def git_env() -> dict[str, str]:
    """Our git calls' environment: no GIT_* from outside but the choice of config files."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") or k in _CONFIG_CHOICE}
    # replace refs would let anyone who can write a ref swap the incumbent's tree in our reads
    env.update(GIT_TERMINAL_PROMPT="0", GIT_OPTIONAL_LOCKS="0", LC_ALL="C", GIT_NO_REPLACE_OBJECTS="1")
    env.update(_frozen)
    return env


@cache
def git_executable() -> str:
    """git, resolved once on the PATH autoloop started with: a `git` a generator later puts in
    a folder earlier on PATH (~/.local/bin) is never the one autoloop runs."""
    return shutil.which("git") or "git"


def run(cwd: Path, *args: str, input: bytes | None = None,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    """git `args` with the safe settings, whatever its exit status. Shielded: a Ctrl-C never
    kills git half-way through a checkout (autoloop.process.running)."""
    cmd = [git_executable(), *_SAFE_ARGS, *args]
    return run_captured(cmd, cwd=cwd, input=input, env=env or git_env(), shielded=True)


def git_bytes(cwd: Path, *args: str, input: bytes | None = None, env: dict[str, str] | None = None) -> bytes:
    """git's standard output; GitError (naming the command and git's last line) on failure."""
    proc = run(cwd, *args, input=input, env=env)
    if proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip().splitlines()
        raise GitError(f"git {' '.join(args[:3])} failed: {err[-1] if err else proc.returncode}")
    return proc.stdout


def git(cwd: Path, *args: str, input: bytes | None = None, check: bool = True,
        env: dict[str, str] | None = None) -> str:
    if check:
        out = git_bytes(cwd, *args, input=input, env=env)
    else:
        out = run(cwd, *args, input=input, env=env).stdout
    return out.decode(errors="surrogateescape")


def head_has(cwd: Path, rel: str) -> bool | None:
    """Whether HEAD has the file `rel` (None: there is no HEAD to ask, or no repository)."""
    if run(cwd, "cat-file", "-e", f"HEAD:{rel}").returncode == 0:
        return True
    return False if run(cwd, "rev-parse", "-q", "--verify", "HEAD^{commit}").returncode == 0 else None


def nul_list(paths: Iterable[str]) -> bytes:
    """`paths` for git's `-z --stdin`."""
    return b"".join(p.encode("utf-8", "surrogateescape") + b"\0" for p in paths)


def later(cwd: Path, *args: str) -> Callable[[], str]:
    """A read-only `git()` started now in a thread; calling the result waits for its output."""
    done: Future[str] = Future()

    def work() -> None:
        try:
            done.set_result(git(cwd, *args).strip())
        except BaseException as exc:  # handed to the caller
            done.set_exception(exc)

    threading.Thread(target=work, daemon=True).start()
    return done.result


_ATTRIBUTES_MAX = 4 << 20


def outer_git_config() -> dict[Path, str]:
    """The global and system git config files (and the global attributes file) git would read."""
    home = Path.home()
    xdg = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config") / "git"
    out: dict[Path, str] = {}
    if os.environ.get("GIT_CONFIG_GLOBAL"):
        out[Path(os.environ["GIT_CONFIG_GLOBAL"])] = "your global git config"
    else:
        out[home / ".gitconfig"] = "your global git config"
        out[xdg / "config"] = "your global git config"
    out[xdg / "attributes"] = "your global git attributes"
    if os.environ.get("GIT_CONFIG_SYSTEM"):
        out[Path(os.environ["GIT_CONFIG_SYSTEM"])] = "the system git config"
    elif not os.environ.get("GIT_CONFIG_NOSYSTEM"):
        out[Path("/etc/gitconfig")] = "the system git config"
    return {p: label for p, label in out.items() if str(p) not in ("/dev/null", "")}


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t") + '"'


def _outer_entries(repo_root: Path) -> list[tuple[str, str, str | None]]:
    """(origin file, key, value or None for a bare boolean) of the system and global config in
    git's order, includes resolved as they apply to this repository."""
    out: list[tuple[str, str, str | None]] = []
    scopes = ["--global"] if git_env().get("GIT_CONFIG_NOSYSTEM") else ["--system", "--global"]
    for scope in scopes:
        proc = run(repo_root, "config", scope, "--includes", "--show-origin", "--list", "-z")
        if proc.returncode != 0:
            continue   # no such file: nothing to freeze
        items = proc.stdout.decode("utf-8", "surrogateescape").split("\0")
        for origin, entry in zip(items[0::2], items[1::2]):
            key, sep, value = entry.partition("\n")
            out.append((origin.removeprefix("file:"), key, value if sep else None))
    return out


_USERINFO = re.compile(r"^[a-z][a-z0-9+.-]*://[^/@]+@", re.I)


def _secret(section: str, sub: str, name: str, value: str | None) -> bool:
    """A config entry that carries a credential: credential helpers and their settings, HTTP
    headers (`http.<url>.extraHeader`: a token), and a URL with a user and password in it (as a
    `url.<base>.insteadOf` rewrite or its value)."""
    section, name = section.lower(), name.lower()
    if section == "credential" or (section == "http" and name == "extraheader"):
        return True
    return section == "url" and (bool(_USERINFO.match(sub)) or bool(value and _USERINFO.match(value)))


def freeze_outer_config(repo_root: Path, dest: Path) -> dict[Path, str]:
    """Copy the system and global git config as they are now (includes resolved, with the
    global attributes file) into `dest`, and point our later git calls at it. Returns the files
    the copy came from, for the integrity check."""
    thaw_outer_config()
    sources: dict[Path, str] = {}
    lines: list[str] = []
    attributes: str | None = None
    for origin, key, value in _outer_entries(repo_root):
        if origin and origin not in ("-", "command line:"):
            sources.setdefault(Path(origin), "a file your git config includes")
        section, _, rest = key.partition(".")
        sub, _, name = rest.rpartition(".")
        if _secret(section, sub, name, value):
            continue   # our git calls never reach a remote: a credential has no business in the copy
        if section.lower() == "core" and not sub and name.lower() == "attributesfile" and value is not None:
            attributes = value
            continue
        lines.append(f"[{section} {_quote(sub)}]" if sub else f"[{section}]")
        lines.append(f"\t{name}" if value is None else f"\t{name} = {_quote(value)}")
    if attributes is None:
        xdg = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
        attributes = os.path.join(xdg, "git", "attributes")
    attr_src = Path(os.path.expanduser(attributes))
    if not attr_src.is_absolute():
        attr_src = repo_root / attr_src
    dest.mkdir(parents=True, exist_ok=True)
    sources.setdefault(attr_src, "your global git attributes")
    # an attributes file that did not exist when the run started stays empty for our calls
    with fresh_log(dest / "attributes") as f:
        f.write(read_regular(attr_src, _ATTRIBUTES_MAX))
    lines += ["[core]", f"\tattributesFile = {_quote(str(dest / 'attributes'))}"]
    with fresh_log(dest / "config") as f:
        f.write(("\n".join(lines) + "\n").encode("utf-8", "surrogateescape"))
    _frozen.update(GIT_CONFIG_GLOBAL=str(dest / "config"), GIT_CONFIG_NOSYSTEM="1")
    sources[dest] = "autoloop's copy of your git config"
    return sources


def thaw_outer_config() -> None:
    _frozen.clear()
