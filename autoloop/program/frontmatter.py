"""YAML front matter -> checked values; every error is one line `NAME:LINE: message` (ConfigError).

A schema is a table: a `Section` maps each key to a check taking (reader, node, where) and
returning the value; `ListOf` is a list of sections. Lines come from YAML's node marks (the
opening `---` is line 1); unknown keys get a did-you-mean.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Collection, Mapping, NoReturn, Sequence

import yaml

from autoloop.errors import ConfigError

_FRONT_HINT = "YAML front matter between two '---' lines (goal, allowed, verifier)"
_NULL_TAG = "tag:yaml.org,2002:null"
_NEWLINES = re.compile(r"[\r\n]+")
_OFFSET = 2   # the front matter starts on file line 2; YAML marks count from 0


@dataclass(frozen=True)
class At:
    """Where a value sits: its dotted key and the line of the key (or list item)."""

    key: str
    line: int

    def child(self, name: str, line: int) -> At:
        return At(f"{self.key}.{name}" if self.key else name, line)

    def item(self, index: int, line: int) -> At:
        return At(f"{self.key}[{index}]", line)


def _yaml_advice(exc: yaml.MarkedYAMLError, mark: Any) -> str:
    """A glob starting with `*` (an alias to YAML) or a `: ` inside a value (a new key) needs
    quotes."""
    buffer = getattr(mark, "buffer", None)
    lines = buffer.rstrip("\0").split("\n") if isinstance(buffer, str) else []
    text = lines[mark.line] if lines and mark.line < len(lines) else ""
    problem, context = exc.problem or "", exc.context or ""
    if "alias" in context or problem.startswith("found undefined alias"):
        token = re.search(r"\*[^\s,\]}]*", text[mark.column - 1:] if text else "")
        shown = token.group(0) if token else "*…"
        return (f"'{shown}' must be quoted: YAML reads a value starting with '*' as a reference; "
                f"write \"{shown}\"")
    if problem == "could not find expected ':'" and exc.context_mark is mark:
        m = re.match(r"^\s*(?:-\s+)?([\w.-]+):(\S.*?)\s*$", text)
        if m:
            return (f"a space is needed after the colon of '{m.group(1)}': write "
                    f"'{m.group(1)}: {m.group(2)}'")
    if problem == "mapping values are not allowed here":
        key = re.match(r"^(\s*)([\w.-]+):(\s|$)", text)
        up = next((i for i in range(mark.line - 1, -1, -1) if lines[i].strip()), None)
        above = re.match(r"^(\s*)(?:-\s+)?([\w.-]+):\s*\S", lines[up]) if up is not None else None
        if key and above and mark.column == len(key.group(1)) + len(key.group(2)) \
                and len(key.group(1)) > len(above.group(1)):
            # the key's own colon: the line is read as more of the value of the key above it
            return (f"'{key.group(2)}' is indented too far: YAML reads it as part of the value of "
                    f"'{above.group(2)}' on line {up + _OFFSET}; start it in the same column as "
                    f"'{above.group(2)}'")
        m = re.match(r"^(\s*(?:-\s+)?[\w.-]+:\s+)(.*?)\s*$", text)
        if m and m.group(2):
            value = m.group(2)
            quoted = f"'{value}'" if "'" not in value else '"' + value.replace('"', '\\"') + '"'
            return (f"the value contains ': ', which YAML reads as a new key: quote the whole "
                    f"value, e.g. {m.group(1).strip()} {quoted}")
        return "a value contains ': ', which YAML reads as a new key: put the value in quotes"
    m = re.match(r"found character '(\\.|.)' that cannot start any token", problem)
    if m and m.group(1) in ("\t", "\\t"):
        return "a tab: YAML indents with spaces only; replace the tab with spaces"
    if m:
        return f"a value cannot start with '{m.group(1)}' in YAML: put the value in quotes"
    return ""


def closest(word: str, options: Sequence[str]) -> str | None:
    """The option `word` was most likely meant to be; case is ignored (`OpenAI`, `Goal`)."""
    by_lower = {option.lower(): option for option in options}
    close = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=0.6)
    return by_lower[close[0]] if close else None


def show(value: Any) -> str:
    """A value as a message names it: `a list`, `nothing`, `true`, `'abc'` (60 characters)."""
    named = {yaml.MappingNode: "a mapping", yaml.SequenceNode: "a list", type(None): "nothing",
             bool: "true" if value is True else "false"}
    if type(value) in named:
        return named[type(value)]
    if isinstance(value, (str, int, float)):
        text = repr(value)
        return text if len(text) <= 60 else text[:57] + "..."
    return f"a {type(value).__name__}"


class Reader:
    def __init__(self, name: str) -> None:
        self.name = name
        self.lines: dict[str, int] = {}
        # only to type scalars (int, bool, ...) by the YAML 1.1 rules yaml.safe_load applies
        self._loader = yaml.SafeLoader("")

    def fail(self, line: int, message: str) -> NoReturn:
        # one line always: YAML's own texts and user values may carry newlines
        raise ConfigError(f"{self.name}:{line}: {_NEWLINES.sub(' ', message)}")

    def fail_key(self, key: str, message: str) -> NoReturn:
        """`key: message`, on the line of a key already read."""
        self.fail(self.lines[key], f"{key}: {message}")

    def expected(self, at: At, what: str, value: Any) -> NoReturn:
        self.fail(at.line, f"{at.key}: expected {what}, got {show(value)}")

    def line(self, node: yaml.Node) -> int:
        return node.start_mark.line + _OFFSET

    def front_matter(self, source: bytes) -> tuple[yaml.Node, str]:
        """(the front matter's YAML node, the body)."""
        try:
            text = source.decode("utf-8").removeprefix("\ufeff")   # a Windows editor's BOM
        except UnicodeDecodeError as exc:
            self.fail(source.count(b"\n", 0, exc.start) + 1,
                      f"not valid UTF-8 (byte {source[exc.start]:#04x}); save the file as UTF-8")
        if not text.strip():
            self.fail(1, f"the file is empty; it needs {_FRONT_HINT}")
        lines = text.split("\n")   # \n only, as YAML counts lines
        if lines[0].rstrip() != "---":
            self.fail(1, "no front matter: the first line must be '---'; the file needs "
                         + _FRONT_HINT)
        end = next((i for i in range(1, len(lines)) if lines[i].rstrip() == "---"), None)
        if end is None:
            self.fail(1, "the front matter is never closed: no '---' line after the first one")
        front = "\n".join(lines[1:end])
        try:
            node = yaml.compose(front, Loader=yaml.SafeLoader)
        except yaml.MarkedYAMLError as exc:
            self.yaml_fail(exc)
        except yaml.reader.ReaderError as exc:
            char = chr(exc.character) if isinstance(exc.character, int) else exc.character
            self.fail(front.count("\n", 0, exc.position) + _OFFSET,
                      f"invalid YAML: {exc.reason} ({char!r})")
        except yaml.YAMLError as exc:
            self.fail(1, f"invalid YAML: {exc}")
        if node is None:
            self.fail(1, "the front matter is empty; it needs the keys goal, allowed, verifier")
        return node, "\n".join(lines[end + 1:])

    def yaml_fail(self, exc: yaml.MarkedYAMLError) -> NoReturn:
        mark = exc.problem_mark or exc.context_mark
        if exc.problem == "could not find expected ':'" and exc.context_mark:
            mark = exc.context_mark     # the key missing its ': ', not the line the scan gave up on
        message = exc.problem or exc.context or "cannot be read"
        if exc.problem and exc.context:
            # an unclosed `[` or `{` is found lines later, where the parser gave up: name the
            # line where it opened too, since that is the one to fix
            opened = exc.context_mark
            started = (f" that starts at line {opened.line + _OFFSET}"
                       if opened and mark and opened.line != mark.line else "")
            message += f" ({exc.context}{started})"
        advice = _yaml_advice(exc, mark)
        self.fail(mark.line + _OFFSET if mark else 1,
                  f"{advice} (YAML: {message})" if advice else f"invalid YAML: {message}")

    def value(self, node: yaml.Node) -> Any:
        """A scalar's typed value; other nodes as they are, for checks to refuse."""
        if not isinstance(node, yaml.ScalarNode):
            return node
        try:
            return self._loader.construct_object(node, deep=True)
        except yaml.MarkedYAMLError as exc:            # e.g. an unknown `!tag`
            self.yaml_fail(exc)

    def pairs(self, node: yaml.MappingNode, at: At) -> list[tuple[str, At, yaml.Node]]:
        """(key as written, where it is, value node) in file order, lines noted; duplicates and odd
        keys refused."""
        out: list[tuple[str, At, yaml.Node]] = []
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            line = self.line(key_node)
            if key_node.tag == "tag:yaml.org,2002:merge":
                self.fail(line, "YAML merge keys ('<<') are not supported in program files")
            if not isinstance(key_node, yaml.ScalarNode):
                self.fail(line, f"{at.key or 'front matter'}: keys must be plain names")
            where = at.child(key_node.value, line)
            if where.key in seen:
                self.fail(line, f"duplicate key {where.key!r} (first on line {seen[where.key]})")
            seen[where.key] = line
            out.append((key_node.value, where, value_node))
        self.lines.update(seen)
        return out

    def items(self, node: yaml.Node, at: At) -> list[tuple[At, yaml.Node]]:
        """A list's items with their places (lines noted), or a lone scalar as itself."""
        if not isinstance(node, yaml.SequenceNode):
            return [(at, node)]
        out = [(at.item(i, self.line(item)), item) for i, item in enumerate(node.value)]
        self.lines.update((where.key, where.line) for where, _ in out)
        return out


Check = Callable[[Reader, yaml.Node, At], Any]
Build = Callable[[Reader, dict[str, Any], At], Any]


@dataclass(frozen=True)
class Section:
    """A mapping with fixed keys; `build` makes the result and checks what spans keys. With
    `scalar_key`, one word stands for the mapping (`sandbox: bwrap` = `{kind: bwrap}`)."""

    fields: Mapping[str, Check]
    build: Build
    required: Collection[str] = ()
    scalar_key: str | None = None

    def __call__(self, p: Reader, node: yaml.Node, at: At) -> Any:
        if self.scalar_key and isinstance(node, yaml.ScalarNode):
            key, child = self.scalar_key, at.child(self.scalar_key, at.line)
            p.lines[child.key] = at.line
            return self.build(p, {key: self.fields[key](p, node, child)}, at)
        if not isinstance(node, yaml.MappingNode):
            if not at.key:
                p.fail(p.line(node), "the front matter must be a mapping of keys (goal: ..., "
                                     f"allowed: ..., verifier: ...), got {show(p.value(node))}")
            p.expected(at, "a mapping of keys", p.value(node))
        values: dict[str, Any] = {}
        for name, where, value_node in p.pairs(node, at):
            if name not in self.fields:
                p.fail(where.line, f"unknown key {where.key!r}{self.suggest(name, at)}")
            # an optional key left empty (`forbidden:`) reads as if it were not there
            if name in self.required or value_node.tag != _NULL_TAG:
                values[name] = self.fields[name](p, value_node, where)
        for name in self.fields:
            if name in self.required and name not in values:
                p.fail(at.line, f"missing required key {at.child(name, at.line).key!r}")
        return self.build(p, values, at)

    def suggest(self, name: str, at: At) -> str:
        close = closest(name, list(self.fields))
        if close:
            return f" (did you mean {at.child(close, 0).key!r}?)"
        # a right key at the wrong level (`metric:` at the top) is a common slip
        for parent, check in self.fields.items():
            if isinstance(check, Section) and name in check.fields:
                return f" (did you mean {at.child(parent, 0).child(name, 0).key!r}?)"
        where = f" under {at.key}" if at.key else ""
        return f" (known keys{where}: {', '.join(self.fields)})"


@dataclass(frozen=True)
class ListOf:
    """A list whose items are `section` mappings (or, with `scalar`, a short form of one)."""

    section: Section
    what: str                                   # the list, as `expected ...` names it
    item_what: str                              # one item
    scalar: Check | None = None                 # a string item -> what the section would return
    each: Callable[[Reader, At, Any, dict[str, int]], Any] | None = None   # with state shared
    finish: Callable[[list[Any]], tuple[Any, ...]] = tuple

    def __call__(self, p: Reader, node: yaml.Node, at: At) -> tuple[Any, ...]:
        if not isinstance(node, yaml.SequenceNode):
            p.expected(at, self.what, p.value(node))
        out: list[Any] = []
        seen: dict[str, int] = {}
        for where, item in p.items(node, at):
            if isinstance(item, yaml.MappingNode):
                value = self.section(p, item, where)
            elif self.scalar and isinstance(p.value(item), str):
                value = self.scalar(p, item, where)
            else:
                p.expected(where, self.item_what, p.value(item))
            out.append(self.each(p, where, value, seen) if self.each else value)
        return self.finish(out)


def text(*, one_line: bool = False) -> Check:
    """A non-empty string, stripped (a YAML `>` block ends in a newline nobody meant)."""

    def check(p: Reader, node: yaml.Node, at: At) -> str:
        value = p.value(node)
        if not isinstance(value, str) or not value.strip():
            p.expected(at, "a non-empty string", value)
        if one_line and "\n" in value.strip():
            p.fail(at.line, f"{at.key}: must be one line")
        return value.strip()

    return check


def that(what: str, ok: Callable[[Any], bool],
         convert: Callable[[Any], Any] = lambda v: v) -> Check:
    """A value `ok` accepts (converted); anything else is `KEY: expected WHAT, got VALUE`."""

    def check(p: Reader, node: yaml.Node, at: At) -> Any:
        value = p.value(node)
        if not ok(value):
            p.expected(at, what, value)
        return convert(value)

    return check


def matching(regex: str, what: str) -> Check:
    return that(what, lambda v: isinstance(v, str) and re.fullmatch(regex, v) is not None)


def _finite(value: float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:                           # an int too large for a float
        return False


def number(what: str = "a number", *, above: float | None = None, least: float | None = None,
           whole: bool = False) -> Check:
    """An int (`whole`), or an int or float as a float; never a bool, NaN or inf."""
    kinds = int if whole else (int, float)
    return that(what, lambda v: (not isinstance(v, bool) and isinstance(v, kinds)
                                 and (whole or _finite(v)) and (above is None or v > above)
                                 and (least is None or v >= least)), int if whole else float)


def at_least(n: int) -> Check:
    return number(f"a whole number >= {n}", least=n, whole=True)


boolean = that("true or false", lambda v: isinstance(v, bool))


def one_of(options: Sequence[str]) -> Check:
    def check(p: Reader, node: yaml.Node, at: At) -> str:
        value = p.value(node)
        if isinstance(value, str) and value in options:
            return value
        close = closest(value, options) if isinstance(value, str) else None
        hint = f" (did you mean {close!r}?)" if close else ""
        shown = show(value)
        if isinstance(value, bool) and isinstance(node, yaml.ScalarNode):   # `no`, `off`, `yes`: YAML 1.1 booleans
            shown = f"{node.value!r} (YAML reads it as {shown})"
        p.fail(at.line, f"{at.key}: {shown} is not one of {', '.join(options)}{hint}")

    return check


def exactly_one(p: Reader, values: Mapping[str, Any], at: At, keys: tuple[str, str], both: str,
                neither: str) -> None:
    """One of two keys and not both: `both`/`neither` say why (after `KEY: `)."""
    if all(k in values for k in keys):
        p.fail(max(p.lines[f"{at.key}.{k}"] for k in keys), f"{at.key}: {both}")
    if not any(k in values for k in keys):
        p.fail(at.line, f"{at.key}: {neither}")


def walk_keys(section: Section, prefix: str = "") -> list[str]:
    """Every key a section accepts, dotted (`guards[].name` for keys of a list's items)."""
    out = []
    for name, check in section.fields.items():
        out.append(prefix + name)
        if isinstance(check, Section):
            out += walk_keys(check, f"{prefix}{name}.")
        if isinstance(check, ListOf):
            out += walk_keys(check.section, f"{prefix}{name}[].")
    return out
