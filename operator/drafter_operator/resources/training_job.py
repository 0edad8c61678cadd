"""Pure builders for one DrafterTraining stage: the spec ConfigMap its Job reads, and the Job.

A stage Job runs ``drafter-operator run-stage`` (training/stage_runner.py) in the trainer image with
the DrafterTraining spec mounted from a ConfigMap (one per spec generation); it renders its own stage
there, where the target's config.json is (training.render). It mounts the model volume read-only, the
hidden-state claim as the work directory (read-write for the stages that write it, read-only for
Export), and the hub cache when the spec has one. Export alone may write the model volume, and only the
output's parent directory (a subPath mount over the read-only volume): the staging directory and the
rename into place (training/export.py) both happen there, and nothing else on the volume is writable.
Every stage pod runs with ``fsGroup`` set to the trainer image's group (``OnRootMismatch``), so the
image's non-root user can write a freshly provisioned, root-owned volume. Stages that run the target (Generate with
Extract, Train) get the GPUs and the GPU placement; the others run on CPU nodes. A
stage never retries (``backoffLimit: 0``): its failure stops the run with its own error, and a spec
change is the retry. Extract and Train across ``resources.nodes`` pods are Indexed Jobs (``job_parallelism``); Train's
pods find each other through a headless Service (``rendezvous_service``) for torchrun's c10d rendezvous.
"""

from __future__ import annotations

import copy
import json

from dataclasses import dataclass

from drafter_operator.api.common import parse_duration
from drafter_operator.api.training.sections import STAGE_DEADLINE_DEFAULTS
from drafter_operator.constants import STAGE_LABEL, TRAINING_LABEL
from drafter_operator.resources import pod_policy, queueing
from drafter_operator.resources.engine import GPU_PRODUCT_LABEL, GPU_RESOURCE, GPU_TOLERATION, HF_HOME, HF_HUB_OFFLINE
from drafter_operator.resources.names import (INDEXED_JOB_NAME_MAX, JOB_NAME_MAX, SERVICE_NAME_MAX, SUBDOMAIN_NAME_MAX,
                                              child_name)
from drafter_operator.resources.training import hidden_states_claim_name, training_labels
from drafter_operator.training import TrainingPaths
from drafter_operator.training.stages import stage_pods
from drafter_operator.training.torchrun import RENDEZVOUS_PORT, Rendezvous

