"""The capture's count of prompts since a time (spec.retraining.minNewSamples): the incremental tally against a
count of every whole line on the claim, whatever the appends, torn lines, prunes and questions in between; and the
sidecar's HTTP answer."""

from __future__ import annotations

import datetime as dt
import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drafter_operator.capture.retention import hour_file
from drafter_operator.capture.samples import PromptTally, prompt_times
from drafter_operator.capture.sidecar import serve_samples
from drafter_operator.timestamps import format_seconds
from tests.processes import free_port

T0 = dt.datetime(2026, 12, 7, 1, 0, tzinfo=dt.timezone.utc)
PODS = ("kimi-a-0", "kimi-a-1")


def line(kind: str, at: dt.datetime) -> bytes:
    return (json.dumps({"engine": "vllm", "requestId": "r", "kind": kind, "time": format_seconds(at),
                        "content": {"prompt": "x"}}) + "\n").encode()


def whole_line_count(claim: Path, since: dt.datetime) -> int:
    """The answer by brute force: every whole prompt line on the claim at or after ``since``."""
    count = 0
    for path in claim.glob("*/capture-*.jsonl"):
        data = path.read_bytes()
        for raw in data[:data.rfind(b"\n") + 1].splitlines():
            record = json.loads(raw)
            count += record["kind"] == "prompt" and record["time"] >= format_seconds(since)
    return count


def test_prompt_times_leaves_a_torn_line_for_later_and_skips_foreign_ones() -> None:
    chunk = line("prompt", T0) + b"not json\n" + line("response", T0) + line("prompt", T0)[:20]
    times, consumed = prompt_times(chunk)
    assert times == [format_seconds(T0)] and consumed == len(chunk) - 20


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(
    st.tuples(st.just("append"), st.sampled_from(PODS), st.sampled_from(["prompt", "response"]),
              st.integers(0, 3 * 3600), st.integers(0, 40)),
    st.tuples(st.just("ask"), st.integers(-600, 4 * 3600)),
    st.tuples(st.just("prune"), st.sampled_from(PODS), st.integers(0, 3))), max_size=40))
def test_the_tally_always_agrees_with_a_count_of_every_whole_line(tmp_path_factory, steps) -> None:
    claim = tmp_path_factory.mktemp("claim")
    for pod in PODS:
        (claim / pod).mkdir()
    tally = PromptTally(claim)
    clock = {pod: T0 for pod in PODS}  # each sidecar appends in its own time order
    for step in steps:
        if step[0] == "append":
            _, pod, kind, advance, torn = step
            clock[pod] = max(clock[pod], T0 + dt.timedelta(seconds=advance))
            path = claim / pod / hour_file(clock[pod].timestamp())
            data = line(kind, clock[pod])
            existing = path.read_bytes() if path.exists() else b""
            cut = existing.rfind(b"\n") + 1  # a torn tail is finished by the next append, as a real writer does
            path.write_bytes(existing[:cut] + data + (data[:torn] if torn < len(data) else b""))
        elif step[0] == "prune":
            files = sorted((claim / step[1]).iterdir())
            if files:
                files[step[2] % len(files)].unlink()
        else:
            since = T0 + dt.timedelta(seconds=step[1])
            assert tally.count_since(since) == whole_line_count(claim, since)


def test_a_file_pruned_and_begun_again_is_read_from_its_start(tmp_path: Path) -> None:
    (tmp_path / PODS[0]).mkdir()
    hour = tmp_path / PODS[0] / hour_file(T0.timestamp())
    hour.write_bytes(line("prompt", T0) * 3)
    tally = PromptTally(tmp_path)
    assert tally.count_since(T0) == 3
    hour.unlink()  # the size cap took it; the same hour's next record begins it again
    hour.write_bytes(line("prompt", T0 + dt.timedelta(minutes=1)))
    assert tally.count_since(T0) == 1


def test_the_sidecar_answers_the_count_and_names_a_bad_since(tmp_path: Path) -> None:
    (tmp_path / PODS[0]).mkdir()
    hour = tmp_path / PODS[0] / hour_file(T0.timestamp())
    hour.write_bytes(line("prompt", T0) + line("prompt", T0 + dt.timedelta(minutes=5)) + line("response", T0))
    port = free_port()
    server = serve_samples(tmp_path, ("127.0.0.1", port))
    try:
        url = f"http://127.0.0.1:{port}/samples?since="
        with urllib.request.urlopen(url + "2026-12-07T01:01:00Z", timeout=5) as response:
            assert json.load(response) == {"prompts": 1, "since": "2026-12-07T01:01:00Z"}
        with urllib.request.urlopen(url + "2026-12-07T00:00:00%2B00:00", timeout=5) as response:
            assert json.load(response)["prompts"] == 2
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url + "yesterday", timeout=5)
        assert refused.value.code == 400 and "since" in json.load(refused.value)["error"]
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/prompts", timeout=5)
        assert missing.value.code == 404
    finally:
        server.shutdown()
        server.server_close()
