"""The environments commands run in.

Guards and the verifier get a *scrubbed* copy of autoloop's own environment: nothing that makes
an interpreter, a shell or the dynamic loader run or import code from somewhere other than the
verification tree, plus fresh, empty scratch folders for this one measurement:

- every `PYTHON*` variable except a few harmless ones (PYTHONPATH, PYTHONSTARTUP, PYTHONHOME,
  PYTHONUSERBASE, PYTHONINSPECT, PYTHONBREAKPOINT, PYTHONEXECUTABLE, PYTHONPLATLIBDIR, ...);
- PYTEST_ADDOPTS / PYTEST_PLUGINS, COVERAGE_PROCESS_START (coverage's .pth hook);
- the dynamic loader's LD_* (LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT, ...) and macOS's DYLD_*;
- shell start-up and tracing hooks: BASH_ENV, ENV, SHELLOPTS, BASHOPTS, PS4, PROMPT_COMMAND,
  CDPATH, GLOBIGNORE, exported bash functions (BASH_FUNC_*);
- other runtimes' code-injection switches: NODE_OPTIONS, NODE_PATH, RUBYOPT, RUBYLIB, PERL5OPT,
  PERL5LIB, PERLLIB, JAVA_TOOL_OPTIONS, _JAVA_OPTIONS, JDK_JAVA_OPTIONS, R_PROFILE(_USER),
  R_ENVIRON(_USER), JULIA_LOAD_PATH, LUA_INIT*, OPENSSL_CONF / OPENSSL_ENGINES, GCONV_PATH;
- git's GIT_* (a verifier that runs git must see the verification tree's repository);
- PATH entries that are relative (`.`, empty, `bin`) — they would resolve inside the tree being
  measured — or that lie inside the generator's work tree.

Then: PYTHONNOUSERSITE=1 (no user site-packages: no usercustomize.py, no user .pth files),
PYTHONPYCACHEPREFIX=<fresh folder> (bytecode is read and written only there, so a planted
`__pycache__/*.pyc` — even an unchecked-hash one, which Python trusts over its source — is never
read), and TMPDIR/TMP/TEMP=<fresh folder>.

Everything else passes through (HOME, CUDA_VISIBLE_DEVICES, HF_HOME, VIRTUAL_ENV, ...): the
verifier is the user's, and needs the user's setup.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Mapping, Sequence

# PYTHON* variables that only change how output looks or how errors are reported
_PYTHON_KEEP = frozenset({
    "PYTHONUNBUFFERED", "PYTHONIOENCODING", "PYTHONUTF8", "PYTHONHASHSEED", "PYTHONFAULTHANDLER",
    "PYTHONWARNINGS", "PYTHONDONTWRITEBYTECODE", "PYTHONLEGACYWINDOWSSTDIO", "PYTHONCOERCECLOCALE",
    "PYTHONDEVMODE", "PYTHONNODEBUGRANGES", "PYTHONINTMAXSTRDIGITS", "PYTHONTRACEMALLOC",
})

_DROP_EXACT = frozenset({
    "PYTEST_ADDOPTS", "PYTEST_PLUGINS", "COVERAGE_PROCESS_START",
    "BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "PROMPT_COMMAND", "CDPATH", "GLOBIGNORE",
    "NODE_OPTIONS", "NODE_PATH", "RUBYOPT", "RUBYLIB", "PERL5OPT", "PERL5LIB", "PERLLIB",
    "PERL5DB", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "R_PROFILE",
    "R_PROFILE_USER", "R_ENVIRON", "R_ENVIRON_USER", "JULIA_LOAD_PATH", "OPENSSL_CONF",
    "OPENSSL_ENGINES", "GCONV_PATH", "TMPDIR", "TMP", "TEMP", "TEMPDIR",
})
_DROP_PREFIX = ("LD_", "DYLD_", "BASH_FUNC_", "GIT_", "LUA_INIT", "AUTOLOOP_")

# Handles on daemons that start processes on request (a terminal multiplexer, the session bus
# and the systemd user manager behind it, a terminal's remote control): what they start is
# their child, not ours, so it outlives every process check. Neither the generator nor a
# measurement gets them.
_DAEMONS = frozenset({
    "TMUX", "TMUX_PANE", "TMUX_TMPDIR", "STY", "SCREENDIR", "ZELLIJ", "ZELLIJ_SESSION_NAME",
    "ZELLIJ_PANE_ID", "DBUS_SESSION_BUS_ADDRESS", "DBUS_STARTER_ADDRESS", "DBUS_STARTER_BUS_TYPE",
    "KITTY_LISTEN_ON", "KITTY_WINDOW_ID", "WEZTERM_UNIX_SOCKET", "WEZTERM_PANE", "NVIM",
    "NVIM_LISTEN_ADDRESS", "VSCODE_IPC_HOOK_CLI", "VSCODE_GIT_IPC_HANDLE", "SWAYSOCK", "I3SOCK",
    "HYPRLAND_INSTANCE_SIGNATURE",
})


def no_daemons(env: Mapping[str, str]) -> dict[str, str]:
    """`env` without the handles on process-starting daemons (_DAEMONS)."""
    return {k: v for k, v in env.items() if k not in _DAEMONS}

# Kept although their prefix is dropped: what a child may learn about the run, and git's
# choice of config files (they name no repository).
_OWN = ("AUTOLOOP_CYCLE", "AUTOLOOP_TAG", "AUTOLOOP_WORKER", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_NOSYSTEM")


def unsafe(name: str) -> bool:
    """Would this variable let something outside the measured tree run code in a guard or the
    verifier?"""
    if name.startswith("PYTHON"):
        return name not in _PYTHON_KEEP
    return name in _DROP_EXACT or name in _DAEMONS or name.startswith(_DROP_PREFIX)


def clean_path(value: str, inside: Sequence[Path] = ()) -> str:
    """PATH without relative or empty entries and without entries under any of `inside`."""
    roots = [os.path.realpath(p) for p in inside]
    keep = []
    for entry in value.split(os.pathsep):
        if not entry or not os.path.isabs(entry):
            continue
        real = os.path.realpath(entry)
        if any(real == r or real.startswith(r.rstrip("/") + "/") for r in roots):
            continue
        if entry not in keep:
            keep.append(entry)
    return os.pathsep.join(keep) or os.defpath


def scrubbed(base: Mapping[str, str], *, scratch: Path, untrusted: Sequence[Path] = ()) -> dict[str, str]:
    """The environment for one measurement; `scratch` is an empty folder of its own."""
    env = {k: v for k, v in base.items() if not unsafe(k) or k in _OWN}
    env["PATH"] = clean_path(base.get("PATH", os.defpath), untrusted)
    tmp = scratch / "tmp"
    pycache = scratch / "pycache"
    tmp.mkdir(parents=True, exist_ok=True)
    pycache.mkdir(parents=True, exist_ok=True)
    env.update(PYTHONNOUSERSITE="1", PYTHONPYCACHEPREFIX=str(pycache),
               TMPDIR=str(tmp), TMP=str(tmp), TEMP=str(tmp), TEMPDIR=str(tmp))
    return env


@contextmanager
def measurement_env(base: Mapping[str, str], *, parent: Path, untrusted: Sequence[Path] = (),
                    warm: Path | None = None) -> Iterator[dict[str, str]]:
    """A scrubbed environment with fresh scratch folders under `parent`, removed afterwards.
    `warm` (a bytecode prefix) is copied into the fresh one: a copy, so nothing a measurement
    does reaches the next one through it."""
    parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="measure-", dir=parent))
    try:
        env = scrubbed(base, scratch=scratch, untrusted=untrusted)
        if warm is not None and warm.is_dir():
            shutil.copytree(warm, env["PYTHONPYCACHEPREFIX"], dirs_exist_ok=True, symlinks=True,
                            copy_function=shutil.copyfile)
        yield env
    finally:
        _remove_soon(scratch)


GIT_LOCATION = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR",
                 "GIT_OBJECT_DIRECTORY", "GIT_ALTERNATE_OBJECT_DIRECTORIES")


def generator_env(base: Mapping[str, str]) -> dict[str, str]:
    """The generator's environment: the caller's, minus the variables that would point its git
    commands at another repository, and no bytecode written into the tree it edits (an agent
    running the code it edits would otherwise leave __pycache__ behind, which is never kept)."""
    env = {k: v for k, v in no_daemons(base).items() if k not in GIT_LOCATION}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _remove_soon(path: Path) -> None:
    """Rename `path` out of the way at once and delete it in the background (a measurement's
    scratch holds thousands of files after a big import; nobody needs to wait for them)."""
    trash = path.with_name(f".trash-{path.name}")
    try:
        os.rename(path, trash)
    except OSError:
        _remove(path)
        return
    threading.Thread(target=_remove, args=(trash,), daemon=True).start()


def _remove(path: Path) -> None:
    def onerror(func, p, _exc):  # type: ignore[no-untyped-def]
        try:
            os.chmod(os.path.dirname(p), 0o700)
            if not os.path.islink(p):
                os.chmod(p, 0o700)
            func(p)
        except OSError:
            pass

    shutil.rmtree(path, onerror=onerror)

