"""Pure builders for a revision's engine Deployment and the serving's Service."""

from __future__ import annotations

import math
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field

from drafter_operator import engines
from drafter_operator.api import DrafterServing, DrafterServingSpec, parse_duration
from drafter_operator.constants import (
    FILE_ANNOTATION_PREFIX,
    BLOCK_METHODS,
    CHECKED_METHODS,
    METHODS_IN_TARGET,
    METHODS_OF_TARGET_ONLY,
    REVISION_LABEL,
)
from drafter_operator.capture.spool import CAPTURE_FILES_DIRECTORY
from drafter_operator.resources import capture, pod_policy
from drafter_operator.resources.labels import deployment_name, revision_labels, revision_selector, serving_labels

GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
# GPU nodes are commonly tainted so only GPU work lands there (GKE: nvidia.com/gpu=present:NoSchedule).
GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
STARTUP_PROBE_PERIOD_SECONDS = 10
ENGINE_CONTAINER = "engine"
PORT_NAME = "http"
# The drafter checkpoint preflight (preflight/, docs/preflight.md), run before the engine in the same pod.
PREFLIGHT_CONTAINER = "preflight"
TERMINATION_LOG = "/dev/termination-log"
# It reads config.json files, safetensors headers and the d2t/t2d tensors (a few hundred KB): well under a
# second of one core, and tens of MB beside the interpreter even for a 1T-parameter checkpoint's headers.
PREFLIGHT_RESOURCES = {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}}


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
    env += [{"name": name, "value": value} for name, value in capture.engine_environment(spec).items()]
    return env


def on_model_volume(spec: DrafterServingSpec, model: str | None) -> bool:
    """Whether ``model`` is a path on spec.storage.modelClaim, as the engine pod mounts it."""
    mount = spec.storage.mount_path if spec.storage else None
    if not model or not (spec.storage and spec.storage.model_claim):
        return False
    return model == mount or model.startswith(mount.rstrip("/") + "/")


def preflight_argv(spec: DrafterServingSpec) -> list[str] | None:
    """`drafter-operator preflight` for this serving's drafter, target, engine and method, or None where
    there is nothing it can check before the engine starts:
    - methods without checkpoint rules: none, ngram, ngramGpu and suffix load no drafter, draftModel is a
      whole LLM the rules do not cover (constants.CHECKED_METHODS);
    - mtp, and dspark without a model, check the target alone (its MTP layers, its bundled DSpark head);
    - a target or (eagle, eagle3) drafter that is a hub id, not a path on the model volume: it reaches the
      pod only when the engine downloads it, after this container has run, and every rule compares the
      drafter with the target's config.
    A path on the volume that does not exist is passed on: --skip-missing reports it as not checked, since
    the engine itself names a missing model within seconds of starting."""
    drafter = spec.drafter
    if drafter.method not in CHECKED_METHODS or not on_model_volume(spec, spec.target.model):
        return None
    argv = ["drafter-operator", "preflight", "--target", spec.target.model, "--engine", spec.engine,
            "--method", drafter.method]
    if on_model_volume(spec, drafter.model):
        argv += ["--drafter", drafter.model]
    elif drafter.method in METHODS_OF_TARGET_ONLY or (drafter.method in METHODS_IN_TARGET and not drafter.model):
        # mtp drafts with the target's own layers (a drafter given anyway only earns a warning); dspark
        # without a model drafts with the target's bundled DSpark head, which the preflight checks.
        pass
    else:
        return None
    if drafter.method in BLOCK_METHODS and drafter.num_speculative_tokens is not None:
        argv += ["--num-speculative-tokens", str(drafter.num_speculative_tokens)]  # against the trained block
    runner = engines.engine(spec.engine).model_runner(spec)
    if runner is not None:
        # Where vLLM reads the EAGLE-3 layer ids depends on its model runner, chosen by spec.env.
        argv += ["--vllm-model-runner", runner]
    return argv + ["--skip-missing", "--termination-message", TERMINATION_LOG]


def preflight_container(serving: DrafterServing, image: str) -> dict | None:
    """The init container that checks the drafter checkpoint before the engine loads the target (a
    30-minute load for a Kimi-class model): its verdict, compact JSON in its termination message, becomes
    the DrafterCompatible condition; a failing verdict exits 1 and the engine never starts. None where
    `preflight_argv` has nothing to check. ``image``: the operator's own (it carries the CLI)."""
    spec = serving.spec
    argv = preflight_argv(spec)
    if argv is None:
        return None
    return {
        "name": PREFLIGHT_CONTAINER,
        "image": image,
        "command": argv,
        "resources": {kind: dict(values) for kind, values in PREFLIGHT_RESOURCES.items()},
        # Only the model volume, read-only: the preflight never writes a checkpoint and needs no secret.
        "volumeMounts": [{"name": "models", "mountPath": spec.storage.mount_path, "readOnly": True}],
        # File, not FallbackToLogsOnError: the record is the whole message, and the log's table would not parse.
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "File",
        # The engine's security context: whoever may read the checkpoints as the engine may read them here.
        "securityContext": pod_policy.container_security(spec.pod, pod_policy.DEFAULT_ENGINE_SECURITY_CONTEXT),
    }


@dataclass(frozen=True)
class EngineHttp:
    """Where an engine answers: its ``port``, the path that says it is alive (``health_path``: the startup and
    liveness probes) and the one that says it takes requests (``readiness_path``)."""

    port: int
    health_path: str
    readiness_path: str

    @classmethod
    def of(cls, engine) -> EngineHttp:
        """An engine module's own (engines/: DEFAULT_PORT, HEALTH_PATH, READINESS_PATH)."""
        return cls(engine.DEFAULT_PORT, engine.HEALTH_PATH, engine.READINESS_PATH)


