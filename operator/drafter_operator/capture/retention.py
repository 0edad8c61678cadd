"""Which captured files a capture deletes from its claim: those older than the retention, then the oldest beyond
the size cap. Files are named by the UTC hour their records were written in, so their names sort by age."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from drafter_operator.timestamps import UTC, format_hour, parse_hour

#: A captured hour file: records appended during one UTC hour, one JSON object per line.
_NAME_RE = re.compile(r"^capture-(\d{4}-\d{2}-\d{2}T\d{2})\.jsonl$")


def hour_file(now: float) -> str:
    """The file records written at ``now`` (seconds since the epoch) go to, e.g. capture-2026-12-06T18.jsonl."""
    return f"capture-{format_hour(datetime.fromtimestamp(now, UTC))}.jsonl"


def hour_started(name: str) -> float | None:
    """When the hour of a captured file began (seconds since the epoch), or None for a file that is not one of
    ours (it is never deleted). ``name`` may be a path in the claim (a pod's directory, then the file)."""
    match = _NAME_RE.match(name.rpartition("/")[2])
    if match is None:
        return None
    try:
        return parse_hour(match.group(1)).timestamp()
    except ValueError:  # the right shape but no such hour (month 13)
        return None


@dataclass(frozen=True)
class CapturedFile:
    #: Its path in the claim, e.g. "<pod>/capture-2026-12-06T18.jsonl".
    name: str
    size: int


def to_delete(files: list[CapturedFile], now: float, retention_s: float, max_bytes: int) -> list[str]:
    """The captured files to delete, oldest first: every file whose hour ended more than ``retention_s`` ago, then
    the oldest of the rest until they fit in ``max_bytes``. The file of the current hour is never deleted for age;
    it goes for size only when it alone exceeds the cap (the cap is a promise about the claim). Files that are not
    ours are neither deleted nor counted."""
    # Two pods' files of one hour tie on their start: their paths break the tie.
    ours = sorted(((started, f) for f in files if (started := hour_started(f.name)) is not None),
                  key=lambda pair: (pair[0], pair[1].name))
    doomed: list[str] = []
    kept: list[CapturedFile] = []
    for started, f in ours:
        if started + 3600 + retention_s < now:
            doomed.append(f.name)
        else:
            kept.append(f)
    total = sum(f.size for f in kept)
    for f in kept:
        if total <= max_bytes:
            break
        doomed.append(f.name)
        total -= f.size
    return doomed
