"""The one way autoloop runs git: every call goes through `git()` here, with hooks and
config-defined commands switched off and one environment (`git_env`), so nothing a generator
plants in `.git` or the environment can run through us."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Iterable

from autoloop.errors import RunFailure
from autoloop.proc import run_captured

# Settings that would let a repository (or a generator that wrote to it) run code or change
# bytes during our own git calls. Filters from .gitattributes still apply, but only with drivers
# defined in config, which the integrity check guards.
SAFE_CONFIG = (
    "core.hooksPath=/dev/null", "core.fsmonitor=false", "core.untrackedCache=false", "core.splitIndex=false",
    "core.sparseCheckout=false", "core.autocrlf=false", "core.safecrlf=false", "core.symlinks=true",
    # git's "is this file unchanged?" shortcut compares stat data (times in whole seconds); a
    # user's config must not weaken it further, or update-index would take a changed file for
    # an unchanged one
    "core.trustctime=true", "core.checkStat=default", "core.ignoreStat=false",
    "core.pager=cat", "commit.gpgSign=false", "gc.auto=0", "maintenance.auto=false",
    "submodule.recurse=false", "advice.detachedHead=false", "diff.external=", "credential.helper=",
)
_CONFIG_CHOICE = ("GIT_CONFIG_GLOBAL", "GIT_CONFIG_NOSYSTEM", "GIT_CONFIG_SYSTEM")


class GitError(RunFailure):
    pass


# Set for the length of a run by autoloop.gitconfig.freeze_outer_config: git then reads a
# private copy of your global and system config as they were when the run started.
_frozen: dict[str, str] = {}
_executable: str | None = None


def set_frozen_config(env: dict[str, str]) -> None:
    _frozen.clear()
    _frozen.update(env)


def git_env() -> dict[str, str]:
    """Our git calls' environment: no GIT_* from outside but the choice of config files."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") or k in _CONFIG_CHOICE}
    # replace refs (refs/replace/*) would let anyone who can write a ref swap the incumbent's
    # tree for another one inside our own reads: git's object graph is taken as it is stored
    env.update(GIT_TERMINAL_PROMPT="0", GIT_OPTIONAL_LOCKS="0", LC_ALL="C", GIT_NO_REPLACE_OBJECTS="1")
    env.update(_frozen)
    return env


def git_executable() -> str:
    """git, resolved once on the PATH autoloop started with: a `git` a generator later puts in
    a folder earlier on PATH (~/.local/bin) is never the one autoloop runs."""
    global _executable
    if _executable is None:
        _executable = shutil.which("git") or "git"
    return _executable


def run(cwd: Path, *args: str, input: bytes | None = None,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    """git `args` with the safe settings, whatever its exit status. Shielded (autoloop.proc): a
    Ctrl-C meant for autoloop never kills git half-way through a checkout, and it is registered
    so that a parallel round never takes it for a leftover."""
    cmd = [git_executable()]
    for item in SAFE_CONFIG:
        cmd += ["-c", item]
    return run_captured(cmd + list(args), cwd=cwd, input=input, env=env or git_env(), shielded=True)


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


def nul_list(paths: Iterable[str]) -> bytes:
    """`paths` for git's `-z --stdin`."""
    return b"".join(p.encode("utf-8", "surrogateescape") + b"\0" for p in paths)


class Later:
    """A read-only git command running in the background (a thread waiting on `git()`, so the
    child is started, shielded and registered like every git of ours); calling it waits for its
    output, or raises what `git()` raised."""

    def __init__(self, cwd: Path, args: list[str]) -> None:
        self._out = ""
        self._exc: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(cwd, args), daemon=True)
        self._thread.start()

    def _run(self, cwd: Path, args: list[str]) -> None:
        try:
            self._out = git(cwd, *args)
        except BaseException as exc:  # handed to the caller
            self._exc = exc

    def __call__(self) -> str:
        self._thread.join()
        if self._exc is not None:
            raise self._exc
        return self._out.strip()
