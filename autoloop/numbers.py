"""How every number autoloop shows a person is written: one place, so the progress line, `log`,
results.tsv, experiments.md, the report, the Markdown summary, the PR title and the terminal
ending all agree.

A metric gets enough significant digits to tell the run's values apart (at least `MIN_DIGITS`),
never float noise (`145.97500000000002` prints `145.975`), and no exponent for ordinary
magnitudes (`1234567` stays `1234567`). Machine outputs (the ledger, `--json`) keep full
precision under their own keys; this module is for what is read.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Mapping, Sequence

MIN_DIGITS = 6      # what a verifier usually prints; fewer would hide real differences
MAX_DIGITS = 15     # past this a double is noise, not measurement
DASH = "–"
Fmt = Callable[[Any], str]


def _finite(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def sig(x: float, digits: int = MIN_DIGITS) -> str:
    """`x` to `digits` significant digits, trailing zeros dropped, fixed-point for ordinary
    magnitudes (1e-5 … 1e15) and scientific notation only outside them."""
    if not _finite(x):
        return str(x)
    x = float(x)
    if x == 0:
        return "0"
    e = math.floor(math.log10(abs(x)))
    if -5 <= e < 15:
        s = f"{x:.{max(0, digits - 1 - e)}f}"
        if "." in s:
            s = s.rstrip("0").rstrip(".")
        return "0" if s in ("-0", "") else s
    return f"{x:.{digits}g}"


def digits_for(values: Iterable[float | None], floor: int = MIN_DIGITS) -> int:
    """The fewest significant digits (at least `floor`) at which the distinct values among
    `values` still print distinctly — values that differ only in float noise count as one."""
    xs = sorted({round(float(v), 12 - math.floor(math.log10(abs(v)))) if v else 0.0
                 for v in values if _finite(v)})
    d = floor
    while d < MAX_DIGITS:
        shown = [sig(v, d) for v in xs]
        if all(a != b for a, b in zip(shown, shown[1:])):
            return d
        d += 1
    return MAX_DIGITS


def formatter(values: Iterable[float | None], empty: str = "") -> Callable[[float | None], str]:
    """A `fmt(x)` for one run: its values decide the digits, None prints `empty`."""
    d = digits_for(values)

    def fmt(x: float | None) -> str:
        return empty if x is None or not _finite(x) else sig(x, d)
    return fmt


def num(x: float | None, digits: int = MIN_DIGITS, empty: str = "") -> str:
    """One number without a run around it."""
    return empty if x is None or not _finite(x) else sig(x, digits)


def exact(x: float | None, empty: str = "") -> str:
    """A value handed on to a program or an agent (AUTOLOOP_BEST, the prompt): twelve
    significant digits — the measurement as printed, without the float noise of arithmetic."""
    return num(x, 12, empty)


def run_values(records: Sequence[Mapping[str, object]]) -> list[float]:
    """Every metric value a run's records show: the cycles' metrics and bests, and the medians
    their comparisons and the end-of-run check were judged on."""
    out: list[float] = []
    for r in records:
        for key in ("metric", "best", "median_a", "median_b"):
            v = r.get(key)
            if _finite(v):
                out.append(float(v))  # type: ignore[arg-type]
        stats = r.get("stats")
        pooled = stats.get("pooled") if isinstance(stats, dict) else None
        if isinstance(pooled, dict):
            for key in ("median_a", "median_b"):
                v = pooled.get(key)
                if _finite(v):
                    out.append(float(v))  # type: ignore[arg-type]
    return out


def run_formatter(records: Sequence[Mapping[str, object]], empty: str = "") -> Callable[[float | None], str]:
    return formatter(run_values(records), empty)


def signed_pct(x: float | None, empty: str = DASH) -> str:
    """A relative change: `+1.23%`, `-25.8%`; tiny ones keep two significant digits
    (`+0.0012%`), zero is `0%` (never `-0.00%`)."""
    if x is None or not _finite(x):
        return empty
    if x == 0 or abs(x) < 5e-7:
        return "0%"
    if abs(x) < 0.005:
        return f"{x:+.2g}%"
    s = f"{x:+.2f}%"
    return "0%" if s in ("+0.00%", "-0.00%") else s


def pct_interval(ci: Sequence[float] | None, level: float | None = None, empty: str = "") -> str:
    """`95% CI -31.2% … -20.4%` (the level left out when unknown)."""
    if not ci or len(ci) != 2 or not all(_finite(x) for x in ci):
        return empty
    head = f"{level * 100:.0f}% CI" if _finite(level) else "CI"
    return f"{head} {signed_pct(ci[0])} … {signed_pct(ci[1])}"


def plain_pct(x: float | None, empty: str = DASH) -> str:
    """A size, unsigned: `53.6%`."""
    if x is None or not _finite(x):
        return empty
    return signed_pct(abs(x), empty)[1:] if x != 0 else "0%"


def usd(x: float | None, empty: str = DASH) -> str:
    """Dollars: cents, or two significant digits below a cent."""
    if x is None or not _finite(x):
        return empty
    return f"${x:.2f}" if x == 0 or abs(x) >= 0.01 else f"${x:.2g}"


def count(n: int | None, empty: str = DASH) -> str:
    """A whole number with thousands separators: `12,345`."""
    return empty if n is None else f"{int(n):,}"


def seconds(x: float | None, *, whole: bool = False) -> str:
    """A duration: `4.2s` (`4s` when `whole`, for a clock that ticks in seconds), `3m05s`, `2h07m`."""
    if x is None or not _finite(x):
        return DASH
    s = int(x)
    if s < 60:
        return f"{s}s" if whole else f"{x:.1f}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"
