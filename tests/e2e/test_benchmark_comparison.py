"""DrafterBenchmark spec.candidates end to end: the comparison measures each candidate serving by a DrafterBenchmark of
its own, one after another, records the pick at each load, and takes its candidates' runs with it when deleted
(the apiserver's garbage collector, through the owner references)."""

from __future__ import annotations

import pytest

from drafter_operator.timestamps import parse
from tests.e2e.conftest import emulator_settings
from tests.support.e2e_benchmark import GOOD_DRAFTER, SEED_DRAFTER, benchmark_status, finished, half_node
from tests.support.e2e_serving import apply, wait_ready

pytestmark = pytest.mark.e2e

CANDIDATES = ("kimi-good", "kimi-seed")


def test_one_benchmark_compares_two_drafters_one_after_another_and_deleting_it_deletes_their_runs(fast_engines):
    cluster, namespace, operator = fast_engines
    emulator_settings(cluster, namespace, time_scale="0.5", startup_seconds="2")
    good, seed = half_node("kimi-good"), half_node("kimi-seed")
    good["spec"]["drafter"]["model"] = GOOD_DRAFTER
    seed["spec"]["drafter"]["model"] = SEED_DRAFTER  # 15% acceptance: slower than no speculation at any load
    baseline = half_node("kimi-baseline")
    baseline["spec"]["drafter"] = {"method": "none"}
    for body in (good, seed, baseline):
        apply(cluster, namespace, body)
    for name in (*CANDIDATES, "kimi-baseline"):
        wait_ready(cluster, namespace, name)
    apply(cluster, namespace, {
        "apiVersion": "drafter.dev/v1alpha1", "kind": "DrafterBenchmark", "metadata": {"name": "families"},
        "spec": {"candidates": [{"name": name} for name in CANDIDATES], "concurrencyLevels": [1, 32],
                 "baseline": {"servingRef": {"name": "kimi-baseline"}}, "numPrompts": 4, "maxTokens": 96,
                 "timeout": "5m"}})
    status = finished(cluster, namespace, "families", timeout=480)
    assert status["state"] == "Succeeded", (status, operator.log_tail())
    compared = status["comparison"]
    runs = [c["benchmark"] for c in compared["candidates"]]
    assert [c["serving"] for c in compared["candidates"]] == list(CANDIDATES)
    assert runs == ["families-c1-g1", "families-c2-g1"] and all(c["state"] == "Succeeded" for c in compared["candidates"])
    first, second = (benchmark_status(cluster, namespace, run) for run in runs)
    # One after another: the second sweep started only once the first had finished.
    assert parse(second["startTime"]) >= parse(first["completionTime"])
    for run, serving in zip(runs, CANDIDATES):
        item = cluster.get_json("-n", namespace, "drafterbenchmark", run)
        assert item["spec"]["servingRef"] == {"name": serving} and item["spec"]["concurrencyLevels"] == [1, 32]
        (owner,) = item["metadata"]["ownerReferences"]
        assert owner["name"] == "families" and owner["controller"] is True
    levels = {level["concurrency"]: level for level in compared["levels"]}
    assert {1, 32} <= set(levels)
    for level in (1, 32):
        speedups = {s["serving"]: s["speedup"] for s in levels[level]["speedups"]}
        assert set(speedups) == set(CANDIDATES)
        best = max(speedups, key=speedups.get)
        assert levels[level]["pick"] == (best if speedups[best] > 1.0 else "no speculation"), levels[level]
    # The seed's drafter never pays (0.66x at one stream); the good one does at one stream.
    assert levels[1]["pick"] == "kimi-good"

    cluster.kubectl("-n", namespace, "delete", "drafterbenchmark", "families", "--wait=true")
    cluster.wait_for("the candidates' runs garbage-collected", lambda: not any(
        cluster.get_json("-n", namespace, "drafterbenchmarks")["items"]), timeout=120)
