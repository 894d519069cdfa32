"""The files of the checkout that the measurement commands name, and the words of a command
line as a shell would run them: what the generator may never edit, and what `verify` warns about."""

from __future__ import annotations

import os
import re
import shlex
from typing import Any

from autoloop.errors import ConfigError
from autoloop.globs import PathRules
from autoloop.program import Program
from autoloop.workspace import Workspace


def command_files(program: Program) -> list[tuple[str, str]]:
    """(key, repo-relative path) of each file of the checkout that the verifier, a guard or the
    holdout names on its command line (`python prepare.py --eval` names prepare.py; `python -m
    evaluate` names evaluate.py or evaluate/__main__.py)."""
    out: list[tuple[str, str]] = []
    root = program.repo_root.resolve()
    commands = [("verifier.command", program.verifier.command)]
    commands += [(f"guards[{i}]", g.command) for i, g in enumerate(program.guards)]
    if program.holdout is not None:
        commands.append(("holdout.command", program.holdout.command))
    for key, cmd in commands:
        words = all_words(cmd)
        for prev, w in zip(["", *words], words):
            candidate = program.repo_root / w
            if prev == "-m":
                base = program.repo_root / w.replace(".", "/")
                for c in (base.with_name(base.name + ".py"), base / "__main__.py", base / "__init__.py"):
                    if c.is_file():
                        candidate = c
                        break
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
    the run's own files (Program.protected), plus files of the repository that the verifier or
    a guard names on its command line (`python prepare.py --eval` protects prepare.py).

    A judge the generator may rewrite is no judge: a program whose verifier or guard names a file
    that `allowed` gives the generator is refused (ConfigError) rather than run to no effect."""
    out = dict(program.protected)
    editable = PathRules(program.allowed, program.forbidden)
    for key, rel in command_files(program):
        if editable.allows(rel):
            line = program.lines.get(key) or program.lines.get(key.split("[")[0], 1)
            raise ConfigError(
                f"{program.path.name}:{line}: {key} runs {rel}, which 'allowed' lets the "
                f"generator change, so it could rewrite its own judge; keep the measurement in "
                f"a file the generator cannot edit (e.g. prepare.py) and allow only what it tunes")
        out.setdefault(rel, "used by the verifier")
    return out


def uncommitted_warnings(program: Program, ws: Workspace, commit: str) -> list[str]:
    """One line per file the measurement commands name that the checkout has but `commit` (what
    is measured) has not as it is: untracked, ignored or modified files are not measured."""
    named = command_files(program)
    state = ws.uncommitted([rel for _, rel in named])
    out = []
    for key, rel in named:
        how = state.get(rel)
        if how is None:
            continue
        what = {"untracked": "is untracked", "ignored": "is ignored by git",
                "modified": "has uncommitted changes"}[how]
        measured = "does not have it" if how != "modified" else "has another version"
        out.append(f"{rel} (named by {key}) {what} in your checkout; measurements use the committed "
                   f"files of {commit[:12]}, which {measured} — commit it first")
    return out


_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "busybox"})
_SHELL_C = re.compile(r"-[a-zA-Z]*c[a-zA-Z]*")   # -c, -lc, -ec, -exc ...


def all_words(command: str, depth: int = 4) -> list[str]:
    """The words of a command line and, recursively, of the command string a shell is given
    (`bash -c '… score.py'`, `sh -lc "cd x && python eval.py"`), with shell operators split off
    and `--opt=value` values included: a path named anywhere in it is a path it may run. Code
    given to an interpreter (`python -c "…"`) is not a command line and is not split."""
    try:
        lex = shlex.shlex(command, posix=True, punctuation_chars=True)
        lex.whitespace_split = True
        words = list(lex)
    except ValueError:
        words = command.split()
    out: list[str] = []
    shell = False
    for i, w in enumerate(words):
        out.append(w)
        if w.startswith("-") and "=" in w:
            out.append(w.split("=", 1)[1])
        if set(w) <= set(";|&()<>"):
            shell = False          # the next command starts
        elif os.path.basename(w) in _SHELLS or w == "eval":
            shell = True
            if w == "eval" and depth > 0:
                out += all_words(" ".join(words[i + 1:]), depth - 1)
        elif shell and depth > 0 and i > 0 and _SHELL_C.fullmatch(words[i - 1]):
            out += all_words(w, depth - 1)
    return out


def verifier_fingerprint(program: Program) -> dict[str, Any]:
    v = program.verifier
    return {"command": v.command, "metric": v.metric, "pattern": v.pattern, "direction": v.direction}
