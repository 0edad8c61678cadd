"""The container's environment: env (a literal value or valueFrom a Secret or ConfigMap key, a pod field or a
container resource) and envFrom (every key of a Secret or ConfigMap). A hub token is refused as a literal value:
it belongs in a Secret."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, StringConstraints

from drafter_operator.api.common import DNS_LABEL_PATTERN, ApiModel, ObjectName, Rule, exactly_one_rule
from drafter_operator.api.pod.values import ENV_PREFIX_PATTERN, KUBE_QUANTITY_PATTERN, ConfigKey, EnvName, unique_names

#: Variables the Hugging Face hub reads a token from; a literal value for them is refused.
HUB_TOKEN_VARIABLES: tuple[str, ...] = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HUGGINGFACE_HUB_TOKEN")
_HUB_TOKEN_CEL = "[" + ", ".join(f"'{name}'" for name in HUB_TOKEN_VARIABLES) + "]"


class SecretKeySelector(ApiModel):
    """One key of a Secret in the same namespace."""

    name: ObjectName
    """Name of the Secret."""
    key: ConfigKey
    """Key in the Secret."""
    optional: bool | None = None
    """Start the container even when the Secret or the key is missing (the variable is then unset)."""


class ConfigMapKeySelector(ApiModel):
    """One key of a ConfigMap in the same namespace."""

    name: ObjectName
    """Name of the ConfigMap."""
    key: ConfigKey
    """Key in the ConfigMap."""
    optional: bool | None = None
    """Start the container even when the ConfigMap or the key is missing (the variable is then unset)."""


# The fields of its own pod a container may read (Kubernetes' list for env), plus one label or annotation.
FIELD_PATH_PATTERN = (
    r"^(metadata\.(name|namespace|uid)|spec\.(nodeName|serviceAccountName)|status\.(hostIP|hostIPs|podIP|podIPs)"
    r"|metadata\.(labels|annotations)\['[-A-Za-z0-9_./]{1,255}'\])$"
)


class ObjectFieldSelector(ApiModel):
    """A field of the pod itself (the downward API)."""

    api_version: Literal["v1"] | None = None
    """Version of the schema fieldPath is written in; only v1 (the default)."""
    field_path: Annotated[str, StringConstraints(pattern=FIELD_PATH_PATTERN, min_length=1, max_length=300)]
    """The field, e.g. metadata.name, metadata.namespace, status.podIP, spec.nodeName or metadata.labels['app']."""


_CPU_DIVISORS: tuple[str, ...] = ("1", "1m")
_BYTE_DIVISORS: tuple[str, ...] = ("1", "1k", "1M", "1G", "1T", "1P", "1E", "1Ki", "1Mi", "1Gi", "1Ti", "1Pi", "1Ei")


def _divisor_ok(selector: ResourceFieldSelector) -> bool:
    if selector.divisor is None:
        return True
    allowed = _CPU_DIVISORS if selector.resource.endswith(".cpu") else _BYTE_DIVISORS
    return selector.divisor in allowed


class ResourceFieldSelector(ApiModel):
    """A resource request or limit of a container of the pod, e.g. for GOMAXPROCS or a memory budget."""

    rules = (
        Rule(
            cel=(
                "!has(self.divisor) || (self.resource.endsWith('.cpu') ? self.divisor in "
                + "[" + ", ".join(f"'{d}'" for d in _CPU_DIVISORS) + "] : self.divisor in "
                + "[" + ", ".join(f"'{d}'" for d in _BYTE_DIVISORS) + "])"
            ),
            message=(
                "valueFrom.resourceFieldRef.divisor must be 1 or 1m for cpu, and 1, 1k, 1M, 1G, 1T, 1P, 1E, 1Ki, 1Mi, "
                "1Gi, 1Ti, 1Pi or 1Ei for memory and ephemeral-storage: e.g. divisor: 1Mi"
            ),
            check=_divisor_ok,
            field_path=".divisor",
        ),
    )

    container_name: Annotated[str, StringConstraints(pattern=DNS_LABEL_PATTERN, min_length=1, max_length=63)] | None = None
    """The container whose resources are read; default: the container this variable belongs to."""
    resource: Literal["limits.cpu", "limits.memory", "limits.ephemeral-storage",
                      "requests.cpu", "requests.memory", "requests.ephemeral-storage"]
    """The resource, e.g. limits.memory."""
    divisor: Annotated[str, StringConstraints(pattern=KUBE_QUANTITY_PATTERN, min_length=1, max_length=4)] | None = None
    """Unit of the value, e.g. "1Mi" (memory in MiB) or "1m" (cpu in millicores); default "1"."""


class EnvVarSource(ApiModel):
    """Where a variable's value comes from: a Secret or ConfigMap key, a pod field or a container resource."""

    rules = (
        exactly_one_rule(
            ("secretKeyRef", "configMapKeyRef", "fieldRef", "resourceFieldRef"),
            "env[].valueFrom needs exactly one of secretKeyRef, configMapKeyRef, fieldRef or resourceFieldRef: "
            "e.g. valueFrom: {secretKeyRef: {name: hf-token, key: token}}",
        ),
    )

    secret_key_ref: SecretKeySelector | None = None
    """A key of a Secret, e.g. {name: hf-token, key: token}."""
    config_map_key_ref: ConfigMapKeySelector | None = None
    """A key of a ConfigMap."""
    field_ref: ObjectFieldSelector | None = None
    """A field of the pod, e.g. {fieldPath: metadata.name}."""
    resource_field_ref: ResourceFieldSelector | None = None
    """A resource request or limit of a container, e.g. {resource: limits.memory, divisor: 1Mi}."""


