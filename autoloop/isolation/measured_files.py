"""What the measurement commands (verifier, guards, holdout) name: the files of the checkout
they run, which the generator may never edit, and the programs they start."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any, Mapping

from autoloop.errors import ConfigError
from autoloop.process.executables import all_words, command_heads, shebang_interpreter
from autoloop.program.globs import PathRules
from autoloop.program.reader import Program
from autoloop.git.workspace import Workspace

_PYTHON = re.compile(r"python[0-9.]*")


def _commands(program: Program) -> list[str]:
    score = [program.verifier.score] if program.verifier.score else []
    return [program.verifier.command, *score, *(g.command for g in program.guards)]


def named_interpreters(program: Program) -> list[str]:
    """The Pythons the verifier's and guards' commands start by name (`python3 x.py`,
    `sh -c '.venv/bin/python -m y'`); a Python started from inside a script is not known here."""
    return list(dict.fromkeys(w for cmd in _commands(program) for w in command_heads(cmd)
                              if _PYTHON.fullmatch(os.path.basename(w))))


def commands_by_name(program: Program) -> set[str]:
    """Programs the guards and the verifier start by name, git, and the shells."""
    return {"git", "sh", "bash", "dash", "env", "python", "python3",
            *(os.path.basename(n) for n in named_interpreters(program)),
            *(w for cmd in _commands(program) for w in command_heads(cmd) if "/" not in w)}


def interpreters(program: Program, env: Mapping[str, str], *, shebangs: bool = False,
                 defaults: bool = False) -> list[str]:
    """The paths of the Pythons the commands start: named, through a script's `#!` line
    (`pytest -q` → the venv's python) with `shebangs`, `python3`/`python` on PATH with `defaults`."""
    path = env.get("PATH")
    out: list[str] = []
    names = named_interpreters(program) + (["python3", "python"] if defaults else [])
    for name in names:
        found = name if os.path.isabs(name) else shutil.which(name, path=path)
        if defaults and not found and "/" in name and (program.repo_root / name).exists():
            found = str(program.repo_root / name)
        out.append(found or "")
    if shebangs:
        for w in (w for cmd in _commands(program) for w in command_heads(cmd)):
            script = None if "/" in w or _PYTHON.fullmatch(w) else shutil.which(w, path=path)
            out.append((script and _shebang_python(script)) or "")
    return [p for p in dict.fromkeys(out) if p]


def _shebang_python(script: str) -> str | None:
    """The Python a console script starts, from its `#!` line."""
    exe = shebang_interpreter(Path(script), os.environ.get("PATH") or os.defpath)
    return str(exe) if exe and exe.is_absolute() and _PYTHON.fullmatch(exe.name) else None


def measured_commands(program: Program) -> list[tuple[str, str]]:
    """(key, command line) of the verifier, each guard and the holdout; `program.line(key)` is
    the line to send a user to."""
    out = [("verifier.command", program.verifier.command)]
    if program.verifier.score is not None:
        out.append(("verifier.score", program.verifier.score))
    out += [(f"guards[{i}].command", g.command) for i, g in enumerate(program.guards)]
    if program.holdout is not None:
        out.append(("holdout.command", program.holdout.command))
    return out


def command_files(program: Program) -> list[tuple[str, str]]:
    """(key, repo-relative path) of each file of the checkout that the verifier, a guard or the
    holdout names on its command line (`python -m evaluate` names evaluate.py or its package)."""
    out: list[tuple[str, str]] = []
    root = program.repo_root.resolve()
    for key, cmd in measured_commands(program):
        words = all_words(cmd)
        for prev, w in zip(["", *words], words):
            candidate = program.repo_root / w
            if prev == "-m":
                base = program.repo_root / w.replace(".", "/")
                modules = (base.with_suffix(".py"), base / "__main__.py", base / "__init__.py")
                candidate = next((c for c in modules if c.is_file()), candidate)
            if w.startswith("-") or not candidate.is_file():
                continue
            try:
                rel = candidate.resolve().relative_to(root).as_posix()
            except ValueError:
                continue  # outside the repository: not the generator's to reach through the tree
            out.append((key, rel))
    return out


def protected_paths(program: Program) -> dict[str, str]:
    """Paths the generator may never change even when `allowed` matches them: the program and
    the run's own files, plus files the measurement commands name. A judge the generator may
    rewrite is no judge: such a file under `allowed` is refused (ConfigError)."""
    out = dict(program.protected)
    editable = PathRules(program.allowed, program.forbidden)
    for key, rel in command_files(program):
        if editable.allows(rel):
            raise ConfigError(
                f"{program.path.name}:{program.line(key)}: {key} runs {rel}, which 'allowed' lets the "
                f"generator change, so it could rewrite its own judge; keep the measurement in "
                f"a file the generator cannot edit (e.g. prepare.py) and allow only what it tunes")
        out.setdefault(rel, "used by the verifier")
    return out


def uncommitted_warnings(program: Program, ws: Workspace, commit: str) -> list[str]:
    """One line per file the measurement commands name that `commit` (what is measured) does not
    have as the checkout has it: untracked, ignored or modified files are not measured."""
    named = command_files(program)
    state = ws.uncommitted([rel for _, rel in named])
    what = {"untracked": "is untracked", "ignored": "is ignored by git", "modified": "has uncommitted changes"}
    out = []
    for key, rel in named:
        how = state.get(rel)
        if how is not None:
            measured = "does not have it" if how != "modified" else "has another version"
            out.append(f"{rel} (named by {key}) {what[how]} in your checkout; measurements use the committed "
                       f"files of {commit[:12]}, which {measured} — commit it first")
    return out


def verifier_fingerprint(program: Program) -> dict[str, Any]:
    v = program.verifier
    # the score's key only when set: ledgers written before it existed still match
    return {"command": v.command, "metric": v.metric, "pattern": v.pattern, "direction": v.direction,
            **({"score": v.score} if v.score is not None else {})}
