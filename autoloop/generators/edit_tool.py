"""One executor for Anthropic's text-editor tool (`str_replace_based_edit_tool`), used by both
SDK generators. Paths are relative to the work tree or absolute inside it; `..`, paths outside,
a symlink anywhere along the path (lstat on every component), `.git` and anything not a regular
file or directory are refused, and writes unless `is_allowed(rel)`. A refusal is a tool error
returned to the model, never an exception, and never touches the disk; writes replace the
target with a new file, so a hard link cannot carry an edit away. Commands are those of
`text_editor_20250728` (no `undo_edit`); `insert` also takes `new_str`, as the docs once said."""

from __future__ import annotations

import json
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Literal, Mapping, Sequence

TOOL_NAME = "str_replace_based_edit_tool"
COMMANDS: tuple[str, ...] = ("view", "create", "str_replace", "insert")
WRITE_COMMANDS: frozenset[str] = frozenset({"create", "str_replace", "insert"})
MAX_VIEW_CHARS = 50_000            # characters of one view result before it is clipped
MAX_DIR_ENTRIES = 400              # lines of one directory listing
MAX_FILE_BYTES = 4 * 1024 * 1024   # larger files are refused by every command
_LIST_DEPTH = 2

Status = Literal["ok", "refused", "error"]


@dataclass(frozen=True)
class ToolCall:
    command: str
    path: str                  # as the model gave it
    rel: str | None            # resolved repo-relative path ("" = the tree itself), None if unresolved
    status: Status             # ok | refused (policy) | error (bad input, missing file, ...)
    reason: str | None = None


@dataclass(frozen=True)
class ToolResult:
    content: str
    is_error: bool = False


class _Refused(Exception):
    """A policy refusal (escape, .git, symlink, not allowed)."""


class _Failed(Exception):
    """A command that cannot be carried out (bad input, missing file, ...)."""


def _regular(rel: str, st: os.stat_result) -> None:
    if stat.S_ISDIR(st.st_mode):
        raise _Failed(f"{rel!r} is a directory")
    if not stat.S_ISREG(st.st_mode):
        raise _Failed(f"{rel!r} is not a regular file")


def _split_lines(text: str) -> list[str]:
    """Lines with their `\\n` kept; only `\\n` separates lines (unlike str.splitlines)."""
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


