"""How every number autoloop shows a person is written, in one place (the progress line, `log`,
results.tsv, experiments.md, the report, the summary, the PR title and the terminal agree).

A metric gets enough significant digits to tell the run's values apart (at least MIN_DIGITS),
never float noise (`145.97500000000002` prints `145.975`) and no exponent for ordinary
magnitudes. Machine outputs (the ledger, `--json`) keep full precision under their own keys.
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
    """`x` to `digits` significant digits, trailing zeros dropped, fixed-point for 1e-5 … 1e15."""
    if not _finite(x):
        return str(x)
    x = float(x)
    if x == 0:
        return "0"
    e = math.floor(math.log10(abs(x)))
    if not -5 <= e < 15:
        return f"{x:.{digits}g}"
    s = f"{x:.{max(0, digits - 1 - e)}f}"
    s = s.rstrip("0").rstrip(".") if "." in s else s
    return "0" if s in ("-0", "") else s


def digits_for(values: Iterable[float | None], floor: int = MIN_DIGITS) -> int:
    """The fewest digits (at least `floor`) that print distinct values distinctly (float noise
    is not a difference)."""
    xs = sorted({round(float(v), 12 - math.floor(math.log10(abs(v)))) if v else 0.0
                 for v in values if _finite(v)})
    for d in range(floor, MAX_DIGITS):
        shown = [sig(v, d) for v in xs]
        if all(a != b for a, b in zip(shown, shown[1:])):
            return d
    return MAX_DIGITS


def formatter(values: Iterable[float | None], empty: str = "") -> Callable[[float | None], str]:
    """A `fmt(x)` for one run: its values decide the digits, None prints `empty`."""
    d = digits_for(values)
    return lambda x: num(x, d, empty)


def num(x: float | None, digits: int = MIN_DIGITS, empty: str = "") -> str:
    """One number without a run around it."""
    return empty if x is None or not _finite(x) else sig(x, digits)


def exact(x: float | None, empty: str = "") -> str:
    """A value handed to a program or an agent (AUTOLOOP_BEST, the prompt), without float noise."""
    return num(x, 12, empty)


def run_values(records: Sequence[Mapping[str, object]]) -> list[float]:
    """Every metric value a run's records show: metrics, bests, and the medians judged on."""
    out: list[Any] = []
    for r in records:
        stats = r.get("stats")
        pooled = stats.get("pooled") if isinstance(stats, dict) else None
        out += [r.get(k) for k in ("metric", "best", "median_a", "median_b")]
        out += [pooled.get(k) for k in ("median_a", "median_b")] if isinstance(pooled, dict) else []
    return [float(v) for v in out if _finite(v)]


def pct(old: float | None, new: float | None) -> float | None:
    """The change from `old` to `new` in percent of `old` (None without a reference)."""
    if old is None or new is None or old == 0:
        return None
    return (new - old) / abs(old) * 100.0


def signed_pct(x: float | None, empty: str = DASH) -> str:
    """`+1.23%`, `-25.80%`; tiny ones keep two significant digits, zero is `0%` (never `-0.00%`)."""
    if x is None or not _finite(x):
        return empty
    if abs(x) < 5e-7:
        return "0%"
    if abs(x) < 0.005:
        return f"{x:+.2g}%"
    s = f"{x:+.2f}%"
    return "0%" if s in ("+0.00%", "-0.00%") else s


def pct_interval(ci: Sequence[float] | None, level: float | None = None, empty: str = "") -> str:
    """`95% CI -31.2% … -20.4%` (the level left out when unknown)."""
    if not ci or len(ci) != 2 or not all(_finite(x) for x in ci):
        return empty
    head = f"{share(level)} CI" if level is not None and _finite(level) else "CI"
    return f"{head} {signed_pct(ci[0])} … {signed_pct(ci[1])}"


def plain_pct(x: float | None, empty: str = DASH) -> str:
    """A size, unsigned: `53.6%`."""
    if x is None or not _finite(x):
        return empty
    return signed_pct(abs(x), empty).removeprefix("+")   # a tiny size is "0%", with no sign to drop


def share(x: float) -> str:
    """A fraction as a whole percentage: `0.25` → `25%`."""
    return f"{x * 100:.0f}%"


def usd(x: float | None, empty: str = DASH) -> str:
    """Dollars: cents, or two significant digits below a cent."""
    if x is None or not _finite(x):
        return empty
    return f"${x:.2f}" if x == 0 or abs(x) >= 0.01 else f"${x:.2g}"


def count(n: int | None, empty: str = DASH) -> str:
    """A whole number with thousands separators: `12,345`."""
    return empty if n is None else f"{int(n):,}"


def seconds(x: float | None, *, whole: bool = False, fine: bool = False) -> str:
    """A duration: `4.2s` (`4s` when `whole`, `4.23s` when `fine` and under 10 s), `3m05s`, `2h07m`."""
    if x is None or not _finite(x):
        return DASH
    s = int(x)
    if fine and x < 10:
        return f"{x:.2f}s"
    if s < 60:
        return f"{s}s" if whole else f"{x:.1f}s"
    return f"{s // 60}m{s % 60:02d}s" if s < 3600 else f"{s // 3600}h{s % 3600 // 60:02d}m"


def hms(x: float) -> str:
    """Elapsed time as `HH:MM:SS` (past a day the hours go on counting)."""
    s = int(x)
    return f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"
