"""What `verifier.measure: wall` and `cpu` cost per measurement over `output`: one verifier
command (`echo 'seconds: 1'`) measured through autoloop.engine.verify.measure, as a run measures it
(sandboxed the way tree_box builds a run's sandbox, or bare with --no-sandbox), the three
settings in alternating batches so that all see the same machine load. Target: ≤ 2 ms over
`output`.

    python benchmarks/measure_cost.py                  # 9 rounds of 20 measurements each
    python benchmarks/measure_cost.py --no-sandbox
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from autoloop.process import proc  # noqa: E402
from autoloop.program.reader import load_program  # noqa: E402
from autoloop.isolation.sandbox import Bwrap, SandboxUnavailable, tree_box  # noqa: E402
from autoloop.engine.verify import measure  # noqa: E402

MODES = ("output", "wall", "cpu")
PROGRAM = """---
goal: bench
allowed: [f.txt]
verifier:
  command: {command}
  metric: seconds
  direction: minimize
---
"""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--per-round", type=int, default=20)
    ap.add_argument("--command", default="echo 'seconds: 1'")
    ap.add_argument("--no-sandbox", action="store_true")
    ap.add_argument("--target-ms", type=float, default=2.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="autoloop-measure-bench-") as tmp:
        root = Path(tmp)
        repo, tree, logs = root / "repo", root / "tree", root / "logs"
        repo.mkdir()
        (repo / "f.txt").write_text("x\n")
        (repo / "program.md").write_text(PROGRAM.format(command=json.dumps(args.command)))
        ident = ["-c", "user.name=b", "-c", "user.email=b@b"]
        for cmd in (["init", "-q"], [*ident, "add", "-A"], [*ident, "commit", "-qm", "i"],
                    ["worktree", "add", "-q", "--detach", str(tree)]):
            subprocess.run(["git", *cmd], cwd=repo, check=True, capture_output=True)
        base = load_program(repo / "program.md")
        programs = {m: dataclasses.replace(base, verifier=dataclasses.replace(base.verifier, measure=m))
                    for m in MODES}
        bwrap = None
        if not args.no_sandbox:
            bwrap = Bwrap(base.sandbox)
            try:
                bwrap.probe()
            except SandboxUnavailable as exc:
                print(f"no sandbox here: {exc} (use --no-sandbox)")
                return 2
        env = dict(os.environ)
        marker = proc.new_marker()
        boxes = {m: None if bwrap is None else tree_box(bwrap, programs[m], tree, (repo / ".git").resolve(),
                                                          root / "scratch")
                 for m in MODES}

        def batch(mode: str) -> float:
            t = time.perf_counter()
            for _ in range(args.per_round):
                m = measure(programs[mode], cwd=tree, env=env, log_dir=logs, marker=marker, box=boxes[mode])
                assert m.metric is not None, m.error
            return (time.perf_counter() - t) / args.per_round * 1000

        for mode in MODES:
            batch(mode)   # warm caches
        per: dict[str, list[float]] = {m: [] for m in MODES}
        load0 = os.getloadavg()
        for r in range(args.rounds):
            order = MODES if r % 2 == 0 else tuple(reversed(MODES))
            for mode in order:
                per[mode].append(batch(mode))
        load1 = os.getloadavg()
    where = "bare" if bwrap is None else "sandboxed"
    print(f"{args.command!r}, {where}, {args.rounds} rounds x {args.per_round} measurements; "
          f"load average {load0[0]:.2f} -> {load1[0]:.2f} on {os.cpu_count()} CPUs")
    base_ms = statistics.median(per["output"])
    for mode in MODES:
        xs = per[mode]
        # the overhead round by round (same load in each round), then its median and spread
        over = sorted(x - o for x, o in zip(xs, per["output"]))
        print(f"  {mode:6s}: median {statistics.median(xs):7.2f} ms per measurement "
              f"(min {min(xs):.2f}, max {max(xs):.2f})"
              + ("" if mode == "output" else
                 f"; over output: median {statistics.median(over):+.2f} ms, rounds {over[0]:+.2f} .. {over[-1]:+.2f}"))
    worst = max(statistics.median(sorted(x - o for x, o in zip(per[m], per["output"]))) for m in ("wall", "cpu"))
    print(f"overhead {'within' if worst <= args.target_ms else 'OVER'} the {args.target_ms:g} ms target "
          f"(output itself: {base_ms:.2f} ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
