"""`generator.kind: tune` — offline tuning of the constants marked `# tune:` in allowed files.

The human marks constants with a trailing comment:

    LR = 0.01  # tune: 1e-4..1e-1 log
    DEPTH = 4  # tune: 1..12 int
    WIDTH: int = 64  # tune: 8..512 int log
    ACT = "relu"  # tune: relu|tanh|gelu          (a categorical: one of the listed words)
    "dropout": 0.1,  # tune: 0..0.5          (JSON/YAML-ish keys; also `dropout: 0.1  # tune: ...`)

Grammar of the comment: `tune: LO..HI [FLAG ...]`, FLAG one of `int`, `float` (the default),
`log` (search in log space; needs LO > 0), `linear` (the default); or `tune: A|B|C` for a
categorical (the value is written back with the quotes it had). A line that is only a comment
is documentation, never a marker.

The search is Optuna's TPE sampler (autoloop.generators.tune_engine), rebuilt each cycle from
the ledger: the user's starting values (the baseline) are its first observation, every measured
cycle another one. Each cycle is one candidate: the configuration TPE proposes, written into
the files in place (the rest of each line byte for byte), with a hypothesis saying what changes
and why. A person's skip or anything else never measured teaches nothing; a crash or guard
failure counts as the worst value measured. Workers of a parallel round take successive points
of one study, so they never propose the same configuration. tune stops on its own only when a
finite space (ints and categoricals only) has been measured in full.
"""

from __future__ import annotations

import difflib
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from autoloop.errors import ConfigError, FatalGeneratorError
from autoloop.generators.base import GenContext, Proposal
from autoloop.generators.tune_engine import (N_STARTUP, Engine, Observation, Param, Suggestion,
                                             Value, canonical)
from autoloop.globs import PathRules, is_git_name
from autoloop.program import GeneratorSpec, Program

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
    value: Value         # integral for int parameters; one of `choices` for a categorical
    lo: float
    hi: float
    is_int: bool
    log: bool
    start: int           # offsets of the value literal within the line's text
    end: int
    choices: tuple[str, ...] | None = None
    quote: str = ""      # the quote a categorical's literal had, written back the same way

    @property
    def key(self) -> str:
        return f"{self.file}:{self.name}"

    @property
    def range_text(self) -> str:
        if self.choices is not None:
            return "|".join(self.choices)
        return f"{self.lo:g}..{self.hi:g}"

    @property
    def param(self) -> Param:
        return Param(self.key, self.lo, self.hi, self.is_int, self.log, self.choices)


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
        spec = match.group("spec").split("#", 1)[0].rstrip("\r")
        if name in seen:
            errors.append(f"{where}: {name} is already marked for tune on line {seen[name]}")
            continue
        if "|" in spec:
            try:
                choices = _parse_choices(spec)
            except ValueError as exc:
                errors.append(f"{where}: {name}: {exc}")
                continue
            quote = literal[0] if len(literal) >= 2 and literal[0] in "\"'" and literal[-1] == literal[0] else ""
            word = literal[1:-1] if quote else literal
            if word not in choices:
                errors.append(f"{where}: {name}: the value {literal} is not one of its choices "
                              f"{'|'.join(choices)}")
                continue
            seen[name] = lineno
            markers.append(Marker(file=rel, line=lineno, name=name, value=word, lo=0.0, hi=0.0,
                                  is_int=False, log=False, start=assign.start("value"),
                                  end=assign.end("value"), choices=choices, quote=quote))
            continue
        value = _parse_number(literal)
        if value is None:
            errors.append(f"{where}: {name}: the value {literal!r} is not a number literal")
            continue
        try:
            lo, hi, is_int, log = _parse_spec(spec)
        except ValueError as exc:
            errors.append(f"{where}: {name}: {exc}")
            continue
        problem = _check_marker(value, lo, hi, is_int, log)
        if problem:
            errors.append(f"{where}: {name}: {problem}")
            continue
        seen[name] = lineno
        markers.append(Marker(file=rel, line=lineno, name=name, value=value, lo=lo, hi=hi,
                              is_int=is_int, log=log, start=assign.start("value"),
                              end=assign.end("value")))
    return markers, errors


_CHOICE_RE = re.compile(r"^[\w.+-]+$")


