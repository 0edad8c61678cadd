"""How figures read to a person (drafter_operator/figures.py): the text of the printer columns' status.display."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from drafter_operator import figures


def test_a_speedup_reads_with_two_decimals_and_an_x_a_rate_as_a_percentage():
    assert figures.speedup(1.6793) == "1.68x"
    assert figures.speedup(0.66) == "0.66x"
    assert figures.percent(0.15) == "15.0%"
    assert figures.percent(0.8356) == "83.6%"
    assert figures.percent(1.0) == "100.0%"
    assert figures.throughput(143.384) == "143.4"


def test_shown_keeps_every_key_given_with_null_for_an_unknown_figure_and_is_none_without_any():
    assert figures.shown({"speedup": 1.6793, "acceptance": 0.15}) == {"speedup": "1.68x", "acceptance": "15.0%"}
    # the null lets a JSON merge patch remove a figure that went away
    assert figures.shown({"speedup": None, "acceptance": 0.7}) == {"speedup": None, "acceptance": "70.0%"}
    assert figures.shown({"tokensPerSecond": 54.4, "speedup": 0.66, "acceptance": None}) == {
        "tokensPerSecond": "54.4", "speedup": "0.66x", "acceptance": None}
    assert figures.shown({"speedup": None, "acceptance": None}) is None


@given(st.floats(min_value=0, max_value=1))
def test_a_rate_reads_back_within_half_a_tenth_of_a_point(rate):
    text = figures.percent(rate)
    assert text.endswith("%") and abs(float(text[:-1]) / 100 - rate) <= 0.0005 + 1e-12
