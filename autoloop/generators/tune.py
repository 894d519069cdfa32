"""`generator.kind: tune` — offline, deterministic tuning of numeric constants.

The human marks constants in allowed files with a trailing comment:

    LR = 0.01  # tune: 1e-4..1e-1 log
    DEPTH = 4  # tune: 1..12 int
    WIDTH: int = 64  # tune: 8..512 int log
    "dropout": 0.1,  # tune: 0..0.5          (JSON/YAML-ish keys; also `dropout: 0.1  # tune: ...`)

Grammar of the comment: `tune: LO..HI [FLAG ...]`, FLAG one of `int`, `float` (the default),
`log` (search in log space; needs LO > 0), `linear` (the default). A line that is only a
comment is documentation, never a marker.

Each cycle tune changes ONE value in place (the rest of the line is kept byte for byte) and
learns from the ledger: every parameter carries a step size in normalized space ([0, 1] over
its range, log-transformed for `log`), in the spirit of a (1+1) evolution strategy. A keep
doubles the step and keeps the direction; a discard, crash or guard failure halves it and
flips the direction. A full configuration already measured is never proposed again (so no
value is retried at the same incumbent), and a step never jumps past a value already measured
on its axis, so each parameter brackets its best value. The parameter that just improved is
pushed again; after one miss its other side is tried at once; otherwise the parameter left
alone longest is next. A parameter whose step fell below the resolution, or whose every
neighbour was already measured, has converged; when all have, tune proposes nothing and says
why (the cycle becomes `no_change`).
"""

from __future__ import annotations

import difflib
import math
import os
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from autoloop.errors import ConfigError, FatalGeneratorError
from autoloop.generators.base import GenContext, Proposal
from autoloop.globs import PathRules, is_git_name
from autoloop.program import GeneratorSpec, Program

# Normalized step sizes (fractions of a parameter's range, in log space for `log`).
# The first probe moves 1/8 of the range: a factor of ~2.4 over 1e-4..1e-1, one unit over 1..12.
STEP_INIT = 0.125
STEP_MAX = 0.5
# Below 1/64 of the range a float parameter counts as converged: finer than that, one noisy
# measurement per side cannot tell the difference anyway, and the cycles are better spent elsewhere.
STEP_MIN = 1.0 / 64
GROW = 2.0
SHRINK = 0.5

# Statuses whose candidate was really evaluated: its configuration is "measured". A crash or a
# guard failure counts as a bad measurement (the value broke something), not as "never tried".
_MEASURED = frozenset({"keep", "discard", "crash", "guard_fail"})

# Files larger than this are data, not code; scanning them would only slow every cycle down.
_MAX_SCAN_BYTES = 2_000_000

_NUM = r"[-+]?(?:\d[\d_]*(?:\.[\d_]*)?|\.\d[\d_]*)(?:[eE][-+]?\d+)?"
_NUM_RE = re.compile(rf"^{_NUM}$")
# `# tune:` with code before it on the same line; a comment-only line is documentation.
_MARKER_RE = re.compile(r"^(?P<head>.*?\S.*?)#\s*tune:(?P<spec>.*)$")
_PY_ASSIGN_RE = re.compile(
    r"^(?P<lead>\s*(?P<name>[A-Za-z_][\w.]*)\s*(?::[^=]*)?=\s*)(?P<value>[^\s,;]+)\s*[,;]?\s*$"
)
_KEY_VALUE_RE = re.compile(
    r"""^(?P<lead>\s*(?P<q>["']?)(?P<name>[A-Za-z_][\w.-]*)(?P=q)\s*:\s*)(?P<value>[^\s,;]+)\s*,?\s*$"""
)
_SPEC_RE = re.compile(rf"^\s*(?P<lo>{_NUM})\s*\.\.\s*(?P<hi>{_NUM})(?P<flags>(?:\s+[^\s]+)*)\s*$")
_FLAGS = ("int", "float", "log", "linear")


