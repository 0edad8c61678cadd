"""Pod-level settings of the pods the operator creates (PodPolicy): labels, annotations, identity, pull secrets,
priority, runtime class and security contexts. Pod labels must not use the keys the operator selects its pods by."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, StringConstraints

from drafter_operator.api.common import ApiModel, LabelValue, ObjectName, Rule
from drafter_operator.api.pod.security import PodSecurityContext, SecurityContext
from drafter_operator.api.pod.values import cel_label_keys, label_key_ok
from drafter_operator.constants import (
    COMPONENT_LABEL,
    INSTANCE_LABEL,
    MANAGED_BY_LABEL,
    NAME_LABEL,
    OPERATOR_LABEL_PREFIX,
)

#: Label keys the operator sets on its pods (resources/labels.py, resources/benchmark_job.py) and selects
#: them by, and the prefix of its own keys: users may not set them.
OPERATOR_LABEL_KEYS: tuple[str, ...] = (NAME_LABEL, INSTANCE_LABEL, MANAGED_BY_LABEL, COMPONENT_LABEL)
_OPERATOR_KEYS_CEL = "[" + ", ".join(f"'{key}'" for key in OPERATOR_LABEL_KEYS) + "]"


def operator_label_key(key: str) -> bool:
    """True for a label key the operator owns."""
    return key.startswith(OPERATOR_LABEL_PREFIX) or key in OPERATOR_LABEL_KEYS


class PullSecretReference(ApiModel):
    """A Secret of type kubernetes.io/dockerconfigjson in the same namespace."""

    name: ObjectName
    """Name of the Secret."""


AnnotationValue = Annotated[str, StringConstraints(max_length=4096)]


class PodPolicy(ApiModel):
    """Pod-level settings of the pods the operator creates: labels, annotations, identity, pull secrets,
    priority, runtime class and security contexts."""

    rules = (
        Rule(
            cel=cel_label_keys("self.labels"),
            message=(
                "labels keys must be label keys: an optional DNS-subdomain prefix and '/', then at most 63 letters, "
                "digits, '-', '_' or '.' starting and ending with a letter or digit: e.g. example.com/team"
            ),
            check=lambda p: all(label_key_ok(k) for k in p.labels or {}),
            field_path=".labels",
        ),
        Rule(
            cel=f"!has(self.labels) || !self.labels.exists(k, k.startsWith('{OPERATOR_LABEL_PREFIX}') || k in {_OPERATOR_KEYS_CEL})",
            message=(
                "labels must not use the operator's keys (prefix drafter.dev/, app.kubernetes.io/name, instance, managed-by, "
                "component): it selects its pods by them; choose another key, e.g. example.com/team"
            ),
            check=lambda p: not any(operator_label_key(k) for k in p.labels or {}),
            field_path=".labels",
            reason="FieldValueForbidden",
        ),
        Rule(
            cel=cel_label_keys("self.annotations"),
            message=(
                "annotations keys must be label keys: an optional DNS-subdomain prefix and '/', then at most 63 letters, "
                "digits, '-', '_' or '.' starting and ending with a letter or digit: e.g. example.com/owner"
            ),
            check=lambda p: all(label_key_ok(k) for k in p.annotations or {}),
            field_path=".annotations",
        ),
    )

    labels: Annotated[dict[str, LabelValue], Field(max_length=32)] | None = None
    """Labels added to the pods, e.g. {example.com/team: inference}; the operator's own keys are refused."""
    annotations: Annotated[dict[str, AnnotationValue], Field(max_length=32)] | None = None
    """Annotations added to the pods (values up to 4096 characters)."""
    service_account_name: ObjectName | None = None
    """ServiceAccount the pods run as; default: the namespace's default."""
    image_pull_secrets: Annotated[list[PullSecretReference], Field(max_length=8)] | None = None
    """Secrets with registry credentials for pulling the images."""
    priority_class_name: ObjectName | None = None
    """PriorityClass of the pods, e.g. a high priority for serving."""
    runtime_class_name: ObjectName | None = None
    """RuntimeClass the pods run with, e.g. nvidia."""
    security_context: PodSecurityContext | None = None
    """Pod security context (every container and the volumes)."""
    container_security_context: SecurityContext | None = None
    """Security context of the operator's containers (the container's securityContext in the pod spec)."""

    def pod_metadata(self) -> dict[str, Any]:
        """labels and annotations for the pod template's metadata (only those set)."""
        out = self.to_json()
        return {key: out[key] for key in ("labels", "annotations") if key in out}

    def pod_spec(self) -> dict[str, Any]:
        """The pod spec fields this policy sets (not containerSecurityContext, which belongs to a container)."""
        out = self.to_json()
        keys = ("serviceAccountName", "imagePullSecrets", "priorityClassName", "runtimeClassName", "securityContext")
        return {key: out[key] for key in keys if key in out}
