"""The break-even, measured: the sweep's refinement (engines/crossover.py), the bench loop that runs it, and the
schedule it gives on the emulator's throughput model (drafter_testbed/emulator/batching.py, what the emulator times steps with)."""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from drafter_operator.engines import crossover
from drafter_operator.benchmark_client.result import Level, Stream, benchmark_result
from drafter_testbed.emulator.profiles import load_profile
from drafter_operator.engines import dynamic
from drafter_testbed.emulator import batching
from drafter_testbed.emulator.batching import NO_SPECULATION, Speculation

MAX_LEVEL = 256
#: The bracket at least loses a quarter of its width per level: log(256) / log(4/3) < 20, plus the halvings
#: from the lowest level down to 1 (8).
MAX_STEPS = 28

sweeps = st.lists(st.integers(1, MAX_LEVEL), min_size=1, max_size=16, unique=True)


def refine(speedup_of, sweep):
    """Run the refinement to its end the way ``benchmark_client/run.py`` does; checks every step on the way."""
    levels = [(c, speedup_of(c)) for c in sweep]
    for _ in range(MAX_STEPS + 1):
        level = crossover.next_level(levels)
        if level is None:
            return levels
        found = crossover.bracket(levels)
        measured = {c for c, _ in levels}
        assert level not in measured  # never repeats a level
        assert 1 <= level < found.below
        assert found.above is None or found.above < level
        levels.append((level, speedup_of(level)))
    pytest.fail(f"no end after {MAX_STEPS} refined levels: {levels}")


def assert_bracketed(levels):
    found = crossover.bracket(levels)
    if found is None:
        assert all(s >= 1.0 for _, s in levels)
        return found
    by_level = dict(levels)
    assert by_level[found.below] < 1.0 and all(by_level[c] >= 1.0 for c in by_level if c < found.below)
    if found.above is None:
        assert found.below == 1  # refined down to one stream: speculation never pays
    else:
        assert by_level[found.above] >= 1.0
        assert not any(found.above < c < found.below for c in by_level)  # adjacent measured levels
        assert found.below - found.above <= max(1.0, crossover.TOLERANCE * found.above)  # within 10%
        assert found.above <= found.estimate < found.below
    return found


@settings(max_examples=300, deadline=None)
@given(sweep=sweeps, break_even=st.floats(0.5, 300.0), steepness=st.floats(0.001, 5.0))
def test_monotone_curves_are_bracketed_within_ten_percent_around_the_true_break_even(sweep, break_even, steepness):
    # Speedup falling through 1.0 at break_even (a decreasing curve of any steepness).
    def speedup_of(c):
        return 1.0 + math.tanh(steepness * (break_even - c))

    levels = refine(speedup_of, sweep)
    found = assert_bracketed(levels)
    if found is not None:
        assert found.below >= break_even and (found.above is None or found.above <= break_even)


@settings(max_examples=300, deadline=None)
@given(sweep=sweeps, curve=st.lists(st.floats(0.05, 4.0), min_size=MAX_LEVEL, max_size=MAX_LEVEL))
def test_any_curve_terminates_bracketed_without_repeating_a_level(sweep, curve):
    # Non-monotone: any speedup at any level (noise, bumps, several dips below 1.0).
    levels = refine(lambda c: curve[c - 1], sweep)
    assert_bracketed(levels)


def test_the_demo_sweep_on_the_demos_drafter():
    # The demo's sweep (1, 8, 32) of its retrained drafter on vLLM (a = 0.89, k = 5) on the emulator's model:
    # 32 is the first level below 1.0x, the break-even is 15.6 streams.
    a, spec, costs = 0.89, Speculation(5), load_profile(None).costs
    levels = refine(lambda c: batching.speedup_at(c, a, spec, costs), [1, 8, 32])
    found = assert_bracketed(levels)
    assert (found.above, found.below) == (15, 16)
    assert [c for c, _ in levels][3:] == [21, 17, 15, 16]  # 4 levels more
    assert found.estimate == pytest.approx(batching.crossover_streams(a, spec, costs), abs=0.1)


def test_unmeasurable_sweeps_need_no_refinement():
    assert crossover.next_level([]) is None
    assert crossover.next_level([(1, None), (8, None)]) is None  # no baseline: no speedup
    assert crossover.next_level([(1, 1.7), (64, 1.1)]) is None  # paid at every level
    assert crossover.next_level([(1, 0.7), (8, 0.5)]) is None  # never pays, down to one stream
    assert crossover.next_level([(4, 0.7), (8, 0.5)]) == 2  # below 1.0 at its lowest level: halve it
    assert crossover.next_level([(16, 1.2), (17, 0.8)]) is None  # adjacent
    assert crossover.next_level([(100, 1.2), (110, 0.8)]) is None  # within 10%
    assert crossover.next_level([(100, 1.2), (111, 0.8)]) == 106


