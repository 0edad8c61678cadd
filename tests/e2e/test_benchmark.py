"""DrafterBenchmark end to end: a Job on a CPU node runs `drafter-operator bench` against engine pods that
really serve (the emulator), and its result lands in status."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from tests.e2e.conftest import emulator_settings
from tests.support.e2e_serving import apply, seed_serving, wait_ready
from tests.support.e2e_benchmark import GOOD_DRAFTER, SEED_DRAFTER, benchmark, finished, half_node

pytestmark = pytest.mark.e2e


@pytest.mark.timing  # speedups measured on the wall clock: run alone among the workers
def test_the_seeds_drafter_measures_15_percent_and_slower_than_the_baseline(fast_engines):
    cluster, namespace, operator = fast_engines
    # A quarter of real time, not a tenth: at 10x the emulator's own CPU work per token shows in the ratio
    # when the machine is busy (0.70x measured under load average 7 against the model's 0.66x).
    emulator_settings(cluster, namespace, time_scale="0.25", startup_seconds="2")
    bad = seed_serving("kimi")
    bad["spec"]["drafter"]["model"] = SEED_DRAFTER
    baseline = seed_serving("kimi-baseline")
    baseline["spec"]["drafter"] = {"method": "none"}
    baseline["spec"].pop("acceptance")
    for serving in (bad, baseline):
        apply(cluster, namespace, serving)
    wait_ready(cluster, namespace, "kimi")
    wait_ready(cluster, namespace, "kimi-baseline")
    # A namespace whose policy demands cpu and memory limits: the apiserver refuses any pod without them,
    # so the benchmark runs only because its pod carries them.
    cluster.kubectl("-n", namespace, "apply", "-f", "-", input=yaml.safe_dump({
        "apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "limits-required"},
        "spec": {"hard": {"limits.cpu": "1000", "limits.memory": "10Ti"}}}))
    apply(cluster, namespace, benchmark("seed", "kimi", baseline={"servingRef": {"name": "kimi-baseline"}},
                                        gate={"minSpeedup": "1.0"}))
    status = finished(cluster, namespace, "seed")
    assert status["state"] == "Succeeded", (status, operator.log_tail())
    result = status["result"]
    assert result["acceptanceRate"] == pytest.approx(0.15, abs=0.03)
    # The emulator's truth for the seed's drafter is 0.66x, measured on the wall clock while the other tiers run
    # beside this one (nice 19): a full CI run measured 0.619x (6% off) on a loaded 2-core machine, so 10%.
    # What a user relies on is that the drafter is measured slower than no speculation.
    assert result["speedup"] == pytest.approx(0.66, rel=0.10) and result["speedup"] < 1.0
    assert result["totalTokens"] == 3 * 256
    gate = next(c for c in status["conditions"] if c["type"] == "GatePassed")
    assert gate["status"] == "False" and re.match(r"speedup 0\.\d+", gate["message"]), gate["message"]
    pods = cluster.get_json("-n", namespace, "pods", "-l", "drafter.dev/benchmark=seed")["items"]
    nodes = {p["spec"]["nodeName"] for p in pods}
    labels = [cluster.get_json("node", node)["metadata"]["labels"] for node in nodes]
    assert labels and not any("nvidia.com/gpu.present" in node for node in labels)  # a CPU node, while one fits
    for pod in pods:  # preferred, not required (a cluster of GPU nodes only runs it too), and never a GPU
        assert "preferredDuringSchedulingIgnoredDuringExecution" in pod["spec"]["affinity"]["nodeAffinity"]
        resources = pod["spec"]["containers"][0]["resources"]
        assert set(resources["limits"]) == set(resources["requests"]) == {"cpu", "memory"}
    printed = cluster.kubectl("-n", namespace, "get", "drafterbenchmark", "seed").stdout
    assert "Succeeded" in printed and "eagle3" in printed
    detail = cluster.get_json("-n", namespace, "configmap", status["resultConfigMap"])["data"]["result.json"]
    assert len(json.loads(detail)["prompts"]) == 3  # every prompt, beside the compact status.result


def test_a_benchmark_of_a_serving_that_does_not_exist_fails_with_the_reason(fast_engines):
    cluster, namespace, _ = fast_engines
    cluster.kubectl("-n", namespace, "apply", "-f", "-", input=yaml.safe_dump(benchmark("nothing", "no-such-serving")))
    status = finished(cluster, namespace, "nothing", timeout=60)
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert (status["state"], failed["reason"]) == ("Failed", "ServingNotFound")
    assert "spec.servingRef" in failed["message"] and "no-such-serving" in failed["message"]
    assert cluster.get_json("-n", namespace, "jobs")["items"] == []


@pytest.mark.timing  # speedups measured on the wall clock: run alone among the workers
def test_a_gated_swap_refuses_the_seeds_drafter_without_a_failed_request_and_promotes_a_good_one(fast_engines):
    from drafter_testbed.serving_client import ClientLoop
    from tests.support.e2e_serving import condition, deployments, service_ip, serving_status

    cluster, namespace, operator = fast_engines
    baseline = half_node("kimi-baseline")
    baseline["spec"]["drafter"] = {"method": "none"}
    gate = {"minSpeedup": "1.2", "baseline": {"servingRef": {"name": "kimi-baseline"}}, "numPrompts": 3,
            "maxTokens": 256}
    serving = half_node("kimi", swap={"strategy": "BlueGreen", "gate": gate})
    serving["spec"]["drafter"]["model"] = GOOD_DRAFTER
    apply(cluster, namespace, baseline)
    apply(cluster, namespace, serving)
    wait_ready(cluster, namespace, "kimi-baseline")
    good = wait_ready(cluster, namespace, "kimi")["activeRevision"]
    clients = ClientLoop(service_ip(cluster, namespace, "kimi"), 8000, "/models/Kimi-K2.5")
    clients.start()
    try:
        serving["spec"]["drafter"]["model"] = SEED_DRAFTER
        apply(cluster, namespace, serving)
        refused = cluster.wait_for("the gate to refuse the seed's drafter", lambda: (s := serving_status(
            cluster, namespace, "kimi")) and condition(s, "Progressing").get("reason") == "RevisionFailed" and s,
            timeout=180)
        message = condition(refused, "Progressing")["message"]
        assert re.search(r"failed spec.swap.gate \(speedup 0\.[5-8]\dx < 1\.20x\)", message), message
        assert refused["activeRevision"] == good
        cluster.wait_for("the refused revision removed", lambda: list(deployments(cluster, namespace, "kimi")) == [good],
                         timeout=60)
        bad = next(r for r in refused["revisions"] if r["name"] != good)
        assert bad["good"] is False and bad["failedReason"].startswith("failed spec.swap.gate")
        reasons = [e["reason"] for e in cluster.get_json("-n", namespace, "events", "--field-selector",
                                                          "involvedObject.name=kimi")["items"]]
        assert "GateFailed" in reasons

        serving["spec"]["drafter"]["model"] = GOOD_DRAFTER
        serving["spec"]["drafter"]["numSpeculativeTokens"] = 4
        apply(cluster, namespace, serving)
        promoted = cluster.wait_for("the gate to promote the good drafter", lambda: (s := serving_status(
            cluster, namespace, "kimi")).get("activeRevision") not in (good, bad["name"]) and s, timeout=180)
    finally:
        clients.stop()
    assert clients.failures == [] and clients.ok > 0, clients.failures[:3]
    gates = cluster.get_json("-n", namespace, "drafterbenchmarks", "-l", "drafter.dev/gate=true")["items"]
    verdicts = sorted(g["status"]["result"]["verdict"] for g in gates)
    assert verdicts == ["Failed", "Passed"]
    assert next(g for g in gates if g["status"]["result"]["verdict"] == "Passed")["status"]["result"]["speedup"] >= 1.2
    assert condition(promoted, "Ready")["status"] == "True"


@pytest.mark.timing  # speedups measured on the wall clock: run alone among the workers
def test_a_load_sweep_finds_the_crossover_the_batching_model_predicts(fast_engines):
    """vLLM, the good drafter (a = 0.89, k = 5): drafter_testbed/emulator/batching.py gives 1.73x at 1 to 4 streams, 1.45x at 8,
    0.98x at 16 and 0.60x at 32 (crossover 15.6 streams). The first level of [1, 4, 8, 32] below 1.0 is 32;
    the sweep then measures levels between 8 and 32 until two adjacent ones bracket the break-even within 10%."""
    from drafter_testbed.emulator import batching

    cluster, namespace, _ = fast_engines
    emulator_settings(cluster, namespace, time_scale="1.0", startup_seconds="2")  # batches as the model says
    serving = half_node("kimi")
    serving["spec"]["drafter"]["model"] = GOOD_DRAFTER
    baseline = half_node("kimi-baseline")
    baseline["spec"]["drafter"] = {"method": "none"}
    for body in (serving, baseline):
        apply(cluster, namespace, body)
    wait_ready(cluster, namespace, "kimi")
    wait_ready(cluster, namespace, "kimi-baseline")
    apply(cluster, namespace, benchmark("sweep", "kimi", baseline={"servingRef": {"name": "kimi-baseline"}},
                                        concurrencyLevels=[1, 4, 8, 32], numPrompts=4, maxTokens=128))
    status = finished(cluster, namespace, "sweep", timeout=300)
    assert status["state"] == "Succeeded", status
    result = status["result"]
    speedups = {level["concurrency"]: level["speedup"] for level in result["levels"]}
    truth = {n: batching.speedup_at(n, 0.89, batching.Speculation(k=5), batching.StepCosts()) for n in speedups}
    print({n: (round(speedups[n], 2), round(truth[n], 2)) for n in speedups})
    assert [level["concurrency"] for level in result["levels"]][:4] == [1, 4, 8, 32]
    bracket = result["crossover"]
    assert bracket["withinTolerance"] and result["crossoverConcurrency"] == bracket["belowConcurrency"]
    # measured in wall-clock waves (prefill included), so a margin around the model's 15.6
    assert 12 <= bracket["aboveConcurrency"] < bracket["belowConcurrency"] <= 20
    # One stream drafts as the model says, within what a loaded 2-core machine keeps of it: above the midpoint
    # between not drafting (1.0x) and the model's figure (a CI run measured 1.54x against 1.73x while the
    # unit lane ran beside it); the exact figure is the unit tier's timing tests' job.
    assert (1 + truth[1]) / 2 < speedups[1] and speedups[1] > speedups[8] > 1.0 > speedups[32]


@pytest.mark.timing  # speedups measured on the wall clock: run alone among the workers
def test_a_sweep_run_by_hand_teaches_auto_and_dynamic_and_the_scheduled_revision_stops_drafting_at_load(fast_engines):
    """The first revision of a serving is never gated: a DrafterBenchmark run by hand against it is what
    `minAcceptanceLength: auto` and `dynamic: fromBenchmark` learn from. Its sweep brackets the break-even
    (about 15 streams, as above), the serving moves to a revision that runs vLLM's per-batch-size schedule
    (k = 5 below the break-even, none from it), the
    auto threshold carries over to it, and at 32 streams that revision drafts nothing (the emulator
    honours the schedule) instead of the static drafter's 0.6x."""
    from drafter_operator.engines import dynamic
    from tests.support.e2e_serving import condition, serving_status

    cluster, namespace, operator = fast_engines
    emulator_settings(cluster, namespace, time_scale="1.0", startup_seconds="2")
    serving = half_node("kimi")
    serving["spec"]["drafter"].update(model=GOOD_DRAFTER, dynamic="fromBenchmark")
    serving["spec"]["acceptance"] = {"minAcceptanceLength": "auto", "window": "1m", "minDraftTokens": 100}
    baseline = half_node("kimi-baseline")
    baseline["spec"]["drafter"] = {"method": "none"}
    for body in (serving, baseline):
        apply(cluster, namespace, body)
    static = wait_ready(cluster, namespace, "kimi")
    wait_ready(cluster, namespace, "kimi-baseline")
    assert static["speculationSchedule"]["source"] == "static"
    assert "run a DrafterBenchmark with concurrencyLevels" in static["speculationSchedule"]["message"]
    waiting = condition(static, "Degraded")
    assert (waiting["status"], waiting["reason"]) == ("Unknown", "NoBenchmark"), waiting

    apply(cluster, namespace, benchmark("sweep", "kimi", baseline={"servingRef": {"name": "kimi-baseline"}},
                                        concurrencyLevels=[1, 4, 8, 32], numPrompts=4, maxTokens=128))
    swept = finished(cluster, namespace, "sweep", timeout=300)
    assert swept["state"] == "Succeeded", (swept, operator.log_tail())
    assert swept["revision"] == static["activeRevision"] and swept["numSpeculativeTokens"] == 5
    off = dynamic.off_from(swept["result"]["levels"])
    # The model's break-even is 15.6 streams; measured in wall-clock waves beside other tests it has landed at 12
    # (a CI run). The bound tells a refined bracket from none: unrefined, the levels leave it anywhere in (8, 32].
    assert swept["result"]["crossover"]["withinTolerance"] and 8 < off <= 24, swept["result"]["crossover"]

    scheduled = cluster.wait_for("the scheduled revision to serve", lambda: (s := serving_status(
        cluster, namespace, "kimi")).get("activeRevision") not in (None, static["activeRevision"])
        and condition(s, "Ready").get("status") == "True" and s.get("acceptanceThreshold") and s, timeout=180)
    schedule = scheduled["speculationSchedule"]
    assert schedule["source"] == "benchmark sweep" and schedule["scheduledRevision"] == scheduled["activeRevision"]
    # The engine exports per-position acceptance, so the sweep predicts every k from 0 to 5 at each load: k per
    # band, falling with the load, drafting nothing well above the break-even.
    ranges = [(r["start"], r["end"], r["numSpeculativeTokens"]) for r in schedule["ranges"]]
    ks = [k for _, _, k in ranges]
    assert schedule["basis"] == "kPerBand" and ks == sorted(ks, reverse=True) and ks[0] > ks[-1], schedule
    assert ranges[0][0] == 1 and ranges[0][2] >= 3 and ranges[-1][1] == 65536, schedule
    assert off - 1 <= ranges[-1][0] <= 2 * off, (off, schedule)  # k = 1 may pay a little past the on/off break-even
    threshold = scheduled["acceptanceThreshold"]
    assert threshold["source"] == "benchmark sweep" and threshold["revision"] == static["activeRevision"]
    # break-even length = measured length / speedup at one stream; the good drafter is far above it
    result = swept["result"]
    assert threshold["breakEvenLength"] == pytest.approx(result["acceptanceLength"] / result["speedup"], rel=1e-3)
    assert threshold["minAcceptanceLength"] < result["acceptanceLength"]

    pods = cluster.get_json("-n", namespace, "pods", "-l", f"drafter.dev/revision={scheduled['activeRevision']}")
    ip = next(p["status"]["podIP"] for p in pods["items"] if p.get("status", {}).get("podIP"))
    import urllib.request
    with urllib.request.urlopen(f"http://{ip}:8000/emulator/state", timeout=10) as response:
        state = json.loads(response.read())
    assert state["speculation"]["numSpeculativeTokensPerBatchSize"] == [list(r) for r in ranges]

    apply(cluster, namespace, benchmark("at-load", "kimi", baseline={"servingRef": {"name": "kimi-baseline"}},
                                        concurrencyLevels=[1, 32], numPrompts=4, maxTokens=128))
    loaded = finished(cluster, namespace, "at-load", timeout=300)
    assert loaded["state"] == "Succeeded" and loaded["revision"] == scheduled["activeRevision"]
    speedups = {level["concurrency"]: level["speedup"] for level in loaded["result"]["levels"]}
    static_speedups = {level["concurrency"]: level["speedup"] for level in result["levels"]}
    print({"static": static_speedups, "scheduled": speedups})
    # Wall-clock ratios vary with the machine's load (1.50 then 1.74 for the same drafter), so each bound sits
    # midway between the two outcomes it tells apart rather than near the expected value.
    assert speedups[1] > 1.2, speedups  # still drafts at one stream (no drafting would be about 1.0)
    assert speedups[32] > 0.85 and speedups[32] > static_speedups[32], speedups  # drafts nothing (static about 0.6)
    # The emulator applies the schedule as vLLM does with data parallelism 1: the watch never says it is ignored.
    obeyed = condition(serving_status(cluster, namespace, "kimi"), "ScheduleIgnored")
    assert obeyed.get("status") in ("False", "Unknown"), obeyed
    assert obeyed["reason"] in ("DraftsWithinSchedule", "NotMeasured"), obeyed


