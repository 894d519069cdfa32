"""Process tables by hand (/proc parsed as autoloop.process.proc did before issue 17) against psutil,
side by side in one process, with N extra processes running (a tree of N sleepers under one
shell, half of them carrying a marker in their environment, as a verifier's leftovers would).

Three operations, each what autoloop.process.proc does after every command it runs:
  descendants  the whole subtree under one pid (the leftover sweep's victims)
  group        is any live process left in a process group (the grace wait after SIGTERM; the
               psutil side stops at the first live member, as proc does now; the by-hand side
               built the whole table first, as proc did)
  marked       every process whose environment carries AUTOLOOP_RUN_MARKER=<marker>

    python benchmarks/proc_tables.py                  # N = 50, 200, 1000
    python benchmarks/proc_tables.py --n 100 --repeat 50

Each operation is also checked to give the same answer both ways. Rounds alternate the two
sides; the figure is the median per call, in milliseconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from typing import Callable

import psutil

MARKER_VAR = "AUTOLOOP_RUN_MARKER"


# ---- by hand: the code autoloop.process.proc had before it used psutil ----------------------------------

def hand_table() -> dict[int, tuple[int, str, int]]:
    out: dict[int, tuple[int, str, int]] = {}
    with os.scandir("/proc") as entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
                out[int(entry.name)] = (int(fields[1]), fields[0].decode(), int(fields[2]))
            except (OSError, IndexError, ValueError):
                continue
    return out


def hand_descendants(root: int) -> set[int]:
    kids: dict[int, list[int]] = {}
    for p, (ppid, _, _) in hand_table().items():
        kids.setdefault(ppid, []).append(p)
    out, todo = set(), [root]
    while todo:
        p = todo.pop()
        if p not in out:
            out.add(p)
            todo.extend(kids.get(p, ()))
    return out - {root}


def hand_group_alive(pgid: int) -> bool:
    return any(g == pgid and s not in ("Z", "X") for _, s, g in hand_table().values())


def hand_marked(marker: str) -> set[int]:
    needle = f"{MARKER_VAR}={marker}".encode()
    found = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                environ = f.read()
        except OSError:
            continue
        if needle in environ and needle in environ.split(b"\0"):
            found.add(int(name))
    return found


# ---- psutil -------------------------------------------------------------------------------------

def ps_descendants(root: int) -> set[int]:
    return {p.pid for p in psutil.Process(root).children(recursive=True)}


def ps_group_alive(pgid: int) -> bool:
    for p in psutil.process_iter(["status"]):
        try:
            if p.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(p.pid) == pgid:
                return True
        except (ProcessLookupError, psutil.Error):
            continue
    return False


def ps_marked(marker: str) -> set[int]:
    found = set()
    for p in psutil.process_iter():
        try:
            if p.environ().get(MARKER_VAR) == marker:
                found.add(p.pid)
        except psutil.Error:
            continue
    return found


def timed(fn: Callable[[], object], repeat: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000, result


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, nargs="*", default=[50, 200, 1000])
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    print(f"processes on the machine before: {len(psutil.pids())}; median ms per call")
    print(f"{'N':>6} {'operation':<12} {'by hand':>9} {'psutil':>9} {'ratio':>7}  same")
    for n in args.n:
        env = dict(os.environ, **{MARKER_VAR: "bench-marker"})
        # half the tree marked: a shell starting n/2 marked sleepers and n/2 unmarked ones
        script = (f"for i in $(seq {n // 2}); do sleep 60 & done; "
                  f"for i in $(seq {n - n // 2}); do env -u {MARKER_VAR} sleep 60 & done; wait")
        tree = subprocess.Popen(["sh", "-c", script], env=env, start_new_session=True)
        try:
            deadline = time.monotonic() + 30
            while len(ps_descendants(tree.pid)) < n and time.monotonic() < deadline:
                time.sleep(0.05)
            cases = [("descendants", lambda: hand_descendants(tree.pid), lambda: ps_descendants(tree.pid)),
                     ("group", lambda: hand_group_alive(tree.pid), lambda: ps_group_alive(tree.pid)),
                     ("marked", lambda: hand_marked("bench-marker"), lambda: ps_marked("bench-marker"))]
            for name, hand, ps in cases:
                hand_ms, ps_ms = [], []
                for _ in range(3):   # alternate the sides, so both see the same load
                    h, hr = timed(hand, args.repeat)
                    p, pr = timed(ps, args.repeat)
                    hand_ms.append(h)
                    ps_ms.append(p)
                h, p = statistics.median(hand_ms), statistics.median(ps_ms)
                print(f"{n:>6} {name:<12} {h:>9.2f} {p:>9.2f} {p / h:>6.2f}x  {hr == pr}")
        finally:
            os.killpg(tree.pid, 9)
            tree.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
