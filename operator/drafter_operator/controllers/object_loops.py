"""Long-running work per watched object, without a finalizer: one asyncio task per key, started and
stopped by the watch-event handlers.

kopf's own daemons and timers would do this, but kopf puts its finalizer on every object a daemon or a
timer matches, so that it can stop them before the object goes. Nothing of ours needs that (every child
carries an ownerReference, and the garbage collector removes it), and the finalizer made every delete
(of a serving, of its namespace) wait forever once the operator was uninstalled. Here a loop is
cancelled from the DELETED event, or from the first event carrying a deletionTimestamp, and all of them
at the operator's cleanup; the object itself never waits for us.

A loop also ends by itself once its object is gone from the apiserver (`every`'s action answers `GONE`; the
serving loop's reconcile raises `serving.loop.ObjectGone`): kopf stops watching a namespace as soon as the
namespace is marked for deletion, before the objects in it are deleted, so their DELETED events never come, and a
loop waiting for one would run against a deleted object for as long as the operator does.

Used from the event loop's thread only (kopf's handlers are async).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable, Hashable, Mapping

log = logging.getLogger("drafter.loops")

LoopFn = Callable[[], Awaitable[None]]
#: What an `every` action answers when its object is gone: the loop ends (an event of the object starts it again).
GONE = "gone"


def keeps_running(event_type: str | None, meta: Mapping) -> bool:
    """Should an object's loop run after this watch event? Not once it is deleted or being deleted
    (kopf stopped its daemons at the deletionTimestamp too: the children go with it)."""
    return event_type != "DELETED" and not meta.get("deletionTimestamp")


def finished(status: Mapping | None) -> bool:
    """Has a DrafterBenchmark or DrafterTraining reached its outcome? A benchmark says so in status.state, a
    training in status.stage (reading only `state` kept every finished training reconciling every few seconds
    for as long as it existed)."""
    status = status or {}
    return status.get("state", status.get("stage")) in ("Succeeded", "Failed")


async def every(interval: float, action: Callable[[], Awaitable[object]]) -> None:
    """kopf's timer without its finalizer: `action` once `interval` seconds have passed since the last
    one ended. The first run waits too: the watch event that starts the loop has just reconciled. It ends when
    `action` answers GONE."""
    while True:
        await asyncio.sleep(interval)
        if await action() == GONE:
            return


class ObjectLoops:
    """At most one running task per key; a task that fails is started again after `restart_backoff`
    seconds (kopf's default backoff for a failed daemon or timer), one that returns stays stopped."""

    def __init__(self, restart_backoff: float = 60.0):
        self.restart_backoff = restart_backoff
        self._running: dict[Hashable, asyncio.Task] = {}
        # Cancelled, not yet finished: a loop started again for the key (the object re-created under the
        # same name) waits for the old one's cleanup, which would otherwise forget the new one's state.
        self._stopping: dict[Hashable, asyncio.Task] = {}

    def __contains__(self, key: Hashable) -> bool:
        return key in self._running

    def __len__(self) -> int:
        return len(self._running)

    def count(self, prefix: str) -> int:
        """How many objects have a running loop whose key starts with ``prefix`` (a kind's plural): keys are
        (prefix, namespace, name, ...), and an object with two loops (a finished one's resync) counts once."""
        return len({key[1:3] for key in list(self._running) if isinstance(key, tuple) and key[:1] == (prefix,)})

    def follow(self, key: Hashable, wanted: bool, loop: LoopFn) -> None:
        """Start `loop` for `key` when `wanted` and none runs yet; stop the running one when not wanted."""
        if wanted:
            self.start(key, loop)
        else:
            self.stop(key)

    def start(self, key: Hashable, loop: LoopFn) -> bool:
        """Start `loop()` for `key` unless one already runs (every watch event calls this). True: started."""
        if key in self._running:
            return False
        task = asyncio.create_task(self._supervise(key, loop, self._stopping.get(key)), name=f"loop {key}")
        self._running[key] = task
        task.add_done_callback(lambda done: self._drop(self._running, key, done))
        return True

    def stop(self, key: Hashable) -> None:
        """Cancel `key`'s loop, if any. Its `finally` blocks run at its next step, not before this returns."""
        task = self._running.pop(key, None)
        if task is None:
            return
        task.cancel()
        self._stopping[key] = task
        task.add_done_callback(lambda done: self._drop(self._stopping, key, done))

    async def stop_all(self, timeout: float) -> None:
        """Cancel every loop and wait (at most `timeout` seconds) for their cleanups: the operator stops."""
        for key in list(self._running):
            self.stop(key)
        if self._stopping:
            _, late = await asyncio.wait(set(self._stopping.values()), timeout=timeout)
            if late:
                log.warning("%d object loops did not stop within %s s", len(late), timeout)

    async def _supervise(self, key: Hashable, loop: LoopFn, previous: asyncio.Task | None) -> None:
        if previous is not None:
            await asyncio.wait({previous})
        while True:
            try:
                await loop()
                return
            except Exception:  # noqa: BLE001 - one object's failure must not end its loop for good
                log.exception("the loop of %s failed; starting it again in %s s", key, self.restart_backoff)
            await asyncio.sleep(self.restart_backoff)

    @staticmethod
    def _drop(tasks: dict[Hashable, asyncio.Task], key: Hashable, done: asyncio.Task) -> None:
        if tasks.get(key) is done:
            del tasks[key]
