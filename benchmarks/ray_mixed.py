"""The paired rule on a mixed two-node Ray cluster (one node 1.3x slower) against local lanes on
one machine, side by side: same verifier (1% Gaussian noise), same candidates.

    python benchmarks/ray_mixed.py [--cycles 30] [--workers 2] [--noise 0.01]

The cluster is started here on this machine (tests/ray_cluster.py: `ray start` subprocesses,
each node with its own temp folder; only its own processes are stopped). The generator
alternates: every third cycle is a real 5% gain (val.txt times 0.95), the others no-ops
(notes.txt changes). Reported per setup, from the ledger: no-op keeps, gains kept, estimates
against the truth (0% / -5%), verifier runs per keep, the end-of-run interval's width and the
wall time per verifier run (Ray's cost per measurement over local lanes).
Targets (issue 27): 0 no-op keeps in >= 30 decisions, a real gain kept >= 9 in 10, every
estimate within 2 points, runs per keep <= 12, the interval no wider than 1.5x one node's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.ray_cluster import Cluster  # noqa: E402

PROGRAM = """\
---
goal: Lower the score
allowed: [val.txt, notes.txt]
verifier:
  command: {py} score.py
  metric: score
  direction: minimize
  timeout: 60
generator:
  kind: command
  command: {py} gen.py
  timeout: 60
accept:
  rule: paired
{parallel}
---
Lower the score.
"""
SCORE = """\
import os, random
v = float(open("val.txt").read())
speed = float(os.environ.get("NODE_SPEED", "1"))
print(f"score: {{v * speed * (1 + random.gauss(0, {noise})):.6f}}")
"""
# every third cycle a real 5% gain, the others a no-op
GEN = """\
import os
n = int(os.environ["AUTOLOOP_CYCLE"])
if n % 3 == 0:
    v = float(open("val.txt").read())
    open("val.txt", "w").write(f"{v * 0.95:.6f}\\n")
else:
    open("notes.txt", "w").write(f"no-op {n}\\n")
"""


def project(base: Path, parallel: str, noise: float) -> Path:
    repo = base / "repo"
    repo.mkdir(parents=True)
    files = {"program.md": PROGRAM.format(py=sys.executable, parallel=parallel),
             "score.py": SCORE.format(noise=noise), "gen.py": GEN, "val.txt": "100\n", "notes.txt": "\n"}
    for name, text in files.items():
        (repo / name).write_text(text)
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@x", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@x"}
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "start"]):
        subprocess.run(["git", *args], cwd=repo, env=env, check=True)
    return repo


def measure(repo: Path, cycles: int) -> dict:
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "autoloop", "run", "program.md", "--tag", "b", "--cycles",
                          str(cycles)], cwd=repo, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if res.returncode != 0:
        raise SystemExit(f"run failed ({res.returncode}): {res.stderr[-2000:]}")
    recs = [json.loads(x) for x in (repo / ".autoloop" / "b" / "ledger.jsonl").read_text().splitlines()]
    cycles_ = [r for r in recs if r["t"] == "cycle" and r["cycle"] > 0]
    final = next((r for r in recs if r["t"] == "final"), {})
    noops = [r for r in cycles_ if r["cycle"] % 3 != 0]
    gains = [r for r in cycles_ if r["cycle"] % 3 == 0]

    def kept(r: dict) -> bool:   # a keep beaten by a better keep of its round is a keep verdict
        return r["status"] == "keep" or "beaten" in (r.get("result") or "")

    errors = [abs(r["delta_pct"] - (0.0 if r["cycle"] % 3 else -5.0)) for r in cycles_ if r.get("delta_pct") is not None]
    runs = sum((r.get("stats") or {}).get("verifier_runs") or 0 for r in cycles_)
    keeps = sum(kept(r) for r in gains) + sum(kept(r) for r in noops)
    ci = final.get("change_ci_pct") or [float("nan")] * 2
    return {"decisions": len(cycles_), "noop_keeps": f"{sum(kept(r) for r in noops)}/{len(noops)}",
            "gain_keeps": f"{sum(kept(r) for r in gains)}/{len(gains)}",
            "max_estimate_error_pts": round(max(errors), 2) if errors else None,
            "median_estimate_error_pts": round(statistics.median(errors), 2) if errors else None,
            "runs_per_keep": round(runs / keeps, 1) if keeps else None,
            "final_change_pct": final.get("change_pct"), "final_ci_width_pts": round(ci[1] - ci[0], 2),
            "wall_s": round(wall, 1), "wall_s_per_verifier_run": round(wall / max(1, runs), 3),
            "nodes": sorted({(r.get("node") or {}).get("ray_node", "local")[:8] for r in cycles_})}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cycles", type=int, default=30)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--noise", type=float, default=0.01)
    a = ap.parse_args()
    out: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="ray-mixed-") as tmp:
        base = Path(tmp)
        local = project(base / "local", f"parallel: {{workers: {a.workers}}}", a.noise)
        out["local lanes, one machine"] = measure(local, a.cycles)
        cluster = Cluster.start([{"NODE_SPEED": "1.0"}, {"NODE_SPEED": "1.3"}])
        try:
            ray = project(base / "ray", f"parallel: {{workers: {a.workers}, executor: ray, address: "
                                        f"'{cluster.address}'}}", a.noise)
            out["Ray, two nodes (one 1.3x slower)"] = measure(ray, a.cycles)
        finally:
            cluster.stop()
    keys = list(next(iter(out.values())))
    width = max(len(k) for k in keys)
    print(" " * width, *(f"{name:>34}" for name in out))
    for k in keys:
        print(f"{k:<{width}}", *(f"{str(v[k]):>34}" for v in out.values()))


if __name__ == "__main__":
    main()