@dataclass(frozen=True)
class Marker:
    """One tunable constant as it stands in one file."""

    file: str            # repo-relative, `/`-separated
    line: int            # 1-based
    name: str
    value: float         # integral for int parameters
    lo: float
    hi: float
    is_int: bool
    log: bool
    start: int           # offsets of the value literal within the line's text
    end: int

    @property
    def key(self) -> str:
        return f"{self.file}:{self.name}"

    @property
    def range_text(self) -> str:
        return f"{self.lo:g}..{self.hi:g}"

    def norm(self, x: float) -> float:
        """x → [0, 1] over the range (log-transformed for log parameters)."""
        if self.log:
            return (math.log(x) - math.log(self.lo)) / (math.log(self.hi) - math.log(self.lo))
        return (x - self.lo) / (self.hi - self.lo)

    def denorm(self, u: float) -> float:
        u = min(1.0, max(0.0, u))
        if self.log:
            return math.exp(math.log(self.lo) + u * (math.log(self.hi) - math.log(self.lo)))
        return self.lo + u * (self.hi - self.lo)


class MarkerError(ValueError):
    """One or more bad markers; each message is `FILE:LINE: ...`."""

    def __init__(self, messages: Sequence[str]) -> None:
        super().__init__("\n".join(messages))
        self.messages = list(messages)


# --------------------------------------------------------------------------- number formatting


def _fmt(x: float, is_int: bool, *, yaml: bool = False) -> str:
    """Ints as ints; floats as Python's shortest round-tripping repr (0.02, 3e-05)."""
    if is_int:
        return str(int(round(x)))
    text = repr(float(x))
    if yaml and "e" in text and "." not in text.split("e")[0]:
        # PyYAML (YAML 1.1) reads `3e-05` as a string; `3.0e-05` is a float everywhere.
        mantissa, _, exponent = text.partition("e")
        text = f"{mantissa}.0e{exponent}"
    return text


def _parse_number(text: str) -> float | None:
    if not _NUM_RE.match(text):
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


# --------------------------------------------------------------------------- marker parsing


def parse_markers(text: str, rel: str) -> tuple[list[Marker], list[str]]:
    """All markers in one file's text, and the `FILE:LINE: ...` errors of the bad ones."""
    markers: list[Marker] = []
    errors: list[str] = []
    seen: dict[str, int] = {}
    for index, raw in enumerate(text.split("\n")):
        if "tune:" not in raw:
            continue
        match = _MARKER_RE.match(raw)
        if match is None or match.group("head").lstrip().startswith(("#", "//")):
            continue
        lineno = index + 1
        where = f"{rel}:{lineno}"
        head = match.group("head")
        assign = _PY_ASSIGN_RE.match(head) or _KEY_VALUE_RE.match(head)
        if assign is None:
            if "=" not in head and ":" not in head:
                continue    # prose that mentions markers (a docstring), not an attempt at one
            errors.append(f"{where}: a tune marker must follow `NAME = NUMBER` "
                          f"(or `\"name\": NUMBER`), got {head.strip()!r}")
            continue
        name = assign.group("name")
        literal = assign.group("value")
        value = _parse_number(literal)
        if value is None:
            errors.append(f"{where}: {name}: the value {literal!r} is not a number literal")
            continue
        try:
            lo, hi, is_int, log = _parse_spec(match.group("spec"))
        except ValueError as exc:
            errors.append(f"{where}: {name}: {exc}")
            continue
        problem = _check_marker(value, lo, hi, is_int, log)
        if problem:
            errors.append(f"{where}: {name}: {problem}")
            continue
        if name in seen:
            errors.append(f"{where}: {name} is already marked for tune on line {seen[name]}")
            continue
        seen[name] = lineno
        markers.append(Marker(file=rel, line=lineno, name=name, value=value, lo=lo, hi=hi,
                              is_int=is_int, log=log, start=assign.start("value"),
                              end=assign.end("value")))
    return markers, errors


def _parse_spec(spec: str) -> tuple[float, float, bool, bool]:
    # A second `#` starts a note for humans: `# tune: 1..12 int  # depth of the net`.
    spec = spec.split("#", 1)[0].rstrip("\r")
    match = _SPEC_RE.match(spec)
    if match is None:
        raise ValueError(f"expected `tune: LO..HI [int|float] [log]`, got {('tune:' + spec).strip()!r}")
    lo = _parse_number(match.group("lo"))
    hi = _parse_number(match.group("hi"))
    if lo is None or hi is None:
        raise ValueError(f"bounds must be numbers, got {match.group('lo')!r}..{match.group('hi')!r}")
    flags = match.group("flags").split()
    for flag in flags:
        if flag not in _FLAGS:
            close = difflib.get_close_matches(flag, _FLAGS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"unknown scale {flag!r}{hint}; expected int, float, log or linear")
    if "int" in flags and "float" in flags:
        raise ValueError("a parameter is either int or float, not both")
    if "log" in flags and "linear" in flags:
        raise ValueError("a parameter is either log or linear, not both")
    return lo, hi, "int" in flags, "log" in flags


