"""Per-object loops started and stopped by watch events (what replaced kopf's daemons and timers, which
made kopf put its finalizer on every object)."""

from __future__ import annotations

import asyncio

import pytest

from drafter_operator.controllers.object_loops import ObjectLoops, every, keeps_running

KEY = ("drafterservings", "team", "kimi")


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def until(condition, guard_seconds: float = 30) -> None:
    """Poll until ``condition`` holds: a loaded machine may stall the loop past any fixed sleep. The
    guard only stops a hang; it measures nothing."""
    async def polled():
        while not condition():
            await asyncio.sleep(0.01)
    await asyncio.wait_for(polled(), guard_seconds)


class Recorder:
    """A loop that records its starts and cleanups and runs until cancelled (or fails when told to)."""

    def __init__(self) -> None:
        self.started = 0
        self.cleaned_up = 0
        self.failures_left = 0

    async def loop(self) -> None:
        self.started += 1
        try:
            if self.failures_left:
                self.failures_left -= 1
                raise RuntimeError("a bug in the loop")
            await asyncio.Event().wait()
        finally:
            self.cleaned_up += 1


@pytest.mark.parametrize("event_type, meta, expected", [
    (None, {}, True),  # kopf's initial listing at startup
    ("ADDED", {}, True),
    ("MODIFIED", {}, True),
    ("MODIFIED", {"deletionTimestamp": "2025-01-01T00:00:00Z"}, False),
    ("DELETED", {}, False),
])
def test_a_loop_runs_until_the_object_is_deleted_or_being_deleted(event_type, meta, expected):
    assert keeps_running(event_type, meta) is expected


def test_the_first_event_starts_one_loop_per_object_however_many_events_follow():
    recorder = Recorder()

    async def scenario():
        loops = ObjectLoops(restart_backoff=60)
        for _ in range(5):
            loops.follow(KEY, True, recorder.loop)
            await settle()
        loops.follow(("drafterservings", "team", "other"), True, recorder.loop)
        await settle()
        assert KEY in loops and len(loops) == 2
        await loops.stop_all(timeout=1)

    asyncio.run(scenario())
    assert recorder.started == 2


def test_a_delete_stops_the_loop_and_runs_its_cleanup():
    recorder = Recorder()

    async def scenario():
        loops = ObjectLoops(restart_backoff=60)
        loops.follow(KEY, True, recorder.loop)
        await settle()
        loops.follow(KEY, False, recorder.loop)
        assert KEY not in loops
        await settle()
        assert recorder.cleaned_up == 1
        loops.follow(KEY, False, recorder.loop)  # more events of the deleted object: nothing to stop
        await settle()

    asyncio.run(scenario())
    assert (recorder.started, recorder.cleaned_up) == (1, 1)


def test_a_failed_loop_starts_again_after_the_backoff():
    recorder = Recorder()
    recorder.failures_left = 2

    async def scenario():
        loops = ObjectLoops(restart_backoff=0.05)
        loops.start(KEY, recorder.loop)
        await settle()
        assert recorder.started == 1  # failed; not started again before the backoff
        assert KEY in loops  # still counted as running: an event does not start a second one
        assert not loops.start(KEY, recorder.loop)
        await until(lambda: recorder.started >= 3)  # two failures, then the third runs
        await asyncio.sleep(0.2)
        assert recorder.started == 3  # and runs on: no fourth start
        await loops.stop_all(timeout=1)

    asyncio.run(scenario())
    assert recorder.cleaned_up == 3


def test_a_loop_that_returns_stays_stopped_and_a_later_event_may_start_it_again():
    runs = []

    async def once():
        runs.append(1)

    async def scenario():
        loops = ObjectLoops(restart_backoff=0.01)
        loops.start(KEY, once)
        await asyncio.sleep(0.1)
        assert runs == [1] and KEY not in loops
        assert loops.start(KEY, once)
        await asyncio.sleep(0.05)

    asyncio.run(scenario())
    assert runs == [1, 1]


def test_an_object_recreated_under_the_same_name_starts_after_the_old_loop_cleaned_up():
    order = []

    async def slow_cleanup():
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0.1)  # e.g. forgetting the old object's metrics
            order.append("old cleaned up")

    async def new_loop():
        order.append("new started")
        await asyncio.Event().wait()

    async def scenario():
        loops = ObjectLoops(restart_backoff=60)
        loops.start(KEY, slow_cleanup)
        await settle()
        loops.stop(KEY)  # DELETED
        loops.start(KEY, new_loop)  # ADDED again at once
        await until(lambda: len(order) == 2)
        await loops.stop_all(timeout=1)

    asyncio.run(scenario())
    assert order == ["old cleaned up", "new started"]


def test_stop_all_waits_for_the_cleanups_but_not_forever():
    recorder = Recorder()

    async def stuck():
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.shield(asyncio.sleep(10))  # a cleanup that ignores the cancellation

    async def scenario():
        loops = ObjectLoops(restart_backoff=60)
        loops.start(KEY, recorder.loop)
        loops.start(("drafterbenchmarks", "team", "b"), stuck)
        await settle()
        started = asyncio.get_running_loop().time()
        await loops.stop_all(timeout=0.2)
        assert asyncio.get_running_loop().time() - started < 1
        assert len(loops) == 0

    asyncio.run(scenario())
    assert recorder.cleaned_up == 1


def test_every_waits_the_interval_before_each_run_and_a_failure_ends_it():
    times = []

    async def scenario():
        loop = asyncio.get_running_loop()
        started = loop.time()

        async def action():
            times.append(loop.time() - started)
            if len(times) == 3:
                raise RuntimeError("apiserver down")

        with pytest.raises(RuntimeError):
            await every(0.05, action)

    asyncio.run(scenario())
    assert len(times) == 3
    assert times[0] >= 0.05  # the event that started it has just reconciled
    assert all(later - earlier >= 0.05 for earlier, later in zip(times, times[1:]))


def test_every_ends_when_its_action_answers_gone():
    from drafter_operator.controllers.object_loops import GONE, every

    answers = iter([None, {"plan": 1}, GONE, None])
    calls = []

    async def action():
        calls.append(1)
        return next(answers)

    asyncio.run(asyncio.wait_for(every(0.01, action), 2))
    assert len(calls) == 3
