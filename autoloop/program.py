"""program.md → a frozen, validated Program.

Every error is one line `program.md:LINE: message` naming the key (ConfigError). LINE is the
1-based line in the file (the opening `---` is line 1) of the key at fault, or of the list
item at fault; keys are named dotted (`verifier.timeout`, `guards[1].name`).

Adding a key is a few lines: a field on the dataclass and an entry in the schema tables at
the bottom of this file (a `_Field` with a check from the small vocabulary below).
"""

from __future__ import annotations

import difflib
import math
import os
import re
import shlex
import subprocess
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, NoReturn, Sequence

import yaml

from autoloop.envs import unsafe as unsafe_env
from autoloop.errors import ConfigError, RepoStateError, UsageError
from autoloop.globs import PathRules, is_git_path, path_problem, pattern_problem, touches_git

Direction = Literal["minimize", "maximize"]


@dataclass(frozen=True)
class VerifierSpec:
    command: str
    direction: Direction
    metric: str | None = None          # NAME read as `NAME: NUMBER` (contract §4)
    pattern: str | None = None         # or a regex whose first group is the number
    timeout: float = 600.0
    repeats: int = 1                   # strict rule: runs per side, the median of them decides
    network: bool = False              # measurements keep the network (sandboxed: off unless true)

    @property
    def label(self) -> str:
        return self.metric or "metric"


@dataclass(frozen=True)
class Amount:
    """A threshold: `value` percent of a reference (`"1%"`), or `value` in metric units."""

    value: float
    relative: bool

    def of(self, reference: float) -> float:
        """The amount in metric units for a reference value (a percentage of its size)."""
        return self.value / 100.0 * abs(reference) if self.relative else self.value

    def __str__(self) -> str:
        return f"{self.value:g}%" if self.relative else f"{self.value:g}"


Rule = Literal["strict", "paired"]


@dataclass(frozen=True)
class AcceptSpec:
    """How a candidate is judged (see autoloop.judge). The defaults are contract section 5:
    one measurement, strictly better than the incumbent."""

    rule: Rule = "strict"
    min_effect: Amount = Amount(0.0, False)   # 1% when rule is paired and it is not given
    alpha: float = 0.05                  # paired: the bound on false keeps (default 0.005 there)
    pairs: int = 8                       # paired: the most pairs one decision takes (default 16)
    confirm: bool = False                # paired: a second, fresh sequential test must pass too
    warmup: int = 0                      # runs per side measured first and discarded
    final_pairs: int = 20                # end-of-run re-measurement of best vs start (0: none)


@dataclass(frozen=True)
class LimitSpec:
    """A secondary metric from the verifier's output that must not move past a one-sided
    limit relative to the baseline (a candidate beyond it is a guard_fail)."""

    metric: str | None = None
    pattern: str | None = None
    max_increase: Amount | None = None
    max_decrease: Amount | None = None

    @property
    def label(self) -> str:
        return self.metric or f"pattern {self.pattern!r}"


@dataclass(frozen=True)
class HoldoutSpec:
    """A second, held-out verifier: never shown to the generator, run only when a candidate
    has passed (confirmation) and at the end of the run."""

    command: str
    direction: Direction
    metric: str | None = None
    pattern: str | None = None
    timeout: float = 600.0

    @property
    def label(self) -> str:
        return self.metric or "holdout"


@dataclass(frozen=True)
class GuardSpec:
    name: str
    command: str
    timeout: float = 600.0


@dataclass(frozen=True)
class PriceSpec:
    """USD per million tokens."""

    input: float
    output: float


@dataclass(frozen=True)
class GeneratorSpec:
    kind: str = "claude"
    command: str | None = None
    timeout: float = 1800.0
    args: tuple[str, ...] = ()          # extra arguments appended to a CLI preset
    model: str | None = None
    base_url: str | None = None
    max_turns: int = 30
    max_tokens: int = 8192
    price: PriceSpec | None = None
    seed: int | None = None             # for generators with randomness (tune)


MAX_WORKERS = 64   # each worker is a git worktree on disk; more is a typo, not a plan


@dataclass(frozen=True)
class ParallelSpec:
    """Parallel rounds (see autoloop.parallel): `workers` generators propose from the same
    incumbent, at most `verify` candidates are measured at once, through `executor`."""

    workers: int = 1
    verify: int | None = None          # verifications at once; None: as many as workers
    executor: str = "local"            # local | ray
    address: str | None = None         # ray: "auto", "ray://host:10001"; none: a private local instance
    num_cpus: float | None = None      # ray: resources one verification task asks for
    num_gpus: float | None = None
    # resource hints: worker i's generator and verifications get env[i % len(env)] on top of ours
    env: tuple[Mapping[str, str], ...] = ()

    def verify_slots(self, workers: int) -> int:
        """Verifications at once for `workers` workers (a cap above the worker count means nothing)."""
        return max(1, min(self.verify or workers, workers))

    def worker_env(self, i: int) -> Mapping[str, str]:
        return self.env[i % len(self.env)] if self.env else {}


@dataclass(frozen=True)
class SandboxSpec:
    """Where the generator and the measurements run (see autoloop.sandbox). `auto`: in a
    bubblewrap sandbox where one can be made, else unsandboxed (said loudly); `bwrap`: a
    sandbox or exit 2; `none`: no sandbox, the watches of autoloop.watch are the only line."""

    kind: Literal["auto", "none", "bwrap"] = "auto"
    network: bool = False                # the generator keeps the network (agent CLIs need their API)
    writable: tuple[str, ...] = ()       # more paths generator and measurements may write (~ expanded)


@dataclass(frozen=True)
class ResourcesSpec:
    """What one cycle's generator may consume (see autoloop.proc.Limits)."""

    max_change_mb: float = 100.0         # bytes of files a cycle adds or modifies
    max_disk_mb: float = 2048.0          # disk it may take while it runs, and its largest file
    max_processes: int = 2048            # processes at a time (RLIMIT_NPROC; not for root)


@dataclass(frozen=True)
class DataSpec:
    """Data outside git the guards and verifier read: `source` appears read-only at `target`
    (repo-relative) in every verification tree."""

    source: Path                         # absolute, resolved
    target: str


