"""DrafterServing end to end: engine pods really run (as the emulator) on GPU nodes of the local cluster."""

from __future__ import annotations

import json
import time

import pytest
import yaml

from tests.e2e.conftest import E2E_GPU_PRODUCT, emulator_settings
from drafter_testbed.serving_client import ClientLoop, stream_completion
from tests.support.e2e_serving import (apply, condition, deployments, seed_serving, service_ip, serving_env,
                                       serving_status, wait_ready)

pytestmark = pytest.mark.e2e


def assert_foreign_services_never_reach_the_operator(cluster, namespace: str, operator, count: int = 20) -> None:
    """The operator's watches select its own children in the apiserver (controllers/handlers.py configure):
    `count` Services not labelled as the operator's, created just before one that is, must not reach it. The
    watch stream delivers their events before the labelled one's, so once that one arrived theirs would have
    too; fewer than `count` events between (other namespaces' services churn meanwhile) proves none did."""
    def service(name: str, labels: dict) -> dict:
        return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "labels": labels},
                "spec": {"ports": [{"port": 80}], "selector": {"app": name}}}

    def events() -> float:
        return operator.metric("drafter_watch_events_total", kind="services") or 0

    def answering() -> bool:
        try:
            events()
            return True
        except OSError:  # the session's operator was just started: its /metrics is not up yet
            return False

    cluster.wait_for("the operator's /metrics", answering, timeout=60)
    before = events()
    names = [f"foreign-{i}" for i in range(count)]
    items = [service(n, {"app.kubernetes.io/managed-by": "someone-else"}) for n in names]
    items.append(service("marker", {"app.kubernetes.io/managed-by": "drafter-operator"}))
    cluster.kubectl("-n", namespace, "apply", "-f", "-",  # applied in order: the labelled one last
                    input=yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    cluster.wait_for("the labelled Service's watch event", lambda: events() >= before + 1, timeout=30)
    assert events() - before < count
    cluster.kubectl("-n", namespace, "delete", "service", "marker", *names)


def test_seed_example_serves_through_its_service(serving_env, operator):
    cluster, namespace = serving_env
    assert_foreign_services_never_reach_the_operator(cluster, namespace, operator)
    apply(cluster, namespace, seed_serving())
    status = wait_ready(cluster, namespace, "kimi")
    revision = status["activeRevision"]
    (deployment,) = deployments(cluster, namespace, "kimi").values()
    assert deployment["metadata"]["name"] == f"kimi-{revision}"
    assert deployment["metadata"]["ownerReferences"][0]["kind"] == "DrafterServing"
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][:3] == ["vllm", "serve", "/models/Kimi-K2.5"]
    assert json.loads(container["command"][container["command"].index("--speculative-config") + 1]) == {
        "method": "eagle3", "model": "/models/drafters/kimi-k25-eagle3", "num_speculative_tokens": 5}
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert container["startupProbe"]["failureThreshold"] * container["startupProbe"]["periodSeconds"] >= 45 * 60
    pod = cluster.get_json("-n", namespace, "pods", "-l", f"drafter.dev/revision={revision}")["items"][0]
    node = cluster.get_json("node", pod["spec"]["nodeName"])
    assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == E2E_GPU_PRODUCT
    assert status["endpoint"] == {"host": f"kimi.{namespace}.svc.cluster.local", "port": 8000,
                                  "url": f"http://kimi.{namespace}.svc.cluster.local:8000/v1"}
    assert status["observedGeneration"] == 1
    # The seed combination is a known-bad one: a warning, not a block.
    assert condition(status, "DrafterCompatible")["status"] == "False"
    assert condition(status, "DrafterCompatible")["reason"] == "KnownBadCombination"
    events = cluster.get_json("-n", namespace, "events", "--field-selector", "involvedObject.name=kimi")["items"]
    assert any(e["reason"] == "KnownBadCombination" for e in events)

    chunks = stream_completion(service_ip(cluster, namespace, "kimi"), 8000, "/models/Kimi-K2.5", max_tokens=24)
    assert len(chunks) >= 2  # tokens arrive over several SSE events
    assert sum(c["choices"][0].get("finish_reason") is not None for c in chunks) == 1


