"""The benchmark's arithmetic and its termination message (pure: benchmark_client/result.py)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drafter_operator.api.benchmark import BenchmarkResult
from drafter_operator.benchmark_client import result as r
from drafter_operator.engines.metrics import AcceptanceWindow

# The seed: 5 prompts x 512 tokens in 47.0 s on vLLM + EAGLE-3, against 82.5 tok/s without speculation.
SEED_SECONDS = (9.1, 9.6, 9.3, 9.5, 9.5)


def seed_level(baseline: float | None = 82.5) -> r.Level:
    streams = tuple(r.Stream(index=i, completion_tokens=512, seconds=s, ttft_seconds=0.05, prompt_tokens=600)
                    for i, s in enumerate(SEED_SECONDS))
    return r.Level(concurrency=1, streams=streams, seconds=sum(SEED_SECONDS), baseline_tokens_per_second=baseline)


def test_the_seeds_table():
    result = r.benchmark_result([seed_level()])
    assert result.total_tokens == 2560
    assert result.total_seconds == pytest.approx(47.0)
    assert result.tokens_per_second == pytest.approx(54.4, abs=0.1)
    assert result.ms_per_token == pytest.approx(18.4, abs=0.05)
    assert result.baseline_tokens_per_second == 82.5
    assert result.speedup == pytest.approx(0.66, abs=0.005)
    assert result.crossover_concurrency == 1  # a single level below 1.0 is its own crossover
    assert result.levels is None  # one level is a plain run
    assert [p.index for p in result.prompts] == [0, 1, 2, 3, 4]
    assert result.prompts[0].tokens_per_second == pytest.approx(512 / 9.1, abs=1e-3)
    # ITL: the time after the first token over the tokens after it.
    assert result.prompts[0].itl_seconds == pytest.approx((9.1 - 0.05) / 511, abs=1e-6)


def test_no_baseline_no_speedup():
    result = r.benchmark_result([seed_level(baseline=None)])
    assert result.speedup is None and result.baseline_tokens_per_second is None
    assert result.crossover_concurrency is None


def test_no_tokens_does_not_divide_by_zero():
    level = r.Level(concurrency=1, streams=(r.Stream(index=0, completion_tokens=0, seconds=0.0),), seconds=0.0,
                    baseline_tokens_per_second=82.5)
    result = r.benchmark_result([level])
    assert result.tokens_per_second == 0.0 and result.ms_per_token is None and result.speedup == 0.0


def _level(concurrency: int, tps: float, baseline: float | None) -> r.Level:
    return r.Level(concurrency=concurrency, streams=(r.Stream(0, int(tps), 1.0),), seconds=1.0,
                   baseline_tokens_per_second=baseline)


@pytest.mark.parametrize(("speedups", "expected"), [
    ({1: 1.72, 8: 1.56, 16: 1.1, 32: 0.67, 64: 0.68}, 32),
    ({1: 1.7, 2: 1.7}, None),
    ({1: 1.0, 2: 0.999}, 2),  # exactly 1.0 is not below
    ({32: 0.67, 1: 1.72, 8: 0.9}, 8),  # the lowest concurrency below 1.0, whatever the order given
])
def test_crossover(speedups, expected):
    levels = [_level(c, 100 * s, 100.0) for c, s in speedups.items()]
    assert r.crossover_concurrency(levels) == expected
    result = r.benchmark_result(levels)
    assert result.crossover_concurrency == expected
    assert [lv.concurrency for lv in result.levels] == list(speedups)  # in the order run
    assert result.concurrency == levels[0].concurrency  # top-level figures: the first level


def test_levels_without_baseline_have_no_crossover():
    assert r.crossover_concurrency([_level(1, 50, None), _level(2, 90, None)]) is None


def test_acceptance_fields_come_from_the_window():
    window = AcceptanceWindow(engine="vllm", drafts=772, draft_tokens=3860, accepted_tokens=535, generation_tokens=1307,
                              acceptance_rate=535 / 3860, mean_acceptance_length=1 + 535 / 772, rate_source="counters",
                              per_position=(0.43, 0.19, 0.08, 0.04, 0.0))
    result = r.benchmark_result([seed_level()], window)
    assert (result.draft_tokens, result.accepted_tokens) == (3860, 535)
    assert result.acceptance_rate == pytest.approx(0.1386, abs=1e-4)
    assert result.acceptance_length == pytest.approx(1.693, abs=1e-3)
    assert result.per_position_acceptance == [0.43, 0.19, 0.08, 0.04, 0.0]
    assert result.acceptance_unavailable is None
    assert result.mean_draft_tokens == 5.0  # 3860 drafted over 772 drafting steps: k = 5 every step


def test_the_mean_draft_is_recorded_where_the_engine_counts_drafted_tokens_only():
    # vLLM suffix decoding: 1,000 drafting steps drafted 2,300 tokens (k = 8 is an upper bound).
    counted = AcceptanceWindow(engine="vllm", drafts=1000, draft_tokens=2300, accepted_tokens=1400,
                               generation_tokens=2400, acceptance_rate=1400 / 2300, mean_acceptance_length=2.4,
                               rate_source="counters")
    assert r.benchmark_result([seed_level()], counted).mean_draft_tokens == 2.3
    # SGLang: draft tokens derived as k x verify calls (estimated): their mean is k, which says nothing.
    derived = AcceptanceWindow(engine="sglang", drafts=1000, draft_tokens=3000, accepted_tokens=1400,
                               generation_tokens=2400, acceptance_rate=1400 / 3000, mean_acceptance_length=2.4,
                               rate_source="derived", estimated=True)
    assert r.benchmark_result([seed_level()], derived).mean_draft_tokens is None


def test_unavailable_acceptance_has_no_figures_and_a_bounded_reason():
    result = r.benchmark_result([seed_level()], None, "Unparseable: http://pod:8000/metrics: " + "x" * 5000)
    assert result.acceptance_rate is None and result.draft_tokens is None
    assert result.acceptance_unavailable.startswith("Unparseable: ")
    assert len(result.acceptance_unavailable) == r.MAX_REASON_CHARS


def test_a_small_result_is_sent_whole():
    result = r.benchmark_result([seed_level()])
    message = r.termination_message(result)
    assert json.loads(message) == result.to_json() and "truncated" not in message
    assert "\n" not in message and ": " not in message  # compact


def test_a_thousand_prompts_fit_in_4_kib_without_the_per_prompt_rows():
    streams = tuple(r.Stream(index=i % 5, completion_tokens=512, seconds=9.4 + i / 1000, ttft_seconds=0.0625,
                             prompt_tokens=700) for i in range(1000))
    levels = [r.Level(concurrency=1, streams=streams, seconds=9400.0, baseline_tokens_per_second=82.5),
              _level(8, 600, 660), _level(32, 610, 2640)]
    message = r.termination_message(r.benchmark_result(levels))
    assert len(message.encode()) <= 4096
    parsed = BenchmarkResult.model_validate(json.loads(message))
    assert parsed.truncated is True and parsed.prompts is None
    assert [lv.concurrency for lv in parsed.levels] == [1, 8, 32]  # the levels still fit, in full
    assert parsed.levels[0].ttft_seconds == pytest.approx(0.0625)
    assert parsed.total_tokens == 512_000 and parsed.crossover_concurrency == 1


finite = st.floats(min_value=0.0, max_value=1e6, allow_nan=False)


@st.composite
def runs(draw):
    count = draw(st.integers(1, 1000))
    streams = tuple(r.Stream(index=draw(st.integers(0, 999)), completion_tokens=draw(st.integers(0, 65536)),
                             seconds=draw(finite), ttft_seconds=draw(st.none() | finite),
                             prompt_tokens=draw(st.none() | st.integers(0, 10**6)), concurrency=1)
                    for _ in range(min(count, 20)))
    streams = (streams * (count // len(streams) + 1))[:count]  # many rows, few distinct draws (speed)
    levels = [r.Level(concurrency=1, streams=streams, seconds=draw(finite),
                      baseline_tokens_per_second=draw(st.none() | st.floats(0.01, 1e6)))]
    for c in draw(st.lists(st.integers(2, 256), max_size=255, unique=True)):
        levels.append(r.Level(concurrency=c, streams=streams[:3], seconds=draw(st.floats(0.001, 1e5)),
                              baseline_tokens_per_second=draw(st.none() | st.floats(0.01, 1e6))))
    k = draw(st.integers(0, 64))
    window = AcceptanceWindow(engine="vllm", drafts=1e6, draft_tokens=1e6 * k, accepted_tokens=1e5,
                              generation_tokens=1e6, acceptance_rate=draw(st.floats(0, 1)),
                              mean_acceptance_length=draw(st.floats(1, 65)), rate_source="counters",
                              per_position=tuple(draw(st.floats(0, 1)) for _ in range(k)))
    unavailable = draw(st.none() | st.text(max_size=3000))
    return levels, (None if unavailable is not None else window), unavailable


@settings(max_examples=60, deadline=None)
@given(runs())
def test_the_termination_message_always_fits_and_validates(run):
    levels, window, unavailable = run
    result = r.benchmark_result(levels, window, unavailable)
    message = r.termination_message(result)
    assert len(message.encode()) <= r.TERMINATION_MESSAGE_LIMIT
    parsed = BenchmarkResult.model_validate(json.loads(message))
    full = json.dumps(result.to_json(), separators=(",", ":"))
    if len(full.encode()) <= r.TERMINATION_MESSAGE_LIMIT:
        assert message == full and parsed.truncated is None
    else:
        assert parsed.truncated is True and parsed.prompts is None
    # The headline figures are never dropped.
    assert (parsed.total_tokens, parsed.tokens_per_second, parsed.speedup) == \
        (result.total_tokens, result.tokens_per_second, result.speedup)
    assert parsed.crossover_concurrency == result.crossover_concurrency
