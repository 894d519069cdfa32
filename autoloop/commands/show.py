"""`autoloop show N`: one cycle of a run — its hypothesis, verdict, numbers (as `log` writes
them) and lesson — and its change against the incumbent it was generated from, read from the
commit the tag's own ref keeps (autoloop.git.cyclerefs). `--stat` gives a diffstat instead of the
patch; `--json` one object with the same facts, the commit hashes and the diff."""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from typing import Any

from autoloop.errors import AutoloopError, UsageError

LABEL = 12      # the width of the facts' labels


@dataclass
class Shown:
    """What `show` says of one cycle; `error` set when its change should be there and is not."""

    facts: dict[str, Any]
    lines: list[tuple[str, str]] = field(default_factory=list)   # (label, text) for a person
    note: str = ""            # no change to show, and why (the baseline, no change)
    error: str = ""           # the change is missing (exit 1)
    recorded: bool = False    # the ledger names the change's commit (a run that kept every cycle's)


def main(args: argparse.Namespace) -> int:
    from autoloop.commands.log import open_run
    from autoloop.git.cyclerefs import CycleRefs, diff, find_change

    n = cycle_number(args.cycle)
    program, tag, journal = open_run(args)
    shown = describe(program, tag, journal.records, n, CycleRefs(program.repo_root, tag).get(n))
    change = find_change(program.repo_root, shown.facts["commit"])
    if change is not None:
        shown.facts["parent"] = change.parent
        shown.facts["stat"] = diff(program.repo_root, change, stat=True)
        shown.facts["diff"] = None if args.stat else diff(program.repo_root, change)
    elif shown.facts["commit"] is not None:
        shown.error = missing(tag, n, shown.facts["commit"], shown.recorded)
        shown.lines = [(k, v) for k, v in shown.lines if k != "ref"]   # the error says where it went
    if args.json:
        out = {**shown.facts, "note": shown.note or None, "error": shown.error or None}
        # bytes of a file that are not UTF-8 cannot be JSON text: they become U+FFFD there
        for key in ("stat", "diff"):
            if out[key] is not None:
                out[key] = out[key].encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        print(json.dumps(out, indent=2, ensure_ascii=False, default=str))
    else:
        print(f"cycle {n} of run autoloop/{tag}: {shown.facts['status']}")
        for label, text in shown.lines:
            print(f"{label:<{LABEL}}{text}")
        if shown.note:
            print(f"\n{shown.note}")
        elif change is not None:
            # the diff as git wrote it, byte for byte (a file need not be UTF-8)
            sys.stdout.flush()
            text = "\n" + (shown.facts["stat"] if args.stat else shown.facts["diff"])
            sys.stdout.buffer.write(text.encode("utf-8", "surrogateescape"))
            sys.stdout.buffer.flush()
    if shown.error:
        raise AutoloopError(shown.error)
    return 0


def cycle_number(text: str) -> int:
    if not re.fullmatch(r"[0-9]{1,9}", text.strip()):
        raise UsageError(f"autoloop show N: N is a cycle number (0 for the baseline, as `autoloop log` "
                         f"lists them), got {text!r}")
    return int(text)


