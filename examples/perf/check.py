"""The correctness guard of the perf example: slowstats.py must give the reference results.

Exits 0 when every function agrees with the straightforward implementations below on edge
cases and on seeded random inputs; otherwise prints the first disagreement and exits 1.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

sys.dont_write_bytecode = True   # leave nothing behind in the work tree
sys.path.insert(0, str(Path(__file__).resolve().parent))

import workload  # noqa: E402


def ref_word_counts(text: str) -> dict[str, int]:
    words = "".join(ch.lower() if ch.isalpha() or ch == "'" else " " for ch in text).split()
    return dict(Counter(words))


def ref_top_words(text: str, k: int) -> list[tuple[str, int]]:
    return sorted(ref_word_counts(text).items(), key=lambda kv: (-kv[1], kv[0]))[:k]


def ref_pairs_with_sum(numbers: list[int], target: int) -> list[tuple[int, int]]:
    seen: Counter[int] = Counter(numbers)
    pairs = set()
    for a in seen:
        b = target - a
        if b in seen and (a != b or seen[a] > 1):
            pairs.add((min(a, b), max(a, b)))
    return sorted(pairs)


def ref_primes_below(n: int) -> list[int]:
    return [p for p in range(2, n) if all(p % d for d in range(2, int(p ** 0.5) + 1))]


def main() -> int:
    target = workload.load_target()
    texts = ["", "a", "Don't stop -- don't!", "x1y 22 z's ''", "ÉTÉ été naïve x²y ǅa",
             workload.text(400, 3)]
    cases = []
    for t in texts:
        cases.append(("word_counts", (t,), ref_word_counts(t)))
        for k in (0, 1, 3, 50):
            cases.append(("top_words", (t, k), ref_top_words(t, k)))
    for nums, total in (([], 0), ([5], 10), ([5, 5], 10), ([1, 2, 3, 4, 5], 6),
                        (workload.numbers(200, 4), 100), (workload.numbers(50, 5), -20)):
        cases.append(("pairs_with_sum", (nums, total), ref_pairs_with_sum(nums, total)))
    for n in (0, 1, 2, 3, 4, 30, 1000):
        cases.append(("primes_below", (n,), ref_primes_below(n)))
    for name, args, expected in cases:
        got = getattr(target, name)(*args)
        if isinstance(expected, list):
            got = [tuple(x) if isinstance(x, list) else x for x in got]
        if got != expected:
            shown = ", ".join(repr(a)[:40] for a in args)
            print(f"check: {name}({shown}) returned {str(got)[:200]}, expected {str(expected)[:200]}")
            return 1
    print(f"check: {len(cases)} cases agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
