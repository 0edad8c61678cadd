"""Reconcile one DrafterServing: decide (serving_decide.py, pure), then apply the plan through the Kube client.

Run by the serving's own loop (handlers.py) whenever the serving or one of its children changes, and on
a safety interval; idempotent, and safe to run from a restarted operator in the middle of a swap (the
Service is the pointer to the active revision).
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, field
from typing import Callable

from drafter_operator import engines
from drafter_operator.controllers.acceptance_monitor import Measurement
from drafter_operator.controllers.serving_decide import Observed, ServingPlan, ServingState, decide
from drafter_operator.controllers.one_at_a_time import ObjectLocks
from drafter_operator.kube import Kube, object_path
from drafter_operator.monitoring import operator_metrics as metrics

log = logging.getLogger("drafter.serving")

GROUP_VERSION = "drafter.dev/v1alpha1"
PLURAL = "drafterservings"
# (type, reason, message) -> posts a Kubernetes Event on the DrafterServing
EventSink = Callable[[str, str, str], None]
# (plural, name, resourceVersion) of an object this reconcile wrote: the loop waits for its watch event
# before deciding again, so it never decides from its own stale view (a second "Switched" Event, say).
WrittenVersion = tuple[str, str, str]


def now_utc() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


@dataclass(frozen=True)
class Applied:
    written: list[WrittenVersion]
    recheck_at: dt.datetime | None


@dataclass
class ServingReconciler:
    kube: Kube
    default_images: dict[str, str] = field(default_factory=lambda: dict(engines.DEFAULT_IMAGES))
    clock: Callable[[], dt.datetime] = now_utc
    drain: dt.timedelta = dt.timedelta(seconds=15)
    locks: ObjectLocks = field(default_factory=ObjectLocks)

    def reconcile(self, body: dict, post_event: EventSink, observed: Observed,
                  acceptance: Measurement | None = None) -> Applied:
        """`observed`: the serving's children as the operator's watches (kopf indexes) see them;
        `acceptance`: the acceptance watch's latest measurement."""
        with self.locks.of(body["metadata"]["namespace"], body["metadata"]["name"]), \
                metrics.reconcile_timer("DrafterServing"):
            plan = decide(ServingState(serving=body, observed=observed, now=self.clock(),
                                       default_images=self.default_images, drain=self.drain,
                                       acceptance=acceptance))
            namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
            applied = self.apply(namespace, name, plan, post_event)
            # The alert rules' view (Ready, a swap under way, the last benchmark) is the status just written.
            metrics.set_serving_state(namespace, name, plan.engine or (body.get("spec") or {}).get("engine", ""),
                                      {**(body.get("status") or {}), **plan.record_first, **plan.status})
            return applied

    def apply(self, namespace: str, name: str, plan: ServingPlan, post_event: EventSink) -> Applied:
        """Write the plan in its order: verdict record, children, status, deletions, Events, counters."""
        status_path = object_path(GROUP_VERSION, PLURAL, namespace, name, "status")
        written: list[WrittenVersion] = []

        def remember(plural: str, response: dict | None) -> None:
            if response and response.get("metadata", {}).get("resourceVersion"):
                written.append((plural, response["metadata"]["name"], response["metadata"]["resourceVersion"]))

        if plan.record_first:
            log.info("%s/%s: recording revision verdicts %s", namespace, name,
                     {r["name"]: r.get("good") for r in plan.record_first["revisions"]})
            remember(PLURAL, self.kube.patch(status_path, {"status": plan.record_first}))
        for write in plan.writes:
            log.info("%s/%s: %s %s", namespace, name, write.verb, write.path)
            send = self.kube.create if write.verb == "create" else self.kube.patch
            remember(write.plural, send(write.path, write.body))
        if plan.status:
            log.info("%s/%s: status %s", namespace, name, sorted(plan.status))
            remember(PLURAL, self.kube.patch(status_path, {"status": plan.status}))
        for path in plan.deletes:
            log.info("%s/%s: delete %s", namespace, name, path)
            self.kube.delete(path)
        for kind, reason, message in plan.events:
            post_event(kind, reason, message)
        if plan.swapped:
            metrics.swap(namespace, name, plan.engine, plan.swapped)
        if plan.rolled_back:
            metrics.rollback(namespace, name, plan.engine)
        return Applied(written=written, recheck_at=plan.recheck_at)