def describe(program: Any, tag: str, records: list[dict[str, Any]], n: int, ref_at: str | None) -> Shown:
    """Cycle `n`'s facts and lines from the ledger and where its ref points now (`ref_at`), without
    git: UsageError when the run has no such cycle."""
    from autoloop.base.numbers import signed_pct
    from autoloop.commands.ci import facts_of
    from autoloop.git.cyclerefs import cycle_ref
    from autoloop.journal.ledger import CycleRecord

    f = facts_of(program, tag, records)
    row = next((r for r in f.rows if r.record.get("cycle") == n), None)
    if row is None:
        have = [int(r.record.get("cycle", 0)) for r in f.rows]
        which = f"its cycles are {min(have)}–{max(have)}" if have else "it has no measured cycle yet"
        raise UsageError(f"run '{tag}' has no cycle {n}: {which} (autoloop log --tag {tag} lists them)")
    rec, c = row.record, CycleRecord.of(row.record)
    paired = c.pooled is not None
    kept = (c.commit or None) if c.status in ("keep", "baseline") else None
    commit = c.change or None
    ref = cycle_ref(tag, n) if commit is not None and ref_at == commit else None
    facts: dict[str, Any] = {
        "tag": tag, "branch": f"autoloop/{tag}", "cycle": n, "status": c.status,
        "decided_by": rec.get("decided_by") or "ratchet", "hypothesis": c.hypothesis, "lesson": c.lesson,
        "result": c.result, "metric_name": f.metric, "metric": c.metric, "best": c.best,
        "judged_against": row.vs, "change_pct": None if row.change is None else round(row.change, 4),
        "paired": paired, "display": {"metric": f.fmt(c.metric, ""), "best": f.fmt(c.best, ""),
                                      "judged_against": f.fmt(row.vs, ""), "change": signed_pct(row.change, "")},
        "commit": commit, "parent": rec.get("parent"), "ref": ref, "kept_commit": kept,
        "files": list(c.changed), "diffstat": c.diffstat or None, "stat": None, "diff": None,
    }
    out = Shown(facts, recorded=bool(rec.get("change")))
    d = facts["display"]
    against = "vs (in cycle)" if paired else "best before"
    numbers = d["metric"] or "no metric"
    if c.status != "baseline" and d["judged_against"]:
        numbers += f" ({against} {d['judged_against']}" + (f", change {d['change']})" if d["change"] else ")")
    out.lines = [("hypothesis", " ".join(c.hypothesis.split()) or "(none given)"),
                 (f.metric[:LABEL - 2], numbers), ("best", d["best"] or "-"),
                 ("lesson", " ".join(c.lesson.split()))]
    if c.by_human:
        out.lines.insert(1, ("decided by", "you (approve mode)"))
    if c.status == "baseline":
        out.lines.append(("commit", f"{(c.commit or '?')[:12]} (the starting commit)"))
        out.note = "no change: cycle 0 is the baseline, the starting commit measured as it is"
        facts["commit"] = None
        return out
    if commit is not None:
        out.lines.append(("commit", f"{commit[:12]} ({'kept' if c.status == 'keep' else 'reverted'})"))
        out.lines.append(("parent", f"{str(rec.get('parent') or '?')[:12]} (the incumbent it was generated from)"))
        out.lines.append(("ref", ref or (f"{cycle_ref(tag, n)} is gone: the next git gc may lose this commit"
                                         if rec.get("change") else f"none (a kept commit, on branch autoloop/{tag})")))
    elif rec.get("change_note"):
        out.error = f"cycle {n}'s change was not recorded: {rec['change_note']}"
    elif not c.changed:
        out.note = ("no change to show: the cycle left the code as it was" if c.status == "no_change"
                    else "no change to show: the generator changed no file")
    else:
        out.error = (f"cycle {n}'s change was not kept: run '{tag}' was recorded by an autoloop that kept "
                     f"only kept cycles' commits (it changed {', '.join(c.changed[:5])}"
                     + (f"; {c.diffstat}" if c.diffstat else "") + ")")
    return out


def missing(tag: str, n: int, commit: str, had_ref: bool) -> str:
    """Why cycle `n`'s commit is not there, in words."""
    from autoloop.git.cyclerefs import REF_ROOT, cycle_ref

    why = (f"its ref {cycle_ref(tag, n)} is gone: `autoloop clean --branch` "
           f"removes it, and a fresh clone has it only if fetched: git fetch origin "
           f"'{REF_ROOT}/{tag}/*:{REF_ROOT}/{tag}/*'") if had_ref else \
        f"branch autoloop/{tag} no longer holds it"
    return f"cycle {n}'s commit {commit[:12]} is not in this repository: {why}"
