"""What one decision of any kind does: the `Plan` every controller's pure `decide` returns, and the
`Write`s and `Count`s it is made of. `apply_plan.py` carries a plan out, in one order for every kind.

A plan names its child writes by the apiserver paths they go to, so the executor needs to know nothing of
the kind that made them: what differs between kinds is the resource the plan is of and the few rules
`apply_plan.Rules` holds (whether its status patch is guarded, which refusals it reports itself).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field, replace

from drafter_operator.constants import BENCHMARK_PLURAL, SERVING_PLURAL, TRAINING_PLURAL
from drafter_operator.controllers.conditions import Event

#: The kind of each resource a plan writes, for the messages that name what was refused or is in the way.
KIND_OF_PLURAL = {
    "deployments": "Deployment",
    "leaderworkersets": "LeaderWorkerSet",
    "services": "Service",
    "jobs": "Job",
    "configmaps": "ConfigMap",
    "persistentvolumeclaims": "PersistentVolumeClaim",
    BENCHMARK_PLURAL: "DrafterBenchmark",
    SERVING_PLURAL: "DrafterServing",
    TRAINING_PLURAL: "DrafterTraining",
}


@dataclass(frozen=True)
class Write:
    """One child write: create a manifest in its collection, or merge-patch an object in place."""

    verb: str  # "create" (path: the collection; body: the manifest) | "patch" (path: the object; body: a JSON merge patch)
    plural: str  # a key of KIND_OF_PLURAL
    path: str
    body: dict

    @property
    def kind(self) -> str:
        return KIND_OF_PLURAL[self.plural]

    @property
    def name(self) -> str:
        """The object's name: the manifest's for a create, the path's last segment for a patch."""
        return (self.body.get("metadata") or {}).get("name") or self.path.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Count:
    """One increment of an operator counter once the plan is written: `counter` names a function of
    monitoring.operator_metrics called with the resource's namespace and name, then `labels`."""

    counter: str  # "swap" | "rollback"
    labels: tuple[str, ...]


@dataclass
class Plan:
    """What one decision does, in the order `apply_plan.py` writes it."""

    # A status patch written before any child is touched: a revision verdict (good or failed) the serving must
    # never lose to a crash half-way through the writes, so a restart never retries a failed revision; {} when none.
    record_first: dict = field(default_factory=dict)
    writes: list[Write] = field(default_factory=list)  # in order: a refused one stops those after it
    status: dict = field(default_factory=dict)  # only the fields that changed
    deletes: list[str] = field(default_factory=list)  # object paths; an object already gone is fine
    # Deletes that hold only for the object as the decision read it: path -> the resourceVersion read. The apiserver
    # keeps one that changed since (a Job a lagging list showed running that has finished meanwhile: its completion
    # is the record that its stage is done) and the next decision, on the newer view, decides again.
    delete_if_unchanged: dict[str, str] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    counts: list[Count] = field(default_factory=list)  # counters bumped once everything else is written
    # The next moment the clock alone changes the answer (a startup timeout, a drain ending); None: only
    # a change of the resource or its children does.
    recheck_at: dt.datetime | None = None
    # The decision waits on something it saw (pods to stop, a revision to start, a gate, a drain): a view that
    # is wrong about it (a ghost) would keep it waiting, so the reconciler checks that view now and then.
    waiting: bool = False
    # Nodes whose nvidia.com/gpu.product a known-bad row keyed by GPU waits for (the desired revision's pods run
    # there): the reconciler reads their labels and decides again.
    read_nodes: tuple[str, ...] = ()
    # A retraining's automatic trigger waits on spec.retraining.minNewSamples: the reconciler asks the capture for the
    # prompts it holds since this moment and decides again.
    count_samples_since: dt.datetime | None = None

    def writes_anything(self) -> bool:
        return bool(self.record_first or self.writes or self.status or self.deletes or self.events)

    def created(self, plural: str | None = None) -> list[dict]:
        """The manifests the plan creates (of ``plural`` only, when given), in order."""
        return [w.body for w in self.writes if w.verb == "create" and plural in (None, w.plural)]

    def counted(self, counter: str) -> Count | None:
        """The plan's increment of ``counter``, if it has one."""
        return next((c for c in self.counts if c.counter == counter), None)


def compose_merge_patches(first: dict, second: dict) -> dict:
    """One JSON merge patch (RFC 7386) with the effect of ``first`` then ``second``: objects merge key by key, and
    anything else in ``second`` (a value, a list, a null that removes) replaces what ``first`` said."""
    out = dict(first)
    for key, value in second.items():
        out[key] = compose_merge_patches(out[key], value) \
            if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def one_status_write(plan: Plan) -> Plan:
    """The plan with its record written in the same status write as its status when no child write comes between
    them: the record goes first only so that a crash amid the child writes cannot lose it. A serving's first
    Ready (its revision recorded good, its conditions) is then one write, not two."""
    if not plan.record_first or plan.writes:
        return plan
    return replace(plan, record_first={}, status=compose_merge_patches(plan.record_first, plan.status))
