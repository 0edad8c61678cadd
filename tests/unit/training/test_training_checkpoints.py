"""Train resumes from its run's last checkpoint (training/checkpoints.py, the stage runner, the renderers, the
progress line), and what each stage reads of the spec decides what a new generation carries over
(training/inputs.py). The frameworks' own parsers check the rendered resume in tests/contract."""

from __future__ import annotations

import concurrent.futures
import json
import os
from pathlib import Path

import yaml
from hypothesis import given
from hypothesis import strategies as st

from drafter_operator.api import DrafterTraining
from drafter_operator.container_paths import PATH_MAP_ENV
from drafter_operator.training import RenderOptions, render
from drafter_operator.training import checkpoints
from drafter_operator.training.checkpoints import Checkpoint, claim_run
from drafter_operator.training.inputs import ORDER, stage_inputs
from drafter_operator.training.progress import latest_status
from drafter_operator.training.specforge import TRAIN_CONFIG, save_interval
from tests.support.trainings import EXAMPLE, T0

RUN, OTHER = "t-1/aaaa", "t-1/bbbb"


def seed_spec(**changes):
    body = yaml.safe_load(EXAMPLE.read_text())
    body["spec"].update(changes)
    return DrafterTraining.model_validate(body).spec


def specforge_checkpoint(train: Path, step: int, complete: bool = True, latest: bool = True) -> None:
    where = train / f"drafter-step{step}"
    where.mkdir(parents=True)
    if complete:
        (where / "training_state.pt").write_bytes(b"state")
    if latest:
        link = train / "drafter-latest"
        if link.is_symlink():
            link.unlink()
        link.symlink_to(where.name)


def test_a_fresh_directory_is_marked_for_its_run_and_train_starts_afresh(tmp_path):
    train = tmp_path / "train"
    assert claim_run("specforge", train, RUN) is None
    assert json.loads((train / checkpoints.RUN_MARKER).read_text()) == {"run": RUN}


def test_specforge_resumes_from_its_latest_complete_checkpoint_of_this_run(tmp_path):
    train = tmp_path / "train"
    claim_run("specforge", train, RUN)
    specforge_checkpoint(train, 312)
    specforge_checkpoint(train, 624)
    assert claim_run("specforge", train, RUN) == Checkpoint("drafter-step624", 624)
    # A checkpoint cut short by the kill (no training_state.pt yet) is never resumed; nor is a latest link to it.
    specforge_checkpoint(train, 936, complete=False)
    assert claim_run("specforge", train, RUN) == Checkpoint("drafter-step624", 624)


def test_speculators_resumes_from_its_highest_epoch_with_the_step_it_recorded(tmp_path):
    train = tmp_path / "train"
    claim_run("speculators", train, RUN)
    for epoch, step in ((0, 120), (1, 240)):
        (train / str(epoch)).mkdir()
        (train / str(epoch) / "training_state.json").write_text(json.dumps({"epoch": epoch, "global_step": step}))
    (train / "checkpoint_best").symlink_to("0")
    assert claim_run("speculators", train, RUN) == Checkpoint("1", 240, 1)
    (train / "2").mkdir()  # saved without its counters (speculators' --save-best path): the epoch still says where
    assert claim_run("speculators", train, RUN) == Checkpoint("2", None, 2)


def test_every_pod_of_a_train_across_nodes_claims_the_shared_directory_at_once(tmp_path):
    """The pods of one Train group call claim_run together on the shared claim: none may fail because another
    emptied the directory under it (seen: one pod's marker removed before its rename), and the old run's files
    go while each pod's marker on its way in stays."""
    train = tmp_path / "train"
    specforge_checkpoint(train, 312)
    (train / checkpoints.RUN_MARKER).write_text(json.dumps({"run": OTHER}))
    in_flight = train / f"{checkpoints.RUN_MARKER}.node-1.77.partial"
    in_flight.write_text(json.dumps({"run": RUN}))
    assert claim_run("specforge", train, RUN) is None
    assert in_flight.exists() and not (train / "drafter-step312").exists()
    in_flight.unlink()
    # Eight pods at once on an old run's directory, many times over: all start afresh, one marker names the run.
    with concurrent.futures.ProcessPoolExecutor(8) as pods:
        for _ in range(10):
            specforge_checkpoint(train, 624)
            (train / checkpoints.RUN_MARKER).write_text(json.dumps({"run": OTHER}))
            assert list(pods.map(claim_run, ["specforge"] * 8, [train] * 8, [RUN] * 8)) == [None] * 8
            assert sorted(p.name for p in train.iterdir()) == [checkpoints.RUN_MARKER]
            assert json.loads((train / checkpoints.RUN_MARKER).read_text()) == {"run": RUN}


