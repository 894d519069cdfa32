"""Text and number statistics, written the slow way: the file autoloop's generator may edit.

Every function here is correct but needlessly slow (quadratic loops, repeated scans, trial
division by every number). autoloop times produce.py running them on seeded inputs; score.py
and check.py compare their results with reference implementations. Make them fast without changing a single result.
"""

from __future__ import annotations


def word_counts(text: str) -> dict[str, int]:
    """How often each lower-cased word occurs; words are runs of letters and apostrophes."""
    words = []
    current = ""
    for ch in text:
        if ch.isalpha() or ch == "'":
            current = current + ch.lower()
        else:
            if current:
                words.append(current)
            current = ""
    if current:
        words.append(current)
    counts: dict[str, int] = {}
    for word in words:
        if word not in counts:
            counts[word] = words.count(word)
    return counts


def top_words(text: str, k: int) -> list[tuple[str, int]]:
    """The k most frequent words, most frequent first, ties broken alphabetically."""
    counts = word_counts(text)
    items = list(counts.items())
    result = []
    for _ in range(min(k, len(items))):
        best = None
        for item in items:
            if best is None or item[1] > best[1] or (item[1] == best[1] and item[0] < best[0]):
                best = item
        result.append(best)
        items.remove(best)
    return result


def pairs_with_sum(numbers: list[int], target: int) -> list[tuple[int, int]]:
    """Distinct pairs (a, b), a <= b, of values in `numbers` (at different positions) with
    a + b == target, sorted."""
    found = []
    for i in range(len(numbers)):
        for j in range(len(numbers)):
            if i != j and numbers[i] + numbers[j] == target:
                pair = (min(numbers[i], numbers[j]), max(numbers[i], numbers[j]))
                if pair not in found:
                    found.append(pair)
    return sorted(found)


def primes_below(n: int) -> list[int]:
    """All primes p with 2 <= p < n, ascending."""
    primes = []
    for candidate in range(2, n):
        divisors = 0
        for d in range(1, candidate + 1):
            if candidate % d == 0:
                divisors += 1
        if divisors == 2:
            primes.append(candidate)
    return primes
