"""Pure builders for one DrafterTraining stage: its plan ConfigMap and its Job.

A stage Job runs ``drafter-operator run-stage`` (training/stage_runner.py) in the trainer image with
the stage's plan (training.render) mounted from a ConfigMap. It mounts the model volume (read-write
only for Export, which writes the drafter to spec.output.path), the hidden-state claim as the work
directory, and the hub cache when the spec has one. Stages that run the target (Generate with
regeneration, Extract, Train) get the GPUs and the GPU placement; the others run on CPU nodes. A
stage never retries (``backoffLimit: 0``): its failure stops the run with its own error, and a spec
change is the retry.
"""

from __future__ import annotations

import json

from drafter_operator.resources import pod_policy
from drafter_operator.resources.engine import GPU_PRODUCT_LABEL, GPU_RESOURCE, GPU_TOLERATION, HF_HOME, HF_HUB_OFFLINE
from drafter_operator.resources.training import hidden_states_claim_name, training_labels
from drafter_operator.training import Stage, TrainingPaths
from drafter_operator.training.stage_runner import stage_plan

STAGE_LABEL = "drafter.dev/training-stage"
CONTAINER = "stage"
PLAN_KEY = "plan.json"
PLAN_DIR = "/etc/drafter-training-plan"
#: Stages that run the target model (and so need its GPUs).
GPU_STAGES = frozenset({"Generate", "Extract", "Train"})
#: Trainer containers run as their image's user; they write to the claims and need nothing more.
DEFAULT_SECURITY_CONTEXT = {"allowPrivilegeEscalation": False, "seccompProfile": {"type": "RuntimeDefault"}}


def stage_job_name(training: str, stage: str, generation: int) -> str:
    """One Job per stage and spec generation: a changed spec is a new run, never a relabelled old one."""
    return f"{training}-{stage.lower()}-g{generation}"


def plan_config_map(namespace: str, training: str, stage: Stage, generation: int) -> dict:
    name = stage_job_name(training, stage.name, generation)
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": f"{name}-plan", "namespace": namespace,
                         "labels": {**training_labels(training), STAGE_LABEL: stage.name}},
            "data": {PLAN_KEY: json.dumps(stage_plan(stage), indent=1)}}


def stage_environment(spec) -> list[dict]:
    """The stage container's env: the spec's, then the operator's hub variables (they win)."""
    storage = spec.storage
    own = [{"name": HF_HUB_OFFLINE, "value": "0"}]
    if storage.cache_claim:
        own.append({"name": HF_HOME, "value": storage.cache_path})
    return pod_policy.environment(spec.env, own)


def stage_job(namespace: str, training: str, spec, stage: Stage, generation: int, image: str,
              paths: TrainingPaths = TrainingPaths()) -> dict:
    """The Job of ``stage`` for the DrafterTrainingSpec ``spec`` (pure)."""
    name = stage_job_name(training, stage.name, generation)
    labels = {**training_labels(training), STAGE_LABEL: stage.name}
    gpu = stage.name in GPU_STAGES
    storage = spec.storage
    volumes = [
        {"name": "models", "persistentVolumeClaim": {"claimName": storage.model_claim, "readOnly": stage.name != "Export"}},
        {"name": "work", "persistentVolumeClaim": {"claimName": hidden_states_claim_name(training, spec)}},
        {"name": "plan", "configMap": {"name": f"{name}-plan"}},
    ]
    mounts = [
        {"name": "models", "mountPath": storage.mount_path, "readOnly": stage.name != "Export"},
        {"name": "work", "mountPath": paths.work},
        {"name": "plan", "mountPath": PLAN_DIR, "readOnly": True},
    ]
    if storage.cache_claim:
        volumes.append({"name": "hf-cache", "persistentVolumeClaim": {"claimName": storage.cache_claim}})
        mounts.append({"name": "hf-cache", "mountPath": storage.cache_path})
    own = {"limits": {GPU_RESOURCE: str(spec.resources.gpus)}, "requests": {GPU_RESOURCE: str(spec.resources.gpus)}} \
        if gpu else None
    container = {
        "name": CONTAINER, "image": image,
        "command": ["drafter-operator", "run-stage", f"{PLAN_DIR}/{PLAN_KEY}", "--files", paths.files],
        "env": stage_environment(spec),
        "resources": pod_policy.container_resources(spec.resources, own=own),
        "volumeMounts": mounts,
        "terminationMessagePolicy": "File",
        "securityContext": pod_policy.container_security(spec.pod, DEFAULT_SECURITY_CONTEXT),
    }
    if spec.env_from:
        container["envFrom"] = pod_policy.environment_from(spec.env_from)
    pod_spec: dict = {"restartPolicy": "Never", "containers": [container], "volumes": volumes,
                      **pod_policy.pod_fields(spec.pod)}
    placement = spec.placement
    if gpu:
        pod_spec["tolerations"] = [GPU_TOLERATION] + [t.to_json() for t in (placement.tolerations or [])] \
            if placement else [GPU_TOLERATION]
        selector = dict(placement.node_selector or {}) if placement else {}
        if placement and placement.gpu_product:
            selector[GPU_PRODUCT_LABEL] = placement.gpu_product
        if selector:
            pod_spec["nodeSelector"] = selector
    if placement and placement.affinity:
        pod_spec["affinity"] = placement.affinity.to_json()
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"backoffLimit": 0,
                 "template": {"metadata": pod_policy.template_metadata(labels, spec.pod), "spec": pod_spec}},
    }
