"""Deletion at any moment leaves nothing behind: a DrafterServing deleted in the middle of a BlueGreen swap
and in the middle of its gate's benchmark, and a DrafterBenchmark deleted while its Job runs. After each,
the namespace holds no Deployment, ReplicaSet, pod, Service, EndpointSlice, Job, ConfigMap or
DrafterBenchmark of theirs, no engine or bench process still runs on the local process runner, and the
operator's metric series for them are gone. (A DrafterTraining deleted mid-Extract: tests/e2e/test_training.py.)
"""

from __future__ import annotations

import socket
import time

import pytest
import yaml

from tests.e2e.conftest import emulator_settings
from tests.support.e2e_acceptance import engine_pods
from tests.support.e2e_benchmark import benchmark
from tests.support.e2e_engine_faults import small
from tests.support.e2e_serving import apply, condition, deployments, serving_status, wait_ready

pytestmark = pytest.mark.e2e

KINDS = ("deployments", "replicasets", "pods", "services", "endpointslices", "jobs", "configmaps",
         "drafterbenchmarks", "persistentvolumeclaims")
#: What the test itself put in the namespace (the claim, the emulator's settings) and Kubernetes' own.
INFRASTRUCTURE = {("configmaps", "kube-root-ca.crt"), ("configmaps", "drafter-emulator"),
                  ("persistentvolumeclaims", "models")}
#: A long benchmark: still running when it is deleted (the emulator at a tenth of real time).
LONG_RUN = {"numPrompts": 40, "maxTokens": 1024}


def leftovers(cluster, namespace: str) -> dict[str, list[str]]:
    found = {}
    for kind in KINDS:
        names = sorted(item["metadata"]["name"] for item in cluster.get_json("-n", namespace, kind)["items"]
                       if (kind, item["metadata"]["name"]) not in INFRASTRUCTURE)
        if names:
            found[kind] = names
    return found


def pod_processes(namespace: str) -> list[str]:
    """The local process runner's pod directories of this namespace: one per pod whose processes it runs."""
    from drafter_testbed import cluster as local

    pods = local.Layout().root / "pods"
    return sorted(p.name for p in pods.glob(f"{namespace}_*")) if pods.is_dir() else []


def listening(ip: str, port: int = 8000) -> bool:
    try:
        with socket.create_connection((ip, port), timeout=1):
            return True
    except OSError:
        return False


def assert_nothing_left(cluster, operator, namespace: str, serving: str | None = None,
                        benchmarks: tuple[str, ...] = (), engine_ips: tuple[str, ...] = ()) -> None:
    started = time.monotonic()
    cluster.wait_for("nothing left in the namespace", lambda: not leftovers(cluster, namespace)
                     and not pod_processes(namespace), timeout=90)
    print(f"{serving or benchmarks}: nothing left {time.monotonic() - started:.1f} s after the delete returned")
    assert not any(listening(ip) for ip in engine_ips), engine_ips
    if serving:
        for metric in ("drafter_serving_ready", "drafter_swaps_total", "drafter_rollbacks_total"):
            assert operator.metric(metric, namespace=namespace, name=serving) is None, metric
    for name in benchmarks:
        assert operator.metric("drafter_benchmark_failed", namespace=namespace, benchmark=name) is None


def delete(cluster, namespace: str, kind: str, name: str) -> None:
    cluster.kubectl("-n", namespace, "delete", kind, name, "--wait=true", "--timeout=60s")


def test_a_serving_deleted_mid_bluegreen_swap_leaves_nothing(fast_engines):
    cluster, namespace, operator = fast_engines
    serving = small("swap")
    apply(cluster, namespace, serving)
    old = wait_ready(cluster, namespace, "swap")["activeRevision"]
    old_ips = tuple(p["status"]["podIP"] for p in engine_pods(cluster, namespace, "swap", old))
    emulator_settings(cluster, namespace, time_scale="0.1", startup_seconds="60")  # the new revision loads slowly
    serving["spec"]["drafter"]["numSpeculativeTokens"] = 4
    apply(cluster, namespace, serving)

    def mid_swap():
        status = serving_status(cluster, namespace, "swap")
        new = [r for r in deployments(cluster, namespace, "swap") if r != old]
        pods = engine_pods(cluster, namespace, "swap", new[0]) if new else []
        return condition(status, "Progressing").get("status") == "True" and pods and pods
    new_pods = cluster.wait_for("the new revision's pod up, loading", mid_swap, timeout=60)
    assert condition(serving_status(cluster, namespace, "swap"), "Ready")["status"] == "True"  # old one serves
    delete(cluster, namespace, "drafterserving", "swap")
    assert_nothing_left(cluster, operator, namespace, "swap",
                        engine_ips=old_ips + tuple(p["status"]["podIP"] for p in new_pods))


