"""A DrafterTraining whose data is a serving's capture (spec.data.capture): its Generate stage first turns the
captured prompts into train and held-out conversations, then the target answers the train set; the Generate pod
mounts the capture's claim read-only, and no other stage mounts it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from drafter_operator.resources.training_job import stage_volumes
from drafter_operator.training import TrainingPaths
from drafter_operator.training.rendering import CAPTURED_HELD_OUT, CAPTURED_TRAIN
from drafter_operator.training.stages import job_stages
from tests.support.training_renders import flag, seed, stages

CAPTURE = {"claimName": "kimi-capture", "heldOutFraction": "0.2"}


def captured(framework: str):
    spec = seed(framework)
    data = spec.data.model_dump(by_alias=True, exclude_none=True)
    data.pop("dataset")
    return seed(framework, data={**data, "capture": CAPTURE, "generation": {}})


@pytest.mark.parametrize("framework", ["specforge", "speculators"])
def test_generate_turns_the_capture_into_conversations_and_the_target_answers_the_train_set(framework):
    spec = captured(framework)
    got = stages(spec)
    assert tuple(got) == job_stages(spec) == ("Generate", "Extract", "Train", "Export")
    first, regenerate = got["Generate"].commands[:2]
    work = TrainingPaths().work
    assert first.argv[:2] == ("drafter-operator", "captured-dataset")
    assert flag(first.argv, "--claim") == TrainingPaths().capture
    assert flag(first.argv, "--train") == f"{work}/data/{CAPTURED_TRAIN}"
    assert flag(first.argv, "--held-out") == f"{work}/data/{CAPTURED_HELD_OUT}"
    assert flag(first.argv, "--held-out-fraction") == "0.2"
    assert regenerate.argv[:2] == ("drafter-operator", "regenerate")
    assert flag(regenerate.argv, "--input") == f"{work}/data/{CAPTURED_TRAIN}"
    assert flag(regenerate.argv, "--num-samples") == str(spec.data.num_samples)


def test_the_retraining_example_reads_its_capture_and_warm_starts_from_the_drafter_serving_now():
    from pathlib import Path

    import yaml

    from drafter_operator.api import DrafterTraining

    example = Path(__file__).resolve().parents[3] / "examples" / "training-kimi-k25-eagle3-from-capture.yaml"
    spec = DrafterTraining.model_validate(yaml.safe_load(example.read_text())).spec
    assert spec.data.dataset is None and spec.data.capture.claim_name == "kimi-capture"
    assert spec.base_drafter == "/models/drafters/kimi-k25-eagle3-ft"  # the drafter the seed's training promoted
    got = stages(spec)
    assert got["Generate"].commands[0].argv[:2] == ("drafter-operator", "captured-dataset")


def test_only_the_generate_pod_mounts_the_capture_and_only_to_read_it():
    spec, paths = captured("specforge"), TrainingPaths()
    for stage in ("Generate", "Extract", "Train", "Export"):
        volumes, mounts = stage_volumes("kimi-retrain", spec, stage, 1, paths)
        capture = [v for v in volumes if v["name"] == "capture"]
        if stage != "Generate":
            assert capture == [] and all(m["name"] != "capture" for m in mounts)
            continue
        assert capture == [{"name": "capture", "persistentVolumeClaim": {"claimName": "kimi-capture", "readOnly": True}}]
        assert [m for m in mounts if m["name"] == "capture"] == [
            {"name": "capture", "mountPath": paths.capture, "readOnly": True}]
    volumes, _ = stage_volumes("t", seed("specforge"), "Generate", 1, paths)  # a dataset: no capture to mount
    assert all(v["name"] != "capture" for v in volumes)


def _captured_dataset(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "drafter_operator.cli", "captured-dataset", *args],
                          capture_output=True, text=True, timeout=120)


def _record(text: str) -> str:
    return json.dumps({"engine": "vllm", "requestId": text, "kind": "prompt", "time": "2026-12-06T18:00:00Z",
                       "content": {"messages": [{"role": "user", "content": text}]}}) + "\n"


def test_the_command_writes_both_sets_and_says_what_it_counted(tmp_path):
    claim = tmp_path / "claim"
    (claim / "kimi-0").mkdir(parents=True)
    (claim / "kimi-0" / "capture-2026-12-06T18.jsonl").write_text(
        "".join(_record(f"question {i}") for i in range(200)) + _record("question 0")
        + json.dumps({"kind": "prompt", "content": {"prompt": [1, 2]}}) + "\n")
    train, held = tmp_path / "work" / "data" / "train.jsonl", tmp_path / "work" / "data" / "held.jsonl"
    result = _captured_dataset("--claim", str(claim), "--train", str(train), "--held-out", str(held),
                               "--held-out-fraction", "0.25")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)["capturedDataset"]
    train_rows = [json.loads(line) for line in train.read_text().splitlines()]
    held_rows = [json.loads(line) for line in held.read_text().splitlines()]
    assert summary == {"files": 1, "prompts": 202, "duplicates": 1, "train": len(train_rows),
                       "heldOut": len(held_rows), "heldOutByCategory": {"chat": len(held_rows)},
                       "skipped": {"a prompt given as token ids": 1}}
    assert len(train_rows) + len(held_rows) == 200 and 25 < len(held_rows) < 75
    assert not {r["id"] for r in train_rows} & {r["id"] for r in held_rows}
    assert not list(train.parent.glob("*.partial"))


def test_a_capture_with_nothing_to_train_on_fails_and_says_why_and_what_to_do(tmp_path):
    (tmp_path / "claim" / "kimi-0").mkdir(parents=True)
    (tmp_path / "claim" / "kimi-0" / "capture-2026-12-06T18.jsonl").write_text(
        json.dumps({"kind": "prompt", "content": {"input_ids": [1]}}) + "\n")
    train = tmp_path / "train.jsonl"
    result = _captured_dataset("--claim", str(tmp_path / "claim"), "--train", str(train),
                               "--held-out", str(tmp_path / "held.jsonl"), "--held-out-fraction", "0.1")
    assert result.returncode == 1
    assert "no prompt to train on" in result.stderr and "spec.capture.sampleRate" in result.stderr
    assert not train.exists()
    missing = _captured_dataset("--claim", str(tmp_path / "nowhere"), "--train", str(train),
                                "--held-out", str(tmp_path / "held.jsonl"), "--held-out-fraction", "0.1")
    assert missing.returncode == 2 and "not mounted there" in missing.stderr
