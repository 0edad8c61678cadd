"""The emulator honours vLLM's per-batch-size schedule (``num_speculative_tokens_per_batch_size``).

A step drafts the k the schedule gives for the number of requests it schedules; a step that drafts
nothing costs what a step without speculation costs and, like vLLM, counts no draft.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drafter_testbed.emulator.cmdline import EngineRefused, parse_command_line, parse_engine_command_line
from drafter_testbed.emulator.engine import EmulatedEngine
from drafter_testbed.emulator.model import Settings
from drafter_testbed.emulator.profiles import load_profile
from drafter_operator.engines import dynamic

K = 5


def argv_with(schedule) -> list[str]:
    config = {"method": "eagle3", "model": "/models/kimi-k2.5-eagle3", "num_speculative_tokens": K}
    if schedule is not None:
        config[dynamic.SCHEDULE_KEY] = schedule
    return ["vllm", "serve", "/models/kimi-k2.5-int4", "--speculative-config", json.dumps(config)]


def engine_with(schedule, *, acceptance: float | None = None, seed: int = 3) -> EmulatedEngine:
    return EmulatedEngine(parse_command_line(argv_with(schedule)),
                          Settings(time_scale=0.0, seed=seed, acceptance=acceptance), load_profile())


def serve(engine: EmulatedEngine, streams: int, max_tokens: int) -> None:
    async def one() -> None:
        async for _ in engine.generate(16, max_tokens, streaming=True):
            pass

    async def scenario() -> None:
        await asyncio.gather(*(one() for _ in range(streams)))

    asyncio.run(scenario())


def drafts_counter(engine: EmulatedEngine) -> float:
    return engine.exporter.drafts._value.get()


def test_the_schedule_reaches_the_engine_and_its_state():
    engine = engine_with([[1, 7, K], [8, 65536, 0]])
    assert engine.config.speculation.schedule == ((1, 7, K), (8, 65536, 0))
    assert engine.state()["speculation"]["numSpeculativeTokensPerBatchSize"] == [[1, 7, K], [8, 65536, 0]]
    assert engine_with(None).state()["speculation"]["numSpeculativeTokensPerBatchSize"] is None


def test_above_the_crossover_steps_draft_nothing_and_cost_a_plain_step():
    scheduled = engine_with([[1, 7, K], [8, 65536, 0]])
    serve(scheduled, streams=16, max_tokens=30)
    assert scheduled.totals.draft_tokens == 0 and scheduled.totals.verification_steps == 0
    assert drafts_counter(scheduled) == 0
    assert scheduled.totals.generated_tokens == 16 * 30

    plain = EmulatedEngine(parse_command_line(["vllm", "serve", "/models/kimi-k2.5-int4"]),
                           Settings(time_scale=0.0, seed=3), load_profile())
    serve(plain, streams=16, max_tokens=30)
    assert scheduled.scheduler.steps == plain.scheduler.steps == 30
    assert scheduled.scheduler.model_seconds == pytest.approx(plain.scheduler.model_seconds, rel=1e-12)


def test_below_the_crossover_the_schedule_changes_nothing():
    scheduled, static = engine_with([[1, 7, K], [8, 65536, 0]]), engine_with(None)
    for engine in (scheduled, static):
        serve(engine, streams=4, max_tokens=60)
    assert scheduled.totals == static.totals  # same seed, same draws, same steps
    assert scheduled.totals.draft_tokens > 0
    assert scheduled.scheduler.model_seconds == pytest.approx(static.scheduler.model_seconds, rel=1e-12)


def schedules(max_start: int = 40):
    """Valid schedules: sorted, non-overlapping ranges starting at 1, possibly with gaps."""
    def build(cuts: list[int], gaps: list[bool], ks: list[int]) -> list[list[int]]:
        starts = [1] + sorted(set(c for c in cuts if c > 1))
        out = []
        for i, start in enumerate(starts):
            end = (starts[i + 1] - 1) if i + 1 < len(starts) else 65536
            if gaps[i % len(gaps)] and end > start:
                end -= 1  # leave a gap: vLLM carries the previous k across it
            out.append([start, end, ks[i % len(ks)]])
        return out

    return st.builds(build, st.lists(st.integers(2, max_start), max_size=4), st.lists(st.booleans(), min_size=1),
                     st.lists(st.integers(0, 8), min_size=1))


@settings(max_examples=40, deadline=None)
@given(schedules(), st.integers(1, 24), st.integers(2, 12))
def test_every_step_drafts_the_k_of_its_batch_size(schedule, streams, max_tokens):
    # No acceptance: every request emits one token a step, so all stay in the batch to the end.
    engine = engine_with(schedule, acceptance=0.0)
    serve(engine, streams, max_tokens)
    k = dynamic.k_for_batch(schedule, streams, K)
    assert engine.totals.draft_tokens == (max_tokens - 1) * streams * k
    assert drafts_counter(engine) == ((max_tokens - 1) * streams if k else 0)
    assert engine.totals.generated_tokens == streams * max_tokens


def test_the_load_prediction_follows_the_schedule():
    crossover = 8
    scheduled = engine_with([[1, crossover - 1, K], [crossover, 65536, 0]], acceptance=0.89)
    static = engine_with(None, acceptance=0.89)
    by_streams = {row["streams"]: row for row in scheduled.state()["batching"]["byStreams"]}
    static_by = {row["streams"]: row for row in static.state()["batching"]["byStreams"]}
    for streams, row in by_streams.items():
        if streams < crossover:
            assert row["numSpeculativeTokens"] == K and row["speedup"] == static_by[streams]["speedup"]
        else:
            assert row["numSpeculativeTokens"] == 0 and row["speedup"] == pytest.approx(1.0)
    assert static_by[64]["speedup"] < 1.0  # the static drafter costs throughput there


@pytest.mark.parametrize("schedule,message", [
    ([[2, 8, 3]], "must start at 1"),
    ([[1, 8, 3], [8, 16, 0]], "non-overlapping"),
    ([[1, 0, 3]], "must be positive"),
    ([[4, 2, 3]], "start must be <= end"),
    ([[1, 8, -1]], "must be >= 0"),
    ([], "must not be empty"),
    ([[1, 8]], "3-item sequence"),
])
def test_a_schedule_vllm_refuses_at_start_up_is_refused(schedule, message):
    with pytest.raises(EngineRefused) as refused:
        parse_engine_command_line(argv_with(schedule))
    assert message in str(refused.value) and refused.value.status == 1