@dataclass(frozen=True)
class StopSpec:
    max_cycles: int | None = None
    max_minutes: float | None = None
    patience: int | None = None
    target: float | None = None
    max_cost_usd: float | None = None


@dataclass(frozen=True)
class Program:
    path: Path                          # absolute path of program.md
    repo_root: Path                     # absolute top level of the git repository holding it
    goal: str
    allowed: tuple[str, ...]
    verifier: VerifierSpec
    forbidden: tuple[str, ...] = ()
    guards: tuple[GuardSpec, ...] = ()
    generator: GeneratorSpec = field(default_factory=GeneratorSpec)
    stop: StopSpec = field(default_factory=StopSpec)
    accept: AcceptSpec = field(default_factory=AcceptSpec)
    limits: tuple[LimitSpec, ...] = ()
    holdout: HoldoutSpec | None = None
    parallel: ParallelSpec = field(default_factory=ParallelSpec)
    sandbox: SandboxSpec = field(default_factory=SandboxSpec)
    resources: ResourcesSpec = field(default_factory=ResourcesSpec)
    data: tuple[DataSpec, ...] = ()
    body: str = ""
    source: bytes = b""                 # the exact bytes read, to detect and undo tampering
    lines: Mapping[str, int] = field(default_factory=dict)  # dotted key -> line, for later messages

    @property
    def rel_path(self) -> str:
        """program.md relative to the repository root, `/`-separated."""
        return self.path.relative_to(self.repo_root).as_posix()

    @property
    def state_dir(self) -> Path:
        """Where experiments.md, results.tsv and .autoloop/ live: next to program.md."""
        return self.path.parent

    @property
    def protected(self) -> Mapping[str, str]:
        """Repo-relative paths no generator may touch whatever `allowed` says, with the reason:
        program.md and what the run writes next to it (contract §3, §7)."""
        base = self.state_dir.relative_to(self.repo_root).as_posix()
        prefix = "" if base == "." else base + "/"
        return {
            self.rel_path: "program file",
            prefix + "experiments.md": "journal",
            prefix + "results.tsv": "journal",
            prefix + ".autoloop": "autoloop state",
        }

    @property
    def path_rules(self) -> PathRules:
        """allowed - forbidden - protected - .git; callers add more protected paths by building
        their own PathRules(program.allowed, program.forbidden, {**program.protected, ...})."""
        return PathRules(self.allowed, self.forbidden, self.protected)


# ---------------------------------------------------------------------------------------------
# Loading


def load_program(path: Path) -> Program:
    """Read and validate the program file at `path`, in the git repository that holds it."""
    path = Path(path)
    try:
        # a FIFO or a device would block the read (or never end): only regular files
        if path.exists() and not path.is_dir() and not path.is_file():
            raise UsageError(f"cannot read program file {path}: not a regular file")
        source = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"cannot read program file {path}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"cannot read program file {path}: it is a directory") from None
    except OSError as exc:
        raise UsageError(f"cannot read program file {path}: {exc.strerror or exc}") from None
    # git reports the top level with symlinks resolved; resolve ours so one is under the other.
    path = path.resolve()
    return parse_program(source, path, _git_toplevel(path))


def _git_toplevel(path: Path) -> Path:
    # Hooks and fsmonitor are user-configured commands; finding the top level must run none.
    cmd = ["git", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false",
           "-C", str(path.parent), "rev-parse", "--show-toplevel"]
    try:
        out = subprocess.run(cmd, capture_output=True, stdin=subprocess.DEVNULL, check=False)
    except OSError as exc:
        raise RepoStateError(f"cannot run git to find the repository of {path}: "
                             f"{exc.strerror or exc}") from None
    top = os.fsdecode(out.stdout).rstrip("\n")
    if out.returncode != 0 and "dubious ownership" in os.fsdecode(out.stderr):
        raise RepoStateError(_not_yours(path, os.fsdecode(out.stderr)))
    if out.returncode != 0 or not top:
        why = os.fsdecode(out.stderr).strip().splitlines()
        detail = f" ({why[-1]})" if why else ""
        raise RepoStateError(f"{path} is not inside a git work tree{detail}; autoloop keeps each "
                             f"improvement as a commit, so start one in your project folder: "
                             f"git init && git add -A && git commit -m start")
    return Path(top).resolve()


def _not_yours(path: Path, stderr: str) -> str:
    """git's safe.directory refusal (a repository owned by another user, e.g. a tarball unpacked
    as root) said as what it is: the repository exists, and `git init` would not help."""
    # git names the exact directory to trust on its own line; reuse it rather than guess
    fix = next((line.strip() for line in stderr.splitlines() if "safe.directory" in line), "")
    fix = fix or "git config --global --add safe.directory <the repository folder>"
    return (f"git refuses the repository holding {path}: it is owned by another user "
            f"(git's 'dubious ownership' check); if you trust it, run: {fix} "
            f"(or chown it to your user), then run autoloop again")


def parse_program(text: bytes | str, path: Path, repo_root: Path) -> Program:
    """Validate program text read from `path` (named in messages) in the repository at
    `repo_root`. Raises ConfigError `NAME:LINE: ...` for anything wrong in the text."""
    path, repo_root = Path(path).absolute(), Path(repo_root).absolute()
    if not path.is_relative_to(repo_root):
        raise UsageError(f"program file {path} is not inside the repository {repo_root}")
    source = text if isinstance(text, bytes) else text.encode("utf-8")
    parser = _Parser(path.name, repo_root)
    front, body = parser.split(parser.decode(source))
    values = _PROGRAM(parser, parser.compose(front), _At("", 1))
    return Program(path=path, repo_root=repo_root, body=body, source=source,
                   lines=types.MappingProxyType(dict(parser.lines)), **values)


# ---------------------------------------------------------------------------------------------
# The parser: text -> YAML nodes (which carry line marks) -> checked values


_FRONT_HINT = "YAML front matter between two '---' lines (goal, allowed, verifier)"
_NULL_TAG = "tag:yaml.org,2002:null"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_NEWLINES = re.compile(r"[\r\n]+")


