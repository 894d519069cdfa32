"""What an installed program needs to start, so a sandbox hiding /tmp (or any folder) can bind
it read-only: npm's `node_modules/.bin/claude` is a symlink into the package folder, a venv's
`bin/aider` needs the venv's `lib/…/site-packages` and the interpreter its `#!` line names, and
`#!/usr/bin/env node` needs whichever `node` PATH finds. And what a command line names and
starts (the standard library only: a Ray node imports this through autoloop.isolation.sandbox)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
from pathlib import Path

_SHEBANG_LIMIT = 512
_MAX_DEPTH = 4   # an interpreter's own `#!` line, and so on; real chains are 1–2 deep
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "busybox"})
_SHELL_C = re.compile(r"-[a-zA-Z]*c[a-zA-Z]*")   # -c, -lc, -ec, -exc ...
_OPERATOR = frozenset(";|&()<>")
_ASSIGN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*")
_LAUNCHERS = frozenset({"env", "exec", "uv", "run"})   # they start the word after them


def needed_paths(executable: str | Path, path_env: str | None = None) -> list[Path]:
    """Existing paths `executable` needs: itself, its folder, its real path, its installation
    root, and the same for the interpreter its `#!` line names (found on `path_env` like `env`)."""
    out: dict[str, None] = {}
    exe: Path | None = Path(executable)
    for _ in range(_MAX_DEPTH + 1):
        if exe is None:
            break
        real = Path(os.path.realpath(exe))
        root = installation_root(real) if real.exists() else None
        out.update(dict.fromkeys(str(p) for p in (exe, exe.parent, real, root) if p is not None and p.exists()))
        exe = shebang_interpreter(real, path_env) if real.exists() else None
    return [Path(p) for p in out]


def installation_root(real: Path) -> Path | None:
    """The folder an installed program lives in with its dependencies: the outermost enclosing
    `node_modules` (a package's own nested one belongs to the prefix's), a virtual environment
    (`pyvenv.cfg`), or the prefix of an interpreter in `PREFIX/bin` (its `lib` holds its stdlib)."""
    modules = [p for p in real.parents if p.name == "node_modules"]
    if modules:
        return modules[-1]
    venv = next((p for p in real.parents if (p / "pyvenv.cfg").is_file()), None)
    if venv is not None:
        return venv
    prefix = real.parent.parent
    if real.parent.name == "bin" and (prefix / "lib").is_dir() and prefix not in (Path("/"), Path("/usr")):
        return prefix
    return None


def shebang_interpreter(real: Path, path_env: str | None) -> Path | None:
    """The interpreter the `#!` line of `real` names (`env NAME`: NAME found on `path_env`)."""
    try:
        with open(real, "rb") as f:
            head = f.read(_SHEBANG_LIMIT)
    except OSError:
        return None
    words = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").split() if head.startswith(b"#!") else []
    if not words or os.path.basename(words[0]) != "env":
        return Path(words[0]) if words else None
    names = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
    found = shutil.which(names[0], path=path_env if path_env is not None else os.defpath) if names else None
    return Path(found) if found else None


def _split(command: str) -> list[str]:
    try:
        lex = shlex.shlex(command, posix=True, punctuation_chars=True)
        lex.whitespace_split = True
        return list(lex)
    except ValueError:
        return command.split()


def _walk(command: str, depth: int = 4) -> list[tuple[str, bool]]:
    """(word, starts a command) for the words of a command line and, recursively, of the command
    string a shell or `eval` is given, shell operators split off."""
    words = _split(command)
    out: list[tuple[str, bool]] = []
    head, shell = True, False
    for i, w in enumerate(words):
        if set(w) <= _OPERATOR:
            out.append((w, False))
            head, shell = True, False          # the next command starts
            continue
        starts = head and not _ASSIGN.fullmatch(w)
        out.append((w, starts))
        if starts:
            head = w in _LAUNCHERS
        if os.path.basename(w) in _SHELLS or w == "eval":
            shell = True
            if w == "eval" and depth > 0:
                out += _walk(" ".join(words[i + 1:]), depth - 1)
        elif shell and depth > 0 and i > 0 and _SHELL_C.fullmatch(words[i - 1]):
            out += _walk(w, depth - 1)
    return out


def all_words(command: str) -> list[str]:
    """Every word of a command line, inside `bash -c '… score.py'` too, and `--opt=value` values:
    a path named anywhere in it is a path it may run. Code given to an interpreter (`python -c
    "…"`) is not a command line and is not split."""
    out: list[str] = []
    for w, _ in _walk(command):
        out += [w, w.split("=", 1)[1]] if w.startswith("-") and "=" in w else [w]
    return out


def command_heads(command: str) -> list[str]:
    """The programs a command line starts: the first word of each of its commands (and of the
    word after `env`/`exec`/`uv run`, past VAR=value), also inside `sh -c '…'`."""
    return [w for w, starts in _walk(command) if starts]
