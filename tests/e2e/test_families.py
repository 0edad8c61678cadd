"""Every drafter family end to end: each DrafterServing renders its engine command, its pod's engine (the
emulator, which parses that command as vLLM 0.33.0 and SGLang 0.5.23 do) resolves it to the family, and the
operator's live acceptance reads that family's metrics into status.acceptance.

All families run at once, one GPU each, on the worker's two 8-GPU nodes: the test is one wait, not ten.
What each family accepts is the emulator profile's (data/emulator-profiles.yaml); the status must agree
with the engine's own count of the same traffic.
"""

from __future__ import annotations

import math

import pytest

from drafter_testbed.serving_client import ClientLoop
from tests.e2e.conftest import E2E_GPU_PRODUCT
from tests.support.e2e_acceptance import engine_pods
from tests.support.e2e_families import emulator_state
from tests.support.e2e_serving import apply, condition, serving_status, service_ip, wait_ready

pytestmark = pytest.mark.e2e

ACCEPTANCE = {"minAcceptanceLength": "1.05", "window": "30s", "for": "10s", "minDraftTokens": 200}
# A window compared with the engine's lifetime mean: enough drafts that chance is small against the mean,
# and a bound on chance no honest window crosses (one in 1.7 million for a normal mean).
WINDOW_MIN_DRAFTS = 100
WINDOW_STANDARD_ERRORS = 5

# (name, engine, target, drafter, what the engine resolves the method to, the emulator profile's entry)
FAMILIES = [
    ("vllm-dflash", "vllm", "Qwen3-8B", {"method": "dflash", "model": "/models/drafters/qwen3-8b-dflash-b16",
                                          "numSpeculativeTokens": 15}, "dflash", "dflash"),
    ("vllm-dspark", "vllm", "DeepSeek-V4.1-Flash", {"method": "dspark", "numSpeculativeTokens": 7}, "dspark",
     "dspark"),
    ("vllm-suffix", "vllm", "Qwen3-8B", {"method": "suffix"}, "suffix", "suffix"),
    ("vllm-ngram-gpu", "vllm", "Qwen3-8B", {"method": "ngramGpu", "numSpeculativeTokens": 4}, "ngram_gpu", "ngram"),
    ("vllm-mtp", "vllm", "DeepSeek-V3", {"method": "mtp", "numSpeculativeTokens": 1}, "mtp", "default"),
    ("vllm-draft-model", "vllm", "Qwen3-32B", {"method": "draftModel", "model": "/models/drafters/qwen3-small-draft",
                                              "numSpeculativeTokens": 4}, "draft_model", "emulator-small-draft-model"),
    ("sglang-dflash", "sglang", "Qwen3-8B", {"method": "dflash", "model": "/models/drafters/qwen3-8b-dflash-b16"},
     "DFLASH", "dflash"),
    ("sglang-dspark", "sglang", "DeepSeek-V4.1-Flash", {"method": "dspark", "numSpeculativeTokens": 7}, "DSPARK",
     "dspark"),
    ("sglang-draft-model", "sglang", "Qwen3-32B", {"method": "draftModel", "model": "/models/drafters/qwen3-small-draft",
                                                  "numSteps": 3, "eagleTopk": 1, "numDraftTokens": 4}, "STANDALONE",
     "emulator-small-draft-model"),
    # 4 draft tokens, fewer than SGLang's BFS breadth (10): it resolves 0 steps and serves all the same
    ("sglang-ngram", "sglang", "Qwen3-8B", {"method": "ngram", "numDraftTokens": 4}, "NGRAM", "ngram"),
]


def family_serving(name: str, engine: str, target: str, drafter: dict) -> dict:
    return {
        "apiVersion": "drafter.dev/v1alpha1", "kind": "DrafterServing", "metadata": {"name": name},
        "spec": {
            "engine": engine,
            "target": {"model": f"/models/{target}", "tensorParallelSize": 1},
            "drafter": drafter,
            "resources": {"gpusPerReplica": 1},
            "placement": {"gpuProduct": E2E_GPU_PRODUCT, "nodeSelector": {"drafter.dev/node-runtime": "process"}},
            "storage": {"modelClaim": "models", "mountPath": "/models"},
            "acceptance": ACCEPTANCE,
        },
    }


