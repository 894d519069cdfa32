"""Trees on disk as lstat reports them: one walker, one entry type, one stat-keyed cache, one way
to delete a tree and one to make a temporary one, for everything in autoloop that looks at files."""

from __future__ import annotations

import gc
import hashlib
import os
import re
import shutil
import stat
import sys
import tempfile
from contextlib import contextmanager
from operator import attrgetter
from pathlib import Path
from typing import Any, Callable, Collection, Generic, Iterator, NamedTuple, TypeVar

# Timestamps tick coarsely (a jiffy on Linux; seconds on some filesystems): a file changed this
# close to the moment it was read may change again without its stat data changing.
RACY_NS = 100_000_000
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_KINDS = {stat.S_IFREG: "f", stat.S_IFDIR: "d", stat.S_IFLNK: "l"}
_S_IFMT, _S_IFDIR = 0o170000, stat.S_IFDIR   # as constants: used once per entry of every walk
T = TypeVar("T")
# temp_dir's names: autoloop-KIND-PID-START-WHERE- and mkdtemp's random letters
_TEMP_NAME = re.compile(r"autoloop-[a-z-]+?-(\d+)-(\d+)-([0-9a-f]{8})-[a-z0-9_]+")


class Entry(NamedTuple):
    """One path. `digest` is a symlink's target, or in a snapshot a file's content hash; a
    snapshot leaves the times and inode at 0 (content counts there, not when it was written)."""
    kind: str            # "f" file, "l" symlink, "d" directory, "o" other (fifo, socket, device)
    mode: int            # permission bits
    size: int = 0
    mtime_ns: int = 0
    ctime_ns: int = 0
    ino: int = 0
    digest: str = ""
    nlink: int = 1


UNREADABLE = Entry("o", 0, digest="unreadable")
_new = tuple.__new__


def kind_of(mode: int) -> str:
    return _KINDS.get(mode & _S_IFMT, "o")


def lstat_entry(path: str, dir_times: bool = False) -> Entry | None:
    try:
        return entry_of(os.lstat(path), path, dir_times)
    except OSError:
        return None


def entry_of(st: os.stat_result, path: str, dir_times: bool = False) -> Entry:
    """`path` as a watch sees it; a folder's times (moved by every entry) only with `dir_times`."""
    kind, mode = kind_of(st.st_mode), st.st_mode & 0o7777
    # tuple.__new__: Entry() runs Python code, and this runs for every entry of every picture
    if kind == "d" and not dir_times:
        return _new(Entry, (kind, mode, 0, 0, 0, st.st_ino, "", 1))
    return _new(Entry, (kind, mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino,
                        read_link(path) if kind == "l" else "", 1))


def read_link(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "?"


def walk(root: str, *, skip: Collection[str] = (), top_only: bool = False, ordered: bool = False,
         limit: int = sys.maxsize, make: Callable[[os.stat_result, str], Any] | None = None) -> list[tuple[str, str, Any]]:
    """(relative path, path, lstat) of everything under `root` (at most `limit`), folders before
    their entries, links not followed; lstat None for a folder that cannot be listed (a chmod 000
    is a state to see and undo). `ordered`: by name, so a walk cut short covers the same part
    each time. `make(lstat, path)`: what to keep of each entry instead of its lstat, made as the
    entry is seen (a picture of 100k entries then never holds 100k stat results at once). A list,
    not a generator: a walk of 100k entries costs a third less."""
    out: list[tuple[str, str, Any]] = []
    _walk(root, "", None, skip, top_only, ordered, limit, out, make)
    return out


# Middle-generation collections between two full ones (CPython's default is 10).
GC_FULL_EVERY = 1000


def calm_gc() -> None:
    """A run holds pictures of every tree it watches: at 100k files about a million NamedTuples,
    which the collector tracks for as long as they live. With CPython's default a full collection
    traversed all of them three times a cycle (430 ms each at 100k files, 3.9 s of a 3-cycle run
    against 0.3 s before the entries were NamedTuples). Cyclic garbage is collected young, where
    it is made; the long-lived objects are traversed only every GC_FULL_EVERY middle collections."""
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, GC_FULL_EVERY)


def _walk(path: str, prefix: str, parent_fd: int | None, skip: Collection[str], top_only: bool, ordered: bool,
          limit: int, out: list[tuple[str, str, Any]], make: Callable[[os.stat_result, str], Any] | None) -> None:
    # By descriptor: each lstat makes the kernel resolve one name, not the whole path from /, and
    # a folder swapped for a link mid-walk is not followed.
    try:
        fd = os.open(path if parent_fd is None else os.path.basename(path), _DIR_FLAGS, dir_fd=parent_fd)
    except OSError:
        out.append((prefix[:-1], path, None))
        return
    try:
        try:
            with os.scandir(fd) as it:
                entries = sorted(it, key=attrgetter("name")) if ordered else list(it)
        except OSError:
            out.append((prefix[:-1], path, None))
            return
        base, append = path + "/", out.append   # the loop below runs once per entry of the tree
        for e in entries:
            name = e.name
            rel = prefix + name
            if rel in skip:
                continue
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if len(out) >= limit:
                return
            full = base + name
            append((rel, full, st if make is None else make(st, full)))
            if not top_only and st.st_mode & _S_IFMT == _S_IFDIR:
                _walk(full, rel + "/", fd, skip, top_only, ordered, limit, out, make)
    finally:
        os.close(fd)


