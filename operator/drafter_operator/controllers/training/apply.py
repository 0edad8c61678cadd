"""Reconcile one DrafterTraining: observe (the training, its Jobs and their pods, its claim and spec
ConfigMaps, the objects under its children's names), decide (decide.py, pure), apply the plan.
Idempotent: Job and ConfigMap names carry the spec generation (and a Job's its attempt), so a repeated
reconcile or a restarted operator never starts a stage twice. A create that meets an object of the same
name that the training does not own stops the plan there: nothing after it (the stage Job that would
mount it) is created, and the next decision reports the NameConflict (children.py).
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
from dataclasses import dataclass, field
from typing import Callable, ClassVar

from drafter_operator import settings
from drafter_operator.constants import (
    API_GROUP_VERSION,
    BENCHMARK_PLURAL,
    COMPONENT_LABEL,
    GATE_LABEL,
    SERVING_LABEL,
    SERVING_PLURAL,
    TRAINING_LABEL,
    TRAINING_PLURAL,
)
from drafter_operator.controllers.training.decide import decide
from drafter_operator.controllers.training.state import TrainingState
from drafter_operator.controllers.training.children import earlier_ones, owned_by
from drafter_operator.controllers.training.observe import left_by_earlier
from drafter_operator.controllers.workloads import queue_workloads
from drafter_operator.controllers import conditions
from drafter_operator.controllers.apply_plan import Rules, apply_plan
from drafter_operator.controllers.plan import Plan, Write
from drafter_operator.controllers.one_at_a_time import EventSink, ObjectLocks, OneAtATime
from drafter_operator.kube import ApiError, Kube, object_path
from drafter_operator.monitoring import operator_metrics as metrics
from drafter_operator.resources.pod_policy import TenantPolicy
from drafter_operator.resources.training import hidden_states_claim_name
from drafter_operator.resources.training_engine import GENERATION_ENGINE
from drafter_operator.resources.training_job import CONTAINER as STAGE_CONTAINER
from drafter_operator.resources.training_job import rendezvous_service_name, spec_config_map_name

ENGINE_SELECTOR = f"{COMPONENT_LABEL}={GENERATION_ENGINE}"
#: Where the Job controller records a pod's index in an Indexed Job.
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"

log = logging.getLogger("drafter.training")

#: Lines of the running stage's log read per reconcile: the runner prints a progress line every few seconds.
LOG_TAIL_LINES = 40


def completion_index(pod: dict) -> int:
    """The pod's index in an Indexed Job (0 for any other pod)."""
    value = ((pod["metadata"].get("annotations") or {}).get(COMPLETION_INDEX_ANNOTATION) or "0")
    return int(value) if value.isdigit() else 0


def trainer_image() -> str:
    """The image stage Jobs run when spec.image is unset: the operator's trainer image."""
    return settings.TRAINER_IMAGE.read()


def render_args() -> tuple[str, ...]:
    """Extra run-stage options from the operator's settings: --cpu where no stage has a GPU (local cluster)."""
    return ("--cpu",) if settings.TRAINING_CPU.read() else ()


