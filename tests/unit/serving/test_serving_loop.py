"""The per-serving loop's wake-ups: watch events wake it at once, but never into its own stale view."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import time

from drafter_operator.controllers.serving.apply import Applied
from drafter_operator.controllers.serving.loop import Wakeups, run

KEY = ("team", "kimi")
#: A timeout or catch-up limit no test waits out: a wait that ends proves something else ended it.
NEVER = 3600.0
#: How long a test waits before it calls the loop stuck: a guard against hanging, never a measure.
STUCK = 30.0


def timed(coro_factory) -> float:
    """Seconds the coroutine took; a loaded machine only makes them longer, so only floors are asserted."""
    async def main():
        started = time.monotonic()
        await asyncio.wait_for(coro_factory(), STUCK)
        return time.monotonic() - started
    return asyncio.run(main())


async def until(condition) -> None:
    async def polled():
        while not condition():
            await asyncio.sleep(0.01)
    await asyncio.wait_for(polled(), STUCK)


def test_a_watch_event_wakes_the_loop_at_once_and_the_interval_otherwise():
    wakeups = Wakeups(catch_up=5)

    # Only the event can end the first wait; the quiet loop's wait ends by its interval, never before it.
    async def woken_soon():
        asyncio.get_running_loop().call_later(0.05, wakeups.saw, KEY, "pods", "p", "7")
        await wakeups.wait(KEY, timeout=NEVER)
    timed(woken_soon)
    quiet = Wakeups(catch_up=5)
    assert timed(lambda: quiet.wait(KEY, timeout=0.2)) >= 0.2


def test_after_a_write_only_its_own_watch_event_lets_the_loop_decide_again():
    wakeups = Wakeups(catch_up=NEVER)

    async def scenario():
        wakeups.expect(KEY, [("services", "kimi", "42")])
        loop = asyncio.get_running_loop()
        loop.call_later(0.05, wakeups.saw, KEY, "pods", "p", "40")  # an older event: the view is still stale
        loop.call_later(0.3, wakeups.saw, KEY, "services", "kimi", "42")
        await wakeups.wait(KEY, timeout=NEVER)
    assert timed(scenario) >= 0.3  # not woken by the older event; ended by our own (catch-up: NEVER)


def test_a_version_the_watch_delivered_before_the_write_returned_is_not_waited_for():
    wakeups = Wakeups(catch_up=NEVER)

    async def scenario():
        wakeups.saw(KEY, "deployments", "kimi-abc", "9")  # the event raced ahead of the PATCH response
        wakeups.expect(KEY, [("deployments", "kimi-abc", "9")])
        await wakeups.wait(KEY, timeout=NEVER)
    timed(scenario)  # ends although nothing else will ever wake it


def test_a_missed_watch_event_delays_the_loop_by_the_catch_up_limit_only():
    wakeups = Wakeups(catch_up=0.3)

    async def scenario():
        wakeups.expect(KEY, [("services", "kimi", "42")])
        asyncio.get_running_loop().call_later(0.05, wakeups.saw, KEY, "pods", "p", "43")
        await wakeups.wait(KEY, timeout=NEVER)
    assert timed(scenario) >= 0.3  # the catch-up limit, never the timeout, ended it


@contextlib.asynccontextmanager
async def running_loop(wakeups: Wakeups, reconcile, error_retry: float):
    """The serving loop as a task (60 s interval: only wake-ups and deadlines drive it), cancelled after."""
    task = asyncio.create_task(run(KEY, wakeups, reconcile, interval=60, error_retry=error_retry,
                                   clock=lambda: dt.datetime.now(dt.timezone.utc)))
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def test_run_reconciles_on_every_wake_and_retries_after_a_failure():
    wakeups = Wakeups(catch_up=5)
    calls: list[float] = []

    async def reconcile():
        calls.append(time.monotonic())
        if len(calls) == 2:
            raise RuntimeError("apiserver unavailable")
        return Applied(written=[], recheck_at=None)

    async def scenario():
        async with running_loop(wakeups, reconcile, error_retry=0.1):
            await asyncio.sleep(0.05)
            wakeups.saw(KEY, "deployments", "kimi-abc", "3")  # -> second reconcile, which fails
            await until(lambda: len(calls) >= 3)  # -> third, after error_retry
            await asyncio.sleep(0.3)  # and no other: the interval is 60 s
    asyncio.run(scenario())
    assert len(calls) == 3
    assert calls[2] - calls[1] >= 0.1


def test_run_wakes_itself_at_the_plans_deadline():
    wakeups = Wakeups(catch_up=5)
    calls: list[float] = []

    async def reconcile():
        calls.append(time.monotonic())
        return Applied(written=[], recheck_at=dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=0.2))

    async def scenario():
        async with running_loop(wakeups, reconcile, error_retry=1):
            # The interval is 60 s and the guard 30 s: only the plan's deadline explains a second call.
            await until(lambda: len(calls) >= 2)
    asyncio.run(scenario())
    assert len(calls) >= 2


def test_a_later_version_of_a_written_object_counts_as_seen():
    wakeups = Wakeups(catch_up=NEVER)

    async def scenario():
        wakeups.expect(KEY, [("deployments", "kimi-abc", "41")])
        # kopf batches the events of one object: only the status update after our create arrives
        asyncio.get_running_loop().call_later(0.05, wakeups.saw, KEY, "deployments", "kimi-abc", "43")
        await wakeups.wait(KEY, timeout=NEVER)
    timed(scenario)  # ended by the later version (catch-up: NEVER)


def test_a_loop_cancelled_as_it_is_woken_stops():
    """A serving's DELETED event cancels its loop and wakes it in the same step; the loop must end (on
    Python 3.11 asyncio.wait_for swallowed such a cancellation and the deleted serving's loop ran forever)."""
    import asyncio as aio

    from drafter_operator.controllers.serving import loop as sl

    async def scenario() -> bool:
        wakeups = sl.Wakeups(catch_up=5)
        waiting = aio.create_task(wakeups.wait("k", 60))
        await aio.sleep(0)  # it waits on the wake-up now
        waiting.cancel()
        wakeups.saw("k", "drafterservings", "kimi", "7")  # the same event wakes it
        try:
            await aio.wait_for(aio.shield(waiting), 2)
        except aio.CancelledError:
            return True
        except TimeoutError:
            return False
        return False

    for _ in range(50):  # the race is per step of the event loop: try it many times
        assert asyncio.run(scenario())


def test_a_wait_that_gave_up_on_its_own_writes_says_the_view_is_behind_once():
    wakeups = Wakeups(catch_up=0.05)

    async def gave_up():
        wakeups.expect(KEY, [("deployments", "kimi-r", "42")])
        wakeups.saw(KEY, "pods", "p", "43")  # woken, but not by our own write
        await wakeups.wait(KEY, timeout=NEVER)
    asyncio.run(gave_up())
    assert wakeups.take_behind(KEY) is True
    assert wakeups.take_behind(KEY) is False  # once: the reconcile it told read the apiserver

    async def caught_up():
        wakeups.expect(KEY, [("deployments", "kimi-r", "44")])
        wakeups.saw(KEY, "deployments", "kimi-r", "44")
        await wakeups.wait(KEY, timeout=NEVER)
    asyncio.run(caught_up())
    assert wakeups.take_behind(KEY) is False
