"""`autoloop report`: one self-contained HTML file about a run, rendered from its ledger.

No network, no script: inline CSS and an inline SVG chart — every cycle a dot coloured by its
status (cycles without a metric sit in a strip under the plot), the running best as a step
line, kept points annotated with their hypothesis, each dot linking to its row in the table of
cycles below (hypothesis, status, metric, lesson, diffstat, cost). On top, the summary:
baseline, best, gain (with its confidence interval when the ledger has one), keep rate, cost per
unit of gain.

Every mark of the chart is a `<circle class="mark" data-cycle=N data-status=S>`, one per cycle
record, so tools (and the tests) can count them.
"""

from __future__ import annotations

import datetime as _dt
import html
import math
from typing import Any, Mapping, Sequence

from autoloop.facts import Facts, rows as judged_rows
from autoloop.numbers import Fmt, count, formatter, pct_interval, run_values, seconds, sig, signed_pct, usd

STATUS_COLORS = {
    "baseline": "#2563eb",
    "keep": "#16a34a",
    "discard": "#9ca3af",
    "crash": "#dc2626",
    "guard_fail": "#ea580c",
    "violation": "#9333ea",
    "no_change": "#d1d5db",
    "gen_error": "#92400e",
}
ORDER = list(STATUS_COLORS)

W, H = 1000, 470                       # the SVG's coordinate box
ML, MR, MT, MB = 78, 150, 110, 78       # margins: left (y labels), right, top (annotations), bottom
STRIP = 26                             # the "no metric" strip under the plot


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.ceil(lo / step) * step
    ticks = []
    t = start
    while t <= hi + step * 1e-9:
        ticks.append(round(t, 12))
        t += step
    return ticks


def _positions(cycles: Sequence[Mapping[str, Any]], direction: str) -> dict[int, float]:
    """Where each measured cycle is drawn. A paired cycle was judged on its change against the
    incumbent re-measured beside it, not on its own median (which drifts with the machine): it
    is drawn at that change from the running best, and a cycle that was not kept is never drawn
    better than the running best (it was not better beyond the noise)."""
    pos: dict[int, float] = {}
    for c, vs, change in judged_rows(cycles):
        if c.get("metric") is None:
            continue
        y = float(c["metric"])
        paired = isinstance((c.get("stats") or {}).get("pooled"), dict)
        if paired and c["status"] != "keep" and change is not None:
            best = _best_before(cycles, c)
            if best is not None:
                y = best * (1 + change / 100.0)
                if (y < best) == (direction == "minimize") and y != best:
                    y = best
        pos[int(c["cycle"])] = y
    return pos


def _best_before(cycles: Sequence[Mapping[str, Any]], c: Mapping[str, Any]) -> float | None:
    prev = [p.get("best") for p in cycles if p["cycle"] < c["cycle"] and p.get("best") is not None]
    return float(prev[-1]) if prev else None


