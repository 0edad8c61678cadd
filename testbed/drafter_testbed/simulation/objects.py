"""How every part of the simulated world reads the store's objects alike: pods and their owners, readiness, template
hashes, and which objects run a revision's pods (its workloads: a Deployment, or a LeaderWorkerSet for a replica that
spans nodes). One home, so that the controllers, the operations and the invariants agree on what a workload is."""

from __future__ import annotations

import hashlib
import json

NS = "team"
POD_COLLECTION = f"/api/v1/namespaces/{NS}/pods"
#: The kinds that run a revision's pods, by their plural (resources/workloads.py in the operator).
WORKLOAD_PLURALS = ("deployments", "leaderworkersets")
GPUS_PER_NODE = 8


def template_hash(template: dict) -> str:
    return hashlib.sha1(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]


def ready(pod: dict) -> bool:
    status = pod.get("status") or {}
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def owner_uid(obj: dict) -> str | None:
    refs = obj["metadata"].get("ownerReferences") or []
    return refs[0].get("uid") if refs else None


def pod_gpus(pod: dict) -> int:
    for container in pod["spec"].get("containers") or []:
        limits = (container.get("resources") or {}).get("limits") or {}
        if "nvidia.com/gpu" in limits:
            return int(limits["nvidia.com/gpu"])
    return GPUS_PER_NODE


def is_workload(key: str) -> bool:
    return any(f"/{plural}/" in key for plural in WORKLOAD_PLURALS)


def workloads_of(store: dict, uid: str | None) -> dict[str, dict]:
    """The workloads the object with this uid (a serving) owns, by key."""
    return {k: o for k, o in store.items() if uid and is_workload(k) and owner_uid(o) == uid}


def pod_templates(workload: dict) -> dict:
    """What a workload makes its pods from: a Deployment's template, a LeaderWorkerSet's leader and worker
    templates; a change of it restarts pods."""
    spec = workload.get("spec") or {}
    if "leaderWorkerTemplate" in spec:
        return spec["leaderWorkerTemplate"]
    return spec.get("template") or {}
