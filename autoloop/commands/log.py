"""`autoloop log` and `autoloop report`: the commands that read a run's ledger (part of the CLI:
they print)."""

from __future__ import annotations

import argparse
import shutil
import sys
from typing import Any

from autoloop.errors import UsageError

PIPE_WIDTH = 120          # a `| less` reader still sees whole words
MIN_WIDTH = 60
P_DIGITS = 3


def main(args: argparse.Namespace) -> int:
    from autoloop.base.numbers import count, pct_interval, share, sig, signed_pct, usd
    from autoloop.commands.ci import facts_of
    from autoloop.journal.facts import gain_text
    from autoloop.journal.ledger import CycleRecord

    program, tag, journal = open_run(args)
    name = program.verifier.label
    f = facts_of(program, tag, journal.records)
    fmt, s = f.fmt, f.summary
    width = None if args.wide else _columns()
    print(f"run autoloop/{tag} — {program.goal}")
    for note in f.not_sandboxed:
        print(f"WARNING: {note}")
    if not f.rows:
        # an aborted baseline leaves no cycle record, only why: say so instead of an empty table
        why = f"the baseline was aborted ({f.aborted})" if f.aborted else ""
        print("no cycle was measured: " + (why or "the run stopped before its baseline"))
        print(f"fix what stopped it (`autoloop verify {args.program}` shows the verifier's output), then "
              f"`autoloop run {args.program} --tag {tag}` starts the tag afresh")
        return 1
    views = [CycleRecord.of(row.record) for row in f.rows]
    judged = [c for c in views if c.pooled]
    against = "vs (in cycle)" if judged else "best before"
    # paired, the change is the test's estimate over the pairs, not the one between the medians
    change = "est. change" if judged else "change"
    # wide enough for a change of +100% and more (-99.99%, +123.45%): the hypotheses stay in line
    col = max(len(change), 9)
    head = f"{'cycle':>5}  {'status':<10} {name[:12]:>12} {against:>13} {change:>{col}}  "
    print(head + "hypothesis")
    for c, row in zip(views, f.rows):
        line = (f"{c.cycle:>5}  {c.status:<10} {fmt(c.metric) or '-':>12} "
                f"{fmt(row.vs, '') :>13} {signed_pct(row.change, ''):>{col}}  ")
        print(_cut(line + " ".join(c.hypothesis.split()), width))
        if c.status != "baseline":
            print(_cut(" " * len(head) + "→ " + " ".join(c.lesson.split()), width))
        for key, who in (("blocked", "generator"), ("blocked_verifier", "verifier")):
            refused = row.record.get(key) or {}
            if refused:   # the egress proxy's refusals (autoloop.isolation.egress)
                print(_cut(" " * len(head) + f"⊘ {who} blocked: " + ", ".join(f"{t} ×{n}" for t, n in refused.items()), width))
    if judged:
        print()
        print(f"{'cycle':>5}  {'status':<10} {'change':>9}  {'interval':<27} {'p':>8}  pairs  holdout")
    for c in judged:
        pooled, hold = c.pooled or {}, c.holdout
        # with few pairs the interval is [min, max] and covers less than 95%: say how much, as
        # experiments.md does; one pair has none
        ci_text = "one pair, no CI" if pooled.get("n") == 1 else \
            pct_interval(pooled.get("change_ci_pct"), pooled.get("ci_level")) or "-"
        h = "-" if hold is None else ("overfit?" if hold.get("overfit") else "improved")
        ps = "/".join(sig(b["p"], P_DIGITS) for b in c.batches if "p" in b)
        pairs = "+".join(str(b.get("n", 0)) for b in c.batches)
        print(f"{c.cycle:>5}  {c.status:<10} {signed_pct(pooled.get('change_pct'), '-'):>9}  "
              f"{ci_text:<27} {ps:>8}  {pairs:<5}  {h}")
    print()
    print(f"baseline   {fmt(s.baseline) or '-'}")
    print(f"best       {fmt(s.best) or '-'}" + (" (as measured against its incumbent)" if f.paired else ""))
    print(f"gain       {gain_text(f) if f.headline_gain_pct is not None or f.refuted else '-'}")
    if f.refuted:
        print(f"           {f.refuted}" + (f"; {f.undone}" if f.undone else ""))
    elif f.final is not None and s.gain_pct is not None and signed_pct(s.gain_pct) != signed_pct(f.headline_gain_pct):
        print(f"           (one-cycle medians baseline → best said {signed_pct(s.gain_pct)}; "
              "the re-measured gain is the one to quote)")
    rate = "-" if s.keep_rate is None else f"{share(s.keep_rate)} ({s.kept} of {s.cycles})"
    print(f"keep rate  {rate}")
    print("by status  " + (", ".join(f"{k} {n}" for k, n in s.by_status.items()) or "-"))
    print(f"trend      {s.trend}")
    if views[0].stats.get("warning"):
        print(f"warning    {views[0].stats['warning']}")
    for fin in journal.finals()[-1:]:
        # the run's headline gain, with its interval and cost: never cut. Only the latest: a
        # resumed run's earlier check ("not re-measured: nothing was kept") is no longer true
        text = str(fin.get("text", ""))
        if fin is f.head_final:   # it measured a person's keep: theirs, not the ratchet's best
            text = text.replace("re-measured best vs start",
                                "re-measured the branch head (a person's keep) vs start", 1)
        print(f"final      (after cycle {fin.get('after_cycle')}) {text}")
    if s.cost_usd or s.tokens:
        parts = [usd(s.cost_usd) if s.cost_usd else "no price known"]
        if s.cost_per_keep is not None:
            parts.append(f"{usd(s.cost_per_keep)} per kept change")
        if s.cost_per_unit_gain is not None:
            parts.append(f"{usd(s.cost_per_unit_gain)} per unit of {name} gained")
        if s.tokens:
            parts.append(f"{count(s.tokens)} tokens")
        print("cost       " + ", ".join(parts))
    return 0


