"""ScheduleIgnored in a DrafterServing decision (pure): the condition and its Events (``decide.decide`` calls them).

The acceptance watch holds each replica's drafted tokens per step to the batch-size schedule the active revision
runs (``acceptance/schedule_obeyed.py``); here that check becomes the condition, and only where it describes the
revision that serves: a revision that runs no schedule has no such condition (one already there says so), and a swap
under way leaves the condition as it is (the window may describe neither revision).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from drafter_operator.acceptance import schedule_obeyed as so
from drafter_operator.controllers.conditions import Event
from drafter_operator.controllers.serving.acceptance import scheduled_ranges
from drafter_operator.controllers.swap import Verdict

if TYPE_CHECKING:
    from drafter_operator.acceptance.measurement import Measurement

CONDITION = so.CONDITION


def schedule_verdict(active: str | None, schedule_status: dict | None, measurement: Measurement | None,
                     swapping: bool, condition: dict | None) -> Verdict | None:
    """ScheduleIgnored for this decision, None to leave it as it is. ``schedule_status``: status.speculationSchedule
    after this decision; ``condition``: the recorded one. A new message alone is not written (a message per scrape
    would cost a write per scrape); a new status or reason is."""
    if active and (schedule_status or {}).get("predictedRevision") == active:
        return None  # it runs the predicted bands while the refined ones start (a swap): the condition keeps its word
    if not active or scheduled_ranges(active, schedule_status) is None:
        return None if condition is None else Verdict(
            "False", so.NO_SCHEDULE, f"revision {active} runs no batch-size schedule" if active else "nothing serves")
    if swapping:
        return None
    check = measurement.schedule if measurement is not None and measurement.revision == active else None
    if check is None:
        return Verdict("Unknown", so.NO_EVIDENCE, f"revision {active}'s drafting not measured yet") \
            if condition is None else None
    if condition and (condition.get("status"), condition.get("reason")) == (check.status, check.reason):
        return None
    return Verdict(check.status, check.reason, check.message)


def schedule_events(before: list[dict] | None, after: list[dict]) -> list[Event]:
    """A Warning ScheduleIgnored when the condition turns True, a Normal ScheduleObeyed when it turns False from True."""
    old = next((c for c in before or [] if c.get("type") == CONDITION), {})
    new = next((c for c in after if c.get("type") == CONDITION), {})
    if new.get("status") == "True" and old.get("status") != "True":
        return [("Warning", CONDITION, new["message"])]
    if new.get("status") == "False" and old.get("status") == "True":
        return [("Normal", "ScheduleObeyed", new["message"])]
    return []
