"""The per-serving acceptance watch against a real emulator process: verdict, status block, gauges."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import json
import urllib.request

from prometheus_client import REGISTRY

from drafter_operator.api import DrafterServingSpec
from drafter_operator.acceptance.measurement import AcceptanceMonitor, ready_replicas, ready_with_ip
from drafter_operator.acceptance import verdict as a
from drafter_operator.controllers.serving.acceptance import Watched
from tests.support.emulator_processes import VLLM, emulator, generate

T0 = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.timezone.utc)


def spec(**acceptance) -> DrafterServingSpec:
    return DrafterServingSpec.model_validate({
        "engine": "vllm", "target": {"model": "/models/kimi-k2.5"},
        "drafter": {"method": "eagle3", "model": "/models/emulator-good-drafter", "numSpeculativeTokens": 3},
        "acceptance": {"minAcceptanceRate": "0.4", "window": "30s", "for": "0s", "minDraftTokens": 100, **acceptance}})


def pod(name: str, revision: str, ip: str, ready: bool = True) -> dict:
    return {"metadata": {"name": name, "labels": {"drafter.dev/revision": revision}},
            "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def degraded_gauge(revision: str) -> float | None:
    return REGISTRY.get_sample_value("drafter_degraded", {
        "namespace": "ns", "name": "kimi", "engine": "vllm", "drafter": "eagle3:/models/emulator-good-drafter",
        "revision": revision})


def test_ready_replicas_are_the_active_revisions_ready_pods_with_an_ip():
    pods = [pod("a", "r1", "127.0.0.5"), pod("b", "r1", "127.0.0.6", ready=False), pod("c", "r2", "127.0.0.7"),
            {"metadata": {"name": "d", "labels": {"drafter.dev/revision": "r1"}}, "status": {}}]
    assert [r.name for r in ready_replicas(pods, "r1", 8000)] == ["a"]


def test_a_pod_takes_traffic_when_ready_with_an_ip_and_not_being_deleted():
    assert ready_with_ip(pod("a", "r1", "127.0.0.5"))
    assert not ready_with_ip(pod("a", "r1", "127.0.0.5", ready=False))
    assert not ready_with_ip(pod("a", "r1", ""))
    going = pod("a", "r1", "127.0.0.5")
    going["metadata"]["deletionTimestamp"] = "2026-11-30T12:00:00Z"
    assert not ready_with_ip(going) and ready_replicas([going], "r1", 8000) == []
    assert not ready_with_ip({"metadata": {"name": "bare"}})


def test_a_bad_drafter_degrades_and_recovers_with_status_and_gauge():
    with emulator(VLLM, 0.15) as replica:
        monitor = AcceptanceMonitor("ns", "kimi", port=replica.port)
        pods = [pod(replica.name, "rev1", replica.ip)]
        first = asyncio.run(monitor.measure(Watched(spec(), "rev1"), pods, T0))
        assert first.verdict.status == "Unknown" and first.status is None
        generate(replica, 3)
        low = asyncio.run(monitor.measure(Watched(spec(), "rev1"), pods, T0 + dt.timedelta(seconds=10)))
        assert (low.verdict.status, low.verdict.reason) == ("True", a.LOW_RATE) and low.changed
        assert low.status["rate"] < 0.4 and low.status["source"] == "engine" and low.status["windowSeconds"] == 30
        assert degraded_gauge("rev1") == 1.0
        body = json.dumps({"acceptance": 0.95}).encode()
        urllib.request.urlopen(urllib.request.Request(f"http://{replica.ip}:{replica.port}/emulator/acceptance",
                                                      data=body, headers={"Content-Type": "application/json"})).read()
        generate(replica, 3)
        healed = asyncio.run(monitor.measure(Watched(spec(), "rev1"), pods, T0 + dt.timedelta(seconds=45)))
        assert (healed.verdict.status, healed.verdict.reason) == ("False", a.HEALTHY)
        assert degraded_gauge("rev1") == 0.0
        # A new revision starts a fresh watch and drops the old revision's series.
        fresh = asyncio.run(monitor.measure(Watched(spec(), "rev2"), [pod(replica.name, "rev2", replica.ip)],
                                            T0 + dt.timedelta(seconds=50)))
        assert fresh.verdict.status == "Unknown" and degraded_gauge("rev1") is None


def test_nothing_is_watched_without_spec_acceptance():
    plain = DrafterServingSpec.model_validate({"engine": "vllm", "target": {"model": "/m"},
                                               "drafter": {"method": "none"}})
    assert asyncio.run(AcceptanceMonitor("ns", "x").measure(Watched(plain, "r"), [], T0)) is None


def metrics_available_gauge(revision: str) -> float | None:
    return REGISTRY.get_sample_value("drafter_engine_metrics_available", {
        "namespace": "ns", "name": "kimi", "engine": "vllm", "drafter": "eagle3:/models/emulator-good-drafter",
        "revision": revision})


def test_engine_metrics_are_not_called_unavailable_while_no_pod_is_ready():
    """A new serving's engines load the model for minutes: nothing to read is not an unreadable endpoint,
    or DrafterEngineMetricsUnavailable would page for every model load."""
    monitor = AcceptanceMonitor("ns", "kimi", port=9)
    loading = [pod("loading", "rev7", "127.0.0.9", ready=False)]
    measured = asyncio.run(monitor.measure(Watched(spec(), "rev7"), loading, T0))
    assert measured.verdict.status == "Unknown"
    assert metrics_available_gauge("rev7") is None
    # Ready but its port answers nothing (127.0.0.9:9, discard, is closed here): that is unavailable.
    answered_nothing = asyncio.run(monitor.measure(Watched(spec(), "rev7"), [pod("loading", "rev7", "127.0.0.9")],
                                                   T0 + dt.timedelta(seconds=5)))
    assert answered_nothing.verdict.status == "Unknown"
    assert metrics_available_gauge("rev7") == 0.0


def test_the_same_look_is_judged_against_the_figure_at_promotion_when_there_is_one():
    from drafter_operator.acceptance import drift as d

    promoted = d.Baseline(revision="rev1", benchmark="kimi-gate-rev1", length=3.0, tolerance=0.25)
    with emulator(VLLM, 0.15) as replica:
        monitor = AcceptanceMonitor("ns", "kimi", port=replica.port)
        pods = [pod(replica.name, "rev1", replica.ip)]
        assert asyncio.run(monitor.measure(Watched(spec(), "rev1"), pods, T0)).drift is None  # no figure: nothing judged
        asyncio.run(monitor.measure(Watched(spec(), "rev1", baseline=promoted), pods, T0 + dt.timedelta(seconds=5)))
        generate(replica, 3)
        low = asyncio.run(monitor.measure(Watched(spec(), "rev1", baseline=promoted), pods, T0 + dt.timedelta(seconds=10)))
        assert low.drift.baseline == promoted and low.drift.changed and low.changed
        assert (low.drift.condition.status, low.drift.condition.reason) == ("True", d.DRIFTED)  # `for` is 0s here
        assert "< 2.25, more than 25% under the 3.00 gate benchmark kimi-gate-rev1" in low.drift.condition.message
        # A new figure at promotion starts the drift clock afresh; the Degraded verdict runs on.
        again = dataclasses.replace(promoted, benchmark="kimi-gate-rev1-b")
        fresh = asyncio.run(monitor.measure(Watched(spec(), "rev1", baseline=again), pods, T0 + dt.timedelta(seconds=15)))
        assert fresh.drift.previous is None and fresh.previous is not None
