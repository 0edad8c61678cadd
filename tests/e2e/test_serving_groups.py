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


def leader_metrics(ip: str) -> tuple[int | str, float]:
    """What a leader's engine reports on its /metrics, as the operator reads it: the requests in flight (or why that
    is unknown) and the completions it has finished."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    from drafter_operator.monitoring.in_flight import count_in_flight

    try:
        body = urllib.request.urlopen(f"http://{ip}:8000/metrics", timeout=5).read()
    except OSError as exc:
        return f"unreadable: {exc!r}", 0.0
    try:
        in_flight: int | str = count_in_flight("vllm", body)
    except Exception as exc:  # noqa: BLE001 - reported, as the operator would log it
        in_flight = f"unknown: {exc}"
    finished = sum(sample.value for family in text_string_to_metric_families(body.decode())
                   for sample in family.samples if sample.name == "vllm:request_success_total")
    return in_flight, finished


def drain_report(cluster, namespace: str, name: str, operator_log) -> str:
    """What a drain that does not end leaves to read: the serving's status, its sets, its pods' readiness and what
    each leader's engine says is in flight, and the operator's words on it (its periodic acceptance writes left out)."""
    status = serving_status(cluster, namespace, name)
    pods = cluster.get_json("-n", namespace, "pods")["items"]
    lines = [line for line in operator_log.read_text(errors="replace").splitlines()
             if f"/{name}" in line and " DEBUG " not in line and "succeeded" not in line
             and not line.endswith("status ['acceptance', 'conditions', 'display']")]
    from drafter_testbed import cluster as local  # the process runner plays kube-proxy: did its routes follow?
    runner_log = local.Layout().logs / "runner.log"
    runner = [line for line in (runner_log.read_text(errors="replace").splitlines() if runner_log.exists() else [])
              if "failed" in line or "Traceback" in line or "cannot listen" in line]
    return "\n".join([
        f"status: active={status.get('activeRevision')} previous={status.get('previousRevision')} "
        f"conditions={[(c['type'], c['status'], c.get('reason')) for c in status.get('conditions') or []]}",
        f"sets: {[(s['metadata']['name'], bool(s['metadata'].get('deletionTimestamp'))) for s in sets(cluster, namespace).values()]}",
        "pods: " + "; ".join(f"{p['metadata']['name']} ip={p['status'].get('podIP')} "
                              f"ready={[c['status'] for c in p['status'].get('conditions') or [] if c['type'] == 'Ready']} "
                              f"deleting={bool(p['metadata'].get('deletionTimestamp'))}"
                              + (f" metrics(in flight, finished)={leader_metrics(p['status']['podIP'])}"
                                 if p["metadata"]["name"].endswith("-0") and p["status"].get("podIP") else "")
                              for p in pods),
        "operator:", *lines[-40:], "process runner (its failures):", *runner[-10:]])


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


#: The GPU product of the process nodes the emulated groups run on: no other test's serving selects it together with
#: the process runtime.
GROUP_PRODUCT = "NVIDIA-B200"


@pytest.fixture
def group_nodes(cluster, local_cluster_only):
    """Four 8-GPU nodes run by the local process runner: two groups of two (a BlueGreen swap holds both)."""
    from tests.e2e.conftest import process_gpu_nodes

    return process_gpu_nodes(local_cluster_only, GROUP_PRODUCT, 4, "e2e-group")


@pytest.mark.cluster_lock("group-nodes")
def test_an_emulated_two_node_group_serves_once_its_worker_joined_and_a_swap_under_long_streams_cuts_none(
        cluster, namespace, operator, lws_running, group_nodes, model_volume):  # noqa: F811
    """The engine emulator as a group on process nodes: the worker resolves its leader through LWS's headless Service
    and joins it; the leader is Ready only then; the serving's acceptance window is read from the leader's /metrics;
    a BlueGreen drafter swap under 2,000-token streams moves traffic to the new group and cuts none."""
    from drafter_testbed.serving_client import ClientLoop
    from tests.e2e.conftest import emulator_settings

    emulator_settings(cluster, namespace, time_scale="0.1", startup_seconds="2")
    serving = two_node_serving([], name="kimi-grp")
    spec = serving["spec"]
    spec["placement"] = {"gpuProduct": GROUP_PRODUCT, "nodeSelector": {"drafter.dev/node-runtime": "process"}}
    spec["drafter"] = {"method": "eagle3", "model": "/models/drafters/kimi-k25-eagle3", "numSpeculativeTokens": 3}
    spec["acceptance"] = {"minAcceptanceRate": "0.05", "window": "1m", "for": "0s", "minDraftTokens": 10}
    # The drain ends when the old leader's /metrics say its streams are done, or at this timeout: under the CI lane's
    # load the old set has been seen to outlive a drain its leader reported over (the operator logs each count it
    # reads while a revision drains, and the failure report below shows them).
    spec["swap"] = {"strategy": "BlueGreen", "drainTimeout": "90s"}
    apply(cluster, namespace, serving)
    before = wait_ready(cluster, namespace, "kimi-grp", timeout=180)
    old = before["activeRevision"]
    (name, _), = sets(cluster, namespace).items()
    pods = group_pods(cluster, namespace, name)
    # A whole node each: the leader and the worker on two of the B200 process nodes (another xdist worker's may count).
    placed = {p["spec"]["nodeName"] for p in pods.values()}
    assert len(pods) == 2 and len(placed) == 2 and group_nodes
    for node in placed:
        labels = cluster.get_json("node", node)["metadata"]["labels"]
        assert labels["nvidia.com/gpu.product"] == GROUP_PRODUCT and labels["drafter.dev/node-runtime"] == "process"

    # The worker's engine dies: the leader's collective breaks, LWS re-creates the whole group, and the serving says
    # which group restarts (Ready False, GroupRestarting, a Warning Event) until it serves again.
    worker = next(p for p in pods if p != f"{name}-0")
    cluster.kubectl("-n", namespace, "delete", "pod", worker, "--wait=false")
    restarting = cluster.wait_for("Ready to say the group restarts", lambda: (
        c := condition(serving_status(cluster, namespace, "kimi-grp"), "Ready")).get("reason") == "GroupRestarting" and c,
        timeout=60)
    assert f"group 0 (leader {name}-0)" in restarting["message"]
    wait_ready(cluster, namespace, "kimi-grp", revision=old, timeout=120)
    events = cluster.get_json("-n", namespace, "events", "--field-selector", "involvedObject.name=kimi-grp")["items"]
    assert any(e["reason"] == "GroupRestarting" and e["type"] == "Warning" for e in events), [e["reason"] for e in events]

    service = cluster.get_json("-n", namespace, "service", "kimi-grp")
    loop = ClientLoop(service["spec"]["clusterIP"], service["spec"]["ports"][0]["port"], "/models/Kimi-K2.5",
                      max_tokens=2000, streams=3, limit_seconds=300)
    loop.start()
    try:
        # The acceptance watch reads the leader: a window with drafted tokens appears in status.
        cluster.wait_for("an acceptance window from the leader", lambda: (
            (serving_status(cluster, namespace, "kimi-grp").get("acceptance") or {}).get("draftTokens")), timeout=120)
        serving["spec"]["drafter"]["numSpeculativeTokens"] = 4
        apply(cluster, namespace, serving)
        status = cluster.wait_for("the new group to serve", lambda: (s := serving_status(
            cluster, namespace, "kimi-grp")).get("activeRevision") not in (None, old)
            and condition(s, "Ready").get("status") == "True" and s, timeout=300)
        new_leader = group_pods(cluster, namespace, f"kimi-grp-{status['activeRevision']}")[
            f"kimi-grp-{status['activeRevision']}-0"]
        leader_ip = new_leader["status"]["podIP"]  # Ready, so it has one
        # Traffic moved: streams that started after the switch finish on the new group's leader.
        cluster.wait_for("a stream finished on the new group", lambda: leader_metrics(leader_ip)[1] >= 1, timeout=120)
    finally:
        # No stream starts after this: the old group's drain ends when its own last stream does (read from its
        # leader's /metrics), or at spec.swap.drainTimeout; no stream is cut either way.
        loop.stop()
    try:
        cluster.wait_for("the old set removed once drained", lambda: [
            s["metadata"]["labels"]["drafter.dev/revision"] for s in sets(cluster, namespace).values()]
            == [status["activeRevision"]], timeout=200)
    except AssertionError as timed_out:
        raise AssertionError(f"{timed_out}\n{drain_report(cluster, namespace, 'kimi-grp', operator.log_path)}") from None
    assert loop.failures == [] and loop.cut == [], (loop.failures, loop.cut)
    assert loop.ok >= 3