CONTAINER = "stage"
SPEC_KEY = "training.json"
SPEC_DIR = "/etc/drafter-training-spec"
#: Stages that run the target model (and so need its GPUs). Generate only asks the target's engine pod
#: over HTTP (resources/training_engine.py), which has the GPUs.
GPU_STAGES = frozenset({"Extract", "Train"})
#: Trainer containers run as their image's user; they write to the claims and need nothing more.
DEFAULT_SECURITY_CONTEXT = {"allowPrivilegeEscalation": False, "seccompProfile": {"type": "RuntimeDefault"}}
#: The trainer image's user and group (images/trainer/Dockerfile: USER 1000:1000).
TRAINER_UID = 1000
#: The stage pods' securityContext unless spec.pod.securityContext says otherwise (its keys win): the
#: volumes' group becomes the trainer's, changed only when the volume's root does not already have it
#: (a recursive change of a model volume of terabytes on every pod start would take minutes).
DEFAULT_POD_SECURITY_CONTEXT = {"fsGroup": TRAINER_UID, "fsGroupChangePolicy": "OnRootMismatch"}
#: The Job controller fails a stage Job at once when a pod of it gets the DisruptionTarget condition (the Eviction
#: API, a node drain, the scheduler's preemption, the taint manager, the kubelet's node-pressure eviction), with
#: reason PodFailurePolicy: the sign, in the Job itself, that it failed by no fault of its own (the disrupted pod
#: may be gone by the time the operator reads the Job). A Train group's peers fail as a lost rank makes them.
DISRUPTION_REASON = "PodFailurePolicy"
DISRUPTION_POLICY = {"rules": [{"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]}
#: The reason the Job controller gives a Job that ran past its activeDeadlineSeconds.
DEADLINE_REASON = "DeadlineExceeded"


def stage_job_name(training: str, stage: str, generation: int, pods: int = 1, attempt: int = 0) -> str:
    """One Job per stage, spec generation and attempt: a changed spec is a new run, never a relabelled old one,
    and a disrupted stage's next attempt (``attempt`` 1, 2, ...: ``-r<attempt>``) a Job of its own beside the
    failed one, which stays as the record. The Job of a stage across ``pods`` (training.stages.stage_pods) is
    Indexed: its name leaves room for its pods' ``-<index>`` hostnames (names.INDEXED_JOB_NAME_MAX). The pods
    follow spec.resources.nodes and the framework, whose change is a new generation, so a stage's name never
    changes under a running Job."""
    limit = INDEXED_JOB_NAME_MAX if pods > 1 else JOB_NAME_MAX
    return child_name(training, f"{stage.lower()}-g{generation}" + (f"-r{attempt}" if attempt else ""), limit)


def stage_deadline_seconds(spec, stage: str) -> int:
    """How long a Job of ``stage`` may run: spec.limits.deadlines' bound, else STAGE_DEADLINE_DEFAULTS'."""
    own = getattr(spec.limits.deadlines, stage.lower(), None)
    return int(parse_duration(own or STAGE_DEADLINE_DEFAULTS[stage]))


def rendezvous_service_name(training: str) -> str:
    """The headless Service that names Train's pods across nodes (their ``subdomain``)."""
    return child_name(training, "rendezvous", SERVICE_NAME_MAX)


def rendezvous_service(namespace: str, training: str) -> dict:
    """Headless (no cluster IP: each pod's own address) and publishing pods before they are Ready, so
    ``<train job>-<i>.<service>`` resolves from the moment the pods start, which the rendezvous needs."""
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": rendezvous_service_name(training), "namespace": namespace,
                         "labels": training_labels(training)},
            "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                     "selector": {TRAINING_LABEL: training, STAGE_LABEL: "Train"},
                     "ports": [{"name": "rendezvous", "port": RENDEZVOUS_PORT, "protocol": "TCP"}]}}


def rendezvous(training: str, generation: int, nodes: int, attempt: int = 0) -> Rendezvous:
    """Where Train's pods meet: pod 0 of this generation's Train Job (of ``attempt``) by its name through the
    Service (the namespace's search path completes it), the Job's name as the run's id."""
    job = stage_job_name(training, "Train", generation, nodes, attempt)  # Train spans every node, whatever the framework
    return Rendezvous(endpoint=f"{job}-0.{rendezvous_service_name(training)}:{RENDEZVOUS_PORT}", run_id=job)


def rendezvous_args(training: str, spec, generation: int, attempt: int = 0) -> tuple[str, ...]:
    """run-stage's rendezvous options for every stage Job of a run across nodes (each renders the whole
    pipeline, Train included: its ``attempt``); none on one node."""
    nodes = spec.resources.nodes
    if nodes == 1:
        return ()
    meet = rendezvous(training, generation, nodes, attempt)
    return ("--rendezvous-endpoint", meet.endpoint, "--rendezvous-id", meet.run_id)


def spec_config_map_name(training: str, generation: int) -> str:
    return child_name(training, f"spec-g{generation}", SUBDOMAIN_NAME_MAX)


def spec_config_map(namespace: str, training: str, spec, generation: int) -> dict:
    """The spec every stage Job of this generation renders its stage from."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": spec_config_map_name(training, generation), "namespace": namespace,
                         "labels": training_labels(training)},
            "data": {SPEC_KEY: json.dumps(spec.to_json(), indent=1, sort_keys=True)}}


def pod_security_context(policy) -> dict:
    """The stage pods' (and Generate's engine pod's) securityContext: the trainer's fsGroup under the
    policy's own settings."""
    own = policy.security_context.to_json() if policy is not None and policy.security_context is not None else {}
    return {**DEFAULT_POD_SECURITY_CONTEXT, **own}


