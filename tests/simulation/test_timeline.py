"""operations.timeline: the operations and pauses both scenario generators (serving and batch) draw."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from drafter_testbed.simulation import batch, operations
from drafter_testbed.simulation.operations import timeline

FIRST = [{"kind": "create"}]


def drawn(rng: random.Random, kind: str) -> dict:
    return {"kind": kind}


@given(seed=st.integers(0, 2**32), count=st.integers(0, 60), split=st.sampled_from([300.0, 600.0]),
       at_least=st.floats(0, 10 * 86400))
def test_timeline_draws_up_to_count_and_pauses_at_least_the_time_asked(seed, count, split, at_least):
    ops = timeline(random.Random(seed), FIRST, [("a", 1), ("b", 3)], drawn, count, split=split, at_least=at_least)
    assert len(ops) == max(count, len(FIRST))
    assert ops[0]["kind"] == "create" and {op["kind"] for op in ops[1:]} <= {"a", "b"}
    assert [op["salt"] for op in ops] == list(range(len(ops)))
    total = sum(op["dt"] for op in ops)
    assert total >= at_least - 0.05 * len(ops)  # each pause is rounded to 0.1 s
    if total > at_least + 0.05 * len(ops):  # not stretched: every pause within its drawn range
        assert all(5 - 0.05 <= op["dt"] <= 12 * split + 0.05 for op in ops)


def test_timeline_is_a_function_of_the_seed():
    args = (FIRST, [("a", 1), ("b", 1)], drawn, 30)
    assert timeline(random.Random(3), *args, split=600, at_least=86400) == \
        timeline(random.Random(3), *args, split=600, at_least=86400)
    assert timeline(random.Random(3), *args, split=600, at_least=86400) != \
        timeline(random.Random(4), *args, split=600, at_least=86400)


def test_both_generators_start_with_their_creations():
    _, serving_ops = operations.generate(1, 20)
    _, batch_ops = batch.generate(1, 20)
    assert serving_ops[0]["kind"] == "create" and len(serving_ops) == 20
    assert [op["kind"] for op in batch_ops[:2]] == ["create_training", "create_benchmark"] and len(batch_ops) == 20
