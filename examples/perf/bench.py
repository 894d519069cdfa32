"""The verifier of the perf example: times slowstats.py on a fixed workload.

Prints `seconds: X`, the best of REPEATS runs (the minimum is the least noisy estimate of
what the code costs; everything slower is the machine being busy). Correctness is check.py's
job, run as a guard.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.dont_write_bytecode = True   # leave nothing behind in the work tree
sys.path.insert(0, str(Path(__file__).resolve().parent))

import workload  # noqa: E402

REPEATS = 3


def main() -> int:
    target = workload.load_target()
    text = workload.text(4000, seed=11)
    nums = workload.numbers(1200, seed=12)
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter()
        target.word_counts(text)
        target.top_words(text, 10)
        target.pairs_with_sum(nums, 100)
        target.primes_below(2000)
        best = min(best, time.perf_counter() - start)
    print(f"seconds: {best:.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
