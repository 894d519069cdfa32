"""Installations that point into your checkout (`pip install -e .` and its relatives): a verifier
that imports such a package imports your checkout, not the candidate. The measurement sandbox
binds the candidate at the checkout's path; without one nothing redirects them soundly, so a run
refuses to start (exit 2) and names what to fix. Found in the site folders of the measuring
Pythons: `*.pth` path lines, setuptools' `__editable___*_finder.py` mappings, `*.egg-link`
files and `*.dist-info/direct_url.json` with `dir_info.editable` (PEP 610)."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from itertools import takewhile
from pathlib import Path
from typing import NamedTuple, Sequence
from urllib.parse import ParseResult, unquote, urlparse

from autoloop.errors import ConfigError
from autoloop.isolation.measured_files import interpreters
from autoloop.program.reader import Program
from autoloop.base.walk import inside, under
from autoloop.disk.watch import site_folders

_QUOTED_PATH = re.compile(r"""['"](/[^'"\n]+)['"]""")
_MAX_BYTES = 1 << 20   # a .pth or finder is small; a huge one is not read whole
_SHOWN = 3


@dataclass(frozen=True)
class Installation:
    where: Path        # the file that says so (a .pth, a finder, an egg-link, a direct_url.json)
    target: str        # the path inside the checkout it points to
    python: str        # the interpreter whose site folder holds it


class Pointer(NamedTuple):
    where: Path
    target: str


def into_checkout(checkout: Path, pythons: Sequence[str], allowed: Sequence[str] | None = None) -> list[Installation]:
    """Every installation in the site folders of `pythons` that points into `checkout`; with
    `allowed`, only those making importable a path the generator may change (an editable install
    it cannot touch is the same in every candidate). A `direct_url.json` names the project's
    root, not what is importable, so then only the import mechanisms are judged."""
    root = os.path.realpath(checkout)
    found: list[Installation] = []
    seen: set[str] = set()
    for python in pythons:
        for site in map(os.path.realpath, site_folders(python)):
            if site in seen or not os.path.isdir(site):
                continue
            seen.add(site)
            for p in pointers(Path(site)):
                if inside(p.target, root) and (allowed is None or p.where.name != "direct_url.json"
                                               and _reaches(os.path.relpath(p.target, root), allowed)):
                    found.append(Installation(p.where, p.target, python))
    return found


def _reaches(rel: str, allowed: Sequence[str]) -> bool:
    """Can a path some `allowed` pattern matches lie under `rel` (or be it)? Judged by each
    pattern's literal folders before its first wildcard: never too lenient."""
    rel = "" if rel == "." else rel
    for pattern in allowed:
        segments = pattern.strip("/").split("/")
        prefix = "/".join(takewhile(lambda seg: not any(ch in seg for ch in "*?["), segments))
        if not rel or not prefix or under(prefix, rel) or under(rel, prefix):
            return True
    return False


def message(program: Program, found: Sequence[Installation], why: str) -> str:
    shown = "; ".join(f"{i.where} (for {i.python}) points to {i.target}" for i in found[:_SHOWN])
    shown += f" (+{len(found) - _SHOWN} more)" if len(found) > _SHOWN else ""
    return (f"{program.path.name}:{program.lines.get('sandbox', 1)}: sandbox: not sandboxed ({why}), and an "
            f"installation points into your checkout: {shown}. The verifier and guards would import your "
            "checkout's files instead of each candidate's, so every cycle would measure the same "
            "code. Fix: run where bubblewrap works (sandbox: auto binds the candidate at your "
            f"checkout's path), or uninstall it from that environment and have the commands import "
            f"from the tree they run in (`PYTHONPATH={_path_entry(program, found[0])} python …`, or "
            "`python -m …` from the repository root). Not `pip install .`: the verifier would import "
            "that installed copy, the same in every cycle")


def _path_entry(program: Program, found: Installation) -> str:
    """The folder, relative to the root, that puts on sys.path what `found` made importable: a
    .pth line or an egg-link names it; a setuptools finder maps a package to its own folder."""
    finder = found.where.name.startswith("__editable__") and found.where.suffix == ".py"
    target = os.path.dirname(found.target) if finder else found.target
    rel = os.path.relpath(target, os.path.realpath(program.repo_root))
    return "." if rel in (".", "") or rel.startswith("..") else rel


def pointers(site: Path) -> list[Pointer]:
    """Every installation recorded in the site folder `site`, and where it points."""
    out: list[Pointer] = []
    try:
        names = sorted(os.listdir(site))
    except OSError:
        return out
    for name in names:
        path = site / name
        if name.endswith(".pth"):
            out += [Pointer(path, os.path.realpath(site / ln.strip())) for ln in _read(path).splitlines()
                    if ln.strip() and not ln.lstrip().startswith(("#", "import ", "import\t"))]
        elif name.startswith("__editable__") and name.endswith(".py"):
            out += [Pointer(path, os.path.realpath(m.group(1))) for m in _QUOTED_PATH.finditer(_read(path))]
        elif name.endswith(".egg-link"):
            first = (_read(path).splitlines() or [""])[0].strip()
            if first:
                out.append(Pointer(path, os.path.realpath(site / first)))
        elif name.endswith(".dist-info"):
            url = _editable_url(path / "direct_url.json")
            if url is not None:
                out.append(Pointer(path / "direct_url.json", os.path.realpath(unquote(url.path))))
    return out


def _editable_url(direct: Path) -> ParseResult | None:
    try:
        data = json.loads(_read(direct) or "null")
    except ValueError:
        return None
    if not isinstance(data, dict) or not (data.get("dir_info") or {}).get("editable"):
        return None
    url = urlparse(str(data.get("url", "")))
    return url if url.scheme == "file" else None


def _read(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            return f.read(_MAX_BYTES).decode("utf-8", "replace")
    except OSError:
        return ""


def refuse(program: Program, why: str) -> None:
    """With no sandbox to bind the candidate at the checkout's path, an installation pointing
    into the checkout would make every measurement import the checkout's files: ConfigError
    (exit 2) naming it and the fix. `why`: why there is no sandbox. Shared by run, verify, gate."""
    found = into_checkout(program.repo_root, interpreters(program, os.environ, defaults=True), program.allowed)
    if found:
        raise ConfigError(message(program, found, why))