def _parse_choices(spec: str) -> tuple[str, ...]:
    choices = tuple(c.strip() for c in spec.split("|"))
    bad = [c for c in choices if not _CHOICE_RE.match(c)]
    if bad:
        raise ValueError(f"expected `tune: A|B|C` (words, numbers, `_ . + -`), got {('tune:' + spec).strip()!r}")
    if len(set(choices)) != len(choices):
        raise ValueError(f"a choice is listed twice in {'|'.join(choices)}")
    return choices


def _parse_spec(spec: str) -> tuple[float, float, bool, bool]:
    # A second `#` starts a note for humans: `# tune: 1..12 int  # depth of the net`.
    match = _SPEC_RE.match(spec)
    if match is None:
        raise ValueError(f"expected `tune: LO..HI [int|float] [log]` or `tune: A|B|C`, got {('tune:' + spec).strip()!r}")
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


# --------------------------------------------------------------------------- the ledger as observations


def _config_of(meta: Mapping[str, Any]) -> dict[str, Value] | None:
    """The configuration a tune cycle measured (older ledgers recorded one parameter's move)."""
    config = meta.get("config")
    if isinstance(config, Mapping):
        return dict(config)
    incumbent = meta.get("incumbent")
    if isinstance(incumbent, Mapping) and "param" in meta and "file" in meta and "to" in meta:
        return {**incumbent, f"{meta['file']}:{meta['param']}": meta["to"]}
    return None


def observations(history: Sequence[Mapping[str, Any]],
                 current: Mapping[str, Value]) -> list[Observation]:
    """What the ledger measured, oldest first: the baseline (the user's values), then every
    tune candidate that reached the verifier.

    Only measurements count. A cycle with no metric is ignored unless the candidate crashed or
    failed a guard (a measured failure); so a person's skip, a violation or a gen_error teaches
    nothing. The incumbent's value is the metric it was measured at — after a person kept a
    regression, that regression, never a number it was not measured at.
    """
    out: list[Observation] = []
    seen: set[Any] = set()
    incumbent_value: float | None = None

    def add(config: Mapping[str, Value], value: float | None) -> None:
        key = canonical(config)
        if key not in seen:      # the first measurement of a configuration stands
            seen.add(key)
            out.append(Observation(dict(config), value))

    for record in history:
        status = record.get("status")
        metric = record.get("metric")
        if status == "baseline":
            incumbent_value = None if metric is None else float(metric)
            continue
        meta = record.get("gen_meta") or {}
        config = _config_of(meta) if isinstance(meta, Mapping) else None
        if config is None:
            if status == "keep" and metric is not None:
                incumbent_value = float(metric)   # another generator's keep: config unknown
            continue
        before = meta.get("incumbent")
        if isinstance(before, Mapping) and incumbent_value is not None:
            add(before, incumbent_value)
        if status in ("crash", "guard_fail"):
            add(config, None)
        elif metric is not None and status in ("keep", "discard"):
            add(config, float(metric))
            if status == "keep":
                incumbent_value = float(metric)
    if incumbent_value is not None:
        add(current, incumbent_value)
    return out


# --------------------------------------------------------------------------- the generator


