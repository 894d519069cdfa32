"""The end-of-run check's share of a short run, and the peak memory of a strict run.

A fresh repository holding examples/quickstart (a deterministic verifier, the offline `tune`
generator) runs one cycle, `--runs` times; reported: the whole run's wall time, the end-of-run
check's own seconds and verifier runs (from its ledger record, or its log folder's runs when the
record has no cost: the time between the last cycle's record and it), its share of the wall time, the RSS high-water mark (VmHWM) of the autoloop
process, and whether numpy/scipy were imported. Targets (issue 16): share <= 25%, peak <= 60 MB.

    python benchmarks/end_check.py [--runs 3]
    PYTHONPATH=/path/to/other/checkout python benchmarks/end_check.py   # the same for another version
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from harness import MEM_WRAPPER  # noqa: E402




def one(tmp: Path) -> dict:
    repo = tmp / "repo"
    shutil.copytree(ROOT / "examples" / "quickstart", repo / "examples" / "quickstart")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(HOME=str(tmp), GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=str(tmp / "gitconfig"),
               AUTOLOOP_BENCH_MEM=str(tmp / "mem.json"))
    (tmp / "gitconfig").write_text("[user]\n\tname = bench\n\temail = bench@example.com\n")
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "start"]):
        subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)
    (tmp / "wrapper.py").write_text(MEM_WRAPPER)
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, str(tmp / "wrapper.py"), "run", "examples/quickstart/program.md",
                          "--tag", "q", "--cycles", "1"], cwd=repo, env=env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if res.returncode != 0:
        raise SystemExit(f"exit {res.returncode}: {res.stderr[-2000:]}")
    ledger = [json.loads(x) for x in (repo / "examples" / "quickstart" / ".autoloop" / "q" / "ledger.jsonl")
              .read_text().splitlines()] if (repo / "examples" / "quickstart" / ".autoloop").exists() else \
        [json.loads(x) for x in next(repo.rglob("ledger.jsonl")).read_text().splitlines()]
    final = next((r for r in ledger if r["t"] == "final"), {})
    runs = final.get("verifier_runs")
    if runs is None and "a" in final:
        runs = len(final["a"]) + len(final["b"])
    seconds = final.get("seconds")
    if seconds is None and "ts" in final:
        # older records carry no cost: from the last cycle's record to the final one (the
        # check is all that happens in between)
        last = max(r["ts"] for r in ledger if r.get("t") == "cycle")
        seconds = final["ts"] - last
    mem = json.loads((tmp / "mem.json").read_text())
    kept = sum(1 for r in ledger if r.get("t") == "cycle" and r.get("status") == "keep")
    return {"wall": wall, "final_s": seconds, "final_runs": runs, "kept": kept,
            "skipped": final.get("skipped"), "peak_mb": mem["VmHWM"] / 2 ** 20, "modules": mem["modules"],
            "text": final.get("text", "")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args(argv)
    out = []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="autoloop-endcheck-") as t:
            out.append(one(Path(t)))
    import autoloop
    print(f"autoloop from {Path(autoloop.__file__).parent}; {args.runs} one-cycle quickstart runs")
    print("| run | wall s | end-of-run check s | its verifier runs | share | peak RSS MB | numpy/scipy loaded | kept |")
    print("|---|---|---|---|---|---|---|---|")
    for i, o in enumerate(out, 1):
        share = f"{o['final_s'] / o['wall'] * 100:.0f}%" if o["final_s"] is not None else "-"
        fs = f"{o['final_s']:.2f}" if o["final_s"] is not None else "-"
        print(f"| {i} | {o['wall']:.2f} | {fs} | {o['final_runs']} | {share} | {o['peak_mb']:.1f} "
              f"| {', '.join(o['modules']) or 'no'} | {o['kept']} |")
    walls = [o["wall"] for o in out]
    print(f"median wall {statistics.median(walls):.2f} s; last end-of-run line: {out[-1]['text']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
