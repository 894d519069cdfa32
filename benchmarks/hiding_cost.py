"""What hiding the home's credential places and the host's unix sockets adds to a sandbox's start:
finding the places (autoloop.isolation.hidden.places) and the host's bound sockets (host_sockets)
each time a sandbox is made, and bwrap started through the seccomp wrapper (a shell that opens the
filter, then bwrap loading it) against bwrap alone, in alternating runs so both see the same load.

    python benchmarks/hiding_cost.py               # 30 starts each side
    python benchmarks/hiding_cost.py --starts 100
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from autoloop.isolation import hidden, seccomp  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--starts", type=int, default=30)
    args = ap.parse_args()
    n = 200
    print(f"places():        {timeit.timeit(hidden.places, number=n) / n * 1e3:.2f} ms "
          f"({len(hidden.places())} found in {len(hidden.homes())} home(s))")
    print(f"host_sockets():  {timeit.timeit(lambda: hidden.host_sockets(['/tmp', '/run']), number=n) / n * 1e3:.2f} ms")
    exe = shutil.which("bwrap")
    if exe is None or not seccomp.supported():
        print("no bwrap or no filter for this machine: the start is not measured")
        return 0
    base = [exe, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid", "--unshare-net",
            "--", "/bin/true"]

    def start(argv: list[str]) -> float:
        t = time.perf_counter()
        subprocess.run(argv, check=True)
        return time.perf_counter() - t

    plain, sealed = [], []
    for _ in range(args.starts):
        plain.append(start(base))
        sealed.append(start(seccomp.sealed(base)))
    p, s = statistics.median(plain) * 1e3, statistics.median(sealed) * 1e3
    print(f"bwrap start:     {p:.1f} ms alone, {s:.1f} ms with the filter (+{s - p:.1f} ms; medians of {args.starts})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