def test_bluegreen_swap_moves_traffic_only_when_ready_and_drops_no_request(serving_env):
    cluster, namespace = serving_env
    emulator_settings(cluster, namespace, time_scale="0.1", startup_seconds="6")
    serving = seed_serving(swap={"strategy": "BlueGreen"})
    apply(cluster, namespace, serving)
    old = wait_ready(cluster, namespace, "kimi")["activeRevision"]
    loop = ClientLoop(service_ip(cluster, namespace, "kimi"), 8000, "/models/Kimi-K2.5")
    loop.start()
    try:
        serving["spec"]["drafter"]["model"] = "/models/drafters/emulator-good-drafter"
        apply(cluster, namespace, serving)
        revisions = cluster.wait_for("a second revision", lambda: len(d := deployments(
            cluster, namespace, "kimi")) == 2 and d, timeout=30)
        new = next(r for r in revisions if r != old)
        # While the new revision loads, the Service keeps pointing at the old one.
        selector = cluster.get_json("-n", namespace, "service", "kimi")["spec"]["selector"]
        assert selector["drafter.dev/revision"] == old
        status = wait_ready(cluster, namespace, "kimi", revision=new, timeout=90)
        cluster.wait_for("the old revision to be removed", lambda: list(deployments(
            cluster, namespace, "kimi")) == [new], timeout=30)
        time.sleep(2)  # requests keep flowing against the new revision alone
    finally:
        loop.stop()
    assert loop.failures == [] and loop.ok > 10
    assert status["previousRevision"] == old
    assert [r["name"] for r in status["revisions"]] == [old, new]
    reasons = [e["reason"] for e in cluster.get_json("-n", namespace, "events")["items"]]
    assert "Switched" in reasons


@pytest.fixture(scope="session")
def single_node_product(local_cluster_only):
    """A GPU product exactly one (process) node carries: a cluster with one free 8-GPU node."""
    cluster = local_cluster_only
    product = "NVIDIA-GB200"
    nodes = cluster.get_json("nodes", "-l", f"nvidia.com/gpu.product={product}")["items"]
    if not nodes:
        from drafter_testbed import cluster as local

        local.add_nodes(1, "process", 8, product, "e2e-single")
    return product


@pytest.mark.cluster_lock("gb200-node")  # the single node must be free when the test starts
def test_recreate_swaps_on_a_single_gpu_node_and_bluegreen_reports_missing_capacity(serving_env, single_node_product):
    cluster, namespace = serving_env
    serving = seed_serving(gpu_product=single_node_product, swap={"strategy": "Recreate"})
    apply(cluster, namespace, serving)
    old = wait_ready(cluster, namespace, "kimi")["activeRevision"]
    serving["spec"]["drafter"]["model"] = "/models/drafters/emulator-good-drafter"
    apply(cluster, namespace, serving)
    seen_both_running = []

    def swapped():
        pods = cluster.get_json("-n", namespace, "pods", "-l", "drafter.dev/serving=kimi")["items"]
        running = {p["metadata"]["labels"]["drafter.dev/revision"] for p in pods if (p.get("status") or {}).get("phase") == "Running"
                   and not p["metadata"].get("deletionTimestamp")}
        seen_both_running.append(len(running) > 1)
        status = serving_status(cluster, namespace, "kimi")
        return status.get("activeRevision") not in (None, old) and condition(status, "Ready").get("status") == "True"

    cluster.wait_for("the Recreate swap", swapped, timeout=90)
    assert not any(seen_both_running)  # never two 8-GPU engines on the single node
    new = serving_status(cluster, namespace, "kimi")["activeRevision"]
    cluster.wait_for("only the new revision", lambda: list(deployments(cluster, namespace, "kimi")) == [new])

    # The same change as BlueGreen cannot fit beside the running revision: a condition says why.
    serving["spec"]["swap"] = {"strategy": "BlueGreen"}
    serving["spec"]["drafter"]["model"] = "/models/drafters/kimi-k25-eagle3-v2"
    apply(cluster, namespace, serving)
    progressing = cluster.wait_for("InsufficientCapacity", lambda: (c := condition(serving_status(
        cluster, namespace, "kimi"), "Progressing")).get("reason") == "InsufficientCapacity" and c, timeout=60)
    assert "Insufficient nvidia.com/gpu" in progressing["message"]
    status = serving_status(cluster, namespace, "kimi")
    assert status["activeRevision"] == new and condition(status, "Ready")["status"] == "True"


