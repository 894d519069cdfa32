"""The rules a change set is checked against: PathRules plus the files that run code without
being named, which a wide `allowed` pattern must not hand to the generator by accident:

- `conftest.py`, `sitecustomize.py`, `usercustomize.py`, `*.pth`: a violation unless an
  `allowed` pattern names that exact path without wildcards;
- bytecode (`*.pyc`, `*.pyo`, `__pycache__/`): never kept (an unchecked-hash `.pyc` stands in
  for its source even under `python -B`);
- shadows of a protected module `pkg/evaluate.py`: `pkg/evaluate/`, `pkg/evaluate*.so`,
  `pkg/evaluate.pyc`, ... (Python's import system prefers each to the `.py` file);
- a new module beside a protected script named like a standard-library or installed module
  (`pathlib.py`, `numpy/`): the verifier's own `import pathlib` would run it.
"""

from __future__ import annotations

import re
import sys
from functools import lru_cache
from importlib import metadata
from typing import Iterable, Mapping

from autoloop.program.globs import PathRules

IMPLICIT_FILES = ("conftest.py", "sitecustomize.py", "usercustomize.py")


def implicit_code(path: str) -> str | None:
    """Why `path` runs code nobody names (or can stand in for source), else None."""
    parts = path.split("/")
    name = parts[-1]
    if "__pycache__" in parts[:-1] or name == "__pycache__" or name.endswith((".pyc", ".pyo")):
        return "bytecode (never kept: a .pyc can stand in for its source)"
    if name in IMPLICIT_FILES:
        return f"{name} runs code implicitly (allow it by its exact path to permit this)"
    if name.endswith(".pth"):
        return ".pth files run code at interpreter start (allow it by its exact path to permit this)"
    return None


def module_shadow_regex(modules: Iterable[str]) -> re.Pattern[str] | None:
    """Paths that Python would import instead of one of the protected `.py` files `modules`."""
    alts = []
    for m in modules:
        head, _, file = m.rpartition("/")
        if not m.endswith(".py") or file in ("__init__.py", "__main__.py"):
            continue
        d, s = re.escape(head + "/") if head else "", re.escape(file[:-3])
        alts += [f"{d}{s}(?:/.*)?",                          # a package folder of that name
                 f"{d}{s}\\.(?:[^/]*\\.)?(?:so|pyd|pyc)"]   # extension modules, sourceless bytecode
    return re.compile("(?:" + "|".join(alts) + ")", re.DOTALL) if alts else None


@lru_cache(maxsize=1)
def library_modules() -> frozenset[str]:
    """Top-level names of the standard library and of what is installed for this Python."""
    names = set(getattr(sys, "stdlib_module_names", ())) | set(sys.builtin_module_names)
    try:
        names |= set(metadata.packages_distributions())
    except Exception:  # a broken distribution's metadata must not stop a run; stdlib still counts
        pass
    return frozenset(n for n in names if n.isidentifier())


_MODULE_FILE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?:/__init__\.py|/.*|\.py|\.(?:[^/]*\.)?(?:so|pyd|pyc))", re.DOTALL)


def library_shadow(path: str, folders: Iterable[str]) -> str | None:
    """The library module `path` would shadow when it is new in one of `folders` (repository
    folders a verifier or guard script sits in, "" for the top), else None."""
    for folder in folders:
        prefix = folder + "/" if folder else ""
        if not path.startswith(prefix):
            continue
        m = _MODULE_FILE.fullmatch(path[len(prefix):])
        if m and "/" not in m.group(1) and m.group(1) in library_modules():
            return m.group(1)
    return None


class ScopeRules(PathRules):
    """PathRules with the implicit-code and module-shadow checks on top."""

    __slots__ = ("literal", "_shadow")

    def __init__(self, allowed: Iterable[str], forbidden: Iterable[str] = (),
                 protected: Mapping[str, str] | None = None) -> None:
        super().__init__(allowed, forbidden, protected or {})
        self.literal = {p for p in self.allowed if not any(c in p for c in "*?[")}
        self._shadow = module_shadow_regex(self.protected)

    def why_not(self, path: str) -> str | None:
        why = super().why_not(path)
        if why is not None:
            return why
        if self._shadow is not None and self._shadow.fullmatch(path):
            return "shadows a protected module (Python would import it instead)"
        implicit = implicit_code(path)
        if implicit is not None and (implicit.startswith("bytecode") or path not in self.literal):
            return implicit
        return None