@dataclass
class TrainingReconciler(OneAtATime):
    kube: Kube
    image: str = field(default_factory=trainer_image)
    clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.timezone.utc)
    locks: ObjectLocks = field(default_factory=ObjectLocks)
    #: The administrator's tenancy settings, read at every reconcile (an upgrade or a restart may change them).
    tenant_policy: Callable[[], TenantPolicy] = TenantPolicy.from_env
    kind: ClassVar[str] = "DrafterTraining"
    decide = staticmethod(decide)  # the pure decision of this kind (the mixin calls it)
    body_field: ClassVar[str] = "training"  # where the state holds the resource's body

    def observe(self, namespace: str, name: str) -> TrainingState | None:
        body = self.kube.get(object_path(API_GROUP_VERSION, TRAINING_PLURAL, namespace, name))
        if body is None or body["metadata"].get("deletionTimestamp"):
            metrics.forget_training(namespace, name)  # a deleted run's failure must not page anyone
            return None  # owner references take the Jobs, ConfigMaps and the owned claim with it
        selector = f"{TRAINING_LABEL}={name}"
        from drafter_operator.api import DrafterTraining

        try:
            claim_name = hidden_states_claim_name(name, DrafterTraining.model_validate(body).spec)
        except ValueError:
            claim_name = None
        promote = ((body.get("spec") or {}).get("promote") or {}).get("servingRef") or {}
        jobs = tuple(self.kube.list(object_path("batch/v1", "jobs", namespace), label_selector=selector))
        pods = tuple(self.kube.list(object_path("v1", "pods", namespace), label_selector=selector))
        config_maps = self.kube.list(object_path("v1", "configmaps", namespace), label_selector=selector)
        uid = body["metadata"].get("uid")
        return TrainingState(
            training=body, jobs=jobs, job_pods=pods,
            claim=self.kube.get(object_path("v1", "persistentvolumeclaims", namespace, claim_name)) if claim_name else None,
            config_maps=frozenset(c["metadata"]["name"] for c in config_maps if owned_by(c, uid)),
            named=self._named(namespace, body), tenant_policy=self.tenant_policy(),
            earlier=tuple(sorted(c["metadata"]["name"] for c in config_maps
                                 if left_by_earlier(c, uid) and earlier_ones(c, name))),
            now=self.clock(), image=self.image, render_args=render_args(),
            serving=self.kube.get(object_path(API_GROUP_VERSION, SERVING_PLURAL, namespace, promote["name"]))
            if promote.get("name") else None,
            benchmarks=tuple(self.kube.list(object_path(API_GROUP_VERSION, BENCHMARK_PLURAL, namespace),
                                            label_selector=selector)),
            # The new drafter's figures by category come from the gate that measured its revision.
            gate_benchmarks=tuple(self.kube.list(object_path(API_GROUP_VERSION, BENCHMARK_PLURAL, namespace),
                                                 label_selector=f"{SERVING_LABEL}={promote['name']},{GATE_LABEL}=true"))
            if promote.get("name") else (),
            progress_log=self._running_log(namespace, jobs, pods),
            servings=tuple(self.kube.list(object_path(API_GROUP_VERSION, SERVING_PLURAL, namespace))),
            workloads=queue_workloads(self.kube, namespace, body),
            engine=tuple(obj for path in (object_path("apps/v1", "deployments", namespace),
                                          object_path("v1", "services", namespace))
                         for obj in self._kinded(self.kube.list(path, label_selector=f"{selector},{ENGINE_SELECTOR}"),
                                                 "Deployment" if "deployments" in path else "Service")))

    def _named(self, namespace: str, body: dict) -> tuple[dict, ...]:
        """The objects under this generation's spec ConfigMap name and, across nodes, the rendezvous Service
        name, found by name: one made by hand carries no label the lists above select."""
        name = body["metadata"]["name"]
        found = [{**c, "kind": "ConfigMap"} for c in config_map_named(
            self.kube, namespace, spec_config_map_name(name, body["metadata"].get("generation") or 1))]
        if (((body.get("spec") or {}).get("resources") or {}).get("nodes") or 1) > 1:
            service = self.kube.get(object_path("v1", "services", namespace, rendezvous_service_name(name)))
            found += [{**service, "kind": "Service"}] if service is not None else []
        return tuple(found)

    @staticmethod
    def _kinded(items: list[dict], kind: str) -> list[dict]:
        # List items carry no kind; the decide tells Deployments from Services by it.
        return [{**item, "kind": kind} for item in items]

    def _running_log(self, namespace: str, jobs: tuple[dict, ...], pods: tuple[dict, ...]) -> str | None:
        """The log tail of the running stage pod (its drafter-progress lines), or None. Of a stage across nodes,
        pod 0's first: Train's rank 0 is the one whose trainer logs its steps."""
        unfinished = {j["metadata"]["name"] for j in jobs if conditions.job_finished(j) is None}
        for pod in sorted(pods, key=completion_index):
            if (pod["metadata"].get("labels") or {}).get("job-name") in unfinished \
                    and (pod.get("status") or {}).get("phase") == "Running":
                try:
                    return self.kube.read_text(object_path("v1", "pods", namespace, pod["metadata"]["name"], "log"),
                                               query={"container": STAGE_CONTAINER, "tailLines": str(LOG_TAIL_LINES)})
                except ApiError as exc:  # the kubelet may not answer for a moment: progress waits
                    log.debug("%s: no log: %s", pod["metadata"]["name"], exc)
        return None

    def apply(self, body: dict, plan: Plan, post_event: EventSink) -> None:
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        written = apply_plan(self.kube, RULES, body, plan, functools.partial(post_event, body), self.clock)
        if written.whole:  # a plan a NameConflict stopped wrote no status: the gauges keep what they said
            metrics.set_training_state(namespace, name, {**(body.get("status") or {}), **plan.status})


def config_map_named(kube: Kube, namespace: str, name: str) -> list[dict]:
    """The ConfigMap ``name``, by a list that selects its name (the operator may list ConfigMaps, not get them)."""
    return kube.list(object_path("v1", "configmaps", namespace), field_selector=f"metadata.name={name}")


def holder(kube: Kube, namespace: str, write: Write) -> dict | None:
    """Who holds the name a create found taken, for the children a stage Job uses by name."""
    if write.plural == "configmaps":
        return next(iter(config_map_named(kube, namespace, write.name)), None)
    if write.plural == "services":
        return kube.get(object_path("v1", "services", namespace, write.name))
    if write.plural == "persistentvolumeclaims":
        return kube.get(object_path("v1", "persistentvolumeclaims", namespace, write.name))
    return None  # a Job, engine or benchmark of the training's names: none is mounted by name


def refused(plan: Plan, write: Write, exc: ApiError, status: dict, now: dt.datetime, generation: int | None) -> Plan:
    """After a NameConflict: nothing that would use the object (a stage Job would mount it) is created, and the
    next decision reports the conflict (children.py); this one only says so."""
    return Plan(events=[("Warning", "NameConflict", getattr(exc, "message", str(exc)))])


def status_path(namespace: str, name: str) -> str:
    return object_path(API_GROUP_VERSION, TRAINING_PLURAL, namespace, name, "status")


RULES = Rules(
    kind="DrafterTraining",
    plural=TRAINING_PLURAL,
    status_path=status_path,
    log=log,
    holder=holder,
    conflict_message=lambda write: (f"{write.kind} {write.name} already exists and is not this training's: "
                                    "nothing that would use it was created"),
    refused=refused,
    retry_refused=False,  # the next decision reports the conflict: no error to retry after
)
