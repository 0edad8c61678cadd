"""Acceptance by prompt length (benchmark_client/length_buckets.py): the buckets, and a run against the emulator."""

from __future__ import annotations

import asyncio

import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from drafter_operator.api.benchmark import BenchmarkResult, DrafterBenchmarkSpec, LengthBucketResult
from drafter_operator.benchmark_client import length_buckets
from drafter_operator.benchmark_client.result import termination_message
from drafter_operator.benchmark_client.run import Options, run
from drafter_operator.controllers.benchmark.decide import bench_argv
from tests.support.emulator_server import emulator, sglang_argv


@given(st.dictionaries(st.integers(0, 50), st.integers(1, 40000), min_size=1),
       st.lists(st.integers(1, 40000), min_size=1, max_size=8))
def test_every_prompt_lands_in_exactly_one_bucket_and_its_bounds_hold(prompt_tokens, edges):
    grouped = length_buckets.assign(prompt_tokens, edges)
    placed = [i for _, _, members in grouped for i in members]
    assert sorted(placed) == sorted(prompt_tokens)
    for low, high, members in grouped:
        assert all(prompt_tokens[i] >= low and (high is None or prompt_tokens[i] <= high) for i in members)
    lows = [low for low, _, _ in grouped]
    assert lows == sorted(lows)
    assert length_buckets.buckets(edges)[-1][1] is None  # longer prompts than the last edge still count


def test_bucket_edges_must_be_distinct():
    with pytest.raises(pydantic.ValidationError, match="promptLengthBuckets"):
        DrafterBenchmarkSpec.model_validate({"servingRef": {"name": "s"}, "promptLengthBuckets": [1024, 1024]})
    spec = DrafterBenchmarkSpec.model_validate({"servingRef": {"name": "s"}, "promptLengthBuckets": [4096, 1024]})
    argv = bench_argv(spec, "http://t", "vllm", [], None, None, [])
    assert argv[argv.index("--prompt-length-buckets") + 1] == "4096,1024"


def test_a_run_reports_acceptance_in_each_bucket_of_the_prompt_set():
    async def measure():
        async with emulator(sglang_argv()) as (url, engine, _session):
            options = Options(url=url, engine="sglang", metrics_urls=(url,), num_prompts=6, max_tokens=48,
                              num_speculative_tokens=3, prompt_length_buckets=(600,))
            result = await run(options)
            return result, engine.state()["totals"]
    result, totals = asyncio.run(asyncio.wait_for(measure(), 120))
    short, long_ = result.acceptance_by_prompt_length
    counted = {p.index: p.prompt_tokens for p in result.prompts}
    assert (short.min_prompt_tokens, short.max_prompt_tokens, long_.min_prompt_tokens, long_.max_prompt_tokens) == \
        (0, 600, 601, None)
    assert short.prompts == sum(n <= 600 for n in counted.values()) and short.prompts + long_.prompts == 6
    for bucket in (short, long_):
        assert bucket.acceptance_unavailable is None and 0 < bucket.acceptance_rate <= 1
        assert bucket.acceptance_length > 1
    # The buckets' requests come after the run's window: its figures cover the measured prompts only.
    assert totals["requests"] == 1 + 6 + 6  # warm-up, the measured run, the buckets
    assert result.total_tokens == 6 * 48


def test_the_termination_message_keeps_the_buckets_figures():
    buckets = [LengthBucketResult(min_prompt_tokens=i * 100, max_prompt_tokens=i * 100 + 99, prompts=3,
                                  acceptance_rate=0.5, acceptance_length=2.0,
                                  acceptance_unavailable="x" * 500) for i in range(8)]
    result = BenchmarkResult(tokens_per_second=1.0, prompts=None, acceptance_by_prompt_length=buckets,
                             per_position_acceptance=[0.5] * 16)
    kept = BenchmarkResult.model_validate_json(termination_message(result, limit=2000))
    assert [b.acceptance_rate for b in kept.acceptance_by_prompt_length] == [0.5] * 8


def test_a_drafter_trained_shorter_than_the_context_shows_in_the_long_bucket():
    """The emulator's speculators#613: past DRAFTER_EMULATOR_TRAINED_LENGTH tokens of context a request keeps half
    its acceptance, and the buckets tell the long prompts from the short ones."""
    async def measure():
        async with emulator(sglang_argv(), trained_length=600, long_context_acceptance=0.3) as (url, engine, _s):
            options = Options(url=url, engine="sglang", metrics_urls=(url,), num_prompts=6, max_tokens=64,
                              num_speculative_tokens=3, prompt_length_buckets=(560,))
            return await run(options), engine.state()["trainedLength"]
    result, trained = asyncio.run(asyncio.wait_for(measure(), 120))
    short, long_ = result.acceptance_by_prompt_length
    assert trained == 600 and short.max_prompt_tokens == 560 and long_.prompts >= 4
    assert long_.acceptance_rate < 0.6 * short.acceptance_rate, (short, long_)
