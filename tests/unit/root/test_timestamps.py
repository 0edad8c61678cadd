"""The one time helper (timestamps.py): Kubernetes' Time and MicroTime, written and read back."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drafter_operator import timestamps

UTC = dt.timezone.utc
aware = st.datetimes(min_value=dt.datetime(1000, 1, 1), max_value=dt.datetime(9999, 12, 30),
                     timezones=st.sampled_from([UTC, dt.timezone(dt.timedelta(hours=2)),
                                                dt.timezone(dt.timedelta(hours=-7, minutes=-30))]))


@given(aware)
def test_seconds_round_trip_to_the_second_in_utc(moment):
    text = timestamps.format_seconds(moment)
    assert text.endswith("Z") and len(text) == 20
    assert timestamps.parse(text) == moment.replace(microsecond=0)


@given(aware)
def test_micro_round_trip_exactly(moment):
    text = timestamps.format_micro(moment)
    assert text.endswith("Z") and len(text) == 27
    assert timestamps.parse(text) == moment


@given(aware)
def test_the_formats_agree_with_what_kubernetes_writes(moment):
    in_utc = moment.astimezone(UTC)
    assert timestamps.format_seconds(moment) == in_utc.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert timestamps.format_micro(moment) == in_utc.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_a_naive_moment_is_taken_as_utc():
    assert timestamps.format_seconds(dt.datetime(2026, 1, 2, 3, 4, 5, 999)) == "2026-01-02T03:04:05Z"


def test_parse_reads_offsets_and_refuses_other_text():
    assert timestamps.parse("2026-01-02T05:04:05+02:00") == dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    with pytest.raises(ValueError):
        timestamps.parse("yesterday")


@pytest.mark.parametrize("text", [None, "", 17, "yesterday", "2026-01-02T03:04:05"])
def test_parse_aware_gives_none_for_anything_without_a_zone(text):
    assert timestamps.parse_aware(text) is None


def test_parse_aware_reads_a_zoned_time():
    assert timestamps.parse_aware("2026-01-02T03:04:05Z") == dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
