"""textkit: a few small text utilities, with bugs. The file autoloop's generator may edit.

The test suite in tests/ says what each function should do; several of those tests fail
today. The loop's verifier counts the passing ones.
"""

from __future__ import annotations

import re


def slugify(text: str) -> str:
    """Lower-case words joined by single hyphens: "Hello, World!" -> "hello-world"."""
    words = re.split(r"\W+", text.lower())
    return "-".join(words)


def parse_duration(text: str) -> int:
    """Seconds in a duration like "1h30m", "45s", "2h", "1h 5m 10s"; ValueError if malformed."""
    units = {"h": 3600, "m": 60, "s": 1}
    total = 0
    for number, unit in re.findall(r"(\d+)\s*([hms])", text):
        total += int(number) * units[unit]
    return total


def to_roman(n: int) -> str:
    """Roman numeral for 1 <= n <= 3999; ValueError outside that range."""
    table = [(1000, "M"), (500, "D"), (100, "C"), (50, "L"), (10, "X"), (5, "V"), (1, "I")]
    out = []
    for value, letters in table:
        while n >= value:
            out.append(letters)
            n -= value
    return "".join(out)


def chunks(items: list, size: int) -> list[list]:
    """Consecutive pieces of `size` items; the last may be shorter. ValueError if size < 1."""
    return [items[i:i + size] for i in range(0, len(items) - size, size)]


def wrap(text: str, width: int) -> list[str]:
    """Greedy word wrap: lines of at most `width` characters (a longer word gets its own line)."""
    lines: list[str] = []
    current = ""
    for word in text.split():
        if len(current) + len(word) < width:
            current = f"{current} {word}" if current else word
        else:
            lines.append(current)
            current = word
    if current:
        lines.append(current)
    return lines


def title_case(text: str, minor: frozenset[str] = frozenset({"a", "an", "the", "of", "and", "in"})) -> str:
    """Capitalize each word except minor words, but always capitalize the first word."""
    return " ".join(word if word in minor else word.capitalize() for word in text.split())
