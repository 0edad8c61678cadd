"""The kinds of object that run a revision's engine pods: a Deployment (a replica on one node) or a LeaderWorkerSet
(a replica that spans nodes: resources/group.py). The serving's controller reads and writes either the same way,
by the kind the object says it is.

Paths are built by one small function per kind, each a plain ``object_path`` of constants, so the request scan
behind the chart's RBAC (tests/operator_requests.py) reads every path the controller sends."""

from __future__ import annotations

from dataclasses import dataclass

from drafter_operator.kube import object_path
from drafter_operator.resources import group


@dataclass(frozen=True)
class WorkloadKind:
    api_version: str
    plural: str
    kind: str


DEPLOYMENT = WorkloadKind("apps/v1", "deployments", "Deployment")
GROUP = WorkloadKind(group.LWS_API_VERSION, group.PLURAL, group.KIND)
KINDS = (DEPLOYMENT, GROUP)
PLURALS = tuple(kind.plural for kind in KINDS)
_BY_KIND = {kind.kind: kind for kind in KINDS}


def deployment_path(namespace: str, name: str | None = None) -> str:
    """A namespace's Deployments (no ``name``) or one of them."""
    return object_path("apps/v1", "deployments", namespace, name)


def group_path(namespace: str, name: str | None = None) -> str:
    """A namespace's LeaderWorkerSets (no ``name``) or one of them."""
    return object_path(group.LWS_API_VERSION, group.PLURAL, namespace, name)


def workload_path(namespace: str, kind: WorkloadKind, name: str | None = None) -> str:
    return group_path(namespace, name) if kind is GROUP else deployment_path(namespace, name)


def kind_of(workload: dict) -> WorkloadKind:
    """The kind of a revision's workload object: what it says (a watch event's body does; a list's items are given
    one where they are read, fresh.py), else a Deployment."""
    return _BY_KIND.get(workload.get("kind") or "", DEPLOYMENT)