def _yaml_advice(exc: yaml.MarkedYAMLError, mark: Any) -> str:
    """The newcomer's YAML mistakes in words that say what to do: a glob starting with `*` (an
    alias to YAML) and a `: ` inside a value (a new key to YAML) both need quotes."""
    text = ""
    buffer = getattr(mark, "buffer", None)
    if mark is not None and isinstance(buffer, str):
        lines = buffer.rstrip("\0").split("\n")
        text = lines[mark.line] if mark.line < len(lines) else ""
    problem, context = exc.problem or "", exc.context or ""
    if "alias" in context or problem.startswith("found undefined alias"):
        token = re.search(r"\*[^\s,\]}]*", text[mark.column - 1 if mark else 0:] if text else "")
        shown = token.group(0) if token else "*…"
        return (f"'{shown}' must be quoted: YAML reads a value starting with '*' as a reference; "
                f"write \"{shown}\"")
    if problem == "mapping values are not allowed here":
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


@dataclass(frozen=True)
class _At:
    """Where a value sits, for messages: its dotted key and the line of the key (or item)."""

    key: str
    line: int

    def child(self, name: str, line: int) -> _At:
        return _At(f"{self.key}.{name}" if self.key else name, line)

    def item(self, index: int, line: int) -> _At:
        return _At(f"{self.key}[{index}]", line)


class _Parser:
    # The front matter starts on file line 2; YAML marks count from 0.
    _OFFSET = 2

    def __init__(self, name: str, repo_root: Path | None = None) -> None:
        self.name = name
        self.repo_root = repo_root
        self.lines: dict[str, int] = {}
        # One loader instance only to turn scalar nodes into typed values (int, bool, ...),
        # with the same YAML 1.1 rules yaml.safe_load applies.
        self._loader = yaml.SafeLoader("")

    def fail(self, line: int, message: str) -> NoReturn:
        # One line always: YAML's own texts and user values may carry newlines.
        raise ConfigError(f"{self.name}:{line}: {_NEWLINES.sub(' ', message)}")

    def line(self, node: yaml.Node) -> int:
        return node.start_mark.line + self._OFFSET

    def decode(self, source: bytes) -> str:
        try:
            text = source.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = source.count(b"\n", 0, exc.start) + 1
            self.fail(line, f"not valid UTF-8 (byte {source[exc.start]:#04x}); "
                            "save the file as UTF-8")
        # Editors on Windows like to start UTF-8 files with a BOM; it is not content.
        return text.removeprefix("\ufeff")

    def split(self, text: str) -> tuple[str, str]:
        """(front matter, body). Line ends are split on \\n only, as YAML counts them."""
        if not text.strip():
            self.fail(1, f"the file is empty; it needs {_FRONT_HINT}")
        lines = text.split("\n")
        if lines[0].rstrip() != "---":
            self.fail(1, f"no front matter: the first line must be '---'; the file needs "
                         f"{_FRONT_HINT}")
        for i in range(1, len(lines)):
            if lines[i].rstrip() == "---":
                return "\n".join(lines[1:i]), "\n".join(lines[i + 1:])
        self.fail(1, "the front matter is never closed: no '---' line after the first one")

    def compose(self, front: str) -> yaml.Node:
        try:
            node = yaml.compose(front, Loader=yaml.SafeLoader)
        except yaml.MarkedYAMLError as exc:
            self.yaml_fail(exc)
        except yaml.reader.ReaderError as exc:
            line = front.count("\n", 0, exc.position) + self._OFFSET
            char = chr(exc.character) if isinstance(exc.character, int) else exc.character
            self.fail(line, f"invalid YAML: {exc.reason} ({char!r})")
        except yaml.YAMLError as exc:                  # no position known
            self.fail(1, f"invalid YAML: {exc}")
        if node is None:
            self.fail(1, "the front matter is empty; it needs the keys goal, allowed, verifier")
        return node

    def yaml_fail(self, exc: yaml.MarkedYAMLError) -> NoReturn:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + self._OFFSET if mark else 1
        message = exc.problem or exc.context or "cannot be read"
        if exc.problem and exc.context:
            message += f" ({exc.context})"
        advice = _yaml_advice(exc, mark)
        self.fail(line, f"{advice} (YAML: {message})" if advice else f"invalid YAML: {message}")

    def value(self, node: yaml.Node) -> Any:
        """A scalar's typed value; other nodes are returned as they are, for checks to refuse."""
        if not isinstance(node, yaml.ScalarNode):
            return node
        try:
            return self._loader.construct_object(node, deep=True)
        except yaml.MarkedYAMLError as exc:            # e.g. an unknown `!tag`
            self.yaml_fail(exc)

    def show(self, value: Any) -> str:
        """How a refused value reads in a message."""
        if isinstance(value, yaml.MappingNode):
            return "a mapping"
        if isinstance(value, yaml.SequenceNode):
            return "a list"
        if value is None:
            return "nothing"
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, (str, int, float)):
            text = repr(value)
            return text if len(text) <= 60 else text[:57] + "..."
        return f"a {type(value).__name__}"

    def expected(self, at: _At, what: str, value: Any) -> NoReturn:
        self.fail(at.line, f"{at.key}: expected {what}, got {self.show(value)}")

    def pairs(self, node: yaml.MappingNode, at: _At) -> list[tuple[str, int, yaml.Node]]:
        """(key, key line, value node) in file order; refuses duplicates and odd keys."""
        seen: dict[str, int] = {}
        out = []
        for key_node, value_node in node.value:
            line = self.line(key_node)
            if key_node.tag == _MERGE_TAG:
                self.fail(line, "YAML merge keys ('<<') are not supported in program files")
            if not isinstance(key_node, yaml.ScalarNode):
                self.fail(line, f"{at.key or 'front matter'}: keys must be plain names")
            # The key as written (`on`, `1`), not YAML's reading of it (True, 1).
            name = key_node.value
            if name in seen:
                self.fail(line, f"duplicate key {at.child(name, line).key!r} "
                                f"(first on line {seen[name]})")
            seen[name] = line
            out.append((name, line, value_node))
        return out


# ---------------------------------------------------------------------------------------------
# Checks: each takes (parser, node, where) and returns the value for the dataclass field.

Check = Callable[[_Parser, yaml.Node, _At], Any]


@dataclass(frozen=True)
class _Field:
    check: Check
    required: bool = False


