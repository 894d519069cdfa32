"""Numbers about one run, pure functions of its ledger (anyone can recompute them): what `log`,
the report, the CI step summary, the pull request body and `run --json` show. Confidence
intervals are read from the records (`stats.change_ci_pct`, `gain_ci_pct`), never invented."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, NamedTuple, Sequence

from autoloop.journal.ledger import STATUSES, not_sandboxed
from autoloop.base.numbers import (count, digits_for, formatter, num, pct, pct_interval, run_values,
                              seconds, share, signed_pct, usd)
from autoloop.decide.end import confirmed, refuted_text
from autoloop.decide.ratchet import better
from autoloop.decide.wording import pooled, stated_pct

MAX_KEPT = 30     # kept changes listed in the Markdown


class Row(NamedTuple):
    """A cycle record with what it was judged against and its change in % (see in_cycle)."""

    record: Mapping[str, Any]
    vs: float | None
    change: float | None


@dataclass(frozen=True)
class Summary:
    cycles: int                       # cycles after the baseline
    baseline: float | None
    best: float | None
    gain_pct: float | None            # signed relative change baseline → best
    kept: int
    keep_rate: float | None
    by_status: dict[str, int]
    trend: str
    cost_usd: float
    tokens: int

    @property
    def cost_per_keep(self) -> float | None:
        return self.cost_usd / self.kept if self.kept and self.cost_usd else None

    @property
    def cost_per_unit_gain(self) -> float | None:
        """Dollars per unit of metric moved from baseline to best (in the metric's own units)."""
        if not self.cost_usd or self.baseline is None or self.best is None \
                or self.best == self.baseline:
            return None
        return self.cost_usd / abs(self.best - self.baseline)


def overruled_keep(cycle: Mapping[str, Any]) -> bool:
    """A person kept a candidate the ratchet would not have: its metric is no evidence of "best"."""
    return (cycle.get("status") == "keep" and cycle.get("decided_by") == "human"
            and cycle.get("recommendation") != "keep")


def resets(records: Sequence[Mapping[str, Any]]) -> dict[int, float | None]:
    """after cycle N → the best again: where an end-of-run check refuted the best and the
    branch went back (a `final` record's `undo`)."""
    return {int(r["after_cycle"]): r["undo"].get("best") for r in records
            if r.get("t") == "final" and isinstance(r.get("undo"), dict) and isinstance(r.get("after_cycle"), int)}


def running_bests(cycles: Sequence[Mapping[str, Any]], direction: str,
                  reset: Mapping[int, float | None] | None = None) -> list[float | None]:
    """The one definition of "best" (the card, `log`, the progress and stop lines, the chart's
    running best): after each cycle, the best metric the ratchet measured: the baseline's, moved
    by every keep the ratchet decided when it is better, and put back where an end-of-run check
    refuted it (`reset`, from resets()). A keep a person made against the ratchet (approve mode)
    is theirs, never the best."""
    out: list[float | None] = []
    best: float | None = None
    for c in cycles:
        m = c.get("metric")
        if isinstance(m, (int, float)) and (c.get("status") == "baseline" or (
                c.get("status") == "keep" and not overruled_keep(c))) \
                and (best is None or better(direction, m, best)):
            best = float(m)
        if reset and c.get("cycle") in reset:
            best = reset[c["cycle"]]
        out.append(best)
    return out


def best_measured(cycles: Sequence[Mapping[str, Any]], direction: str,
                  incumbent: float | None, reset: Mapping[int, float | None] | None = None) -> float | None:
    """What a run may call its best (running_bests; the incumbent's metric before any cycle)."""
    bests = running_bests(cycles, direction, reset)
    return bests[-1] if bests and bests[-1] is not None else incumbent


def summarize(cycles: Sequence[Mapping[str, Any]], direction: str, recent: int = 10,
              reset: Mapping[int, float | None] | None = None) -> Summary:
    baseline = next((c.get("metric") for c in cycles if c["status"] == "baseline"), None)
    bests = running_bests(cycles, direction, reset)
    best = bests[-1] if bests else None
    done = [c for c in cycles if c["cycle"] > 0]
    counts = Counter(c["status"] for c in done)
    gen = [c.get("gen") or {} for c in done]
    return Summary(
        cycles=len(done), baseline=baseline, best=best, gain_pct=pct(baseline, best),
        kept=counts["keep"], keep_rate=counts["keep"] / len(done) if done else None,
        by_status={k: counts[k] for k in dict.fromkeys([*STATUSES[1:], *counts]) if counts[k]},
        trend=_trend(cycles, done[-recent:], bests),
        cost_usd=sum(g.get("cost_usd") or 0.0 for g in gen),
        tokens=sum((g.get("tokens_in") or 0) + (g.get("tokens_out") or 0) for g in gen))


def _trend(cycles: Sequence[Mapping[str, Any]], window: Sequence[Mapping[str, Any]],
           bests: Sequence[float | None]) -> str:
    if not window:
        return "no cycles yet"
    before = sum(1 for c in cycles if c["cycle"] < window[0]["cycle"])
    start, end = (bests[before - 1] if before else None), bests[-1]
    keeps = sum(1 for c in window if c["status"] == "keep")
    d, fmt = pct(start, end), formatter([start, end])
    moved = f", best {fmt(start)} → {fmt(end)} ({signed_pct(d)})" if d is not None else ""
    last = "the last cycle" if len(window) == 1 else f"last {len(window)} cycles"
    return f"{last}: {keeps} kept{moved}"


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
    ci_level: float | None = None      # the interval's real coverage (few pairs: below 95%; one: 0)


@dataclass(frozen=True)
class Facts:
    tag: str
    goal: str
    metric: str
    direction: str
    summary: Summary
    rows: tuple[Row, ...]                   # the cycle records, baseline included
    kept: tuple[Kept, ...]
    gain_ci_pct: tuple[float, float] | None
    gain_ci_level: float | None
    duration_s: float
    not_sandboxed: tuple[str, ...]          # `not sandboxed: <why>; ...`, one per distinct reason
    # the end-of-run re-measurement of best against the start (the last `final` record that
    # measured): in a paired run this, not baseline → best of one-cycle medians, is the gain
    final: Mapping[str, Any] | None
    digits: int                             # significant digits that tell this run's values apart
    paired: bool                            # some cycle was judged on paired measurements
    aborted: str | None                     # why no cycle was measured (an aborted baseline)
    # the end-of-run re-measurement of a branch head a person kept against the ratchet: it is
    # theirs, not the best's gain (`final` is None then)
    head_final: Mapping[str, Any] | None = None
    runs: int = 0                           # verifier runs the records show (verifier_runs)
    # after cycle N → the best again, where a refuted best was undone (resets())
    reset: Mapping[int, float | None] = field(default_factory=dict)

    @property
    def cycles_total(self) -> int:
        return len(self.rows)

    @property
    def confirmed(self) -> bool | None:
        """Did the end-of-run check confirm the best over the start (None: nothing measured said)."""
        return None if self.final is None else confirmed(self.final)

    @property
    def refuted(self) -> str | None:
        """`cycle 1's keep did not hold: …; branch … is back at …`: the words for a best the
        end-of-run check did not confirm (None when it did, or nothing was measured)."""
        if self.final is None or self.confirmed is not False:
            return None
        undo = self.final.get("undo")
        return str(undo["said"]) if isinstance(undo, dict) and undo.get("said") else \
            refuted_text(self.final, [k.cycle for k in self.kept], self.metric)

    @property
    def undone(self) -> str | None:
        """`branch autoloop/x is back at …; the refuted commits stay at …` (None: nothing undone)."""
        undo = None if self.refuted is None or self.final is None else self.final.get("undo")
        return str(undo["back"]) if isinstance(undo, dict) and undo.get("back") else None

    @property
    def remeasured_pct(self) -> float | None:
        return None if self.final is None else self.final.get("change_pct")

    @property
    def headline_gain_pct(self) -> float | None:
        """Re-measured when the run has it, else baseline → best; None when the re-measurement
        refuted it: a gain the run could not confirm is never its result."""
        if self.refuted is not None:
            return None
        r = self.remeasured_pct
        return r if r is not None else self.summary.gain_pct

    def title(self) -> str:
        """`score 145.975 → 109.04 (-25.77%, re-measured)`: one line for a PR title."""
        s = self.summary
        if s.baseline is None:
            return f"{self.metric}: baseline not measured"
        if self.refuted is not None:
            return f"{self.metric} {self.fmt(s.baseline, '?')} → {self.fmt(s.best, '?')} (no confirmed gain)"
        gain = signed_pct(self.headline_gain_pct, "?") + (", re-measured" if self.remeasured_pct is not None else "")
        return f"{self.metric} {self.fmt(s.baseline, '?')} → {self.fmt(s.best, '?')} ({gain})"

    def fmt(self, x: float | None, empty: str = "–") -> str:   # rounded as everywhere else in this run
        return num(x, self.digits, empty)

    @property
    def cost_per_pct(self) -> float | None:   # dollars per percentage point of gain
        g, cost = self.headline_gain_pct, self.summary.cost_usd
        return cost / abs(g) if cost and g else None

    def as_dict(self) -> dict[str, Any]:
        s = self.summary
        return {
            "tag": self.tag, "branch": f"autoloop/{self.tag}", "goal": self.goal,
            "metric": self.metric, "direction": self.direction,
            "baseline": s.baseline, "best": s.best, "gain_pct": _r(s.gain_pct),
            "remeasured_gain_pct": _r(self.remeasured_pct), "aborted": self.aborted,
            "headline_gain_pct": _r(self.headline_gain_pct),
            # the end-of-run check: did it confirm the best (false: the keep did not hold, said in `refuted`)
            "confirmed": self.confirmed, "refuted": self.refuted, "undone": self.undone,
            # what a person reads (rounded like every other output; a PR title uses `title`)
            "display": {"baseline": self.fmt(s.baseline, ""), "best": self.fmt(s.best, ""),
                        "gain": gain_text(self), "title": self.title()},
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


def _pair(ci: Any) -> tuple[float, float] | None:
    return (float(ci[0]), float(ci[1])) if isinstance(ci, (list, tuple)) and len(ci) == 2 else None


def _kept(row: Row) -> Kept:
    # `before`: what this keep was judged against (the incumbent re-measured beside it in a
    # paired cycle, else the best of the cycle before it)
    c, st = row.record, row.record.get("stats") or {}
    src = st if st.get("change_ci_pct") else (st.get("pooled") or {})
    level = src.get("ci_level")
    return Kept(cycle=c["cycle"], commit=c.get("commit") or "", metric=c.get("metric"),
                before=row.vs, change_pct=row.change,
                hypothesis=" ".join(str(c.get("hypothesis", "")).split()), ci_pct=_pair(src.get("change_ci_pct")),
                decided_by=c.get("decided_by") or "ratchet",
                ci_level=float(level) if isinstance(level, (int, float)) else None)


def facts(records: Sequence[Mapping[str, Any]], *, tag: str, goal: str, metric: str,
          direction: str) -> Facts:
    cycles = [r for r in records if r.get("t") == "cycle"]
    judged = rows(cycles)
    gain_ci = level = final = None
    # a resumed run that kept more after an end-of-run check has another best: that check's
    # gain is about a commit that is no longer the best, and is not this run's headline
    last_keep = max((c["cycle"] for c in cycles if c.get("status") == "keep"
                     and isinstance(c.get("cycle"), int)), default=None)
    for r in records:
        if r.get("t") == "final" and last_keep is not None \
                and isinstance(r.get("after_cycle"), int) and r["after_cycle"] < last_keep:
            continue
        if (ci := _pair(r.get("gain_ci_pct"))) is not None:
            gain_ci, level = ci, r.get("gain_ci_level")
        if r.get("t") == "final" and not r.get("error") and not r.get("skipped") \
                and r.get("change_pct") is not None:
            final = r
            ci = None if r.get("deterministic") else _pair(r.get("change_ci_pct"))
            gain_ci, level = (ci, r.get("ci_level")) if ci is not None else (None, None)
    head_final = None
    if final is not None and any(overruled_keep(c) for c in cycles):
        head_final, final, gain_ci, level = final, None, None, None
    if final is not None and confirmed(final) is False:
        gain_ci, level = None, None   # an interval around a refuted gain is no result either
    reset = resets(records)
    return Facts(tag=tag, goal=goal, metric=metric, direction=direction, head_final=head_final, reset=reset,
                 summary=summarize(cycles, direction, reset=reset), rows=tuple(judged),
                 kept=tuple(_kept(row) for row in judged if row.record["status"] == "keep"),
                 gain_ci_pct=gain_ci, gain_ci_level=level, final=final,
                 duration_s=sum(float(c.get("duration_s") or 0.0) for c in cycles),
                 runs=sum(verifier_runs(r) for r in records),
                 not_sandboxed=tuple(not_sandboxed(records)),
                 digits=digits_for(run_values(records)),
                 paired=any(isinstance((c.get("stats") or {}).get("pooled"), dict) for c in cycles),
                 aborted=None if cycles else next(
                     (str(r.get("reason") or "stopped before its baseline") for r in reversed(records)
                      if r.get("t") == "abort" and r.get("cycle") == 0), None))


def gain_text(f: Facts) -> str:
    """The headline gain: re-measured with its interval when the run has one (`-25.77% (95% CI
    -31.2% … -20.4%), re-measured`), else baseline → best; `none confirmed` when the end-of-run
    check refuted it (f.refuted says how)."""
    if f.refuted is not None:
        return "none confirmed"
    g = signed_pct(f.headline_gain_pct)
    if f.gain_ci_pct is not None:
        g += f" ({pct_interval(f.gain_ci_pct, f.gain_ci_level)})"
    if f.remeasured_pct is not None:
        g += ", re-measured" + (" (deterministic)" if f.final and f.final.get("deterministic") else "")
    return g


def in_cycle(c: Mapping[str, Any], best_before: float | None) -> tuple[float | None, float | None]:
    """(the value a cycle was judged against, its change in %): the incumbent re-measured in
    the same batch for a paired cycle, else the best before the cycle."""
    p = pooled(c)
    if p is not None and p.get("median_a") is not None:
        return p.get("median_a"), stated_pct(c)
    if c.get("status") == "baseline":
        return None, None
    # the change the verdict states (wording.stated_pct); an old record without one: computed
    return best_before, stated_pct(c) if "delta_pct" in c else pct(best_before, c.get("metric"))


def rows(cycles: Sequence[Mapping[str, Any]]) -> list[Row]:
    out: list[Row] = []
    best: float | None = None
    for c in cycles:
        out.append(Row(c, *in_cycle(c, best)))
        best = c["best"] if c.get("best") is not None else best
    return out


def markdown(f: Facts, *, extra_rows: Sequence[tuple[str, str]] = ()) -> str:
    """The run as Markdown: a facts table and the kept changes (step summary, PR body)."""
    s, num = f.summary, f.fmt
    out = [f"### autoloop run `{f.tag}`", ""]
    if f.goal:
        out += [f"**Goal:** {f.goal}", ""]
    for note in f.not_sandboxed:
        out += [f"**Warning:** {note}", ""]
    if f.aborted:
        out += [f"**No cycle was measured:** the baseline was aborted ({_cell(f.aborted)}).", ""]
    best = f"{f.direction}, as measured against its incumbent" if f.paired else f.direction
    table = [("baseline", f"{f.metric} = {num(s.baseline)}"),
             ("best", f"{f.metric} = {num(s.best)} ({best})"),
             ("gain", gain_text(f)),
             *([("did not hold", f.refuted + (f"; {f.undone}" if f.undone else ""))] if f.refuted else []),
             ("cycles", f"{s.cycles} after the baseline; "
              + (", ".join(f"{k} {v}" for k, v in s.by_status.items()) or "none")),
             ("kept changes", f"{s.kept}"
              + (f" (keep rate {share(s.keep_rate)})" if s.keep_rate is not None else "")),
             ("cost", usd(s.cost_usd) + (f", {count(s.tokens)} tokens" if s.tokens else "")
              + (f", {usd(f.cost_per_pct)} per 1% gain" if f.cost_per_pct else "")),
             *extra_rows]
    out += ["| | |", "| --- | --- |"] + [f"| {k} | {_cell(v)} |" for k, v in table]
    if f.kept:
        out += ["", f"**Kept changes** ({len(f.kept)})", "",
                "| cycle | commit | " + f.metric + " | change | hypothesis |", "| ---: | --- | ---: | ---: | --- |"]
        for k in f.kept[-MAX_KEPT:]:
            ch = signed_pct(k.change_pct)
            if k.ci_pct is not None and k.ci_level != 0:   # one pair's "interval" covers nothing
                lead = "" if k.ci_level is None else f"{share(k.ci_level)} CI "
                ch += f" [{lead}{signed_pct(k.ci_pct[0])} … {signed_pct(k.ci_pct[1])}]"
            who = " (you)" if k.decided_by == "human" else ""
            out.append(f"| {k.cycle} | `{k.commit[:10]}` | {num(k.metric)} | {ch} | {_cell(k.hypothesis)}{who} |")
        if len(f.kept) > MAX_KEPT:
            out.append(f"\n… and {len(f.kept) - MAX_KEPT} earlier kept changes.")
    return "\n".join(out) + "\n"


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")[:300]


def verifier_runs(record: Mapping[str, Any]) -> int:
    """The verifier runs a ledger record stands for: its pairs' and calibration's runs where it
    lists them, else one for a measured metric."""
    stats = record.get("stats")
    stats = stats if isinstance(stats, dict) else {}
    warm = stats.get("warmup")
    n = sum(len(v or []) for v in warm.values()) if isinstance(warm, dict) else len(warm or [])
    n += sum(len(stats.get(k) or []) for k in ("runs", "a", "b") if isinstance(stats.get(k), list))
    return n or (1 if record.get("metric") is not None else 0)


def run_parts_text(record: Mapping[str, Any]) -> str | None:
    """What a verifier run of `record` cost on average, by part, from the ledger's
    stats.run_parts: the timed seconds and the rest. None without a score or inputs. An average,
    not a median: verifier.inputs runs once for both runs of a pair (the second's is 0)."""
    stats = record.get("stats")
    parts = stats.get("run_parts") if isinstance(stats, dict) else None
    runs = [p for p in parts.values() if isinstance(p, dict)] if isinstance(parts, dict) else []
    if not runs:
        return None

    def mean(key: str) -> float:
        return sum(float(p.get(key) or 0.0) for p in runs) / len(runs)

    timed, command, score, inputs = mean("timed"), mean("command"), mean("score"), mean("inputs")
    run = command + score + inputs
    said = [f"the command {seconds(command, fine=True)}"]
    said += [f"drawing the inputs {seconds(inputs, fine=True)}"] if inputs else []
    said += [f"the score {seconds(score, fine=True)}"] if score else []
    ratio = f": {run / timed:.2f}× the timed {seconds(timed, fine=True)}" if timed > 0 else ""
    return (f"a verifier run took {seconds(run, fine=True)} on average over {len(runs)} = "
            f"{' + '.join(said)}{ratio} (the guards run apart, once a cycle)")
