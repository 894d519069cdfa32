"""program.md keys of the honest ratchet: verifier.repeats, accept, limits, holdout — every valid
shape and every refusal with its exact one-line message."""

from __future__ import annotations

from typing import Any, Callable

import pytest

from autoloop.program.reader import AcceptSpec, Amount, HoldoutSpec, LimitSpec, Program, known_keys
from tests.program.test_program import error, parse, prog

# HEAD of tests.program.test_program is lines 1-7 (verifier ends on line 7); extra text starts on line 8.

VALID: list[tuple[str, Callable[[Program], Any], Any]] = [
    ("", lambda p: p.accept, AcceptSpec()),
    ("", lambda p: p.accept.min_effect, Amount(0.0, False)),
    ("", lambda p: (p.limits, p.holdout, p.verifier.repeats), ((), None, 1)),
    ("accept:", lambda p: p.accept, AcceptSpec()),
    ("accept: {rule: strict}", lambda p: p.accept, AcceptSpec()),
    ("accept: {rule: paired}", lambda p: p.accept,
     AcceptSpec(rule="paired", min_effect=Amount(1.0, True), alpha=0.005, pairs=16, confirm=False)),
    ("accept: {rule: paired, confirm: false}", lambda p: p.accept.confirm, False),
    ("accept: {rule: paired, min_effect: 0}", lambda p: p.accept.min_effect, Amount(0.0, False)),
    ("accept: {rule: paired, pairs: 10, alpha: 0.01}", lambda p: (p.accept.pairs, p.accept.alpha),
     (10, 0.01)),
    ("accept: {rule: paired, pairs: 2, alpha: 0.5}", lambda p: p.accept.pairs, 2),
    ("accept: {min_effect: 0.5%}", lambda p: p.accept.min_effect, Amount(0.5, True)),
    ("accept: {min_effect: ' 2 % '}", lambda p: p.accept.min_effect, Amount(2.0, True)),
    ("accept: {min_effect: .25%}", lambda p: p.accept.min_effect, Amount(0.25, True)),
    ("accept: {min_effect: 0.002}", lambda p: p.accept.min_effect, Amount(0.002, False)),
    ("accept: {min_effect: 3}", lambda p: p.accept.min_effect, Amount(3.0, False)),
    ("accept: {warmup: 2, final_pairs: 0}", lambda p: (p.accept.warmup, p.accept.final_pairs), (2, 0)),
    ("accept: {rule: paired, confirm: yes}", lambda p: p.accept.confirm, True),   # YAML 1.1 bool
    ("  repeats: 5", lambda p: p.verifier.repeats, 5),
    ("  repeats: 1\naccept: {rule: paired}", lambda p: p.verifier.repeats, 1),
    ("limits:", lambda p: p.limits, ()),
    ("limits: []", lambda p: p.limits, ()),
    ("limits:\n  - {metric: mem, max_increase: 10%}", lambda p: p.limits,
     (LimitSpec(metric="mem", max_increase=Amount(10.0, True)),)),
    ("limits:\n  - {pattern: 'rss=([0-9]+)', max_increase: 200}", lambda p: p.limits,
     (LimitSpec(pattern="rss=([0-9]+)", max_increase=Amount(200.0, False)),)),
    ("limits:\n  - metric: acc\n    max_decrease: 0.5", lambda p: p.limits[0].max_decrease,
     Amount(0.5, False)),
    ("limits:\n  - {metric: a, max_increase: 1%}\n  - {metric: a, max_decrease: 1%}",
     lambda p: len(p.limits), 2),
    ("holdout: {command: python h.py, metric: h}", lambda p: p.holdout,
     HoldoutSpec(command="python h.py", direction="minimize", metric="h")),
    ("holdout: {command: python h.py, pattern: 'h=(\\S+)', direction: maximize, timeout: 5}",
     lambda p: p.holdout,
     HoldoutSpec(command="python h.py", direction="maximize", pattern="h=(\\S+)", timeout=5.0)),
    ("holdout:", lambda p: p.holdout, None),
]


@pytest.mark.parametrize(("extra", "read", "expected"), VALID)
def test_valid(extra: str, read: Callable[[Program], Any], expected: Any) -> None:
    assert read(parse(prog(extra))) == expected


