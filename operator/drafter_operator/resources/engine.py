"""Pure builders for a revision's engine Deployment and the serving's Service."""

from __future__ import annotations

import math

from drafter_operator.api import DrafterServing, parse_duration
from drafter_operator.resources.labels import (
    REVISION_LABEL,
    deployment_name,
    revision_labels,
    revision_selector,
    serving_labels,
)

GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
# GPU nodes are commonly tainted so only GPU work lands there (GKE: nvidia.com/gpu=present:NoSchedule).
GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
STARTUP_PROBE_PERIOD_SECONDS = 10
ENGINE_CONTAINER = "engine"
PORT_NAME = "http"


def startup_failure_threshold(timeout: str) -> int:
    """startupProbe failures allowed so that the probe gives up only after `spec.startup.timeout`."""
    return max(1, math.ceil(parse_duration(timeout) / STARTUP_PROBE_PERIOD_SECONDS))


def engine_pod_spec(serving: DrafterServing, image: str, argv: list[str], port: int, health_path: str,
                    readiness_path: str) -> dict:
    spec = serving.spec
    placement = spec.placement
    node_selector = dict(placement.node_selector or {}) if placement else {}
    if placement and placement.gpu_product:
        node_selector[GPU_PRODUCT_LABEL] = placement.gpu_product
    tolerations = [GPU_TOLERATION]
    if placement and placement.tolerations:
        tolerations += [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in placement.tolerations]
    shm = {"medium": "Memory"}
    if spec.storage and spec.storage.shm_size:
        shm["sizeLimit"] = spec.storage.shm_size
    volumes = [{"name": "dshm", "emptyDir": shm}]
    mounts = [{"name": "dshm", "mountPath": "/dev/shm"}]
    if spec.storage and spec.storage.model_claim:
        volumes.append({"name": "models", "persistentVolumeClaim": {"claimName": spec.storage.model_claim,
                                                                     "readOnly": True}})
        mounts.append({"name": "models", "mountPath": spec.storage.mount_path, "readOnly": True})
    gpus = str(spec.resources.gpus_per_replica)
    container = {
        "name": ENGINE_CONTAINER,
        "image": image,
        "command": argv,
        "ports": [{"name": PORT_NAME, "containerPort": port, "protocol": "TCP"}],
        "resources": {"limits": {GPU_RESOURCE: gpus}, "requests": {GPU_RESOURCE: gpus}},
        "volumeMounts": mounts,
        # Loading 547 GB takes about 30 minutes: the startup probe, not a fixed delay, absorbs it.
        "startupProbe": {"httpGet": {"path": health_path, "port": PORT_NAME},
                         "periodSeconds": STARTUP_PROBE_PERIOD_SECONDS,
                         "failureThreshold": startup_failure_threshold(spec.startup.timeout)},
        "readinessProbe": {"httpGet": {"path": readiness_path, "port": PORT_NAME}, "periodSeconds": 5,
                           "timeoutSeconds": 5, "failureThreshold": 3},
        "livenessProbe": {"httpGet": {"path": health_path, "port": PORT_NAME}, "periodSeconds": 15,
                          "timeoutSeconds": 10, "failureThreshold": 4},
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    pod_spec = {"containers": [container], "volumes": volumes, "tolerations": tolerations,
                "terminationGracePeriodSeconds": 60, "enableServiceLinks": False}
    if node_selector:
        pod_spec["nodeSelector"] = node_selector
    return pod_spec


def engine_deployment(serving: DrafterServing, revision: str, replicas: int, pod_spec: dict,
                      annotations: dict[str, str] | None = None) -> dict:
    name, namespace = serving.name, serving.namespace
    labels = revision_labels(name, revision)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": deployment_name(name, revision), "namespace": namespace, "labels": labels,
                     "annotations": dict(annotations or {})},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": revision_selector(name, revision)},
            # One revision never rolls within itself with surge: GPUs are the scarce resource.
            "strategy": {"type": "Recreate"},
            "revisionHistoryLimit": 1,
            "progressDeadlineSeconds": int(parse_duration(serving.spec.startup.timeout)) + 300,
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }


# Recorded on the Service with the pointer itself, so a restarted operator knows what is draining.
PREVIOUS_REVISION_ANNOTATION = "drafter.dev/previous-revision"
SWITCHED_AT_ANNOTATION = "drafter.dev/switched-at"


def serving_service(serving: DrafterServing, active_revision: str, port: int,
                    annotations: dict[str, str] | None = None) -> dict:
    name = serving.name
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": serving.namespace, "labels": serving_labels(name),
                     "annotations": dict(annotations or {})},
        "spec": {
            "type": "ClusterIP",
            "selector": revision_selector(name, active_revision),
            "ports": [{"name": PORT_NAME, "port": port, "targetPort": PORT_NAME, "protocol": "TCP"}],
        },
    }


def service_revision(service: dict) -> str | None:
    return ((service.get("spec") or {}).get("selector") or {}).get(REVISION_LABEL)