class Ident(NamedTuple):
    """A file's bytes stay the same while these do (ctime cannot be set back from user space)."""
    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int
    mode: int
    nlink: int
    dev: int


# a plain tuple in Ident's field order, made in C: compared once per file per walk
ident_of = attrgetter("st_ino", "st_size", "st_mtime_ns", "st_ctime_ns", "st_mode", "st_nlink", "st_dev")


class _Known(NamedTuple):
    ident: Ident
    value: Any


class StatCache(Generic[T]):
    """What was made of a file's bytes (a hash, the bytes), valid while its Ident stays; kept
    only when the file had last changed well before it was read (like git's racy entries)."""
    def __init__(self) -> None:
        self.known: dict[str, _Known] = {}

    def get(self, key: str, st: os.stat_result) -> T | None:
        hit = self.known.get(key)
        return hit.value if hit is not None and hit.ident == ident_of(st) else None  # type: ignore[no-any-return]

    def put(self, key: str, st: os.stat_result, value: T, read_at_ns: int) -> T:
        if max(st.st_mtime_ns, st.st_ctime_ns) + RACY_NS < read_at_ns:
            self.known[key] = _Known(Ident._make(ident_of(st)), value)
        else:
            self.known.pop(key, None)
        return value

    def retain(self, keys: Collection[str]) -> None:
        self.known = {k: v for k, v in self.known.items() if k in keys}


def remove_tree(path: Path, *, quiet: bool = False) -> None:
    """Remove a file, link or folder tree, first giving back the permissions a generator may
    have taken away. What still cannot go raises OSError, or with `quiet` stays."""

    def onerror(func: Callable[[str], object], p: str, exc: object) -> None:
        # gone already (another remover of the same tree got there first: a measurement's
        # scratch is deleted in the background while its parent folder is removed): done
        if isinstance(exc, tuple) and len(exc) > 1 and isinstance(exc[1], FileNotFoundError):
            return
        try:
            os.chmod(os.path.dirname(p), 0o700)
            if not os.path.islink(p):
                os.chmod(p, 0o700)
        except OSError:
            pass
        try:
            func(p)
        except FileNotFoundError:
            pass

    try:
        if path.is_symlink() or not path.is_dir():
            path.unlink(missing_ok=True)
        else:
            shutil.rmtree(path, onerror=onerror)
    except OSError:
        if not quiet:
            raise


def inside(path: str | Path, root: str | Path) -> bool:
    """Is `path` `root` or under it, both resolved?"""
    return under(os.path.realpath(path), os.path.realpath(root))


def under(path: str, root: str) -> bool:
    """`inside` for paths already resolved (no system calls: the sandbox asks thousands of times)."""
    return path == root or path.startswith(root.rstrip("/") + "/")


def worktrees_root() -> Path:
    """Where autoloop keeps every repository's private worktrees (and their scratch): outside any
    repository, so tools that look for configuration in the folders above their cwd (pytest,
    ruff, setuptools) do not find the user's checkout."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "autoloop" / "worktrees"


def temp_dir(kind: str) -> Path:
    """A fresh 0700 folder in the temp directory, named after `kind` and this process (pid, start
    time, and where those mean something), so that once the process is gone, killed or not,
    `left_behind` finds it."""
    pid = os.getpid()
    return Path(tempfile.mkdtemp(prefix=f"autoloop-{kind}-{pid}-{_started(pid)}-{_pid_space()}-"))


def _pid_space() -> str:
    """This boot of this machine and this PID namespace, in 8 hex digits: a temp directory shared
    with another container or host holds folders whose pids are not ours to look up."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        space = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        boot, space = "", 0
    return hashlib.blake2b(f"{boot}:{space}".encode(), digest_size=4).hexdigest()


@contextmanager
def temp_tree(kind: str) -> Iterator[Path]:
    """`temp_dir`, removed on the way out."""
    path = temp_dir(kind)
    try:
        yield path
    finally:
        remove_tree(path, quiet=True)


def _started(pid: int) -> int:
    """Seconds from boot to the start of `pid`: unlike its start on the wall clock, unmoved by a
    clock set or stepped by NTP while it runs (psutil reads both against the same boot time)."""
    import psutil
    return int(psutil.Process(pid).create_time() - psutil.boot_time())


def left_behind() -> list[Path]:
    """This user's `temp_dir` folders whose process is gone: its pid runs nothing, or a process
    started at another time (the pid was reused). A process psutil cannot read counts as alive."""
    import psutil
    found = []
    for rel, path, st in walk(tempfile.gettempdir(), top_only=True, ordered=True):
        m = _TEMP_NAME.fullmatch(rel)
        if m is None or m[3] != _pid_space() or st.st_mode & _S_IFMT != _S_IFDIR or st.st_uid != os.getuid():
            continue
        try:   # a second of slack: the boot time can read a second off (it keeps, never deletes)
            gone = abs(_started(int(m[1])) - int(m[2])) > 1
        except psutil.NoSuchProcess:
            gone = True
        except psutil.Error:
            gone = False
        if gone:
            found.append(Path(path))
    return found
