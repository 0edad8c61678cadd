"""A data-parallel Extract (spec.resources.nodes): the shares, the Indexed Job, the claim, the rendered flags and the
manifest that keeps a finished share from being captured again."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drafter_operator.resources.training import hidden_states_claim
from drafter_operator.resources.training_job import StageCommand, StageRun, stage_job
from drafter_operator.training import TrainingPaths, render, shards
from drafter_operator.training.stage_runner import run_shard
from drafter_operator.training.torchrun import Rendezvous
from tests.support.training_families import OPTIONS, with_nodes


@given(st.integers(0, 100_000), st.integers(1, 64))
def test_the_shares_partition_the_samples_in_order_and_differ_by_at_most_one(total, count):
    ranges = [shards.shard_range(total, index, count) for index in range(count)]
    assert [i for r in ranges for i in r] == list(range(total))
    assert max(map(len, ranges)) - min(map(len, ranges)) <= 1
    assert sorted(map(len, ranges), reverse=True) == list(map(len, ranges))  # the first ones take the remainder


def test_a_share_outside_the_count_is_refused():
    with pytest.raises(ValueError, match=r"\[0, 2\)"):
        shards.shard_range(10, 2, 2)


def test_only_an_extract_across_nodes_has_a_share_and_it_needs_the_index():
    two = with_nodes(2)
    assert shards.extract_shard(two, "Extract", {"JOB_COMPLETION_INDEX": "1"}) == (1, 2)
    assert shards.extract_shard(two, "Train", {}) is None
    assert shards.extract_shard(with_nodes(1), "Extract", {}) is None
    for environ in ({}, {"JOB_COMPLETION_INDEX": "2"}, {"JOB_COMPLETION_INDEX": "x"}):
        with pytest.raises(ValueError, match="Indexed Job"):
            shards.extract_shard(two, "Extract", environ)


def test_with_specforge_extract_stays_one_pod_across_nodes_and_train_spans_them():
    spec = with_nodes(2, framework="specforge", data={**with_nodes(1).data.to_json(), "chatTemplate": "qwen"})
    extract = stage_job("team", "kimi", spec, StageRun("Extract", 1), StageCommand("trainer:1"))["spec"]
    assert extract["backoffLimit"] == 0 and "completionMode" not in extract  # one torch.distributed group, one pod
    assert shards.extract_shard(spec, "Extract", {}) is None
    train = stage_job("team", "kimi", spec, StageRun("Train", 1), StageCommand("trainer:1"))["spec"]
    assert train["completionMode"] == "Indexed" and train["completions"] == 2


def test_extract_across_nodes_is_an_indexed_job_and_generate_and_export_stay_single():
    spec = with_nodes(3)
    extract = stage_job("team", "kimi", spec, StageRun("Extract", 1), StageCommand("trainer:1"))["spec"]
    assert {k: extract[k] for k in ("completionMode", "completions", "parallelism", "backoffLimitPerIndex",
                                    "maxFailedIndexes")} == {"completionMode": "Indexed", "completions": 3,
                                                             "parallelism": 3, "backoffLimitPerIndex": 1,
                                                             "maxFailedIndexes": 0}
    assert "backoffLimit" not in extract
    for stage in ("Generate", "Export"):
        job = stage_job("team", "kimi", spec, StageRun(stage, 1), StageCommand("trainer:1"))["spec"]
        assert job["backoffLimit"] == 0 and "completionMode" not in job
    assert stage_job("team", "kimi", with_nodes(1), StageRun("Extract", 1), StageCommand("trainer:1"))["spec"]["backoffLimit"] == 0


def test_the_claim_is_read_write_many_only_when_nodes_write_it_together():
    assert hidden_states_claim("team", "kimi", with_nodes(2))["spec"]["accessModes"] == ["ReadWriteMany"]
    assert hidden_states_claim("team", "kimi", with_nodes(1))["spec"]["accessModes"] == ["ReadWriteOnce"]


@pytest.mark.parametrize("cpu", [False, True])
def test_the_capture_takes_its_share_with_speculators_own_flags(cpu):
    spec = with_nodes(2)
    for shard, expected in (((1, 2), ["--world-size", "2", "--rank", "1"]), (None, [])):
        options = dataclasses.replace(OPTIONS, cpu=cpu, shard=shard, rendezvous=Rendezvous("t-train-g1-0.r:29400", "t"))
        extract = next(s for s in render(spec, TrainingPaths(), options) if s.name == "Extract")
        argv = list(extract.commands[-1].argv)
        assert argv[len(argv) - len(expected):] == expected and ("--world-size" in argv) == bool(expected)


def _plan(hidden: Path, marker: Path) -> dict:
    command = [sys.executable, "-c", f"open({str(marker)!r}, 'a').write('ran\\n')"]
    return {"stage": "Extract", "files": [], "outputs": {}, "outputsOnHost": {"hiddenStates": str(hidden)},
            "commands": [{"argv": command, "env": {}, "server": False, "readyUrl": None}]}


def test_a_finished_share_is_recorded_and_never_captured_again(tmp_path):
    hidden, marker = tmp_path / "hidden_states", tmp_path / "ran"
    hidden.mkdir()
    args = argparse.Namespace(files=str(tmp_path / "files"), termination_log=str(tmp_path / "termination"),
                              generation=1)
    assert run_shard(_plan(hidden, marker), (1, 2), 9, str(hidden), args) == 0
    record = json.loads((hidden / "shards" / "shard-1-of-2-g1.json").read_text())
    assert record["samples"] == [5, 9] and record["index"] == 1 and record["count"] == 2
    # The replaced pod of the same share: nothing runs, and it succeeds saying so.
    assert run_shard(_plan(hidden, marker), (1, 2), 9, str(hidden), args) == 0
    assert marker.read_text() == "ran\n"
    outcome = json.loads(Path(args.termination_log).read_text())
    assert outcome["outcome"] == "Succeeded" and outcome["shard"]["samples"] == [5, 9]
    # Another share is not the finished one.
    assert run_shard(_plan(hidden, marker), (0, 2), 9, str(hidden), args) == 0
    assert marker.read_text() == "ran\nran\n"


def test_a_failed_share_leaves_no_manifest(tmp_path):
    hidden = tmp_path / "hidden_states"
    hidden.mkdir()
    plan = _plan(hidden, tmp_path / "ran")
    plan["commands"][0]["argv"] = [sys.executable, "-c", "raise SystemExit(3)"]
    args = argparse.Namespace(files=str(tmp_path / "files"), termination_log=str(tmp_path / "termination"),
                              generation=1)
    assert run_shard(plan, (0, 2), 9, str(hidden), args) != 0
    assert not list((hidden / "shards").glob("*.json"))  # only the marker that this run's share started


def test_a_new_spec_generation_captures_its_share_again(tmp_path):
    hidden, marker = tmp_path / "hidden_states", tmp_path / "ran"
    hidden.mkdir()
    first = argparse.Namespace(files=str(tmp_path / "files"), termination_log=str(tmp_path / "t"), generation=1)
    second = argparse.Namespace(**{**vars(first), "generation": 2})
    assert run_shard(_plan(hidden, marker), (0, 2), 9, str(hidden), first) == 0
    assert run_shard(_plan(hidden, marker), (0, 2), 9, str(hidden), second) == 0
    assert marker.read_text() == "ran\nran\n"
    assert sorted(p.name for p in (hidden / "shards").glob("*.json")) == ["shard-0-of-2-g1.json", "shard-0-of-2-g2.json"]


def test_another_training_on_the_same_directory_never_trusts_the_earlier_ones_hidden_states(tmp_path):
    """A re-created training of the same name (generation 1 again), or another on a retained claim: its share
    captures afresh, the earlier run's files of the share removed (speculators would skip them); a replaced pod
    of the same run resumes from what its share wrote."""
    hidden, marker = tmp_path / "hidden_states", tmp_path / "ran"
    hidden.mkdir()
    plan = _plan(hidden, marker)
    writes = "; ".join(f"open({str(hidden / f'hs_{i}.safetensors')!r}, 'ab').write(b'x')" for i in range(4, 9))
    plan["commands"][0]["argv"] = [sys.executable, "-c", f"open({str(marker)!r}, 'a').write('ran\\n'); " + writes]
    earlier = argparse.Namespace(files=str(tmp_path / "f"), termination_log=str(tmp_path / "t"), generation=1,
                                 training_uid="uid-earlier")
    later = argparse.Namespace(**{**vars(earlier), "training_uid": "uid-later"})
    assert run_shard(plan, (1, 2), 9, str(hidden), earlier) == 0
    assert (hidden / "hs_5.safetensors").read_bytes() == b"x" and (hidden / "hs_4.safetensors").exists()
    assert run_shard(plan, (1, 2), 9, str(hidden), later) == 0  # captured again, not skipped
    assert marker.read_text() == "ran\nran\n"
    assert (hidden / "hs_5.safetensors").read_bytes() == b"x"  # removed, then written afresh (not appended to)
    assert (hidden / "hs_4.safetensors").read_bytes() == b"xx"  # share 0's file: not this share's to remove
    # A second pod of the later run's share (its first failed midway): the files stay, to resume from.
    (hidden / "shards" / "shard-1-of-2-uid-later-g1.json").unlink()
    assert run_shard(plan, (1, 2), 9, str(hidden), later) == 0
    assert (hidden / "hs_5.safetensors").read_bytes() == b"xx"


def test_a_share_records_the_bytes_of_its_own_samples_against_its_part_of_the_estimate(tmp_path):
    hidden, marker = tmp_path / "hidden_states", tmp_path / "ran"
    hidden.mkdir()
    plan = _plan(hidden, marker)
    # Share 1 of 2 over 9 samples is [5, 9): its files are the ones it wrote; share 0's do not count.
    writes = "; ".join(f"open({str(hidden / f'hs_{i}.safetensors')!r}, 'wb').write(b'x' * {100 * (i + 1)})"
                       for i in range(9))
    plan["commands"][0]["argv"] = [sys.executable, "-c", writes]
    plan["estimatedBytes"] = 9000
    args = argparse.Namespace(files=str(tmp_path / "files"), termination_log=str(tmp_path / "termination"),
                              generation=1)
    assert run_shard(plan, (1, 2), 9, str(hidden), args) == 0
    record = json.loads((hidden / "shards" / "shard-1-of-2-g1.json").read_text())
    assert record["bytesWritten"] == 600 + 700 + 800 + 900 and record["estimatedBytes"] == 9000 * 4 // 9
    assert json.loads(Path(args.termination_log).read_text())["shard"] == record


@given(st.integers(1, 10**6), st.integers(0, 10**13), st.integers(1, 64))
def test_the_shares_estimates_add_up_to_at_most_the_whole(total, estimated, count):
    parts = [shards.share_estimate(estimated, total, (i, count)) for i in range(count)]
    assert sum(parts) <= estimated and estimated - sum(parts) < count  # each part rounded down, never above