class EditTool:
    """Executes text-editor commands inside `workdir`; `calls` records each. `allowed_hint` is
    quoted back to the model when a write is refused."""

    def __init__(self, workdir: Path, is_allowed: Callable[[str], bool], *,
                 allowed_hint: Sequence[str] = (), max_view_chars: int = MAX_VIEW_CHARS,
                 max_dir_entries: int = MAX_DIR_ENTRIES, max_file_bytes: int = MAX_FILE_BYTES) -> None:
        self.root = Path(os.path.abspath(workdir))
        self._root_real = Path(os.path.realpath(workdir))
        self._is_allowed = is_allowed
        self._allowed_hint = tuple(allowed_hint)
        self.max_view_chars = max_view_chars
        self.max_dir_entries = max_dir_entries
        self.max_file_bytes = max_file_bytes
        self.calls: list[ToolCall] = []

    @property
    def refused(self) -> list[ToolCall]:
        return [c for c in self.calls if c.status == "refused"]

    @property
    def written(self) -> list[str]:
        return list(dict.fromkeys(c.rel for c in self.calls
                                  if c.status == "ok" and c.command in WRITE_COMMANDS and c.rel))

    def run_json(self, raw: str | None) -> ToolResult:
        try:
            args = json.loads(raw or "{}")
        except (TypeError, ValueError) as exc:
            return self._record("?", "", None, "error", f"could not parse the tool arguments as JSON "
                                                       f"({exc}); send one JSON object with `command` and `path`")
        return self.run(args)

    def run(self, args: object) -> ToolResult:
        """Execute one command. Never raises for anything the model can send."""
        if not isinstance(args, Mapping):
            return self._record("?", "", None, "error",
                                "the tool input must be a JSON object with `command` and `path`")
        command, raw_path = args.get("command"), args.get("path")
        command_s = command if isinstance(command, str) else repr(command)
        path_s = raw_path if isinstance(raw_path, str) else ("" if raw_path is None else repr(raw_path))
        rel: str | None = None
        try:
            if command not in COMMANDS:
                raise _Failed(f"unknown command {command_s}; use one of: {', '.join(COMMANDS)}")
            if not isinstance(raw_path, str):
                raise _Failed("`path` is required and must be a string")
            rel = self._resolve(raw_path)
            if command in WRITE_COMMANDS:
                self._check_writable(rel)
            message: str = getattr(self, f"_cmd_{command}")(rel, args)
        except _Refused as exc:
            return self._record(command_s, path_s, rel, "refused", str(exc))
        except _Failed as exc:
            return self._record(command_s, path_s, rel, "error", str(exc))
        except OSError as exc:
            return self._record(command_s, path_s, rel, "error",
                                f"{exc.strerror or exc.__class__.__name__} ({rel or '.'})")
        self.calls.append(ToolCall(command_s, path_s, rel, "ok"))
        return ToolResult(message)

    def _record(self, command: str, path: str, rel: str | None, status: Status, reason: str) -> ToolResult:
        self.calls.append(ToolCall(command, path, rel, status, reason))
        return ToolResult(("Error: refused: " if status == "refused" else "Error: ") + reason, is_error=True)

    def _resolve(self, raw: str) -> str:
        """Model path -> repo-relative path, or _Refused. Reads nothing but lstat."""
        if "\x00" in raw:
            raise _Failed("the path contains a NUL byte")
        pure = PurePosixPath(raw)
        if ".." in pure.parts:
            raise _Refused(f"{raw!r} contains '..'; paths must stay inside the work tree {self.root}")
        parts: tuple[str, ...] | None = pure.parts
        if pure.is_absolute():
            roots = [PurePosixPath(r.as_posix()).parts for r in (self.root, self._root_real)]
            parts = next((pure.parts[len(r):] for r in roots if pure.parts[:len(r)] == r), None)
            if parts is None:
                raise _Refused(f"{raw!r} is outside the work tree {self.root}; use a path relative to it")
        parts = tuple(p for p in parts if p not in ("", "."))
        if any(part.lower() == ".git" for part in parts):
            raise _Refused(f"{raw!r} is inside .git, which the generator may not touch")
        # no symlink anywhere: a link could lead out of the tree or onto a protected file
        current = self.root
        for i, part in enumerate(parts):
            current = current / part
            try:
                st = os.lstat(current)
            except FileNotFoundError:
                break
            except NotADirectoryError:
                raise _Failed(f"{'/'.join(parts[:i])!r} is not a directory") from None
            if stat.S_ISLNK(st.st_mode):
                raise _Refused(f"{'/'.join(parts[:i + 1])!r} is a symbolic link; "
                               "the edit tool does not follow links")
        return "/".join(parts)

    def _check_writable(self, rel: str) -> None:
        if not rel:
            raise _Refused("the work tree itself cannot be written; give a file path")
        try:
            allowed = bool(self._is_allowed(rel))
        except Exception:   # a broken predicate must fail closed
            allowed = False
        if not allowed:
            hint = f" (allowed: {', '.join(self._allowed_hint)})" if self._allowed_hint else ""
            raise _Refused(f"{rel!r} is not in the paths this run may change{hint}. Nothing was written.")

    def _lstat(self, rel: str) -> os.stat_result | None:
        try:
            return os.lstat(self.root / rel)
        except FileNotFoundError:
            return None

    def _read_text(self, rel: str, st: os.stat_result | None) -> str:
        if st is None:
            raise _Failed(f"{rel!r} does not exist")
        _regular(rel, st)
        if st.st_size > self.max_file_bytes:
            raise _Failed(f"{rel!r} is too large for the edit tool ({st.st_size} bytes; "
                          f"limit {self.max_file_bytes})")
        data = (self.root / rel).read_bytes()
        if b"\x00" in data:
            raise _Failed(f"{rel!r} looks binary; the edit tool only handles text files")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise _Failed(f"{rel!r} is not valid UTF-8 text") from None

    def _write_text(self, rel: str, text: str) -> bool:
        """Write `text` to `rel`; True if the file was new. Never writes through a link."""
        target, data = self.root / rel, text.encode("utf-8")
        if len(data) > self.max_file_bytes:
            raise _Failed(f"the new content of {rel!r} is too large ({len(data)} bytes; "
                          f"limit {self.max_file_bytes})")
        st = self._lstat(rel)
        if st is None:
            target.parent.mkdir(parents=True, exist_ok=True)
            self._resolve(rel)   # again, now that the parents exist: none may be a link
            with os.fdopen(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), "wb") as fh:
                fh.write(data)
            return True
        _regular(rel, st)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".autoloop-tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.chmod(tmp, stat.S_IMODE(st.st_mode))
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return False

    def _cmd_view(self, rel: str, args: Mapping[str, Any]) -> str:
        st = self._lstat(rel)
        if st is None:
            raise _Failed(f"{rel or '.'!r} does not exist")
        view_range = args.get("view_range")
        if stat.S_ISDIR(st.st_mode):
            if view_range is not None:
                raise _Failed("`view_range` only applies to files, not directories")
            return self._list_dir(rel)
        lines = _split_lines(self._read_text(rel, st))
        start, end = 1, len(lines)
        if view_range is not None:
            if (not isinstance(view_range, (list, tuple)) or len(view_range) != 2
                    or not all(isinstance(v, int) and not isinstance(v, bool) for v in view_range)):
                raise _Failed("`view_range` must be two integers [start, end] (end -1 = to the end)")
            start, end = int(view_range[0]), int(view_range[1])
            end = len(lines) if end == -1 else end
            if start < 1 or start > max(len(lines), 1) or end < start or end > len(lines):
                raise _Failed(f"invalid `view_range` {list(view_range)}: the file has {len(lines)} lines "
                              "(lines are numbered from 1; end must be >= start, or -1)")
        if not lines:
            return f"{rel} is empty."
        out = "".join(f"{n:6}\t{lines[n - 1].rstrip(chr(10))}\n" for n in range(start, end + 1))
        return self._clip(out, f"use `view_range` to see the rest of {rel}")

    def _list_dir(self, rel: str) -> str:
        entries: list[str] = []
        clipped = False

        def walk(directory: Path, prefix: str, depth: int) -> None:
            nonlocal clipped
            try:
                children = sorted(os.scandir(directory), key=lambda e: e.name)
            except OSError:
                return
            for entry in (e for e in children if not e.name.startswith(".")):
                if len(entries) >= self.max_dir_entries:
                    clipped = True
                    return
                shown = f"{prefix}{entry.name}"
                if entry.is_symlink():
                    entries.append(f"{shown} (symlink, not followed)")
                elif entry.is_dir(follow_symlinks=False):
                    entries.append(shown + "/")
                    if depth < _LIST_DEPTH:
                        walk(Path(entry.path), shown + "/", depth + 1)
                else:
                    entries.append(shown)

        walk(self.root / rel, f"{rel}/" if rel else "", 1)
        body = "\n".join(entries) if entries else "(empty)"
        if clipped:
            body += f"\n... listing clipped at {self.max_dir_entries} entries; view a subdirectory"
        return self._clip(f"Files and directories up to 2 levels deep in {rel or '.'} (hidden entries "
                          f"excluded):\n{body}\n", "view a subdirectory")

    def _clip(self, text: str, advice: str) -> str:
        if len(text) <= self.max_view_chars:
            return text
        more = len(text) - self.max_view_chars
        return text[:self.max_view_chars] + f"\n<response clipped: {more} more characters; {advice}>\n"

    def _cmd_create(self, rel: str, args: Mapping[str, Any]) -> str:
        file_text = args.get("file_text")
        if not isinstance(file_text, str):
            raise _Failed("`file_text` is required for `create` and must be a string")
        return f"Created {rel}." if self._write_text(rel, file_text) else f"Overwrote {rel}."

    def _cmd_str_replace(self, rel: str, args: Mapping[str, Any]) -> str:
        old, new = args.get("old_str"), args.get("new_str")
        new = "" if new is None else new
        if not isinstance(old, str) or old == "":
            raise _Failed("`old_str` is required for `str_replace` and must be a non-empty string")
        if not isinstance(new, str):
            raise _Failed("`new_str` must be a string")
        text = self._read_text(rel, self._lstat(rel))
        count = text.count(old)
        if count == 0:
            raise _Failed(f"no match for `old_str` in {rel}; it must match the file exactly, "
                          "whitespace included (view the file first)")
        if count > 1:
            raise _Failed(f"`old_str` matches {count} times in {rel}; include more context so it "
                          "matches exactly once")
        self._write_text(rel, text.replace(old, new, 1))
        return f"Replaced 1 occurrence in {rel} (at line {text[:text.index(old)].count(chr(10)) + 1})."

    def _cmd_insert(self, rel: str, args: Mapping[str, Any]) -> str:
        insert_line = args.get("insert_line")
        insert_text = args.get("insert_text")
        insert_text = args.get("new_str") if insert_text is None else insert_text
        if not isinstance(insert_line, int) or isinstance(insert_line, bool):
            raise _Failed("`insert_line` is required for `insert` and must be an integer")
        if not isinstance(insert_text, str):
            raise _Failed("`insert_text` is required for `insert` and must be a string")
        lines = _split_lines(self._read_text(rel, self._lstat(rel)))
        if insert_line < 0 or insert_line > len(lines):
            raise _Failed(f"invalid `insert_line` {insert_line}: it must be between 0 and "
                          f"{len(lines)} (the text goes after that line; 0 = at the top)")
        if insert_line == len(lines) and lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        if insert_text and not insert_text.endswith("\n"):
            insert_text += "\n"
        self._write_text(rel, "".join(lines[:insert_line]) + insert_text + "".join(lines[insert_line:]))
        return f"Inserted {insert_text.count(chr(10))} line(s) after line {insert_line} of {rel}."


def tool_notes(calls: Sequence[ToolCall]) -> list[str]:
    return [f"refused {c.command} {c.rel or c.path or '?'}: {c.reason}" for c in calls if c.status == "refused"]
