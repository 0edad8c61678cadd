"""Thin kopf handlers: each hands the object to its reconciler.

Handlers are synchronous on purpose: kopf runs them in its thread pool, so the (blocking) kubernetes
REST client never stalls the event loop. A serving's Deployments, pods and Service are kept in kopf
indexes fed by watches, so a reconcile reads no object from the API: in steady state it makes no
request at all (it polled three lists per serving every two seconds before; docs/performance.md).
"""

from __future__ import annotations

import copy
import datetime as dt
import logging
import os

import kopf

from drafter_operator.controllers.serving import ServingReconciler, observed_from
from drafter_operator.kube import Kube, load_api_client
from drafter_operator.monitoring import operator_metrics
from drafter_operator.resources.labels import SERVING_LABEL

GROUP, VERSION = "drafter.dev", "v1alpha1"
RECONCILE_SECONDS = float(os.environ.get("DRAFTER_RECONCILE_SECONDS", "2"))
# How long an old revision keeps running after traffic left it (connections in flight finish).
DRAIN_SECONDS = float(os.environ.get("DRAFTER_DRAIN_SECONDS", "15"))

_state: dict[str, object] = {}


def reconciler() -> ServingReconciler:
    if "serving" not in _state:
        kube = Kube(load_api_client())
        operator_metrics.track_api_requests(kube)
        _state["serving"] = ServingReconciler(kube, drain=dt.timedelta(seconds=DRAIN_SECONDS))
    return _state["serving"]  # type: ignore[return-value]


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_) -> None:
    # Progress and diff-base in annotations: status stays ours (and the printer columns clean).
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="drafter.dev")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix="drafter.dev")
    settings.posting.level = logging.WARNING  # our own Events carry the story; kopf posts only its warnings
    settings.watching.server_timeout = 270  # re-open watches before silent network drops can stall them
    settings.watching.client_timeout = 300
    settings.execution.max_workers = int(os.environ.get("DRAFTER_WORKERS", "8"))
    # A deleted serving waits for its timer to stop before kopf drops the finalizer; kopf re-checks a
    # running sync timer only every 60 s by default, which held 8 of 50 deleted servings (and their GPUs)
    # for a minute (bench/serving_scale.py).
    settings.background.cancellation_polling = 1.0


def _event_sink(body):
    return lambda kind, reason, message: kopf.event(body, type=kind, reason=reason, message=message[:1024])


def _by_serving(namespace: str | None, labels: kopf.Labels, body: kopf.Body) -> dict:
    # A snapshot: kopf's body is a live view, and the reconciler reads it from another thread.
    return {(namespace, labels[SERVING_LABEL]): copy.deepcopy(dict(body))}


@kopf.index("apps", "v1", "deployments", labels={SERVING_LABEL: kopf.PRESENT})
def serving_deployments(namespace, labels, body, **_):
    return _by_serving(namespace, labels, body)


@kopf.index("", "v1", "pods", labels={SERVING_LABEL: kopf.PRESENT})
def serving_pods(namespace, labels, body, **_):
    return _by_serving(namespace, labels, body)


@kopf.index("", "v1", "services", labels={SERVING_LABEL: kopf.PRESENT})
def serving_services(namespace, labels, body, **_):
    return _by_serving(namespace, labels, body)


def _reconcile(body: kopf.Body, serving_deployments: kopf.Index, serving_pods: kopf.Index,
               serving_services: kopf.Index) -> None:
    key = (body["metadata"]["namespace"], body["metadata"]["name"])
    service = next((s for s in serving_services.get(key, []) if s["metadata"]["name"] == key[1]), None)
    observed = observed_from(serving_deployments.get(key, []), serving_pods.get(key, []), service)
    reconciler().reconcile(dict(body), _event_sink(body), observed)


@kopf.on.resume(GROUP, VERSION, "drafterservings")
@kopf.on.create(GROUP, VERSION, "drafterservings")
@kopf.on.update(GROUP, VERSION, "drafterservings", field="spec")
def serving_changed(body: kopf.Body, serving_deployments: kopf.Index, serving_pods: kopf.Index,
                    serving_services: kopf.Index, **_) -> None:
    _reconcile(body, serving_deployments, serving_pods, serving_services)


@kopf.timer(GROUP, VERSION, "drafterservings", interval=RECONCILE_SECONDS, initial_delay=RECONCILE_SECONDS)
def serving_timer(body: kopf.Body, serving_deployments: kopf.Index, serving_pods: kopf.Index,
                  serving_services: kopf.Index, **_) -> None:
    _reconcile(body, serving_deployments, serving_pods, serving_services)
