"""Reconcile one DrafterServing: decide (decide.py, pure), then apply the plan through the Kube client.

Run by the serving's own loop (handlers.py) whenever the serving or one of its children changes, and on
a safety interval; idempotent, and safe to run from a restarted operator in the middle of a swap (the
Service is the pointer to the active revision).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from dataclasses import dataclass, field
from typing import Callable

from drafter_operator import engines
from drafter_operator.acceptance.measurement import Measurement
from drafter_operator.constants import API_GROUP_VERSION, BENCHMARK_PLURAL, SERVING_PLURAL
from drafter_operator.controllers import conditions
from drafter_operator.controllers.apply_plan import (
    WRITE_REFUSED,
    BoundEventSink,
    NameHeld,
    Rules,
    WrittenVersion,
    apiserver_message,
    apply_plan,
)
from drafter_operator.controllers.plan import Plan, Write
from drafter_operator.controllers.serving.decide import decide
from drafter_operator.controllers.serving.state import ServingState
from drafter_operator.controllers.serving.fresh import read_view
from drafter_operator.controllers.serving.nodes import NodeProducts
from drafter_operator.controllers.serving.observe import Observed
from drafter_operator.controllers.serving.patches import changed_fields, name_conflict_message
from drafter_operator.controllers.one_at_a_time import ObjectLocks
from drafter_operator.controllers.swap import Verdict
from drafter_operator.kube import ApiError, Kube, object_path
from drafter_operator.resources.engine import service_revision
from drafter_operator.resources.group import group_name
from drafter_operator.resources.labels import MANAGED_BY, deployment_name
from drafter_operator.resources.workloads import DEPLOYMENT, GROUP, PLURALS, deployment_path, group_path
from drafter_operator.monitoring import operator_metrics as metrics

log = logging.getLogger("drafter.serving")

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
    # Decide again from the apiserver itself (fresh.py) before acting on the watches' view, and every
    # `verify_waiting` while a plan waits on it. Off only for tests whose stand-in apiserver cannot list.
    verify: bool = True
    verify_waiting: dt.timedelta = dt.timedelta(seconds=60)
    verified_at: dict[tuple[str, str], dt.datetime] = field(default_factory=dict)  # servings that wait only
    # The GPU product of the nodes pods run on, read when a known-bad row keyed by GPU waits for it.
    nodes: NodeProducts | None = None

    def __post_init__(self) -> None:
        if self.nodes is None:
            self.nodes = NodeProducts(self.kube)

    def reconcile(self, body: dict, post_event: BoundEventSink, observed: Observed,
                  acceptance: Measurement | None = None, view_behind: bool = False) -> Applied:
        """`observed`: the serving's children as the operator's watches (kopf indexes) see them;
        `acceptance`: the acceptance watch's latest measurement; `view_behind`: the loop gave up waiting for the
        watches to return this serving's own last writes (loop.Wakeups.behind)."""
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        with self.locks.of(namespace, name), metrics.reconcile_timer("DrafterServing"):
            try:
                now = self.clock()
                plan = self.decide_placed(body, observed, acceptance, now)
                if self.verify and (view_behind or acts_on_the_view(plan, body) or self.check_due(namespace, name, plan, now)):
                    fresh = read_view(self.kube, namespace, name, observed.in_flight)
                    if fresh is None:  # deleted meanwhile: nothing to decide
                        return Applied(written=[], recheck_at=None)
                    self.verified_at[(namespace, name)] = now
                    body, observed = fresh
                    self.relabel(namespace, observed.unlabelled)
                    plan = self.decide_placed(body, observed, acceptance, now)
                applied = self.apply(namespace, name, plan, post_event, body, now)
                applied = dataclasses.replace(applied, recheck_at=self.next_check(namespace, name, plan,
                                                                                  applied.recheck_at, now))
            except Exception:
                metrics.set_reconcile_failing("DrafterServing", namespace, name, True)
                raise
            metrics.set_reconcile_failing("DrafterServing", namespace, name, False)
            # The alert rules' view (Ready, a swap under way, the last benchmark) is the status just written.
            metrics.set_serving_state(namespace, name, (body.get("spec") or {}).get("engine", ""),
                                      {**(body.get("status") or {}), **plan.record_first, **plan.status})
            return applied

    def decide(self, body: dict, observed: Observed, acceptance: Measurement | None, now: dt.datetime) -> Plan:
        return decide(ServingState(serving=body, observed=observed, now=now, default_images=self.default_images,
                                   drain=self.drain, acceptance=acceptance))

    def decide_placed(self, body: dict, observed: Observed, acceptance: Measurement | None,
                      now: dt.datetime) -> Plan:
        """Decide with the GPU product of the nodes the pods run on, as far as it is known; a decision that waits
        for a node's product (a known-bad row keyed by GPU) reads it and decides again."""
        self.nodes.fill(observed, now)
        plan = self.decide(body, observed, acceptance, now)
        if plan.read_nodes and self.nodes.read(plan.read_nodes, now):
            self.nodes.fill(observed, now)
            plan = self.decide(body, observed, acceptance, now)
        return plan

    def check_due(self, namespace: str, name: str, plan: Plan, now: dt.datetime) -> bool:
        """Whether a plan that waits on the view should have that view checked now: at most every
        `verify_waiting` per serving, so a ghost (a deleted pod a re-list kept) holds a swap that long at most."""
        key = (namespace, name)
        if not plan.waiting:
            self.verified_at.pop(key, None)
            return False
        last = self.verified_at.get(key)
        if last is None:  # it starts waiting now: its view is checked once it waited `verify_waiting`
            self.verified_at[key] = now
            return False
        if now - last < self.verify_waiting:
            return False
        self.verified_at[key] = now
        return True

    def next_check(self, namespace: str, name: str, plan: Plan, recheck_at: dt.datetime | None,
                   now: dt.datetime) -> dt.datetime | None:
        """The plan's own recheck, or sooner the next check of the view of a plan that waits on it: a wait the
        view alone sustains (a drain of a revision the watches no longer show) may have nothing else to wake it."""
        last = self.verified_at.get((namespace, name)) if self.verify and plan.waiting else None
        if last is None:
            return recheck_at
        due = last + self.verify_waiting
        if due <= now:  # not checked this time (another wait's check is due first): never a wakeup in the past
            due = now + self.verify_waiting
        return min(recheck_at, due) if recheck_at else due

    def relabel(self, namespace: str, workloads: tuple[tuple[str, str], ...]) -> None:
        """Put the watches' labels back on our own Deployments or LeaderWorkerSets (``workloads``: (plural, name))
        that lost them, so the watches see them again."""
        for plural, name in workloads:
            path = group_path(namespace, name) if plural == GROUP.plural else deployment_path(namespace, name)
            log.warning("%s lost its labels %s; putting them back", path, sorted(MANAGED_BY))
            self.kube.patch(path, {"metadata": {"labels": dict(MANAGED_BY)}})

    def apply(self, namespace: str, name: str, plan: Plan, post_event: BoundEventSink, body: dict | None = None,
              now: dt.datetime | None = None) -> Applied:
        """Write the plan (apply_plan.py: verdict record, children, status, deletions, Events, counters).

        Status patches carry the resourceVersion the decision read (``body``), so a decision made on a stale
        view of the serving is refused (409) instead of overwriting what another writer recorded; the loop
        decides again from a fresh one. A child write the apiserver refuses (admission, policy, quota,
        validation) stops the writes that would follow it and is reported in the same reconcile: Progressing
        WriteRefused with the apiserver's message, and a Warning Event when it is news."""
        body = body or {"metadata": {"namespace": namespace, "name": name}}
        if plan.record_first:
            log.info("%s/%s: recording revision verdicts %s", namespace, name,
                     {r["name"]: r.get("good") for r in plan.record_first.get("revisions") or []})
        written = apply_plan(self.kube, RULES, body, plan, post_event, lambda: now or self.clock())
        return Applied(written=written.versions, recheck_at=plan.recheck_at)


