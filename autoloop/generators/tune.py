"""`generator.kind: tune`: offline tuning of the constants marked `# tune:` in allowed files.

Grammar: `NAME = VALUE  # tune: LO..HI [int|float] [log|linear]` or `# tune: A|B|C` (also
`"key": VALUE,` in JSON/YAML-ish files); a second `#` starts a note. Each cycle writes the whole
configuration TPE proposes (tune_engine), only the value literals changed. The study is rebuilt
from the ledger every cycle, so resume and parallel workers need no state.
"""

from __future__ import annotations

import itertools
import math
import re
import stat
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from autoloop.errors import ConfigError, FatalGeneratorError
from autoloop.program.frontmatter import closest
from autoloop.generators.base import GenContext, Proposal
from autoloop.generators.tune_engine import Engine, Observation, Param, Suggestion, Value, canonical
from autoloop.program.globs import PathRules
from autoloop.program.reader import GeneratorSpec, Program
from autoloop.base.walk import walk

# Files larger than this are data, not code; scanning them would only slow every cycle down.
_MAX_SCAN_BYTES = 2_000_000
_NUM = r"[-+]?(?:\d[\d_]*(?:\.[\d_]*)?|\.\d[\d_]*)(?:[eE][-+]?\d+)?"
_MARKER_RE = re.compile(r"^(?P<head>.*?\S.*?)#\s*tune:(?P<spec>.*)$")   # code before it: a marker
_ASSIGN_RES = (
    re.compile(r"^(?P<lead>\s*(?P<name>[A-Za-z_][\w.]*)\s*(?::[^=]*)?=\s*)"
               r"(?P<value>[^\s,;]+)\s*[,;]?\s*$"),
    re.compile(r"""^(?P<lead>\s*(?P<q>["']?)(?P<name>[A-Za-z_][\w.-]*)(?P=q)\s*:\s*)"""
               r"(?P<value>[^\s,;]+)\s*,?\s*$"),
)
_SPEC_RE = re.compile(rf"^\s*(?P<lo>{_NUM})\s*\.\.\s*(?P<hi>{_NUM})(?P<flags>(?:\s+[^\s]+)*)\s*$")
_CHOICE_RE = re.compile(r"^[\w.+-]+$")
_FLAGS = ("int", "float", "log", "linear")


@dataclass(frozen=True)
class Marker:
    """One tunable constant as it stands in one file: the value literal is line[start:end]."""

    file: str
    line: int
    name: str
    value: Value
    param: Param         # its range and scale, keyed `file:name`
    start: int
    end: int
    quote: str = ""      # a categorical's quote, written back the same way


def _fmt(x: float, is_int: bool, *, yaml: bool = False) -> str:
    if is_int:
        return str(int(round(x)))
    text = repr(float(x))
    if yaml and "e" in text and "." not in text.split("e")[0]:   # PyYAML reads 3e-05 as a string
        mantissa, _, exponent = text.partition("e")
        text = f"{mantissa}.0e{exponent}"
    return text


def _number(text: str) -> float | None:
    value = float(text) if re.fullmatch(_NUM, text) else math.nan
    return value if math.isfinite(value) else None


def parse_markers(text: str, rel: str) -> tuple[list[Marker], list[str]]:
    """All markers in one file's text, and the `FILE:LINE: ...` errors of the bad ones."""
    markers: list[Marker] = []
    errors: list[str] = []
    seen: dict[str, int] = {}
    for lineno, raw in enumerate(text.split("\n"), 1):
        match = _MARKER_RE.match(raw) if "tune:" in raw else None
        if match is None or match.group("head").lstrip().startswith(("#", "//")):
            continue
        head = match.group("head")
        assign = _ASSIGN_RES[0].match(head) or _ASSIGN_RES[1].match(head)
        if assign is None:
            if "=" in head or ":" in head:   # else prose that mentions markers (a docstring)
                errors.append(f"{rel}:{lineno}: a tune marker must follow `NAME = NUMBER` "
                              f"(or `\"name\": NUMBER`), got {head.strip()!r}")
            continue
        name, literal = assign.group("name"), assign.group("value")
        if name in seen:
            errors.append(f"{rel}:{lineno}: {name} is already marked for tune on line {seen[name]}")
            continue
        try:
            value, param, quote = _parse_one(f"{rel}:{name}", literal,
                                             match.group("spec").split("#", 1)[0].rstrip("\r"))
        except ValueError as exc:
            errors.append(f"{rel}:{lineno}: {name}: {exc}")
            continue
        seen[name] = lineno
        markers.append(Marker(rel, lineno, name, value, param, assign.start("value"),
                              assign.end("value"), quote))
    return markers, errors


