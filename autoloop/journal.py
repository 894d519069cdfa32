"""The ledger: an append-only JSONL file, fsynced per record (but `begin`, see append) — the
source of truth of a run.

`experiments.md` and `results.tsv` are rendered from it (atomically) and can be regenerated at
any time. Write-ahead: a cycle opens with a `begin` record and, when it will commit, an `intent`
record before the branch moves; only the final `cycle` record makes it count. On load, a cycle
with a `begin` but no end is "pending" — the loop rolls it back — and a torn last line (a kill
during a write) is cut off.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
import unicodedata
from pathlib import Path
from typing import Any, Iterator, Sequence

from autoloop.errors import UsageError
from autoloop.numbers import MIN_DIGITS, Fmt, digits_for, formatter, num, run_values
from autoloop.sentinel import remove_tree

Record = dict[str, Any]

STATUSES = ("baseline", "keep", "discard", "crash", "guard_fail", "violation", "no_change", "gen_error")
# Filled when a cycle was judged on repeated or paired measurements (see autoloop.judge); the
# numbers are those of the cycle record's `stats`, which holds every raw sample.
STATS_COLUMNS = ("rule", "pairs", "effect_pct", "ci_low_pct", "ci_high_pct", "p_value",
                 "p_confirm", "median_ratio", "noise_pct", "holdout", "samples")
TSV_COLUMNS = ("cycle", "commit", "metric", "status", "description", "best", "delta_pct",
               "duration_s", "cost_usd", "lesson") + STATS_COLUMNS


def state_dir(program_dir: Path, tag: str) -> Path:
    return program_dir / ".autoloop" / tag


class Journal:
    def __init__(self, program_dir: Path, tag: str) -> None:
        self.program_dir = program_dir
        self.tag = tag
        self.dir = state_dir(program_dir, tag)
        self.ledger = self.dir / "ledger.jsonl"
        self.experiments = program_dir / "experiments.md"
        self.results = program_dir / "results.tsv"
        self.records: list[Record] = []
        self._bytes = bytearray()
        # caches, both rebuilt whenever `records` is not the list they were built from
        self._cycles: tuple[list[Record], int, Record | None, list[Record], list[Record], list[Record]] | None = None
        self._rendered: _Rendered | None = None

    # ---- loading -----------------------------------------------------------------------------

    def exists(self) -> bool:
        return self.ledger.exists()

    def load(self) -> None:
        """Read the ledger; cut a torn last line; refuse a corrupt middle line (exit 2)."""
        if not self.ledger.exists():
            self.records, self._bytes = [], bytearray()
            return
        data = self.ledger.read_bytes()
        keep_upto = 0
        records: list[Record] = []
        lines = data.split(b"\n")
        offset = 0
        for i, line in enumerate(lines):
            is_last = i == len(lines) - 1
            end = offset + len(line) + (0 if is_last else 1)
            if line.strip():
                try:
                    rec = json.loads(line)
                    if not isinstance(rec, dict) or "t" not in rec:
                        raise ValueError("not a ledger record")
                except ValueError:
                    if is_last or all(not ln.strip() for ln in lines[i + 1:]):
                        break  # torn write at the end: drop it
                    raise UsageError(f"{self.ledger}:{i + 1}: corrupt ledger line (not JSON)") from None
                if is_last:
                    break  # complete JSON but no newline: the write was cut; drop it too
                records.append(rec)
            keep_upto = end
            offset = end
        if keep_upto != len(data):
            with open(self.ledger, "r+b") as f:
                f.truncate(keep_upto)
                f.flush()
                os.fsync(f.fileno())
            data = data[:keep_upto]
        self.records = records
        self._bytes = bytearray(data)

    # ---- writing -----------------------------------------------------------------------------

    def append(self, rec: Record) -> Record:
        """Write one record. Every record is fsynced except `begin`: it only opens a cycle, and
        anything durable the cycle does after it (the `intent` before the branch moves, the
        final `cycle` or `abort`) is fsynced, which flushes it too; lost in a power cut, it
        leaves a ledger that simply never began that cycle."""
        durable = rec["t"] != "begin"
        rec = {"t": rec["t"], "ts": round(time.time(), 3), **{k: v for k, v in rec.items() if k != "t"}}
        # ASCII JSON: a file name that is not UTF-8 (kept as surrogates) still round-trips
        line = (json.dumps(rec, ensure_ascii=True, separators=(",", ":"), default=str) + "\n").encode()
        self.dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        self.records.append(rec)
        self._bytes += line
        return rec

    def tampered(self) -> bool:
        try:
            data = self.ledger.read_bytes()
        except OSError:
            return bool(self._bytes)
        return data != self._bytes

    def repair(self) -> None:
        """Rewrite the ledger from memory (after someone else wrote to it)."""
        _atomic_write(self.ledger, bytes(self._bytes), tmp_dir=self.dir)

    def digest(self) -> str:
        return hashlib.sha256(self._bytes).hexdigest()

    # ---- queries -----------------------------------------------------------------------------

    def cycles(self) -> list[Record]:
        return list(self._scan()[0])

    def _scan(self) -> tuple[list[Record], list[Record]]:
        """The cycle and final records (asked several times per cycle; a long run's ledger has
        thousands of records): only the records appended since the last call are looked at."""
        recs = self.records
        c = self._cycles
        if c is None or c[0] is not recs or c[1] > len(recs) or (c[1] and recs[c[1] - 1] is not c[2]):
            c = (recs, 0, None, [], [], [])
        found, finals, starts = c[3], c[4], c[5]
        for r in recs[c[1]:]:
            if r["t"] == "cycle":
                found.append(r)
            elif r["t"] == "final":
                finals.append(r)
            elif r["t"] == "start":
                starts.append(r)
        self._cycles = (recs, len(recs), recs[-1] if recs else None, found, finals, starts)
        return found, finals

    def _any_unsandboxed(self) -> bool:
        self._scan()
        assert self._cycles is not None
        return any(r.get("unsandboxed") for r in self._cycles[5])

    def pending(self) -> Record | None:
        """The `begin` record of a cycle that never finished, if the ledger ends inside one."""
        open_begin: Record | None = None
        for r in self.records:
            if r["t"] == "begin":
                open_begin = r
            elif r["t"] in ("cycle", "abort") and open_begin and r.get("cycle") == open_begin["cycle"]:
                open_begin = None
        return open_begin

    def unfinished(self) -> list[Record]:
        """The `begin` records of every cycle that never finished — one at most for a single
        worker, up to a round's worth after a parallel round was cut short (autoloop.parallel).
        Those with an `intent` (the branch may have moved) come first, so rolling them back
        in this order always starts from the branch head."""
        open_begins: dict[int, Record] = {}
        for r in self.records:
            if r["t"] == "begin":
                open_begins[r["cycle"]] = r
            elif r["t"] in ("cycle", "abort"):
                open_begins.pop(r.get("cycle"), None)  # type: ignore[arg-type]
        found = list(open_begins.values())
        return sorted(found, key=lambda b: self.intent_for(b["cycle"]) is None)

    def intent_for(self, cycle: int) -> Record | None:
        for r in reversed(self.records):
            if r["t"] == "intent" and r.get("cycle") == cycle:
                return r
            if r["t"] == "begin" and r.get("cycle") == cycle:
                return None
        return None

    def first_start(self) -> Record | None:
        return next((r for r in self.records if r["t"] == "start"), None)

    def next_cycle(self) -> int:
        cycles = self.cycles()
        return cycles[-1]["cycle"] + 1 if cycles else 0

    # ---- rendering ---------------------------------------------------------------------------

    def finals(self) -> list[Record]:
        """End-of-run re-measurements (best vs start), oldest first."""
        return list(self._scan()[1])

    def render(self, goal: str = "") -> None:
        # derived from the fsynced ledger and re-rendered on every run: no fsync needed
        experiments, results = self._render_bytes(goal)
        _atomic_write(self.experiments, experiments, durable=False, tmp_dir=self.dir)
        _atomic_write(self.results, results, durable=False, tmp_dir=self.dir)

    def rendered_ok(self, goal: str = "") -> bool:
        experiments, results = self._render_bytes(goal)
        try:
            return self.experiments.read_bytes() == experiments and self.results.read_bytes() == results
        except OSError:
            return False

    def _render_bytes(self, goal: str) -> tuple[bytes, bytes]:
        """The bytes of render_experiments() and render_tsv(), rendering only the cycles added
        since the last call (a full render is O(cycles) per cycle, twice a cycle: 1,000 cycles
        in, it was the larger part of the loop's own time). The head (goal, end-of-run checks)
        is re-rendered whenever it may differ; a test compares with a full render."""
        cycles, finals = self._scan()
        r = self._rendered
        # one rounding for the whole file: a value that needs more digits re-renders every row
        digits = digits_for(run_values(cycles), floor=r.digits if r is not None else MIN_DIGITS)
        if (r is None or r.count > len(cycles) or (r.count and cycles[r.count - 1] is not r.last)
                or r.digits != digits):
            r = self._rendered = _Rendered()
            r.digits = digits
        notes = tuple(not_sandboxed(self.records)) if self._any_unsandboxed() else ()
        head_key = (goal, len(finals), finals[-1] if finals else None, notes)
        if r.head_key is None or r.head_key[0] != head_key[0] or r.head_key[1] != head_key[1] \
                or r.head_key[2] is not head_key[2] or r.head_key[3] != head_key[3]:
            r.head = _bytes(_experiments_head(self.tag, goal, finals, r.fmt, notes))
            r.head_key = head_key
        for c in cycles[r.count:]:
            r.sections += b"\n" + _bytes("\n".join(_section(c, r.fmt)))
            r.rows += _bytes(_tsv_row(c, r.fmt) + "\n")
        r.count = len(cycles)
        r.last = cycles[-1] if cycles else None
        return r.head + bytes(r.sections), _bytes(_tsv_head()) + bytes(r.rows)


class _Rendered:
    def __init__(self) -> None:
        self.head_key: tuple[str, int, Record | None, tuple[str, ...]] | None = None
        self.head = b""
        self.sections = bytearray()   # "\n" + each cycle's section
        self.rows = bytearray()       # each cycle's TSV row + "\n"
        self.count = 0
        self.last: Record | None = None
        self.digits = MIN_DIGITS

    def fmt(self, x: float | None) -> str:
        return num(x, self.digits)


def _bytes(text: str) -> bytes:
    # surrogates stand for the bytes of a non-UTF-8 file name: write those bytes back
    return text.encode("utf-8", "surrogateescape")


def _atomic_write(path: Path, data: bytes, *, durable: bool = True, tmp_dir: Path | None = None) -> None:
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
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def pct(old: float | None, new: float | None) -> float | None:
    if old is None or new is None or old == 0:
        return None
    return (new - old) / abs(old) * 100.0


def _one_line(text: str) -> str:
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
    """`text` with every unsafe character (see _unsafe_char) written as a visible escape
    (\\x1b, \\u202e): what enters the journal, a commit message or the terminal from a
    generator never acts on a reader's screen or forges a line of its own."""
    if not any(_unsafe_char(ch) for ch in text):
        return text
    out = []
    for ch in text:
        if not _unsafe_char(ch):
            out.append(ch)
        elif 0xdc80 <= ord(ch) <= 0xdcff:
            out.append(f"\\x{ord(ch) - 0xdc00:02x}")
        elif ord(ch) <= 0xff:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(f"\\u{ord(ch):04x}")
    return "".join(out)


def quote_path(name: str) -> str:
    """A repository path as git shows it (core.quotePath off): as is when plain, else in double
    quotes with C escapes and the odd bytes in octal — a file name holding a newline stays one
    visible name."""
    if not any(_unsafe_char(ch) or ch in '"\\' for ch in name):
        return name
    out = []
    for ch in name:
        if ch in _C_ESCAPES:
            out.append(_C_ESCAPES[ch])
        elif _unsafe_char(ch):
            out.append("".join(f"\\{b:03o}" for b in ch.encode("utf-8", "surrogateescape")))
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def render_tsv(cycles: list[Record]) -> str:
    fmt = formatter(run_values(cycles))
    return "".join([_tsv_head()] + [_tsv_row(c, fmt) + "\n" for c in cycles])


def _tsv_head() -> str:
    return "\t".join(TSV_COLUMNS) + "\n"


def _tsv_row(c: Record, fmt: Fmt = num) -> str:
    delta = c.get("delta_pct")
    cost = c.get("gen", {}).get("cost_usd")
    return "\t".join([
        str(c["cycle"]),
        (c.get("commit") or "")[:12],
        fmt(c.get("metric")),
        c["status"],
        _one_line(c.get("hypothesis", "")),
        fmt(c.get("best")),
        "" if delta is None else f"{delta:.2f}",   # a column of numbers: fixed decimals sort
        f"{c.get('duration_s', 0):.1f}",
        "" if cost is None else f"{cost:.4f}",
        _one_line(c.get("lesson", "")),
        *stats_cells(c.get("stats")),
    ])


def _num(x: Any, spec: str = ".4g") -> str:
    return "" if x is None else format(x, spec)


def _values(xs: Any) -> str:
    # rounded like every number a person reads, with the digits that keep this list's values
    # apart; the ledger keeps them exact for recomputing
    f = formatter(xs or [])
    return ",".join(f(x) for x in xs or [])


def samples_text(stats: Record) -> str:
    """Every raw value of a judged cycle, compactly: `a=...;b=...` per batch (a = incumbent or
    start, b = candidate), `runs=...` for single-side runs; warm-up runs are prefixed `w`."""
    parts = []
    warm = stats.get("warmup")
    if isinstance(warm, dict) and (warm.get("a") or warm.get("b")):
        parts.append(f"wa={_values(warm.get('a'))};wb={_values(warm.get('b'))}")
    elif isinstance(warm, list) and warm:
        parts.append(f"w={_values(warm)}")
    if "batches" in stats:
        parts += [f"a={_values(b.get('a'))};b={_values(b.get('b'))}" for b in stats["batches"]]
    elif "a" in stats:
        parts.append(f"a={_values(stats.get('a'))};b={_values(stats.get('b'))}")
    for key in ("samples", "runs"):
        if key in stats:
            parts.append(f"{key}={_values(stats[key])}")
    hold = stats.get("holdout")
    if isinstance(hold, dict) and "a" in hold:
        parts.append(f"ha={_values(hold.get('a'))};hb={_values(hold.get('b'))}")
    return " | ".join(parts)


def stats_cells(stats: Record | None) -> list[str]:
    """The STATS_COLUMNS of one cycle (all empty for a cycle judged on one measurement)."""
    if not stats:
        return [""] * len(STATS_COLUMNS)
    batches = stats.get("batches") or []
    pooled = stats.get("pooled") or {}
    ci = pooled.get("change_ci_pct") or [None, None]
    hold = stats.get("holdout")
    holdout = ""
    if isinstance(hold, dict):
        holdout = "error" if "error" in hold else ("overfit" if hold.get("overfit") else "improved")
    pairs = "+".join(str(b.get("n", len(b.get("a") or []))) for b in batches) if batches else (
        str(stats["pairs"]) if stats.get("kind") == "calibration" and "pairs" in stats else "")
    return [
        stats.get("rule", ""),
        pairs,
        _num(pooled.get("change_pct"), ".3f"),
        _num(ci[0], ".3f"),
        _num(ci[1], ".3f"),
        _num(batches[0].get("p")) if batches else "",
        _num(batches[1].get("p")) if len(batches) > 1 else "",
        num(pooled.get("median_ratio")),
        _num(stats.get("noise_pct"), ".3f"),
        holdout,
        samples_text(stats),
    ]


def not_sandboxed(records: Sequence[Record]) -> list[str]:
    """`not sandboxed: <why>; ...` for each distinct reason an invocation of this run had no
    sandbox (its `start` records say), oldest first."""
    out: list[str] = []
    for r in records:
        why = r.get("unsandboxed") if r.get("t") == "start" else None
        if why:
            line = f"not sandboxed: {_one_line(str(why))}; these attacks are only detected, see README (Not covered)"
            if line not in out:
                out.append(line)
    return out


def render_experiments(cycles: list[Record], tag: str, goal: str, finals: list[Record] = (),  # type: ignore[assignment]
                       notes: Sequence[str] = ()) -> str:
    # the head, then each section after a newline (Journal renders the same incrementally)
    fmt = formatter(run_values(cycles))
    return "".join([_experiments_head(tag, goal, finals, fmt, notes)]
                   + ["\n" + "\n".join(_section(c, fmt)) for c in cycles])


def _experiments_head(tag: str, goal: str, finals: Sequence[Record], fmt: Fmt = num,
                      notes: Sequence[str] = ()) -> str:
    out = [f"# Experiments — run `autoloop/{tag}`", ""]
    if goal:
        out += [f"Goal: {goal}", ""]
    for note in notes:
        out += [f"**Warning:** {note}", ""]
    out += ["Written by autoloop from its ledger (.autoloop/%s/ledger.jsonl); edits here are overwritten." % tag, ""]
    for f in finals:
        # above the cycles, not a section of its own: `## Cycle N` sections stay the only ones
        out += [f"**End-of-run check** (after cycle {f.get('after_cycle')}): {_one_line(f.get('text', ''))}", ""]
        if f.get("a"):
            out += [f"Samples (start, best): a={_values(f.get('a'))}; b={_values(f.get('b'))}", ""]
    return "\n".join(out)


def _stats_lines(stats: Record, fmt: Fmt = num) -> Iterator[str]:
    if stats.get("warning"):
        yield f"**Warning:** {_one_line(stats['warning'])}"
        yield ""
    if stats.get("kind") == "calibration":
        if stats.get("deterministic"):
            yield "Calibration: the starting commit measured the same every time (deterministic verifier)."
        else:
            noise = stats.get("noise_pct")
            yield ("Calibration: the starting commit measured again to see the noise"
                   + (f": about ±{noise:.2g}% per run" if noise is not None else "") + ".")
        yield ""
    for lim in stats.get("limits") or []:
        state = "ok" if lim.get("ok") else "FAILED"
        yield (f"Limit {lim.get('metric')}: {fmt(lim.get('value'))} vs baseline {fmt(lim.get('baseline'))}"
               f" (bound {fmt(lim.get('bound'))}): {state}")
        yield ""
    text = samples_text(stats)
    if text:
        yield f"Samples: {text}"
        yield ""


def _section(c: Record, fmt: Fmt = num) -> Iterator[str]:
    yield f"## Cycle {c['cycle']} — {c['status']}"
    yield ""
    yield f"**Hypothesis:** {_one_line(c.get('hypothesis', ''))}"
    yield ""
    yield f"**Result:** {_one_line(c.get('result', ''))}"
    yield ""
    yield f"**Lesson:** {_one_line(c.get('lesson', ''))}"
    yield ""
    stats = c.get("stats")
    if stats:
        yield from _stats_lines(stats, fmt)
    if c.get("changed"):
        shown = ", ".join(quote_path(f) for f in c["changed"][:10]) + (" …" if len(c["changed"]) > 10 else "")
        yield f"Changed: {shown}"
        yield ""


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