def chart(cycles: Sequence[Mapping[str, Any]], metric: str, direction: str,
          fmt: Fmt | None = None) -> str:
    """The SVG chart (a string), one <circle class="mark"> per cycle."""
    fmt = fmt or formatter(run_values(cycles), "–")
    n_max = max((int(c["cycle"]) for c in cycles), default=0)
    pos = _positions(cycles, direction)
    bests = [float(c["best"]) for c in cycles if c.get("best") is not None]
    values = list(pos.values()) + bests
    if bests:
        # one wild discard (a learning rate of 3.0) must not squash the path of the run into a
        # line: the worse side reaches half the run's whole span past the worst best, and a
        # point beyond it sits on the edge (its tooltip keeps the value)
        span = (max(bests) - min(bests)) or abs(bests[0]) * 0.05 or 1.0
        worst_best = max(bests) if direction == "minimize" else min(bests)
        edge = worst_best + span * 0.5 if direction == "minimize" else worst_best - span * 0.5
        clamp = (lambda v: min(v, edge)) if direction == "minimize" else (lambda v: max(v, edge))
        pos = {k: clamp(v) for k, v in pos.items()}
        values = list(pos.values()) + bests
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    if hi == lo:
        pad = abs(hi) * 0.05 or 1.0
        lo, hi = lo - pad, hi + pad
    pad = (hi - lo) * 0.06
    lo, hi = lo - pad, hi + pad
    plot_w, plot_h = W - ML - MR, H - MT - MB
    y_strip = MT + plot_h + STRIP * 0.75

    def x(cycle: float) -> float:
        return ML + (cycle / n_max if n_max else 0.5) * plot_w

    def y(v: float) -> float:
        return MT + (hi - v) / (hi - lo) * plot_h

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H + STRIP}" class="chart" '
           f'role="img" aria-label="{_e(metric)} by cycle">']
    out.append(f'<rect x="{ML}" y="{MT}" width="{plot_w}" height="{plot_h}" class="plot"/>')
    # y grid and labels
    for t in _nice_ticks(lo, hi):
        yy = y(t)
        out.append(f'<line x1="{ML}" x2="{ML + plot_w}" y1="{yy:.1f}" y2="{yy:.1f}" class="grid"/>')
        out.append(f'<text x="{ML - 8}" y="{yy + 4:.1f}" class="tick" text-anchor="end">{_e(sig(t))}</text>')
    # x ticks
    for t in _nice_ticks(0, max(n_max, 1), min(10, max(n_max, 1))):
        if t != int(t) or t > n_max:
            continue
        xx = x(t)
        out.append(f'<line x1="{xx:.1f}" x2="{xx:.1f}" y1="{MT + plot_h}" y2="{MT + plot_h + 5}" class="axis"/>')
        out.append(f'<text x="{xx:.1f}" y="{MT + plot_h + STRIP + 18}" class="tick" text-anchor="middle">{int(t)}</text>')
    out.append(f'<text x="{ML + plot_w / 2}" y="{H + STRIP - 8}" class="label" text-anchor="middle">cycle</text>')
    arrow = "lower is better" if direction == "minimize" else "higher is better"
    out.append(f'<text x="18" y="{MT + plot_h / 2}" class="label" text-anchor="middle" '
               f'transform="rotate(-90 18 {MT + plot_h / 2})">{_e(metric)} ({arrow})</text>')
    out.append(f'<text x="{ML - 8}" y="{y_strip + 4:.1f}" class="tick" text-anchor="end">no metric</text>')
    out.append(f'<line x1="{ML}" x2="{ML + plot_w}" y1="{MT + plot_h + STRIP * 0.3:.1f}" '
               f'y2="{MT + plot_h + STRIP * 0.3:.1f}" class="strip"/>')
    # the running best as a step line
    pts: list[tuple[float, float]] = []
    for c in sorted(cycles, key=lambda c: c["cycle"]):
        b = c.get("best")
        if b is None:
            continue
        xx, yy = x(c["cycle"]), y(float(b))
        if pts and abs(pts[-1][1] - yy) > 1e-9:
            pts.append((xx, pts[-1][1]))
        pts.append((xx, yy))
    if pts:
        d = "M" + " L".join(f"{a:.1f},{b:.1f}" for a, b in pts)
        out.append(f'<path d="{d}" class="best"/>')
    # the dots: discarded first, kept on top
    rank = {s: i for i, s in enumerate(["no_change", "discard", "violation", "gen_error", "crash",
                                         "guard_fail", "baseline", "keep"])}
    r = 4.5 if len(cycles) <= 200 else 3.0
    for c in sorted(cycles, key=lambda c: (rank.get(c["status"], 0), c["cycle"])):
        st = c["status"]
        has = int(c["cycle"]) in pos
        xx, yy = x(c["cycle"]), (y(pos[int(c["cycle"])]) if has else y_strip)
        hyp = " ".join(str(c.get("hypothesis", "")).split())
        tip = f"cycle {c['cycle']} · {st} · {metric} {fmt(c.get('metric'))}\n{hyp}\n{c.get('lesson', '')}"
        big = st in ("keep", "baseline")
        out.append(f'<a href="#c{c["cycle"]}"><circle class="mark s-{_e(st)}" cx="{xx:.1f}" cy="{yy:.1f}" '
                   f'r="{r * (1.5 if big else 1):.1f}" fill="{STATUS_COLORS.get(st, "#000")}" '
                   f'data-cycle="{c["cycle"]}" data-status="{_e(st)}"><title>{_e(tip)}</title></circle></a>')
    # annotations of kept points
    kept = [c for c in cycles if c["status"] == "keep" and c.get("metric") is not None]
    step = max(1, math.ceil(len(kept) / 40))   # at most ~40 labels
    for i, c in enumerate(kept):
        if i % step and i != len(kept) - 1:
            continue
        hyp = " ".join(str(c.get("hypothesis", "")).split())
        label = hyp if len(hyp) <= 42 else hyp[:41] + "…"
        xx, yy = x(c["cycle"]), y(pos[int(c["cycle"])])
        out.append(f'<text x="{xx + 3:.1f}" y="{yy - 9:.1f}" class="note" '
                   f'transform="rotate(-32 {xx + 3:.1f} {yy - 9:.1f})">{_e(label)}</text>')
    out.append("</svg>")
    return "\n".join(out)