def _parse_one(key: str, literal: str, spec: str) -> tuple[Value, Param, str]:
    """(value, range, quote) of one marker; ValueError says what is wrong with it."""
    if "|" in spec:
        choices = tuple(c.strip() for c in spec.split("|"))
        if not all(_CHOICE_RE.match(c) for c in choices):
            raise ValueError("expected `tune: A|B|C` (words, numbers, `_ . + -`), "
                             f"got {('tune:' + spec).strip()!r}")
        if len(set(choices)) != len(choices):
            raise ValueError(f"a choice is listed twice in {'|'.join(choices)}")
        quoted = len(literal) >= 2 and literal[0] in "\"'" and literal[-1] == literal[0]
        word = literal[1:-1] if quoted else literal
        if word not in choices:
            raise ValueError(f"the value {literal} is not one of its choices {'|'.join(choices)}")
        return word, Param(key, choices=choices), literal[0] if quoted else ""
    value = _number(literal)
    if value is None:
        raise ValueError(f"the value {literal!r} is not a number literal")
    match = _SPEC_RE.match(spec)
    if match is None:
        raise ValueError("expected `tune: LO..HI [int|float] [log]` or `tune: A|B|C`, "
                         f"got {('tune:' + spec).strip()!r}")
    lo, hi = _number(match.group("lo")), _number(match.group("hi"))
    if lo is None or hi is None:
        raise ValueError(f"bounds must be numbers, got {match.group('lo')!r}..{match.group('hi')!r}")
    flags = match.group("flags").split()
    for flag in flags:
        if flag not in _FLAGS:
            close = closest(flag, _FLAGS)
            hint = f" (did you mean {close!r}?)" if close else ""
            raise ValueError(f"unknown scale {flag!r}{hint}; expected int, float, log or linear")
    for one, other in (("int", "float"), ("log", "linear")):
        if one in flags and other in flags:
            raise ValueError(f"a parameter is either {one} or {other}, not both")
    is_int, log = "int" in flags, "log" in flags
    if lo >= hi:
        raise ValueError(f"the range {_fmt(lo, False)}..{_fmt(hi, False)} is empty "
                         "(LO must be below HI)")
    if log and lo <= 0:
        raise ValueError(f"a log scale needs LO > 0, got {_fmt(lo, False)}")
    for label, number in (("value", value), ("LO", lo), ("HI", hi)):
        if is_int and not float(number).is_integer():
            raise ValueError(f"an int parameter needs an integer {label}, got {_fmt(number, False)}")
    if not lo <= value <= hi:
        raise ValueError(f"the value {_fmt(value, is_int)} is outside its range "
                         f"{_fmt(lo, is_int)}..{_fmt(hi, is_int)}")
    return value, Param(key, lo, hi, is_int, log), ""


def candidate_files(root: Path, rules: PathRules,
                    is_allowed: Callable[[str], bool] | None = None) -> list[str]:
    """Repo-relative paths of the regular files under `root` that the generator may edit."""
    found: set[str] = set()
    for pattern in rules.allowed:
        # only the folders before a glob's first wildcard are worth walking
        prefix = "/".join(itertools.takewhile(lambda part: not any(ch in part for ch in "*?["),
                                              pattern.strip("/").split("/")))
        start = root / prefix
        if start.is_symlink():
            continue  # writing through a link would edit a file the globs never named
        if start.is_file():
            found.add(prefix)
        found.update(f"{prefix}/{rel}".lstrip("/") for rel, _, st in walk(str(start), skip={".git"})
                     if st is not None and stat.S_ISREG(st.st_mode))   # lstat: links are not files
    return [rel for rel in sorted(found)
            if rules.allows(rel) and (is_allowed is None or is_allowed(rel))]


