"""The end of a run: the best re-measured against the start (or that check reused, or skipped
for want of time), and the way back from a best it does not confirm: the branch returns to the
last commit a check confirmed, the refuted commits kept under the tag's own ref, the plan in
the ledger before the branch moves (contract §11)."""

from __future__ import annotations

import time
from typing import Any, Protocol

from autoloop.decide.end import confirmed, final_estimate, final_text, refuted_text
from autoloop.engine.steps.verify import checked
from autoloop.isolation.hardening import Tampered
from autoloop.isolation.measured_files import verifier_fingerprint
from autoloop.journal.facts import overruled_keep
from autoloop.journal.ledger import Record
from autoloop.engine.cycle import RunState
from autoloop.git.workspace import Workspace
from autoloop.journal.ledger import Journal
from autoloop.program.reader import Program


class Run(Protocol):
    """What the end of a run needs of autoloop.engine.loop.Run."""
    program: Program
    journal: Journal
    state: RunState
    ws: Workspace
    opt: Any      # RunOptions: report(event, data), time_left()

    def env(self, cycle: int) -> dict[str, str]: ...

    def per_run_s(self) -> float | None: ...


def final_estimate_s(run: Run) -> float | None:
    """The end-of-run check's most seconds: its runs at the baseline's time a run (guards
    included, so on the safe side); None: nothing to go by."""
    per_run = run.per_run_s()
    if per_run is None:
        return None
    return per_run * final_estimate(run.program, run.journal.cycles())["runs"] + 1.0  # + checkout and proof


def final_check(run: Run) -> dict[str, Any] | None:
    """Best against the start, re-measured in one interleaved batch, unless the run's time
    budget would not hold it."""
    state, cycles = run.state, run.journal.cycles()
    start = next((c.get("commit") for c in cycles if c["status"] == "baseline"), None)
    if start is None:
        return None
    left, need = run.opt.time_left(), final_estimate_s(run)
    check = _check_fingerprint(run)
    prior = reusable_final(run.journal.finals(), start, state.incumbent, check)
    rec: dict[str, Any]
    if prior is not None:
        # a resume that kept nothing: the same best against the same start with the same
        # verifier was re-measured already; measuring it again would only cost time
        rec = reused_final(prior)
        # no "[0 verifier runs, 0.0 s]": the line says it was not measured again
        shown = {k: v for k, v in rec.items() if k != "verifier_runs"}
        rec["text"] = (f"end-of-run check: reused from {rec['reused_from']['when']}: "
                       f"{final_text(shown, run.program.verifier.label)}")
    elif left is not None and need is not None and need > left and \
            run.program.accept.final_pairs > 0 and start != state.incumbent:
        rec = {
            "start": start, "best": state.incumbent,
            "skipped": (f"skipped — about {need:.0f}s of re-measurement would not fit in the "
                        f"{left:.0f}s left of --max-minutes"), "estimate_s": round(need, 1)}
    else:
        log_dir = state.log_dir(0, f"final-{int(time.time() * 1000)}")
        # announced only when it measures (end_of_run skips it with nothing kept or
        # final_pairs 0, and the final line says so)
        announce = lambda: run.opt.report("phase", {"cycle": cycles[-1]["cycle"], "phase": "final check"})  # noqa: E731
        try:
            rec = checked(state, lambda: state.judge.final(start, state.incumbent, log_dir, run.env(0), cycles,
                                                           announce))
        except Tampered as exc:
            # nothing is kept or undone at this point; the re-measurement just does not count
            rec = {"start": start, "best": state.incumbent, "skipped": f"not trustworthy: {exc}"[:300]}
        state.redact_logs(log_dir)
        rec["check"] = check
    if "text" not in rec:
        rec["text"] = final_text(rec, run.program.verifier.label)
    # a branch head a person kept against the ratchet (approve mode) is theirs: said, not undone
    if confirmed(rec) is False and rec.get("best") not in (None, start) and rec.get("best") == state.incumbent \
            and not any(overruled_keep(c) for c in cycles):
        # write-ahead: the plan is in the ledger before the branch moves (_attach finishes it)
        rec["undo"] = _undo_plan(run, cycles, start, state.incumbent, rec)
        rec["text"] += f"; {rec['undo']['text']}"
    rec = run.journal.append({"t": "final", "after_cycle": cycles[-1]["cycle"], **rec})
    if rec.get("undo"):
        undo(run, rec["undo"])
    run.journal.render(run.program.goal)
    run.opt.report("final", rec)
    return rec


