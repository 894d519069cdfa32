"""What an installed program needs to start: the files its name resolves to.

A sandbox that hides /tmp (or any other folder) must still show a generator the program it
runs. The folder on PATH is not enough: npm's `node_modules/.bin/claude` is a symlink into the
package folder, a venv's `bin/aider` needs the venv's `lib/…/site-packages` and the interpreter
its `#!` line names, and a `#!/usr/bin/env node` script needs whichever `node` PATH finds.
`needed_paths` lists them so the sandbox can bind each one read-only.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

_SHEBANG_LIMIT = 256
_MAX_DEPTH = 4   # an interpreter's own `#!` line, and so on; real chains are 1–2 deep


def needed_paths(executable: str | Path, path_env: str | None = None) -> list[Path]:
    """The files and folders `executable` needs to start: its real path, its installation root
    (the npm prefix's `node_modules`, the venv), and the same for the interpreter its `#!` line
    names, found on `path_env` like the kernel and `env` would. Existing paths only, no repeats."""
    out: dict[str, None] = {}
    _collect(Path(executable), path_env, out, 0)
    return [Path(p) for p in out]


def _collect(exe: Path, path_env: str | None, out: dict[str, None], depth: int) -> None:
    if depth > _MAX_DEPTH:
        return
    for p in (exe, exe.parent):
        if p.exists():
            out.setdefault(str(p), None)
    real = Path(os.path.realpath(exe))
    if not real.exists():
        return
    out.setdefault(str(real), None)
    root = installation_root(real)
    if root is not None:
        out.setdefault(str(root), None)
    interpreter = _shebang_interpreter(real, path_env)
    if interpreter is not None:
        _collect(interpreter, path_env, out, depth + 1)


def installation_root(real: Path) -> Path | None:
    """The folder an installed program lives in with its dependencies: the nearest enclosing
    `node_modules` (npm, `--prefix` or global), or a virtual environment (`pyvenv.cfg`), or the
    prefix of an interpreter in `PREFIX/bin` (its `lib` folder holds its standard library)."""
    parents = list(real.parents)
    for parent in parents:
        if parent.name == "node_modules":
            # the outermost one: a package's own nested node_modules belongs to the prefix's
            outer = parent
            for higher in parent.parents:
                if higher.name == "node_modules":
                    outer = higher
            return outer
    for parent in parents:
        if (parent / "pyvenv.cfg").is_file():
            return parent
        if parent.parent == parent:
            break
    if real.parent.name == "bin" and (real.parent.parent / "lib").is_dir() \
            and real.parent.parent != Path("/") and real.parent.parent != Path("/usr"):
        return real.parent.parent
    return None


def _shebang_interpreter(real: Path, path_env: str | None) -> Path | None:
    try:
        with open(real, "rb") as f:
            head = f.read(_SHEBANG_LIMIT)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").split()
    if not words:
        return None
    if os.path.basename(words[0]) == "env":
        names = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
        if not names:
            return None
        found = shutil.which(names[0], path=path_env if path_env is not None else os.defpath)
        return Path(found) if found else None
    return Path(words[0])
