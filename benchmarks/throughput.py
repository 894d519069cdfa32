"""Throughput of parallel rounds: cycles per second with N workers vs 1, on a sleep-bound
verifier (it sleeps, then prints the score), side by side in one run.

    python benchmarks/throughput.py [--workers 4] [--sleep 1.0] [--rounds 10]

Both runs use the real CLI (`python -m autoloop run`) on the same kind of throwaway repository,
with a trivial command generator. Throughput is measured from the ledger: finished cycles
divided by the time from the first cycle's `begin` to the last `cycle` record, so the baseline
(and its noise calibration) is not counted. Target for 4 workers vs 1: at least 3.4x.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

PROGRAM = """\
---
goal: Lower the score in work.txt
allowed: [work.txt]
verifier:
  command: sh verify.sh
  metric: score
  direction: minimize
  timeout: 60
generator:
  kind: command
  command: sh gen.sh
  timeout: 60
accept:
  final_pairs: 0
parallel: {{workers: {workers}}}
---
Lower the score.
"""

# every candidate is better than the incumbent (the score falls with the cycle number)
GEN = 'echo $((100000 - AUTOLOOP_CYCLE)) > work.txt\necho "Hypothesis: score $((100000 - AUTOLOOP_CYCLE))"\n'
VERIFY = 'sleep {sleep}\necho "score: $(cat work.txt)"\n'


def run(tmp: Path, workers: int, cycles: int, sleep: float) -> tuple[int, float]:
    """(cycles finished, seconds they took) for one run."""
    repo = tmp / f"repo-{workers}"
    repo.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "AUTOLOOP_"))}
    env.update(XDG_CACHE_HOME=str(tmp / f"cache-{workers}"), GIT_CONFIG_NOSYSTEM="1",
               GIT_CONFIG_GLOBAL=str(tmp / "gitconfig"), CI="", NO_COLOR="1")
    (tmp / "gitconfig").write_text("[user]\n\tname = bench\n\temail = bench@example.com\n")

    def git(*a: str) -> None:
        subprocess.run(["git", *a], cwd=repo, check=True, capture_output=True, env=env)

    git("init", "-q")
    (repo / "program.md").write_text(PROGRAM.format(workers=workers))
    (repo / "gen.sh").write_text(GEN)
    (repo / "verify.sh").write_text(VERIFY.format(sleep=sleep))
    (repo / "work.txt").write_text("100000\n")
    git("add", "-A")
    git("commit", "-q", "-m", "start")
    res = subprocess.run([sys.executable, "-m", "autoloop", "run", "--tag", "bench", "--cycles", str(cycles)],
                         cwd=repo, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"run with {workers} workers failed ({res.returncode}):\n{res.stderr[-2000:]}")
    records = [json.loads(line) for line in (repo / ".autoloop" / "bench" / "ledger.jsonl").read_text().splitlines()]
    first = min(r["ts"] for r in records if r["t"] == "begin" and r["cycle"] >= 1)
    done = [r for r in records if r["t"] == "cycle" and r["cycle"] >= 1]
    return len(done), max(r["ts"] for r in done) - first


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--sleep", type=float, default=1.0, help="seconds the verifier sleeps")
    ap.add_argument("--rounds", type=int, default=10, help="rounds of the parallel run (= cycles of the single one)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="autoloop-throughput-") as tmp:
        n1, t1 = run(Path(tmp), 1, args.rounds, args.sleep)
        nn, tn = run(Path(tmp), args.workers, args.rounds * args.workers, args.sleep)
    r1, rn = n1 / t1, nn / tn
    print(f"verifier sleeps {args.sleep:g}s; {os.cpu_count()} CPUs")
    print(f"1 worker : {n1:4d} cycles in {t1:6.2f}s = {r1:.3f} cycles/s ({t1 / n1:.3f}s per cycle)")
    print(f"{args.workers} workers: {nn:4d} cycles in {tn:6.2f}s = {rn:.3f} cycles/s ({tn / nn:.3f}s per cycle)")
    print(f"throughput ratio {args.workers} workers vs 1: {rn / r1:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