def _check_marker(value: float, lo: float, hi: float, is_int: bool, log: bool) -> str | None:
    if lo >= hi:
        return f"the range {_fmt(lo, False)}..{_fmt(hi, False)} is empty (LO must be below HI)"
    if log and lo <= 0:
        return f"a log scale needs LO > 0, got {_fmt(lo, False)}"
    if is_int:
        for label, number in (("value", value), ("LO", lo), ("HI", hi)):
            if not float(number).is_integer():
                return f"an int parameter needs an integer {label}, got {_fmt(number, False)}"
    if not lo <= value <= hi:
        return f"the value {_fmt(value, is_int)} is outside its range {_fmt(lo, is_int)}..{_fmt(hi, is_int)}"
    return None


# --------------------------------------------------------------------------- finding files


def _static_prefix(pattern: str) -> str:
    """The directories of a glob before its first wildcard: the only subtree worth walking."""
    parts: list[str] = []
    for part in pattern.strip("/").split("/"):
        if any(ch in part for ch in "*?["):
            break
        parts.append(part)
    return "/".join(parts)


def candidate_files(root: Path, rules: PathRules,
                    is_allowed: Callable[[str], bool] | None = None) -> list[str]:
    """Repo-relative paths of the regular files under `root` that the generator may edit."""
    found: set[str] = set()
    for pattern in rules.allowed:
        prefix = _static_prefix(pattern)
        start = root / prefix if prefix else root
        if start.is_symlink():
            continue  # writing through a link would edit a file the globs never named
        if start.is_file():
            found.add(prefix)
            continue
        if not start.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(start):
            dirnames[:] = sorted(d for d in dirnames if not is_git_name(d))
            base = Path(dirpath).relative_to(root).as_posix()
            for filename in filenames:
                found.add(filename if base == "." else f"{base}/{filename}")
    result = []
    for rel in sorted(found):
        path = root / rel
        if not rules.allows(rel) or path.is_symlink() or not path.is_file():
            continue
        if is_allowed is not None and not is_allowed(rel):
            continue
        result.append(rel)
    return result


def scan_markers(root: Path, files: Iterable[str]) -> list[Marker]:
    """Markers of every file, in path order; raises MarkerError listing every bad one."""
    markers: list[Marker] = []
    errors: list[str] = []
    for rel in files:
        path = root / rel
        try:
            if path.stat().st_size > _MAX_SCAN_BYTES:
                continue
            data = path.read_bytes()
        except OSError:
            continue
        if b"tune:" not in data:
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            continue  # binary files cannot hold markers we could rewrite safely
        found, bad = parse_markers(text, rel)
        markers.extend(found)
        errors.extend(bad)
    if errors:
        raise MarkerError(errors)
    return markers


# --------------------------------------------------------------------------- learning from the ledger


Config = frozenset  # frozenset[tuple[str, float]]: every parameter's value, one configuration


@dataclass
class _State:
    """What the ledger taught about one parameter."""

    step: float = STEP_INIT
    direction: int = 0                 # 0: never measured, use the prior
    last_cycle: int = -1
    fails: int = 0                     # consecutive failures since its last keep
    streak: int = 0                    # consecutive keeps in `direction`
    last: Mapping[str, Any] | None = None


@dataclass
class _Memory:
    states: dict[str, _State] = field(default_factory=dict)
    measured: set[Config] = field(default_factory=set)
    last_key: str | None = None        # parameter of the most recent measured tune cycle


def _config(values: Mapping[str, float]) -> Config:
    return frozenset((k, float(v)) for k, v in values.items())


def _record_key(meta: Mapping[str, Any]) -> str | None:
    if not isinstance(meta, Mapping) or "param" not in meta or "file" not in meta:
        return None
    return f"{meta['file']}:{meta['param']}"


