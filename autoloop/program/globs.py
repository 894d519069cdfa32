"""Which repo-relative paths the generator may create, modify or delete.

A pattern matches the whole `/`-separated repo-relative path. `*` is any run of characters in one
segment, `?` one, `[abc]`/`[a-z]`/`[!abc]` (or `[^abc]`) a class in one segment; a `**` segment
is zero or more whole segments (`a/**`: everything under `a`; `**/x.py`: `x.py` at any depth;
`a**` is `*`). A pattern without glob characters also names everything under it (`model`), as
does a trailing `/` (`model/`: only what is under it). `*` matches leading dots (hidden files
are files). No path with a `.git` segment is ever allowed, whatever the patterns say.
"""

from __future__ import annotations

import re
from typing import Iterable, Mapping

# Characters HFS+ ignores in names (so `.g\u200cit` *is* `.git` on a Mac), NTFS's trailing dots
# and spaces and its short name `GIT~1` (the CVE-2014-9390 family): a crafted name must not reach
# the repository's own files.
_HFS_IGNORABLE = dict.fromkeys([*range(0x200C, 0x2010), *range(0x202A, 0x202F), *range(0x206A, 0x2070), 0xFEFF])
_GIT_NAMES = (".git", "git~1")
_GLOB_CHARS = "*?["
_BAD_SEGMENTS = {"": "has an empty path segment ('//')", "..": "contains '..'; patterns cannot leave the repository",
                 ".": "contains a '.' segment; write the path without './'"}


def is_git_name(name: str) -> bool:
    """Is this one path segment the repository's `.git`, as some filesystem would see it?"""
    return name.translate(_HFS_IGNORABLE).casefold().rstrip(". ") in _GIT_NAMES


def is_git_path(path: str) -> bool:
    """Is `path` `.git` or inside a `.git` (at any depth: nested repositories count too)?"""
    return any(is_git_name(segment) for segment in path.split("/"))


def path_problem(path: str) -> str | None:
    """Why `path` is not a normalized repo-relative path (`a/../.git` is refused, not normalized)."""
    if not path:
        return "empty path"
    if path.startswith("/"):
        return "absolute path"
    if any(segment in ("", ".", "..") for segment in path.split("/")):
        return "not a normalized repo-relative path"
    return None


def pattern_problem(pattern: str) -> str | None:
    """Why `pattern` is not usable (a phrase: `'x' <problem>`), or None."""
    if not pattern.strip():
        return "is empty"
    if "\\" in pattern:
        return "contains a backslash; separate directories with '/'"
    if pattern.startswith("/"):
        return "is absolute; patterns are relative to the repository root"
    for segment in _segments(pattern):
        if segment in _BAD_SEGMENTS:
            return _BAD_SEGMENTS[segment]
    try:
        compile_pattern(pattern)
    except re.error as exc:
        return f"is not a valid glob ({exc})"
    return None


def touches_git(pattern: str) -> bool:
    """Would `pattern` name `.git` (or something in it) on purpose? Segments of only `*` would
    match it too but are generic (`**/*.py` is normal to allow); any other segment matching
    `.git` (`.git`, `.g*`, `.*`, `?git`, `.GIT`) shows intent."""
    for segment in _segments(pattern):
        if not segment or set(segment) == {"*"}:
            continue
        rx = re.compile(_segment_regex(segment), re.IGNORECASE | re.DOTALL)
        if is_git_name(segment) or any(rx.fullmatch(name) for name in _GIT_NAMES):
            return True
    return False


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """The regex that fullmatches exactly the paths `pattern` names. Raises re.error."""
    literal = not any(c in pattern for c in _GLOB_CHARS)
    segments = _segments(pattern)
    if pattern.endswith("/"):   # the directory: everything under it, not a file of that name
        segments, literal = [*segments, "**"], False
    regex = ""
    last = len(segments) - 1
    for i, segment in enumerate(segments):
        if segment == "**":
            # zero or more whole segments before something else; one or more at the end, so
            # `a/**` does not match a file named `a`
            regex += "[^/]+(?:/[^/]+)*" if i == last else "(?:[^/]+/)*"
        else:
            regex += _segment_regex(segment) + ("" if i == last else "/")
    return re.compile(regex + ("(?:/.*)?" if literal else ""), re.DOTALL)


def _segments(pattern: str) -> list[str]:
    return (pattern[:-1] if pattern.endswith("/") else pattern).split("/")   # a trailing / marks a folder


def _segment_regex(segment: str) -> str:
    """One segment (no `/`) as a regex that never matches `/`."""
    out: list[str] = []
    i, n = 0, len(segment)
    while i < n:
        c = segment[i]
        i += 1
        if c == "*":
            while i < n and segment[i] == "*":
                i += 1
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            j = i + (i < n and segment[i] in "!^")
            j += j < n and segment[j] == "]"      # a `]` first in a class is a member
            while j < n and segment[j] != "]":
                j += 1
            if j >= n:                            # unclosed: a literal `[`, as fnmatch does
                out.append(re.escape(c))
                continue
            members, i = segment[i:j], j + 1
            negate = members[0] in "!^"
            # every member but `-` escaped, so `[`, `^`, `&&` ... are plain characters
            body = "".join(ch if ch == "-" else re.escape(ch) for ch in members[negate:])
            out.append(f"[^/{body}]" if negate else f"[{body}]")
        else:
            out.append(re.escape(c))
    return "".join(out)


class PathRules:
    """allowed − forbidden − protected − `.git`: what the generator may change. `protected`:
    exact paths (each covering what is under it) with a label for messages."""

    __slots__ = ("allowed", "forbidden", "protected", "_allowed", "_forbidden")

    def __init__(self, allowed: Iterable[str], forbidden: Iterable[str] = (),
                 protected: Mapping[str, str] | Iterable[str] = ()) -> None:
        self.allowed: tuple[str, ...] = tuple(allowed)
        self.forbidden: tuple[str, ...] = tuple(forbidden)
        for pattern in (*self.allowed, *self.forbidden):
            problem = pattern_problem(pattern)
            if problem:
                raise ValueError(f"pattern {pattern!r} {problem}")
        self.protected: dict[str, str] = dict(protected) if isinstance(protected, Mapping) \
            else dict.fromkeys(protected, "")
        for path in self.protected:
            problem = path_problem(path)
            if problem:
                raise ValueError(f"protected path {path!r}: {problem}")
        self._allowed = tuple(compile_pattern(p) for p in self.allowed)
        self._forbidden = tuple((p, compile_pattern(p)) for p in self.forbidden)

    def why_not(self, path: str) -> str | None:
        """None if the generator may change `path`, else the reason, e.g. `not in allowed`."""
        problem = path_problem(path)
        if problem:
            return problem
        if is_git_path(path):
            return "inside .git"
        for protected, label in self.protected.items():
            if path == protected or path.startswith(protected + "/"):
                return f"protected ({label})" if label else "protected"
        for pattern, rx in self._forbidden:
            if rx.fullmatch(path):
                return f"forbidden by {pattern!r}"
        return None if any(rx.fullmatch(path) for rx in self._allowed) else "not in allowed"

    def allows(self, path: str) -> bool:
        return self.why_not(path) is None
