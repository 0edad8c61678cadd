"""Carry out any kind's `Plan` (plan.py) through the Kube client, in one order:

1. ``record_first``, a status patch written before any child is touched (with no child write in the plan, it
   is written with ``status`` in one patch: nothing comes between them for a crash to split);
2. the child ``writes`` in the plan's order. Every create carries the resource as its controlling owner. A
   create that meets AlreadyExists reads the object of that name (where the kind's `Rules.holder` can): ours
   (it names the resource among its owners) is adopted, its lost labels put back where the kind's watches
   select by them; someone else's is a NameConflict and is never touched. A conflict, or a refusal the kind
   reports (`Rules.reported`), stops the writes after it: the rest of the plan becomes what the kind's
   `Rules.refused` makes of it;
3. ``status``, only the fields that changed;
4. ``deletes``, none on a plan stopped half-way (what it would remove may still be needed), an object
   already gone is fine; a refused one is reported as a write is;
5. ``events``;
6. ``counts``, the counters of what the plan did, only once all of it is written.

A crash between any two steps leaves what the next decision reads consistent: the verdicts are recorded
before the children that depend on them, and nothing is deleted before the status that stops naming it.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from dataclasses import dataclass, field
from typing import Callable

from drafter_operator.constants import API_GROUP_VERSION
from drafter_operator.controllers.conditions import Event
from drafter_operator.controllers.plan import Plan, Write, one_status_write
from drafter_operator.kube import ApiError, Kube
from drafter_operator.monitoring import operator_metrics as metrics

# (type, reason, message) -> posts a Kubernetes Event on the resource the plan is of
BoundEventSink = Callable[[str, str, str], None]
# (plural, name, resourceVersion) of an object a plan wrote: the serving's loop waits for its watch event
# before deciding again, so it never decides from its own stale view (a second "Switched" Event, say).
WrittenVersion = tuple[str, str, str]
# The plan as far as it can go after a write was refused: (plan, write, refusal, status as read, now, generation)
Refused = Callable[[Plan, Write, ApiError, dict, dt.datetime, "int | None"], Plan]

WRITE_REFUSED = "WriteRefused"


@dataclass(frozen=True)
class Rules:
    """How one kind's plans are written, where kinds differ; the order and the adopt rule are the same for all."""

    kind: str  # the resource's kind (its children's owner reference)
    plural: str  # the resource's plural
    status_path: Callable[[str, str], str]  # (namespace, name) -> the resource's status subresource
    log: logging.Logger
    # Status patches carry the resourceVersion the decision read, so a decision made on a stale view is
    # refused (409) instead of overwriting what another writer recorded.
    guarded_status: bool = False
    # The apiserver answers to a write that the plan reports itself (status and Event, through `refused`)
    # before raising; any other error raises at once.
    reported: tuple[int, ...] = ()
    # How the object holding a name a create found taken is read; None: not read (taken as ours).
    holder: Callable[[Kube, str, Write], dict | None] | None = None
    conflict_message: Callable[[Write], str] = lambda write: f"{write.kind} {write.name} already exists and is not ours"
    refused: Refused | None = None  # the plan as far as it goes after a refusal or a NameConflict
    retry_refused: bool = True  # raise the refusal once reported (the loop retries after its error delay)
    restore_labels: bool = False  # put back the labels our own adopted child lost (the watches select by them)
    # The deletes to carry out, of those planned (a last look at the apiserver before removing anything).
    keep_deletes: Callable[[Kube, str, str, list[str]], list[str]] | None = None


class NameHeld(ApiError):
    """A child's name is held by an object the resource does not own (found when its create met AlreadyExists)."""

    def __init__(self, write: Write, message: str):
        super().__init__(409, "AlreadyExists", json.dumps({"message": message}))
        self.write, self.message = write, message