def replay(history: Sequence[Mapping[str, Any]]) -> _Memory:
    """Fold the ledger into per-parameter step sizes and the set of measured configurations."""
    memory = _Memory()
    for record in history:
        meta = record.get("gen_meta") or {}
        key = _record_key(meta)
        status = record.get("status")
        if key is None or status not in _MEASURED:
            continue  # not ours, or the candidate never reached the verifier
        try:
            before = {str(k): float(v) for k, v in (meta.get("incumbent") or {}).items()}
            old, new, step = float(meta["from"]), float(meta["to"]), float(meta["step"])
        except (TypeError, ValueError, KeyError):
            continue  # a record we cannot read teaches nothing; never let it stop the run
        if before:
            memory.measured.add(_config(before))
            memory.measured.add(_config({**before, key: new}))
        direction = 1 if new > old else -1
        state = memory.states.setdefault(key, _State())
        if status == "keep":
            state.streak = state.streak + 1 if state.direction == direction and state.fails == 0 else 1
            state.step = min(step * GROW, STEP_MAX)
            state.direction = direction
            state.fails = 0
        else:
            state.step = step * SHRINK
            state.direction = -direction
            state.fails += 1
            state.streak = 0
        state.last_cycle = int(record.get("cycle", 0))
        state.last = record
        memory.last_key = key
    return memory


# --------------------------------------------------------------------------- choosing a move


@dataclass(frozen=True)
class Move:
    marker: Marker
    value: float
    direction: int
    step: float
    reason: str


def _compact(marker: Marker, exact: float, current: float, direction: int, tolerance: float) -> float:
    """The shortest decimal near `exact` (within `tolerance` in normalized space): 0.02, not 0.0237.

    It must stay on the same side of `current` as `exact`: rounding 0.95 to 0.9 is not a raise.
    """
    for digits in range(1, 16):
        candidate = float(f"{exact:.{digits}g}")
        if (marker.lo <= candidate <= marker.hi and (candidate - current) * direction > 0
                and abs(marker.norm(candidate) - marker.norm(exact)) <= tolerance):
            return candidate
    return exact


def _step_value(marker: Marker, current: float, direction: int, step: float) -> float | None:
    """The value `step` away from `current` in `direction`, clamped to the bounds; None if none moves."""
    exact = marker.denorm(marker.norm(current) + direction * step)
    if marker.is_int:
        value = float(round(exact))
        if value == current:
            value = current + direction     # a step that rounds to the same int becomes one unit
        value = min(marker.hi, max(marker.lo, value))
    elif (exact - current) * direction <= 0:
        return None                         # clamped at the bound it was heading for
    else:
        value = _compact(marker, exact, current, direction, step / 4)
    return None if value == current else value


def _axis(key: str, values: Mapping[str, float], measured: set[Config]) -> set[float]:
    """Values of `key` already measured with every other parameter as it is now."""
    others = {k: v for k, v in values.items() if k != key}
    found: set[float] = set()
    for config in measured:
        as_dict = dict(config)
        if key in as_dict and len(as_dict) == len(values) and all(
                as_dict.get(k) == v for k, v in others.items()):
            found.add(as_dict[key])
    return found


@dataclass(frozen=True)
class _Search:
    value: float
    direction: int
    step: float
    preferred: int
    at_bound: bool              # the preferred direction was blocked by the bound itself
    short_of: str | None        # the measured value a reduced step stopped short of


def _neighbour(marker: Marker, state: _State, values: Mapping[str, float],
               measured: set[Config], prior: int) -> _Search | None:
    """The move to make: the preferred direction first (largest step first), then the other one.

    A candidate is skipped if its configuration was measured, or if it would jump past a value
    already measured on this axis: the answer there is known, so the search stays between the
    incumbent and its nearest measured neighbours, which is what makes it converge.
    """
    current = values[marker.key]
    axis = _axis(marker.key, values, measured)
    preferred = state.direction or prior
    at_bound = False
    for direction in (preferred, -preferred):
        step = state.step
        while step >= STEP_MIN:
            value = _step_value(marker, current, direction, step)
            if value is None:
                at_bound = at_bound or direction == preferred
                break       # every smaller step hits the same bound
            ahead = [m for m in axis if (m - current) * direction > 0 and (value - m) * direction >= 0]
            if not ahead:
                beyond = [m for m in axis if (m - value) * direction > 0]
                short_of = None
                if step < state.step and beyond:
                    short_of = _fmt(min(beyond, key=lambda m: abs(m - value)), marker.is_int)
                return _Search(value, direction, step, preferred, at_bound, short_of)
            step /= 2
    return None