@dataclass(frozen=True)
class _Section:
    """A mapping with a fixed set of keys; `build` turns the checked values into the result
    and does the checks that involve more than one key."""

    fields: Mapping[str, _Field]
    build: Callable[[_Parser, dict[str, Any], _At], Any]

    def __call__(self, p: _Parser, node: yaml.Node, at: _At) -> Any:
        if not isinstance(node, yaml.MappingNode):
            if not at.key:
                p.fail(p.line(node), "the front matter must be a mapping of keys "
                                     f"(goal: ..., allowed: ..., verifier: ...), "
                                     f"got {p.show(p.value(node))}")
            p.expected(at, "a mapping of keys", p.value(node))
        values: dict[str, Any] = {}
        for name, line, value_node in p.pairs(node, at):
            where = at.child(name, line)
            p.lines[where.key] = line
            spec = self.fields.get(name)
            if spec is None:
                p.fail(line, f"unknown key {where.key!r}{self.suggest(name, at)}")
            # An optional key left empty (`forbidden:`) reads as if it were not there.
            if not spec.required and _is_null(value_node):
                continue
            values[name] = spec.check(p, value_node, where)
        for name, spec in self.fields.items():
            if spec.required and name not in values:
                p.fail(at.line, f"missing required key {at.child(name, at.line).key!r}")
        return self.build(p, values, at)

    def suggest(self, name: str, at: _At) -> str:
        close = _closest(name, list(self.fields))
        if close:
            return f" (did you mean {at.child(close, 0).key!r}?)"
        # A right key at the wrong level (`metric:` at the top) is a common slip.
        for parent, spec in self.fields.items():
            if isinstance(spec.check, _Section) and name in spec.check.fields:
                return f" (did you mean {at.child(parent, 0).child(name, 0).key!r}?)"
        where = f" under {at.key}" if at.key else ""
        return f" (known keys{where}: {', '.join(self.fields)})"


def _is_null(node: yaml.Node) -> bool:
    return isinstance(node, yaml.ScalarNode) and node.tag == _NULL_TAG


def _closest(word: str, options: Sequence[str]) -> str | None:
    """The option `word` was most likely meant to be; case is ignored (`OpenAI`, `Goal`)."""
    by_lower = {option.lower(): option for option in options}
    close = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=0.6)
    return by_lower[close[0]] if close else None


def _did_you_mean(word: str, options: Sequence[str]) -> str:
    close = _closest(word, options)
    return f" (did you mean {close!r}?)" if close else ""


def _text(*, one_line: bool = False) -> Check:
    """A non-empty string, stripped (a YAML `>` block ends in a newline nobody meant)."""

    def check(p: _Parser, node: yaml.Node, at: _At) -> str:
        value = p.value(node)
        if not isinstance(value, str) or not value.strip():
            p.expected(at, "a non-empty string", value)
        value = value.strip()
        if one_line and "\n" in value:
            p.fail(at.line, f"{at.key}: must be one line")
        return value

    return check


def _matching(regex: str, what: str) -> Check:
    """A string that fullmatches `regex`; `what` says in words what is expected."""
    compiled = re.compile(regex)

    def check(p: _Parser, node: yaml.Node, at: _At) -> str:
        value = p.value(node)
        if not isinstance(value, str) or not compiled.fullmatch(value):
            p.expected(at, what, value)
        return value

    return check


def _number(*, above: float | None = None, at_least: float | None = None,
            what: str = "a number") -> Check:
    """An int or float (never a bool, NaN or inf), as a float."""

    def check(p: _Parser, node: yaml.Node, at: _At) -> float:
        value = p.value(node)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            p.expected(at, what, value)
        try:
            number = float(value)
        except OverflowError:
            p.expected(at, what, value)
        if (not math.isfinite(number) or (above is not None and not number > above)
                or (at_least is not None and not number >= at_least)):
            p.expected(at, what, value)
        return number

    return check


def _integer(*, at_least: int | None = None, what: str = "a whole number") -> Check:
    def check(p: _Parser, node: yaml.Node, at: _At) -> int:
        value = p.value(node)
        if (isinstance(value, bool) or not isinstance(value, int)
                or (at_least is not None and value < at_least)):
            p.expected(at, what, value)
        return value

    return check


def _boolean(p: _Parser, node: yaml.Node, at: _At) -> bool:
    value = p.value(node)
    if not isinstance(value, bool):
        p.expected(at, "true or false", value)
    return value


_PERCENT = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*%\s*")


def _amount(*, below_pct: float | None = None) -> Check:
    """A threshold: a plain number >= 0 in metric units, or a percentage string like '1%'
    (of the incumbent or the baseline, whichever the key is relative to)."""

    def check(p: _Parser, node: yaml.Node, at: _At) -> Amount:
        value = p.value(node)
        what = "a number >= 0 (metric units) or a percentage such as '1%'"
        if isinstance(value, str):
            m = _PERCENT.fullmatch(value)
            if not m:
                p.expected(at, what, value)
            number = float(m.group(1))
            if below_pct is not None and not number < below_pct:
                p.fail(at.line, f"{at.key}: {value.strip()} is too large: a percentage below "
                                f"{below_pct:g}% is needed")
            return Amount(number, True)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            p.expected(at, what, value)
        if not math.isfinite(float(value)) or value < 0:
            p.expected(at, what, value)
        return Amount(float(value), False)

    return check


def _enum(options: Sequence[str] | Callable[[], Sequence[str]]) -> Check:
    def check(p: _Parser, node: yaml.Node, at: _At) -> str:
        choices = tuple(options() if callable(options) else options)
        value = p.value(node)
        if isinstance(value, str) and value in choices:
            return value
        hint = _did_you_mean(value, choices) if isinstance(value, str) else ""
        p.fail(at.line, f"{at.key}: {p.show(value)} is not one of {', '.join(choices)}{hint}")

    return check


def _host_paths(p: _Parser, node: yaml.Node, at: _At) -> tuple[str, ...]:
    """Absolute paths on this machine (`~` allowed): a list, or one string."""
    items = node.value if isinstance(node, yaml.SequenceNode) else [node]
    out = []
    for i, item in enumerate(items):
        where = at.item(i, p.line(item)) if item is not node else at
        value = p.value(item)
        if not isinstance(value, str) or not value.strip():
            p.expected(where, "an absolute path (or ~/...)", value)
        if not os.path.isabs(os.path.expanduser(value)):
            p.fail(where.line, f"{where.key}: {value!r} must be absolute (or start with ~/)")
        out.append(value)
    return tuple(out)