def apiserver_message(exc: ApiError) -> str:
    """The Status object's message (what the admission policy, webhook or quota said), else the raw body."""
    try:
        return str(json.loads(exc.body).get("message") or exc.body)
    except (ValueError, AttributeError):
        return exc.body[:500]


def owner_reference(rules: Rules, body: dict) -> dict:
    meta = body["metadata"]
    return {"apiVersion": API_GROUP_VERSION, "kind": rules.kind, "name": meta["name"], "uid": meta.get("uid"),
            "controller": True, "blockOwnerDeletion": True}


def owned_by(child: dict, uid: str) -> bool:
    return any(ref.get("uid") == uid for ref in child["metadata"].get("ownerReferences") or [])


@dataclass(frozen=True)
class Written:
    versions: list[WrittenVersion]  # the objects the plan wrote, with their new resourceVersions
    whole: bool  # False: a refusal or a NameConflict stopped the plan half-way (and the kind does not retry it)


def apply_plan(kube: Kube, rules: Rules, body: dict, plan: Plan, post_event: BoundEventSink,
               clock: Callable[[], dt.datetime]) -> Written:
    """Write ``plan`` of the resource ``body`` (as the decision read it) in the order above."""
    writer = PlanWriter(kube, rules, body, post_event, clock)
    plan = one_status_write(plan)
    if plan.record_first:
        writer.patch_status(plan.record_first)
    plan, refused = writer.write_children(plan)
    writer.write_status(plan)
    deletes = [] if refused else plan.deletes  # nothing is removed on a half-applied plan
    if deletes and rules.keep_deletes is not None:
        deletes = rules.keep_deletes(kube, writer.namespace, writer.name, deletes)
    events, refused_delete = writer.delete(deletes, plan)
    for kind, reason, message in list(plan.events) + events:
        post_event(kind, reason, message)
    stopped = refused or refused_delete
    if stopped and rules.retry_refused:
        raise stopped  # the loop retries after its error delay (the policy or quota may change)
    if stopped:
        return Written(writer.written, whole=False)
    for count in plan.counts:
        getattr(metrics, count.counter)(writer.namespace, writer.name, *count.labels)
    return Written(writer.written, whole=True)


