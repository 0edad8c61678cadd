"""The kinds of object that run a revision's engine pods: a Deployment (a replica on one node) or a LeaderWorkerSet
(a replica that spans nodes: resources/group.py). The serving's controller reads and writes either the same way,
by the kind the object says it is."""

from __future__ import annotations

from dataclasses import dataclass

from drafter_operator.kube import object_path
from drafter_operator.resources import group


@dataclass(frozen=True)
class WorkloadKind:
    api_version: str
    plural: str
    kind: str

    def path(self, namespace: str, name: str | None = None) -> str:
        """The collection (no ``name``) or one object of it."""
        return object_path(self.api_version, self.plural, namespace, *((name,) if name else ()))


DEPLOYMENT = WorkloadKind("apps/v1", "deployments", "Deployment")
GROUP = WorkloadKind(group.LWS_API_VERSION, group.PLURAL, group.KIND)
KINDS = (DEPLOYMENT, GROUP)
PLURALS = tuple(kind.plural for kind in KINDS)
_BY_KIND = {kind.kind: kind for kind in KINDS}


def kind_of(workload: dict) -> WorkloadKind:
    """The kind of a revision's workload object: what it says (a watch event's body does; a list's items are given
    one where they are read, fresh.py), else a Deployment."""
    return _BY_KIND.get(workload.get("kind") or "", DEPLOYMENT)


def path_of(workload: dict) -> str:
    """The object's own path."""
    meta = workload["metadata"]
    return kind_of(workload).path(meta["namespace"], meta["name"])
