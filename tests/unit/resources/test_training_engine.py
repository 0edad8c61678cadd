"""The engine serving the target while a DrafterTraining regenerates its data (pure builders)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from drafter_operator.api import DrafterTraining
from drafter_operator.api.common import DNS1035_LABEL_PATTERN
from drafter_operator.api.kind import NAME_MAX_LENGTH
from drafter_operator.resources.labels import SERVING_LABEL
from drafter_operator.resources.training_engine import (
    engine_labels,
    engine_name,
    engine_selector,
    generation_endpoint,
    generation_engine,
    generation_engine_ready,
)

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "training-kimi-k25-eagle3.yaml"
SGLANG_IMAGE = "lmsysorg/sglang:v0.5.23"
LABELS = {"app.kubernetes.io/name": "drafter-training", "app.kubernetes.io/instance": "kimi-ft",
          "app.kubernetes.io/managed-by": "drafter-operator", "drafter.dev/training": "kimi-ft",
          "app.kubernetes.io/component": "generation-engine", "drafter.dev/training-generation": "3"}
SELECTOR = {"drafter.dev/training": "kimi-ft", "app.kubernetes.io/component": "generation-engine",
            "drafter.dev/training-generation": "3"}


def seed(**spec) -> DrafterTraining:
    body = yaml.safe_load(EXAMPLE.read_text())
    body["spec"].update(spec)
    return DrafterTraining.model_validate(body)


def test_the_seed_serves_its_target_on_sglang_without_a_drafter():
    deployment, service = generation_engine("team", "kimi-ft", seed().spec, 3, SGLANG_IMAGE)
    assert deployment["metadata"] == {"name": "kimi-ft-gen-g3", "namespace": "team", "labels": LABELS,
                                      "annotations": {"drafter.dev/engine": "sglang"}}
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
    assert deployment["spec"]["selector"] == {"matchLabels": SELECTOR}
    assert deployment["spec"]["template"]["metadata"] == {"labels": LABELS}
    # 45 minutes of startup (a path on the volume: no download) plus five, as for a DrafterServing.
    assert deployment["spec"]["progressDeadlineSeconds"] == 3000
    pod = deployment["spec"]["template"]["spec"]
    assert "initContainers" not in pod  # method none: no drafter to preflight
    assert pod["volumes"] == [{"name": "dshm", "emptyDir": {"medium": "Memory"}},
                              {"name": "models", "persistentVolumeClaim": {"claimName": "models", "readOnly": True}}]
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    (container,) = pod["containers"]
    assert container == {
        "name": "engine", "image": SGLANG_IMAGE,
        "command": ["python3", "-m", "sglang.launch_server", "--model-path", "/models/Kimi-K2.5", "--host", "0.0.0.0",
                    "--port", "30000", "--tp-size", "8", "--served-model-name", "target", "--enable-metrics"],
        "ports": [{"name": "http", "containerPort": 30000, "protocol": "TCP"}],
        "resources": {"limits": {"nvidia.com/gpu": "8"}, "requests": {"nvidia.com/gpu": "8"}},
        "env": [{"name": "HF_HUB_OFFLINE", "value": "1"}],
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"},
                         {"name": "models", "mountPath": "/models", "readOnly": True}],
        "startupProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 10, "failureThreshold": 270},
        "readinessProbe": {"httpGet": {"path": "/health_generate", "port": "http"}, "periodSeconds": 5,
                           "timeoutSeconds": 5, "failureThreshold": 3},
        "livenessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 15, "timeoutSeconds": 10,
                          "failureThreshold": 4},
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": {"allowPrivilegeEscalation": False, "seccompProfile": {"type": "RuntimeDefault"}},
    }
    assert service == {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "kimi-ft-gen-g3", "namespace": "team", "labels": LABELS, "annotations": {}},
        "spec": {"type": "ClusterIP", "selector": SELECTOR,
                 "ports": [{"name": "http", "port": 30000, "targetPort": "http", "protocol": "TCP"}]},
    }
    assert generation_endpoint("team", "kimi-ft", seed().spec, 3) == \
        "http://kimi-ft-gen-g3.team.svc.cluster.local:30000/v1"


def test_vllm_and_the_training_pod_settings():
    training = seed(
        target={"model": "Qwen/Qwen3-8B", "tensorParallelSize": 4},
        data={"dataset": "/models/chat.jsonl", "numSamples": 10, "chatTemplate": "qwen",
              "generation": {"engine": "vllm"}},
        storage={"modelClaim": "models", "mountPath": "/models", "cacheClaim": "hf"},
        resources={"gpus": 8, "requests": {"cpu": "16", "memory": "64Gi"}},
        env=[{"name": "NCCL_DEBUG", "value": "WARN"}, {"name": "HF_HOME", "value": "/elsewhere"}],
        envFrom=[{"secretRef": {"name": "hf-token"}}],
        pod={"serviceAccountName": "trainer", "labels": {"team": "ml"}},
        placement={"gpuProduct": "NVIDIA-B200", "tolerations": [{"key": "dedicated", "operator": "Exists"}]})
    deployment, service = generation_engine("team", "qwen-ft", training.spec, 1, "vllm/vllm-openai:v0.33.0")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["vllm", "serve", "Qwen/Qwen3-8B", "--host", "0.0.0.0", "--port", "8000",
                                    "--tensor-parallel-size", "4", "--served-model-name", "target"]
    # The GPUs the engine shards the target over; cpu and memory as the stage pods get them.
    assert container["resources"] == {"requests": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "4"},
                                      "limits": {"nvidia.com/gpu": "4"}}
    # A hub target downloads into the training's cache: online, HF_HOME on the cache claim (the operator's wins).
    assert container["env"] == [{"name": "NCCL_DEBUG", "value": "WARN"}, {"name": "HF_HUB_OFFLINE", "value": "0"},
                                {"name": "HF_HOME", "value": "/var/cache/huggingface"}]
    assert container["envFrom"] == [{"secretRef": {"name": "hf-token"}}]
    assert {"name": "hf-cache", "persistentVolumeClaim": {"claimName": "hf"}} in pod["volumes"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"
    assert pod["serviceAccountName"] == "trainer"
    # The stage pods' fsGroup: what it downloads into the shared hub cache stays the trainer's group.
    assert pod["securityContext"] == {"fsGroup": 1000, "fsGroupChangePolicy": "OnRootMismatch"}
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-B200"}
    assert pod["tolerations"][1:] == [{"key": "dedicated", "operator": "Exists"}]
    assert deployment["spec"]["template"]["metadata"]["labels"] == {"team": "ml", **engine_labels("qwen-ft", 1)}
    assert service["spec"]["ports"][0]["port"] == 8000
    assert generation_endpoint("team", "qwen-ft", training.spec, 1) == \
        "http://qwen-ft-gen-g1.team.svc.cluster.local:8000/v1"


def test_the_serving_controller_never_sees_it():
    objects = generation_engine("team", "kimi-ft", seed().spec, 3, SGLANG_IMAGE)
    assert SERVING_LABEL not in json.dumps(objects)


def test_no_generation_no_engine():
    spec = seed(data={"dataset": "/models/chat.jsonl", "numSamples": 10, "chatTemplate": "qwen"}).spec
    with pytest.raises(ValueError, match="spec.data.generation is unset"):
        generation_engine("team", "kimi-ft", spec, 1, SGLANG_IMAGE)


@pytest.mark.parametrize(("deployment", "ready"), [
    (None, False),
    ({"metadata": {"generation": 2}, "status": {"observedGeneration": 2}}, False),
    ({"metadata": {"generation": 2}, "status": {"observedGeneration": 2, "readyReplicas": 1}}, True),
    # A Ready pod of the previous template: the Deployment has not caught up with its spec yet.
    ({"metadata": {"generation": 3}, "status": {"observedGeneration": 2, "readyReplicas": 1}}, False),
])
def test_ready_means_a_ready_pod_of_the_current_template(deployment, ready):
    assert generation_engine_ready(deployment) is ready


training_names = st.from_regex(r"[a-z]([-a-z0-9]{0,50}[a-z0-9])?", fullmatch=True)


@given(training_names, st.integers(min_value=1, max_value=99999), st.integers(min_value=1, max_value=99999))
def test_names_are_service_names_and_generations_never_share_pods(training, generation, other):
    assert len(training) <= NAME_MAX_LENGTH
    name = engine_name(training, generation)
    assert len(name) <= 63 and re.match(DNS1035_LABEL_PATTERN, name)
    selector = engine_selector(training, generation)
    assert selector.items() <= engine_labels(training, generation).items()
    assert all(len(value) <= 63 for value in engine_labels(training, generation).values())
    if other != generation:
        assert selector != engine_selector(training, other)
        assert name != engine_name(training, other)
