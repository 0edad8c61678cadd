"""Pure builders of what spec.capture adds to an engine pod: the spool both containers share, the claim only the
capture sidecar mounts, and the sidecar itself (the operator's image running `drafter-operator capture`). The
engine's own part (its flags, variables and files) is the engine module's: engines/*.py capture_*."""

from __future__ import annotations

from drafter_operator import engines
from drafter_operator.api.serving.capture import CaptureSpec
from drafter_operator.capture.spool import SPOOL_DIRECTORY
from drafter_operator.resources import pod_policy

CAPTURE_CONTAINER = "capture"
SPOOL_VOLUME = "capture-spool"
CLAIM_VOLUME = "capture-claim"
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


def capture_argv(engine: str, capture: CaptureSpec) -> list[str]:
    """The sidecar's command (cli.py `capture`): the spec's values as the API spells them."""
    return ["drafter-operator", "capture", "--spool", SPOOL_DIRECTORY, "--claim", CLAIM_MOUNT, "--engine", engine,
            "--sample-rate", capture.sample_rate, *(["--responses"] if capture.responses else []),
            "--retention", capture.retention, "--max-size", capture.max_size]


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
        "resources": {kind: dict(values) for kind, values in CAPTURE_RESOURCES.items()},
        "volumeMounts": [spool_mount(), {"name": CLAIM_VOLUME, "mountPath": CLAIM_MOUNT}],
        "securityContext": pod_policy.container_security(spec.pod, pod_policy.DEFAULT_ENGINE_SECURITY_CONTEXT),
    }


def engine_files(spec) -> dict[str, str]:
    """The files the engine container reads for capture (path -> content); none without spec.capture."""
    return engines.engine(spec.engine).capture_files(spec.capture)


def engine_environment(spec) -> dict[str, str]:
    """The engine container's variables for capture; none without spec.capture."""
    return engines.engine(spec.engine).capture_environment(spec.capture)