def scan_markers(root: Path, files: Iterable[str]) -> list[Marker]:
    """Markers of every file, in path order; a ConfigError lists every bad one (`FILE:LINE:`)."""
    markers, errors = list[Marker](), list[str]()
    for rel in files:
        try:
            data = b"" if (root / rel).stat().st_size > _MAX_SCAN_BYTES else (root / rel).read_bytes()
            text = data.decode("utf-8") if b"tune:" in data else ""
        except (OSError, UnicodeDecodeError):
            continue  # unreadable or binary: no marker we could rewrite safely
        found, bad = parse_markers(text, rel)
        markers, errors = markers + found, errors + bad
    if errors:
        raise ConfigError("\n".join(errors))
    return markers


def observations(history: Sequence[Mapping[str, Any]], current: Mapping[str, Value]) -> list[Observation]:
    """What the ledger measured, oldest first: the baseline (the user's values), then every tune
    candidate that reached the verifier at the median of every sample of it the ledger holds (the
    paired rule re-measures the incumbent: its value is not its luckiest sample). A skip, a
    violation or a gen_error teaches nothing; a crash or guard failure is a failure (None)."""
    # by config, in the order first measured: (config, proposed by tune), its samples (None: failed)
    configs: dict[Any, tuple[Mapping[str, Value], bool]] = {}
    samples: dict[Any, list[float] | None] = {}
    pending: list[float] = []     # the incumbent's value before the ledger names its config

    def add(config: Mapping[str, Value], values: Sequence[float] | None, proposed: bool = True) -> None:
        key = canonical(config)
        if key not in configs and (values is None or values):
            configs[key] = (config, proposed)
            samples[key] = None if values is None else []   # the first measurement decides
        got = samples.get(key)
        if got is not None and values:
            got.extend(values)

    for record in history:
        status, metric = record.get("status"), record.get("metric")
        meta = record.get("gen_meta") if isinstance(record.get("gen_meta"), Mapping) else {}
        config, before = meta.get("config"), meta.get("incumbent")
        if not isinstance(config, Mapping) and isinstance(before, Mapping) and "to" in meta:
            # a ledger of the previous tuner: one parameter moved per cycle
            config = {**before, f"{meta.get('file')}:{meta.get('param')}": meta["to"]}
        if status == "baseline" or not isinstance(config, Mapping):
            if metric is not None and status in ("baseline", "keep"):
                pending = [float(metric)]   # the baseline, or another generator's keep
            continue
        batches = [b for b in (record.get("stats") or {}).get("batches") or [] if isinstance(b, Mapping)]
        if isinstance(before, Mapping):
            add(before, pending + [float(x) for b in batches for x in b.get("a") or []], False)
            pending = []
        if status in ("crash", "guard_fail"):
            add(config, None)
        elif metric is not None and status in ("keep", "discard"):
            add(config, [float(x) for b in batches for x in b.get("b") or []] or [float(metric)])
    if pending:
        add(current, pending, False)
    return [Observation(dict(c), None if (got := samples[k]) is None else statistics.median(got),
                        proposed) for k, (c, proposed) in configs.items()]


