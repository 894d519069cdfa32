"""autoloop's own bytecode cache (DESIGN.md §4, last bullet). A measurement's fresh, empty
PYTHONPYCACHEPREFIX (no planted bytecode is read) made Python children 2–3× slower, so each
starts as a copy of part of this cache: checked-hash `.pyc` files (PEP 552) that autoloop compiled
with the measured interpreter, used by Python only when the imported source hashes to the recorded
value. What a measurement writes only tells which sources to compile here anew.

A step gets the files *that step* needed before, not the whole cache: a pytest guard fills it
with hundreds of modules a benchmark never imports, and copying them all into every verifier run
cost more than the run saved (≈ 0.17 s a copy of 250 files, three copies a scored run; 20 s of a
63 s three-cycle run in the profile). A copy, not a link: a measurement may write into what it
was given, and a linked file would carry that into the cache."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import stat
import sys
import subprocess
import threading
import weakref
from pathlib import Path
from typing import Mapping, Sequence

from autoloop.process import envs
from autoloop.process.logfile import read_regular
from autoloop.process.running import run_captured
from autoloop.base.walk import remove_tree, temp_dir, walk

# PREFIX/<source folder>/<name>.<cache tag>[.opt-N].pyc, and pytest's assertion-rewritten
# <name>.<cache tag>-pytest-<version>.pyc (checked-hash since pytest 8.4; older ones: not imitated)
_PYC = re.compile(r"(?P<name>[^.]+)\.(?P<tag>[a-z]+-\d+)(?P<pytest>-pytest-[0-9A-Za-z.+]+)?"
                  r"(?:\.opt-(?P<opt>\d))?\.pyc")
MAX_SOURCE_BYTES = 4 << 20      # a source larger than this is left to the measurement to compile
MAX_PER_BATCH = 20_000
_QUERY_TIMEOUT_S, _COMPILE_TIMEOUT_S = 30, 300

# Run by the measured interpreter itself (its magic number, its cache tag), isolated (-I);
# pytest's rewritten modules by pytest's own rewriter (no config), only for this pytest's own tag
# and only when it writes checked-hash files.
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
    """The cache under `root`, compiled by each of `interpreters` for its own cache tag."""

    def __init__(self, root: Path, interpreters: Sequence[str], env: Mapping[str, str]) -> None:
        self.root = root
        self.env = dict(env)
        self._by_tag: dict[str, str] = {}
        for exe in interpreters:
            tag = _run(exe, _TAG_QUERY, "", self.env, _QUERY_TIMEOUT_S).strip()
            if tag and tag not in self._by_tag:
                self._by_tag[tag] = exe
        # by step (a guard, the verifier, the score...): the cache's files it needed so far
        self._needs: dict[str, set[str]] = {}
        self._seeded: dict[Path, tuple[str, bool, dict[str, tuple[tuple[int, int], int]]]] = {}

    @property
    def usable(self) -> bool:
        return bool(self._by_tag)

    def seed(self, prefix: Path, step: str) -> None:
        """Fill a measurement's fresh prefix, for `step`, with a copy of the cache's files that
        step needed before; remember what was copied. A step seen for the first time gets the
        whole cache, each copy marked unread (its access time at the epoch): what it reads or
        writes is what it needs from then on. (Where access times are not kept, only what it
        wrote is learnt, and its next run compiles the rest once more: slower, never wrong.)"""
        first = step not in self._needs
        made: set[str] = set()
        for rel in sorted(_files(self.root) if first else self._needs[step]):
            folder = rel.rpartition("/")[0]
            if folder not in made:
                (prefix / folder).mkdir(parents=True, exist_ok=True)
                made.add(folder)
            try:
                shutil.copyfile(self.root / rel, prefix / rel)
                if first:
                    os.utime(prefix / rel, ns=(_UNREAD_NS, os.stat(prefix / rel).st_mtime_ns))
            except FileNotFoundError:
                pass
        self._needs.setdefault(step, set())
        self._seeded[prefix] = (step, first, _files(prefix))

    def learn(self, prefix: Path) -> int:
        """After a measurement: compile, into the cache, the sources whose bytecode it had to
        write itself (absent from its copy, or stale) and the cache does not hold as they are
        now; the step needs them from now on. Returns how many were compiled."""
        step, first, before = self._seeded.pop(prefix, ("", False, {}))
        needs = self._needs.setdefault(step, set()) if step else set()
        todo: dict[str, list[list[object]]] = {}
        for rel, (ident, atime_ns) in _files(prefix).items():
            if before.get(rel, (None,))[0] == ident:
                if first and atime_ns != _UNREAD_NS:
                    needs.add(rel)   # the copy of ours, read
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
            if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_SOURCE_BYTES:
                continue          # a FIFO named like a source would block whoever reads it
            if _compiled_from(self.root / rel, source):
                needs.add(rel)       # ours already (another step compiled it): nothing to do
                continue
            todo.setdefault(m.group("tag"), []).append(
                [source, str(self.root / rel), int(m.group("opt") or 0), bool(m.group("pytest"))])
        compiled = 0
        for tag, items in todo.items():
            for i in range(0, len(items), MAX_PER_BATCH):
                out = _run(self._by_tag[tag], _COMPILE, json.dumps(items[i:i + MAX_PER_BATCH]), self.env,
                           _COMPILE_TIMEOUT_S).strip()
                compiled += int(out) if out.isdigit() else 0
        root = str(self.root)
        needs.update(os.path.relpath(str(item[1]), root) for items in todo.values() for item in items
                     if os.path.isfile(str(item[1])))
        return compiled

    def forget(self, prefix: Path) -> None:
        self._seeded.pop(prefix, None)


class WarmCache:
    """autoloop's bytecode cache for measurements taken outside a run, one after another in one
    process (`doctor --probe` measures the same project 20 to 60 times): made at the first seed,
    in a temporary folder of its own that sandboxed measurements cannot write, and removed
    with this object. Without it each of their Pythons compiled every import anew (a pytest
    guard of two tests: 2.0 s cold, 0.5 s warm)."""

    def __init__(self, interpreters: Sequence[str], env: Mapping[str, str]) -> None:
        self._lock = threading.Lock()
        self._interpreters, self._env = list(interpreters), dict(env)
        self._cache: ProvenCache | None = None
        self._built = False

    def seed_bytecode(self, prefix: Path, step: str) -> ProvenCache | None:
        with self._lock:
            if not self._built:
                self._built = True
                self._cache = self._make()
            if self._cache is not None:
                self._cache.seed(prefix, step)
            return self._cache

    def learn_bytecode(self, cache: ProvenCache | None, prefix: Path) -> None:
        if cache is not None:
            with self._lock:
                cache.learn(prefix)

    def _make(self) -> ProvenCache | None:
        if not self._interpreters:
            return None
        folder = temp_dir("pycache")
        weakref.finalize(self, remove_tree, folder, quiet=True)
        (folder / "cache").mkdir()
        cache = ProvenCache(folder / "cache", self._interpreters, envs.scrubbed(self._env, scratch=folder / "env"))
        return cache if cache.usable else None


_UNREAD_NS = 1   # the access time a first seed gives its copies (the kernel's relatime moves it on a read)


def _files(root: Path) -> dict[str, tuple[tuple[int, int], int]]:
    """((inode, mtime), access time) of every entry but folders under root, by relative path."""
    return {rel: ((st.st_ino, st.st_mtime_ns), st.st_atime_ns) for rel, _, st in walk(str(root))
            if st is not None and not stat.S_ISDIR(st.st_mode)}


def _compiled_from(cfile: Path, source: str) -> bool:
    """Whether `cfile`, in the cache, is checked-hash bytecode of `source` as it is now (PEP 552:
    flags 3, then the source's hash). Read without following a link or blocking on a FIFO."""
    head = read_regular(cfile, 16)
    data = read_regular(Path(source), MAX_SOURCE_BYTES) if len(head) == 16 else b""
    return (bool(data) and head[4:8] == b"\x03\x00\x00\x00"
            and head[8:16] == importlib.util.source_hash(data))


def _run(exe: str, code: str, stdin: str, env: Mapping[str, str], timeout: float) -> str:
    """The standard output of `code` run by `exe`, isolated, or "" when it failed."""
    try:
        res = run_captured([exe, "-I", "-c", code], cwd=Path("/"), env=dict(env), timeout=timeout,
                           input=stdin.encode())
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return res.stdout.decode(errors="replace") if res.returncode == 0 else ""


def loaded_bytecode_name(name: str) -> bool:
    """Whether this interpreter's import loads a file of that name from a `__pycache__` folder."""
    m = _PYC.fullmatch(name)
    return m is not None and not m["pytest"] and m["tag"] == sys.implementation.cache_tag


def written_by_import(pyc: Path) -> bool:
    """Whether `pyc` (in a `__pycache__` folder) is what this interpreter writes when it imports
    the source beside that folder: its magic number and cache tag, a header that matches the
    source, and the very code the source compiles to. Such a file runs nothing the source does
    not; anything else (another Python's, stale, or planted) is not."""
    import marshal

    m = _PYC.fullmatch(pyc.name)
    if m is None or not loaded_bytecode_name(pyc.name) or pyc.parent.name != "__pycache__":
        return False
    src = pyc.parent.parent / f"{m['name']}.py"
    try:
        data, source = pyc.read_bytes(), src.read_bytes()
        st = src.stat()
    except OSError:
        return False
    if len(data) < 16 or data[:4] != importlib.util.MAGIC_NUMBER:
        return False
    flags = int.from_bytes(data[4:8], "little")
    if flags == 0:
        if (int.from_bytes(data[8:12], "little") != int(st.st_mtime) & 0xFFFFFFFF
                or int.from_bytes(data[12:16], "little") != st.st_size & 0xFFFFFFFF):
            return False
    elif flags & ~3 or data[8:16] != importlib.util.source_hash(source):
        return False
    try:
        code = marshal.loads(data[16:])
        return bool(code == compile(source, str(src), "exec", dont_inherit=True, optimize=int(m["opt"] or 0)))
    except (ValueError, TypeError, EOFError, SyntaxError):
        return False


def import_wrote(root: Path, rel: str) -> bool:
    """Whether a change at `rel` in the package folder `root` is one an import makes, under a
    `__pycache__` folder: the folder itself, a file gone, one this interpreter never loads
    (Python writes NAME.pyc.ID, then renames it), or bytecode that is exactly the compiled source."""
    parts = rel.split("/")
    if "__pycache__" not in parts[:-1] and parts[-1] != "__pycache__":
        return False
    path = root / rel
    if parts[-1] == "__pycache__":
        return path.is_dir() and not path.is_symlink()
    if not os.path.lexists(path):
        return True
    if parts[-2] != "__pycache__" or not loaded_bytecode_name(parts[-1]):
        return True
    return not path.is_symlink() and path.is_file() and written_by_import(path)
