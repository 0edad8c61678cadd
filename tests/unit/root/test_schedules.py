"""Cron schedules as a CronJob reads them (schedules.py): what is accepted, the next time in a zone, across DST."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drafter_operator import schedules

UTC = dt.timezone.utc


@pytest.mark.parametrize("schedule, says", [
    ("0 3 * * 0 5", "has 6 fields: a schedule has five"),
    ("0 3 * *", "has 4 fields"),
    ("61 * * * *", "is not a cron schedule: minute 0-59"),
    ("TZ=Europe/Paris 0 3 * * *", "set spec.retraining.timeZone instead"),
    ("@every 5m", "is not a schedule descriptor"),
    ("@fortnightly", "is not a schedule descriptor"),
])
def test_what_a_cronjob_refuses_is_refused_naming_the_fix(schedule, says):
    with pytest.raises(ValueError) as refused:
        schedules.fields_of(schedule)
    assert says in str(refused.value) and "0 3 * * 0" in str(refused.value)


def test_descriptors_and_fields():
    assert schedules.fields_of("@weekly") == "0 0 * * 0" and schedules.fields_of("@midnight") == "0 0 * * *"
    assert schedules.fields_of("  */15   9-17 * * mon-fri ") == "*/15 9-17 * * mon-fri"
    with pytest.raises(ValueError, match="IANA name"):
        schedules.zone("Mars/Olympus")
    assert schedules.zone(None) is UTC


def test_the_next_time_is_read_in_the_zone_and_a_time_dst_skips_fires_just_after_it():
    after = dt.datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
    assert schedules.next_after("0 3 * * 0", None, after) == dt.datetime(2026, 12, 13, 3, 0, tzinfo=UTC)
    assert schedules.next_after("0 3 * * 0", "Europe/Paris", after) == dt.datetime(2026, 12, 13, 2, 0, tzinfo=UTC)
    assert schedules.next_after("0 3 * * 0", "America/New_York", after) == dt.datetime(2026, 12, 13, 8, 0, tzinfo=UTC)
    # 02:30 does not exist in Paris on 2026-03-29 (clocks go from 02:00 to 03:00): that day's run is at 03:00 there.
    spring = dt.datetime(2026, 3, 28, 23, 0, tzinfo=UTC)
    assert schedules.next_after("30 2 * * *", "Europe/Paris", spring) == dt.datetime(2026, 3, 29, 1, 0, tzinfo=UTC)


@given(minute=st.integers(0, 59), hour=st.integers(0, 23),
       after=st.datetimes(min_value=dt.datetime(2020, 1, 1), max_value=dt.datetime(2035, 1, 1), timezones=st.just(UTC)),
       zone=st.sampled_from([None, "UTC", "Europe/Paris", "Asia/Kolkata", "America/Los_Angeles"]))
def test_a_daily_time_comes_within_a_day_after_and_at_that_time_in_its_zone(minute, hour, after, zone):
    found = schedules.next_after(f"{minute} {hour} * * *", zone, after)
    assert after < found <= after + dt.timedelta(hours=25)  # a day, or one more hour across a DST change
    tz = schedules.zone(zone)
    local = found.astimezone(tz)
    if (local.hour, local.minute) != (hour, minute):  # only where that day's time does not exist (DST skipped it)
        wanted = dt.datetime.combine(local.date(), dt.time(hour, minute)).replace(tzinfo=tz)
        assert wanted.astimezone(UTC).astimezone(tz).replace(tzinfo=None) != wanted.replace(tzinfo=None), found