def level(concurrency, tps, baseline):
    return Level(concurrency=concurrency, streams=(Stream(index=0, completion_tokens=int(tps), seconds=1.0),),
                 seconds=1.0, baseline_tokens_per_second=baseline)


def test_the_result_reports_the_bracket():
    levels = [level(1, 170, 100), level(8, 145, 100), level(32, 60, 100), level(21, 81, 100), level(17, 92, 100),
              level(14, 104, 100), level(15, 103, 100), level(16, 98, 100)]
    result = benchmark_result(levels)
    assert result.crossover_concurrency == 16
    assert result.crossover.to_json() == {"aboveConcurrency": 15, "belowConcurrency": 16, "estimate": 15.6,
                                          "withinTolerance": True}
    unrefined = benchmark_result(levels[:3])
    assert (unrefined.crossover.above_concurrency, unrefined.crossover.below_concurrency) == (8, 32)
    assert unrefined.crossover.within_tolerance is False
    assert benchmark_result(levels[:2]).crossover is None


# ------------------------------------------------------------------------------------------------
# The schedule from a refined sweep, on the emulator's throughput model


def throughput(batch, a, k, costs):
    return batching.tokens_per_second(batch, a if k else 0.0, Speculation(k) if k else NO_SPECULATION, costs)


def schedule_ratios(a, k, sweep, costs):
    """Per level 1..64: the scheduled revision's throughput over the better of static k and no speculation."""
    levels = refine(lambda c: batching.speedup_at(c, a, Speculation(k), costs), sweep)
    schedule = dynamic.schedule_from_levels([{"concurrency": c, "speedup": s} for c, s in levels], k)
    ratios = {}
    for batch in range(1, 65):
        scheduled = throughput(batch, a, dynamic.k_for_batch(schedule, batch, k), costs)
        ratios[batch] = scheduled / max(throughput(batch, a, k, costs), throughput(batch, a, 0, costs))
    return ratios


def test_the_demos_schedule_reaches_95_percent_of_the_better_of_static_and_none_at_every_load():
    # The demo's drafter on vLLM (a = 0.89, k = 5), the demo's sweep (1, 8, 32), the emulator's calibration.
    ratios = schedule_ratios(0.89, 5, [1, 8, 32], load_profile(None).costs)
    assert min(ratios.values()) >= 0.95, {b: round(r, 3) for b, r in ratios.items() if r < 0.95}
    # Without the refinement (off from the first level below 1.0x, 32): far below at 24 streams.
    costs = load_profile(None).costs
    assert throughput(24, 0.89, 5, costs) / throughput(24, 0.89, 0, costs) < 0.8


@settings(max_examples=200, deadline=None)
@given(a=st.floats(0.3, 0.97), k=st.integers(1, 8), sweep=sweeps)
def test_any_drafter_and_sweep_schedule_reaches_95_percent_at_every_load(a, k, sweep):
    # A sweep says nothing of loads above its highest level: it must reach the 64 streams judged here.
    assume(max(sweep) >= 64)
    costs = load_profile(None).costs
    ratios = schedule_ratios(a, k, sweep, costs)
    assert min(ratios.values()) >= 0.95, {b: round(r, 3) for b, r in ratios.items() if r < 0.95}


def test_the_bracket_survives_the_termination_messages_cuts():
    import json

    from drafter_operator.api.benchmark import BenchmarkResult
    from drafter_operator.benchmark_client.result import termination_message

    # 24 levels (16 given, 8 refined) with many streams each: the per-prompt rows and the per-level detail go,
    # the bracket stays (the schedule can still be told where the break-even is).
    levels = [Level(concurrency=c, streams=tuple(Stream(index=i, completion_tokens=512, seconds=9.0 + i / 7,
                                                        ttft_seconds=0.1234567, concurrency=c) for i in range(c)),
                    seconds=10.0, baseline_tokens_per_second=512.0 * c / (10.0 * (2.0 - c / 100)))
              for c in range(80, 104)]
    result = benchmark_result(levels)
    message = termination_message(result)
    assert len(message.encode()) <= 4096
    cut = BenchmarkResult.model_validate(json.loads(message))
    assert cut.truncated and cut.crossover == result.crossover and cut.crossover.below_concurrency == 101