def model_mounts(mount_path: str, output: str | None) -> list[dict]:
    """The model volume's mounts: read-only at mount_path, and with ``output`` (Export) its parent
    directory read-write through a subPath (the API keeps the parent below the volume's root)."""
    mounts = [{"name": "models", "mountPath": mount_path, "readOnly": True}]
    if output is not None:
        parent = output.rsplit("/", 1)[0]
        mounts.append({"name": "models", "mountPath": parent, "subPath": parent[len(mount_path) + 1:],
                       "readOnly": False})
    return mounts


def stage_environment(spec) -> list[dict]:
    """The stage container's env: the spec's, then the operator's hub variables (they win)."""
    storage = spec.storage
    own = [{"name": HF_HUB_OFFLINE, "value": "0"}]
    if storage.cache_claim:
        own.append({"name": HF_HOME, "value": storage.cache_path})
    return pod_policy.environment(spec.env, own)


def stage_volumes(training: str, spec, stage: str, generation: int,
                  paths: TrainingPaths) -> tuple[list[dict], list[dict]]:
    """The stage pod's volumes and the container's mounts of them: the model claim (written only by Export,
    and only at the output's subPath), the work claim, the mounted spec, the files directory, the HF cache, and
    for Generate the claim of spec.data.capture (read-only)."""
    writes_models = stage == "Export"
    storage = spec.storage
    volumes = [
        # The claim is read-only unless a mount of it writes (Export's subPath), which the mounts then limit.
        {"name": "models", "persistentVolumeClaim": {"claimName": storage.model_claim, "readOnly": not writes_models}},
        {"name": "work", "persistentVolumeClaim": {"claimName": hidden_states_claim_name(training, spec)}},
        {"name": "spec", "configMap": {"name": spec_config_map_name(training, generation)}},
        # run-stage writes the stage's config files here (the image's filesystem may be read-only).
        {"name": "files", "emptyDir": {}},
    ]
    mounts = [
        *model_mounts(storage.mount_path, spec.output.path if writes_models else None),
        # Export only reads the trained checkpoint.
        {"name": "work", "mountPath": paths.work, "readOnly": writes_models},
        {"name": "spec", "mountPath": SPEC_DIR, "readOnly": True},
        {"name": "files", "mountPath": paths.files},
    ]
    if storage.cache_claim:
        volumes.append({"name": "hf-cache", "persistentVolumeClaim": {"claimName": storage.cache_claim}})
        mounts.append({"name": "hf-cache", "mountPath": storage.cache_path})
    if stage == "Generate" and spec.data.capture is not None:
        # The serving's captured prompts: read (training/rendering.py captured_source), never written.
        volumes.append({"name": "capture", "persistentVolumeClaim": {"claimName": spec.data.capture.claim_name,
                                                                     "readOnly": True}})
        mounts.append({"name": "capture", "mountPath": paths.capture, "readOnly": True})
    return volumes, mounts


@dataclass(frozen=True)
class StageRun:
    """Which run of a stage a Job is: the stage, the spec's generation it runs and its ``attempt`` (0, then 1, 2,
    ... after a disruption); together they name the Job (``stage_job_name``)."""

    stage: str
    generation: int
    attempt: int = 0


@dataclass(frozen=True)
class StageCommand:
    """What the stage container runs: ``image``'s ``drafter-operator run-stage``, with ``render_args`` (extra
    options: ``--cpu`` on a machine without GPUs), keeping its files where ``paths`` say."""

    image: str
    render_args: tuple[str, ...] = ()
    paths: TrainingPaths = TrainingPaths()


