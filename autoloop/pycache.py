"""autoloop's own bytecode cache for measurements (DESIGN.md §4, last bullet).

Every measurement runs with a fresh PYTHONPYCACHEPREFIX, so no bytecode planted anywhere — an
unchecked-hash `.pyc` in a `__pycache__`, which Python trusts over its source — is ever read.
Started empty, that prefix makes every Python child recompile everything it imports: the
standard library, site-packages, the project (a pytest guard ran 2–3× slower than outside).

So each fresh prefix starts as a copy of this cache, which holds only bytecode autoloop compiled
itself: checked-hash `.pyc` files (PEP 552, `py_compile` with CHECKED_HASH), compiled by the
measured interpreter from the source bytes. Python uses such a file only when the source it is
about to import hashes to the value recorded in it, so it is the compilation of exactly the bytes
being imported, whatever the file at that path holds later; a stale one is simply recompiled.
Nothing a measurement writes is kept: what it wrote into its own prefix only tells which sources
it imported, and those are compiled here anew. The cache lives in the run's private scratch,
watched like the rest of the trusted base; a change by anyone else drops it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Mapping, Sequence

# PREFIX/<source folder>/<name>.<cache tag>[.opt-N].pyc, and pytest's assertion-rewritten
# <name>.<cache tag>-pytest-<version>.pyc (checked-hash too since pytest 8.4; a pytest that
# writes anything else is not imitated: the measurement rewrites those itself, as before).
_PYC = re.compile(r"(?P<name>[^.]+)\.(?P<tag>[a-z]+-\d+)(?P<pytest>-pytest-[0-9A-Za-z.+]+)?"
                  r"(?:\.opt-(?P<opt>\d))?\.pyc")
MAX_SOURCE_BYTES = 4 << 20      # a source larger than this is left to the measurement to compile
MAX_PER_BATCH = 20_000

# Run by the measured interpreter itself (its magic number, its cache tag), isolated (-I: no
# site-packages, no PYTHON* variables, no cwd on the path); reads [source, pyc, optimize] lists.
# pytest's rewritten modules are made by pytest's own rewriter (no config: default assertion
# verbosity, no pass hook) and written the way pytest writes them, only when the file name
# carries this pytest's own tag and pytest writes checked-hash files.
_COMPILE = r"""
import io, json, os, py_compile, sys
from pathlib import Path
done = 0
rw = None
for src, cfile, opt, pytest_tag in json.load(sys.stdin):
    try:
        if pytest_tag:
            if rw is None:
                rw = False
                import _pytest.assertion.rewrite as mod
                probe = io.BytesIO()
                mod._write_pyc_fp(probe, b"\0" * 16, compile("", "probe", "exec"))
                if probe.getvalue()[4:8] == b"\x03\x00\x00\x00":   # checked-hash
                    rw = mod
            if not rw or not cfile.endswith("." + rw.PYTEST_TAG + rw.PYC_EXT):
                continue
            source_hash, co = rw._rewrite_test(Path(src), None)
            if not isinstance(source_hash, bytes):
                continue
            os.makedirs(os.path.dirname(cfile), exist_ok=True)
            tmp = f"{cfile}.{os.getpid()}"
            with open(tmp, "wb") as fp:
                rw._write_pyc_fp(fp, source_hash, co)
            os.replace(tmp, cfile)
        else:
            py_compile.compile(src, cfile=cfile, dfile=src, doraise=True, optimize=opt,
                               invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
        done += 1
    except Exception:
        pass
print(done)
"""

_TAG_QUERY = "import sys; print(sys.implementation.cache_tag or '')"


class ProvenCache:
    """A bytecode prefix of checked-hash `.pyc` files compiled by autoloop (see the module doc)."""

    def __init__(self, root: Path, interpreters: Sequence[str], env: Mapping[str, str]) -> None:
        self.root = root
        self.env = dict(env)
        self._by_tag: dict[str, str] = {}
        for exe in interpreters:
            tag = _run(exe, _TAG_QUERY, "", self.env, timeout=30).strip()
            if tag and tag not in self._by_tag:
                self._by_tag[tag] = exe
        self._seeded: dict[Path, dict[str, tuple[int, int]]] = {}

    @property
    def usable(self) -> bool:
        return bool(self._by_tag)

    def seed(self, prefix: Path) -> None:
        """Fill a measurement's fresh prefix with a copy of the cache (a copy: nothing the
        measurement does reaches the cache), and remember what was copied."""
        if self.root.is_dir():
            shutil.copytree(self.root, prefix, dirs_exist_ok=True, symlinks=False,
                            copy_function=shutil.copyfile)
        self._seeded[prefix] = _files(prefix)

    def learn(self, prefix: Path) -> int:
        """After a measurement: compile, into the cache, the sources whose bytecode it had to
        write itself (absent from the cache, or stale). Returns how many were compiled."""
        before = self._seeded.pop(prefix, {})
        todo: dict[str, list[list[object]]] = {}
        for rel, ident in _files(prefix).items():
            if before.get(rel) == ident:
                continue          # the copy of ours, untouched
            folder, _, name = rel.rpartition("/")
            m = _PYC.fullmatch(name)
            if m is None or m.group("tag") not in self._by_tag:
                continue
            # the prefix mirrors the source's folder (no __pycache__ level)
            source = "/" + folder + "/" + m.group("name") + ".py"
            try:
                st = os.stat(source)
            except OSError:
                continue
            if st.st_size > MAX_SOURCE_BYTES:
                continue
            opt = int(m.group("opt") or 0)
            todo.setdefault(m.group("tag"), []).append([source, str(self.root / rel), opt, bool(m.group("pytest"))])
        compiled = 0
        for tag, items in todo.items():
            for i in range(0, len(items), MAX_PER_BATCH):
                batch = items[i:i + MAX_PER_BATCH]
                out = _run(self._by_tag[tag], _COMPILE, json.dumps(batch), self.env, timeout=300)
                compiled += int(out.strip() or 0) if out.strip().isdigit() else 0
        return compiled

    def forget(self, prefix: Path) -> None:
        self._seeded.pop(prefix, None)


def _files(root: Path) -> dict[str, tuple[int, int]]:
    """Every regular file under root: (inode, mtime) by relative path."""
    out: dict[str, tuple[int, int]] = {}
    base = str(root)
    for dirpath, _dirs, names in os.walk(base):
        rel_dir = os.path.relpath(dirpath, base)
        for n in names:
            full = os.path.join(dirpath, n)
            try:
                st = os.lstat(full)
            except OSError:
                continue
            rel = n if rel_dir == "." else f"{rel_dir}/{n}"
            out[rel.replace(os.sep, "/")] = (st.st_ino, st.st_mtime_ns)
    return out


def _run(exe: str, code: str, stdin: str, env: Mapping[str, str], timeout: float) -> str:
    from autoloop.proc import run_captured   # registered: never mistaken for a leftover

    try:
        res = run_captured([exe, "-I", "-c", code], cwd=Path("/"), env=dict(env), timeout=timeout,
                           input=stdin.encode())
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return res.stdout.decode(errors="replace") if res.returncode == 0 else ""
