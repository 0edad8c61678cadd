"""Kubernetes conditions: keep lastTransitionTime unless the status really changed; read a Job's end."""

from __future__ import annotations

import datetime as dt
from typing import Iterable, Protocol

from drafter_operator import timestamps

#: A Kubernetes Event a decision posts on its object: (type, reason, message).
Event = tuple[str, str, str]


class VerdictLike(Protocol):
    status: str
    reason: str
    message: str


def merge(current: list[dict] | None, updates: Iterable[tuple[str, VerdictLike | None]], generation: int | None,
          now: dt.datetime) -> list[dict]:
    """Apply (type, verdict) updates to a condition list; None leaves that condition untouched."""
    by_type = {c["type"]: dict(c) for c in current or []}
    stamp = timestamps.format_seconds(now)
    for kind, verdict in updates:
        if verdict is None:
            continue
        old = by_type.get(kind)
        since = old["lastTransitionTime"] if old and old.get("status") == verdict.status and \
            old.get("lastTransitionTime") else stamp
        by_type[kind] = {"type": kind, "status": verdict.status, "reason": verdict.reason,
                         "message": verdict.message, "lastTransitionTime": since, "observedGeneration": generation}
    order = ["Ready", "Progressing", "Degraded", "DrafterCompatible"]
    return sorted(by_type.values(), key=lambda c: (order.index(c["type"]) if c["type"] in order else 99, c["type"]))


def job_finished(job: dict) -> dict | None:
    """The Job's Complete or Failed condition once it has finished (its pod is done), else None."""
    return next((c for c in (job.get("status") or {}).get("conditions") or []
                 if c.get("type") in ("Complete", "Failed") and c.get("status") == "True"), None)