ERRORS: list[tuple[str, str]] = [
    # accept
    ("accept: paired", "program.md:8: accept: expected a mapping of keys, got 'paired'"),
    ("accept:\n  rule: pared",
     "program.md:9: accept.rule: 'pared' is not one of strict, paired (did you mean 'paired'?)"),
    ("accept:\n  rule: 1", "program.md:9: accept.rule: 1 is not one of strict, paired"),
    ("accept:\n  pair: 6", "program.md:9: unknown key 'accept.pair' (did you mean 'accept.pairs'?)"),
    ("accept:\n  min_efect: 1%",
     "program.md:9: unknown key 'accept.min_efect' (did you mean 'accept.min_effect'?)"),
    ("pairs: 6", "program.md:8: unknown key 'pairs' (did you mean 'accept.pairs'?)"),
    ("accept:\n  min_effect: 1 percent",
     "program.md:9: accept.min_effect: expected a number >= 0 (metric units) or a percentage "
     "such as '1%', got '1 percent'"),
    ("accept:\n  min_effect: -1",
     "program.md:9: accept.min_effect: expected a number >= 0 (metric units) or a percentage "
     "such as '1%', got -1"),
    ("accept:\n  min_effect: -1%",
     "program.md:9: accept.min_effect: expected a number >= 0 (metric units) or a percentage "
     "such as '1%', got '-1%'"),
    ("accept:\n  min_effect: true",
     "program.md:9: accept.min_effect: expected a number >= 0 (metric units) or a percentage "
     "such as '1%', got true"),
    ("accept:\n  min_effect: .inf",
     "program.md:9: accept.min_effect: expected a number >= 0 (metric units) or a percentage "
     "such as '1%', got inf"),
    ("accept:\n  min_effect: 100%",
     "program.md:9: accept.min_effect: 100% is too large: a percentage below 100% is needed"),
    ("accept:\n  rule: paired\n  alpha: 0",
     "program.md:10: accept.alpha: expected a level between 0 and 0.5, e.g. 0.05, got 0"),
    ("accept:\n  rule: paired\n  alpha: 0.6",
     "program.md:10: accept.alpha: expected a level between 0 and 0.5, e.g. 0.05, got 0.6"),
    ("accept:\n  rule: paired\n  alpha: 5%",
     "program.md:10: accept.alpha: expected a level between 0 and 0.5, e.g. 0.05, got '5%'"),
    ("accept:\n  rule: paired\n  pairs: 0",
     "program.md:10: accept.pairs: expected a whole number >= 1, got 0"),
    ("accept:\n  rule: paired\n  pairs: 2.5",
     "program.md:10: accept.pairs: expected a whole number >= 1, got 2.5"),
    ("accept:\n  rule: paired\n  pairs: 4",
     "program.md:10: accept.pairs: 4 pairs can never reach alpha 0.005 (even when every pair "
     "shows the same gain); use at least 6 pairs"),
    ("accept:\n  rule: paired\n  pairs: 1\n  alpha: 0.5",
     "program.md:10: accept.pairs: 1 pair can never reach alpha 0.5 (even when every pair "
     "shows the same gain); use at least 2 pairs"),
    ("accept:\n  rule: paired\n  alpha: 0.000000000001",
     "program.md:10: accept.alpha: 1e-12 is out of reach of 16 pairs (even when every pair "
     "shows the same gain); set accept.pairs to at least 25"),
    ("accept:\n  rule: paired\n  confirm: 1",
     "program.md:10: accept.confirm: expected true or false, got 1"),
    ("accept:\n  rule: paired\n  confirm: maybe",
     "program.md:10: accept.confirm: expected true or false, got 'maybe'"),
    ("accept:\n  pairs: 8",
     "program.md:9: accept.pairs: only used with accept.rule: paired (the strict rule compares "
     "one measurement, or the median of verifier.repeats, per side)"),
    ("accept:\n  rule: strict\n  alpha: 0.05",
     "program.md:10: accept.alpha: only used with accept.rule: paired (the strict rule compares "
     "one measurement, or the median of verifier.repeats, per side)"),
    ("accept:\n  confirm: true",
     "program.md:9: accept.confirm: only used with accept.rule: paired (the strict rule compares "
     "one measurement, or the median of verifier.repeats, per side)"),
    ("accept:\n  warmup: -1", "program.md:9: accept.warmup: expected a whole number >= 0, got -1"),
    ("accept:\n  final_pairs: many",
     "program.md:9: accept.final_pairs: expected a whole number >= 0, got 'many'"),
    # verifier.repeats
    ("  repeats: 0", "program.md:8: verifier.repeats: expected a whole number >= 1, got 0"),
    ("  repeats: three", "program.md:8: verifier.repeats: expected a whole number >= 1, got 'three'"),
    ("  repeats: 3\naccept:\n  rule: paired",
     "program.md:8: verifier.repeats: only used with accept.rule: strict (the paired rule "
     "measures accept.pairs incumbent/candidate pairs instead)"),
    # limits
    ("limits: {metric: mem}",
     "program.md:8: limits: expected a list of limits such as {metric: peak_mem_mb, "
     "max_increase: 10%}, got a mapping"),
    ("limits:\n  - mem",
     "program.md:9: limits[0]: expected a mapping {metric, max_increase or max_decrease}, got 'mem'"),
    ("limits:\n  - {max_increase: 10%}",
     "program.md:9: limits[0]: needs metric (a name in the verifier's output, e.g. peak_mem_mb) "
     "or pattern (a regex whose first group is the number)"),
    ("limits:\n  - metric: mem\n    pattern: 'm=(\\d+)'\n    max_increase: 1",
     "program.md:10: limits[0]: give metric or pattern, not both"),
    ("limits:\n  - {metric: mem}",
     "program.md:9: limits[0]: needs max_increase or max_decrease (e.g. 10% of the baseline, or "
     "a number in metric units)"),
    ("limits:\n  - metric: mem\n    max_increase: 1\n    max_decrease: 1",
     "program.md:11: limits[0]: give max_increase or max_decrease, not both (a limit is "
     "one-sided; write two items for both)"),
    ("limits:\n  - {metric: mem, max_increase: lots}",
     "program.md:9: limits[0].max_increase: expected a number >= 0 (metric units) or a percentage "
     "such as '1%', got 'lots'"),
    ("limits:\n  - {metric: mem, max_increse: 10%}",
     "program.md:9: unknown key 'limits[0].max_increse' (did you mean 'limits[0].max_increase'?)"),
    ("limits:\n  - {metric: 'a b', max_increase: 1}",
     "program.md:9: limits[0].metric: expected a metric name of letters, digits, '_', '.', '-', "
     "got 'a b'"),
    ("limits:\n  - {pattern: 'rss', max_increase: 1}",
     "program.md:9: limits[0].pattern: needs a group around the number, e.g. 'acc=([0-9.]+)'"),
    ("limits:\n  - {metric: ok, max_increase: 1}\n  - {metric: mem}",
     "program.md:10: limits[1]: needs max_increase or max_decrease (e.g. 10% of the baseline, or "
     "a number in metric units)"),
    # holdout
    ("holdout: python h.py", "program.md:8: holdout: expected a mapping of keys, got 'python h.py'"),
    ("holdout:\n  metric: h", "program.md:8: missing required key 'holdout.command'"),
    ("holdout:\n  command: python h.py",
     "program.md:8: holdout: needs metric (the metric's name) or pattern (a regex whose first "
     "group is the number)"),
    ("holdout:\n  command: python h.py\n  metric: h\n  pattern: 'h=(\\S+)'",
     "program.md:11: holdout: give metric or pattern, not both"),
    ("holdout:\n  command: python h.py\n  metric: h\n  direction: up",
     "program.md:11: holdout.direction: 'up' is not one of minimize, maximize"),
    ("holdout:\n  command: python h.py\n  metric: h\n  timeout: 0",
     "program.md:11: holdout.timeout: expected a positive number of seconds, got 0"),
    ("holdout:\n  comand: python h.py",
     "program.md:9: unknown key 'holdout.comand' (did you mean 'holdout.command'?)"),
]


@pytest.mark.parametrize(("extra", "message"), ERRORS)
def test_errors(extra: str, message: str) -> None:
    assert error(prog(extra)) == message


def test_known_keys_include_the_new_ones() -> None:
    keys = set(known_keys())
    assert {"verifier.repeats", "accept.rule", "accept.min_effect", "accept.alpha", "accept.pairs",
            "accept.confirm", "accept.warmup", "accept.final_pairs", "limits[].metric",
            "limits[].pattern", "limits[].max_increase", "limits[].max_decrease",
            "holdout.command", "holdout.metric", "holdout.pattern", "holdout.direction",
            "holdout.timeout"} <= keys


@pytest.mark.parametrize("amount, reference, expected", [
    (Amount(10.0, True), 200.0, 20.0), (Amount(10.0, True), -200.0, 20.0),
    (Amount(3.0, False), 200.0, 3.0), (Amount(10.0, True), 0.0, 0.0),
])
def test_amount_of(amount: Amount, reference: float, expected: float) -> None:
    assert amount.of(reference) == expected


def test_amount_text() -> None:
    assert (str(Amount(1.0, True)), str(Amount(0.25, False))) == ("1%", "0.25")
