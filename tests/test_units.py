"""The one formatter family: people's numbers, never Python's exponent form, always with a unit."""

import math

import pytest
from pagetext import EXPONENT

from core.base import fmt_bytes, fmt_latency, fmt_num, fmt_pct, fmt_si, fmt_time, fmt_usd, fmt_value, sig


@pytest.mark.parametrize(
    "x,digits,text",
    [
        (0.0304, 3, "0.0304"),
        (2.5, 3, "2.5"),  # trailing zeros dropped, as :g does
        (999.6, 3, "1,000"),  # rounds up to four digits before the point, not "1e+03"
        (5316, 3, "5,320"),
        (2e-05, 3, "0.00002"),  # :g writes 2e-05
        (1.1e2, 2, "110"),  # :.2g writes 1.1e+02
        (-0.5, 3, "-0.5"),
        (0.0, 3, "0"),
        (math.nan, 3, "n/a"),
    ],
)
def test_sig(x, digits, text):
    assert sig(x, digits) == text


def test_counts_take_word_multipliers():
    assert fmt_num(2e12) == "2T"
    assert fmt_num(1.5e13) == "15T"
    assert fmt_num(1660) == "1.66k"
    assert fmt_num(999_960) == "1M"  # not "1000k"
    assert fmt_num(250) == "250"
    assert fmt_num(2e-05) == "0.00002"


def test_quantities_take_si_prefixes_and_always_a_unit():
    assert fmt_si(3.28e5, "FLOP") == "328 kFLOP"
    assert fmt_value(3.28e5, "FLOP") == "328 kFLOP"  # was "3.28e+05 FLOP"
    assert fmt_value(5.65e11, "FLOP") == "565 GFLOP"
    assert fmt_value(9.89e14, "FLOP/s") == "989 TFLOP/s"
    assert fmt_value(3.35e12, "B/s") == "3.35 TB/s"
    assert fmt_bytes(17.6e9) == "17.6 GB"
    assert fmt_bytes(999.96e9, "auto") == "1 TB"
    assert fmt_bytes(4096, "auto") == "4.1 KB"
    # an energy in kWh: Wh under 1 kWh, MWh from 1,000 kWh (the Fleet page's energy card)
    assert fmt_value(0.412, "kWh") == "412 Wh"
    assert fmt_value(41.2, "kWh") == "41.2 kWh"
    assert fmt_value(4120.0, "kWh") == "4.12 MWh"


def test_times_pick_a_unit_with_one_to_three_digits():
    assert fmt_time(0.0304) == "30.4 ms"  # beside a 40 ms target, not "0.03 s"
    assert fmt_latency(1.66e3) == "27.7 min"  # was "1.66e+03 s"
    assert fmt_time(119.96) == "2 min"  # rounds past the seconds' bound
    assert fmt_time(12.3 * 86400) == "12.3 days"
    assert fmt_latency(None) == "withheld"
    assert fmt_time(math.inf) == "never"


def test_money_and_shares():
    assert fmt_usd(2_218_313.8) == "$2,218,314"
    assert fmt_usd(12.345) == "$12.35"
    assert fmt_usd(0.5) == "$0.50"
    assert fmt_usd(0.01234) == "$0.0123"
    assert fmt_pct(0.46) == "46%"
    assert fmt_pct(0.0016) == "0.16%"  # a difference that is not zero does not read "0%"


@pytest.mark.parametrize("e", range(-12, 19))
def test_no_formatter_writes_an_exponent(e):
    for m in (1.0, 2.5, 9.996):
        x = m * 10.0**e
        for text in (
            sig(x),
            fmt_num(x),
            fmt_bytes(x, "auto"),
            fmt_time(x),
            fmt_usd(x),
            fmt_pct(x),
            fmt_value(x, "FLOP"),
            fmt_value(x, "tokens/s"),
        ):
            assert not EXPONENT.search(text), text
