"""Which repo-relative paths the generator may create, modify or delete.

A pattern is matched against the whole repo-relative, `/`-separated path:

- `*` matches any run of characters within one segment (never `/`), `?` one such character,
  `[abc]`, `[a-z]`, `[!abc]` (or `[^abc]`) a character class within one segment;
- a `**` segment matches zero or more whole segments: `a/**` is everything under `a`,
  `**/x.py` is `x.py` at any depth (the root included), `a/**/b` is `a/b`, `a/x/b`, ...;
  `**` inside a segment (`a**`) is just `*`;
- a pattern without glob characters also matches everything under it, so `model` allows the
  directory `model/` as a whole; a trailing `/` (`model/`) means "everything under it".

`*` matches leading dots too (like .gitignore, unlike a shell): the generator works on files,
and hidden files are files. `.git` is the exception: no path with a `.git` segment is ever
allowed, whatever the patterns say.
"""

from __future__ import annotations

import re
from typing import Iterable, Mapping

# Characters HFS+ ignores in file names, so `.g\u200cit` *is* `.git` on a Mac, and NTFS drops
# trailing dots and spaces and knows `.git` as `GIT~1` (the CVE-2014-9390 family). Checking
# these costs nothing and keeps a crafted name from reaching the repository's own files.
_HFS_IGNORABLE = dict.fromkeys(
    [*range(0x200C, 0x2010), *range(0x202A, 0x202F), *range(0x206A, 0x2070), 0xFEFF]
)
_GIT_NAMES = (".git", "git~1")


def is_git_name(name: str) -> bool:
    """Is this one path segment the repository's `.git`, as some filesystem would see it?"""
    return name.translate(_HFS_IGNORABLE).casefold().rstrip(". ") in _GIT_NAMES


def is_git_path(path: str) -> bool:
    """Is `path` `.git` or inside a `.git` (at any depth: nested repositories count too)?"""
    return any(is_git_name(segment) for segment in path.split("/"))


def path_problem(path: str) -> str | None:
    """Why `path` is not a normalized repo-relative path, or None.

    A caller that passes `model/../.git/config` must not get it past `model/**`, so anything
    that is not already normalized is refused rather than normalized here.
    """
    if not path:
        return "empty path"
    if path.startswith("/"):
        return "absolute path"
    if any(segment in ("", ".", "..") for segment in path.split("/")):
        return "not a normalized repo-relative path"
    return None


def pattern_problem(pattern: str) -> str | None:
    """Why `pattern` is not a usable pattern (as a phrase: `'x' <problem>`), or None."""
    if not pattern.strip():
        return "is empty"
    if "\\" in pattern:
        return "contains a backslash; separate directories with '/'"
    if pattern.startswith("/"):
        return "is absolute; patterns are relative to the repository root"
    for segment in _segments(pattern):
        if segment == "":
            return "has an empty path segment ('//')"
        if segment == "..":
            return "contains '..'; patterns cannot leave the repository"
        if segment == ".":
            return "contains a '.' segment; write the path without './'"
    try:
        compile_pattern(pattern)
    except re.error as exc:
        return f"is not a valid glob ({exc})"
    return None


def touches_git(pattern: str) -> bool:
    """Would `pattern` name `.git` (or something in it) on purpose?

    Segments made only of `*` (`*`, `**`) are generic wildcards: they would also match `.git`,
    but `**/*.py` is a normal thing to allow and `.git` is excluded by PathRules anyway. Any
    other segment that matches `.git` (`.git`, `.g*`, `.*`, `?git`, `.GIT`) shows intent.
    """
    for segment in _segments(pattern):
        if not segment or set(segment) == {"*"}:
            continue
        if is_git_name(segment):
            return True
        rx = re.compile(_segment_regex(segment), re.IGNORECASE | re.DOTALL)
        if any(rx.fullmatch(name) for name in _GIT_NAMES):
            return True
    return False


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """The regex that fullmatches exactly the paths `pattern` names. Raises re.error."""
    literal = not any(c in pattern for c in "*?[")
    segments = _segments(pattern)
    if pattern.endswith("/"):
        # `model/` is the directory: everything under it, but not a file named `model`.
        segments = [*segments, "**"]
        literal = False
    regex = ""
    last = len(segments) - 1
    for i, segment in enumerate(segments):
        if segment == "**":
            # Zero or more whole segments before something else; one or more at the end, so
            # `a/**` does not match `a` itself (a file named `a` is not "under a").
            regex += "[^/]+(?:/[^/]+)*" if i == last else "(?:[^/]+/)*"
        else:
            regex += _segment_regex(segment) + ("" if i == last else "/")
    if literal:
        regex += "(?:/.*)?"
    return re.compile(regex, re.DOTALL)


def _segments(pattern: str) -> list[str]:
    # One trailing `/` is the directory marker, not an empty segment.
    return (pattern[:-1] if pattern.endswith("/") else pattern).split("/")


def _segment_regex(segment: str) -> str:
    """Translate one segment (no `/` in it) to a regex that never matches `/`."""
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
            j = i
            if j < n and segment[j] in "!^":
                j += 1
            if j < n and segment[j] == "]":     # a `]` first in a class is a member
                j += 1
            while j < n and segment[j] != "]":
                j += 1
            if j >= n:                          # unclosed: a literal `[`, as fnmatch does
                out.append(re.escape(c))
                continue
            members = segment[i:j]
            i = j + 1
            negate = members[0] in "!^"
            if negate:
                members = members[1:]
            # Escape every member but `-` so `[`, `^`, `&&` ... are plain characters.
            body = "".join(ch if ch == "-" else re.escape(ch) for ch in members)
            out.append(f"[^/{body}]" if negate else f"[{body}]")
        else:
            out.append(re.escape(c))
    return "".join(out)


class PathRules:
    """allowed minus forbidden minus protected minus `.git`: what the generator may change.

    `protected` maps exact repo-relative paths to a label for messages (a plain iterable gets
    no label); a protected path also covers everything under it, so protecting `.autoloop`
    protects the whole state directory.
    """

    __slots__ = ("allowed", "forbidden", "protected", "_allowed", "_forbidden")

    def __init__(self, allowed: Iterable[str], forbidden: Iterable[str] = (),
                 protected: Mapping[str, str] | Iterable[str] = ()) -> None:
        self.allowed: tuple[str, ...] = tuple(allowed)
        self.forbidden: tuple[str, ...] = tuple(forbidden)
        for pattern in (*self.allowed, *self.forbidden):
            problem = pattern_problem(pattern)
            if problem:
                raise ValueError(f"pattern {pattern!r} {problem}")
        if isinstance(protected, Mapping):
            self.protected: dict[str, str] = dict(protected)
        else:
            self.protected = dict.fromkeys(protected, "")
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
        if not any(rx.fullmatch(path) for rx in self._allowed):
            return "not in allowed"
        return None

    def allows(self, path: str) -> bool:
        return self.why_not(path) is None

    def violations(self, paths: Iterable[str]) -> dict[str, str]:
        """path -> reason for every path in `paths` that may not be changed, in input order."""
        out: dict[str, str] = {}
        for path in paths:
            reason = self.why_not(path)
            if reason is not None:
                out[path] = reason
        return out

    def __repr__(self) -> str:
        return (f"PathRules(allowed={self.allowed!r}, forbidden={self.forbidden!r}, "
                f"protected={self.protected!r})")
