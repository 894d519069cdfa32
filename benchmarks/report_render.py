"""What `autoloop report` and `autoloop log` cost on a long run: the facts of an N-cycle ledger,
then the HTML report and the Markdown summary rendered from them (every row formats its numbers
at the run's rounding), CPU seconds of each.

    python benchmarks/report_render.py [--cycles 1000] [--against DIR]

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
import inspect, json, random, sys, time
from autoloop.journal.facts import facts, markdown
from autoloop.commands.report import render
n = int(sys.argv[1])
rng = random.Random(1)
recs, best = [{"t": "cycle", "cycle": 0, "status": "baseline", "metric": 100.0, "best": 100.0}], 100.0
for i in range(1, n + 1):
    m = best * (1 + rng.uniform(-0.01, 0.02))
    status = "keep" if m < best else "discard"
    best = m if status == "keep" else best
    recs.append({"t": "cycle", "cycle": i, "status": status, "metric": m, "best": best,
                 "commit": "a" * 40, "hypothesis": f"hypothesis {i}", "lesson": "l", "duration_s": 1.0})
out = {}
t = time.process_time()
f = facts(recs, tag="bench", goal="g", metric="score", direction="minimize")
out["facts_s"] = time.process_time() - t
t = time.process_time()
# the revision before this script took render(records, facts)
render(f, generated="now") if len(inspect.signature(render).parameters) == 2 else render(recs, f, generated="now")
out["report_s"] = time.process_time() - t
t = time.process_time()
markdown(f)
out["markdown_s"] = time.process_time() - t
print(json.dumps(out))
"""


def measure(root: Path, cycles: int) -> dict[str, float]:
    return run_workload(WORKLOAD, root, str(cycles))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=1000)
    ap.add_argument("--against", type=Path, help="another checkout to run the same workload on")
    args = ap.parse_args()
    here = Path(__file__).resolve().parent.parent
    runs = [("this checkout", here)] + ([("against", args.against.resolve())] if args.against else [])
    started = time.monotonic()
    for name, root in runs:
        r = measure(root, args.cycles)
        print(f"{name:<14} {args.cycles} cycles: facts {r['facts_s']:.3f} s, HTML report "
              f"{r['report_s']:.3f} s, Markdown {r['markdown_s']:.3f} s (CPU)")
    print(f"({time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
