"""The demo's drafter on the emulator's engine: the schedule from the refined sweep reaches at least 0.95x of
the better of static speculation and none at every load from 1 to 64 streams (bench/crossover_schedule.py,
modelled seconds of the emulator's step loop: no wall clock)."""

from __future__ import annotations

import pytest

from bench import crossover_schedule as bench
from drafter_operator.engines import crossover
from drafter_operator.engines import dynamic

# One worker runs the module, so its module-scoped fixture (the costly part) is built once, not once per worker.
pytestmark = pytest.mark.xdist_group("crossover-schedule")

MAX_TOKENS = 128


def measure(command, streams):
    return bench.modelled_tokens_per_second(command, streams, MAX_TOKENS)


@pytest.fixture(scope="module")
def sweep():
    return bench.refined_sweep(measure)


def test_the_demo_sweep_is_refined_to_a_bracket_within_ten_percent(sweep):
    found = crossover.bracket(sweep)
    assert [c for c, _ in sweep[:3]] == [1, 8, 32]
    assert found.narrow and found.below - found.above <= max(1, 0.1 * found.above)
    # the first level below 1.0x of the demo's sweep alone (32) is twice the break-even
    assert 12 <= found.above < found.below <= 18


def test_the_schedule_reaches_95_percent_of_the_better_of_static_and_none_at_every_load(sweep):
    schedule = dynamic.schedule_from_levels([{"concurrency": c, "speedup": s} for c, s in sweep], bench.K)
    found = crossover.bracket(sweep)
    # The demo's levels 1..64 and every level around the break-even, where static and none trade places.
    levels = sorted(set(bench.LEVELS) | set(range(found.above - 3, found.below + 4)))
    rows = bench.compare(measure, schedule, levels)
    shares = {row.streams: round(row.share, 3) for row in rows}
    assert min(shares.values()) >= 0.95, shares
    # the property has teeth: static speculation costs a fifth or more at 24 streams, none costs a third at 1
    by_streams = {row.streams: row for row in rows}
    assert by_streams[24].static < 0.8 * by_streams[24].none
    assert by_streams[1].none < 0.7 * by_streams[1].static
