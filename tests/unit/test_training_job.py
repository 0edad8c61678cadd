"""A DrafterTraining stage as a Job (pure builders)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from drafter_operator.api import DrafterTraining
from drafter_operator.resources.training_job import plan_config_map, stage_job, stage_job_name
from drafter_operator.training import RenderOptions, render

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "training-kimi-k25-eagle3.yaml"
TARGET_CONFIG = {"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168, "num_hidden_layers": 61,
                 "vocab_size": 163840, "num_attention_heads": 64, "intermediate_size": 18432,
                 "max_position_embeddings": 131072, "rms_norm_eps": 1e-6, "rope_theta": 50000.0}


def seed(**spec) -> DrafterTraining:
    body = yaml.safe_load(EXAMPLE.read_text())
    body["spec"].update(spec)
    return DrafterTraining.model_validate(body)


def stages(training: DrafterTraining):
    return {s.name: s for s in render(training.spec, options=RenderOptions(target_config=TARGET_CONFIG,
                                                                          chat_template="kimi-k2-instruct",
                                                                          base_drafter_config=TARGET_CONFIG))}


def test_gpu_stages_get_the_gpus_and_export_alone_writes_the_model_volume():
    training = seed(storage={"modelClaim": "models", "mountPath": "/models", "cacheClaim": "hf"},
                    env=[{"name": "NCCL_DEBUG", "value": "WARN"}], envFrom=[{"secretRef": {"name": "hf-token"}}],
                    pod={"serviceAccountName": "trainer"}, placement={"gpuProduct": "NVIDIA-B200"})
    by_name = stages(training)
    extract = stage_job("team", "kimi-ft", training.spec, by_name["Extract"], 2, "trainer:1")
    export = stage_job("team", "kimi-ft", training.spec, by_name["Export"], 2, "trainer:1")
    assert extract["metadata"]["name"] == stage_job_name("kimi-ft", "Extract", 2) == "kimi-ft-extract-g2"
    pod, container = extract["spec"]["template"]["spec"], extract["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "8" and pod["nodeSelector"] == {
        "nvidia.com/gpu.product": "NVIDIA-B200"}
    assert container["command"][:3] == ["drafter-operator", "run-stage", "/etc/drafter-training-plan/plan.json"]
    assert {"name": "models", "mountPath": "/models", "readOnly": True} in container["volumeMounts"]
    assert {"name": "work", "persistentVolumeClaim": {"claimName": "kimi-ft-hidden-states"}} in pod["volumes"]
    assert container["env"] == [{"name": "NCCL_DEBUG", "value": "WARN"}, {"name": "HF_HUB_OFFLINE", "value": "0"},
                                {"name": "HF_HOME", "value": "/var/cache/huggingface"}]
    assert container["envFrom"] == [{"secretRef": {"name": "hf-token"}}] and pod["serviceAccountName"] == "trainer"
    assert extract["spec"]["backoffLimit"] == 0 and pod["restartPolicy"] == "Never"
    export_pod = export["spec"]["template"]["spec"]
    assert "nvidia.com/gpu" not in json.dumps(export_pod["containers"][0]["resources"]) and "nodeSelector" not in export_pod
    assert {"name": "models", "mountPath": "/models", "readOnly": False} in export_pod["containers"][0]["volumeMounts"]


def test_the_plan_travels_in_a_config_map_the_runner_reads():
    training = seed()
    stage = stages(training)["Train"]
    cm = plan_config_map("team", "kimi-ft", stage, 1)
    assert cm["metadata"]["name"] == "kimi-ft-train-g1-plan"
    plan = json.loads(cm["data"]["plan.json"])
    assert plan["stage"] == "Train" and plan["commands"] and {f["name"] for f in plan["files"]} == {
        f.name for f in stage.files}