def test_a_serving_deleted_mid_gate_benchmark_leaves_nothing(fast_engines):
    cluster, namespace, operator = fast_engines
    gate = {"minSpeedup": "1.2", "baseline": {"tokensPerSecond": "82.5"}, **LONG_RUN}
    serving = small("gated", swap={"strategy": "BlueGreen", "gate": gate})
    apply(cluster, namespace, serving)
    old = wait_ready(cluster, namespace, "gated")["activeRevision"]
    serving["spec"]["drafter"]["numSpeculativeTokens"] = 4
    apply(cluster, namespace, serving)

    def gate_running():
        pods = cluster.get_json("-n", namespace, "pods", "-l", "drafter.dev/benchmark")["items"]
        return [p for p in pods if p.get("status", {}).get("phase") == "Running"]
    cluster.wait_for("the gate's benchmark pod running", gate_running, timeout=90)
    (gate_benchmark,) = cluster.get_json("-n", namespace, "drafterbenchmarks", "-l", "drafter.dev/gate=true")["items"]
    assert (gate_benchmark.get("status") or {}).get("state") not in ("Succeeded", "Failed")
    ips = tuple(p["status"]["podIP"] for p in engine_pods(cluster, namespace, "gated", old))
    new = [r for r in deployments(cluster, namespace, "gated") if r != old]
    ips += tuple(p["status"]["podIP"] for r in new for p in engine_pods(cluster, namespace, "gated", r))
    delete(cluster, namespace, "drafterserving", "gated")
    assert_nothing_left(cluster, operator, namespace, "gated", benchmarks=(gate_benchmark["metadata"]["name"],),
                        engine_ips=ips)


def test_a_benchmark_deleted_mid_run_leaves_nothing_and_its_serving_untouched(fast_engines):
    cluster, namespace, operator = fast_engines
    apply(cluster, namespace, small("target"))
    revision = wait_ready(cluster, namespace, "target")["activeRevision"]
    cluster.kubectl("-n", namespace, "apply", "-f", "-", input=yaml.safe_dump(
        benchmark("run", "target", baseline={"tokensPerSecond": "82.5"}, **LONG_RUN, timeout="5m")))
    cluster.wait_for("the benchmark's pod running", lambda: [
        p for p in cluster.get_json("-n", namespace, "pods", "-l", "drafter.dev/benchmark=run")["items"]
        if p.get("status", {}).get("phase") == "Running"], timeout=90)
    assert cluster.get_json("-n", namespace, "jobs", "-l", "drafter.dev/benchmark=run")["items"]
    delete(cluster, namespace, "drafterbenchmark", "run")
    cluster.wait_for("the benchmark's Job, pods and ConfigMaps gone", lambda: not any(
        cluster.get_json("-n", namespace, kind, "-l", "drafter.dev/benchmark=run")["items"]
        for kind in ("jobs", "pods", "configmaps")) and not [d for d in pod_processes(namespace) if "_run-" in d],
        timeout=90)
    assert operator.metric("drafter_benchmark_failed", namespace=namespace, benchmark="run") is None
    status = serving_status(cluster, namespace, "target")
    assert condition(status, "Ready")["status"] == "True" and status["activeRevision"] == revision
    ips = tuple(p["status"]["podIP"] for p in engine_pods(cluster, namespace, "target", revision))
    assert all(listening(ip) for ip in ips)
    delete(cluster, namespace, "drafterserving", "target")
    assert_nothing_left(cluster, operator, namespace, "target", engine_ips=ips)