class TuneGenerator:
    """Offline tuner of `# tune:` constants; deterministic given (spec.seed, history, worker)."""

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
        _check_optuna()

    def current_markers(self, workdir: Path, is_allowed: Callable[[str], bool] | None = None) -> list[Marker]:
        return scan_markers(workdir, candidate_files(workdir, self.rules, is_allowed))

    def engine(self, markers: Sequence[Marker]) -> Engine:
        return Engine([m.param for m in markers], self.program.verifier.direction, self.seed)

    def propose(self, ctx: GenContext) -> Proposal:
        try:
            markers = self.current_markers(ctx.workdir, ctx.is_allowed)
        except MarkerError as exc:
            raise FatalGeneratorError(f"tune: {exc}") from None
        if not markers:
            raise FatalGeneratorError("tune: no `# tune:` markers are left in the allowed files")
        current = {m.key: m.value for m in markers}
        seen = observations(ctx.history, current)
        if ctx.best is not None and not any(canonical(o.config) == canonical(current) for o in seen):
            seen.append(Observation(current, float(ctx.best)))   # a ledger without a baseline record
        worker = _worker(ctx.env)
        engine = self.engine(markers)
        points = engine.propose(seen, count=worker + 1)
        if len(points) <= worker:
            total = len({canonical(o.config) for o in seen}) + len(points)
            if points:      # the other workers of this round take the last unmeasured points
                return Proposal(hypothesis="Nothing left to try beside the other workers of this round",
                                no_change_reason=f"tune: the other workers of this round take the last "
                                                 f"{len(points)} of the {total} configurations",
                                meta={"exhausted": False})
            return Proposal(hypothesis="Stop tuning: every configuration of the marked parameters was measured",
                            no_change_reason=f"tune: all {total} configurations of the marked "
                                             "parameters were measured",
                            meta={"exhausted": True}, finished=True)
        point = points[worker]
        changes = []
        for m in markers:
            new = point.config[m.key]
            if canonical({m.key: new}) == canonical({m.key: m.value}):
                continue
            old_text, new_text = _rewrite(ctx.workdir, m, new)
            name = m.name if sum(x.name == m.name for x in markers) == 1 else m.key
            changes.append({"param": m.name, "file": m.file, "line": m.line, "name": name,
                            "from": _json_value(m, m.value), "to": _json_value(m, new),
                            "text": f"{name} {old_text} → {new_text}"})
        hypothesis = _hypothesis(markers, changes, point, seen, self.program.verifier.direction)
        return Proposal(
            hypothesis=hypothesis,
            meta={
                "config": {m.key: _json_value(m, point.config[m.key]) for m in markers},
                # The configuration it started from, measured at the incumbent's metric.
                "incumbent": {m.key: _json_value(m, m.value) for m in markers},
                "changes": [{k: c[k] for k in ("param", "file", "line", "from", "to")} for c in changes],
                "how": point.how,
                "observed": point.n_observed,
                "worker": worker,
            },
        )


def _check_optuna() -> None:
    try:
        import optuna  # noqa: F401  (fail at start-up, before the baseline, not at cycle 1)
    except ImportError as exc:
        raise ConfigError(f"generator.kind: tune needs the optuna package ({exc}); "
                          "install it with `pip install 'optuna>=4.0,<6'`") from None


def _worker(env: Mapping[str, str]) -> int:
    try:
        return max(0, int(env.get("AUTOLOOP_WORKER", "0")))
    except ValueError:
        return 0


def _hypothesis(markers: Sequence[Marker], changes: Sequence[Mapping[str, Any]], point: Suggestion,
                seen: Sequence[Observation], direction: str) -> str:
    """What changes and why, in words a person reading experiments.md can check."""
    moved = ", ".join(c["text"] for c in changes)
    kept = [m.name for m in markers if m.name not in {c["param"] for c in changes}]
    what = f"Set {moved}" + (f" ({', '.join(kept)} unchanged)" if kept else "")
    n = point.n_observed
    if point.how == "explore":
        why = (f"a quasi-random point to map the space: TPE models it once {N_STARTUP} points "
               f"are measured ({n} so far)")
    elif point.how == "random":
        why = "a random unmeasured point: every point TPE proposed was measured already"
    elif point.how == "local":
        why = "a small step from the best point measured, to refine the basin it is in"
    else:
        why = (f"TPE's pick after {n} measurements: where the best of them are denser than "
               "the rest, relative to what is still unexplored")
    scored = [o for o in seen if o.value is not None]
    if scored:
        best = min(scored, key=lambda o: o.value if direction == "minimize" else -o.value)  # type: ignore[operator]
        why += f"; best measured so far {best.value:.6g}"
        if point.how == "local":
            at = ", ".join(f"{m.name} {_text(m, best.config[m.key], yaml=False)}" for m in markers
                           if m.key in best.config)
            why += f" at {at}"
    return f"{what}: {why}"


def _json_value(marker: Marker, value: Value) -> Value | int:
    if marker.choices is not None:
        return str(value)
    return int(round(float(value))) if marker.is_int else float(value)


def _text(marker: Marker, value: Value, *, yaml: bool) -> str:
    if marker.choices is not None:
        return f"{marker.quote}{value}{marker.quote}"
    return _fmt(float(value), marker.is_int, yaml=yaml)


def _rewrite(workdir: Path, marker: Marker, value: Value) -> tuple[str, str]:
    """Replace only the value literal on the marker's line; every other byte stays as it was."""
    path = workdir / marker.file
    text = path.read_bytes().decode("utf-8")
    lines = text.split("\n")
    line = lines[marker.line - 1]
    old = line[marker.start:marker.end]
    new = _text(marker, value, yaml=path.suffix in (".yaml", ".yml"))
    lines[marker.line - 1] = line[:marker.start] + new + line[marker.end:]
    path.write_bytes("\n".join(lines).encode("utf-8"))
    return old, new