def _generator_kinds() -> Sequence[str]:
    # Imported when used: the registry imports this module for its dataclasses.
    from autoloop.generators.registry import KINDS
    return KINDS


def _regex_with_group(p: _Parser, node: yaml.Node, at: _At) -> str:
    value: str = _text()(p, node, at)
    try:
        groups = re.compile(value).groups
    except re.error as exc:
        p.fail(at.line, f"{at.key}: invalid regular expression: {exc}")
    if groups < 1:
        p.fail(at.line, f"{at.key}: needs a group around the number, e.g. 'acc=([0-9.]+)'")
    return value


def _args(p: _Parser, node: yaml.Node, at: _At) -> tuple[str, ...]:
    """A list of strings, or one string split the way a shell would."""
    value = p.value(node)
    if isinstance(value, str):
        try:
            return tuple(shlex.split(value))
        except ValueError as exc:                      # e.g. an unclosed quote
            p.fail(at.line, f"{at.key}: cannot split {value!r}: {exc}")
    if not isinstance(node, yaml.SequenceNode):
        p.expected(at, "a list of strings", value)
    out = []
    for i, item in enumerate(node.value):
        where = at.item(i, p.line(item))
        p.lines[where.key] = where.line
        arg = p.value(item)
        if not isinstance(arg, str):
            p.expected(where, "a string", arg)
        out.append(arg)
    return tuple(out)


def _patterns(*, required: bool, allow_git_check: bool) -> Check:
    """Path globs (see autoloop.globs): a list, or one string as a one-item list."""

    def check(p: _Parser, node: yaml.Node, at: _At) -> tuple[str, ...]:
        if isinstance(node, yaml.ScalarNode) and isinstance(p.value(node), str):
            items = [node]
        elif isinstance(node, yaml.SequenceNode):
            items = node.value
        else:
            p.expected(at, "a list of path patterns", p.value(node))
        if required and not items:
            p.fail(at.line, f"{at.key}: must list at least one path pattern")
        out = []
        for i, item in enumerate(items):
            line = p.line(item)
            if item is not node:
                p.lines[at.item(i, line).key] = line
            pattern = p.value(item)
            if not isinstance(pattern, str):
                p.fail(line, f"{at.key}: expected a path pattern, got {p.show(pattern)}")
            problem = pattern_problem(pattern)
            if problem:
                p.fail(line, f"{at.key}: {pattern!r} {problem}")
            if allow_git_check and touches_git(pattern):
                p.fail(line, f"{at.key}: {pattern!r} would match .git, which is never editable")
            out.append(pattern)
        return tuple(out)

    return check


_GUARD_NAME = r"[A-Za-z0-9][A-Za-z0-9_.-]*"
# Words that launch the command rather than name it: `python -m pytest` is "pytest".
_LAUNCHERS = re.compile(r"(python[0-9.]*|py|uv|uvx|run|poetry|pipenv|pdm|hatch|npx|npm|pnpm|"
                        r"yarn|bunx?|exec|env|sudo|time|nice|nohup|sh|bash)")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")


def command_words(command: str) -> list[str]:
    """A command line's words as the shell would split them (plain whitespace when the quoting
    is broken: the shell reports that itself when the command runs)."""
    try:
        return shlex.split(command)
    except ValueError:
        return command.split()


def guard_name(command: str, taken: set[str] | frozenset[str] = frozenset()) -> str:
    """A short name for a guard given as a bare command: `python -m pytest -q` -> `pytest`,
    `ruff check .` -> `ruff-check`; `-2`, `-3`, ... when the name is already in `taken`."""
    words = [w for w in command_words(command) if not w.startswith("-") and "=" not in w
             and not _LAUNCHERS.fullmatch(w)]
    parts: list[str] = []
    if words:
        parts.append(Path(words[0]).stem if "/" in words[0] else words[0])
        if len(words) > 1 and _WORD.fullmatch(words[1]):
            parts.append(words[1])
    base = re.sub(r"[^a-z0-9]+", "-", "-".join(parts).lower()).strip("-")[:24].strip("-")
    base = base or "guard"
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}-{n}"
    return name


def _data(p: _Parser, node: yaml.Node, at: _At) -> tuple[DataSpec, ...]:
    """Each item is {path, as}, or one repo-relative path (ignored data in the checkout) that
    appears at the same place in the verification trees."""
    if not isinstance(node, yaml.SequenceNode):
        p.expected(at, "a list of {path: ..., as: ...}", p.value(node))
    out: list[DataSpec] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(node.value):
        where = at.item(i, p.line(item))
        p.lines[where.key] = where.line
        if isinstance(item, yaml.MappingNode):
            spec = _DATA(p, item, where)
            source, target = spec["path"], spec["as"]
            target_line = p.lines[f"{where.key}.as"]
        elif isinstance(item, yaml.ScalarNode) and isinstance(p.value(item), str):
            source = target = p.value(item).strip()
            target_line = where.line
            problem = path_problem(target)
            if problem or os.path.isabs(target):
                p.fail(where.line, f"{where.key}: {target!r}: a short form must be a repo-relative "
                                   "path; use {path: /abs/source, as: repo/relative/place}")
        else:
            p.expected(where, "a mapping {path, as} or a repo-relative path", p.value(item))
        problem = path_problem(target)
        if problem:
            p.fail(target_line, f"{where.key}.as: {target!r}: {problem}")
        if is_git_path(target):
            p.fail(target_line, f"{where.key}.as: {target!r} would be inside .git")
        for other, line in seen.items():
            if target == other or target.startswith(other + "/") or other.startswith(target + "/"):
                p.fail(target_line, f"{where.key}.as: {target!r} overlaps the data on line {line}")
        seen[target] = target_line
        root = p.repo_root or Path.cwd()
        full = Path(os.path.expanduser(source))
        full = (full if full.is_absolute() else root / full).resolve()
        out.append(DataSpec(full, target))
    return tuple(out)


