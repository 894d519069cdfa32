"""git objects that autoloop writes itself: a candidate's blobs, trees and commit, as loose
objects in git's format, trees rebuilt only along the changed paths (git would take three
processes). pygit2 was measured (benchmarks/git_objects.py): faster, but libgit2 cannot open
SHA-256 repositories."""

from __future__ import annotations

import hashlib
import os
import stat
import threading
import time
import zlib
from pathlib import Path
from typing import Iterable, Mapping, NamedTuple

TREE = "40000"


class Entry(NamedTuple):
    mode: str   # as git writes it in a tree
    oid: str


Folders = dict[str, dict[str, Entry]]   # folder ("" for the top) -> name -> entry
_new = tuple.__new__   # a NamedTuple made without its __new__, which is Python code: per entry


class File(NamedTuple):
    mode: str
    oid: str
    path: str


class Trees:
    """One commit's folders, name by name, with their object ids; `path in trees` for its files
    and the folders above them."""

    def __init__(self, folders: Folders, root: str, *, base: "Trees | None" = None,
                 changed: Iterable[str] = ()) -> None:
        self.folders = folders
        self.root = root
        # folder -> every file under it, shared with the base where unchanged
        self._listed: dict[str, list[File]] = {}
        if base is not None:
            unchanged = set(base._listed) - set(changed)
            self._listed.update((f, base._listed[f]) for f in unchanged if f in folders)
        self._attr_key: tuple[tuple[str, str], ...] | None = None
        self._by_path: dict[str, Entry] | None = None
        self._names: frozenset[str] | None = None

    def __contains__(self, rel: object) -> bool:
        if not isinstance(rel, str) or not rel:
            return False
        parent, _, name = rel.rpartition("/")
        return name in self.folders.get(parent, {})

    def names(self) -> frozenset[str]:
        """What `in` answers True for, as one set: a whole picture is checked against it by a set
        difference rather than 100k calls of `__contains__`."""
        if self._names is None:
            self._names = frozenset(self.by_path()).union(f for f in self.folders if f)
        return self._names

    def by_path(self) -> dict[str, Entry]:
        if self._by_path is None:
            # the folders' own entries, not new ones: a commit of 100k files is 100k NamedTuples
            # fewer to make (Python code each) and for the garbage collector to follow
            self._by_path = {f"{folder}/{name}" if folder else name: e
                             for folder, entries in self.folders.items()
                             for name, e in entries.items() if e.mode != TREE}
        return self._by_path

    @classmethod
    def parse(cls, listing: str, root: str) -> "Trees":
        """From `git ls-tree -r -t -z --full-tree` of the commit whose tree is `root`."""
        folders: Folders = {"": {}}
        for item in listing.split("\0"):
            if not item:
                continue
            meta, _, path = item.partition("\t")
            mode, _kind, oid = meta.split(" ")
            parent, _, name = path.rpartition("/")
            mode = TREE if mode == "040000" else mode
            folders.setdefault(parent, {})[name] = _new(Entry, (mode, oid))   # Entry(), in C
            if mode == TREE:
                folders.setdefault(path, {})
        return cls(folders, root)

    def files(self, folder: str = "") -> list[File]:
        """(mode, oid, path) of every file under `folder`, in `git ls-tree -r` order."""
        got = self._listed.get(folder)
        if got is None:
            got = []
            prefix = folder + "/" if folder else ""
            for name, (mode, oid) in sorted(self.folders.get(folder, {}).items(),
                                            key=lambda kv: _sort_key(kv[0], kv[1].mode)):
                if mode == TREE:
                    got.extend(self.files(prefix + name))
                else:
                    got.append(File(mode, oid, prefix + name))
            self._listed[folder] = got
        return got

    def inherit_attr_key(self, base: "Trees") -> None:
        self._attr_key = base.attr_key()

    def attr_key(self) -> tuple[tuple[str, str], ...]:
        """The commit's .gitattributes files (path, blob): what its paths' attributes follow from."""
        if self._attr_key is None:
            self._attr_key = tuple((f.path, f.oid) for f in self.files()
                                   if f.path.rpartition("/")[2] == ".gitattributes")
        return self._attr_key


class ObjectStore:
    """Loose objects of one repository (`objects_dir`), hashed with `algo` (sha1 or sha256)."""

    def __init__(self, objects_dir: Path, algo: str) -> None:
        self.dir = objects_dir
        self.algo = algo

    def write(self, kind: str, body: bytes) -> str:
        raw = b"%s %d\0" % (kind.encode(), len(body)) + body
        oid = hashlib.new(self.algo, raw).hexdigest()
        folder = self.dir / oid[:2]
        final = folder / oid[2:]
        if final.exists():
            return oid
        folder.mkdir(exist_ok=True)
        # git's own name for a half-written object (`git prune` clears what a kill leaves);
        # unique per thread, as parallel workers write at once
        tmp = folder / f"tmp_obj_autoloop_{os.getpid()}_{threading.get_ident()}_{time.monotonic_ns()}"
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444), "wb") as f:
            f.write(zlib.compress(raw, 1))
        try:
            os.link(tmp, final)    # as git does: never replace an object that is there
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
        return oid

    def tree(self, entries: Mapping[str, Entry]) -> str:
        body = b"".join(
            mode.encode() + b" " + name.encode("utf-8", "surrogateescape") + b"\0" + bytes.fromhex(oid)
            for name, (mode, oid) in sorted(entries.items(), key=lambda kv: _sort_key(kv[0], kv[1].mode)))
        return self.write("tree", body)

    def commit(self, tree: str, parent: str, name: str, email: str, message: str,
               when: float | None = None) -> str:
        when = time.time() if when is None else when
        stamp = f"{int(when)} {time.strftime('%z', time.localtime(when))}"
        person = f"{_clean(name)} <{_clean(email)}> {stamp}"
        body = f"tree {tree}\nparent {parent}\nauthor {person}\ncommitter {person}\n\n{message}"
        return self.write("commit", body.encode("utf-8", "surrogateescape"))


