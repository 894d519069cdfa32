"""What an installed program needs to start, so a sandbox hiding /tmp (or any folder) can bind
it read-only: npm's `node_modules/.bin/claude` is a symlink into the package folder, a venv's
`bin/aider` needs the venv's `lib/…/site-packages` and the interpreter its `#!` line names, and
`#!/usr/bin/env node` needs whichever `node` PATH finds."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

_SHEBANG_LIMIT = 512
_MAX_DEPTH = 4   # an interpreter's own `#!` line, and so on; real chains are 1–2 deep


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
