"""The output check end to end: a DrafterBenchmark compares a serving's greedy outputs with its no-speculation
baseline's, token by token. The emulator reproduces sglang#33800 (DSpark at depth 5 corrupts output on SM120
GPUs): the same serving on an RTX PRO 6000 Blackwell node fails its gate naming the prompt and the token, and on
an H200 node passes with only near-tie flips."""

from __future__ import annotations

import re

import pytest

from tests.e2e.conftest import E2E_GPU_PRODUCT, process_gpu_nodes
from tests.support.e2e_acceptance import engine_pods
from tests.support.e2e_benchmark import finished
from tests.support.e2e_families import emulator_state
from tests.support.e2e_serving import apply, wait_ready

pytestmark = pytest.mark.e2e

SM120 = "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"
TARGET = "/models/DeepSeek-V4.1-Flash"


@pytest.fixture
def sm120_node(local_cluster_only):
    """One 8-GPU SM120 node run by the local process runner (per xdist worker, kept for the session)."""
    return process_gpu_nodes(local_cluster_only, SM120, 1, "e2e-sm120")


def serving(name: str, gpu_product: str, drafter: dict) -> dict:
    return {"apiVersion": "drafter.dev/v1alpha1", "kind": "DrafterServing", "metadata": {"name": name},
            "spec": {"engine": "sglang", "target": {"model": TARGET, "tensorParallelSize": 1}, "drafter": drafter,
                     "resources": {"gpusPerReplica": 1},
                     "placement": {"gpuProduct": gpu_product, "nodeSelector": {"drafter.dev/node-runtime": "process"}},
                     "storage": {"modelClaim": "models", "mountPath": "/models"}}}


def check(name: str, serving_name: str) -> dict:
    return {"apiVersion": "drafter.dev/v1alpha1", "kind": "DrafterBenchmark", "metadata": {"name": name},
            "spec": {"servingRef": {"name": serving_name}, "baseline": {"servingRef": {"name": "plain"}},
                     "numPrompts": 2, "maxTokens": 64, "timeout": "5m",
                     "equivalence": {"numPrompts": 12, "maxTokens": 96}}}


def test_the_output_check_fails_the_lossy_gpu_and_passes_the_same_drafter_elsewhere(fast_engines, sm120_node):
    cluster, namespace, operator = fast_engines
    dspark = {"method": "dspark", "numSpeculativeTokens": 5}
    for body in (serving("plain", E2E_GPU_PRODUCT, {"method": "none"}), serving("lossy", SM120, dspark),
                 serving("clean", E2E_GPU_PRODUCT, dspark)):
        apply(cluster, namespace, body)
    revisions = {name: wait_ready(cluster, namespace, name, timeout=180)["activeRevision"]
                 for name in ("plain", "lossy", "clean")}
    (pod,) = engine_pods(cluster, namespace, "lossy", revisions["lossy"])
    assert emulator_state(pod)["outputs"]["gpuProduct"] == SM120  # the engine knows the node's GPU
    for name in ("lossy", "clean"):
        apply(cluster, namespace, check(f"{name}-outputs", name))

    lossy = finished(cluster, namespace, "lossy-outputs")
    assert lossy["state"] == "Succeeded", (lossy, operator.log_tail())
    outputs = lossy["result"]["equivalence"]
    assert outputs["prompts"] == 12 and outputs["defects"] >= 3, outputs
    first = outputs["divergences"][0]
    assert first["defect"] and first["position"] >= 24 and first["margin"] >= 1.0, first
    assert lossy["result"]["verdict"] == "Failed"
    gate = next(c for c in lossy["conditions"] if c["type"] == "GatePassed")
    assert gate["status"] == "False" and gate["reason"] == "OutputDiverged"
    assert re.search(rf"prompt {first['prompt']} at generated token {first['position']} ", gate["message"]), gate
    reasons = [e["reason"] for e in cluster.get_json("-n", namespace, "events", "--field-selector",
                                                      "involvedObject.name=lossy-outputs")["items"]]
    assert "OutputDiverged" in reasons

    clean = finished(cluster, namespace, "clean-outputs")
    assert clean["state"] == "Succeeded", (clean, operator.log_tail())
    outputs = clean["result"]["equivalence"]
    # Every prompt that is not identical diverged at a near-tie at least once (the check goes on past each).
    assert outputs["defects"] == 0 and outputs["nearTies"] >= 12 - outputs["identical"], outputs
    assert all(d["margin"] < 1.0 for d in outputs.get("divergences") or [])
    assert clean["result"]["verdict"] == "Passed"