def derive(base: Trees, changed: Mapping[str, Entry | None], store: ObjectStore) -> Trees:
    """`base` with the files `changed` (path -> new entry, or None: gone), its new trees written
    to `store`. A file may take a folder's place or a folder a file's; folders left empty go."""
    folders: Folders = dict(base.folders)   # shallow: the folders that change are copied
    copied: set[str] = set()

    def own(folder: str) -> dict[str, Entry]:
        """`folder`'s entries, to change: copied once, with every folder above it."""
        if folder not in copied:
            folders[folder] = dict(folders.get(folder, {}))
            copied.add(folder)
            if folder:
                own(folder.rpartition("/")[0])
        return folders[folder]

    for path in sorted(changed):
        entry = changed[path]
        parent, _, name = path.rpartition("/")
        if entry is None:
            if name in folders.get(parent, {}) and folders[parent][name].mode != TREE:
                del own(parent)[name]
            continue
        # every folder above it exists, as a folder (a file of that name gives way)
        above = ""
        for part in parent.split("/") if parent else []:
            here = f"{above}/{part}" if above else part
            got = folders.get(above, {}).get(part)
            if got is None or got.mode != TREE:
                own(above)[part] = Entry(TREE, "")
                folders[here] = {}
                copied.add(here)   # new: nothing of the base's to copy
            above = here
        own(parent)[name] = entry

    def seal(folder: str) -> str | None:
        """The id of changed `folder`'s new tree (written), None when it holds nothing."""
        entries = folders[folder]
        prefix = folder + "/" if folder else ""
        for name, (mode, _) in list(entries.items()):
            if mode == TREE and prefix + name in copied:
                sub = seal(prefix + name)
                if sub is None:
                    del entries[name]     # git keeps no empty folder
                else:
                    entries[name] = Entry(TREE, sub)
        if not entries and folder:
            return None
        return store.tree(entries)

    if not copied:
        return base
    root = seal("")
    assert root is not None
    return Trees({f: e for f, e in folders.items() if _reachable(folders, f)}, root, base=base, changed=copied)


def _reachable(folders: Folders, folder: str) -> bool:
    """Is `folder` still a folder of the tree (not dropped, nor replaced by a file above it)?"""
    if not folder:
        return True
    above = ""
    for part in folder.split("/"):
        got = folders.get(above, {}).get(part)
        if got is None or got.mode != TREE:
            return False
        above = f"{above}/{part}" if above else part
    return True


def _sort_key(name: str, mode: str) -> bytes:
    """git orders a tree's entries by name bytes, a folder as if its name ended in '/'."""
    raw = name.encode("utf-8", "surrogateescape")
    return raw + b"/" if mode == TREE else raw


def _clean(text: str) -> str:
    """git drops these from names and emails (they would break the header line)."""
    return text.replace("<", "").replace(">", "").replace("\n", " ").strip()


def changed_entries(root: Path, paths: Iterable[str], store: ObjectStore,
                    max_bytes: int | None = None) -> dict[str, Entry | None]:
    """path -> the blob git would store for the regular file there now, or None when there is
    no file (gone, or a folder now). Raises ValueError for anything else (a symlink, a fifo)."""
    out: dict[str, Entry | None] = {}
    for rel in paths:
        full = root / rel
        try:
            st = os.lstat(full)
        except (FileNotFoundError, NotADirectoryError):   # gone, or a file took a folder's place
            out[rel] = None
            continue
        if stat.S_ISDIR(st.st_mode):
            out[rel] = None
        elif not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{rel}: not a regular file")
        elif max_bytes is not None and st.st_size > max_bytes:
            raise ValueError(f"{rel} is larger than {max_bytes} bytes")
        else:
            blob = store.write("blob", full.read_bytes())
            out[rel] = Entry("100755" if st.st_mode & stat.S_IXUSR else "100644", blob)
    return out


def blob_id(data: bytes, algo: str) -> str:
    return hashlib.new(algo, b"blob %d\0" % len(data) + data).hexdigest()


def file_blob_id(path: str, algo: str) -> str:
    """git's id of the file's bytes as a blob, read in chunks (a tracked file may be large);
    "changing" when it grew or shrank while read."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        h = hashlib.new(algo)
        h.update(b"blob %d\0" % size)
        seen = 0
        while chunk := f.read(1 << 20):
            seen += len(chunk)
            h.update(chunk)
    return h.hexdigest() if seen == size else "changing"
