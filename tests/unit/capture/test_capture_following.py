"""What the capture sidecar reads of the spool each poll: no line twice, no line torn, a renamed or rotated file
read on from where its tail stopped."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from drafter_operator.capture.following import (
    TAKEN_SUFFIX,
    Plan,
    Read,
    SpoolFile,
    complete_lines,
    offsets_kept,
    plan,
)
from drafter_operator.capture.spool import ReopenedLog, RotatedLogs

REOPENED = ReopenedLog("requests.log")
ROTATED = RotatedLogs(".log")


def test_a_reopened_log_is_taken_by_renaming_and_read_a_poll_later() -> None:
    live = SpoolFile("requests.log", 7, 100)
    assert plan(REOPENED, [live], {}) == Plan((), (("requests.log", "requests.log" + TAKEN_SUFFIX),))
    taken = SpoolFile("requests.log" + TAKEN_SUFFIX, 7, 120)
    fresh = SpoolFile("requests.log", 8, 30)
    assert plan(REOPENED, [taken, fresh], {}) == Plan((Read(taken.name, 7, 0, final=True),),
                                                      (("requests.log", taken.name),))


def test_an_empty_reopened_log_is_left_alone_and_foreign_files_are_never_read() -> None:
    assert plan(REOPENED, [SpoolFile("requests.log", 7, 0), SpoolFile("other.txt", 9, 50)], {}) == Plan((), ())


def test_draining_reads_every_file_to_its_end_and_takes_nothing() -> None:
    taken, live = SpoolFile("requests.log" + TAKEN_SUFFIX, 7, 10), SpoolFile("requests.log", 8, 30)
    assert plan(REOPENED, [taken, live], {8: 12}, draining=True) == Plan(
        (Read(taken.name, 7, 0, final=True), Read(live.name, 8, 12, final=True)), ())
    rotating = SpoolFile("host_0.log", 3, 40)
    assert plan(ROTATED, [rotating], {3: 20}, draining=True) == Plan((Read("host_0.log", 3, 20, final=True),))


def test_a_rotated_file_is_read_on_from_its_tail_and_before_the_new_live_file() -> None:
    rotated = SpoolFile("host_0.log.2026-12-06_17", 3, 500)  # was host_0.log, tailed to byte 320
    live = SpoolFile("host_0.log", 4, 60)
    assert plan(ROTATED, [live, rotated], {3: 320}) == Plan((Read(rotated.name, 3, 320, final=True),
                                                            Read(live.name, 4, 0, final=False)))


def test_an_offset_beyond_the_file_means_a_new_file_under_a_reused_inode() -> None:
    assert plan(ROTATED, [SpoolFile("host_0.log", 3, 10)], {3: 320}).reads[0].start == 0


def test_offsets_of_files_gone_are_dropped() -> None:
    assert offsets_kept({3: 10, 4: 20}, [SpoolFile("host_0.log", 4, 30)]) == {4: 20}


def test_a_live_files_half_written_line_waits_and_a_final_files_tail_is_kept() -> None:
    assert complete_lines(b'one\ntwo\nthr', final=False) == (["one", "two"], 8)
    assert complete_lines(b'one\ntwo\nthr', final=True) == (["one", "two", "thr"], 11)
    assert complete_lines(b'half', final=False) == ([], 0)


line_text = st.text(st.characters(blacklist_characters="\n", blacklist_categories=("Cs",)), min_size=1, max_size=30)


@given(st.lists(line_text, max_size=12), st.lists(st.integers(0, 400), max_size=8))
def test_tailing_a_growing_file_at_any_cut_yields_every_line_once_whole(lines: list[str], cuts: list[int]) -> None:
    """The file as the engine's handler writes it, seen by polls at arbitrary byte counts (mid-line, mid
    character): the lines come out once each, in order, none torn."""
    content = "".join(line + "\n" for line in lines).encode("utf-8")
    seen, offset = [], 0
    for end in sorted(min(cut, len(content)) for cut in cuts) + [len(content)]:
        if end < offset:
            continue
        got, consumed = complete_lines(content[offset:end], final=False)
        seen += got
        offset += consumed
    assert seen == lines
