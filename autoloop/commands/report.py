"""`autoloop report`: one self-contained HTML file about a run, rendered from its facts.

No network, no script: report.html (with its CSS) and an inline SVG chart of every cycle as a
dot coloured by its status, the running best as a step line, kept points annotated. Every mark
is a `<circle class="mark" data-cycle=N data-status=S>`, one per cycle, so tools can count them.
Each row of the table opens its cycle's change (the diff against its parent, embedded up to a
size; past it, the `autoloop show` command that prints it).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import html
import math
import os
import sys
from collections import Counter
from importlib.resources import files
from pathlib import Path
from string import Template
from typing import Any, Mapping, NamedTuple, Sequence

from autoloop.base.numbers import (
    Fmt,
    count,
    formatter,
    pct_interval,
    run_values,
    seconds,
    share,
    sig,
    signed_pct,
    usd,
)
from autoloop.commands.log import open_run
from autoloop.decide.ratchet import better, orientation
from autoloop.decide.wording import plural
from autoloop.journal.facts import Facts, overruled_keep, running_bests
from autoloop.journal.facts import rows as judged_rows
from autoloop.journal.ledger import CycleRecord

STATUS_COLORS = {"baseline": "#2563eb", "keep": "#16a34a", "discard": "#9ca3af", "crash": "#dc2626",
                 "guard_fail": "#ea580c", "violation": "#9333ea", "no_change": "#d1d5db", "gen_error": "#92400e"}
# drawn in this order: kept points on top
DRAW_ORDER = ("no_change", "discard", "violation", "gen_error", "crash", "guard_fail", "baseline", "keep")
W, H = 1000, 470                       # the SVG's coordinate box
ML, MR, MT, MB = 78, 150, 110, 78       # margins: left (y labels), right, top (annotations), bottom
STRIP = 26                             # the "no metric" strip under the plot
MAX_LABELS = 40                        # annotations of kept points
LABEL_CHARS = 42
MANY_DOTS = 200                        # past this, smaller dots
WILD_SPAN = 0.5                        # how far past the worst best a discard is still drawn
DIFF_LINES = 400                       # a cycle's diff embedded whole up to this many lines
DIFF_BUDGET = 2 << 20                  # all embedded diffs together: a long run's report still opens quickly


class Diff(NamedTuple):
    """A cycle's change as the report shows it: the diff, or why it is not embedded."""

    text: str | None
    why: str = ""


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    ticks, t = [], math.ceil(lo / step) * step
    while t <= hi + step * 1e-9:
        ticks.append(round(t, 12))
        t += step
    return ticks


def positions(cycles: Sequence[Mapping[str, Any]], direction: str,
              reset: Mapping[int, float | None] | None = None) -> dict[int, float]:
    """Where each measured cycle is drawn. A paired cycle is drawn at its change (against the
    incumbent re-measured beside it) from the running best, never better than it unless kept:
    its own median drifts with the machine, and it was not better beyond the noise. A keep a person
    made against the ratchet is drawn so too."""
    pos: dict[int, float] = {}
    best: float | None = None
    ordered = sorted(cycles, key=lambda r: int(r.get("cycle", 0)))
    for (rec, _, change), after in zip(judged_rows(ordered), running_bests(ordered, direction, reset)):
        c = CycleRecord.of(rec)
        if c.metric is not None:
            y = float(c.metric)
            # a person's keep against the ratchet is drawn as a discard would be: not below the best
            kept = c.status == "keep" and not overruled_keep(rec)
            if c.pooled is not None and not kept and change is not None and best is not None:
                y = best * (1 + change / 100.0)
                if better(direction, y, best):
                    y = best
            pos[c.cycle] = y
        best = after
    return pos


