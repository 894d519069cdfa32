"""autoloop's peak memory over a long run: the RSS high-water mark (VmHWM) of the autoloop
process itself — not its git or generator children — after 1,000 cycles, side by side with the
same after 10 cycles (the ratio shows what a long run adds). Target: ≤ 150 MB.

    python benchmarks/peak_memory.py [--files 1000] [--cycles 1000]

Same repository and cycle as cycle_overhead.py (a 1k-file repository, shell built-in children,
half the cycles kept). The process is started through a small wrapper that writes
/proc/self/status at exit; its RSS is also sampled while it runs, to show the curve.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import MEM_WRAPPER, Bench  # noqa: E402




def run(bench: Bench, tag: str, cycles: int, out: Path) -> dict:
    wrapper = bench.root / "memwrap.py"
    wrapper.write_text(MEM_WRAPPER)
    env = dict(bench.env, AUTOLOOP_BENCH_MEM=str(out))
    cmd = [sys.executable, str(wrapper), "run", "program.md", "--tag", tag, "--cycles", str(cycles)]
    proc = subprocess.Popen(cmd, cwd=bench.repo, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    samples: list[tuple[float, int, int]] = []     # (seconds, cycles done, rss bytes)
    ledger = bench.repo / ".autoloop" / tag / "ledger.jsonl"
    t0 = time.monotonic()

    def sample() -> None:
        while proc.poll() is None:
            try:
                with open(f"/proc/{proc.pid}/status") as f:
                    rss = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
                done = ledger.read_bytes().count(b'"t":"cycle"') if ledger.exists() else 0
                samples.append((time.monotonic() - t0, done, rss))
            except (OSError, StopIteration):
                pass
            time.sleep(1.0)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    _, err = proc.communicate()
    th.join()
    if proc.returncode != 0:
        raise SystemExit(f"autoloop failed ({proc.returncode}): {err.decode()[-2000:]}")
    res = json.loads(out.read_text())
    res["samples"] = samples
    res["wall"] = time.monotonic() - t0
    return res


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--cycles", type=int, default=1000)
    ap.add_argument("--target-mb", type=float, default=150.0)
    args = ap.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # progress as it comes, also into a pipe
    mb = 1 << 20
    with tempfile.TemporaryDirectory(prefix="autoloop-mem-") as tmp:
        bench = Bench.create(Path(tmp), args.files)
        short = run(bench, "short", 10, Path(tmp) / "short.json")
        long = run(bench, "long", args.cycles, Path(tmp) / "long.json")
    print(f"repository: {args.files} files; autoloop process only (children excluded)")
    print(f"10 cycles:      peak RSS {short['VmHWM'] / mb:6.1f} MB")
    print(f"{args.cycles} cycles:  peak RSS {long['VmHWM'] / mb:6.1f} MB   (run took {long['wall']:.0f} s)")
    shown = long["samples"][:: max(1, len(long["samples"]) // 8)] + long["samples"][-1:]
    print("RSS while running: " + ", ".join(f"{d} cycles {r / mb:.1f} MB" for _, d, r in shown))
    print(f"RATIO peak({args.cycles}) / peak(10): {long['VmHWM'] / short['VmHWM']:.2f}")
    ok = long["VmHWM"] <= args.target_mb * mb
    print(f"peak {long['VmHWM'] / mb:.1f} MB   target ≤ {args.target_mb:g} MB")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
