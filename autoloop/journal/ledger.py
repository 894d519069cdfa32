"""The ledger: an append-only JSONL file, the source of truth of a run, and what is rendered
from it (`experiments.md`, `results.tsv`: atomically, any time).

Write-ahead: a cycle opens with a `begin` record and, when it will commit, an `intent` record
before the branch moves; only the final `cycle` record makes it count. On load, a `begin` with
no end is unfinished (the loop rolls it back) and a torn last line (a kill mid-write) is cut.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

from autoloop.errors import UsageError
from autoloop.base.numbers import MIN_DIGITS, Fmt, digits_for, formatter, num, run_values
from autoloop.base.walk import remove_tree
from autoloop.decide.wording import noise_pct

Record = dict[str, Any]

STATUSES = ("baseline", "keep", "discard", "crash", "guard_fail", "violation", "no_change", "gen_error")
# Filled when a cycle was judged on repeated or paired measurements (autoloop.decide); the raw
# samples are in the cycle record's `stats`.
STATS_COLUMNS = ("rule", "pairs", "effect_pct", "ci_low_pct", "ci_high_pct", "p_value",
                 "p_confirm", "median_ratio", "noise_pct", "holdout", "samples")
# what a run, `verify` and `gate` say when they measure without a sandbox ({}: why not)
UNSANDBOXED = "not sandboxed: {}; these attacks are only detected, see docs/trust.md (Not covered)"
TSV_COLUMNS = ("cycle", "commit", "metric", "status", "description", "best", "delta_pct",
               "duration_s", "cost_usd", "lesson") + STATS_COLUMNS
_TSV_HEAD = ("\t".join(TSV_COLUMNS) + "\n").encode()
MAX_CHANGED_SHOWN = 10
INDEXED = ("cycle", "final", "start", "reads")


@dataclass(frozen=True)
class CycleRecord:
    """A typed view of one `cycle` record; the dict stays what is stored (and what --json shows)."""

    cycle: int
    status: str
    metric: float | None
    best: float | None
    commit: str
    hypothesis: str
    lesson: str
    result: str
    duration_s: float
    delta_pct: float | None
    stats: Record
    gen: Record
    changed: tuple[str, ...]
    diffstat: str
    by_human: bool
    change: str           # the commit holding the cycle's change (`autoloop show`); "" when none is named

    @classmethod
    def of(cls, r: Mapping[str, Any]) -> CycleRecord:
        return cls(cycle=int(r.get("cycle", 0)), status=str(r.get("status", "")), metric=r.get("metric"),
                   best=r.get("best"), commit=r.get("commit") or "", hypothesis=str(r.get("hypothesis", "")),
                   lesson=str(r.get("lesson", "")), result=str(r.get("result", "")),
                   duration_s=float(r.get("duration_s") or 0), delta_pct=r.get("delta_pct"),
                   stats=r.get("stats") or {}, gen=r.get("gen") or {}, changed=tuple(r.get("changed") or ()),
                   diffstat=r.get("diffstat") or "", by_human=r.get("decided_by") == "human",
                   # a kept cycle's is its commit on the branch, also in runs that named no other
                   change=r.get("change") or ((r.get("commit") or "") if r.get("status") == "keep" else ""))

    @property
    def pooled(self) -> Record | None:
        """The paired comparison the cycle was judged on, when it was judged on one."""
        pooled = self.stats.get("pooled")
        return pooled if isinstance(pooled, dict) else None

    @property
    def holdout(self) -> Record | None:
        hold = self.stats.get("holdout")
        return hold if isinstance(hold, dict) else None

    @property
    def batches(self) -> list[Record]:
        return list(self.stats.get("batches") or [])

    @property
    def cost_usd(self) -> float | None:
        return self.gen.get("cost_usd")

    @property
    def tokens(self) -> int:
        return (self.gen.get("tokens_in") or 0) + (self.gen.get("tokens_out") or 0)


def state_dir(program_dir: Path, tag: str) -> Path:
    return program_dir / ".autoloop" / tag


def since_last_start(records: Sequence[Record]) -> dict[str, int]:
    """This invocation's cycles (recorded after its `start` record, baseline excluded), by status."""
    counts: dict[str, int] = {}
    for r in reversed(records):
        if r.get("t") == "start":
            break
        c = CycleRecord.of(r) if r.get("t") == "cycle" else None
        if c is not None and c.cycle > 0:
            counts[c.status] = counts.get(c.status, 0) + 1
    return dict(sorted(counts.items()))


