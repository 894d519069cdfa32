"""Orchestrator overhead per cycle: autoloop vs a shell script doing the minimal git operations of
this tool's cycle (detect the change, commit the candidate, check it out in a second worktree for
verification, advance or reset the branch), side by side in one run; a script without any
isolation is shown for reference (see harness.py for exactly what each side does).

    python benchmarks/cycle_overhead.py                       # 1k files, target ≤ 1.5×
    python benchmarks/cycle_overhead.py --files 100000        # 100k files, target ≤ 2× and < 2 s

Rounds alternate (autoloop K cycles, then the baseline K cycles) so that both sides see the same
machine load; the ratio is taken per round and the median is reported with its spread.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import Bench, interleaved, summary  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--cycles", type=int, default=0, help="cycles per round (default: 41, or 11 at ≥ 50k files)")
    ap.add_argument("--target", type=float, default=0.0, help="ratio target (default: 1.5, or 2 at ≥ 50k files)")
    ap.add_argument("--max-seconds", type=float, default=2.0, help="per-cycle limit checked at ≥ 50k files")
    ap.add_argument("--children", default="sh", choices=["sh", "python"],
                    help="generator and verifier as shell built-ins (default) or Python scripts")
    ap.add_argument("--before", metavar="DIR",
                    help="also time another autoloop source tree (a folder holding its autoloop/ "
                         "package, e.g. from `git archive OLD autoloop | tar -x -C DIR`), side by side")
    args = ap.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # progress as it comes, also into a pipe
    large = args.files >= 50_000
    cycles = args.cycles or (11 if large else 41)
    target = args.target or (2.0 if large else 1.5)
    with tempfile.TemporaryDirectory(prefix="autoloop-bench-") as tmp:
        t = time.perf_counter()
        bench = Bench.create(Path(tmp), args.files, children=args.children)
        print(f"repository: {args.files} files (+5) in {args.files // 100} folders; made in "
              f"{time.perf_counter() - t:.1f} s; children: {args.children}")
        print(f"{args.rounds} rounds of {cycles} cycles each side (autoloop: {cycles - 1} timed intervals per round)")
        res = interleaved(bench, args.rounds, cycles, before=args.before,
                          report=lambda line: print(line, flush=True))
        return _summarize(res["rows"], args, large, target)  # before the (slow) clean-up


def _summarize(rows: list[dict], args: argparse.Namespace, large: bool, target: float) -> int:
    ratio = [r["ratio"] for r in rows]
    a = [r["autoloop"] * 1000 for r in rows]
    b = [r["baseline"] * 1000 for r in rows]
    i = [r["inplace"] * 1000 for r in rows]
    print()
    print(f"autoloop per cycle:           {summary(a)} ms   (median [min – max] over rounds)")
    print(f"baseline per cycle:           {summary(b)} ms   (minimal git operations of the cycle)")
    print(f"in-place script per cycle:    {summary(i)} ms   (no isolation; reference only)")
    print(f"ratio autoloop / in-place script:  {summary([r['ratio_inplace'] for r in rows])}")
    if args.before:
        print(f"before ({args.before}) per cycle: {summary([r['before'] * 1000 for r in rows])} ms;"
              f"  speed-up before / now: {summary([r['speedup'] for r in rows])}")
        print(f"CPU time (user + system, autoloop and its children, whole invocations) before / now: "
              f"{summary([r['cpu_speedup'] for r in rows])}")
    print(f"RATIO autoloop / baseline:   {summary(ratio)}   target ≤ {target:g}×")
    ok = statistics.median(ratio) <= target
    if large:
        ok = ok and statistics.median(a) < args.max_seconds * 1000
        print(f"per-cycle time {statistics.median(a) / 1000:.2f} s   target < {args.max_seconds:g} s")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
