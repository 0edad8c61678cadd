"""One loop per DrafterServing: reconcile, then sleep until something about the serving changes;
beside it, the serving's acceptance watch, which measures at its own interval and wakes the loop.

The loop wakes when a watch event arrives for the serving or one of its children (handlers.py calls
`Wakeups.saw`), when the plan's own deadline comes (a startup timeout, a drain ending), or after the
safety interval. After a reconcile that wrote objects, a wake-up waits until the watch has delivered
those objects' new versions (at most `catch_up` seconds): deciding from our own stale view would write
the same status again and post its Events twice. Past `catch_up` the loop decides anyway, from the apiserver
itself rather than the lagging watches (`take_behind`, fresh.py).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Hashable, Iterable

from drafter_operator.controllers.serving.apply import Applied

log = logging.getLogger("drafter.serving")

ObjectRef = tuple[str, str]  # (plural, name)


@dataclass
class _ServingSignals:
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    awaiting: dict[ObjectRef, str] = field(default_factory=dict)  # written, not yet seen -> resourceVersion
    awaiting_since: float = 0.0
    seen: dict[ObjectRef, str] = field(default_factory=dict)  # latest resourceVersion the watch delivered
    behind: bool = False  # the last wait gave up on writes the watches had not returned: the view lags


def at_least(seen: str | None, written: str) -> bool:
    """Has the watch delivered `written` or a later version? kopf hands a handler only the last of the
    events that arrive for one object within its batch window, so the exact version we wrote is often
    skipped (the Deployment controller updates a new Deployment's status at once). resourceVersion is
    opaque by contract but is the etcd revision (an integer) on every apiserver; an unexpected form
    falls back to equality, and the catch-up limit still bounds the wait."""
    if seen is None:
        return False
    if seen.isdigit() and written.isdigit():
        return int(seen) >= int(written)
    return seen == written


class Wakeups:
    """Wake signals per serving key, fed by watch-event handlers; used from the event loop thread only."""

    def __init__(self, catch_up: float, clock: Callable[[], float] = time.monotonic):
        self.catch_up, self.clock = catch_up, clock
        self._servings: dict[Hashable, _ServingSignals] = {}

    def _signals(self, key: Hashable) -> _ServingSignals:
        return self._servings.setdefault(key, _ServingSignals())

    def saw(self, key: Hashable, plural: str, name: str, resource_version: str | None) -> None:
        signals = self._signals(key)
        if resource_version:
            signals.seen[(plural, name)] = resource_version
            if (plural, name) in signals.awaiting and at_least(resource_version, signals.awaiting[(plural, name)]):
                del signals.awaiting[(plural, name)]
        signals.wake.set()

    def expect(self, key: Hashable, written: Iterable[tuple[str, str, str]]) -> None:
        """Versions this loop just wrote; the ones the watch already delivered are not waited for."""
        signals = self._signals(key)
        signals.awaiting = {(plural, name): version for plural, name, version in written
                            if not at_least(signals.seen.get((plural, name)), version)}
        signals.awaiting_since = self.clock()

    def take_behind(self, key: Hashable) -> bool:
        """Whether the last wait gave up on this serving's own writes (the watches lag); asked once per reconcile."""
        signals = self._signals(key)
        behind, signals.behind = signals.behind, False
        return behind

    def forget(self, key: Hashable) -> None:
        self._servings.pop(key, None)

    async def wait(self, key: Hashable, timeout: float) -> None:
        """Until woken with the watch caught up with our writes (or `catch_up` passed), or `timeout`."""
        signals = self._signals(key)
        deadline = self.clock() + timeout
        woken = False
        while True:
            if signals.wake.is_set():
                woken = True
                signals.wake.clear()
            now = self.clock()
            if signals.awaiting and now >= signals.awaiting_since + self.catch_up:
                # A missed watch event (a re-list) must not stall the serving, but a watch that lags must not
                # decide either: the next reconcile reads the apiserver itself (ServingReconciler view_behind).
                signals.awaiting.clear()
                signals.behind = True
            if (woken and not signals.awaiting) or now >= deadline:
                return
            # Woken before the watch returned our own writes: what woke us is still seen by the next
            # reconcile, which waits for those writes' events (or the catch-up limit).
            limit = min(deadline, signals.awaiting_since + self.catch_up) if signals.awaiting else deadline
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallows a cancellation that arrives as the
            # wake-up completes (a serving's DELETED event does both at once), and the deleted serving's loop
            # then ran on forever.
            try:
                async with asyncio.timeout(limit - now):
                    await signals.wake.wait()
            except TimeoutError:
                pass


class ObjectGone(Exception):
    """The serving a loop reconciles is gone from the apiserver though no DELETED event said so (kopf stops watching
    a namespace once it is marked for deletion, before the objects in it go): the loop ends."""


async def run(key: Hashable, wakeups: Wakeups, reconcile: Callable[[], Awaitable[Applied]], interval: float,
              error_retry: float, clock: Callable[[], dt.datetime]) -> None:
    """Reconcile, then wait; until the caller cancels it (the serving's DELETED event) or a reconcile finds the
    serving gone (ObjectGone)."""
    try:
        while True:
            try:
                applied = await reconcile()
            except ObjectGone as gone:
                log.info("%s is gone from the apiserver (no DELETED event came): its loop ends", gone)
                return
            except Exception:  # noqa: BLE001 - the loop outlives a failed write; the next turn retries
                log.exception("reconcile of %s failed; retrying in %s s", key, error_retry)
                await wakeups.wait(key, error_retry)
                continue
            wakeups.expect(key, applied.written)
            timeout = interval
            if applied.recheck_at is not None:
                timeout = min(timeout, max((applied.recheck_at - clock()).total_seconds(), 0.0))
            await wakeups.wait(key, timeout)
    finally:
        wakeups.forget(key)


async def watch_acceptance(measure: Callable[[], Awaitable[object]], publish: Callable[[object], None],
                           interval: float) -> None:
    """Measure every ``interval`` seconds and hand each measurement to ``publish`` (which wakes the
    serving's loop: the verdict is one more input to its decision). A failed measurement is logged and
    skipped: the verdict state machine treats a gap as no data, never as a verdict."""
    while True:
        try:
            publish(await measure())
        except Exception:  # noqa: BLE001 - the watch outlives one bad look; the next interval retries
            log.exception("acceptance measurement failed; next in %s s", interval)
        await asyncio.sleep(interval)
