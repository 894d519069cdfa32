"""The one formatter every output uses (autoloop.base.numbers)."""

from __future__ import annotations

import pytest

from autoloop.base.numbers import (digits_for, formatter, hms, num, pct_interval, plain_pct, run_values, share,
                              sig, signed_pct, usd)


@pytest.mark.parametrize("x,s", [(None, ""), (0.5, "0.5"), (1.0, "1"), (-0.25, "-0.25"), (0.0, "0"),
                                 (123.456, "123.456"), (145.97500000000002, "145.975"),
                                 (109.03999999999999, "109.04"), (0.30000000000000004, "0.3"),
                                 (1234567.8, "1234568"), (-1e-7, "-1e-07"), (2.5e20, "2.5e+20")])
def test_num(x: float | None, s: str) -> None:
    assert num(x) == s


@pytest.mark.parametrize("x", [0.5, 1.0, 3.14159, 1e-7, 12345.0, 1e10, -2.5, 145.97500000000002])
def test_num_is_a_number_close_to_the_value(x: float) -> None:
    assert float(num(x)) == pytest.approx(x, rel=1e-5)


def test_a_run_gets_the_digits_that_tell_its_values_apart() -> None:
    values = [1.2345671, 1.2345672, 1.5]
    fmt = formatter(values)
    shown = [fmt(v) for v in values]
    assert shown == ["1.2345671", "1.2345672", "1.5"]
    assert digits_for([100.0, 109.04, 145.975]) == 6


def test_float_noise_is_not_a_difference_worth_digits() -> None:
    # the same value reached two ways differs in the 17th digit: still one value, 6 digits
    assert digits_for([0.1 + 0.2, 0.3, 0.7]) == 6
    assert formatter([0.1 + 0.2, 0.3])(0.1 + 0.2) == "0.3"


def test_run_values_reads_metrics_bests_and_in_cycle_medians() -> None:
    recs = [{"t": "cycle", "metric": 1.0, "best": 2.0, "stats": {"pooled": {"median_a": 3.0, "median_b": 4.0}}},
            {"t": "final", "best": "abc123", "median_a": 5.0}]
    assert sorted(run_values(recs)) == [1.0, 2.0, 3.0, 4.0, 5.0]


@pytest.mark.parametrize("x,s", [(None, "–"), (0.0, "0%"), (-0.0000001, "0%"), (1.234, "+1.23%"),
                                 (-53.6, "-53.60%"), (0.0012, "+0.0012%"), (-0.004, "-0.004%"),
                                 (-0.0049999, "-0.005%")])
def test_signed_pct(x: float | None, s: str) -> None:
    assert signed_pct(x) == s


def test_pct_interval() -> None:
    assert pct_interval([-31.23, -20.4], 0.95) == "95% CI -31.23% … -20.40%"
    assert pct_interval(None) == ""


@pytest.mark.parametrize("x,s", [(None, "–"), (0.0, "$0.00"), (1.234, "$1.23"), (0.0042, "$0.0042")])
def test_usd(x: float | None, s: str) -> None:
    assert usd(x) == s


def test_sig_keeps_integers_whole() -> None:
    assert sig(98765432.0) == "98765432"
    assert sig(-0.000123456789) == "-0.000123457"


def test_share_and_elapsed_clock() -> None:
    assert [share(x) for x in (0.0, 0.254, 1.0)] == ["0%", "25%", "100%"]
    # a CI log's timestamp: hours go on counting past a day
    assert [hms(x) for x in (0, 61.9, 3600, 90061)] == ["00:00:00", "00:01:01", "01:00:00", "25:01:01"]


@pytest.mark.parametrize("x, s", [(53.6, "53.60%"), (-3.2, "3.20%"), (0.0, "0%"), (-1e-7, "0%"), (4e-7, "0%"),
                                  (1e-6, "1e-06%"), (None, "–")])
def test_plain_pct_is_a_size_without_sign(x: float | None, s: str) -> None:
    assert plain_pct(x) == s