@dataclass
class PlanWriter:
    """The writes of one plan: what it wrote (the serving's loop waits for their watch events), and the
    resource's resourceVersion as its own status patches move it."""

    kube: Kube
    rules: Rules
    body: dict  # the resource as the decision read it
    post_event: BoundEventSink
    clock: Callable[[], dt.datetime]
    written: list[WrittenVersion] = field(default_factory=list)

    def __post_init__(self) -> None:
        meta = self.body.get("metadata") or {}
        self.namespace, self.name = meta.get("namespace"), meta.get("name")
        self.version = meta.get("resourceVersion")
        self.log = self.rules.log

    def remember(self, plural: str, response: dict | None) -> None:
        if response and response.get("metadata", {}).get("resourceVersion"):
            self.written.append((plural, response["metadata"]["name"], response["metadata"]["resourceVersion"]))

    def patch_status(self, status: dict) -> None:
        guard = {"metadata": {"resourceVersion": self.version}} if self.rules.guarded_status and self.version else {}
        try:
            response = self.kube.patch(self.rules.status_path(self.namespace, self.name), {"status": status, **guard})
        except ApiError as exc:
            if exc.status in self.rules.reported:  # the status cannot say it: an Event must
                self.post_event("Warning", WRITE_REFUSED, f"status update refused by the apiserver (HTTP "
                                                          f"{exc.status}): {apiserver_message(exc)}")
            raise
        self.remember(self.rules.plural, response)
        self.version = ((response or {}).get("metadata") or {}).get("resourceVersion") or self.version

    def refused_plan(self, plan: Plan, write: Write, exc: ApiError, status: dict | None = None) -> Plan:
        meta = self.body.get("metadata") or {}
        status = self.body.get("status") or {} if status is None else status
        return self.rules.refused(plan, write, exc, status, self.clock(), meta.get("generation")) \
            if self.rules.refused else Plan()

    def write_children(self, plan: Plan) -> tuple[Plan, ApiError | None]:
        """The plan's child writes in order, until one is refused: then the plan as far as it can go."""
        for write in plan.writes:
            try:
                if write.verb == "create":
                    self.create(write)
                else:
                    self.log.info("%s/%s: patch %s", self.namespace, self.name, write.path)
                    self.remember(write.plural, self.kube.patch(write.path, write.body))
            except ApiError as exc:
                if exc.status not in self.rules.reported and not isinstance(exc, NameHeld):
                    raise
                self.log.warning("%s/%s: %s %s refused: %s", self.namespace, self.name, write.verb, write.path, exc)
                return self.refused_plan(plan, write, exc), exc
        return plan, None

    def create(self, write: Write) -> None:
        """Create, as the resource's own child; AlreadyExists: adopt ours, NameConflict for someone else's."""
        metadata = write.body["metadata"]
        if not metadata.get("ownerReferences"):  # deleted with the resource, and known as ours
            metadata["ownerReferences"] = [owner_reference(self.rules, self.body)]
        self.log.info("%s/%s: create %s %s", self.namespace, self.name, write.kind, write.name)
        response = self.kube.create(write.path, write.body)
        if response is not None:
            self.remember(write.plural, response)
            return
        # AlreadyExists (Kube.create answers None). The watches see only labelled children, so a same-named
        # object without the labels (a hand-made Service of a migration, a ConfigMap a stage Job would mount)
        # reaches the operator here first, and using it would hand the resource's name to someone else's object.
        uid = (self.body.get("metadata") or {}).get("uid")
        existing = self.rules.holder(self.kube, self.namespace, write) if self.rules.holder and uid else None
        if existing is None:
            return
        if not owned_by(existing, uid):
            raise NameHeld(write, self.rules.conflict_message(write))
        if self.rules.restore_labels:  # our own object whose labels someone removed is out of the watches' sight
            labels = existing["metadata"].get("labels") or {}
            lost = {key: value for key, value in (metadata.get("labels") or {}).items() if labels.get(key) != value}
            if lost:
                self.log.warning("%s/%s: %s %s lost its labels %s; putting them back", self.namespace, self.name,
                                 write.kind, write.name, sorted(lost))
                self.remember(write.plural, self.kube.patch(f"{write.path}/{write.name}", {"metadata": {"labels": lost}}))

    def write_status(self, plan: Plan) -> None:
        if not plan.status:
            return
        self.log.info("%s/%s: status %s", self.namespace, self.name, sorted(plan.status))
        try:
            self.patch_status(plan.status)
        except ApiError:
            for kind, reason, message in plan.events:  # a child's refusal is still told, by its Event
                if reason == WRITE_REFUSED:
                    self.post_event(kind, reason, message)
            raise

    def delete(self, deletes: list[str], plan: Plan) -> tuple[list[Event], ApiError | None]:
        """Delete, until the apiserver refuses one the kind reports: then the plan's status says so, and the
        Events that refusal is worth come back."""
        for path in deletes:
            self.log.info("%s/%s: delete %s", self.namespace, self.name, path)
            read_at = plan.delete_if_unchanged.get(path)
            try:
                self.kube.delete(path, resource_version=read_at)
            except ApiError as exc:
                if exc.status == 409 and read_at is not None:
                    self.log.info("%s/%s: kept %s: it changed since the decision read it", self.namespace,
                                  self.name, path)
                    continue
                if exc.status not in self.rules.reported:
                    raise
                status_now = {**(self.body.get("status") or {}), **plan.record_first, **plan.status}
                plural, name = path.rsplit("/", 2)[-2:]
                target = Write("delete", plural, path, {"metadata": {"name": name}})
                reported = self.refused_plan(Plan(), target, exc, status_now)
                if reported.status:
                    self.patch_status(reported.status)
                return reported.events, exc
        return [], None
