"""The journal's per-cycle cost: append a cycle record, then render experiments.md and
results.tsv (the loop does both every cycle), for a run of N cycles; milliseconds per cycle at
the start and at the end of the run, so an O(cycles) render shows as a growing number, and
the CPU time of the whole run (the ledger's fsyncs make wall time noisy).

    python benchmarks/journal_render.py [--cycles 2000] [--against DIR]

With `--against DIR` (a checkout of another revision, e.g. made by `git archive REV | tar -x
-C DIR`), the same workload runs on both, each in its own child process, one after the other
in this one invocation, so the ratio is meaningful on a busy machine.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import run_workload  # noqa: E402

WORKLOAD = r"""
import json, random, sys, tempfile, time
from pathlib import Path
from autoloop.journal.ledger import Journal
n = int(sys.argv[1])
rng = random.Random(1)
with tempfile.TemporaryDirectory() as tmp:
    j = Journal(Path(tmp), "bench")
    times = []
    cpu0 = time.process_time()
    for i in range(n):
        t = time.perf_counter()
        j.append({"t": "begin", "cycle": i})
        j.append({"t": "cycle", "cycle": i, "status": rng.choice(["keep", "discard", "crash"]),
                  "metric": rng.random(), "best": 0.5, "commit": "a" * 40, "hypothesis": f"h {i}",
                  "result": "r", "lesson": "l", "changed": ["a.py"], "duration_s": 1.0,
                  "gen": {"cost_usd": 0.01}, "delta_pct": 1.0,
                  "stats": {"rule": "paired", "pooled": {"change_pct": -1.0, "median_a": 0.5},
                            "batches": [{"a": [0.5, 0.51], "b": [0.49, 0.48], "n": 2, "p": 0.04}]}})
        j.render("goal")
        times.append(time.perf_counter() - t)
    k = max(1, n // 10)
    print(json.dumps({"first_ms": sum(times[:k]) / k * 1e3, "last_ms": sum(times[-k:]) / k * 1e3,
                      "total_s": sum(times), "cpu_s": time.process_time() - cpu0}))
"""


def measure(root: Path, cycles: int) -> dict[str, float]:
    return run_workload(WORKLOAD, root, str(cycles))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=2000)
    ap.add_argument("--against", type=Path, help="another checkout to run the same workload on")
    args = ap.parse_args()
    here = Path(__file__).resolve().parent.parent
    runs = [("this checkout", here)] + ([("against", args.against.resolve())] if args.against else [])
    started = time.monotonic()
    for name, root in runs:
        r = measure(root, args.cycles)
        print(f"{name:<14} {args.cycles} cycles: {r['first_ms']:.3f} ms/cycle in the first tenth, "
              f"{r['last_ms']:.3f} ms/cycle in the last, {r['total_s']:.2f} s in all "
              f"({r['cpu_s']:.2f} s of CPU: the part fsync waits do not blur)")
    print(f"({time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