_COUNT_WORDS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


def _count(n: int) -> str:
    return _COUNT_WORDS[n] if n < len(_COUNT_WORDS) else str(n)


def _reason(marker: Marker, state: _State, found: _Search) -> str:
    """Why this move, in words a human reading experiments.md would accept as a hypothesis."""
    clauses = [c for c in (_lesson_of_last(marker, state, found.direction),) if c]
    if found.direction != found.preferred:
        if found.at_bound:
            clauses.append(f"it is at its {'upper' if found.preferred > 0 else 'lower'} bound")
        else:
            where = "above" if found.preferred > 0 else "below"
            clauses.append(f"everything worth trying {where} it was already measured")
    elif found.short_of is not None:
        clauses.append(f"a smaller step, short of {found.short_of} (already measured)")
    if not clauses or state.last is None:
        if found.direction == found.preferred:
            where = "low" if found.direction > 0 else "high"
            clauses.insert(0, f"untried so far, and it starts in the {where} part of its range "
                              f"{marker.range_text}")
        else:
            clauses.insert(0, "untried so far")
    return "; ".join(clauses)


def _lesson_of_last(marker: Marker, state: _State, direction: int) -> str:
    """What the parameter's last measured change taught, as a clause; "" if it has none."""
    last = state.last
    if last is None:
        return ""
    meta = last.get("gen_meta") or {}
    last_dir = 1 if float(meta.get("to", 0)) > float(meta.get("from", 0)) else -1
    last_to = _fmt(float(meta.get("to", 0)), marker.is_int)
    verb = "raising" if last_dir > 0 else "lowering"
    noun = "increase" if last_dir > 0 else "decrease"
    status = last.get("status")
    if status == "keep":
        n = max(1, state.streak) if direction == last_dir else 1
        return f"the last {noun} helped" if n == 1 else f"the last {_count(n)} {noun}s helped"
    if status == "crash":
        outcome = "crashed the verifier"
    elif status == "guard_fail":
        outcome = "failed a guard"
    elif last.get("metric") is not None and last.get("best") is not None \
            and float(last["metric"]) == float(last["best"]):
        outcome = "made no difference"
    else:
        outcome = "was worse"
    return f"{verb} it to {last_to} {outcome}"


