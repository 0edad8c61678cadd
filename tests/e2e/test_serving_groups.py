"""A serving whose replica spans two 8-GPU nodes, against the real LeaderWorkerSet v0.9.0 controller and webhooks
(drafter_testbed/lws.py): the operator's LeaderWorkerSet is admitted, LWS makes each group's leader and worker on the
tests' own kwok nodes, the serving gets Ready on its leaders, a lost worker re-creates its group and the serving is
Ready again, and a BlueGreen drafter swap replaces one set with another."""

from __future__ import annotations

import pytest

from drafter_operator.resources import group
from tests.support.e2e_lws import LWS_TOLERATION, lws_nodes, lws_running  # noqa: F401 (fixtures)
from tests.support.e2e_serving import apply, condition, seed_serving, serving_status, wait_ready

LWS_NAME = group.SET_LABEL


def two_node_serving(nodes: list[str], name: str = "kimi-2n") -> dict:
    serving = seed_serving(name, gpu_product="NVIDIA-H100-80GB-HBM3")
    spec = serving["spec"]
    spec["target"].update(tensorParallelSize=8, dataParallelSize=2, expertParallel=True)
    spec["resources"] = {"gpusPerReplica": 8, "nodesPerReplica": 2}
    spec["placement"] = {"gpuProduct": "NVIDIA-H100-80GB-HBM3", "tolerations": [LWS_TOLERATION],
                         "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                             "nodeSelectorTerms": [{"matchExpressions": [
                                 {"key": "kubernetes.io/hostname", "operator": "In", "values": nodes}]}]}}}}
    spec.pop("acceptance", None)  # kwok pods run no engine: nothing to scrape
    spec["swap"] = {"strategy": "BlueGreen", "drainTimeout": "5s"}
    return serving


def sets(cluster, namespace: str) -> dict[str, dict]:
    return {s["metadata"]["name"]: s for s in cluster.get_json("-n", namespace, group.PLURAL)["items"]}


def group_pods(cluster, namespace: str, set_name: str) -> dict[str, dict]:
    items = cluster.get_json("-n", namespace, "pods", "-l", f"{LWS_NAME}={set_name}")["items"]
    return {p["metadata"]["name"]: p for p in items if not p["metadata"].get("deletionTimestamp")}


@pytest.mark.cluster_lock("lws-nodes")
def test_a_two_node_serving_is_a_leader_worker_set_the_real_controller_runs_through_a_lost_worker_and_a_swap(
        cluster, namespace, operator, lws_running, lws_nodes, model_volume):  # noqa: F811
    apply(cluster, namespace, two_node_serving(lws_nodes))
    ready = wait_ready(cluster, namespace, "kimi-2n", timeout=120)
    first = ready["activeRevision"]
    (name, lws), = sets(cluster, namespace).items()
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2 and lws["metadata"]["labels"]["drafter.dev/revision"] == first
    pods = group_pods(cluster, namespace, name)
    assert sorted(pods) == [f"{name}-0", f"{name}-0-1"], sorted(pods)
    leader, worker = pods[f"{name}-0"], pods[f"{name}-0-1"]
    assert leader["metadata"]["labels"].get("drafter.dev/serving") == "kimi-2n"
    assert "drafter.dev/serving" not in worker["metadata"]["labels"]  # the Service never sends a request to a worker
    lead_cmd, work_cmd = leader["spec"]["containers"][0]["command"], worker["spec"]["containers"][0]["command"]
    assert "--headless" in work_cmd and "--headless" not in lead_cmd
    for pod in (leader, worker):  # each pod holds its whole node's GPUs
        assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"
    env = {e["name"]: e.get("value") for e in worker["spec"]["containers"][0]["env"]}
    assert env["LWS_LEADER_ADDRESS"] == f"{name}-0.{name}.{namespace}" and env["LWS_WORKER_INDEX"] == "1"
    assert {leader["spec"]["nodeName"], worker["spec"]["nodeName"]} <= set(lws_nodes)
    service = cluster.get_json("-n", namespace, "service", "kimi-2n")
    assert service["spec"]["selector"]["drafter.dev/revision"] == first

    # A lost worker takes its group down (RecreateGroupOnPodRestart); the serving is Ready again on the new group.
    old_leader_uid = leader["metadata"]["uid"]
    cluster.kubectl("-n", namespace, "delete", "pod", f"{name}-0-1", "--wait=false")
    cluster.wait_for("the group re-created", lambda: (p := group_pods(cluster, namespace, name)).get(f"{name}-0") and
                     p[f"{name}-0"]["metadata"]["uid"] != old_leader_uid and len(p) == 2, timeout=90)
    again = wait_ready(cluster, namespace, "kimi-2n", revision=first, timeout=120)
    assert again["activeRevision"] == first

    # A drafter swap: a new set, traffic moved, the old set deleted.
    body = cluster.get_json("-n", namespace, "drafterserving", "kimi-2n")
    body["spec"]["drafter"]["numSpeculativeTokens"] = 3
    apply(cluster, namespace, {"apiVersion": body["apiVersion"], "kind": body["kind"],
                               "metadata": {"name": "kimi-2n"}, "spec": body["spec"]})
    swapped = cluster.wait_for("the swap to the new set", lambda: (s := serving_status(cluster, namespace, "kimi-2n"))
                               .get("activeRevision") not in (None, first)
                               and condition(s, "Ready").get("status") == "True" and s, timeout=180)
    cluster.wait_for("the old set deleted", lambda: len(sets(cluster, namespace)) == 1, timeout=120)
    (remaining,) = sets(cluster, namespace).values()
    assert remaining["metadata"]["labels"]["drafter.dev/revision"] == swapped["activeRevision"]