@dataclass
class _Rendered:
    """The cycles rendered so far, at one rounding (a full render is O(cycles), twice a cycle)."""

    digits: int = MIN_DIGITS
    count: int = 0
    last: Record | None = None
    sections: bytearray = field(default_factory=bytearray)   # "\n" + each cycle's section
    rows: bytearray = field(default_factory=bytearray)       # each cycle's TSV row + "\n"

    def fmt(self, x: float | None) -> str:
        return num(x, self.digits)


class Journal:
    def __init__(self, program_dir: Path, tag: str) -> None:
        self.program_dir = program_dir
        self.tag = tag
        self.dir = state_dir(program_dir, tag)
        self.ledger = self.dir / "ledger.jsonl"
        self.experiments = program_dir / "experiments.md"
        self.results = program_dir / "results.tsv"
        self.records: list[Record] = []
        # a long run's ledger has thousands of records, asked for these several times a cycle
        self._of: dict[str, list[Record]] = {k: [] for k in INDEXED}
        self._bytes = bytearray()
        self._rendered = _Rendered()

    def exists(self) -> bool:
        return self.ledger.exists()

    def load(self) -> None:
        """Read the ledger; cut a torn last line; refuse a corrupt middle line (exit 2)."""
        data = self.ledger.read_bytes() if self.ledger.exists() else b""
        records: list[Record] = []
        keep_upto = 0
        lines = data.split(b"\n")
        for i, line in enumerate(lines):
            is_last = i == len(lines) - 1
            if line.strip():
                try:
                    rec = json.loads(line)
                    if not isinstance(rec, dict) or "t" not in rec:
                        raise ValueError("not a ledger record")
                except ValueError:
                    if is_last or not any(ln.strip() for ln in lines[i + 1:]):
                        break  # torn write at the end: drop it
                    raise UsageError(f"{self.ledger}:{i + 1}: corrupt ledger line (not JSON)") from None
                if is_last:
                    break  # complete JSON but no newline: the write was cut; drop it too
                records.append(rec)
            keep_upto += len(line) + (0 if is_last else 1)
        if keep_upto != len(data):
            with open(self.ledger, "r+b") as f:
                f.truncate(keep_upto)
                os.fsync(f.fileno())
        self.records = records
        self._of = {k: [r for r in records if r["t"] == k] for k in INDEXED}
        self._bytes = bytearray(data[:keep_upto])

    def append(self, rec: Record) -> Record:
        """Write one record, fsynced, except `begin`: it only opens a cycle, and whatever durable
        the cycle does next (the `intent`, the final `cycle` or `abort`) is fsynced, which flushes
        it too; lost in a power cut, the ledger simply never began that cycle."""
        rec = {"t": rec["t"], "ts": round(time.time(), 3), **{k: v for k, v in rec.items() if k != "t"}}
        # ASCII JSON: a file name that is not UTF-8 (kept as surrogates) still round-trips
        line = (json.dumps(rec, ensure_ascii=True, separators=(",", ":"), default=str) + "\n").encode()
        self.dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
            if rec["t"] != "begin":
                os.fsync(fd)
        finally:
            os.close(fd)
        self.records.append(rec)
        if rec["t"] in self._of:
            self._of[rec["t"]].append(rec)
        self._bytes += line
        return rec

    def tampered(self) -> bool:
        try:
            return self.ledger.read_bytes() != self._bytes
        except OSError:
            return bool(self._bytes)

    def repair(self) -> None:
        """Rewrite the ledger from memory (after someone else wrote to it)."""
        atomic_write(self.ledger, bytes(self._bytes), tmp_dir=self.dir)

    # ---- queries -----------------------------------------------------------------------------

    def cycles(self) -> list[Record]:
        return list(self._of["cycle"])

    def finals(self) -> list[Record]:
        """End-of-run re-measurements (best vs start), oldest first."""
        return list(self._of["final"])

    def unfinished(self) -> list[Record]:
        """The `begin` records of every cycle that never finished (up to a round's worth after a
        parallel round was cut short). Those with an `intent` (the branch may have moved) come
        first, so rolling them back in this order always starts from the branch head."""
        open_begins: dict[int, Record] = {}
        for r in self.records:
            if r["t"] == "begin":
                open_begins[r["cycle"]] = r
            elif r["t"] in ("cycle", "abort"):
                open_begins.pop(r.get("cycle"), None)  # type: ignore[arg-type]
        return sorted(open_begins.values(), key=lambda b: self.intent_for(b["cycle"]) is None)

    def intent_for(self, cycle: int) -> Record | None:
        for r in reversed(self.records):
            if r["t"] in ("intent", "begin") and r.get("cycle") == cycle:
                return r if r["t"] == "intent" else None
        return None

    def first_start(self) -> Record | None:
        return next(iter(self._of["start"]), None)

    def next_cycle(self) -> int:
        cycles = self._of["cycle"]
        return CycleRecord.of(cycles[-1]).cycle + 1 if cycles else 0

    # ---- rendering ---------------------------------------------------------------------------

    def render(self, goal: str = "") -> None:
        # derived from the fsynced ledger and re-rendered on every run: no fsync needed
        experiments, results = self._render_bytes(goal)
        atomic_write(self.experiments, experiments, durable=False, tmp_dir=self.dir)
        atomic_write(self.results, results, durable=False, tmp_dir=self.dir)

    def rendered_ok(self, goal: str = "") -> bool:
        experiments, results = self._render_bytes(goal)
        try:
            return self.experiments.read_bytes() == experiments and self.results.read_bytes() == results
        except OSError:
            return False

    def _render_bytes(self, goal: str) -> tuple[bytes, bytes]:
        """experiments.md and results.tsv, rendering only the cycles added since the last call;
        the head (goal, end-of-run checks, warnings) is small and always redone."""
        cycles, r = self._of["cycle"], self._rendered
        # one rounding for the whole file: a value that needs more digits re-renders every row
        digits = digits_for(run_values(cycles), floor=r.digits)
        # the cycles rendered must still be the first ones (a load() makes new records)
        follows = r.count <= len(cycles) and (not r.count or cycles[r.count - 1] is r.last)
        if not follows or r.digits != digits:
            r = self._rendered = _Rendered(digits=digits)
        for c in cycles[r.count:]:
            r.sections += b"\n" + _bytes("\n".join(_section(c, r.fmt)))
            r.rows += _bytes(_tsv_row(c, r.fmt) + "\n")
        r.count, r.last = len(cycles), cycles[-1] if cycles else None
        notes = not_sandboxed(self._of["start"]) + [w for r in self._of["reads"] for w in r.get("warnings") or ()]
        head = _experiments_head(self.tag, goal, self._of["final"], r.fmt, notes)
        return _bytes(head) + bytes(r.sections), _TSV_HEAD + bytes(r.rows)


