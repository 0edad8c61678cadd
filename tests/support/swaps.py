"""The swap planner's inputs (pure): a revision as plan_swap observes it, and one SwapInput around them."""
from __future__ import annotations

import datetime as dt

from drafter_operator.controllers.swap import RevisionObservation, SwapInput

T0 = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.timezone.utc)
TIMEOUT = dt.timedelta(minutes=45)


def rev(name: str, ready: int = 0, replicas: int = 1, pods: int | None = None, age_min: float = 1,
        unschedulable: str | None = None, exited: str | None = None, restarts: int = 2,
        scheduled_min: float | None = None) -> RevisionObservation:
    """A revision created ``age_min`` ago whose pods were scheduled at once (unless unschedulable, or
    ``scheduled_min`` ago); an ``exited`` engine has been restarted ``restarts`` times (2 fails it)."""
    created = T0 - dt.timedelta(minutes=age_min)
    scheduled = None if unschedulable else (created if scheduled_min is None else T0 - dt.timedelta(minutes=scheduled_min))
    return RevisionObservation(name=name, replicas=replicas, ready=ready, pods=replicas if pods is None else pods,
                               created=created, unschedulable=unschedulable, exited=exited, exit_restarts=restarts,
                               scheduled=scheduled, placement_started=created)


def inp(desired="new", active="old", strategy="BlueGreen", revisions=(), failed=(), replicas=1, previous=None,
        switched_ago: float | None = None, good=("old",), in_flight=None) -> SwapInput:
    return SwapInput(desired=desired, strategy=strategy, replicas=replicas, startup_timeout=TIMEOUT, active=active,
                     failed=frozenset(failed), revisions={r.name: r for r in revisions}, now=T0, previous=previous,
                     switched_at=None if switched_ago is None else T0 - dt.timedelta(seconds=switched_ago),
                     good=frozenset(good), in_flight={r.name: 0 for r in revisions} if in_flight is None else in_flight)
