"""RFC 3339 timestamps as Kubernetes writes them, read and written in one place.

Kubernetes' Time is UTC to the second with a "Z" ("2026-01-02T03:04:05Z": conditions' lastTransitionTime,
the status times the operator writes); its MicroTime carries microseconds (a Lease's renewTime). The
operator writes both and reads them back, along with offsets ("+02:00") a person or another tool may
have written: :func:`parse` takes either, :func:`format_seconds` and :func:`format_micro` write UTC.
"""

from __future__ import annotations

import datetime as dt

UTC = dt.timezone.utc


def parse(text: str) -> dt.datetime:
    """"2026-01-02T03:04:05Z" (or an offset, or a fraction of a second) -> the moment. A naive result
    ("2026-01-02T03:04:05", no zone) stays naive: callers that compare with aware times check
    (:func:`parse_aware`). ValueError when it is not ISO 8601."""
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def parse_aware(text: object) -> dt.datetime | None:
    """The moment ``text`` names when it is a string with a zone, else None (never raises): for values read
    from places the operator does not control (a pod's log, an edited status)."""
    if not isinstance(text, str) or not text:
        return None
    try:
        moment = parse(text)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def _in_utc(moment: dt.datetime) -> dt.datetime:
    # A naive moment is taken as UTC already (what strftime on it printed before this module).
    return moment.astimezone(UTC) if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def format_seconds(moment: dt.datetime) -> str:
    """Kubernetes' Time: "2026-01-02T03:04:05Z" (UTC, the fraction of a second dropped)."""
    return _in_utc(moment).replace(tzinfo=None).isoformat(timespec="seconds") + "Z"


def format_micro(moment: dt.datetime) -> str:
    """Kubernetes' MicroTime: "2026-01-02T03:04:05.000006Z" (UTC, always six digits of fraction)."""
    return _in_utc(moment).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def format_hour(moment: dt.datetime) -> str:
    """The UTC hour a moment falls in, "2026-01-02T03" (no colon: it names files, e.g. captured hour files)."""
    return _in_utc(moment).replace(tzinfo=None).isoformat(timespec="hours")


def parse_hour(text: str) -> dt.datetime:
    """The start of the UTC hour :func:`format_hour` wrote, aware. ValueError for anything else."""
    if len(text) != len("2026-01-02T03"):
        raise ValueError(f"not an hour: {text!r}")
    return dt.datetime.fromisoformat(text).replace(tzinfo=UTC)