class TuneGenerator:
    """Offline tuner of `# tune:` constants; deterministic given (spec.seed, history)."""

    def __init__(self, spec: GeneratorSpec, program: Program) -> None:
        self.spec = spec
        self.program = program
        self.seed = spec.seed
        # program.md is never editable, whatever the globs say; the loop adds its own files to
        # ctx.is_allowed at propose time.
        self.rules = PathRules(program.allowed, program.forbidden, {program.rel_path: "program"})
        files = candidate_files(program.repo_root, self.rules)
        try:
            markers = scan_markers(program.repo_root, files)
        except MarkerError as exc:
            raise ConfigError(str(exc)) from None
        if not markers:
            line = program.lines.get("generator.kind") or program.lines.get("generator")
            where = f"{program.rel_path}:{line}" if line else program.rel_path
            raise ConfigError(
                f"{where}: generator.kind: tune found no markers in the allowed files "
                f"({', '.join(program.allowed)}); mark a constant like "
                f"`LR = 0.01  # tune: 1e-4..1e-1 log`"
            )
        self.markers: tuple[Marker, ...] = tuple(markers)

    def _rank(self, key: str, index: int) -> tuple[float, int]:
        """Rotation order among parameters never measured: file order, or shuffled by the seed."""
        if self.seed is None:
            return (0.0, index)
        return (random.Random(f"{self.seed}:{key}").random(), index)

    def _prior(self, marker: Marker, current: float) -> int:
        """First direction for a never-measured parameter: toward the middle of its range."""
        u = marker.norm(current)
        if u < 0.5:
            return 1
        if u > 0.5:
            return -1
        return 1 if self.seed is None else random.Random(f"{self.seed}:{marker.key}:dir").choice((1, -1))

    def current_markers(self, workdir: Path, is_allowed: Callable[[str], bool] | None = None) -> list[Marker]:
        return scan_markers(workdir, candidate_files(workdir, self.rules, is_allowed))

    def choose(self, markers: Sequence[Marker], history: Sequence[Mapping[str, Any]]) -> Move | None:
        """The next move given the incumbent's markers and the ledger; None when all converged."""
        values = {m.key: m.value for m in markers}
        memory = replay(history)
        memory.measured.add(_config(values))

        def attempt(marker: Marker) -> Move | None:
            state = memory.states.get(marker.key, _State())
            found = _neighbour(marker, state, values, memory.measured, self._prior(marker, marker.value))
            if found is None:
                return None
            return Move(marker, found.value, found.direction, found.step, _reason(marker, state, found))

        # Momentum: after a keep, push the same parameter again; after its first miss, try its
        # other side at once (a compass step) before moving on.
        last = next((m for m in markers if m.key == memory.last_key), None)
        if last is not None and memory.states[last.key].fails <= 1:
            move = attempt(last)
            if move is not None:
                return move
        # Otherwise rotate: the parameter measured longest ago first.
        order = sorted(
            range(len(markers)),
            key=lambda i: (memory.states.get(markers[i].key, _State()).last_cycle,
                           *self._rank(markers[i].key, i)),
        )
        for i in order:
            move = attempt(markers[i])
            if move is not None:
                return move
        return None

    def propose(self, ctx: GenContext) -> Proposal:
        try:
            markers = self.current_markers(ctx.workdir, ctx.is_allowed)
        except MarkerError as exc:
            raise FatalGeneratorError(f"tune: {exc}") from None
        if not markers:
            raise FatalGeneratorError("tune: no `# tune:` markers are left in the allowed files")
        move = self.choose(markers, ctx.history)
        if move is None:
            return Proposal(hypothesis="Stop tuning: every marked parameter has converged",
                            no_change_reason=_converged(markers),
                            meta={"converged": len(markers)}, finished=True)
        marker = move.marker
        old_text, new_text = _rewrite(ctx.workdir, marker, move.value)
        name = marker.name if sum(m.name == marker.name for m in markers) == 1 else marker.key
        verb = "Raise" if move.value > marker.value else "Lower"
        hypothesis = f"{verb} {name} from {old_text} to {new_text}: {move.reason}"
        return Proposal(
            hypothesis=hypothesis,
            meta={
                "param": marker.name,
                "file": marker.file,
                "line": marker.line,
                "from": _json_number(marker.value, marker.is_int),
                "to": _json_number(move.value, marker.is_int),
                "step": round(move.step, 6),
                "scale": "log" if marker.log else "linear",
                "int": marker.is_int,
                # The whole configuration it started from, so later cycles never re-measure it.
                "incumbent": {m.key: _json_number(m.value, m.is_int) for m in markers},
            },
        )


def _json_number(x: float, is_int: bool) -> float | int:
    return int(round(x)) if is_int else float(x)


def _rewrite(workdir: Path, marker: Marker, value: float) -> tuple[str, str]:
    """Replace only the value literal on the marker's line; every other byte stays as it was."""
    path = workdir / marker.file
    text = path.read_bytes().decode("utf-8")
    lines = text.split("\n")
    line = lines[marker.line - 1]
    old = line[marker.start:marker.end]
    new = _fmt(value, marker.is_int, yaml=path.suffix in (".yaml", ".yml"))
    lines[marker.line - 1] = line[:marker.start] + new + line[marker.end:]
    path.write_bytes("\n".join(lines).encode("utf-8"))
    return old, new


def _resolution(marker: Marker) -> str:
    """How finely the parameter was pinned down: one unit for ints, STEP_MIN of the range otherwise."""
    if marker.is_int:
        return "1"
    up = marker.denorm(marker.norm(marker.value) + STEP_MIN)
    down = marker.denorm(marker.norm(marker.value) - STEP_MIN)
    width = max(up - marker.value, marker.value - down)
    return f"{width:.2g}"


def _converged(markers: Sequence[Marker]) -> str:
    parts = [f"{m.name} at {_fmt(m.value, m.is_int)} ±{_resolution(m)}" for m in markers]
    n = len(markers)
    noun = "parameter" if n == 1 else "parameters"
    every = "the only" if n == 1 else f"all {n}"
    return f"tune: {every} {noun} converged ({', '.join(parts)})"
