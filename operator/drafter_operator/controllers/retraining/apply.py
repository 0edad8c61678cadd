"""Reconcile one DrafterServing's spec.retraining: read the serving and the trainings labelled as its retrainings,
decide (decide.py, pure), write the plan. Runs beside the serving's own loop, which never reads or writes
status.retraining; this one writes nothing else of the serving."""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import json
import logging
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Callable, ClassVar

from drafter_operator import timestamps
from drafter_operator.acceptance.measurement import ready_with_ip
from drafter_operator.capture.samples import SAMPLES_PATH, SAMPLES_PORT
from drafter_operator.constants import (
    API_GROUP_VERSION,
    RETRAINING_LABEL,
    SERVING_LABEL,
    SERVING_PLURAL,
    TRAINING_PLURAL,
)
from drafter_operator.controllers.apply_plan import Rules, apply_plan
from drafter_operator.controllers.one_at_a_time import EventSink, ObjectLocks, OneAtATime
from drafter_operator.controllers.plan import Plan, Write
from drafter_operator.controllers.retraining.decide import NewSamples, RetrainingState, decide
from drafter_operator.kube import ApiError, Kube, object_path

log = logging.getLogger("drafter.retraining")

#: A capture sidecar answers from a cache of its claim in milliseconds; a pod that does not within this is skipped.
SAMPLES_TIMEOUT_S = 5.0


@dataclass
class RetrainingReconciler(OneAtATime):
    kube: Kube
    clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.timezone.utc)
    locks: ObjectLocks = field(default_factory=ObjectLocks)
    #: (namespace, serving, since) -> the capture's count; a parameter so tests can stand in for the pods.
    count_samples: Callable[[str, str, dt.datetime], NewSamples] = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.count_samples is None:
            self.count_samples = functools.partial(ask_capture, self.kube)
    kind: ClassVar[str] = "Retraining"
    body_field: ClassVar[str] = "serving"

    def observe(self, namespace: str, name: str) -> RetrainingState | None:
        body = self.kube.get(object_path(API_GROUP_VERSION, SERVING_PLURAL, namespace, name))
        if body is None or not (body.get("spec") or {}).get("retraining"):
            return None
        trainings = self.kube.list(object_path(API_GROUP_VERSION, TRAINING_PLURAL, namespace),
                                   label_selector=f"{RETRAINING_LABEL}={name}")
        return RetrainingState(serving=body, trainings=tuple(trainings), now=self.clock())

    def decide(self, state: RetrainingState) -> Plan:
        plan = decide(state)
        if plan.count_samples_since is not None:
            meta = state.serving["metadata"]
            counted = self.count_samples(meta["namespace"], meta["name"], plan.count_samples_since)
            plan = decide(dataclasses.replace(state, new_samples=counted))
        return plan

    def apply(self, body: dict, plan: Plan, post_event: EventSink) -> None:
        apply_plan(self.kube, RULES, body, plan, functools.partial(post_event, body), self.clock)


def ask_capture(kube: Kube, namespace: str, name: str, since: dt.datetime) -> NewSamples:
    """The prompts the serving's capture holds since ``since``, from the first of its Ready pods that answers (each
    capture sidecar counts the whole claim: capture/samples.py). The operator gets a number, never a prompt."""
    pods = kube.list(object_path("v1", "pods", namespace), label_selector=f"{SERVING_LABEL}={name}")
    ready = [pod for pod in pods if ready_with_ip(pod)]
    if not ready:
        return NewSamples(since, None, "no Ready pod of the serving to ask")
    problems = []
    query = urllib.parse.urlencode({"since": timestamps.format_seconds(since)})
    for pod in ready:
        url = f"http://{pod['status']['podIP']}:{SAMPLES_PORT}{SAMPLES_PATH}?{query}"
        try:
            with urllib.request.urlopen(url, timeout=SAMPLES_TIMEOUT_S) as response:
                return NewSamples(since, int(json.load(response)["prompts"]))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            problems.append(f"{pod['metadata']['name']}: {exc}")
    return NewSamples(since, None, "; ".join(problems)[:300])


def status_path(namespace: str, name: str) -> str:
    return object_path(API_GROUP_VERSION, SERVING_PLURAL, namespace, name, "status")


def _holder(kube: Kube, namespace: str, write: Write) -> dict | None:
    return kube.get(object_path(API_GROUP_VERSION, TRAINING_PLURAL, namespace, write.name))


def _refused(plan: Plan, write: Write, exc: ApiError, status: dict, now: dt.datetime, generation) -> Plan:
    """A training the apiserver refused (its template breaks a rule of DrafterTraining, a quota) or whose name
    someone else's training holds: nothing counts as started; status.retraining and a Warning say why, and the
    next reconcile tries again."""
    message = f"DrafterTraining {write.name} was not created: {getattr(exc, 'message', None) or exc}"[:1024]
    recorded = status.get("retraining") or {}
    return Plan(status={"retraining": {**recorded, "waiting": message}},
                events=[("Warning", "RetrainingRefused", message)])


#: The trainings it creates carry their owner reference. A create that meets AlreadyExists reads the holder: ours
#: is the run already started (its run number is in the name); someone else's is refused, never used.
RULES = Rules(kind="DrafterServing", plural=SERVING_PLURAL, status_path=status_path, log=log, holder=_holder,
              conflict_message=lambda write: f"a DrafterTraining named {write.name} exists and is not this "
                                             "serving's: rename or delete it",
              reported=(403, 422), refused=_refused)