class EnvVar(ApiModel):
    """An environment variable of the container: a literal value or a reference (valueFrom)."""

    rules = (
        exactly_one_rule(
            ("value", "valueFrom"),
            'env[] needs exactly one of env[].value (may be "") and env[].valueFrom: e.g. {name: LOG_LEVEL, value: debug}',
        ),
        Rule(
            cel=f"!has(self.value) || !(self.name in {_HUB_TOKEN_CEL})",
            message=(
                "env[].value must not hold a hub token (HF_TOKEN, HUGGING_FACE_HUB_TOKEN, HUGGINGFACE_HUB_TOKEN): "
                "put it in a Secret and use env[].valueFrom.secretKeyRef or envFrom[].secretRef"
            ),
            check=lambda e: e.value is None or e.name not in HUB_TOKEN_VARIABLES,
            field_path=".value",
            reason="FieldValueForbidden",
        ),
    )

    name: EnvName
    """Name of the variable, e.g. VLLM_LOGGING_LEVEL."""
    value: Annotated[str, StringConstraints(max_length=32768)] | None = None
    """Literal value ("" is a value); never a hub token."""
    value_from: EnvVarSource | None = None
    """Take the value from a Secret or ConfigMap key, a pod field or a container resource."""


EnvVars = Annotated[
    list[EnvVar],
    Field(max_length=64, json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]}),
    AfterValidator(unique_names),
]
"""A container's env list: at most 64 variables, names unique (the apiserver refuses a duplicate)."""


class ConfigMapEnvSource(ApiModel):
    """A ConfigMap whose every key becomes a variable."""

    name: ObjectName
    """Name of the ConfigMap."""
    optional: bool | None = None
    """Start the container even when the ConfigMap is missing."""


class SecretEnvSource(ApiModel):
    """A Secret whose every key becomes a variable."""

    name: ObjectName
    """Name of the Secret."""
    optional: bool | None = None
    """Start the container even when the Secret is missing."""


class EnvFromSource(ApiModel):
    """All keys of a ConfigMap or Secret as variables, e.g. a Secret holding HF_TOKEN."""

    rules = (
        exactly_one_rule(
            ("configMapRef", "secretRef"),
            "envFrom[] needs exactly one of envFrom[].configMapRef and envFrom[].secretRef: e.g. {secretRef: {name: hf-token}}",
        ),
    )

    prefix: Annotated[str, StringConstraints(pattern=ENV_PREFIX_PATTERN, min_length=1, max_length=128)] | None = None
    """Prepended to every key to form the variable name, e.g. APP_."""
    config_map_ref: ConfigMapEnvSource | None = None
    """The ConfigMap."""
    secret_ref: SecretEnvSource | None = None
    """The Secret."""


EnvFromSources = Annotated[list[EnvFromSource], Field(max_length=16)]
"""A container's envFrom list: at most 16 Secrets or ConfigMaps."""