CSS = """
:root { color-scheme: light; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
       margin: 0; color: #111827; background: #f8fafc; }
main { max-width: 1120px; margin: 0 auto; padding: 24px; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 16px; margin: 28px 0 10px; }
.sub { color: #6b7280; margin: 0 0 18px; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(150px, 1fr)); gap: 10px; }
.card { background: #fff; border: 1px solid #e5e7eb; border-radius: 8px; padding: 10px 12px; }
.card .k { color: #6b7280; font-size: 12px; text-transform: uppercase; letter-spacing: .04em; }
.card .v { font-size: 18px; font-weight: 600; margin-top: 2px; }
.card .d { color: #6b7280; font-size: 12px; }
.good { color: #15803d; } .bad { color: #b91c1c; }
figure { margin: 18px 0 0; background: #fff; border: 1px solid #e5e7eb; border-radius: 8px; padding: 8px; }
svg.chart { width: 100%; height: auto; display: block; }
svg .plot { fill: #fff; stroke: #e5e7eb; }
svg .grid { stroke: #f1f5f9; } svg .axis { stroke: #9ca3af; } svg .strip { stroke: #e5e7eb; stroke-dasharray: 3 3; }
svg .tick { font-size: 11px; fill: #6b7280; } svg .label { font-size: 12px; fill: #374151; }
svg .best { fill: none; stroke: #16a34a; stroke-width: 2; opacity: .85; }
svg .note { font-size: 10.5px; fill: #166534; }
svg .mark { stroke: #fff; stroke-width: 1; } svg .s-keep, svg .s-baseline { stroke: #064e3b; stroke-width: 1.2; }
.legend { display: flex; flex-wrap: wrap; gap: 14px; margin: 8px 6px 2px; color: #374151; font-size: 12px; }
.legend span.line::before { height: 2px; border-radius: 0; width: 16px; vertical-align: 3px; background: #16a34a; }
.legend span::before { content: ""; display: inline-block; width: 10px; height: 10px; border-radius: 50%;
                       margin-right: 5px; vertical-align: -1px; background: var(--c); }
table { border-collapse: collapse; width: 100%; background: #fff; font-size: 13px; }
th, td { border-bottom: 1px solid #e5e7eb; padding: 6px 8px; text-align: left; vertical-align: top; }
th { background: #f1f5f9; position: sticky; top: 0; font-weight: 600; }
td.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr:target { background: #fef9c3; }
.badge { display: inline-block; padding: 1px 7px; border-radius: 10px; color: #fff; font-size: 12px; white-space: nowrap; }
.lesson { color: #4b5563; } .small { color: #6b7280; font-size: 12px; }
footer { color: #9ca3af; font-size: 12px; margin: 24px 0; }
"""


