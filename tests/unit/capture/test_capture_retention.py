"""Which captured files a capture deletes: past retention first, then the oldest beyond the size cap."""

from __future__ import annotations

from datetime import datetime, timezone

from hypothesis import given
from hypothesis import strategies as st

from drafter_operator.capture.retention import CapturedFile, hour_file, hour_started, to_delete

NOW = datetime(2026, 12, 6, 18, 30, tzinfo=timezone.utc).timestamp()
HOUR = 3600


def files(*sizes: int) -> list[CapturedFile]:
    """One file per hour ending with the current hour, oldest first."""
    return [CapturedFile(hour_file(NOW - (len(sizes) - 1 - n) * HOUR), size) for n, size in enumerate(sizes)]


def test_hour_files_are_named_by_their_utc_hour_and_read_back() -> None:
    assert hour_file(NOW) == "capture-2026-12-06T18.jsonl"
    assert hour_started("capture-2026-12-06T18.jsonl") == datetime(2026, 12, 6, 18, tzinfo=timezone.utc).timestamp()
    assert hour_started("notes.txt") is None
    assert hour_started("capture-2026-13-06T18.jsonl") is None
    # In a pod's directory of the claim: the file's own name counts, not the directory's.
    assert hour_started("pod-a/capture-2026-12-06T18.jsonl") == hour_started("capture-2026-12-06T18.jsonl")
    assert hour_started("capture-2026-12-06T18.jsonl/notes.txt") is None


def test_files_past_retention_go_and_the_rest_stay() -> None:
    # retention 2h: the file of 15:00-16:00 ended 2.5h ago; 16:00-17:00 ended 1.5h ago
    assert to_delete(files(1, 1, 1, 1), NOW, 2 * HOUR, 10**9) == ["capture-2026-12-06T15.jsonl"]


def test_the_oldest_go_beyond_the_size_cap() -> None:
    assert to_delete(files(5, 5, 5), NOW, 100 * HOUR, 10) == ["capture-2026-12-06T16.jsonl"]


def test_foreign_files_are_never_deleted_nor_counted() -> None:
    foreign = [CapturedFile("README", 10**12)]
    assert to_delete(foreign + files(1), NOW, HOUR, 5) == []


@given(st.lists(st.integers(min_value=0, max_value=10**6), min_size=0, max_size=40),
       st.integers(min_value=1, max_value=200), st.integers(min_value=0, max_value=10**7))
def test_what_stays_fits_the_cap_and_is_within_retention_and_newest(sizes: list[int], retention_hours: int,
                                                                     cap: int) -> None:
    present = files(*sizes)
    doomed = to_delete(present, NOW, retention_hours * HOUR, cap)
    assert len(doomed) == len(set(doomed))
    stay = [f for f in present if f.name not in doomed]
    assert sum(f.size for f in stay) <= cap
    assert all(hour_started(f.name) + HOUR + retention_hours * HOUR >= NOW for f in stay)
    # only whole oldest files go: everything that stays is newer than everything deleted
    if stay and doomed:
        assert min(hour_started(f.name) for f in stay) > max(hour_started(name) for name in doomed)
    # nothing goes that need not: putting back the newest deleted file would break a bound
    if doomed:
        newest = max(doomed, key=hour_started)
        back = next(f for f in present if f.name == newest)
        assert (sum(f.size for f in stay) + back.size > cap
                or hour_started(newest) + HOUR + retention_hours * HOUR < NOW)


def test_two_pods_files_of_one_hour_are_pruned_together_in_path_order() -> None:
    """Every pod's sidecar writes the same hour's file under its own directory: the size cap counts them all."""
    name = hour_file(NOW - 2 * HOUR)
    both = [CapturedFile(f"pod-b/{name}", 100), CapturedFile(f"pod-a/{name}", 100),
            CapturedFile(f"pod-a/{hour_file(NOW)}", 100)]
    assert to_delete(both, NOW, 168 * HOUR, 150) == [f"pod-a/{name}", f"pod-b/{name}"]
