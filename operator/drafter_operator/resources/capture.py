"""Pure builders of what spec.capture adds to an engine pod: the spool both containers share, the claim only the
capture sidecar mounts, the sidecar itself (the operator's image running `drafter-operator capture`) and, with
spec.capture.redaction, the user's redaction container and the directory it shares with the sidecar only
(capture/redaction.py has the protocol). The engine's own part (its flags, variables and files) is the engine
module's: engines/*.py capture_*."""

from __future__ import annotations

from drafter_operator import engines, settings
from drafter_operator.api.serving.capture import CaptureSpec
from drafter_operator.capture.redaction import WRAPPER_SCRIPT
from drafter_operator.capture.samples import SAMPLES_PORT
from drafter_operator.capture.spool import SPOOL_DIRECTORY
from drafter_operator.resources import pod_policy

CAPTURE_CONTAINER = "capture"
SPOOL_VOLUME = "capture-spool"
CLAIM_VOLUME = "capture-claim"
SAMPLES_PORT_NAME = "samples"
REDACTION_CONTAINER = "redaction"
REDACTION_VOLUME = "capture-redaction"
#: Where the capture sidecar and the redaction container see the batches they hand each other.
REDACTION_DIRECTORY = "/var/run/drafter/redaction"
#: A batch is one poll's sample of one spool file: megabytes at most, and deleted once answered.
REDACTION_SIZE_LIMIT = "1Gi"
#: Where the sidecar mounts spec.capture.claimName; it writes under a directory named after its pod there, so the
#: pods of a serving never append to one file.
CLAIM_MOUNT = "/var/lib/drafter/capture"
#: The spool's bound on the node's disk. vLLM's log is taken every poll, but SGLang's live file is only tailed
#: (its handler keeps the file open until the hourly rotation), so the spool may hold up to an hour of every
#: request's log line, sampled or not.
SPOOL_SIZE_LIMIT = "16Gi"
#: The sidecar parses JSON lines and appends a sample: a fraction of a core, tens of MB.
CAPTURE_RESOURCES = {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}}


def spool_volume() -> dict:
    return {"name": SPOOL_VOLUME, "emptyDir": {"sizeLimit": SPOOL_SIZE_LIMIT}}


def spool_mount() -> dict:
    return {"name": SPOOL_VOLUME, "mountPath": SPOOL_DIRECTORY}


def claim_volume(capture: CaptureSpec) -> dict:
    return {"name": CLAIM_VOLUME, "persistentVolumeClaim": {"claimName": capture.claim_name}}


def redaction_volume() -> dict:
    return {"name": REDACTION_VOLUME, "emptyDir": {"sizeLimit": REDACTION_SIZE_LIMIT}}


def redaction_mount() -> dict:
    return {"name": REDACTION_VOLUME, "mountPath": REDACTION_DIRECTORY}


def capture_volumes(capture: CaptureSpec) -> list[dict]:
    """The pod's volumes for capture: the spool, the claim and, with a redaction, the directory it shares."""
    return [spool_volume(), claim_volume(capture), *([redaction_volume()] if capture.redaction else [])]


def capture_argv(engine: str, capture: CaptureSpec) -> list[str]:
    """The sidecar's command (cli.py `capture`): the spec's values as the API spells them."""
    return ["drafter-operator", "capture", "--spool", SPOOL_DIRECTORY, "--claim", CLAIM_MOUNT, "--engine", engine,
            "--sample-rate", capture.sample_rate, *(["--responses"] if capture.responses else []),
            "--retention", capture.retention, "--max-size", capture.max_size,
            *(["--redaction-dir", REDACTION_DIRECTORY] if capture.redaction else []),
            "--samples-port", str(SAMPLES_PORT)]


def capture_container(spec, image: str) -> dict:
    """The capture sidecar of a serving with spec.capture: an init container that keeps running (restartPolicy
    Always, Kubernetes' native sidecar), so it starts before the engine and stops after it, draining the spool
    once the engine has written its last line. ``image``: the operator's own (it carries the CLI). The engine's
    security context: it reads and deletes files the engine wrote."""
    return {
        "name": CAPTURE_CONTAINER,
        "image": image,
        "command": capture_argv(spec.engine, spec.capture),
        "restartPolicy": "Always",
        # It answers how many prompts the claim holds since a time (spec.retraining.minNewSamples) on the pod's IP.
        "ports": [{"name": SAMPLES_PORT_NAME, "containerPort": SAMPLES_PORT, "protocol": "TCP"}],
        "env": [{"name": settings.POD_IP.name, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        "resources": {kind: dict(values) for kind, values in CAPTURE_RESOURCES.items()},
        "volumeMounts": [spool_mount(), {"name": CLAIM_VOLUME, "mountPath": CLAIM_MOUNT},
                         *([redaction_mount()] if spec.capture.redaction else [])],
        "securityContext": pod_policy.container_security(spec.pod, pod_policy.DEFAULT_ENGINE_SECURITY_CONTEXT),
    }


def redaction_container(spec) -> dict | None:
    """The user's redaction container (spec.capture.redaction), a native sidecar started before the capture
    sidecar, so it stops after it (native sidecars stop in reverse order) and answers the final drain's batches.
    Its command runs under the wrapper that hands it one batch at a time on standard input; it mounts the shared
    directory only, never the claim or the spool."""
    redaction = spec.capture.redaction if spec.capture else None
    if redaction is None:
        return None
    return {
        "name": REDACTION_CONTAINER,
        "image": redaction.image,
        "command": ["sh", "-c", WRAPPER_SCRIPT, "redact", REDACTION_DIRECTORY, *redaction.command],
        "restartPolicy": "Always",
        "resources": {kind: dict(values) for kind, values in CAPTURE_RESOURCES.items()},
        "volumeMounts": [redaction_mount()],
        "securityContext": pod_policy.container_security(spec.pod, pod_policy.DEFAULT_ENGINE_SECURITY_CONTEXT),
    }


def engine_files(spec) -> dict[str, str]:
    """The files the engine container reads for capture (path -> content); none without spec.capture."""
    return engines.engine(spec.engine).capture_files(spec.capture)


def engine_environment(spec) -> dict[str, str]:
    """The engine container's variables for capture; none without spec.capture."""
    return engines.engine(spec.engine).capture_environment(spec.capture)
