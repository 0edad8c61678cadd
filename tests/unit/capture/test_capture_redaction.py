"""spec.capture.redaction: the contract a redaction's output is held to (pure), and the hand-off itself, with the
wrapper the redaction container runs (`WRAPPER_SCRIPT`) running here under the host's sh around real commands
(sed, false, head), beside the capture sidecar's poll."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drafter_operator.api.serving.capture import CaptureSpec
from drafter_operator.capture import sidecar
from drafter_operator.capture.redaction import (
    WRAPPER_SCRIPT,
    Redaction,
    RedactionFailed,
    redact,
    redacted,
)
from tests.unit.capture.test_capture_sidecar import NOW, VLLM, WRITER, make, vllm_prompt, vllm_writer

#: A redaction a user would write: e-mail addresses masked, in place, by sed (every image with a shell has it).
MASK_EMAILS = ["sed", "-e", r"s/[A-Za-z0-9._%+-]*@[A-Za-z0-9.-]*\.[a-z]*/<email>/g"]


def record(request_id: str, text: str, kind: str = "prompt") -> dict:
    return {"engine": "vllm", "requestId": request_id, "kind": kind, "time": "2026-12-07T02:00:00Z",
            "content": {"messages": [{"role": "user", "content": text}]}}


# --------------------------------------------------------------------------------------------------- the contract

@given(st.lists(st.tuples(st.text(min_size=1, max_size=8), st.text(max_size=20), st.sampled_from(["keep", "drop", "rewrite"])),
                max_size=12))
def test_the_output_keeps_rewrites_and_drops_records_line_by_line(choices) -> None:
    records = [record(f"r{i}-{rid}", text) for i, (rid, text, _) in enumerate(choices)]
    answers, expected = [], []
    for original, (_, _, choice) in zip(records, choices):
        if choice == "drop":
            answers.append(None)
            continue
        answer = original if choice == "keep" else {**original, "content": {"redacted": True}}
        answers.append(answer)
        expected.append(answer)
    assert redacted(records, "".join(json.dumps(a) + "\n" for a in answers)) == expected


@pytest.mark.parametrize("output, words", [
    ("null\n", "wrote 1 lines for 2 records"),
    ("null\nnull\nnull\n", "wrote 3 lines for 2 records"),
    ("null\n{not json\n", "line 2 is not JSON"),
    ('null\n["a"]\n', "line 2 is a JSON list"),
    ('{"engine": "vllm", "requestId": "b", "kind": "prompt"}\nnull\n', "line 1 changed requestId"),
    ('null\n{"engine": "vllm", "requestId": "b", "kind": "response"}\n', "line 2 changed kind"),
])
def test_output_that_breaks_the_contract_is_refused_naming_the_line(output: str, words: str) -> None:
    with pytest.raises(RedactionFailed, match=re.escape(words)):
        redacted([record("a", "x"), record("b", "y")], output)


# --------------------------------------------------------------------------------------------------- the hand-off

@pytest.fixture
def redaction_container(tmp_path: Path):
    """Start the wrapper around a command, as the redaction container runs it; stopped (TERM) at the end."""
    directory = tmp_path / "redaction"
    directory.mkdir(exist_ok=True)
    started: list[subprocess.Popen] = []

    def start(*command: str) -> Redaction:
        started.append(subprocess.Popen(["sh", "-c", WRAPPER_SCRIPT, "redact", str(directory), *command]))
        return Redaction(directory, timeout_s=30)

    yield start
    for proc in started:
        proc.terminate()
        assert proc.wait(10) == 0  # the wrapper's TERM trap: a clean exit, not the grace period's kill


def test_a_batch_goes_through_the_users_command_and_leaves_nothing_behind(redaction_container) -> None:
    redaction = redaction_container(*MASK_EMAILS)
    records = [record("a", "mail me at ana.lopez@example.com please"), record("b", "no address here")]
    kept = redact(redaction, records)
    assert [r["content"]["messages"][0]["content"] for r in kept] == ["mail me at <email> please", "no address here"]
    assert [r["requestId"] for r in kept] == ["a", "b"]
    assert list(redaction.directory.iterdir()) == []


@pytest.mark.parametrize("command, words", [
    (["false"], "exited with status 1"),
    (["head", "-n", "1"], "wrote 1 lines for 2 records"),
])
def test_a_failing_or_short_command_raises_and_nothing_is_kept(redaction_container, command, words) -> None:
    redaction = redaction_container(*command)
    with pytest.raises(RedactionFailed, match=words):
        redact(redaction, [record("a", "x"), record("b", "y")])
    assert list(redaction.directory.iterdir()) == []


def test_no_container_answering_times_out_and_withdraws_the_batch(tmp_path: Path) -> None:
    clock = iter(range(1000)).__next__
    redaction = Redaction(tmp_path, timeout_s=3)
    with pytest.raises(RedactionFailed, match="no answer from the redaction container within 3s"):
        redact(redaction, [record("a", "x")], clock=clock, sleep=lambda _: None)
    assert list(tmp_path.iterdir()) == []  # the unanswered batch does not wait there for a later container


def test_a_stale_answer_is_never_taken_for_this_batchs(tmp_path: Path) -> None:
    (tmp_path / "0ld.out").write_text(json.dumps(record("a", "someone else's answer")) + "\n")
    (tmp_path / "0ld.failed").write_text("1\n")
    clock = iter(range(1000)).__next__
    with pytest.raises(RedactionFailed, match="no answer"):
        redact(Redaction(tmp_path, timeout_s=2), [record("a", "x")], clock=clock, sleep=lambda _: None)
    assert list(tmp_path.iterdir()) == []


def test_the_sidecar_writes_nothing_until_the_redaction_answers_then_the_same_lines_redacted(
        tmp_path: Path, redaction_container) -> None:
    directory = tmp_path / "redaction"  # made by the redaction_container fixture
    car = dataclasses.replace(make(tmp_path, VLLM, responses=False), redaction=Redaction(directory, timeout_s=0.5))
    log = vllm_writer(car, "vllm-redacted")
    log.info(vllm_prompt("a", "write to bo@example.org"))
    offsets = sidecar.poll(car, {}, NOW)  # takes the file
    with pytest.raises(RedactionFailed):  # no redaction container yet: the poll gives up, its offsets unsaved
        sidecar.poll(car, offsets, NOW + 5)
    assert list((car.claim / WRITER).iterdir()) == []
    redaction_container(*MASK_EMAILS)
    car = dataclasses.replace(car, redaction=Redaction(directory, timeout_s=30))
    sidecar.poll(car, sidecar.load_offsets(car.spool), NOW + 10)
    (hour,) = (car.claim / WRITER).iterdir()
    (written,) = map(json.loads, hour.read_text().splitlines())
    assert written["requestId"] == "a"
    assert written["content"]["messages"][0]["content"] == "write to <email>"


def test_a_redaction_is_accepted_in_the_spec_and_keeps_its_command() -> None:
    capture = CaptureSpec.model_validate({"sampleRate": "0.1", "claimName": "c",
                                          "redaction": {"image": "busybox:1.36", "command": MASK_EMAILS}})
    assert capture.redaction.command == MASK_EMAILS