def service_port(cluster, namespace: str, name: str) -> int:
    return cluster.get_json("-n", namespace, "service", name)["spec"]["ports"][0]["port"]


def test_every_family_serves_and_reports_its_acceptance(fast_engines):
    cluster, namespace, _ = fast_engines
    for name, engine, target, drafter, _, _ in FAMILIES:
        apply(cluster, namespace, family_serving(name, engine, target, drafter))
    try:
        revisions = {name: wait_ready(cluster, namespace, name, timeout=180)["activeRevision"] for name, *_ in FAMILIES}
    except AssertionError as exc:
        conditions = {name: [(c["type"], c["status"], c.get("reason"), c.get("message", "")[:300])
                             for c in serving_status(cluster, namespace, name).get("conditions") or []]
                      for name, *_ in FAMILIES}
        pods = {p["metadata"]["name"]: (p["status"].get("phase"), p["status"].get("containerStatuses"))
                for p in cluster.get_json("-n", namespace, "pods")["items"]}
        raise AssertionError(f"{exc}\n{conditions}\n{pods}") from None

    states = {}
    for name, engine, target, _, method, profile in FAMILIES:
        (pod,) = engine_pods(cluster, namespace, name, revisions[name])
        state = states[name] = emulator_state(pod)
        # the engine resolved the rendered command to this family, and drafts with its profile
        assert (state["engine"], state["speculation"]["method"]) == (engine, method), name
        assert state["acceptanceSource"] == f"profile:{profile}", (name, state["acceptanceSource"])

    loops = [ClientLoop(service_ip(cluster, namespace, name), service_port(cluster, namespace, name),
                        states[name]["servedModelName"],
                        limit_seconds=240, max_tokens=64) for name, *_ in FAMILIES]
    for loop in loops:
        loop.start()
    try:
        healthy = {}
        for name, *_ in FAMILIES:
            def measured(name=name):
                status = serving_status(cluster, namespace, name)
                figures = status.get("acceptance") or {}
                return (condition(status, "Degraded").get("reason") == "AcceptanceHealthy"
                        and figures.get("source") == "engine" and figures.get("drafts", 0) >= WINDOW_MIN_DRAFTS
                        and figures) or None
            healthy[name] = cluster.wait_for(f"{name}: acceptance measured from its engine", measured, timeout=120)
    finally:
        for loop in loops:
            loop.stop()
    assert all(not loop.failures and not loop.cut for loop in loops), [loop.failures[:2] for loop in loops]

    for name, engine, *_ in FAMILIES:
        (pod,) = engine_pods(cluster, namespace, name, revisions[name])
        truth = emulator_state(pod)["totals"]
        figures = healthy[name]
        assert figures["revision"] == revisions[name] and figures["draftTokens"] >= ACCEPTANCE["minDraftTokens"], name
        # The window is the last 30 s of the same traffic the engine counted since it started, as the engine
        # counts its steps (SGLang: every verify forward, one that drafted nothing too). So the window's mean
        # is a sample of the engine's steps and lies off the lifetime mean by chance: a 16-token block spreads
        # by 3 tokens a step, and 60 drafts lie 15 % off one time in fourteen. Chance ends at five standard
        # errors of the window's drafts, by the engine's own spread. SGLang counts each request's prefill
        # token among its generated tokens: one more token per request, over its steps.
        engine_length = truth["engineAcceptanceLength"]
        chance = WINDOW_STANDARD_ERRORS * engine_length["stdev"] / math.sqrt(figures["drafts"])
        prefill = truth["requests"] / engine_length["steps"] if engine == "sglang" else 0.0
        assert abs(figures["meanLength"] - engine_length["mean"]) <= chance + prefill, (name, figures, truth)
        assert chance < 0.5 * engine_length["mean"], (name, figures, truth)  # a window of enough drafts to tell
        assert figures["meanLength"] > 1.05, (name, figures)