def test_an_sglang_sweep_becomes_adaptive_speculation_tiers_the_engine_pod_reads(fast_engines):
    """spec.drafter.dynamic on SGLang: a sweep run by hand becomes SGLang's adaptive speculation in a new revision,
    whose pod reads the tier config its template carries (projected by the downward API) and serves by it:
    candidate steps 1..k per band, falling with the load."""
    from drafter_operator.engines import sglang
    from tests.support.e2e_serving import condition, serving_status

    cluster, namespace, operator = fast_engines
    emulator_settings(cluster, namespace, time_scale="1.0", startup_seconds="2")
    serving = half_node("kimi-sgl")
    serving["spec"]["engine"] = "sglang"
    serving["spec"].pop("image", None)  # the operator's default SGLang image (the seed names vLLM's)
    serving["spec"]["drafter"] = {"method": "eagle3", "model": GOOD_DRAFTER, "numSteps": 5, "dynamic": "fromBenchmark"}
    baseline = half_node("kimi-sgl-baseline")
    baseline["spec"]["engine"] = "sglang"
    baseline["spec"].pop("image", None)
    baseline["spec"]["drafter"] = {"method": "none"}
    for body in (serving, baseline):
        apply(cluster, namespace, body)
    static = wait_ready(cluster, namespace, "kimi-sgl")
    wait_ready(cluster, namespace, "kimi-sgl-baseline")
    assert static["speculationSchedule"]["source"] == "static"

    apply(cluster, namespace, benchmark("sgl-sweep", "kimi-sgl", baseline={"servingRef": {"name": "kimi-sgl-baseline"}},
                                        concurrencyLevels=[1, 8, 32], numPrompts=4, maxTokens=64))
    swept = finished(cluster, namespace, "sgl-sweep", timeout=300)
    assert swept["state"] == "Succeeded", (swept, operator.log_tail())
    scheduled = cluster.wait_for("the adaptive revision to serve", lambda: (s := serving_status(
        cluster, namespace, "kimi-sgl")).get("activeRevision") not in (None, static["activeRevision"])
        and condition(s, "Ready").get("status") == "True" and s, timeout=180)
    schedule = scheduled["speculationSchedule"]
    ranges = [(r["start"], r["end"], r["numSpeculativeTokens"]) for r in schedule["ranges"]]
    ks = [k for _, _, k in ranges]
    assert schedule["basis"] == "kPerBand" and ks == sorted(ks, reverse=True) and ks[0] > ks[-1], schedule
    assert schedule["scheduledRevision"] == scheduled["activeRevision"]

    pods = cluster.get_json("-n", namespace, "pods", "-l", f"drafter.dev/revision={scheduled['activeRevision']}")
    pod = next(p for p in pods["items"] if p.get("status", {}).get("podIP"))
    command = pod["spec"]["containers"][0]["command"]
    assert "--speculative-adaptive" in command
    assert command[command.index("--speculative-num-steps") + 1] == str(max(ks))
    import urllib.request
    with urllib.request.urlopen(f"http://{pod['status']['podIP']}:{sglang.DEFAULT_PORT}/emulator/state",
                                timeout=10) as response:
        state = json.loads(response.read())
    adaptive = state["speculation"]["adaptive"]
    assert state["speculation"]["adaptiveDroppedBy"] is None
    assert [(t["batchSize"], t["candidateSteps"]) for t in adaptive["tiers"]] == [
        (start, list(range(1, k + 1)) if k else [0]) for start, _, k in ranges]
