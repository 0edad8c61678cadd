"""Pure helpers that put a spec's pod settings (api/pod.py) into the pods the operator builds.

Shared by the engine Deployment and the benchmark Job, so every kind renders env, resources, labels
and security the same way. The operator's own labels and variables always win: the schema already
refuses the label keys it owns, and a user variable with one of its names is dropped here, because
the operator's value (HF_HUB_OFFLINE, HF_HOME) describes volumes the operator mounts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

#: Where the upstream vLLM and SGLang images run (as root, GPUs through the device plugin): nothing in
#: it stops them, and it closes what they never need. Capabilities are kept: NCCL over InfiniBand needs
#: IPC_LOCK to pin memory. spec.pod.containerSecurityContext replaces it whole.
DEFAULT_ENGINE_SECURITY_CONTEXT = {"allowPrivilegeEscalation": False, "seccompProfile": {"type": "RuntimeDefault"}}


def template_metadata(own_labels: Mapping[str, str], policy) -> dict:
    """A pod template's metadata: the policy's labels and annotations, then the operator's labels."""
    extra = policy.pod_metadata() if policy is not None else {}
    metadata: dict = {"labels": {**extra.get("labels", {}), **own_labels}}
    if extra.get("annotations"):
        metadata["annotations"] = dict(extra["annotations"])
    return metadata


def pod_fields(policy) -> dict:
    """Pod spec fields the policy sets: serviceAccountName, imagePullSecrets, priorityClassName,
    runtimeClassName, securityContext."""
    return policy.pod_spec() if policy is not None else {}


def container_security(policy, default: Mapping) -> dict:
    """The container's securityContext: the policy's, else the kind's default."""
    chosen = policy.container_security_context if policy is not None else None
    return chosen.to_json() if chosen is not None else dict(default)


def container_resources(resources, own: Mapping[str, Mapping[str, str]] | None = None,
                        default: Mapping[str, Mapping[str, str]] | None = None) -> dict:
    """requests and limits: the spec's cpu/memory/ephemeral-storage (else ``default``) with the
    operator's own resources (``own``: the GPUs) on top."""
    chosen = resources.to_json() if resources is not None else {}
    chosen = {key: dict(chosen[key]) for key in ("requests", "limits") if chosen.get(key)} or \
        {key: dict(value) for key, value in (default or {}).items()}
    for key, values in (own or {}).items():
        chosen[key] = {**chosen.get(key, {}), **values}
    return chosen


def environment(env: Iterable | None, operator_env: list[dict]) -> list[dict]:
    """The container's env: the spec's variables without the operator's names, then the operator's."""
    owned = {variable["name"] for variable in operator_env}
    return [variable.to_json() for variable in env or () if variable.name not in owned] + list(operator_env)


def environment_from(env_from: Iterable | None) -> list[dict]:
    return [source.to_json() for source in env_from or ()]
