"""A DrafterTraining stage as a Job (pure builders)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from drafter_operator.api import DrafterTraining
from drafter_operator.api.training import DrafterTrainingSpec
from drafter_operator.resources.training_job import spec_config_map, stage_job, stage_job_name

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "training-kimi-k25-eagle3.yaml"


def seed(**spec) -> DrafterTraining:
    body = yaml.safe_load(EXAMPLE.read_text())
    body["spec"].update(spec)
    return DrafterTraining.model_validate(body)


def test_gpu_stages_get_the_gpus_and_export_alone_writes_the_model_volume():
    training = seed(storage={"modelClaim": "models", "mountPath": "/models", "cacheClaim": "hf"},
                    env=[{"name": "NCCL_DEBUG", "value": "WARN"}], envFrom=[{"secretRef": {"name": "hf-token"}}],
                    pod={"serviceAccountName": "trainer"}, placement={"gpuProduct": "NVIDIA-B200"})
    extract = stage_job("team", "kimi-ft", training.spec, "Extract", 2, "trainer:1")
    export = stage_job("team", "kimi-ft", training.spec, "Export", 2, "trainer:1", render_args=("--cpu",))
    assert extract["metadata"]["name"] == stage_job_name("kimi-ft", "Extract", 2) == "kimi-ft-extract-g2"
    pod, container = extract["spec"]["template"]["spec"], extract["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "8" and pod["nodeSelector"] == {
        "nvidia.com/gpu.product": "NVIDIA-B200"}
    assert container["command"] == ["drafter-operator", "run-stage", "--training",
                                    "/etc/drafter-training-spec/training.json", "--stage", "Extract",
                                    "--files", "/etc/drafter-training"]
    assert {"name": "spec", "configMap": {"name": "kimi-ft-spec-g2"}} in pod["volumes"]
    assert {"name": "models", "mountPath": "/models", "readOnly": True} in container["volumeMounts"]
    assert {"name": "work", "persistentVolumeClaim": {"claimName": "kimi-ft-hidden-states"}} in pod["volumes"]
    assert container["env"] == [{"name": "NCCL_DEBUG", "value": "WARN"}, {"name": "HF_HUB_OFFLINE", "value": "0"},
                                {"name": "HF_HOME", "value": "/var/cache/huggingface"}]
    assert container["envFrom"] == [{"secretRef": {"name": "hf-token"}}] and pod["serviceAccountName"] == "trainer"
    assert extract["spec"]["backoffLimit"] == 0 and pod["restartPolicy"] == "Never"
    export_pod = export["spec"]["template"]["spec"]
    assert "nvidia.com/gpu" not in json.dumps(export_pod["containers"][0]["resources"]) and "nodeSelector" not in export_pod
    assert {"name": "models", "mountPath": "/models", "readOnly": False} in export_pod["containers"][0]["volumeMounts"]
    assert export_pod["containers"][0]["command"][-1] == "--cpu"


def test_the_spec_config_map_round_trips_to_the_same_spec():
    training = seed()
    cm = spec_config_map("team", "kimi-ft", training.spec, 3)
    assert cm["metadata"]["name"] == "kimi-ft-spec-g3"
    assert DrafterTrainingSpec.model_validate(json.loads(cm["data"]["training.json"])) == training.spec
