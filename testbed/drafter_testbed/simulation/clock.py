"""The simulated clock and its event queue: the world's only notion of time.

Time is a float of seconds since T0; `now()` turns it into the timezone-aware datetime the operator's
code expects. Nothing here sleeps, reads the wall clock or uses threads: an event is a callback with a
due time, and events due at the same moment run in the order they were scheduled (a sequence number
breaks ties), so a run is a pure function of its seed and its operations.
"""

from __future__ import annotations

import datetime as dt
import heapq
from typing import Callable

T0 = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.timezone.utc)


def iso_at(t: float) -> str:
    return (T0 + dt.timedelta(seconds=int(t))).strftime("%Y-%m-%dT%H:%M:%SZ")


class Clock:
    def __init__(self) -> None:
        self.t = 0.0
        self._queue: list[tuple[float, int, Callable, tuple]] = []
        self._seq = 0

    def now(self) -> dt.datetime:
        return T0 + dt.timedelta(seconds=self.t)

    def iso(self) -> str:
        return iso_at(self.t)

    def at(self, t: float, fn: Callable, *args) -> None:
        """Run fn(*args) at time t (never before now)."""
        self._seq += 1
        heapq.heappush(self._queue, (max(t, self.t), self._seq, fn, args))

    def after(self, seconds: float, fn: Callable, *args) -> None:
        self.at(self.t + seconds, fn, *args)

    def next_due(self) -> float | None:
        return self._queue[0][0] if self._queue else None

    def pop(self) -> tuple[Callable, tuple]:
        t, _, fn, args = heapq.heappop(self._queue)
        self.t = t
        return fn, args

    def run_for(self, seconds: float, check: Callable[[], None]) -> int:
        """Run every event due in the next `seconds`, calling `check` after each and at the end (the invariants
        are checked after every step); returns how many events ran."""
        end, ran = self.t + seconds, 0
        while (due := self.next_due()) is not None and due <= end:
            fn, args = self.pop()
            fn(*args)
            ran += 1
            check()
        self.t = end
        check()
        return ran
