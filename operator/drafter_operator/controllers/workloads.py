"""Reading Kueue's Workloads for a resource that names spec.queueName (resources/queueing.py reads them)."""

from __future__ import annotations

from drafter_operator.kube import ApiError, Kube, object_path
from drafter_operator.resources.queueing import WORKLOAD_GROUP_VERSION, WORKLOAD_PLURAL


def queue_workloads(kube: Kube, namespace: str, body: dict) -> tuple[dict, ...]:
    """The namespace's Workloads when ``body`` names a queue; none otherwise, and none where Kueue is not
    installed (its API is missing: status then says the Job waits with no Workload)."""
    if not (body.get("spec") or {}).get("queueName"):
        return ()
    try:
        return tuple(kube.list(object_path(WORKLOAD_GROUP_VERSION, WORKLOAD_PLURAL, namespace)))
    except ApiError as exc:
        if exc.status != 404:
            raise
        return ()