def _columns() -> int | None:
    if sys.stdout.isatty():
        return max(MIN_WIDTH, shutil.get_terminal_size((PIPE_WIDTH, 24)).columns)
    return PIPE_WIDTH


def _cut(line: str, width: int | None) -> str:
    return line if width is None or len(line) <= width else line[:width - 1] + "…"


def open_run(args: argparse.Namespace) -> tuple[Any, str, Any]:
    """(program, tag, loaded journal) of the run `--tag` names, else the most recent run of this
    program file: program files in one folder share `.autoloop/`, and another program's run
    would be read under this one's goal and metric name."""
    from autoloop.journal.ledger import Journal, run_of, run_programs
    from autoloop.program.reader import load_program

    program = load_program(args.program)
    state_dir, rel, tag = program.state_dir, program.rel_path, args.tag
    found = sorted((state_dir / ".autoloop").glob("*/ledger.jsonl"))
    if not tag:
        ledgers = sorted(found, key=lambda p: p.stat().st_mtime)
        if not ledgers:
            raise UsageError(f"no autoloop run found in {state_dir} "
                             "(run `autoloop run --tag NAME` first)")
        mine = [led for led in ledgers if run_of(led, rel)]
        if not mine:
            other = sorted(run_programs(ledgers[-1]))[0]
            raise UsageError(f"no run of {rel} in {state_dir}: the latest run there, "
                             f"'{ledgers[-1].parent.name}', was made with {other}: "
                             f"autoloop {args.command} {other}")
        tag = mine[-1].parent.name
    journal = Journal(state_dir, tag)
    if not journal.exists():
        runs = [led.parent.name for led in found if run_of(led, rel)]
        known = f"; its runs: {', '.join(runs)}" if runs else f"; {program.path.name} has no run yet"
        raise UsageError(f"no run '{tag}' next to {program.path.name} (no {journal.ledger}){known}")
    journal.load()
    made_by = run_programs(journal.ledger)
    if made_by and rel not in made_by:
        # its cycles would be shown under this program's goal and metric name: wrong labels
        other = sorted(made_by)[0]
        raise UsageError(f"run '{tag}' was made with {other}, not {rel}: "
                         f"name it, e.g. autoloop {args.command} {other} --tag {tag}")
    return program, tag, journal