def chart(cycles: Sequence[Mapping[str, Any]], metric: str, direction: str, fmt: Fmt | None = None,
          reset: Mapping[int, float | None] | None = None) -> str:
    """The SVG chart (a string), one <circle class="mark"> per cycle; `reset`: where a refuted
    best was undone (facts.resets), the line goes back."""
    fmt = fmt or formatter(run_values(cycles), "–")
    views = sorted((CycleRecord.of(c) for c in cycles), key=lambda c: c.cycle)
    n_max = max((c.cycle for c in views), default=0)
    pos = positions(cycles, direction, reset)
    # the running best is the ratchet's (facts.running_bests): a person's kept regression is
    # drawn as its own dot, never as the line
    running = running_bests(sorted(cycles, key=lambda r: int(r.get("cycle", 0))), direction, reset)
    best_at = {c.cycle: b for c, b in zip(views, running)}
    bests = [b for b in running if b is not None]
    if bests:
        # one wild discard (a learning rate of 3.0) must not squash the run's path into a line:
        # a point past half the run's span beyond the worst best sits on that edge
        span = (max(bests) - min(bests)) or abs(bests[0]) * 0.05 or 1.0
        sign = orientation(direction)
        edge = min(bests, key=lambda b: sign * b) - sign * span * WILD_SPAN
        pos = {k: min(v, edge, key=lambda x: -sign * x) for k, v in pos.items()}
    values = [*pos.values(), *bests]
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    if hi == lo:
        lo, hi = lo - (abs(hi) * 0.05 or 1.0), hi + (abs(hi) * 0.05 or 1.0)
    lo, hi = lo - (hi - lo) * 0.06, hi + (hi - lo) * 0.06
    plot_w, plot_h = W - ML - MR, H - MT - MB
    bottom, y_strip = MT + plot_h, MT + plot_h + STRIP * 0.75

    def x(cycle: float) -> float:
        return ML + (cycle / n_max if n_max else 0.5) * plot_w

    def y(v: float) -> float:
        return MT + (hi - v) / (hi - lo) * plot_h

    arrow = "lower is better" if direction == "minimize" else "higher is better"
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H + STRIP}" class="chart" '
           f'role="img" aria-label="{_e(metric)} by cycle">',
           f'<rect x="{ML}" y="{MT}" width="{plot_w}" height="{plot_h}" class="plot"/>']
    for t in _nice_ticks(lo, hi):
        out += [f'<line x1="{ML}" x2="{ML + plot_w}" y1="{y(t):.1f}" y2="{y(t):.1f}" class="grid"/>',
                f'<text x="{ML - 8}" y="{y(t) + 4:.1f}" class="tick" text-anchor="end">{_e(sig(t))}</text>']
    for t in _nice_ticks(0, max(n_max, 1), min(10, max(n_max, 1))):
        if t == int(t) and t <= n_max:
            out += [f'<line x1="{x(t):.1f}" x2="{x(t):.1f}" y1="{bottom}" y2="{bottom + 5}" class="axis"/>',
                    f'<text x="{x(t):.1f}" y="{bottom + STRIP + 18}" class="tick" text-anchor="middle">{int(t)}</text>']
    out += [f'<text x="{ML + plot_w / 2}" y="{H + STRIP - 8}" class="label" text-anchor="middle">cycle</text>',
            f'<text x="18" y="{MT + plot_h / 2}" class="label" text-anchor="middle" '
            f'transform="rotate(-90 18 {MT + plot_h / 2})">{_e(metric)} ({arrow})</text>',
            f'<text x="{ML - 8}" y="{y_strip + 4:.1f}" class="tick" text-anchor="end">no metric</text>',
            f'<line x1="{ML}" x2="{ML + plot_w}" y1="{bottom + STRIP * 0.3:.1f}" '
            f'y2="{bottom + STRIP * 0.3:.1f}" class="strip"/>']
    pts: list[tuple[float, float]] = []       # the running best as a step line
    for c in views:
        if best_at.get(c.cycle) is not None:
            xx, yy = x(c.cycle), y(float(best_at[c.cycle]))
            if pts and abs(pts[-1][1] - yy) > 1e-9:
                pts.append((xx, pts[-1][1]))
            pts.append((xx, yy))
    if pts:
        out.append(f'<path d="M{" L".join(f"{a:.1f},{b:.1f}" for a, b in pts)}" class="best"/>')
    rank = {s: i for i, s in enumerate(DRAW_ORDER)}
    r = 4.5 if len(views) <= MANY_DOTS else 3.0
    for c in sorted(views, key=lambda c: (rank.get(c.status, 0), c.cycle)):
        yy = y(pos[c.cycle]) if c.cycle in pos else y_strip
        tip = f"cycle {c.cycle} · {c.status} · {metric} {fmt(c.metric)}\n{' '.join(c.hypothesis.split())}\n{c.lesson}"
        big = 1.5 if c.status in ("keep", "baseline") else 1
        out.append(f'<a href="#c{c.cycle}"><circle class="mark s-{_e(c.status)}" cx="{x(c.cycle):.1f}" '
                   f'cy="{yy:.1f}" r="{r * big:.1f}" fill="{STATUS_COLORS.get(c.status, "#000")}" '
                   f'data-cycle="{c.cycle}" data-status="{_e(c.status)}"><title>{_e(tip)}</title></circle></a>')
    kept = [c for c in views if c.status == "keep" and c.metric is not None]
    step = max(1, math.ceil(len(kept) / MAX_LABELS))
    for i, c in enumerate(kept):
        if i % step and i != len(kept) - 1:
            continue
        hyp = " ".join(c.hypothesis.split())
        label = hyp if len(hyp) <= LABEL_CHARS else hyp[:LABEL_CHARS - 1] + "…"
        xx, yy = x(c.cycle) + 3, y(pos[c.cycle]) - 9
        out.append(f'<text x="{xx:.1f}" y="{yy:.1f}" class="note" '
                   f'transform="rotate(-32 {xx:.1f} {yy:.1f})">{_e(label)}</text>')
    out.append("</svg>")
    return "\n".join(out)


