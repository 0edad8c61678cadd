"""Hand the memory the operator has freed back to the kernel, every minute (glibc's ``malloc_trim``).

Why: a cold start with many servings (kopf's initial lists, a burst of events and reconciles in every
thread at once) makes the C heap grow. Most of it is freed once the fleet is reconciled, but glibc keeps
freed memory inside its arenas: with 500 servings the operator's RSS stayed at 329 MiB while 152 MiB of
it was free. One ``malloc_trim(0)`` brought it to 184 MiB and it stayed there (bench/fleet_scale.py
--heap-snapshots --heap-figures-only --heap-trim; docs/performance.md). A trim takes about 3 ms.
On a C library without ``malloc_trim`` (musl) this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import threading
from collections.abc import Callable

from drafter_operator import settings

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_SECONDS = settings.MEMORY_RELEASE_SECONDS.default


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def release_freed_memory() -> bool:
    """Return the C heap's free pages to the kernel; False when this C library cannot."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


class PeriodicRelease(threading.Thread):
    """Calls ``release`` every ``interval_seconds`` until ``stop()``. A thread, not an event-loop task:
    it runs whatever the event loop is doing, and the trim holds no Python lock other threads wait on."""

    def __init__(self, interval_seconds: float = DEFAULT_INTERVAL_SECONDS,
                 release: Callable[[], bool] = release_freed_memory) -> None:
        super().__init__(name="memory-release", daemon=True)
        self.interval_seconds = interval_seconds
        self.release = release
        self._stopped = threading.Event()

    def run(self) -> None:
        while not self._stopped.wait(self.interval_seconds):
            try:
                if not self.release():
                    log.info("this C library has no malloc_trim: freed memory is not handed back")
                    return
            except Exception:  # noqa: BLE001 - never let a trim take the operator down
                log.exception("releasing freed memory failed")

    def stop(self) -> None:
        self._stopped.set()