def test_revision_that_never_becomes_ready_is_rolled_back_after_the_startup_limit(serving_env):
    cluster, namespace = serving_env
    serving = seed_serving(swap={"strategy": "BlueGreen"}, startup={"timeout": "1m"})
    apply(cluster, namespace, serving)
    old = wait_ready(cluster, namespace, "kimi")["activeRevision"]
    emulator_settings(cluster, namespace, time_scale="0.1", fail_startup="1")  # engines started from now on hang
    serving["spec"]["drafter"]["model"] = "/models/drafters/broken-drafter"
    apply(cluster, namespace, serving)
    new = cluster.wait_for("the new revision", lambda: next(
        (r for r in deployments(cluster, namespace, "kimi") if r != old), None), timeout=30)
    failed = cluster.wait_for("the rollback", lambda: (c := condition(serving_status(
        cluster, namespace, "kimi"), "Progressing")).get("reason") == "RevisionFailed" and c, timeout=120)
    assert new in failed["message"] and old in failed["message"]
    status = serving_status(cluster, namespace, "kimi")
    assert status["activeRevision"] == old and condition(status, "Ready")["status"] == "True"
    assert next(r for r in status["revisions"] if r["name"] == new)["good"] is False
    cluster.wait_for("the failed revision's Deployment to go", lambda: list(deployments(
        cluster, namespace, "kimi")) == [old])
    time.sleep(3)  # and it is not retried
    assert list(deployments(cluster, namespace, "kimi")) == [old]
    reasons = [e["reason"] for e in cluster.get_json("-n", namespace, "events")["items"]]
    assert "RevisionFailed" in reasons


def test_changing_only_replicas_does_not_create_a_revision(serving_env):
    cluster, namespace = serving_env
    serving = seed_serving()
    apply(cluster, namespace, serving)
    revision = wait_ready(cluster, namespace, "kimi")["activeRevision"]
    serving["spec"]["replicas"] = 2
    apply(cluster, namespace, serving)
    cluster.wait_for("two ready replicas", lambda: deployments(cluster, namespace, "kimi").get(revision, {}).get(
        "status", {}).get("readyReplicas") == 2, timeout=60)
    assert list(deployments(cluster, namespace, "kimi")) == [revision]
    assert serving_status(cluster, namespace, "kimi")["activeRevision"] == revision


def test_deleting_the_serving_removes_everything(serving_env):
    cluster, namespace = serving_env
    apply(cluster, namespace, seed_serving())
    wait_ready(cluster, namespace, "kimi")
    cluster.kubectl("-n", namespace, "delete", "drafterserving", "kimi", "--wait=true", "--timeout=60s")

    def gone():
        left = [kind for kind in ("deployments", "services", "pods", "replicasets")
                if cluster.get_json("-n", namespace, kind, "-l", "drafter.dev/serving=kimi")["items"]]
        return not left or None
    cluster.wait_for("children garbage-collected", gone, timeout=60)


def test_restarting_the_operator_mid_swap_finishes_it_without_duplicates(serving_env, operator):
    cluster, namespace = serving_env
    emulator_settings(cluster, namespace, time_scale="0.1", startup_seconds="8")
    serving = seed_serving(swap={"strategy": "BlueGreen"})
    apply(cluster, namespace, serving)
    old = wait_ready(cluster, namespace, "kimi")["activeRevision"]
    serving["spec"]["drafter"]["model"] = "/models/drafters/emulator-good-drafter"
    apply(cluster, namespace, serving)
    new = cluster.wait_for("the new revision", lambda: next(
        (r for r in deployments(cluster, namespace, "kimi") if r != old), None), timeout=30)
    uid = deployments(cluster, namespace, "kimi")[new]["metadata"]["uid"]
    operator.stop()  # mid-swap: the new revision is still loading
    assert condition(serving_status(cluster, namespace, "kimi"), "Ready")["status"] == "True"
    operator.start()
    wait_ready(cluster, namespace, "kimi", revision=new, timeout=90)
    final = cluster.wait_for("only the new revision", lambda: (d := deployments(
        cluster, namespace, "kimi")) and list(d) == [new] and d, timeout=30)
    assert final[new]["metadata"]["uid"] == uid  # the same Deployment: nothing was recreated
    assert [r["name"] for r in serving_status(cluster, namespace, "kimi")["revisions"]] == [old, new]


def test_invalid_spec_is_reported_as_a_condition_and_creates_nothing(serving_env):
    cluster, namespace = serving_env
    serving = seed_serving()
    serving["spec"]["target"]["extraArgs"] = ["--max-running-requests", "8"]  # an SGLang flag on vLLM
    apply(cluster, namespace, serving)
    ready = cluster.wait_for("InvalidSpec", lambda: (c := condition(serving_status(
        cluster, namespace, "kimi"), "Ready")).get("reason") == "InvalidSpec" and c, timeout=30)
    assert "spec.target.extraArgs" in ready["message"] and "--max-running-requests is a sglang flag" in ready["message"]
    assert deployments(cluster, namespace, "kimi") == {}


