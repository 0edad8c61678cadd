"""The end-to-end session holds the demo's operator at zero and gives back what it found
(tests/support/demo_operator.py, the pure part of tests/e2e/conftest.py's `operator` fixture)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tests.support import demo_operator


def test_the_first_worker_scales_the_demo_down_and_the_last_gives_its_replicas_back():
    alive = {1, 2}.__contains__
    paused, scale = demo_operator.enter(None, 1, alive, found=2)
    assert (paused, scale) == ({"replicas": 2, "holders": [1]}, True)
    paused, scale = demo_operator.enter(paused, 2, alive, found=0)  # already down: keeps what the first found
    assert (paused, scale) == ({"replicas": 2, "holders": [1, 2]}, False)
    paused, restore = demo_operator.leave(paused, 1, alive)
    assert (paused, restore) == ({"replicas": 2, "holders": [2]}, None)  # worker 2 still runs tests
    assert demo_operator.leave(paused, 2, alive) == (None, 2)


def test_without_a_demo_nothing_is_scaled_or_restored():
    assert demo_operator.enter(None, 1, lambda pid: True, found=None) == (None, False)
    assert demo_operator.enter(None, 1, lambda pid: True, found=0) == (None, False)  # a demo already at zero
    assert demo_operator.leave(None, 1, lambda pid: True) == (None, None)


def test_a_session_that_died_holding_it_does_not_keep_the_demo_down():
    paused = {"replicas": 1, "holders": [7]}  # left by a killed run: the demo is still at zero
    paused, scale = demo_operator.enter(paused, 8, {8}.__contains__, found=0)
    assert (paused, scale) == ({"replicas": 1, "holders": [8]}, False)
    assert demo_operator.leave(paused, 8, {8}.__contains__) == (None, 1)


@given(st.integers(min_value=1, max_value=3), st.permutations([1, 2, 3, 4]))
def test_whatever_the_order_only_the_last_leaver_restores_exactly_what_was_found(found, leaving):
    alive = set(leaving)
    paused = None
    for pid in (1, 2, 3, 4):
        paused, _ = demo_operator.enter(paused, pid, alive.__contains__, found=found if pid == 1 else 0)
    restores = []
    for pid in leaving:
        paused, restore = demo_operator.leave(paused, pid, alive.__contains__)
        alive.discard(pid)
        restores.append(restore)
    assert restores == [None, None, None, found] and paused is None
