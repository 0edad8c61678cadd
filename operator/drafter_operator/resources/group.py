"""Pure builder for a revision whose replica spans several nodes: a LeaderWorkerSet (LWS v0.9.0).

A replica is a group of ``nodesPerReplica`` pods, one per node: the leader (worker index 0) runs the engine's API
server, the workers join its process group (engines/group.py says how each engine is told). LWS makes a leader
StatefulSet of one pod per group and, per group, a StatefulSet of its workers, and restarts the whole group when one
of its pods fails (``RecreateGroupOnPodRestart``): a tensor- or pipeline-parallel engine cannot lose a rank and go on.

What the rest of the operator relies on, as for a Deployment:

- the object carries the revision's labels and ``spec.replicas`` (groups), and its status ``readyReplicas`` (groups
  whose every pod is Ready) and ``observedGeneration``;
- the leader pods carry the revision's labels, so the Service, the acceptance watch, the gate and the drain select
  them and nothing else; the workers carry the revision and the serving's instance but not ``SERVING_LABEL``: no
  traffic reaches a pod that serves no API, and the operator's pod index (which selects that label) sees the
  leaders, whose readiness is the group's (LWS recreates the group when a worker fails).
"""

from __future__ import annotations

from drafter_operator.api import DrafterServing
from drafter_operator.constants import COMPONENT_LABEL, SERVING_LABEL
from drafter_operator.resources import pod_policy
from drafter_operator.resources.capture import CLAIM_VOLUME
from drafter_operator.resources.engine import EnginePod, file_annotations
from drafter_operator.resources.labels import revision_labels
from drafter_operator.resources.names import child_name

LWS_GROUP = "leaderworkerset.x-k8s.io"
LWS_VERSION = "v1"
LWS_API_VERSION = f"{LWS_GROUP}/{LWS_VERSION}"
KIND = "LeaderWorkerSet"
PLURAL = "leaderworkersets"
#: The label LWS puts on every pod of a set (its name), and on each pod its index in the group (0: the leader).
SET_LABEL = "leaderworkerset.sigs.k8s.io/name"
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
#: The most groups a set may have: spec.replicas' bound (api/serving/spec.py).
MAX_GROUPS = 64
#: A StatefulSet's pods carry ``controller-revision-hash: <statefulset>-<hash of up to 10>``, a label value of at
#: most 63, so a StatefulSet name is at most 52; LWS names each group's worker StatefulSet ``<set>-<group>``.
GROUP_NAME_MAX = 52 - len(f"-{MAX_GROUPS - 1}")
#: What the workers' template says they are (the leader's template keeps the revision's "engine").
WORKER_COMPONENT = "engine-worker"


def group_name(serving: str, revision: str) -> str:
    """The revision's LeaderWorkerSet: ``<serving>-<revision>``, shortened with a hash where it would not leave its
    StatefulSets' labels room."""
    return child_name(serving, revision, GROUP_NAME_MAX)


def worker_labels(serving: str, revision: str) -> dict[str, str]:
    """The revision's labels less ``SERVING_LABEL``: the Service and the operator's pod index select the leaders."""
    labels = {**revision_labels(serving, revision), COMPONENT_LABEL: WORKER_COMPONENT}
    del labels[SERVING_LABEL]
    return labels


def worker_pod_spec(leader: dict, argv: list[str]) -> dict:
    """A worker's pod: the leader's (its GPUs, volumes, placement, environment) running ``argv``, without the API's
    port and probes (a worker serves no HTTP; its health is its group's) and without the drafter preflight (the
    leader's checks the same files)."""
    spec = {**leader, "containers": [dict(c) for c in leader["containers"]]}
    engine = spec["containers"][0]
    engine["command"] = list(argv)
    for key in ("ports", "startupProbe", "readinessProbe", "livenessProbe"):
        engine.pop(key, None)
    spec.pop("initContainers", None)
    # Nor the capture sidecar (gone with the init containers) and its claim: a worker serves no requests, and a
    # claim mounted from every node would need ReadWriteMany for nothing.
    spec["volumes"] = [volume for volume in leader.get("volumes", []) if volume["name"] != CLAIM_VOLUME]
    return spec


def engine_group(serving: DrafterServing, revision: str, replicas: int, leader: EnginePod, worker_argv: list[str],
                 annotations: dict[str, str] | None = None) -> dict:
    """A revision's LeaderWorkerSet: ``replicas`` groups of ``spec.resources.nodesPerReplica`` pods, the leader
    running ``leader`` (its pod spec and the files its template carries), each worker ``worker_argv``."""
    name, namespace = serving.name, serving.namespace
    labels = revision_labels(name, revision)
    leader_template = pod_policy.template_metadata(labels, serving.spec.pod)
    worker_template = pod_policy.template_metadata(worker_labels(name, revision), serving.spec.pod)
    if leader.files:
        for template in (leader_template, worker_template):
            template["annotations"] = {**template.get("annotations", {}), **file_annotations(leader.files)}
    nodes = serving.spec.resources.nodes_per_replica or 1
    return {
        "apiVersion": LWS_API_VERSION,
        "kind": KIND,
        "metadata": {"name": group_name(name, revision), "namespace": namespace, "labels": labels,
                     "annotations": dict(annotations or {})},
        "spec": {
            "replicas": replicas,
            # Workers start with their leader: the engines' leader waits for every rank to join anyway.
            "startupPolicy": "LeaderCreated",
            # A change of pod settings rolls one group at a time, never with surge: GPUs are the scarce resource.
            "rolloutStrategy": {"type": "RollingUpdate",
                                "rollingUpdateConfiguration": {"maxUnavailable": 1, "maxSurge": 0}},
            "networkConfig": {"subdomainPolicy": "Shared"},
            "leaderWorkerTemplate": {
                "size": nodes,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": {"metadata": leader_template, "spec": leader.spec},
                "workerTemplate": {"metadata": worker_template, "spec": worker_pod_spec(leader.spec, worker_argv)},
            },
        },
    }

