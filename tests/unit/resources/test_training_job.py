"""A DrafterTraining stage as a Job (pure builders)."""

from __future__ import annotations

import json
from pathlib import Path

import re

from hypothesis import given
from hypothesis import strategies as st

from drafter_operator.api import DrafterTraining
from drafter_operator.api.training import DrafterTrainingSpec
from drafter_operator.resources.training_job import StageCommand, StageRun, TRAINER_UID, spec_config_map, stage_job, stage_job_name
from tests.support.training_jobs import seed


def test_gpu_stages_get_the_gpus_and_export_alone_writes_the_model_volume():
    training = seed(storage={"modelClaim": "models", "mountPath": "/models", "cacheClaim": "hf"},
                    env=[{"name": "NCCL_DEBUG", "value": "WARN"}], envFrom=[{"secretRef": {"name": "hf-token"}}],
                    pod={"serviceAccountName": "trainer"}, placement={"gpuProduct": "NVIDIA-B200"})
    extract = stage_job("team", "kimi-ft", training.spec, StageRun("Extract", 2), StageCommand("trainer:1"))
    export = stage_job("team", "kimi-ft", training.spec, StageRun("Export", 2), StageCommand("trainer:1", render_args=("--cpu",)))
    assert extract["metadata"]["name"] == stage_job_name("kimi-ft", "Extract", 2) == "kimi-ft-extract-g2"
    pod, container = extract["spec"]["template"]["spec"], extract["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "8" and pod["nodeSelector"] == {
        "nvidia.com/gpu.product": "NVIDIA-B200"}
    assert container["command"] == ["drafter-operator", "run-stage", "--training",
                                    "/etc/drafter-training-spec/training.json", "--stage", "Extract",
                                    "--generation", "2", "--files", "/etc/drafter-training"]
    assert {"name": "spec", "configMap": {"name": "kimi-ft-spec-g2"}} in pod["volumes"]
    assert {"name": "models", "mountPath": "/models", "readOnly": True} in container["volumeMounts"]
    assert {"name": "work", "persistentVolumeClaim": {"claimName": "kimi-ft-hidden-states"}} in pod["volumes"]
    assert container["env"] == [{"name": "NCCL_DEBUG", "value": "WARN"}, {"name": "HF_HUB_OFFLINE", "value": "0"},
                                {"name": "HF_HOME", "value": "/var/cache/huggingface"}]
    assert container["envFrom"] == [{"secretRef": {"name": "hf-token"}}] and pod["serviceAccountName"] == "trainer"
    assert extract["spec"]["backoffLimit"] == 0 and pod["restartPolicy"] == "Never"
    export_pod = export["spec"]["template"]["spec"]
    assert "nvidia.com/gpu" not in json.dumps(export_pod["containers"][0]["resources"]) and "nodeSelector" not in export_pod
    # The example's output is /models/drafters/kimi-k25-eagle3-ft: only /models/drafters is writable.
    assert export_pod["containers"][0]["volumeMounts"][:2] == [
        {"name": "models", "mountPath": "/models", "readOnly": True},
        {"name": "models", "mountPath": "/models/drafters", "subPath": "drafters", "readOnly": False}]
    assert export_pod["containers"][0]["command"][-1] == "--cpu"


STAGES = ("Generate", "Extract", "Train", "Export")


@given(st.lists(st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,12}", fullmatch=True), min_size=2, max_size=4),
       st.sampled_from(["/models", "/mnt/weights"]))
def test_export_alone_writes_the_model_volume_and_only_the_output_parent(segments, mount):
    output = mount + "/" + "/".join(segments)
    training = seed(storage={"modelClaim": "models", "mountPath": mount, "cacheClaim": "hf"},
                    target={"model": "org/target"}, data={"dataset": "sharegpt", "numSamples": 10,
                                                          "chatTemplate": "qwen"},
                    baseDrafter=None, output={"path": output})
    for stage in STAGES:
        pod = stage_job("team", "kimi-ft", training.spec, StageRun(stage, 1), StageCommand("trainer:1"))["spec"]["template"]["spec"]
        mounts = pod["containers"][0]["volumeMounts"]
        writable = [m for m in mounts if not m.get("readOnly")]
        model_writable = [m for m in writable if m["name"] == "models"]
        if stage == "Export":
            parent = output.rsplit("/", 1)[0]
            # One writable mount of the model volume: the output's parent, through a subPath that resolves there.
            assert model_writable == [{"name": "models", "mountPath": parent, "subPath": parent[len(mount) + 1:],
                                       "readOnly": False}]
            assert mount + "/" + model_writable[0]["subPath"] == parent and ".." not in parent.split("/")
            # Every other mount reads only, except the run's scratch files and the hub cache.
            assert {m["name"] for m in writable} == {"models", "files", "hf-cache"}
        else:
            assert model_writable == []
            claim = next(v for v in pod["volumes"] if v["name"] == "models")
            assert claim["persistentVolumeClaim"]["readOnly"] is True
        assert {"name": "models", "mountPath": mount, "readOnly": True} in mounts
        assert pod["securityContext"] == {"fsGroup": 1000, "fsGroupChangePolicy": "OnRootMismatch"}


def test_fs_group_is_the_trainer_image_user_and_the_pod_policy_wins():
    dockerfile = (Path(__file__).resolve().parents[3] / "images" / "trainer" / "Dockerfile").read_text()
    user = re.search(r"^USER (\d+):(\d+)$", dockerfile, re.M)
    assert user and int(user.group(1)) == TRAINER_UID and int(user.group(2)) == TRAINER_UID
    training = seed(pod={"securityContext": {"runAsNonRoot": True, "fsGroup": 2000}})
    pod = stage_job("team", "kimi-ft", training.spec, StageRun("Train", 1), StageCommand("trainer:1"))["spec"]["template"]["spec"]
    assert pod["securityContext"] == {"fsGroup": 2000, "fsGroupChangePolicy": "OnRootMismatch", "runAsNonRoot": True}


def test_the_spec_config_map_round_trips_to_the_same_spec():
    training = seed()
    cm = spec_config_map("team", "kimi-ft", training.spec, 3)
    assert cm["metadata"]["name"] == "kimi-ft-spec-g3"
    assert DrafterTrainingSpec.model_validate(json.loads(cm["data"]["training.json"])) == training.spec