def _guards(p: _Parser, node: yaml.Node, at: _At) -> tuple[GuardSpec, ...]:
    """Each item is a command, or {name, command, timeout}; names are unique."""
    if not isinstance(node, yaml.SequenceNode):
        p.expected(at, "a list of commands", p.value(node))
    items: list[dict[str, Any]] = []
    named: dict[str, int] = {}
    for i, item in enumerate(node.value):
        where = at.item(i, p.line(item))
        p.lines[where.key] = where.line
        if isinstance(item, yaml.MappingNode):
            spec = _GUARD(p, item, where)
            if "name" in spec:
                line = p.lines[f"{where.key}.name"]
                if spec["name"] in named:
                    p.fail(line, f"{where.key}.name: {spec['name']!r} is already the name of "
                                 f"the guard on line {named[spec['name']]}")
                named[spec["name"]] = line
        elif isinstance(item, yaml.ScalarNode) and isinstance(p.value(item), str):
            spec = {"command": _text()(p, item, where)}
        else:
            p.expected(where, "a command or a mapping {name, command, timeout}", p.value(item))
        items.append(spec)
    taken = set(named)
    guards = []
    for spec in items:
        if "name" not in spec:
            spec["name"] = guard_name(spec["command"], taken)
            taken.add(spec["name"])
        guards.append(GuardSpec(**spec))
    return tuple(guards)


def _limits(p: _Parser, node: yaml.Node, at: _At) -> tuple[LimitSpec, ...]:
    """Each item is a mapping {metric | pattern, max_increase | max_decrease}."""
    if not isinstance(node, yaml.SequenceNode):
        p.expected(at, "a list of limits such as {metric: peak_mem_mb, max_increase: 10%}",
                   p.value(node))
    out = []
    for i, item in enumerate(node.value):
        where = at.item(i, p.line(item))
        p.lines[where.key] = where.line
        if not isinstance(item, yaml.MappingNode):
            p.expected(where, "a mapping {metric, max_increase or max_decrease}", p.value(item))
        out.append(_LIMIT(p, item, where))
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# Cross-key checks


def _build_verifier(p: _Parser, values: dict[str, Any], at: _At) -> VerifierSpec:
    if "metric" in values and "pattern" in values:
        line = max(p.lines[f"{at.key}.metric"], p.lines[f"{at.key}.pattern"])
        p.fail(line, f"{at.key}: give metric or pattern, not both")
    if "metric" not in values and "pattern" not in values:
        p.fail(at.line, f"{at.key}: needs metric (the metric's name, e.g. val_loss) or pattern "
                        "(a regex whose first group is the number)")
    return VerifierSpec(**values)


def _build_generator(p: _Parser, values: dict[str, Any], at: _At) -> GeneratorSpec:
    if "kind" not in values and "command" in values:
        # A command and no kind can only mean "run this command"; the default kind (claude)
        # would silently ignore it.
        values["kind"] = "command"
    if values.get("kind") == "command" and "command" not in values:
        p.fail(p.lines[f"{at.key}.kind"],
               f"{at.key}.command: required when {at.key}.kind is 'command'")
    return GeneratorSpec(**values)


def _reachable(pairs: int, alpha: float) -> bool:
    """Can the sequential test (autoloop.stats) keep after `pairs` pairs at level alpha? Its
    strongest evidence is that of identical gains with no calibration noise."""
    from autoloop import stats
    return pairs >= 2 and stats.sequential_log_lr([1.0] * pairs, []) >= math.log(1.0 / alpha)


def _build_accept(p: _Parser, values: dict[str, Any], at: _At) -> AcceptSpec:
    rule = values.get("rule", "strict")
    given = set(values)
    if rule == "strict":
        for key in ("alpha", "pairs", "confirm"):
            if key in values:
                p.fail(p.lines[f"{at.key}.{key}"],
                       f"{at.key}.{key}: only used with {at.key}.rule: paired (the strict rule "
                       "compares one measurement, or the median of verifier.repeats, per side)")
    else:
        # the sequential test holds its false-keep rate at alpha by construction, so one test at
        # 0.005 replaces two fixed batches at 0.05; 16 pairs is the most a decision may take
        values.setdefault("min_effect", Amount(1.0, True))
        values.setdefault("confirm", False)
        values.setdefault("alpha", 0.005)
        values.setdefault("pairs", 16)
    alpha, pairs = values.get("alpha", 0.05), values.get("pairs", 8)
    if alpha > 0.5:
        p.fail(p.lines[f"{at.key}.alpha"], f"{at.key}.alpha: expected a level between 0 and 0.5, "
                                           f"e.g. 0.05, got {alpha:g}")
    if rule == "paired" and not _reachable(pairs, alpha):
        need = next(n for n in range(2, 64) if _reachable(n, alpha))
        if "pairs" in given:
            p.fail(p.lines[f"{at.key}.pairs"],
                   f"{at.key}.pairs: {pairs} pairs can never reach alpha {alpha:g} (even when every "
                   f"pair shows the same gain); use at least {need} pairs")
        p.fail(p.lines[f"{at.key}.alpha"],
               f"{at.key}.alpha: {alpha:g} is out of reach of {pairs} pairs (even when every pair "
               f"shows the same gain); set {at.key}.pairs to at least {need}")
    return AcceptSpec(**values)


def _build_limit(p: _Parser, values: dict[str, Any], at: _At) -> LimitSpec:
    if "metric" in values and "pattern" in values:
        line = max(p.lines[f"{at.key}.metric"], p.lines[f"{at.key}.pattern"])
        p.fail(line, f"{at.key}: give metric or pattern, not both")
    if "metric" not in values and "pattern" not in values:
        p.fail(at.line, f"{at.key}: needs metric (a name in the verifier's output, e.g. "
                        "peak_mem_mb) or pattern (a regex whose first group is the number)")
    if "max_increase" in values and "max_decrease" in values:
        line = max(p.lines[f"{at.key}.max_increase"], p.lines[f"{at.key}.max_decrease"])
        p.fail(line, f"{at.key}: give max_increase or max_decrease, not both (a limit is "
                     "one-sided; write two items for both)")
    if "max_increase" not in values and "max_decrease" not in values:
        p.fail(at.line, f"{at.key}: needs max_increase or max_decrease (e.g. 10% of the "
                        "baseline, or a number in metric units)")
    return LimitSpec(**values)


