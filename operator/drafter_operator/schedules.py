"""Cron schedules as a Kubernetes CronJob reads them (spec.retraining.schedule, with spec.retraining.timeZone), pure.

What a CronJob's `schedule` accepts (robfig/cron's standard parser, which the CronJob controller uses): five fields
(minute, hour, day of month, month, day of week) or one of the descriptors @yearly, @annually, @monthly, @weekly,
@daily, @midnight, @hourly; no seconds field and no `TZ=` prefix (the zone is its own field, an IANA name, UTC when
unset). croniter computes the times; this module holds what we accept and how a zone applies.
"""

from __future__ import annotations

import datetime as dt
import zoneinfo

from croniter import croniter

#: The descriptors a CronJob accepts, and the five fields each stands for (croniter knows no @midnight).
DESCRIPTORS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
               "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *"}
#: The schema's first check (the apiserver's, before the operator's): a descriptor or five space-separated fields.
PATTERN = r"^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|\S+( +\S+){4})$"
EXAMPLE = '"0 3 * * 0" (Sundays at 03:00)'


def fields_of(schedule: str) -> str:
    """The five fields of ``schedule`` (a descriptor expanded), or ValueError saying what is wrong with it."""
    text = schedule.strip()
    if text.startswith(("TZ=", "CRON_TZ=")):
        raise ValueError(f"{schedule!r} names its zone in the schedule: set spec.retraining.timeZone instead and "
                         f"give the five fields alone, e.g. {EXAMPLE}")
    if text.startswith("@"):
        if text not in DESCRIPTORS:
            raise ValueError(f"{schedule!r} is not a schedule descriptor: use one of {', '.join(DESCRIPTORS)} or five "
                             f"fields, e.g. {EXAMPLE}")
        return DESCRIPTORS[text]
    parts = text.split()
    if len(parts) != 5:
        raise ValueError(f"{schedule!r} has {len(parts)} fields: a schedule has five (minute, hour, day of month, "
                         f"month, day of week), e.g. {EXAMPLE}")
    if not croniter.is_valid(" ".join(parts)):
        raise ValueError(f"{schedule!r} is not a cron schedule: minute 0-59, hour 0-23, day of month 1-31, month "
                         f"1-12 or jan-dec, day of week 0-7 or sun-sat, each a value, range, list or step, e.g. "
                         f"{EXAMPLE}")
    return " ".join(parts)


def zone(name: str | None) -> dt.tzinfo:
    """The zone a schedule's times are read in: the IANA zone ``name``, UTC when unset; ValueError naming it."""
    if not name:
        return dt.timezone.utc
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"{name!r} is not a time zone: give an IANA name, e.g. \"Europe/Paris\" or "
                         "\"America/New_York\", or leave it unset for UTC") from None


def next_after(schedule: str, time_zone: str | None, after: dt.datetime) -> dt.datetime:
    """The first time strictly after ``after`` that ``schedule`` names, read in ``time_zone``, as UTC. A time a
    daylight-saving change skips fires at the first minute after it, as croniter does; one it repeats fires once."""
    local = after.astimezone(zone(time_zone))
    return croniter(fields_of(schedule), local).get_next(dt.datetime).astimezone(dt.timezone.utc)