def _undo_plan(run: Run, cycles: list[Record], start: str, tip: str, rec: dict[str, Any]) -> dict[str, Any]:
    """The way back from a best the end-of-run check did not confirm: the branch returns to the
    last commit a check confirmed (else the start) and the refuted ones stay reachable under
    the tag's own ref. The keeps it names are those since that commit (or an earlier undo)."""
    keeps = {c.get("commit"): c for c in cycles if c["status"] == "keep"}
    back_to, best, since = start, run.state.baseline, 0
    for f in reversed(run.journal.finals()):
        if confirmed(f) and f.get("best") in keeps and f.get("best") != tip:
            back_to, best, since = f["best"], keeps[f["best"]].get("metric"), keeps[f["best"]]["cycle"]
            break
    since = max([since, *(f.get("after_cycle", 0) for f in run.journal.finals() if f.get("undo"))])
    refuted = [c["cycle"] for c in keeps.values() if c["cycle"] > since]
    ref = run.ws.refuted_ref(cycles[-1]["cycle"])
    where = "the starting commit" if back_to == start else f"cycle {since}'s keep, which a check confirmed"
    said = refuted_text(rec, refuted, run.program.verifier.label)
    back = f"branch {run.ws.branch} is back at {back_to[:12]} ({where}); the refuted commits stay at {ref}"
    return {"from": tip, "to": back_to, "best": best, "cycles": refuted, "ref": ref, "said": said,
            "back": back, "text": f"{said}; {back}"}


def undo(run: Run, plan: dict[str, Any]) -> None:
    """Carry out an undo plan (again after a crash: each part is done only if still to do)."""
    run.ws.pin(plan["ref"], plan["from"])
    if run.ws.branch_head() == plan["from"]:
        run.ws.advance(plan["to"], plan["from"], "autoloop: the end-of-run check did not confirm the best")
    run.state.incumbent, run.state.best = plan["to"], plan["best"]


def _check_fingerprint(run: Run) -> dict[str, Any]:
    p = run.program
    hold = p.holdout
    return {"verifier": verifier_fingerprint(p), "final_pairs": p.accept.final_pairs,
            "holdout": None if hold is None else {"command": hold.command, "metric": hold.metric,
                                                  "pattern": hold.pattern, "direction": hold.direction}}


def reusable_final(finals: list[Record], start: str, best: str, check: dict[str, Any]) -> Record | None:
    """The latest end-of-run check of `best` against `start` under the same `check` settings."""
    for r in reversed(finals):
        if r.get("start") == start and r.get("best") == best and r.get("check") == check \
                and not r.get("skipped") and not r.get("error") and r.get("change_pct") is not None:
            return r
    return None


def reused_final(prior: Record) -> dict[str, Any]:
    rec = {k: v for k, v in prior.items()
           if k not in ("t", "ts", "after_cycle", "text", "reused_from", "verifier_runs", "seconds")}
    ts = prior.get("ts")
    when = (time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts)) if isinstance(ts, (int, float))
            else "an earlier invocation")
    rec["reused_from"] = {"ts": ts, "when": f"{when} (after cycle {prior.get('after_cycle')})",
                          "after_cycle": prior.get("after_cycle"), "verifier_runs": prior.get("verifier_runs"),
                          "seconds": prior.get("seconds")}
    rec["verifier_runs"] = 0
    return rec