def _build_holdout(p: _Parser, values: dict[str, Any], at: _At) -> dict[str, Any]:
    if "metric" in values and "pattern" in values:
        line = max(p.lines[f"{at.key}.metric"], p.lines[f"{at.key}.pattern"])
        p.fail(line, f"{at.key}: give metric or pattern, not both")
    if "metric" not in values and "pattern" not in values:
        p.fail(at.line, f"{at.key}: needs metric (the metric's name) or pattern (a regex "
                        "whose first group is the number)")
    return values


def _check_accept(p: _Parser, values: dict[str, Any]) -> None:
    verifier: VerifierSpec = values["verifier"]
    accept: AcceptSpec = values.get("accept", AcceptSpec())
    if accept.rule == "paired" and verifier.repeats > 1:
        p.fail(p.lines["verifier.repeats"],
               "verifier.repeats: only used with accept.rule: strict (the paired rule measures "
               "accept.pairs incumbent/candidate pairs instead)")
    if "holdout" in values:
        holdout = dict(values["holdout"])
        holdout.setdefault("direction", verifier.direction)
        values["holdout"] = HoldoutSpec(**holdout)


def _kwargs(p: _Parser, values: dict[str, Any], at: _At) -> dict[str, Any]:
    return values


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _worker_envs(p: _Parser, node: yaml.Node, at: _At) -> tuple[Mapping[str, str], ...]:
    """A list of mappings NAME: value, one per worker (worker i gets item i mod the length).
    Numbers are taken as their text (`CUDA_VISIBLE_DEVICES: 0` means "0")."""
    if not isinstance(node, yaml.SequenceNode) or not node.value:
        p.expected(at, 'a non-empty list of mappings, one per worker, e.g. [{CUDA_VISIBLE_DEVICES: "0"}, '
                       '{CUDA_VISIBLE_DEVICES: "1"}]', p.value(node))
    out: list[Mapping[str, str]] = []
    for i, item in enumerate(node.value):
        where = at.item(i, p.line(item))
        p.lines[where.key] = where.line
        if not isinstance(item, yaml.MappingNode):
            p.expected(where, "a mapping of environment variables such as {CUDA_VISIBLE_DEVICES: \"0\"}",
                       p.value(item))
        env: dict[str, str] = {}
        for name, line, value_node in p.pairs(item, where):
            key = where.child(name, line)
            p.lines[key.key] = line
            if not _ENV_NAME.fullmatch(name):
                p.fail(line, f"{key.key}: {name!r} is not an environment variable name "
                             "(letters, digits and '_', not starting with a digit)")
            if name.startswith("AUTOLOOP_") or name.startswith("GIT_"):
                p.fail(line, f"{key.key}: {name} is set by autoloop (or git) itself; choose another name")
            if unsafe_env(name):
                p.fail(line, f"{key.key}: {name} is removed from every verification (it could make "
                             "the verifier run code from outside the measured tree); set it in the "
                             "verifier's command instead")
            value = p.value(value_node)
            if isinstance(value, bool) or not isinstance(value, (str, int, float)):
                p.expected(key, "a string or a number", value)
            env[name] = value if isinstance(value, str) else str(value_node.value)
        out.append(types.MappingProxyType(env))
    return tuple(out)


def _build_parallel(p: _Parser, values: dict[str, Any], at: _At) -> ParallelSpec:
    workers, verify = values.get("workers"), values.get("verify")
    if workers is not None and workers > MAX_WORKERS:
        p.fail(p.lines[f"{at.key}.workers"],
               f"{at.key}.workers: expected a whole number from 1 to {MAX_WORKERS}, got {workers}")
    if workers is not None and verify is not None and verify > workers:
        p.fail(p.lines[f"{at.key}.verify"],
               f"{at.key}.verify: {verify} is more than {at.key}.workers ({workers}); a round has at "
               f"most {workers} candidates to verify")
    if workers is not None and "env" in values and len(values["env"]) > workers:
        p.fail(p.lines[f"{at.key}.env"],
               f"{at.key}.env: {len(values['env'])} entries for {workers} workers; give one per worker "
               f"(worker i uses entry i)")
    if values.get("executor", "local") != "ray":
        for key in ("address", "num_cpus", "num_gpus"):
            if key in values:
                p.fail(p.lines[f"{at.key}.{key}"],
                       f"{at.key}.{key}: only used with {at.key}.executor: ray")
    return ParallelSpec(**values)


# Generators that run inside autoloop (no subprocess to confine): they edit only through the
# allowlist-checked edit tool (anthropic, openai) or autoloop's own code (tune).
IN_PROCESS_KINDS = ("anthropic", "openai", "tune")


def _build_program(p: _Parser, values: dict[str, Any], at: _At) -> dict[str, Any]:
    _check_accept(p, values)
    _check_hardening(p, values)
    return values


def _check_hardening(p: _Parser, values: dict[str, Any]) -> None:
    data: tuple[DataSpec, ...] = values.get("data", ())
    if data and "allowed" in values:
        editable = PathRules(values["allowed"], values.get("forbidden", ()))
        for i, d in enumerate(data):
            for probe in (d.target, d.target + "/x"):
                if editable.allows(probe):
                    line = p.lines.get(f"data[{i}].as", p.lines.get(f"data[{i}]", 1))
                    p.fail(line, f"data[{i}].as: {d.target!r} is a path 'allowed' lets the "
                                 "generator write; read-only data needs a place it cannot touch")


class _ScalarOr(_Section):
    """A section that may also be written as one word: `sandbox: bwrap` = `{kind: bwrap}`."""

    def __init__(self, fields: Mapping[str, _Field], build: Callable[[_Parser, dict[str, Any], _At], Any],
                 scalar_key: str) -> None:
        super().__init__(fields, build)
        object.__setattr__(self, "scalar_key", scalar_key)

    def __call__(self, p: _Parser, node: yaml.Node, at: _At) -> Any:
        if isinstance(node, yaml.ScalarNode):
            key = self.scalar_key  # type: ignore[attr-defined]
            child = at.child(key, at.line)
            p.lines[child.key] = at.line
            return self.build(p, {key: self.fields[key].check(p, node, child)}, at)
        return super().__call__(p, node, at)


# ---------------------------------------------------------------------------------------------
# The schema. Keys are the dataclass field names; defaults live on the dataclasses.

_SECONDS = _number(above=0, what="a positive number of seconds")
_COMMAND = _text()