def stage_container(spec, run: StageRun, command: StageCommand, mounts: list[dict]) -> dict:
    """The one container: ``drafter-operator run-stage`` on the mounted spec, with the spec's GPUs on a
    GPU stage, its termination message the stage's outcome."""
    own = {"limits": {GPU_RESOURCE: str(spec.resources.gpus)}, "requests": {GPU_RESOURCE: str(spec.resources.gpus)}} \
        if run.stage in GPU_STAGES else None
    container = {
        "name": CONTAINER, "image": command.image,
        "command": ["drafter-operator", "run-stage", "--training", f"{SPEC_DIR}/{SPEC_KEY}", "--stage", run.stage,
                    "--generation", str(run.generation), "--files", command.paths.files, *command.render_args],
        "env": stage_environment(spec),
        "resources": pod_policy.container_resources(spec.resources, own=own),
        "volumeMounts": mounts,
        "terminationMessagePolicy": "File",
        "securityContext": pod_policy.container_security(spec.pod, DEFAULT_SECURITY_CONTEXT),
    }
    if spec.env_from:
        container["envFrom"] = pod_policy.environment_from(spec.env_from)
    return container


def stage_placement(placement, gpu: bool) -> dict:
    """The pod spec's tolerations, nodeSelector and affinity: a GPU stage tolerates the GPU taint and goes
    to spec.placement's nodes (of its GPU product); every stage keeps spec.placement.affinity."""
    fields: dict = {}
    if gpu:
        fields["tolerations"] = [GPU_TOLERATION] + [t.to_json() for t in (placement.tolerations or [])] \
            if placement else [GPU_TOLERATION]
        selector = dict(placement.node_selector or {}) if placement else {}
        if placement and placement.gpu_product:
            selector[GPU_PRODUCT_LABEL] = placement.gpu_product
        if selector:
            fields["nodeSelector"] = selector
    if placement and placement.affinity:
        fields["affinity"] = placement.affinity.to_json()
    return fields


def stage_job(namespace: str, training: str, spec, run: StageRun, command: StageCommand) -> dict:
    """The Job of one ``run`` of a stage for the DrafterTrainingSpec ``spec`` (pure), its container running
    ``command``."""
    stage, generation = run.stage, run.generation
    labels = {**training_labels(training), STAGE_LABEL: stage}
    volumes, mounts = stage_volumes(training, spec, stage, generation, command.paths)
    container = stage_container(spec, run, command, mounts)
    pod_spec: dict = {"restartPolicy": "Never", "containers": [container], "volumes": volumes,
                      **pod_policy.pod_fields(spec.pod)}
    pod_spec["securityContext"] = pod_security_context(spec.pod)
    pod_spec.update(stage_placement(spec.placement, stage in GPU_STAGES))
    pods = stage_pods(spec.framework, spec.resources.nodes, stage)
    if stage == "Train" and pods > 1:
        # Pod i answers to <job>-i.<service> (its hostname is <job>-i): the rendezvous endpoint is pod 0's.
        pod_spec["subdomain"] = rendezvous_service_name(training)
    return queueing.queued({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": stage_job_name(training, stage, generation, pods, run.attempt), "namespace": namespace,
                     "labels": labels},
        "spec": {**job_parallelism(spec, stage), "activeDeadlineSeconds": stage_deadline_seconds(spec, stage),
                 "podFailurePolicy": copy.deepcopy(DISRUPTION_POLICY),
                 "template": {"metadata": pod_policy.template_metadata(labels, spec.pod), "spec": pod_spec}},
    }, spec.queue_name)


def job_parallelism(spec, stage: str) -> dict:
    """One pod that never retries; or, for a stage across spec.resources.nodes, an Indexed Job of that many pods at
    once. Extract's shares are independent: each may run once more (``backoffLimitPerIndex: 1``: a lost node's pod
    is replaced and its share resumes from the samples it wrote), and one share failing twice fails the Job
    (``maxFailedIndexes: 0``). Train's pods are one process group: the first pod that fails fails the Job
    (``backoffLimit: 0``), whose controller then removes the others, so no half-group trains on."""
    pods = stage_pods(spec.framework, spec.resources.nodes, stage)
    if pods == 1:
        return {"backoffLimit": 0}
    group = {"completionMode": "Indexed", "completions": pods, "parallelism": pods}
    if stage == "Train":
        return {**group, "backoffLimit": 0}
    return {**group, "backoffLimitPerIndex": 1, "maxFailedIndexes": 0}
