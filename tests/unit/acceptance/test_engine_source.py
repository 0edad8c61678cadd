"""Acceptance from engine pods: two real emulator processes on loopback, scraped like replicas."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from contextlib import ExitStack

import pytest

from drafter_operator.engines import metrics_verdicts as mv
from drafter_operator.acceptance import verdict as a
from drafter_operator.acceptance.engine_source import EngineSource, Replica
from tests.processes import free_port
from tests.support.emulator_processes import VLLM, emulator, generate


def state(replica: Replica) -> dict:
    with urllib.request.urlopen(f"http://{replica.ip}:{replica.port}/emulator/state", timeout=10) as resp:
        return json.load(resp)["totals"]


def test_two_replicas_one_bad_are_combined_by_counts_and_reported_each():
    with ExitStack() as stack:
        good = stack.enter_context(emulator(VLLM, 0.9))
        bad = stack.enter_context(emulator(VLLM, 0.15))
        source = EngineSource("vllm", window_seconds=300, num_speculative_tokens=3)
        first = asyncio.run(source.sample([good, bad], at=0))
        assert first.window is None and first.problem is None  # one scrape per replica: no window yet
        before = {r.name: state(r) for r in (good, bad)}
        generate(good, 3)
        generate(bad, 1)
        sample = asyncio.run(source.sample([good, bad], at=60))
        after = {r.name: state(r) for r in (good, bad)}
        delta = {name: {k: after[name][k] - before[name][k] for k in ("draftTokens", "acceptedTokens")}
                 for name in after}
        drafted = sum(d["draftTokens"] for d in delta.values())
        accepted = sum(d["acceptedTokens"] for d in delta.values())
        assert sample.window.draft_tokens == drafted and sample.window.accepted_tokens == accepted
        per_replica = dict(sample.replicas)
        assert per_replica[bad.name].acceptance_rate < 0.2 < 0.6 < per_replica[good.name].acceptance_rate
        assert sample.window.acceptance_rate == pytest.approx(accepted / drafted)


def test_a_replica_that_cannot_be_scraped_makes_the_sample_unavailable_and_history_follows_the_pods():
    with emulator(VLLM, 0.9) as good:
        source = EngineSource("vllm", window_seconds=300, num_speculative_tokens=3)
        asyncio.run(source.sample([good], at=0))
        gone = Replica(name="pod-gone", ip="127.0.0.1", port=free_port())
        sample = asyncio.run(source.sample([good, gone], at=30))
        assert sample.problem is not None and sample.problem[0] == a.METRICS_UNAVAILABLE
        assert "pod-gone" in sample.problem[1]
        asyncio.run(source.sample([], at=60))
        assert source.histories == {}


def test_a_body_over_the_cap_is_invalid_without_reading_it_all():
    with emulator(VLLM, 0.9) as good:
        source = EngineSource("vllm", window_seconds=300, max_body_bytes=512)
        sample = asyncio.run(source.sample([good], at=0))
        assert sample.problem[0] == a.METRICS_INVALID and mv.UnusableReason.TOO_LARGE in sample.problem[1]


def test_no_replicas_is_unavailable():
    sample = asyncio.run(EngineSource("sglang", 300).sample([], at=time.time()))
    assert sample.problem == (a.METRICS_UNAVAILABLE, "no Ready engine pod to scrape")