def _bytes(text: str) -> bytes:
    # surrogates stand for the bytes of a non-UTF-8 file name: write those bytes back
    return text.encode("utf-8", "surrogateescape")


def atomic_write(path: Path, data: bytes, *, durable: bool = True, tmp_dir: Path | None = None) -> None:
    """Write by rename. `tmp_dir` (same filesystem) keeps the temporary file out of sight: a kill
    between create and rename must not leave a stray file in the user's checkout."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_dir() and not path.is_symlink():
        remove_tree(path)  # someone put a folder where our file belongs
    if tmp_dir is not None:
        tmp_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=tmp_dir or path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def one_line(text: Any) -> str:
    """`text` on one line, whitespace runs as one space, unsafe characters escaped."""
    return " ".join(escape_controls(" ".join(str(text).split())).split())


_C_ESCAPES = {"\a": "\\a", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\v": "\\v", "\f": "\\f",
              "\r": "\\r", '"': '\\"', "\\": "\\\\"}


def _unsafe_char(ch: str) -> bool:
    """A character that could move a terminal's cursor, start an escape sequence, end a line or
    reorder text: C0/C1 controls, DEL, line/paragraph separators, bidi and other format marks,
    and the stand-ins for bytes that are not UTF-8."""
    o = ord(ch)
    return (o < 0x20 or 0x7f <= o <= 0x9f or 0xdc80 <= o <= 0xdcff
            or unicodedata.category(ch) in ("Cf", "Zl", "Zp"))


def escape_controls(text: str) -> str:
    """`text` with every unsafe character written as a visible escape (\\x1b, \\u202e): what
    enters the journal, a commit message or the terminal from a generator never acts on a
    reader's screen or forges a line of its own."""
    if not any(_unsafe_char(ch) for ch in text):
        return text
    return "".join(_escaped(ord(ch)) if _unsafe_char(ch) else ch for ch in text)