_GUARD = _Section({
    "name": _Field(_matching(_GUARD_NAME, "a name of letters, digits, '_', '.', '-'")),
    "command": _Field(_COMMAND, required=True),
    "timeout": _Field(_SECONDS),
}, _kwargs)

_VERIFIER = _Section({
    "command": _Field(_COMMAND, required=True),
    "metric": _Field(_matching(r"[A-Za-z0-9_.-]+",
                               "a metric name of letters, digits, '_', '.', '-'")),
    "pattern": _Field(_regex_with_group),
    "direction": _Field(_enum(("minimize", "maximize")), required=True),
    "timeout": _Field(_SECONDS),
    "repeats": _Field(_integer(at_least=1, what="a whole number >= 1")),
    "network": _Field(_boolean),
}, _build_verifier)

_ACCEPT = _Section({
    "rule": _Field(_enum(("strict", "paired"))),
    "min_effect": _Field(_amount(below_pct=100)),
    "alpha": _Field(_number(above=0, what="a level between 0 and 0.5, e.g. 0.05")),
    "pairs": _Field(_integer(at_least=1, what="a whole number >= 1")),
    "confirm": _Field(_boolean),
    "warmup": _Field(_integer(at_least=0, what="a whole number >= 0")),
    "final_pairs": _Field(_integer(at_least=0, what="a whole number >= 0")),
}, _build_accept)

_METRIC_NAME = _matching(r"[A-Za-z0-9_.-]+", "a metric name of letters, digits, '_', '.', '-'")

_LIMIT = _Section({
    "metric": _Field(_METRIC_NAME),
    "pattern": _Field(_regex_with_group),
    "max_increase": _Field(_amount()),
    "max_decrease": _Field(_amount()),
}, _build_limit)

_HOLDOUT = _Section({
    "command": _Field(_COMMAND, required=True),
    "metric": _Field(_METRIC_NAME),
    "pattern": _Field(_regex_with_group),
    "direction": _Field(_enum(("minimize", "maximize"))),
    "timeout": _Field(_SECONDS),
}, _build_holdout)

_PRICE = _Section({
    "input": _Field(_number(at_least=0, what="USD per million input tokens (>= 0)"),
                    required=True),
    "output": _Field(_number(at_least=0, what="USD per million output tokens (>= 0)"),
                     required=True),
}, lambda p, values, at: PriceSpec(**values))

_GENERATOR = _Section({
    "kind": _Field(_enum(_generator_kinds)),
    "command": _Field(_COMMAND),
    "timeout": _Field(_SECONDS),
    "args": _Field(_args),
    "model": _Field(_text(one_line=True)),
    "base_url": _Field(_matching(r"https?://\S+", "a URL starting with http:// or https://")),
    "max_turns": _Field(_integer(at_least=1, what="a whole number >= 1")),
    "max_tokens": _Field(_integer(at_least=1, what="a whole number >= 1")),
    "price": _Field(_PRICE),
    "seed": _Field(_integer(what="a whole number")),
}, _build_generator)

_STOP = _Section({
    "max_cycles": _Field(_integer(at_least=0, what="a whole number >= 0")),
    "max_minutes": _Field(_number(above=0, what="a positive number of minutes")),
    "patience": _Field(_integer(at_least=1, what="a whole number >= 1")),
    "target": _Field(_number(what="a number")),
    "max_cost_usd": _Field(_number(above=0, what="a positive amount of USD")),
}, lambda p, values, at: StopSpec(**values))

_SANDBOX = _ScalarOr({
    "kind": _Field(_enum(("auto", "none", "bwrap"))),
    "network": _Field(_boolean),
    "writable": _Field(_host_paths),
}, lambda p, values, at: SandboxSpec(**values), "kind")

_RESOURCES = _Section({
    "max_change_mb": _Field(_number(above=0, what="a positive number of MB")),
    "max_disk_mb": _Field(_number(above=0, what="a positive number of MB")),
    "max_processes": _Field(_integer(at_least=1, what="a whole number >= 1")),
}, lambda p, values, at: ResourcesSpec(**values))

_DATA = _Section({
    "path": _Field(_text(one_line=True), required=True),
    "as": _Field(_text(one_line=True), required=True),
}, _kwargs)

_PARALLEL = _Section({
    "workers": _Field(_integer(at_least=1, what=f"a whole number from 1 to {MAX_WORKERS}")),
    "verify": _Field(_integer(at_least=1, what="a whole number >= 1 (verifications at once)")),
    "executor": _Field(_enum(("local", "ray"))),
    "address": _Field(_text(one_line=True)),
    "num_cpus": _Field(_number(at_least=0, what="a number >= 0 (CPUs per verification task)")),
    "num_gpus": _Field(_number(at_least=0, what="a number >= 0 (GPUs per verification task)")),
    "env": _Field(_worker_envs),
}, _build_parallel)

_PROGRAM = _Section({
    "goal": _Field(_text(one_line=True), required=True),
    "allowed": _Field(_patterns(required=True, allow_git_check=True), required=True),
    "forbidden": _Field(_patterns(required=False, allow_git_check=False)),
    "verifier": _Field(_VERIFIER, required=True),
    "guards": _Field(_guards),
    "generator": _Field(_GENERATOR),
    "stop": _Field(_STOP),
    "accept": _Field(_ACCEPT),
    "limits": _Field(_limits),
    "holdout": _Field(_HOLDOUT),
    "sandbox": _Field(_SANDBOX),
    "resources": _Field(_RESOURCES),
    "data": _Field(_data),
    "parallel": _Field(_PARALLEL),
}, _build_program)


def known_keys() -> tuple[str, ...]:
    """Every key program.md accepts, dotted (`guards[].name` for keys of a guard mapping)."""

    def walk(section: _Section, prefix: str) -> list[str]:
        out = []
        for name, spec in section.fields.items():
            out.append(prefix + name)
            if isinstance(spec.check, _Section):
                out += walk(spec.check, f"{prefix}{name}.")
            if spec.check is _guards:
                out += walk(_GUARD, f"{prefix}{name}[].")
            if spec.check is _limits:
                out += walk(_LIMIT, f"{prefix}{name}[].")
            if spec.check is _data:
                out += walk(_DATA, f"{prefix}{name}[].")
        return out

    return tuple(walk(_PROGRAM, ""))
