"""What textkit should do. Not editable by the loop: the verifier counts these tests."""

from __future__ import annotations

import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import textkit  # noqa: E402


class Slugify(unittest.TestCase):
    def test_words(self) -> None:
        self.assertEqual(textkit.slugify("Ratchet loops on git"), "ratchet-loops-on-git")

    def test_punctuation_at_the_ends(self) -> None:
        self.assertEqual(textkit.slugify("Hello, World!"), "hello-world")

    def test_empty(self) -> None:
        self.assertEqual(textkit.slugify("  ?! "), "")


class ParseDuration(unittest.TestCase):
    def test_combined(self) -> None:
        self.assertEqual(textkit.parse_duration("1h30m"), 5400)

    def test_spaces(self) -> None:
        self.assertEqual(textkit.parse_duration("1h 5m 10s"), 3910)

    def test_malformed(self) -> None:
        for bad in ("", "ten minutes", "5x", "1h30"):
            with self.subTest(bad=bad), self.assertRaises(ValueError):
                textkit.parse_duration(bad)


class ToRoman(unittest.TestCase):
    def test_additive(self) -> None:
        self.assertEqual([textkit.to_roman(n) for n in (1, 3, 8, 1666, 2023)],
                         ["I", "III", "VIII", "MDCLXVI", "MMXXIII"])

    def test_subtractive(self) -> None:
        self.assertEqual([textkit.to_roman(n) for n in (4, 9, 40, 90, 400, 900, 1994)],
                         ["IV", "IX", "XL", "XC", "CD", "CM", "MCMXCIV"])

    def test_out_of_range(self) -> None:
        for bad in (0, -3, 4000):
            with self.subTest(n=bad), self.assertRaises(ValueError):
                textkit.to_roman(bad)


class Chunks(unittest.TestCase):
    def test_even(self) -> None:
        self.assertEqual(textkit.chunks([1, 2, 3, 4], 2), [[1, 2], [3, 4]])

    def test_remainder(self) -> None:
        self.assertEqual(textkit.chunks([1, 2, 3, 4, 5], 2), [[1, 2], [3, 4], [5]])

    def test_bad_size(self) -> None:
        with self.assertRaises(ValueError):
            textkit.chunks([1, 2], 0)


class Wrap(unittest.TestCase):
    def test_fits_exactly(self) -> None:
        self.assertEqual(textkit.wrap("aaa bbb ccc", 7), ["aaa bbb", "ccc"])

    def test_first_word_fills_the_line(self) -> None:
        self.assertEqual(textkit.wrap("hello world", 5), ["hello", "world"])

    def test_long_word(self) -> None:
        self.assertEqual(textkit.wrap("a extraordinarily b", 5), ["a", "extraordinarily", "b"])

    def test_empty(self) -> None:
        self.assertEqual(textkit.wrap("   ", 10), [])


class TitleCase(unittest.TestCase):
    def test_minor_words(self) -> None:
        self.assertEqual(textkit.title_case("war and peace"), "War and Peace")

    def test_first_word_always(self) -> None:
        self.assertEqual(textkit.title_case("the lord of the rings"), "The Lord of the Rings")


if __name__ == "__main__":
    unittest.main()
