"""Your global and system git config, frozen for the length of a run: a filter or attributes
file planted in them (or in a file they include) during the run never runs inside our git
calls, while LFS and the other filters you had keep working."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from autoloop.gitrun import git_env, run, set_frozen_config
from autoloop.filememo import write_new

_ATTRIBUTES_MAX = 4 << 20


def outer_git_config() -> dict[Path, str]:
    """The global and system git config files (and the global attributes file) git would read."""
    home = Path.home()
    xdg = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config") / "git"
    out: dict[Path, str] = {}
    if os.environ.get("GIT_CONFIG_GLOBAL"):
        out[Path(os.environ["GIT_CONFIG_GLOBAL"])] = "your global git config"
    else:
        out[home / ".gitconfig"] = "your global git config"
        out[xdg / "config"] = "your global git config"
    out[xdg / "attributes"] = "your global git attributes"
    if os.environ.get("GIT_CONFIG_SYSTEM"):
        out[Path(os.environ["GIT_CONFIG_SYSTEM"])] = "the system git config"
    elif not os.environ.get("GIT_CONFIG_NOSYSTEM"):
        out[Path("/etc/gitconfig")] = "the system git config"
    return {p: label for p, label in out.items() if str(p) not in ("/dev/null", "")}


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t") + '"'


def _outer_entries(repo_root: Path) -> list[tuple[str, str, str | None]]:
    """(origin file, key, value or None for a bare boolean) of the system and global config, in
    the order git reads them, includes (`include.path`, `includeIf` as they apply to this
    repository) resolved."""
    out: list[tuple[str, str, str | None]] = []
    scopes = ["--global"] if git_env().get("GIT_CONFIG_NOSYSTEM") else ["--system", "--global"]
    for scope in scopes:
        proc = run(repo_root, "config", scope, "--includes", "--show-origin", "--list", "-z")
        if proc.returncode != 0:
            continue   # no such file: nothing to freeze
        items = proc.stdout.decode("utf-8", "surrogateescape").split("\0")
        for origin, entry in zip(items[0::2], items[1::2]):
            key, sep, value = entry.partition("\n")
            out.append((origin.removeprefix("file:"), key, value if sep else None))
    return out


def _read_attributes(path: Path) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return b""
    try:
        return os.read(fd, _ATTRIBUTES_MAX) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
    except OSError:
        return b""
    finally:
        os.close(fd)


def freeze_outer_config(repo_root: Path, dest: Path) -> dict[Path, str]:
    """Write the system and global git config as they are now, includes resolved, into one file
    in `dest` (with a copy of the global attributes file), and point every later git call of
    autoloop at it. Returns the files the copy came from, for the integrity check (a change to
    them is a violation, undone)."""
    thaw_outer_config()
    sources: dict[Path, str] = {}
    lines: list[str] = []
    attributes: str | None = None
    for origin, key, value in _outer_entries(repo_root):
        if origin and origin not in ("-", "command line:"):
            sources.setdefault(Path(origin), "a file your git config includes")
        section, _, rest = key.partition(".")
        sub, _, name = rest.rpartition(".")
        if section.lower() == "core" and not sub and name.lower() == "attributesfile" and value is not None:
            attributes = value
            continue
        lines.append(f"[{section} {_quote(sub)}]" if sub else f"[{section}]")
        lines.append(f"\t{name}" if value is None else f"\t{name} = {_quote(value)}")
    if attributes is None:
        xdg = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
        attributes = os.path.join(xdg, "git", "attributes")
    attr_src = Path(os.path.expanduser(attributes))
    if not attr_src.is_absolute():
        attr_src = repo_root / attr_src
    dest.mkdir(parents=True, exist_ok=True)
    sources.setdefault(attr_src, "your global git attributes")
    # an attributes file that did not exist when the run started stays empty for our calls
    write_new(dest / "attributes", _read_attributes(attr_src))
    lines += ["[core]", f"\tattributesFile = {_quote(str(dest / 'attributes'))}"]
    write_new(dest / "config", ("\n".join(lines) + "\n").encode("utf-8", "surrogateescape"))
    set_frozen_config({"GIT_CONFIG_GLOBAL": str(dest / "config"), "GIT_CONFIG_NOSYSTEM": "1"})
    sources[dest] = "autoloop's copy of your git config"
    return sources


def thaw_outer_config() -> None:
    set_frozen_config({})
