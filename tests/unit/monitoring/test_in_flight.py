"""Requests in flight read from an engine's /metrics (monitoring/in_flight.py), on bodies the engine
emulator's exporters write with the engines' own metric names (held to the real engines in the contract tier)."""

from __future__ import annotations

import asyncio

import pytest

from drafter_testbed.emulator.exporters import SglangExporter, VllmExporter
from drafter_operator.engines import metrics_verdicts as mv
from drafter_operator.monitoring import in_flight


@pytest.mark.parametrize("engine, exporter", [("vllm", lambda: VllmExporter("target", 5)),
                                              ("sglang", lambda: SglangExporter("target", 3, 4))])
def test_running_requests_are_counted_per_engine(engine, exporter):
    export = exporter()
    assert in_flight.count_in_flight(engine, export.render()) == 0
    export.set_load(running=3, kv_tokens=1000)
    assert in_flight.count_in_flight(engine, export.render()) == 3


def test_a_body_of_the_other_engine_is_not_a_count():
    with pytest.raises(mv.MetricsUnusable):
        in_flight.count_in_flight("sglang", VllmExporter("target", 5).render())


def test_a_fractional_gauge_is_refused():
    body = b"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1.5\nvllm:num_requests_waiting 0\n"
    with pytest.raises(mv.MetricsUnusable):
        in_flight.count_in_flight("vllm", body)


def test_no_ready_pod_means_nothing_in_flight_and_an_unreachable_pod_means_unknown():
    assert asyncio.run(in_flight.requests_in_flight("vllm", [], 8000)) == 0
    # 127.0.0.1:9 (discard) refuses connections here: the count is unknown, never 0.
    assert asyncio.run(in_flight.requests_in_flight("vllm", ["127.0.0.1"], 9)) is None