def _escaped(o: int) -> str:
    if 0xdc80 <= o <= 0xdcff:      # a byte that is not UTF-8, kept as a surrogate
        return f"\\x{o - 0xdc00:02x}"
    return f"\\x{o:02x}" if o <= 0xff else f"\\u{o:04x}"


def quote_path(name: str) -> str:
    """A repository path as git shows it (core.quotePath off): as is when plain, else in double
    quotes with C escapes and the odd bytes in octal — a file name holding a newline stays one
    visible name."""
    if not any(_unsafe_char(ch) or ch in '"\\' for ch in name):
        return name
    out = [_C_ESCAPES.get(ch) or ("".join(f"\\{b:03o}" for b in ch.encode("utf-8", "surrogateescape"))
                                  if _unsafe_char(ch) else ch) for ch in name]
    return '"' + "".join(out) + '"'


def _tsv_row(rec: Record, fmt: Fmt = num) -> str:
    c = CycleRecord.of(rec)
    cost = c.cost_usd
    return "\t".join([
        str(c.cycle), c.commit[:12], fmt(c.metric), c.status, one_line(c.hypothesis), fmt(c.best),
        "" if c.delta_pct is None else f"{c.delta_pct:.2f}",   # a column of numbers: fixed decimals sort
        f"{c.duration_s:.1f}",
        "" if cost is None else f"{cost:.4f}",
        one_line(c.lesson),
        *_stats_cells(c),
    ])


def _num(x: Any, spec: str = ".4g") -> str:
    return "" if x is None else format(x, spec)


def _values(xs: Iterable[float] | None) -> str:
    # with the digits that keep this list's values apart; the ledger keeps them exact
    xs = list(xs or [])
    f = formatter(xs)
    return ",".join(f(x) for x in xs)


def _samples_text(c: CycleRecord) -> str:
    """Every raw value of a judged cycle, compactly: `a=...;b=...` per batch (a = incumbent or
    start, b = candidate), `runs=...` for single-side runs; warm-up runs are prefixed `w`."""
    parts, stats, hold = [], c.stats, c.holdout
    warm = stats.get("warmup")
    if isinstance(warm, dict) and (warm.get("a") or warm.get("b")):
        parts.append(f"wa={_values(warm.get('a'))};wb={_values(warm.get('b'))}")
    elif isinstance(warm, list) and warm:
        parts.append(f"w={_values(warm)}")
    if "batches" in stats:
        parts += [f"a={_values(b.get('a'))};b={_values(b.get('b'))}" for b in stats["batches"]]
    elif "a" in stats:
        parts.append(f"a={_values(stats.get('a'))};b={_values(stats.get('b'))}")
    parts += [f"{key}={_values(stats[key])}" for key in ("samples", "runs") if key in stats]
    if hold is not None and "a" in hold:
        parts.append(f"ha={_values(hold.get('a'))};hb={_values(hold.get('b'))}")
    return " | ".join(parts)


def _stats_cells(c: CycleRecord) -> list[str]:
    """The STATS_COLUMNS of one cycle (all empty for a cycle judged on one measurement)."""
    stats, batches, pooled, hold = c.stats, c.batches, c.pooled or {}, c.holdout
    if not stats:
        return [""] * len(STATS_COLUMNS)
    ci = pooled.get("change_ci_pct") or [None, None]
    holdout = "" if hold is None else \
        "error" if "error" in hold else "overfit" if hold.get("overfit") else "improved"
    pairs = "+".join(str(b.get("n", len(b.get("a") or []))) for b in batches) if batches else (
        str(stats["pairs"]) if stats.get("kind") == "calibration" and "pairs" in stats else "")
    return [
        stats.get("rule", ""), pairs,
        _num(pooled.get("change_pct"), ".3f"), _num(ci[0], ".3f"), _num(ci[1], ".3f"),
        _num(batches[0].get("p")) if batches else "",
        _num(batches[1].get("p")) if len(batches) > 1 else "",
        num(pooled.get("median_ratio")),
        # the calibration's noise per run; a judged cycle's, the noise its lesson states
        _num(stats.get("noise_pct") if stats.get("kind") == "calibration" else noise_pct({"stats": stats}), ".3f"),
        holdout,
        _samples_text(c),
    ]


