"""Pure builders for a revision's engine Deployment and the serving's Service."""

from __future__ import annotations

import math

from drafter_operator.api import DrafterServing, DrafterServingSpec, parse_duration
from drafter_operator.resources import pod_policy
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


# The engine variables the operator sets itself; they win over spec.env and spec.envFrom.
HF_HOME = "HF_HOME"  # spec.storage.cacheClaim: the Hugging Face cache (hub downloads land there)
HF_HUB_OFFLINE = "HF_HUB_OFFLINE"  # spec.storage.offline: never reach for the hub
OPERATOR_ENV_NAMES = (HF_HOME, HF_HUB_OFFLINE)
CACHE_VOLUME = "hf-cache"


def hub_models(spec: DrafterServingSpec) -> list[str]:
    """The models the engine would fetch from the hub: every model reference that is not a path."""
    return [m for m in (spec.target.model, spec.drafter.model) if m and not m.startswith("/")]


def runs_offline(spec: DrafterServingSpec) -> bool:
    """spec.storage.offline, by default on exactly when every model is a path (all on the volumes)."""
    chosen = spec.storage.offline if spec.storage else None
    return not hub_models(spec) if chosen is None else chosen


def startup_limit_seconds(spec: DrafterServingSpec) -> float:
    """How long a revision may take to become Ready: the load, plus a download when one may happen."""
    limit = parse_duration(spec.startup.timeout)
    if hub_models(spec) and not runs_offline(spec):
        limit += parse_duration(spec.startup.download_timeout)
    return limit


def startup_failure_threshold(spec: DrafterServingSpec) -> int:
    """startupProbe failures allowed so that the probe gives up only after the startup limit."""
    return max(1, math.ceil(startup_limit_seconds(spec) / STARTUP_PROBE_PERIOD_SECONDS))


def operator_environment(spec: DrafterServingSpec) -> list[dict]:
    """The variables the operator owns, as the engine container gets them."""
    env = [{"name": HF_HUB_OFFLINE, "value": "1" if runs_offline(spec) else "0"}]
    if spec.storage and spec.storage.cache_claim:
        env.append({"name": HF_HOME, "value": spec.storage.cache_path})
    return env


def engine_pod_spec(serving: DrafterServing, image: str, argv: list[str], port: int, health_path: str,
                    readiness_path: str) -> dict:
    spec = serving.spec
    placement = spec.placement
    node_selector = dict(placement.node_selector or {}) if placement else {}
    if placement and placement.gpu_product:
        node_selector[GPU_PRODUCT_LABEL] = placement.gpu_product
    tolerations = [GPU_TOLERATION]
    if placement and placement.tolerations:
        tolerations += [t.to_json() for t in placement.tolerations]
    shm = {"medium": "Memory"}
    if spec.storage and spec.storage.shm_size:
        shm["sizeLimit"] = spec.storage.shm_size
    volumes = [{"name": "dshm", "emptyDir": shm}]
    mounts = [{"name": "dshm", "mountPath": "/dev/shm"}]
    if spec.storage and spec.storage.model_claim:
        volumes.append({"name": "models", "persistentVolumeClaim": {"claimName": spec.storage.model_claim,
                                                                     "readOnly": True}})
        mounts.append({"name": "models", "mountPath": spec.storage.mount_path, "readOnly": True})
    if spec.storage and spec.storage.cache_claim:
        volumes.append({"name": CACHE_VOLUME, "persistentVolumeClaim": {"claimName": spec.storage.cache_claim}})
        mounts.append({"name": CACHE_VOLUME, "mountPath": spec.storage.cache_path})
    gpus = str(spec.resources.gpus_per_replica)
    container = {
        "name": ENGINE_CONTAINER,
        "image": image,
        "command": argv,
        "ports": [{"name": PORT_NAME, "containerPort": port, "protocol": "TCP"}],
        "resources": pod_policy.container_resources(spec.resources,
                                                    own={"limits": {GPU_RESOURCE: gpus}, "requests": {GPU_RESOURCE: gpus}}),
        "env": pod_policy.environment(spec.env, operator_environment(spec)),
        "volumeMounts": mounts,
        # Loading 547 GB takes about 30 minutes: the startup probe, not a fixed delay, absorbs it.
        "startupProbe": {"httpGet": {"path": health_path, "port": PORT_NAME},
                         "periodSeconds": STARTUP_PROBE_PERIOD_SECONDS,
                         "failureThreshold": startup_failure_threshold(spec)},
        "readinessProbe": {"httpGet": {"path": readiness_path, "port": PORT_NAME}, "periodSeconds": 5,
                           "timeoutSeconds": 5, "failureThreshold": 3},
        "livenessProbe": {"httpGet": {"path": health_path, "port": PORT_NAME}, "periodSeconds": 15,
                          "timeoutSeconds": 10, "failureThreshold": 4},
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": pod_policy.container_security(spec.pod, pod_policy.DEFAULT_ENGINE_SECURITY_CONTEXT),
    }
    if spec.env_from:
        container["envFrom"] = pod_policy.environment_from(spec.env_from)
    pod_spec = {"containers": [container], "volumes": volumes, "tolerations": tolerations,
                "terminationGracePeriodSeconds": 60, "enableServiceLinks": False, **pod_policy.pod_fields(spec.pod)}
    if node_selector:
        pod_spec["nodeSelector"] = node_selector
    if placement and placement.affinity:
        pod_spec["affinity"] = placement.affinity.to_json()
    if placement and placement.topology_spread_constraints:
        pod_spec["topologySpreadConstraints"] = [c.to_json() for c in placement.topology_spread_constraints]
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
            "progressDeadlineSeconds": int(startup_limit_seconds(serving.spec)) + 300,
            "template": {"metadata": pod_policy.template_metadata(labels, serving.spec.pod), "spec": pod_spec},
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
