"""A DrafterServing and its children read straight from the apiserver, for the decisions that must not rest on
the watches' view (the kopf indexes).

The indexes can be behind in ways no single watch shows: each kind's watch lags on its own, and after a watch
gap kopf re-lists without telling the indexes what was deleted meanwhile, so they keep ghosts (a pod that is
gone, a Deployment someone deleted). A decision on such a view can re-create a revision recorded as failed,
wait for ever on a ghost pod, or point a gate at a dead pod's IP. `ServingReconciler` decides again from this
view before a plan acts on what it saw (`acts_on_the_view`), when the loop gave up waiting for its own writes to
come back through the watches, and now and then while a plan waits on the view.
"""

from __future__ import annotations

from typing import Mapping

from drafter_operator.constants import API_GROUP_VERSION, BENCHMARK_PLURAL, SERVING_LABEL, SERVING_PLURAL
from drafter_operator.controllers.serving.observe import Observed, benchmarked_serving, observed_from
from drafter_operator.kube import Kube, object_path
from drafter_operator.resources.labels import MANAGED_BY
from drafter_operator.resources.workloads import DEPLOYMENT, GROUP, deployment_path, group_path, kind_of


def read_view(kube: Kube, namespace: str, name: str, in_flight: Mapping[str, int]) -> tuple[dict, Observed] | None:
    """The serving and its children as the apiserver has them now (one GET and four LISTs), selected as the
    watches select them; None when the serving is gone or going. ``in_flight``: the engines' counts the loop
    read for this reconcile (a read of the pods, not of the apiserver), kept."""
    body = kube.get(object_path(API_GROUP_VERSION, SERVING_PLURAL, namespace, name))
    if body is None or body["metadata"].get("deletionTimestamp"):
        return None
    selector = ",".join([f"{SERVING_LABEL}={name}", *(f"{key}={value}" for key, value in MANAGED_BY.items())])
    # Deployments by the serving's label alone: one of ours whose managed-by label someone removed (GitOps, a
    # hand) is gone from the watches, and would hold its GPUs for ever unless seen here.
    # Each list item given its kind, as a watch event's body has it. LeaderWorkerSets (a replica over several nodes)
    # are listed for a serving whose spec spans nodes: one LIST more for every other serving's fresh read is not
    # worth it (a serving moved back to one node sees its older sets through the watches); without the
    # LeaderWorkerSet API in the cluster the apiserver answers 404, an empty list.
    deployments = [{**d, "kind": DEPLOYMENT.kind} for d in kube.list(deployment_path(namespace), f"{SERVING_LABEL}={name}")]
    if spans_nodes(body):
        deployments += [{**g, "kind": GROUP.kind} for g in kube.list(group_path(namespace), f"{SERVING_LABEL}={name}")]
    pods = kube.list(object_path("v1", "pods", namespace), selector)
    service = next((s for s in kube.list(object_path("v1", "services", namespace), selector)
                    if s["metadata"]["name"] == name), None)
    benchmarks = [b for b in kube.list(object_path(API_GROUP_VERSION, BENCHMARK_PLURAL, namespace))
                  if benchmarked_serving(b["metadata"].get("labels") or {}, b.get("spec") or {}) == name]
    observed = observed_from(deployments, pods, service, owner_uid=body["metadata"].get("uid"), benchmarks=benchmarks)
    observed.in_flight = {revision: count for revision, count in in_flight.items() if revision in observed.deployments}
    observed.unlabelled = tuple((kind_of(d).plural, d["metadata"]["name"]) for d in observed.deployments.values()
                                if unlabelled(d))
    return body, observed


def unlabelled(child: dict) -> bool:
    """Whether a child lacks a label the watches select it by."""
    labels = child["metadata"].get("labels") or {}
    return any(labels.get(key) != value for key, value in MANAGED_BY.items())


def spans_nodes(body: dict) -> bool:
    """Whether the serving's spec asks for replicas over several nodes (read leniently: a refused spec too)."""
    resources = (body.get("spec") or {}).get("resources") or {}
    nodes = resources.get("nodesPerReplica")
    return isinstance(nodes, int) and nodes > 1