#: A file the engine reads rides in a pod template annotation (FILE_ANNOTATION_PREFIX + its name) and is projected
#: into the pod by the downward API: no object of its own to create, adopt or collect, and it changes exactly when
#: the revision does.
FILES_VOLUME = "engine-files"
#: The files the engine reads for spec.capture (engines/*.py capture_files), in a directory of their own.
CAPTURE_FILES_VOLUME = "capture-files"


@dataclass(frozen=True)
class EnginePod:
    """A revision's engine pod spec and the files its template carries for it (path -> content); for a replica that
    spans nodes, the command of its worker pods (the spec is the leader's)."""

    spec: dict
    files: Mapping[str, str] = field(default_factory=dict)
    worker_argv: list[str] | None = None


def file_annotations(files: Mapping[str, str]) -> dict[str, str]:
    """The pod template annotations that carry ``files`` (path -> content)."""
    return {FILE_ANNOTATION_PREFIX + posixpath.basename(path): content for path, content in files.items()}


def files_volume(files: Mapping[str, str], volume: str = FILES_VOLUME) -> tuple[dict, dict] | None:
    """The volume (named ``volume``) and mount that project ``files`` (all in one directory) from the template's
    annotations."""
    if not files:
        return None
    directories = {posixpath.dirname(path) for path in files}
    if len(directories) != 1:
        raise ValueError(f"engine files must share one directory, got {sorted(directories)}")
    items = [{"path": posixpath.basename(path), "fieldRef": {
        "fieldPath": f"metadata.annotations['{FILE_ANNOTATION_PREFIX}{posixpath.basename(path)}']"}}
             for path in sorted(files)]
    return ({"name": volume, "projected": {"sources": [{"downwardAPI": {"items": items}}]}},
            {"name": volume, "mountPath": directories.pop(), "readOnly": True})


def engine_pod_spec(serving: DrafterServing, image: str, argv: list[str], http: EngineHttp,
                    preflight_image: str, files: Mapping[str, str] | None = None) -> dict:
    """The engine pod of a revision, its engine answering at ``http``. ``preflight_image``: the operator's
    image, for the drafter preflight init container (`preflight_container`) and the capture sidecar
    (resources/capture.py). ``files``: files the engine reads (path -> content; the template carries them:
    :func:`file_annotations`; those of spec.capture's directory get a volume of their own)."""
    port, health_path, readiness_path = http.port, http.health_path, http.readiness_path
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
    files = files or {}
    captured = {path: content for path, content in files.items() if posixpath.dirname(path) == CAPTURE_FILES_DIRECTORY}
    for group, name in (({p: c for p, c in files.items() if p not in captured}, FILES_VOLUME),
                        (captured, CAPTURE_FILES_VOLUME)):
        if (projected := files_volume(group, name)) is not None:
            volumes.append(projected[0])
            mounts.append(projected[1])
    if spec.capture:
        # The engine writes its request log into the spool; only the sidecar mounts the claim.
        volumes += capture.capture_volumes(spec.capture)
        mounts.append(capture.spool_mount())
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
    # The preflight first: the capture sidecars (native sidecars: the redaction container, then the capture one)
    # start once it has passed, before the engine.
    init = [preflight_container(serving, preflight_image), capture.redaction_container(spec),
            capture.capture_container(spec, preflight_image) if spec.capture else None]
    if any(init):
        pod_spec["initContainers"] = [container for container in init if container]
    if node_selector:
        pod_spec["nodeSelector"] = node_selector
    if placement and placement.affinity:
        pod_spec["affinity"] = placement.affinity.to_json()
    if placement and placement.topology_spread_constraints:
        pod_spec["topologySpreadConstraints"] = [c.to_json() for c in placement.topology_spread_constraints]
    return pod_spec


def engine_deployment(serving: DrafterServing, revision: str, replicas: int, pod_spec: dict,
                      annotations: dict[str, str] | None = None, files: Mapping[str, str] | None = None) -> dict:
    """A revision's Deployment; ``files``: those its pod spec projects (:func:`engine_pod_spec`)."""
    name, namespace = serving.name, serving.namespace
    labels = revision_labels(name, revision)
    template = pod_policy.template_metadata(labels, serving.spec.pod)
    if files:
        template["annotations"] = {**template.get("annotations", {}), **file_annotations(files)}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": deployment_name(name, revision), "namespace": namespace, "labels": labels,
                     "annotations": dict(annotations or {})},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": revision_selector(name, revision)},
            # A change of pod settings rolls within the revision one pod at a time and never with surge:
            # GPUs are the scarce resource, and the other replicas keep serving meanwhile.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
            "revisionHistoryLimit": 1,
            "progressDeadlineSeconds": int(startup_limit_seconds(serving.spec)) + 300,
            "template": {"metadata": template, "spec": pod_spec},
        },
    }




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


def service_url(service: dict | None) -> str | None:
    """http://<cluster IP>:<first port> of a Service once the apiserver assigned the IP: what a pod on any
    node reaches (cluster DNS is not assumed; the local cluster has none)."""
    spec = (service or {}).get("spec") or {}
    ip, ports = spec.get("clusterIP"), spec.get("ports") or []
    if not ip or ip == "None" or not ports:
        return None
    return f"http://{ip}:{ports[0]['port']}"
