"""A real LeaderWorkerSet v0.9.0 controller and its webhooks (drafter_testbed/lws.py) in the local cluster: a
LeaderWorkerSet becomes a leader StatefulSet and one worker StatefulSet per group, whose pods (on kwok 8-GPU nodes)
carry LWS's labels and environment, and losing one pod of a group re-creates the whole group."""

from __future__ import annotations

import yaml

from tests.support.e2e_lws import LWS_NODES, LWS_TOLERATION, lws_nodes, lws_running
from tests.support.listening import listening_addresses

NAME = "engine"
SIZE = 2  # a leader and one worker
REPLICAS = 2


def engine_pod_spec(nodes: list[str]) -> dict:
    """A pod of a whole 8-GPU node, on the tests' own kwok nodes only (kwok marks it running)."""
    return {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}, LWS_TOLERATION],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": nodes}]}]}}},
            "containers": [{"name": "engine", "image": "vllm/vllm-openai:v0.33.0", "command": ["sleep", "infinity"],
                            "env": [{"name": "ENGINE_ROLE", "value": "any"}],
                            "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}


def pods_of(cluster, namespace: str) -> dict[str, dict]:
    items = cluster.get_json("pods", "-n", namespace, "-l", f"leaderworkerset.sigs.k8s.io/name={NAME}")["items"]
    return {p["metadata"]["name"]: p for p in items}


def running(pods: dict[str, dict]) -> bool:
    return len(pods) == SIZE * REPLICAS and all(
        (p.get("status") or {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp") for p in pods.values())


def env_of(pod: dict) -> dict[str, str]:
    (container,) = pod["spec"]["containers"]
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def test_a_leader_worker_set_runs_its_groups_with_lws_labels_and_env_and_recreates_a_group_that_loses_a_worker(
        cluster, namespace, lws_running, lws_nodes):
    lws = lws_running
    body = lws.leader_worker_set(namespace, NAME, replicas=REPLICAS, size=SIZE, pod_spec=engine_pod_spec(lws_nodes))
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(body))
    pods = cluster.wait_for("4 pods of the LeaderWorkerSet running", lambda: (
        p if running(p := pods_of(cluster, namespace)) else None), timeout=90)

    # StatefulSets: the leaders' (one pod per group) and, per group, its workers' (named after the leader pod)
    sets = {s["metadata"]["name"]: s for s in cluster.get_json("statefulsets", "-n", namespace)["items"]}
    assert sorted(sets) == [NAME, f"{NAME}-0", f"{NAME}-1"]
    assert sets[NAME]["spec"]["replicas"] == REPLICAS
    for group in range(REPLICAS):
        assert sets[f"{NAME}-{group}"]["spec"]["replicas"] == SIZE - 1
        owner = sets[f"{NAME}-{group}"]["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"]) == ("Pod", f"{NAME}-{group}")  # a group goes with its leader

    # Pod names, labels and the environment LWS's pod webhook puts first in every container
    assert sorted(pods) == [f"{NAME}-0", f"{NAME}-0-1", f"{NAME}-1", f"{NAME}-1-1"]
    for name, pod in pods.items():
        group, worker = (name.split("-")[1:] + ["0"])[:2]
        labels = pod["metadata"]["labels"]
        assert labels[lws.NAME_LABEL] == NAME
        assert labels[lws.GROUP_INDEX_LABEL] == group and labels[lws.WORKER_INDEX_LABEL] == worker, (name, labels)
        env = env_of(pod)
        assert list(env)[:3] == [lws.LEADER_ADDRESS_ENV, lws.GROUP_SIZE_ENV, lws.WORKER_INDEX_ENV]
        # the leader's name in the headless Service named after the set: <set>-<group>.<set>.<namespace>
        assert env[lws.LEADER_ADDRESS_ENV] == f"{NAME}-{group}.{NAME}.{namespace}"
        assert env[lws.GROUP_SIZE_ENV] == str(SIZE) and env[lws.WORKER_INDEX_ENV] == worker
        assert env["ENGINE_ROLE"] == "any"  # the template's own environment stays, after LWS's
        assert pod["spec"]["subdomain"] == NAME
    service = cluster.get_json("service", "-n", namespace, NAME)
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {lws.NAME_LABEL: NAME}
    # one pod per 8-GPU node, every one of them the tests' own
    assert sorted(p["spec"]["nodeName"] for p in pods.values()) == sorted(lws_nodes)
    assert len(lws_nodes) == LWS_NODES

    # Losing a worker restarts its whole group (RecreateGroupOnPodRestart): LWS deletes the leader, whose
    # worker StatefulSet goes with it, and both come back as new pods. The other group is left alone.
    before = {name: pod["metadata"]["uid"] for name, pod in pods.items()}
    cluster.kubectl("delete", "pod", "-n", namespace, f"{NAME}-0-1", "--wait=false")

    def recreated():
        now = pods_of(cluster, namespace)
        fresh = running(now) and all(now[n]["metadata"]["uid"] != before[n] for n in (f"{NAME}-0", f"{NAME}-0-1"))
        return now if fresh else None

    after = cluster.wait_for("group 0 re-created, leader and worker", recreated, timeout=90)
    assert {n: after[n]["metadata"]["uid"] for n in (f"{NAME}-1", f"{NAME}-1-1")} == {
        n: before[n] for n in (f"{NAME}-1", f"{NAME}-1-1")}
    assert env_of(after[f"{NAME}-0-1"])[lws.WORKER_INDEX_ENV] == "1"
    events = cluster.get_json("events", "-n", namespace, "--field-selector", "reason=RecreateGroup")["items"]
    assert any(f"deleted leader pod {NAME}-0" in e["message"] for e in events), [e["message"] for e in events]


def test_lws_listens_on_loopback_only_registers_the_release_webhooks_and_a_second_install_is_a_no_op(
        local_cluster_only, lws_running):
    lws = lws_running
    pid = lws.running()
    again = lws.install()
    assert again["started"] is False and again["pid"] == pid
    addresses = listening_addresses(pid)
    assert addresses == {f"127.0.0.1:{port}" for port in again["ports"].values()}, addresses
    for kind_name in lws.WEBHOOK_CONFIGURATIONS:
        hooks = local_cluster_only.get_json(kind_name)["webhooks"]
        assert all(h["clientConfig"]["url"].startswith(f"https://127.0.0.1:{again['ports']['webhook']}/")
                   for h in hooks), hooks


def test_the_validating_webhook_refuses_a_group_size_of_zero(cluster, namespace, lws_running):
    """The validating webhook answers for real: a group size of 0 (the CRD's schema allows it) is refused with
    LWS's own message."""
    lws = lws_running
    body = lws.leader_worker_set(namespace, "invalid", replicas=1, size=0, pod_spec={"containers": [
        {"name": "main", "image": "busybox"}]})
    proc = cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(body), check=False)
    assert proc.returncode != 0
    print(proc.stderr)
    assert 'admission webhook "vleaderworkerset.kb.io" denied the request' in proc.stderr, proc.stderr
    assert "size must be equal or greater than 1" in proc.stderr
    assert cluster.get_json("leaderworkersets", "-n", namespace)["items"] == []