class TuneGenerator:
    """Offline tuner of `# tune:` constants; deterministic given (spec.seed, history, worker)."""

    def __init__(self, spec: GeneratorSpec, program: Program) -> None:
        self.program, self.seed = program, spec.seed
        # program.md is never editable; the loop adds its own files to ctx.is_allowed at propose time
        self.rules = PathRules(program.allowed, program.forbidden, {program.rel_path: "program"})
        self.markers = tuple(self.current_markers(program.repo_root))
        if not self.markers:
            line = program.lines.get("generator.kind") or program.lines.get("generator")
            raise ConfigError(
                f"{program.rel_path}{f':{line}' if line else ''}: generator.kind: tune found no markers "
                f"in the allowed files ({', '.join(program.allowed)}); mark a constant like "
                "`LR = 0.01  # tune: 1e-4..1e-1 log`")
        try:
            import optuna  # noqa: F401  (fail at start-up, before the baseline, not at cycle 1)
        except ImportError as exc:
            raise ConfigError(f"generator.kind: tune needs the optuna package ({exc}); "
                              "install it with `pip install 'optuna>=4.0,<6'`") from None

    def current_markers(self, workdir: Path, is_allowed: Callable[[str], bool] | None = None) -> list[Marker]:
        return scan_markers(workdir, candidate_files(workdir, self.rules, is_allowed))

    def propose(self, ctx: GenContext) -> Proposal:
        try:
            markers = self.current_markers(ctx.workdir, ctx.is_allowed)
        except ConfigError as exc:
            raise FatalGeneratorError(f"tune: {exc}") from None
        if not markers:
            raise FatalGeneratorError("tune: no `# tune:` markers are left in the allowed files")
        current = {m.param.key: m.value for m in markers}
        seen = observations(ctx.history, current)
        if ctx.best is not None and not any(canonical(o.config) == canonical(current) for o in seen):
            seen.append(Observation(current, float(ctx.best), False))   # a ledger without a baseline record
        try:
            worker = max(0, int(ctx.env.get("AUTOLOOP_WORKER", "0")))
        except ValueError:
            worker = 0
        engine = Engine([m.param for m in markers], self.program.verifier.direction, self.seed)
        points = engine.propose(seen, count=worker + 1)
        if len(points) <= worker:   # a finite space with fewer unmeasured points than workers
            total = len({canonical(o.config) for o in seen}) + len(points)
            if points:
                return Proposal("Nothing left to try beside the other workers of this round",
                                no_change_reason=f"tune: the other workers of this round take the last "
                                f"{len(points)} of the {total} configurations", meta={"exhausted": False})
            return Proposal("Stop tuning: every configuration of the marked parameters was measured",
                            no_change_reason=f"tune: all {total} configurations of the marked "
                            "parameters were measured", meta={"exhausted": True}, finished=True)
        point = points[worker]
        changes = [_rewrite(ctx.workdir, m, point.config[m.param.key], markers) for m in markers
                   if canonical({"": point.config[m.param.key]}) != canonical({"": m.value})]
        return Proposal(
            hypothesis=_hypothesis(markers, changes, point, seen, self.program.verifier.direction),
            meta={"config": {m.param.key: m.param.native(point.config[m.param.key])
                             for m in markers},
                  # the configuration it started from, measured at the incumbent's metric
                  "incumbent": {m.param.key: m.param.native(m.value) for m in markers},
                  "changes": [{k: c[k] for k in ("param", "file", "line", "from", "to")} for c in changes],
                  "how": point.how, "observed": point.n_observed, "worker": worker})


def _hypothesis(markers: Sequence[Marker], changes: Sequence[Mapping[str, Any]], point: Suggestion,
                seen: Sequence[Observation], direction: str) -> str:
    """What changes and why, in words a person reading experiments.md can check."""
    kept = [m.name for m in markers if m.name not in {c["param"] for c in changes}]
    what = f"Set {', '.join(c['text'] for c in changes)}" + (f" ({', '.join(kept)} unchanged)" if kept else "")
    why = {"start": f"a point of a Latin hypercube to map the space before TPE models it "
                    f"({point.n_observed} measured so far)",
           "random": "a random unmeasured point: every point TPE proposed was measured already"
           }.get(point.how, f"TPE's pick after {point.n_observed} measurements: where the best of "
                            "them are denser than the rest, relative to what is still unexplored")
    scored = [o.value for o in seen if o.value is not None]
    if scored:
        why += f"; best measured so far {(min if direction == 'minimize' else max)(scored):.6g}"
    return f"{what}: {why}"


def _rewrite(workdir: Path, marker: Marker, value: Value, markers: Sequence[Marker]) -> dict[str, Any]:
    """Replace only the value literal on the marker's line; every other byte stays as it was."""
    path = workdir / marker.file
    lines = path.read_bytes().decode("utf-8").split("\n")
    line, param = lines[marker.line - 1], marker.param
    old = line[marker.start:marker.end]
    new = f"{marker.quote}{value}{marker.quote}" if param.choices is not None else \
        _fmt(float(value), param.is_int, yaml=path.suffix in (".yaml", ".yml"))
    lines[marker.line - 1] = line[:marker.start] + new + line[marker.end:]
    path.write_bytes("\n".join(lines).encode("utf-8"))
    name = marker.name if sum(m.name == marker.name for m in markers) == 1 else param.key
    return {"param": marker.name, "file": marker.file, "line": marker.line,
            "text": f"{name} {old} → {new}", "from": param.native(marker.value),
            "to": param.native(value)}
