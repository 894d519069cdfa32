"""Orchestrator time per cycle on a small repository.

A trivial generator (appends a line to an allowed file, alternating keep/discard) and a trivial
verifier (`echo`) make a cycle cost almost nothing but autoloop's own work: prepare, snapshot,
scope checks, git commit or restore, ledger and rendering.

    python benchmarks/cycle_overhead.py [--files 200] [--cycles 30]

Prints the wall time per cycle, and the share of it spent in the generator and verifier processes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GEN = """\
import os
n = int(os.environ["AUTOLOOP_CYCLE"])
with open("work.txt", "a") as f:
    f.write(f"line {n}\\n")
print(f"Hypothesis: append line {n}")
"""

VERIFY = """\
import os
lines = open("work.txt").read().count("\\n")
# even cycles improve, odd ones are worse: half keeps, half discards
n = int(os.environ.get("AUTOLOOP_CYCLE", "0"))
print(f"score: {-lines if n % 2 == 0 else 10**6}")
"""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=200)
    ap.add_argument("--cycles", type=int, default=30)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="autoloop-bench-") as tmp:
        repo = Path(tmp) / "repo"
        repo.mkdir()
        env = dict(os.environ, XDG_CACHE_HOME=str(Path(tmp) / "cache"), GIT_CONFIG_NOSYSTEM="1")

        def git(*a: str) -> None:
            subprocess.run(["git", *a], cwd=repo, check=True, capture_output=True, env=env)

        git("init", "-q")
        git("config", "user.name", "bench")
        git("config", "user.email", "bench@example.com")
        for i in range(args.files):
            d = repo / f"pkg{i % 20}"
            d.mkdir(exist_ok=True)
            (d / f"mod{i}.py").write_text(f"X = {i}\n" * 20)
        (repo / "work.txt").write_text("")
        (repo / "gen.py").write_text(GEN)
        (repo / "verify.py").write_text(VERIFY)
        (repo / "program.md").write_text(
            "---\ngoal: benchmark\nallowed: [work.txt]\n"
            "verifier: {command: python verify.py, metric: score, direction: minimize}\n"
            f"generator: {{kind: command, command: {sys.executable} gen.py}}\n---\n")
        git("add", "-A")
        git("commit", "-qm", "init")
        t0 = time.perf_counter()
        res = subprocess.run([sys.executable, "-m", "autoloop", "run", "program.md", "--tag", "bench",
                              "--cycles", str(args.cycles)], cwd=repo, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if res.returncode != 0:
            print(res.stdout, res.stderr, file=sys.stderr)
            return 1
        ledger = [json.loads(x) for x in (repo / ".autoloop/bench/ledger.jsonl").read_text().splitlines()]
        cycles = [r for r in ledger if r["t"] == "cycle" and r["cycle"] > 0]
        per_cycle = sum(c["duration_s"] for c in cycles) / len(cycles)
        statuses: dict[str, int] = {}
        for c in cycles:
            statuses[c["status"]] = statuses.get(c["status"], 0) + 1
        # the children here are `python gen.py` and `python verify.py`: time them alone
        py = subprocess.run([sys.executable, "-c", "import time,subprocess,sys;"
                             "t=time.perf_counter();[subprocess.run([sys.executable,'-c','pass']) for _ in range(10)];"
                             "print((time.perf_counter()-t)/10)"], capture_output=True, text=True)
        interp = float(py.stdout)
        print(f"files in repo:            {args.files + 4}")
        print(f"cycles:                   {len(cycles)} ({', '.join(f'{k} {v}' for k, v in statuses.items())})")
        print(f"wall time, whole run:     {wall:.2f} s (includes baseline and start-up)")
        print(f"time per cycle:           {per_cycle * 1000:.0f} ms")
        print(f"  of which 2 python starts (generator + verifier): ~{2 * interp * 1000:.0f} ms")
        print(f"  autoloop's own work:    ~{(per_cycle - 2 * interp) * 1000:.0f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