def test_an_owned_flag_is_refused_under_any_spelling_the_engine_accepts(serving_env):
    cluster, namespace = serving_env
    # The exact spelling: refused by the CRD's CEL rule at kubectl apply, naming the field.
    serving = seed_serving("exact")
    serving["spec"]["target"]["extraArgs"] = ["--served-model-name", "kimi"]
    proc = cluster.kubectl("-n", namespace, "apply", "-f", "-", input=yaml.safe_dump(serving), check=False)
    assert proc.returncode != 0 and "spec.target.extraArgs" in proc.stderr, proc.stderr
    assert cluster.kubectl("-n", namespace, "get", "drafterserving", "exact", check=False).returncode != 0

    # Spellings vLLM accepts but CEL cannot enumerate (unique prefixes, underscores): InvalidSpec from
    # the operator before any pod, naming the item, the engine's flag and the field to use.
    for name, args, flag, field in (("prefix", ["--tensor-parallel", "4"], "--tensor-parallel-size",
                                     "spec.target.tensorParallelSize"),
                                    ("underscores", ["--served_model_name", "kimi"], "--served-model-name",
                                     "spec.target.servedModelName"),
                                    ("shorthand", ["--spec-mod", "/models/other"], "--spec-model",
                                     "spec.drafter.model")):
        serving = seed_serving(name)
        serving["spec"]["target"]["extraArgs"] = args
        apply(cluster, namespace, serving)
        ready = cluster.wait_for(f"InvalidSpec {name}", lambda n=name: (c := condition(serving_status(
            cluster, namespace, n), "Ready")).get("reason") == "InvalidSpec" and c, timeout=30)
        assert repr(args[0]) in ready["message"] and flag in ready["message"] and field in ready["message"]
        assert deployments(cluster, namespace, name) == {}
        pods = cluster.kubectl("-n", namespace, "get", "pods", "-l", f"drafter.dev/serving={name}", "-o", "name").stdout
        assert pods.strip() == ""


#: The longest DrafterServing name (api/kind.py NAME_MAX_LENGTH): every child name derived from it must fit.
LONGEST_NAME = "kimi-" + "x" * 42 + "-long"


def test_an_engine_switch_under_long_streams_keeps_the_endpoint_and_cuts_no_stream(serving_env):
    """vLLM -> SGLang, BlueGreen, gated, on a serving of the longest allowed name, under 2,000-token streams:
    the gate benchmark is created (its name fits) and passes, traffic moves, the endpoint stays where it
    was, and no stream fails or is cut; the old revision goes once its streams have finished."""
    cluster, namespace = serving_env
    emulator_settings(cluster, namespace, time_scale="0.1", startup_seconds="4")
    assert len(LONGEST_NAME) == 52
    serving = seed_serving(LONGEST_NAME, swap={"strategy": "BlueGreen", "gate": {
        "minTokensPerSecond": "1", "numPrompts": 2, "maxTokens": 64}})
    apply(cluster, namespace, serving)
    before = wait_ready(cluster, namespace, LONGEST_NAME, timeout=120)
    old = before["activeRevision"]
    service = cluster.get_json("-n", namespace, "service", LONGEST_NAME)
    published = (service["spec"]["ports"][0]["port"], before["endpoint"])
    loop = ClientLoop(service["spec"]["clusterIP"], published[0], "/models/Kimi-K2.5", max_tokens=2000, streams=3,
                      limit_seconds=300)
    loop.start()
    try:
        serving["spec"].update(engine="sglang", image="lmsysorg/sglang:v0.5.23", drafter={
            "method": "eagle3", "model": "/models/drafters/kimi-k25-eagle3", "numSteps": 3, "eagleTopk": 1,
            "numDraftTokens": 4})
        apply(cluster, namespace, serving)
        status = cluster.wait_for("the SGLang revision to serve", lambda: (s := serving_status(
            cluster, namespace, LONGEST_NAME)).get("activeRevision") not in (None, old)
            and condition(s, "Ready").get("status") == "True" and s, timeout=240)
        cluster.wait_for("the vLLM revision to be removed once drained", lambda: list(deployments(
            cluster, namespace, LONGEST_NAME)) == [status["activeRevision"]], timeout=180)
        time.sleep(3)  # streams keep flowing to the SGLang revision alone
    finally:
        loop.stop()
    assert loop.failures == [] and loop.cut == [], (loop.failures, loop.cut)
    assert loop.ok >= 6
    after = cluster.get_json("-n", namespace, "service", LONGEST_NAME)
    assert (after["spec"]["ports"][0]["port"], serving_status(cluster, namespace, LONGEST_NAME)["endpoint"]) == published
    assert status["serving"]["engine"] == "sglang" and status["serving"]["method"] == "eagle3"
    gates = cluster.get_json("-n", namespace, "drafterbenchmarks", "-l", f"drafter.dev/serving={LONGEST_NAME}")["items"]
    assert [len(g["metadata"]["name"]) <= 52 for g in gates] == [True]
    assert gates[0]["status"]["state"] == "Succeeded" and gates[0]["status"]["result"]["verdict"] == "Passed"