def never_the_serving_one(kube: Kube, namespace: str, name: str, deletes: list[str]) -> list[str]:
    """``deletes`` without the Deployment the Service selects right now, read from the apiserver (one
    GET, only when something is to be deleted): a decision made on a lagging view of the Service (a
    switch this operator made, not yet delivered by the watch) must never remove what serves."""
    service = kube.get(object_path("v1", "services", namespace, name))
    selected = service_revision(service) if service else None
    if selected is None:
        return deletes
    serving_paths = (f"/deployments/{deployment_name(name, selected)}", f"/{GROUP.plural}/{group_name(name, selected)}")
    kept = [path for path in deletes if not path.endswith(serving_paths)]
    if len(kept) != len(deletes):
        log.warning("%s/%s: not deleting revision %s: the Service selects it (a decision on a stale view)",
                    namespace, name, selected)
    return kept


def holder(kube: Kube, namespace: str, write: Write) -> dict | None:
    """Who holds the name a create found taken: a Deployment, the Service or a gate benchmark."""
    if write.plural == DEPLOYMENT.plural:
        return kube.get(deployment_path(namespace, write.name))
    if write.plural == GROUP.plural:
        return kube.get(group_path(namespace, write.name))
    if write.plural == "services":
        return kube.get(object_path("v1", "services", namespace, write.name))
    return kube.get(object_path(API_GROUP_VERSION, BENCHMARK_PLURAL, namespace, write.name))


