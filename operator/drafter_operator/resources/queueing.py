"""Kueue, the one home of what the operator knows of it (pure): how a Job asks for admission, and how to read
why it still waits.

A Job joins a Kueue LocalQueue through the ``kueue.x-k8s.io/queue-name`` label and is created suspended, as
Kueue's documentation asks of Jobs (its webhook would suspend it too, but a Job that starts before the webhook
sees it would hold GPUs outside the quota). Kueue makes a Workload for it (owned by the Job, one pod set per
Job: all its ``parallelism`` pods) and unsuspends the Job only once the whole pod set fits the ClusterQueue's
quota: gang admission, so a stage across nodes never holds some of its GPUs while the rest wait. While it
waits, the Workload's ``QuotaReserved`` condition (False) says why, e.g. "couldn't assign flavors to pod set
main: insufficient unused quota for nvidia.com/gpu in flavor default-flavor, 1 more needed".
"""

from __future__ import annotations

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
WORKLOAD_GROUP_VERSION = "kueue.x-k8s.io/v1beta2"
WORKLOAD_PLURAL = "workloads"


def queued(job: dict, queue_name: str | None) -> dict:
    """``job`` joined to the LocalQueue ``queue_name`` (labelled and suspended); unchanged without a queue."""
    if not queue_name:
        return job
    metadata = {**job["metadata"], "labels": {**(job["metadata"].get("labels") or {}), QUEUE_LABEL: queue_name}}
    return {**job, "metadata": metadata, "spec": {**job["spec"], "suspend": True}}


def workload_of(job: dict, workloads: tuple[dict, ...]) -> dict | None:
    """The Workload Kueue made for ``job``: the one its controller reference names."""
    uid = job["metadata"].get("uid")
    return next((w for w in workloads if uid and any(
        ref.get("uid") == uid and ref.get("controller") for ref in w["metadata"].get("ownerReferences") or [])), None)


def admission_wait(job: dict, workloads: tuple[dict, ...]) -> str | None:
    """Why a queued Job is not running yet (None once Kueue admitted it, or for a Job in no queue)."""
    queue = (job["metadata"].get("labels") or {}).get(QUEUE_LABEL)
    if not queue or not (job.get("spec") or {}).get("suspend"):
        return None
    workload = workload_of(job, workloads)
    if workload is None:
        return f"waits in queue {queue} for Kueue to see it (no Workload yet: is Kueue running, and the LocalQueue there?)"
    conditions = {c.get("type"): c for c in (workload.get("status") or {}).get("conditions") or []}
    reserved = conditions.get("QuotaReserved") or {}
    if reserved.get("status") == "True":
        return f"admitted in queue {queue}, starting"
    reason = reserved.get("message") or reserved.get("reason") or "no quota reserved yet"
    return f"waits in queue {queue}: {reason}"
