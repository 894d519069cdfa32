"""Numbers about one run, read from its ledger: what the report, the CI step summary, the pull
request body and `run --json` show. Pure functions of the ledger's records (and the program's
metric name and direction), so anyone can recompute them.

Confidence intervals are read, never invented: a keep record may carry `stats` (the
noise-aware rule's comparison: `change_pct`, `change_ci_pct`, `ci_level`, `p`, `n`), and any
record may carry `gain_ci_pct: [low, high]` (with `gain_ci_level`) for the run's cumulative gain
baseline → best, measured paired. Without them the gain is shown without an interval.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

from autoloop.journal import not_sandboxed, pct
from autoloop.summary import Summary, summarize


@dataclass(frozen=True)
class Kept:
    cycle: int
    commit: str
    metric: float | None
    before: float | None
    change_pct: float | None
    hypothesis: str
    ci_pct: tuple[float, float] | None = None
    decided_by: str = "ratchet"


@dataclass(frozen=True)
class Facts:
    tag: str
    goal: str
    metric: str
    direction: str
    summary: Summary
    kept: tuple[Kept, ...]
    gain_ci_pct: tuple[float, float] | None
    gain_ci_level: float | None
    duration_s: float
    cycles_total: int                       # cycle records, baseline included
    by_status: dict[str, int] = field(default_factory=dict)
    not_sandboxed: tuple[str, ...] = ()     # `not sandboxed: <why>; ...`, one per distinct reason

    @property
    def cost_per_pct(self) -> float | None:
        """Dollars spent per percentage point of gain (None without cost or gain)."""
        g = self.summary.gain_pct
        if not self.summary.cost_usd or not g:
            return None
        return self.summary.cost_usd / abs(g)

    def as_dict(self) -> dict[str, Any]:
        s = self.summary
        return {
            "tag": self.tag, "branch": f"autoloop/{self.tag}", "goal": self.goal,
            "metric": self.metric, "direction": self.direction,
            "baseline": s.baseline, "best": s.best, "gain_pct": _r(s.gain_pct),
            "gain_ci_pct": None if self.gain_ci_pct is None else [_r(x) for x in self.gain_ci_pct],
            "gain_ci_level": self.gain_ci_level,
            "cycles": s.cycles, "kept": s.kept, "keep_rate": _r(s.keep_rate),
            "by_status": dict(s.by_status), "cost_usd": round(s.cost_usd, 6), "tokens": s.tokens,
            "cost_per_pct": _r(self.cost_per_pct), "duration_s": round(self.duration_s, 3),
            "not_sandboxed": list(self.not_sandboxed),
            "kept_changes": [{**asdict(k), "ci_pct": None if k.ci_pct is None else list(k.ci_pct)}
                             for k in self.kept],
        }


def _r(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(x, digits)


def facts(records: Sequence[Mapping[str, Any]], *, tag: str, goal: str, metric: str,
          direction: str) -> Facts:
    cycles = [r for r in records if r.get("t") == "cycle"]
    s = summarize(cycles, direction)
    kept = []
    for c in cycles:
        if c["status"] != "keep":
            continue
        # the incumbent's metric before this keep: the best of the cycle before it
        prev = [p for p in cycles if p["cycle"] < c["cycle"] and p.get("best") is not None]
        before = prev[-1]["best"] if prev else None
        st = c.get("stats") or {}
        ci = st.get("change_ci_pct")
        kept.append(Kept(cycle=c["cycle"], commit=c.get("commit") or "", metric=c.get("metric"),
                         before=before, change_pct=pct(before, c.get("metric")),
                         hypothesis=" ".join(str(c.get("hypothesis", "")).split()),
                         ci_pct=(float(ci[0]), float(ci[1])) if isinstance(ci, (list, tuple)) and len(ci) == 2 else None,
                         decided_by=c.get("decided_by") or "ratchet"))
    gain_ci = level = None
    for r in records:
        ci = r.get("gain_ci_pct")
        if isinstance(ci, (list, tuple)) and len(ci) == 2:
            gain_ci, level = (float(ci[0]), float(ci[1])), r.get("gain_ci_level")
    duration = sum(float(c.get("duration_s") or 0.0) for c in cycles)
    return Facts(tag=tag, goal=goal, metric=metric, direction=direction, summary=s, kept=tuple(kept),
                 gain_ci_pct=gain_ci, gain_ci_level=level, duration_s=duration,
                 cycles_total=len(cycles), by_status=dict(s.by_status),
                 not_sandboxed=tuple(not_sandboxed(records)))


def num(x: float | None) -> str:
    from autoloop.journal import fmt

    return "–" if x is None else fmt(x)


def signed_pct(x: float | None, digits: int = 2) -> str:
    return "–" if x is None else f"{x:+.{digits}f}%"


def gain_text(f: Facts) -> str:
    g = signed_pct(f.summary.gain_pct)
    if f.gain_ci_pct is not None:
        lvl = f"{f.gain_ci_level * 100:.0f}% " if f.gain_ci_level else ""
        g += f" ({lvl}CI {f.gain_ci_pct[0]:+.2f}% … {f.gain_ci_pct[1]:+.2f}%)"
    return g


def markdown(f: Facts, *, title: str | None = None, extra_rows: Sequence[tuple[str, str]] = (),
             max_kept: int = 30) -> str:
    """The run as Markdown: a facts table and the kept changes (step summary, PR body)."""
    s = f.summary
    out = [f"### {title or f'autoloop run `{f.tag}`'}", ""]
    if f.goal:
        out += [f"**Goal:** {f.goal}", ""]
    for note in f.not_sandboxed:
        out += [f"**Warning:** {note}", ""]
    rows = [("baseline", f"{f.metric} = {num(s.baseline)}"),
            ("best", f"{f.metric} = {num(s.best)} ({f.direction})"),
            ("gain", gain_text(f)),
            ("cycles", f"{s.cycles} after the baseline; " + (", ".join(f"{k} {v}" for k, v in s.by_status.items()) or "none")),
            ("kept changes", f"{s.kept}" + (f" (keep rate {s.keep_rate * 100:.0f}%)" if s.keep_rate is not None else "")),
            ("cost", f"${s.cost_usd:.2f}" + (f", {s.tokens} tokens" if s.tokens else "")
             + (f", ${f.cost_per_pct:.2f} per 1% gain" if f.cost_per_pct else "")),
            *extra_rows]
    out += ["| | |", "| --- | --- |"] + [f"| {k} | {_cell(v)} |" for k, v in rows]
    if f.kept:
        out += ["", f"**Kept changes** ({len(f.kept)})", "",
                "| cycle | commit | " + f.metric + " | change | hypothesis |", "| ---: | --- | ---: | ---: | --- |"]
        for k in f.kept[-max_kept:]:
            ch = signed_pct(k.change_pct)
            if k.ci_pct is not None:
                ch += f" [{k.ci_pct[0]:+.1f}, {k.ci_pct[1]:+.1f}]"
            who = " (you)" if k.decided_by == "human" else ""
            out.append(f"| {k.cycle} | `{k.commit[:10]}` | {num(k.metric)} | {ch} | {_cell(k.hypothesis)}{who} |")
        if len(f.kept) > max_kept:
            out.append(f"\n… and {len(f.kept) - max_kept} earlier kept changes.")
    return "\n".join(out) + "\n"


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")[:300]