def not_sandboxed(records: Iterable[Record]) -> list[str]:
    """`not sandboxed: <why>; ...` for each distinct reason an invocation of this run had no
    sandbox (its `start` records say), oldest first."""
    out: list[str] = []
    for r in records:
        why = r.get("unsandboxed") if r.get("t") == "start" else None
        line = UNSANDBOXED.format(one_line(why))
        if why and line not in out:
            out.append(line)
    return out


def _experiments_head(tag: str, goal: str, finals: Sequence[Record], fmt: Fmt = num,
                      notes: Sequence[str] = ()) -> str:
    out = [f"# Experiments — run `autoloop/{tag}`", ""]
    if goal:
        out += [f"Goal: {goal}", ""]
    for note in notes:
        out += [f"**Warning:** {note}", ""]
    out += [f"Written by autoloop from its ledger (.autoloop/{tag}/ledger.jsonl); edits here are overwritten.", ""]
    for f in finals:
        # above the cycles, not a section of its own: `## Cycle N` sections stay the only ones
        out += [f"**End-of-run check** (after cycle {f.get('after_cycle')}): {one_line(f.get('text', ''))}", ""]
        if f.get("a"):
            out += [f"Samples (start, best): a={_values(f.get('a'))}; b={_values(f.get('b'))}", ""]
    return "\n".join(out)


def _stats_lines(c: CycleRecord, fmt: Fmt) -> Iterator[str]:
    stats = c.stats
    if stats.get("warning"):
        yield from (f"**Warning:** {one_line(stats['warning'])}", "")
    if stats.get("kind") == "calibration":
        noise = stats.get("noise_pct")
        yield ("Calibration: the starting commit measured the same every time (deterministic verifier)."
               if stats.get("deterministic") else
               "Calibration: the starting commit measured again to see the noise"
               + (f": about ±{noise:.2g}% per run" if noise is not None else "") + ".")
        yield ""
    for lim in stats.get("limits") or []:
        yield (f"Limit {lim.get('metric')}: {fmt(lim.get('value'))} vs baseline {fmt(lim.get('baseline'))}"
               f" (bound {fmt(lim.get('bound'))}): {'ok' if lim.get('ok') else 'FAILED'}")
        yield ""
    text = _samples_text(c)
    if text:
        yield from (f"Samples: {text}", "")


def _section(rec: Record, fmt: Fmt = num) -> Iterator[str]:
    c = CycleRecord.of(rec)
    yield f"## Cycle {c.cycle} — {c.status}"
    for label, text in (("Hypothesis", c.hypothesis), ("Result", c.result), ("Lesson", c.lesson)):
        yield from ("", f"**{label}:** {one_line(text)}")
    yield ""
    if c.stats:
        yield from _stats_lines(c, fmt)
    if c.changed:
        more = " …" if len(c.changed) > MAX_CHANGED_SHOWN else ""
        yield from (f"Changed: {', '.join(quote_path(f) for f in c.changed[:MAX_CHANGED_SHOWN])}{more}", "")


def run_programs(ledger: Path) -> set[str]:
    """The program files (repo-relative) a run's start records name; empty for a ledger
    written before they were recorded."""
    out: set[str] = set()
    try:
        with ledger.open("rb") as fh:
            for line in fh:
                if b'"start"' not in line:
                    continue
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue                 # a torn last line: the journal repairs it, not us
                if isinstance(rec, dict) and rec.get("t") == "start" and isinstance(rec.get("program"), str):
                    out.add(rec["program"])
    except OSError:
        pass
    return out


def run_of(ledger: Path, program: str) -> bool:
    """Whether the run of this ledger was made with `program` (or predates the record)."""
    made_by = run_programs(ledger)
    return not made_by or program in made_by


def has_baseline(ledger: Path) -> bool:
    """Does the ledger hold a cycle record? Read only (loading would mend a torn line, which is
    the run's job, under its lock); every record starts with its type."""
    try:
        with open(ledger, "rb") as f:
            return any(line.startswith(b'{"t":"cycle"') for line in f)
    except OSError:
        return False