def test_another_runs_checkpoints_or_unmarked_ones_are_removed_never_resumed(tmp_path):
    train = tmp_path / "train"
    claim_run("specforge", train, OTHER)
    specforge_checkpoint(train, 500)
    assert claim_run("specforge", train, RUN) is None  # a changed learning rate, or a training created again
    assert sorted(p.name for p in train.iterdir()) == [checkpoints.RUN_MARKER]
    unmarked = tmp_path / "unmarked"
    specforge_checkpoint(unmarked, 100)  # a directory an earlier operator version left, of no known run
    assert claim_run("specforge", unmarked, RUN) is None and not (unmarked / "drafter-step100").exists()


def test_the_run_is_the_training_and_what_train_reads():
    spec = seed_spec()
    train = stage_inputs(spec.to_json(), "Train")
    assert checkpoints.run_id("t-1", train) != checkpoints.run_id("t-2", train)
    faster = seed_spec(train={"epochs": 5, "learningRate": "2e-4", "batchSize": 1, "maxLength": 4096})
    assert stage_inputs(faster.to_json(), "Train") != train
    requeued = seed_spec(queueName="gpus", image="registry.internal/trainer:2")
    assert stage_inputs(requeued.to_json(), "Train") == train


# ------------------------------------------------------------------------------------------ rendering
OPTIONS = dict(target_config={"num_hidden_layers": 61, "hidden_size": 7168, "vocab_size": 163840},
               base_drafter_config={"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 7168},
               chat_template="kimi-k2-instruct", generation_endpoint="http://10.96.0.9:30000/v1")


def train_config(spec, resume: Checkpoint | None) -> dict:
    train = next(s for s in render(spec, options=RenderOptions(**OPTIONS, resume=resume)) if s.name == "Train")
    return yaml.safe_load(next(f for f in train.files if f.name == TRAIN_CONFIG).text())


def test_a_resumed_specforge_train_names_its_checkpoint_and_keeps_the_base_drafters_shape_without_its_weights():
    spec = seed_spec()
    fresh = train_config(spec, None)
    assert "resume_from" not in fresh["training"] and fresh["model"]["draft_checkpoint_path"] == spec.base_drafter
    # The base drafter's config is the draft config from the start: the resume finds the same file.
    assert fresh["model"]["draft_model_config"] == "/etc/drafter-training/draft-config.json"
    resumed = train_config(spec, Checkpoint("drafter-step624", 624))
    assert resumed["training"]["resume_from"] == "/work/train/drafter-step624"
    # SpecForge refuses a weights-only warm start beside a full resume: the weights are the checkpoint's.
    assert "draft_checkpoint_path" not in resumed["model"]
    assert resumed["model"]["draft_model_config"] == "/etc/drafter-training/draft-config.json"
    assert resumed["model"]["vocab_mapping_path"] == fresh["model"]["vocab_mapping_path"]  # the base's mapping kept


@given(samples=st.integers(1, 10**6), batch=st.integers(1, 64), gpus=st.sampled_from([1, 2, 4, 8]),
       nodes=st.integers(1, 8), cpu=st.booleans())
def test_specforge_checkpoints_about_four_times_an_epoch_and_at_least_every_step(samples, batch, gpus, nodes, cpu):
    spec = seed_spec(data={"dataset": "/models/datasets/prompts.jsonl", "chatTemplate": "kimi-k2-instruct",
                           "numSamples": samples},
                     train={"batchSize": batch}, resources={"gpus": gpus, "nodes": nodes},
                     target={"model": "/models/Kimi-K2.5", "tensorParallelSize": 1})
    interval = save_interval(spec, RenderOptions(cpu=cpu))
    ranks = nodes * (1 if cpu else gpus)
    steps = -(-samples // (batch * ranks))
    assert 1 <= interval <= steps and (steps < 4 or interval * 4 <= steps < (interval + 1) * 4)


# ------------------------------------------------------------------------------------------ run-stage and progress
def test_run_stage_resumes_train_from_the_claims_checkpoint_and_its_progress_says_from_which_step(tmp_path, monkeypatch, capsys):
    from drafter_operator.cli import main

    models, work = tmp_path / "models", tmp_path / "work"
    (models / "Kimi-K2.5").mkdir(parents=True)
    (models / "drafters").mkdir()  # where Export will write
    (models / "Kimi-K2.5" / "config.json").write_text(json.dumps(OPTIONS["target_config"]))
    body = yaml.safe_load(EXAMPLE.read_text())
    body["spec"].pop("baseDrafter")  # a hub id: never looked up from a unit test
    body["spec"]["data"].pop("generation")
    spec = DrafterTraining.model_validate(body).spec
    run = checkpoints.run_id("t-1", stage_inputs(spec.to_json(), "Train"))
    claim_run("specforge", work / "train", run)
    specforge_checkpoint(work / "train", 624)
    spec_file = tmp_path / "training.json"
    spec_file.write_text(json.dumps(body["spec"]))
    monkeypatch.setenv(PATH_MAP_ENV, json.dumps({"/models": str(models), "/work": str(work)}))
    bin_dir = tmp_path / "bin"  # a stand-in for SpecForge's CLI: the plan is what this test reads
    bin_dir.mkdir()
    (bin_dir / "specforge").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "specforge").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    log = tmp_path / "termination-log"
    main(["run-stage", "--training", str(spec_file), "--stage", "Train", "--termination-log", str(log),
          "--files", str(tmp_path / "files"), "--training-uid", "t-1"])
    config = yaml.safe_load((tmp_path / "files" / TRAIN_CONFIG).read_text())
    assert config["training"]["resume_from"] == f"{work}/train/drafter-step624"
    out = capsys.readouterr().out
    assert "Train resumes from its checkpoint drafter-step624" in out
    latest = latest_status(out, T0)
    assert latest.progress["resumedFromStep"] == 624 and "(resumed from step 624)" in latest.progress["summary"]
    assert json.loads(log.read_text())["progress"]["resumedFromStep"] == 624
    # Another training on the same claim (another uid) finds nothing of this run to resume.
    main(["run-stage", "--training", str(spec_file), "--stage", "Train", "--termination-log", str(log),
          "--files", str(tmp_path / "files"), "--training-uid", "t-2"])
    assert "resume_from" not in yaml.safe_load((tmp_path / "files" / TRAIN_CONFIG).read_text())["training"]


# ------------------------------------------------------------------------------------------ what stages read
HOW_IT_RUNS = {"image": "registry.internal/trainer:2", "queueName": "gpus", "env": [{"name": "NCCL_DEBUG", "value": "INFO"}],
               "limits": {"deadlines": {"train": "12h"}, "disruptionRetries": 5}, "pod": {"priorityClassName": "batch"},
               "promote": None}
WHAT_IT_READS = {"Generate": {"data": {"dataset": "/models/datasets/other.jsonl", "chatTemplate": "kimi-k2-instruct",
                                       "numSamples": 10000}},
                 "Extract": {"hiddenStates": {"layers": [3, 31, 59], "storage": {"size": "1Ti"}}},
                 "Train": {"train": {"epochs": 3, "maxLength": 4096}},
                 "Export": {"output": {"path": "/models/drafters/elsewhere"}}}


@given(st.sampled_from(sorted(HOW_IT_RUNS)))
def test_how_a_stage_runs_changes_no_stages_inputs(field):
    before, after = seed_spec(), seed_spec(**{field: HOW_IT_RUNS[field]})
    assert [stage_inputs(after.to_json(), s) for s in ORDER] == [stage_inputs(before.to_json(), s) for s in ORDER]


@given(st.sampled_from(ORDER))
def test_what_a_stage_reads_changes_its_inputs_and_every_later_stages_never_an_earlier_ones(stage):
    before, after = seed_spec(), seed_spec(**WHAT_IT_READS[stage])
    changed = [s for s in ORDER if stage_inputs(after.to_json(), s) != stage_inputs(before.to_json(), s)]
    assert changed == list(ORDER[ORDER.index(stage):])