def status_path(namespace: str, name: str) -> str:
    return object_path(API_GROUP_VERSION, SERVING_PLURAL, namespace, name, "status")


#: The apiserver refused the write for what it is (validation, admission webhook or policy, quota,
#: RBAC): retrying the same write cannot succeed until someone changes something, so a person must see it.
REFUSAL_CODES = (400, 403, 404, 422)
NAME_CONFLICT = "NameConflict"


def acts_on_the_view(plan: Plan, body: dict) -> bool:
    """Whether the plan does something that a stale or ghostly view would make wrong (pure): delete a revision,
    move traffic, record a revision's verdict or an action, start a gate (at a pod's IP), or create a Deployment
    of a serving that already has revisions (one recorded as failed, perhaps). A first rollout's creates and
    status-only refreshes are not checked: they cost a steady serving no request."""
    first_rollout = not (body.get("status") or {}).get("revisions")
    return bool(plan.deletes or plan.counted("swap") or plan.record_first) or any(
        write.plural == BENCHMARK_PLURAL or (write.verb == "create" and write.plural in PLURALS and not first_rollout)
        for write in plan.writes)


def refused_plan(plan: Plan, write: Write, exc: ApiError, status: dict, now: dt.datetime,
                 generation: int | None) -> Plan:
    """The plan as far as it can go after ``write`` was refused (pure): its status with Progressing
    WriteRefused carrying the apiserver's message (NameConflict when another owner holds the name); the
    traffic-moving parts after the refused write are not applied, so their Events and counts go too. A
    Warning Event only when the refusal is news."""
    target = write.body.get("metadata", {}).get("name") or write.path.rsplit("/", 1)[-1]
    if isinstance(exc, NameHeld):
        reason, message = NAME_CONFLICT, exc.message
    else:
        reason = WRITE_REFUSED
        message = f"{write.verb} {write.kind} {target} refused by the apiserver (HTTP {exc.status}): {apiserver_message(exc)}"
        if write.plural == GROUP.plural and exc.status == 404:
            message += (f"; the cluster has no {GROUP.kind} API ({GROUP.api_version}), which a replica over several "
                        "nodes runs on: install LeaderWorkerSet v0.9.0 or later, or set spec.resources.nodesPerReplica to 1")
    verdict = Verdict("False", reason, message[:2000])
    base = plan.status.get("conditions") or status.get("conditions")
    current = next((c for c in status.get("conditions") or [] if c.get("type") == "Progressing"), {})
    news = (current.get("reason"), current.get("message")) != (reason, verdict.message)
    # What serves did not change: a refused Service write did not move traffic, so the fields that say where
    # it goes keep what they said.
    kept = {k: v for k, v in plan.status.items() if k not in ("activeRevision", "previousRevision", "serving")}
    verdicts = [("Progressing", verdict)]
    if reason == NAME_CONFLICT and write.plural == "services":
        verdicts.append(("Ready", verdict))  # the endpoint's name routes to someone else's pods: nothing of ours serves
    new_status = {**kept, "conditions": conditions.merge(base, verdicts, generation, now)}
    if not news:
        new_status = changed_fields(status, new_status)
    # The plan's own word on Progressing and on traffic moving no longer holds: the refusal replaces it.
    kept_events = [e for e in plan.events if e[1] != "Switched" and not e[2].startswith("Progressing=")]
    return Plan(record_first=plan.record_first, status=new_status,
                events=kept_events + ([("Warning", reason, message)] if news else []), recheck_at=plan.recheck_at)


RULES = Rules(
    kind="DrafterServing",
    plural=SERVING_PLURAL,
    status_path=status_path,
    log=log,
    guarded_status=True,
    reported=REFUSAL_CODES,
    holder=holder,
    conflict_message=lambda write: name_conflict_message([write]),
    refused=refused_plan,
    restore_labels=True,  # the watches select a serving's children by their labels
    keep_deletes=never_the_serving_one,
)
