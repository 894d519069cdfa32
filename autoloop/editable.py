"""Installations that point into your checkout (`pip install -e .` and its relatives).

A verifier that imports an editable-installed package imports it from wherever the
installation points: your checkout, not the candidate autoloop measures. The measurement
sandbox binds the candidate at the checkout's path, so those paths resolve to the candidate;
without a sandbox nothing can redirect them soundly, so a run refuses to start (exit 2) and
names what to fix. Found in the site folders of the Pythons the commands run:

- `*.pth` path lines (setuptools' and hatchling's `.pth` editables, `setup.py develop`,
  `conda develop`);
- setuptools' `__editable___*_finder.py` modules (a mapping of package -> source folder);
- `*.egg-link` files (legacy `setup.py develop`);
- `*.dist-info/direct_url.json` with `dir_info.editable` (PEP 610: every PEP 660 installer).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence
from urllib.parse import unquote, urlparse

from autoloop.program import Program
from autoloop.proc import run_captured

_SITE_QUERY = ("import json, site, sys\n"
               "paths = list(getattr(site, 'getsitepackages', lambda: [])())\n"
               "paths.append(site.getusersitepackages())\n"
               "print(json.dumps(paths))")
_QUOTED_PATH = re.compile(r"""['"](/[^'"\n]+)['"]""")
_MAX_BYTES = 1 << 20   # a .pth or finder is small; a huge one is not read whole


@dataclass(frozen=True)
class Installation:
    where: Path        # the file that says so (a .pth, a finder, an egg-link, a direct_url.json)
    target: str        # the path inside the checkout it points to
    python: str        # the interpreter whose site folder holds it

    def describe(self) -> str:
        return f"{self.where} (for {self.python}) points to {self.target}"


def site_folders(python: str, env: dict[str, str] | None = None) -> list[Path]:
    """The site-packages folders `python` reads (asked once: ~20 ms)."""
    try:
        res = run_captured([python, "-I", "-c", _SITE_QUERY], timeout=30, env=env)
        paths = json.loads(res.stdout.decode().strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return []
    return [Path(p) for p in paths if isinstance(p, str) and os.path.isdir(p)]


def into_checkout(checkout: Path, pythons: Sequence[str],
                  allowed: Sequence[str] | None = None) -> list[Installation]:
    """Every installation in the site folders of `pythons` that points into `checkout` — with
    `allowed`, only those that make importable a path the generator may change: an editable
    install of a package the generator cannot touch (autoloop's own, in its repository) is the
    same in the checkout as in every candidate, so it measures nothing wrong.

    A `direct_url.json` names the project's root, not what is importable; the import
    mechanism itself (a `.pth` path, a finder's mapping, an egg-link) is what is judged then."""
    root = os.path.realpath(checkout)
    found: list[Installation] = []
    seen: set[str] = set()
    for python in pythons:
        for site in site_folders(python):
            real = os.path.realpath(site)
            if real in seen:
                continue
            seen.add(real)
            for where, target in pointers(Path(real)):
                if not _inside(target, root):
                    continue
                if allowed is not None and (where.name == "direct_url.json"
                                            or not _reaches(os.path.relpath(target, root), allowed)):
                    continue
                found.append(Installation(where, target, python))
    return found


def _reaches(rel: str, allowed: Sequence[str]) -> bool:
    """Can a path that some `allowed` pattern matches lie under `rel` (or be `rel`)? Judged by
    each pattern's literal folders before its first wildcard: conservative, never too lenient."""
    rel = "" if rel == "." else rel.replace(os.sep, "/")
    for pattern in allowed:
        literal: list[str] = []
        for seg in pattern.strip("/").split("/"):
            if any(ch in seg for ch in "*?["):
                break
            literal.append(seg)
        prefix = "/".join(literal)
        if not rel or not prefix or _inside(prefix, rel) or _inside(rel, prefix):
            return True
    return False


def message(program: Program, found: Sequence[Installation], why: str) -> str:
    shown = "; ".join(i.describe() for i in found[:3]) + (f" (+{len(found) - 3} more)" if len(found) > 3 else "")
    line = program.lines.get("sandbox", 1)
    return (f"{program.path.name}:{line}: sandbox: not sandboxed ({why}), and an installation "
            f"points into your checkout: {shown}. The verifier and guards would import your "
            "checkout's files instead of each candidate's, so every cycle would measure the same "
            "code. Fix: run where bubblewrap works (sandbox: auto binds the candidate at your "
            "checkout's path), or install the package without -e (pip install .) or uninstall "
            "it from that environment")


def pointers(site: Path) -> list[tuple[Path, str]]:
    """(file, the path it points to) for every installation recorded in the site folder `site`."""
    out: list[tuple[Path, str]] = []
    try:
        names = sorted(os.listdir(site))
    except OSError:
        return out
    for name in names:
        path = site / name
        if name.endswith(".pth"):
            for ln in _read(path).splitlines():
                ln = ln.strip()
                if not ln or ln.startswith("#") or ln.startswith(("import ", "import\t")):
                    continue
                out.append((path, os.path.realpath(site / ln)))
        elif name.startswith("__editable__") and name.endswith(".py"):
            for m in _QUOTED_PATH.finditer(_read(path)):
                out.append((path, os.path.realpath(m.group(1))))
        elif name.endswith(".egg-link"):
            first = (_read(path).splitlines() or [""])[0].strip()
            if first:
                out.append((path, os.path.realpath(site / first)))
        elif name.endswith(".dist-info"):
            direct = path / "direct_url.json"
            text = _read(direct)
            if not text:
                continue
            try:
                data = json.loads(text)
            except ValueError:
                continue
            if isinstance(data, dict) and (data.get("dir_info") or {}).get("editable"):
                url = urlparse(str(data.get("url", "")))
                if url.scheme == "file":
                    out.append((direct, os.path.realpath(unquote(url.path))))
    return out


def _read(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            return f.read(_MAX_BYTES).decode("utf-8", "replace")
    except OSError:
        return ""


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")
