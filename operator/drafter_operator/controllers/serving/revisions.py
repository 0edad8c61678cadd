"""Revisions: one immutable engine + target + drafter configuration, named by a stable hash.

Only what changes the engine process is hashed (engine, image, target, drafter, GPUs and nodes per replica, and
the batch-size schedule of spec.drafter.dynamic once one is learned): changing replicas, placement or
the startup timeout updates the running revision in place and never starts a second 547 GB model load.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from drafter_operator.api import DrafterServingSpec

REVISION_HASH_LENGTH = 10


Schedule = Sequence[tuple[int, int, int]]


def revision_config(spec: DrafterServingSpec, image: str, schedule: Schedule | None = None) -> dict:
    config = {
        "engine": spec.engine,
        "image": image,
        "target": spec.target.model_dump(mode="json", by_alias=True, exclude_none=True),
        "drafter": spec.drafter.model_dump(mode="json", by_alias=True, exclude_none=True,
                                           exclude={"allow_known_bad"}),
        "gpusPerReplica": spec.resources.gpus_per_replica,
    }
    if (spec.resources.nodes_per_replica or 1) > 1:
        # A replica over several nodes is another engine process (its ranks) and another kind of workload; absent
        # on one node, so every revision from before keeps its name.
        config["nodesPerReplica"] = spec.resources.nodes_per_replica
    if schedule:  # absent without one, so a static-k revision keeps its name
        config["schedule"] = [list(entry) for entry in schedule]
    return config


def revision_hash(spec: DrafterServingSpec, image: str, schedule: Schedule | None = None) -> str:
    """The revision name; with ``schedule`` (spec.drafter.dynamic), the name of the static-k revision run
    with it: a new engine process, a new name."""
    canonical = json.dumps(revision_config(spec, image, schedule), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:REVISION_HASH_LENGTH]


def measured_as(active: str | None, speculation_schedule: dict | None) -> tuple[str, ...]:
    """The revisions whose benchmarks describe the drafter the ``active`` revision runs: itself and, when
    it is the revision running a learned schedule (status.speculationSchedule.scheduledRevision), the
    static-k revision the sweep measured. The schedule only stops drafting at loads where it does not
    pay; drafter, k and draft cost are the same."""
    if not active:
        return ()
    block = speculation_schedule or {}
    static = block.get("revision")
    return (active, static) if block.get("scheduledRevision") == active and static and static != active else (active,)


#: The spec fields that shape a revision's pods beyond its engine process: changed, they are rolled into
#: the running revision's pods in place (one at a time), not a new revision.
#: spec.capture is one: it adds the engine's request logging and a sidecar, and changes nothing the revision's
#: benchmarks and acceptance describe.
POD_SETTINGS = ("resources", "placement", "storage", "startup", "env", "env_from", "pod", "capture")


def pod_settings_hash(spec: DrafterServingSpec) -> str:
    """A short hash of the pod settings: a Deployment records the one its template was rendered from, so
    only a change of these rewrites the template (never a replicas change or an operator upgrade)."""
    settings = spec.model_dump(mode="json", by_alias=True, exclude_none=True, include=set(POD_SETTINGS))
    canonical = json.dumps(settings, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:REVISION_HASH_LENGTH]
