"""The periodic release of freed memory (memory_release.py)."""

from __future__ import annotations

import ctypes
import threading

from drafter_operator import memory_release


def _run_until(release, reached: threading.Event) -> memory_release.PeriodicRelease:
    """A releaser at a 10-ms interval, stopped (and joined) once ``reached`` is set."""
    releaser = memory_release.PeriodicRelease(0.01, release)
    releaser.start()
    assert reached.wait(60)
    releaser.stop()
    releaser.join(60)
    assert not releaser.is_alive()
    return releaser


def test_glibc_hands_freed_memory_back():
    # This machine's Python runs on glibc: the trim is available and runs.
    assert memory_release.release_freed_memory() is True


def test_the_release_runs_every_interval_until_stopped():
    calls = []
    called_twice = threading.Event()

    def release() -> bool:
        calls.append(1)
        if len(calls) >= 2:
            called_twice.set()
        return True

    _run_until(release, called_twice)
    count = len(calls)
    threading.Event().wait(0.05)
    assert len(calls) == count  # nothing after stop()


def test_a_c_library_without_malloc_trim_stops_the_thread_after_one_try():
    calls = []
    releaser = memory_release.PeriodicRelease(0.01, lambda: calls.append(1) or False)
    releaser.start()
    releaser.join(60)
    assert not releaser.is_alive() and calls == [1]


def test_a_failing_release_does_not_end_the_thread():
    calls = []
    done = threading.Event()

    def release() -> bool:
        calls.append(1)
        if len(calls) == 1:
            raise ctypes.ArgumentError("boom")
        done.set()
        return True

    _run_until(release, done)
    assert len(calls) >= 2
