"""stage_job's named steps (resources/training_job.py): the volumes and mounts, the container, the placement."""

from __future__ import annotations

import pytest

from drafter_operator.resources.engine import GPU_PRODUCT_LABEL, GPU_RESOURCE, GPU_TOLERATION
from drafter_operator.resources.training_job import (StageCommand, StageRun,
    GPU_STAGES,
    stage_container,
    stage_job,
    stage_placement,
    stage_volumes,
)
from drafter_operator.training import TrainingPaths
from tests.support.training_jobs import seed

PATHS = TrainingPaths()
STAGES = ("Generate", "Extract", "Train", "Export")


@pytest.mark.parametrize("stage", STAGES)
def test_the_steps_are_the_job(stage):
    spec = seed(placement={"gpuProduct": "NVIDIA-B200"}).spec
    job = stage_job("ns", "t", spec, StageRun(stage, 2), StageCommand("img", render_args=("--cpu",)))
    pod = job["spec"]["template"]["spec"]
    volumes, mounts = stage_volumes("t", spec, stage, 2, PATHS)
    assert pod["volumes"] == volumes
    assert pod["containers"] == [stage_container(spec, StageRun(stage, 2), StageCommand("img", ("--cpu",), PATHS), mounts)]
    placement = stage_placement(spec.placement, stage in GPU_STAGES)
    assert {key: pod[key] for key in placement} == placement


@pytest.mark.parametrize("stage", STAGES)
def test_only_export_writes_the_model_claim_and_it_alone_reads_the_work_claim_only(stage):
    volumes, mounts = stage_volumes("t", seed().spec, stage, 1, PATHS)
    models = next(v for v in volumes if v["name"] == "models")
    work = next(m for m in mounts if m["name"] == "work")
    assert models["persistentVolumeClaim"]["readOnly"] is (stage != "Export")
    assert work["readOnly"] is (stage == "Export")


def test_a_cache_claim_adds_a_volume_and_its_mount():
    plain = stage_volumes("t", seed().spec, "Train", 1, PATHS)
    cached = stage_volumes("t", seed(storage={"modelClaim": "m", "mountPath": "/models", "cacheClaim": "hf"}).spec,
                           "Train", 1, PATHS)
    assert [len(part) for part in cached] == [len(part) + 1 for part in plain]
    assert cached[0][-1] == {"name": "hf-cache", "persistentVolumeClaim": {"claimName": "hf"}}


@pytest.mark.parametrize("stage", STAGES)
def test_the_container_asks_for_gpus_on_gpu_stages_only(stage):
    spec = seed().spec
    container = stage_container(spec, StageRun(stage, 4), StageCommand("img", (), PATHS), [])
    limits = container["resources"].get("limits") or {}
    assert (GPU_RESOURCE in limits) is (stage in GPU_STAGES)
    assert container["command"][:2] == ["drafter-operator", "run-stage"]
    assert container["command"][container["command"].index("--generation") + 1] == "4"


def test_placement_sends_gpu_stages_to_the_gpu_product_and_keeps_affinity_everywhere():
    placement = seed(placement={"gpuProduct": "NVIDIA-B200", "nodeSelector": {"pool": "train"},
                                "affinity": {"nodeAffinity": {}}}).spec.placement
    gpu = stage_placement(placement, True)
    assert gpu["tolerations"][0] == GPU_TOLERATION
    assert gpu["nodeSelector"] == {"pool": "train", GPU_PRODUCT_LABEL: "NVIDIA-B200"}
    assert set(stage_placement(placement, False)) == {"affinity"}
    assert stage_placement(None, True) == {"tolerations": [GPU_TOLERATION]}
    assert stage_placement(None, False) == {}