def render(records: Sequence[Mapping[str, Any]], f: Facts, *, generated: str | None = None) -> str:
    cycles = [r for r in records if r.get("t") == "cycle"]
    s = f.summary
    when = generated or _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    fmt = f.fmt
    gain = f.headline_gain_pct
    better = gain is not None and gain != 0 and ((gain < 0) == (f.direction == "minimize"))
    if f.remeasured_pct is not None:
        gain_note = (pct_interval(f.gain_ci_pct, f.gain_ci_level) + " · " if f.gain_ci_pct else "") \
            + "best re-measured against the start"
    else:
        gain_note = (pct_interval(f.gain_ci_pct, f.gain_ci_level) + " · " if f.gain_ci_pct else "") \
            + "baseline → best"
    cards = [
        ("baseline", fmt(s.baseline), f.metric),
        ("best", fmt(s.best), f.direction + (", as measured against its incumbent" if f.paired else "")),
        ("gain", signed_pct(gain), gain_note, "good" if better else ""),
        ("cycles", str(s.cycles), ", ".join(f"{k} {v}" for k, v in s.by_status.items()) or "none yet"),
        ("keep rate", "–" if s.keep_rate is None else f"{s.keep_rate * 100:.0f}%", f"{s.kept} kept"),
        # a generator that reports no cost (a `command`, `tune`) shows a dash, not "$0.00"
        ("cost", usd(s.cost_usd) if s.cost_usd else f"{count(s.tokens)} tok" if s.tokens else "–",
         (f"{count(s.tokens)} tokens" if s.cost_usd else "no price known") if s.tokens
         else "generator cost" if s.cost_usd else "none reported by the generator"),
        ("cost per 1% gain", usd(f.cost_per_pct), "dollars / percentage point"),
        ("time", seconds(f.duration_s), "summed cycle time"),
    ]
    card_html = "".join(
        f'<div class="card"><div class="k">{_e(c[0])}</div><div class="v {c[3] if len(c) > 3 else ""}">{_e(c[1])}</div>'
        f'<div class="d">{_e(c[2])}</div></div>' for c in cards)
    counts = {st: 0 for st in ORDER}
    for c in cycles:
        counts[c["status"]] = counts.get(c["status"], 0) + 1
    legend = "".join(f'<span style="--c:{STATUS_COLORS.get(st, "#000")}">{_e(st)} {n}</span>'
                     for st, n in counts.items() if n) + \
        '<span class="line">running best</span>'
    if any(isinstance((c.get("stats") or {}).get("pooled"), dict) for c in cycles):
        legend += ('<em class="small">paired cycles are drawn at their change against the incumbent '
                   'measured beside them; hover a dot for its own numbers</em>')
    rows = []
    for c, vs, change in judged_rows(cycles):
        st = c["status"]
        gen = c.get("gen") or {}
        cost = gen.get("cost_usd")
        tokens = (gen.get("tokens_in") or 0) + (gen.get("tokens_out") or 0)
        ds = c.get("diffstat") or (f"{len(c['changed'])} file(s): " + ", ".join(c["changed"][:3])
                                   + (" …" if len(c["changed"]) > 3 else "") if c.get("changed") else "")
        who = ' <span class="small">(your decision)</span>' if c.get("decided_by") == "human" else ""
        commit = f'<div class="small">{_e((c.get("commit") or "")[:10])}</div>' if st == "keep" else ""
        rows.append(
            f'<tr id="c{c["cycle"]}"><td class="n">{c["cycle"]}</td>'
            f'<td><span class="badge" style="background:{STATUS_COLORS.get(st, "#000")}">{_e(st)}</span>{who}{commit}</td>'
            f'<td class="n">{_e(fmt(c.get("metric"), ""))}</td>'
            f'<td class="n">{_e(fmt(vs, ""))}<div class="small">{_e(signed_pct(change, ""))}</div></td>'
            f'<td>{_e(" ".join(str(c.get("hypothesis", "")).split()))}</td>'
            f'<td class="lesson">{_e(" ".join(str(c.get("lesson", "")).split()))}</td>'
            f'<td class="small">{_e(ds)}</td>'
            f'<td class="n">{"" if cost is None else usd(cost)}'
            f'{f"<div class=small>{count(tokens)} tok</div>" if tokens else ""}</td>'
            f'<td class="n">{float(c.get("duration_s") or 0):.1f}s</td></tr>')
    goal = f'<p class="sub">{_e(f.goal)}</p>' if f.goal else ""
    goal += "".join(f'<p class="sub"><strong>Warning:</strong> {_e(note)}</p>' for note in f.not_sandboxed)
    if f.aborted:
        goal += f'<p class="bad">No cycle was measured: the baseline was aborted ({_e(f.aborted)}).</p>'
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>autoloop · {_e(f.tag)} · {_e(f.metric)}</title>
<style>{CSS}</style>
</head>
<body>
<main>
<h1>autoloop run <code>{_e(f.tag)}</code> — {_e(f.metric)}</h1>
{goal}
<section class="cards">{card_html}</section>
<figure>
{chart(cycles, f.metric, f.direction, fmt)}
<figcaption class="legend">{legend}</figcaption>
</figure>
<h2>Cycles ({len(cycles)})</h2>
<table>
<thead><tr><th>#</th><th>status</th><th>{_e(f.metric)}</th><th title="what the cycle was judged against: the incumbent re-measured beside it (paired), else the best before it">judged against</th><th>hypothesis</th><th>lesson</th>
<th>diffstat</th><th>cost</th><th>time</th></tr></thead>
<tbody>
{chr(10).join(rows)}
</tbody>
</table>
<footer>Branch <code>autoloop/{_e(f.tag)}</code> · rendered {_e(when)} by autoloop from <code>.autoloop/{_e(f.tag)}/ledger.jsonl</code>; re-run <code>autoloop report</code> to refresh.</footer>
</main>
</body>
</html>
"""
