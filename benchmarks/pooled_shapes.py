"""The paired rule before and after pooling the incumbent's recent runs, side by side, on the noise
harness of benchmarks/noise_shapes.py (its shapes, tune and judge families, its verifier with the
±2% drift over 300 runs), plus a clock and the drifts a night brings:

    python benchmarks/pooled_shapes.py                  # the targets table, both families
    python benchmarks/pooled_shapes.py --drifts         # false keeps under the drifts, every shape
    python benchmarks/pooled_shapes.py --drifts --drift none,linear+,linear-,step-,step+ \
        --after-only --runs 25 --candidates 40          # ... 1,000 no-ops a cell: the bound with confidence
    python benchmarks/pooled_shapes.py --sides --gains none,step+   # the drift check one- and two-sided

"before" is the rule within one test with the calibration of 16 pairs (what the rule was before
pooling: the same code with no pool); "after" pools (autoloop.decide.pool) with the calibration of
decide.baseline.CALIBRATION_PAIRS. Both run on the same seeds, in process, through the rule's own
code: calibrate_paired, then per candidate cycle.pool_for (the window, the node, the commit) and
judge_paired, the ledger records written as the loop writes them (`ts`, `parent`, `commit`).

The clock: every verifier run takes --run-seconds (2.5, the library of the issue), and between two
cycles the generator takes --gap-seconds (20). The drifts, on top of the shape's noise:
  linear+ / linear-   the level moves 5% an hour (exp(±0.05 t / 1 h)), slower / faster
  step- / step+       in every cycle, at a random run among its first 8, the level steps 10% faster
                      (the side that makes a no-op look like a gain) / slower, and stays there
A false keep is a no-op kept; the rule's bound is alpha (alpha² with confirm).
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from noise_shapes import PROGRAM, SHAPES, Shape, interval  # noqa: E402  the same harness

from autoloop.decide import baseline as cal, cycle, pool as pooling  # noqa: E402
from autoloop.decide.core import Sample, Session  # noqa: E402
from autoloop.program.reader import parse_program  # noqa: E402

DRIFTS = ("none", "linear+", "linear-", "step-", "step+")
BAD_RUNS = pooling.DRIFT_BAD_RUNS


class Machine:
    """noise_shapes.Verifier with a clock and a drift."""

    def __init__(self, shape: Shape, seed: int, drift: str, run_s: float, sine: float = 0.02) -> None:
        self.shape, self.rng, self.n, self.t = shape, random.Random(seed), 0, 0.0
        self.phase = self.rng.uniform(0, 2 * math.pi)
        self.drift, self.run_s, self.level, self.sine = drift, run_s, 1.0, sine
        self.step_at: int | None = None

    def new_cycle(self) -> None:
        if self.drift.startswith("step"):
            self.step_at = self.n + self.rng.randint(1, 8)

    def value(self, level: float) -> float:
        s, r = self.shape, self.rng
        self.n += 1
        self.t += self.run_s
        if self.step_at is not None and self.n == self.step_at:
            self.level *= 0.9 if self.drift == "step-" else 1.1
        z = r.gauss(0, 1) if s.dist == "gauss" else r.gauss(0, 1) / math.sqrt(r.gammavariate(1.5, 1 / 1.5))
        v = level * self.level * (1 + self.sine * math.sin(2 * math.pi * self.n / 300 + self.phase))
        if self.drift.startswith("linear"):
            v *= math.exp((0.05 if self.drift == "linear+" else -0.05) * self.t / 3600.0)
        v *= math.exp(s.cv * z)
        if r.random() < s.burst_rate:
            v *= 1 + s.burst * r.uniform(0.5, 1.5)
        return v


@dataclass
class Tally:
    candidates: int = 0
    kept: int = 0
    runs_keep: list[int] = field(default_factory=list)
    runs_other: list[int] = field(default_factory=list)
    calibration: list[int] = field(default_factory=list)
    drifted: int = 0
    pooled: list[int] = field(default_factory=list)


def program(alpha: float, confirm: bool) -> Any:
    text = PROGRAM.replace("  rule: paired\n", f"  rule: paired\n  alpha: {alpha}\n  confirm: {str(confirm).lower()}\n")
    return parse_program(text, Path("/bench/program.md"), Path("/bench"))


def one_run(shape: Shape, gain: float, candidates: int, seed: int, tally: Tally, *, after: bool,
            drift: str, alpha: float, confirm: bool, run_s: float, gap_s: float, sine: float = 0.02,
            gain_every: int = 1) -> None:
    prog = program(alpha, confirm)
    m = Machine(shape, seed, drift, run_s, sine)

    def runner(a_level: float, b_level: float) -> Any:
        def run(side: str, label: str, with_guards: bool) -> Sample:
            return Sample(side, label, 100.0 * m.value(a_level if side == "A" else b_level), seconds=run_s)
        return run

    base = cal.calibrate_paired(Session(runner(1.0, 1.0)), prog, None if after else 16)
    tally.calibration.append(2 * len(base.stats["a"]))
    history: list[dict[str, Any]] = [{"cycle": 0, "status": "baseline", "commit": "c0", "parent": "c0",
                                      "ts": m.t, "metric": base.metric, "stats": base.stats}]
    level, incumbent = 1.0, "c0"
    for c in range(1, candidates + 1):
        m.t += gap_s
        m.new_cycle()
        real = c % gain_every == 0
        cand = level * (1 - gain) if real else level
        noise, scale = cycle.calibration_noise(history)
        pool = cycle.pool_for(history, incumbent, None, m.t) if after else None
        v = cycle.judge_paired(Session(runner(level, cand)), prog, {}, base.stats.get("step"),
                               scale or base.stats.get("scale"), None, noise, pool)
        commit = f"c{c}" if v.status == "keep" else None
        history.append({"cycle": c, "status": v.status, "commit": commit, "parent": incumbent,
                        "ts": m.t, "stats": v.stats})
        runs = v.stats.get("verifier_runs") or 0
        if not real:                  # a mixed run's no-ops: only the gains are tallied
            if v.status == "keep":
                incumbent = f"c{c}"
            continue
        tally.candidates += 1
        tally.pooled.append(len(pool.values) if pool else 0)
        tally.drifted += any(b.get("drift") for b in v.stats.get("batches") or [])
        if v.status == "keep":
            tally.kept += 1
            tally.runs_keep.append(runs)
            level, incumbent = cand, f"c{c}"
        else:
            tally.runs_other.append(runs)


def q(xs: list[int], p: float) -> str:
    if not xs:
        return "-"
    s = sorted(xs)
    return f"{s[min(len(s) - 1, int(math.ceil(p * len(s))) - 1)]:g}"


def scenario(shape: Shape, kind: str, gain: float, n: int, args: argparse.Namespace, *, drift: str,
             alpha: float, confirm: bool, gain_every: int = 1) -> list[str]:
    cells = []
    variants = [(True, False), (True, True)] if args.sides else \
        [(False, True), (True, True)] if not args.after_only else [(True, True)]
    for after, bad_side in variants:
        # --sides: the drift check on the good side only (as it was) against both sides, both pooled
        pooling.DRIFT_BAD_RUNS = BAD_RUNS if bad_side else 10 ** 9
        t = Tally()
        for r in range(args.runs):
            one_run(shape, gain if kind != "noop" else 0.0, n, args.seed * 1000 + r, t, after=after,
                    drift=drift, alpha=alpha, confirm=confirm, run_s=args.run_seconds, gap_s=args.gap_seconds,
                    sine=args.sine, gain_every=gain_every)
        lo, hi = interval(t.kept, t.candidates)
        rate = f"{t.kept}/{t.candidates} = {t.kept / t.candidates * 100:.2g}% [{lo * 100:.2g}, {hi * 100:.2g}]"
        runs = (f"keep {q(t.runs_keep, 0.5)}" if kind != "noop" else
                f"{q(t.runs_other, 0.5)} (p95 {q(t.runs_other, 0.95)})")
        extra = f"cal {q(t.calibration, 0.5)}"
        if after:
            extra += f", pool {q(t.pooled, 0.5)}, drift {t.drifted}"
        cells.append(f"{rate} | {runs} | {extra}")
    return cells


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=6, help="simulated runs of autoloop per scenario (6)")
    ap.add_argument("--candidates", type=int, default=40, help="candidates per run (40)")
    ap.add_argument("--family", default="tune,judge")
    ap.add_argument("--only", default="", help="only the shapes whose name contains this")
    ap.add_argument("--drifts", action="store_true", help="false keeps under every drift instead of the targets")
    ap.add_argument("--drift", default=",".join(DRIFTS[1:]), help="which drifts with --drifts")
    ap.add_argument("--mixed", type=int, default=0, metavar="K",
                    help="clear gains as every K-th candidate among no-ops (the incumbent has runs to pool)")
    ap.add_argument("--after-only", action="store_true", help="only the rule as it is (no 'before' column)")
    ap.add_argument("--sides", action="store_true",
                    help="columns: the drift check on the good side only, and on both (both pooled)")
    ap.add_argument("--gains", default="", metavar="DRIFTS",
                    help="clear gains (4 run noises, alpha 0.005) under these drifts instead of the targets")
    ap.add_argument("--alpha", type=float, default=0.05, help="alpha of the --drifts no-ops (0.05)")
    ap.add_argument("--run-seconds", type=float, default=2.5)
    ap.add_argument("--gap-seconds", type=float, default=20.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--sine", type=float, default=0.02,
                    help="the harness's own drift: ±this over 300 runs (0.02, as noise_shapes.py)")
    args = ap.parse_args(argv)
    fams = set(args.family.split(","))
    shapes = [s for s in SHAPES if s.family in fams and args.only in s.name]
    print(f"{args.runs} runs x {args.candidates} candidates per scenario, {args.run_seconds:g} s a run, "
          f"{args.gap_seconds:g} s between cycles, the harness's drift ±{args.sine * 100:g}% over 300 runs\n")
    if args.sides:
        print("| family | noise | drift | changes | alpha, confirm | good side: kept | runs | | both sides: kept | runs | |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
    elif args.after_only:
        print("| family | noise | drift | changes | alpha, confirm | kept | runs | |")
        print("|---|---|---|---|---|---|---|---|")
    else:
        print("| family | noise | drift | changes | alpha, confirm | before: kept | runs | | after: kept | runs | |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
    t0 = time.monotonic()

    def row(shape: Shape, kind: str, gain: float, drift: str, alpha: float, confirm: bool,
            every: int = 1) -> None:
        cells = scenario(shape, kind, gain, args.candidates * every, args, drift=drift, alpha=alpha,
                         confirm=confirm, gain_every=every)
        what = "no-op" if kind == "noop" else f"{gain * 100:.3g}% gains ({kind})"
        if every > 1:
            what += f", every {every}th candidate (the rest no-ops)"
        print(f"| {shape.family} | {shape.name} | {drift} | {what} | {alpha:g}{', confirm' if confirm else ''} "
              f"| {' | '.join(cells)} |", flush=True)

    for shape in shapes:
        if args.mixed:
            row(shape, "clear", 4 * shape.cv, "none", 0.05, True, args.mixed)
            row(shape, "clear", 4 * shape.cv, "none", 0.005, False, args.mixed)
            continue
        if args.gains:
            for drift in args.gains.split(","):
                row(shape, "clear", 4 * shape.cv, drift, 0.005, False)
            continue
        if args.drifts:
            for drift in args.drift.split(","):
                row(shape, "noop", 0.0, drift, args.alpha, False)
            continue
        row(shape, "noop", 0.0, "none", 0.005, False)
        row(shape, "noop", 0.0, "none", 0.05, False)
        row(shape, "clear", 4 * shape.cv, "none", 0.05, True)
        row(shape, "clear", 4 * shape.cv, "none", 0.005, False)
        if shape.dist == "gauss" and shape.cv == 0.01 and not shape.burst_rate:
            row(shape, "2%", 0.02, "none", 0.005, False)
    print(f"\n{time.monotonic() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