def changes_of(repo_root: Path, tag: str, cycles: Sequence[Mapping[str, Any]]) -> dict[int, Diff]:
    """Each cycle's change to embed (secrets redacted), within DIFF_LINES and DIFF_BUDGET; one
    git process for them all."""
    from autoloop.git.cyclerefs import diffs
    from autoloop.journal.redact import Redactor

    views = [CycleRecord.of(c) for c in cycles]
    found = diffs(repo_root, [c.change for c in views if c.change])
    redact, left, out = Redactor(os.environ), DIFF_BUDGET, {}
    for c in views:
        if not c.change:
            continue
        text = found.get(c.change)
        if text is None:
            out[c.cycle] = Diff(None, "its commit is not in this repository")
            continue
        lines = text.count("\n")
        if lines > DIFF_LINES or len(text) > left:
            why = f"{lines} lines" if lines > DIFF_LINES else "the report's room for diffs is used up"
            out[c.cycle] = Diff(None, f"not embedded ({why})")
            continue
        left -= len(text)
        # the page is UTF-8: a file's bytes that are not become U+FFFD
        out[c.cycle] = Diff(redact(text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")))
    return out


def _diff_html(text: str) -> str:
    out = []
    for line in text.splitlines():
        kind = "meta" if line.startswith(("diff --git", "index ", "--- ", "+++ ")) else \
            "hunk" if line.startswith("@@") else "add" if line.startswith("+") else \
            "del" if line.startswith("-") else ""
        out.append(f'<span class="{kind}">{_e(line)}</span>' if kind else _e(line))
    return "\n".join(out)


def _change(c: CycleRecord, d: Diff | None, tag: str) -> str:
    """The row's change cell: its diffstat, opening to the diff."""
    shown = ", ".join(c.changed[:3]) + (" …" if len(c.changed) > 3 else "")
    ds = c.diffstat or (f"{len(c.changed)} file(s): {shown}" if c.changed else "")
    if d is None:
        return _e(ds)
    cmd = f'<div class="small"><code>autoloop show {c.cycle} --tag {_e(tag)}</code></div>'
    if d.text is None:
        return f'{_e(ds)}<div class="small">diff {_e(d.why)}</div>{cmd}'
    return (f'<details class="change"><summary>{_e(ds or "diff")}</summary><pre class="diff">'
            f'{_diff_html(d.text)}</pre>{cmd}</details>')


def _row(rec: Mapping[str, Any], vs: float | None, change: float | None, fmt: Fmt,
         diff: Diff | None = None, tag: str = "") -> str:
    c = CycleRecord.of(rec)
    who = ' <span class="small">(your decision)</span>' if c.by_human else ""
    commit = f'<div class="small">{_e(c.commit[:10])}</div>' if c.status == "keep" else ""
    tokens = f"<div class=small>{count(c.tokens)} tok</div>" if c.tokens else ""
    est = "est. " if c.pooled is not None and change is not None else ""   # paired: not the medians' change
    return (f'<tr id="c{c.cycle}"><td class="n">{c.cycle}</td><td><span class="badge" style="background:'
            f'{STATUS_COLORS.get(c.status, "#000")}">{_e(c.status)}</span>{who}{commit}</td>'
            f'<td class="n">{_e(fmt(c.metric, ""))}</td>'
            f'<td class="n">{_e(fmt(vs, ""))}<div class="small">{est}{_e(signed_pct(change, ""))}</div></td>'
            f'<td>{_e(" ".join(c.hypothesis.split()))}</td><td class="lesson">{_e(" ".join(c.lesson.split()))}</td>'
            f'<td class="small">{_change(c, diff, tag)}</td><td class="n">{"" if c.cost_usd is None else usd(c.cost_usd)}{tokens}'
            f'</td><td class="n">{seconds(c.duration_s)}</td></tr>')


def _count(after_baseline: int, rows: int) -> str:
    """The table's heading counts as the CYCLES card does (after the baseline), and says so when
    the baseline's row is there too."""
    return f"{after_baseline} after the baseline" if rows > after_baseline else str(after_baseline)


def render(f: Facts, *, generated: str | None = None, changes: Mapping[int, Diff] | None = None) -> str:
    """The page; `changes` (changes_of) the diffs its rows open to."""
    s, fmt, gain = f.summary, f.fmt, f.headline_gain_pct
    improved = gain is not None and orientation(f.direction) * gain > 0
    gain_note = (pct_interval(f.gain_ci_pct, f.gain_ci_level) + " · " if f.gain_ci_pct else "") + (
        "best re-measured against the start" if f.remeasured_pct is not None else "baseline → best")
    if f.refuted:
        gain_note = "the end-of-run check did not confirm the best"
    cards = [
        ("baseline", fmt(s.baseline), f.metric, ""),
        ("best", fmt(s.best), f.direction + (", as measured against its incumbent" if f.paired else ""), ""),
        ("gain", "none confirmed" if f.refuted else signed_pct(gain), gain_note, "good" if improved else ""),
        ("cycles", str(s.cycles), ", ".join(f"{k} {v}" for k, v in s.by_status.items()) or "none yet", ""),
        ("keep rate", "–" if s.keep_rate is None else share(s.keep_rate), f"{s.kept} kept", ""),
        # a generator that reports no cost (a `command`, `tune`) shows a dash, not "$0.00"
        ("cost", usd(s.cost_usd) if s.cost_usd else f"{count(s.tokens)} tok" if s.tokens else "–",
         (f"{count(s.tokens)} tokens" if s.cost_usd else "no price known") if s.tokens
         else "generator cost" if s.cost_usd else "none reported by the generator", ""),
        ("cost per 1% gain", usd(f.cost_per_pct), "dollars / percentage point", ""),
        ("time", seconds(f.duration_s), "summed cycle time", ""),
        # what a night buys: measurements an hour, from the seeds the ledger holds
        ("runs per hour", count(round(f.runs * 3600 / f.duration_s)) if f.runs and f.duration_s else "–",
         f"{count(f.runs)} verifier runs", ""),
    ]
    card_html = "".join(f'<div class="card"><div class="k">{_e(k)}</div><div class="v {cls}">{_e(v)}</div>'
                        f'<div class="d">{_e(d)}</div></div>' for k, v, d, cls in cards)
    cycles = [row.record for row in f.rows]
    counts = Counter(CycleRecord.of(c).status for c in cycles)
    legend = "".join(f'<span style="--c:{STATUS_COLORS.get(st, "#000")}">{_e(st)} {counts[st]}'
                     '</span>'
                     for st in dict.fromkeys([*STATUS_COLORS, *counts]) if counts[st])
    legend += '<span class="line">running best</span>'
    if f.paired:
        legend += ('<em class="small">paired cycles are drawn at their change against the incumbent '
                   'measured beside them; hover a dot for its own numbers</em>')
    goal = f'<p class="sub">{_e(f.goal)}</p>' if f.goal else ""
    goal += "".join(f'<p class="sub"><strong>Warning:</strong> {_e(note)}</p>' for note in f.not_sandboxed)
    if f.aborted:
        goal += f'<p class="bad">No cycle was measured: the baseline was aborted ({_e(f.aborted)}).</p>'
    if f.refuted:
        goal += (f'<p class="bad">The end-of-run check did not confirm the best: {_e(f.refuted)}'
                 + (f'; {_e(f.undone)}' if f.undone else "") + ".</p>")
    page = Template(files("autoloop.commands").joinpath("report.html").read_text(encoding="utf-8"))
    return page.substitute(
        tag=_e(f.tag), metric=_e(f.metric), goal=goal, cards=card_html, legend=legend,
        count=_count(s.cycles, len(cycles)),
        chart=chart(cycles, f.metric, f.direction, fmt, f.reset),
        when=_e(generated or _dt.datetime.now().strftime("%Y-%m-%d %H:%M")),
        rows="\n".join(_row(*row, fmt, (changes or {}).get(int(row.record.get("cycle", 0))), f.tag)
                       for row in f.rows))


def main(args: argparse.Namespace) -> int:
    from autoloop.commands.ci import facts_of
    from autoloop.commands.report import render
    from autoloop.journal.facts import markdown

    program, tag, journal = open_run(args)
    f = facts_of(program, tag, journal.records)
    text = markdown(f) if args.format == "markdown" else \
        render(f, changes=changes_of(program.repo_root, tag, [row.record for row in f.rows]))
    dest = args.output or ("-" if args.format == "markdown" else str(journal.dir / "report.html"))
    if dest == "-":
        sys.stdout.write(text)
        return 0
    out = Path(dest)
    if out.is_dir():
        out = out / ("report.html" if args.format == "html" else "report.md")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    print(f"wrote {out} ({plural(f.cycles_total, 'cycle')})")
    return 0
