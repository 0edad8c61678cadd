"""Kubernetes pod-level types the three kinds pass through to their pods: env, envFrom, container
resources, scheduling (affinity, topology spread), security contexts and pod-level settings.

Each model has the JSON field names and meaning of its core/v1 namesake (see KUBERNETES_TYPES), so
`model.to_json()` goes straight into a pod spec. The models are stricter than Kubernetes where a
stricter rule keeps the rendered pod valid or keeps a secret out of the resource:
- a hub token (HF_TOKEN, HUGGING_FACE_HUB_TOKEN, HUGGINGFACE_HUB_TOKEN) is refused as a literal
  env value: it belongs in a Secret;
- container resources take only cpu, memory and ephemeral-storage: GPUs are the operator's own;
- pod labels must not use the keys the operator selects its pods by;
- every string, list and map is bounded (it bounds the CEL cost in the CRD).
Rules follow the usual two-enforcer scheme of common.Rule (CEL in the CRD, the same check in Python).
"""

from __future__ import annotations

import re
from decimal import ROUND_UP, Decimal, localcontext
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, StringConstraints

from drafter_operator.api.common import (
    DNS_LABEL_PATTERN,
    DNS_SUBDOMAIN_PATTERN,
    LABEL_VALUE_PATTERN,
    ApiModel,
    LabelValue,
    ObjectName,
    Rule,
)

# ---------------------------------------------------------------------------------------------------
# Validated strings.

ENV_NAME_PATTERN = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
EnvName = Annotated[str, StringConstraints(pattern=ENV_NAME_PATTERN, min_length=1, max_length=256)]
"""An environment variable name: letters, digits, '-', '_' and '.', not starting with a digit, e.g. VLLM_LOGGING_LEVEL."""

ENV_PREFIX_PATTERN = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"

# A ConfigMap or Secret key (Kubernetes IsConfigMapKey): at least one character other than '.', so "."
# and ".." are refused as Kubernetes refuses them.
CONFIG_KEY_PATTERN = r"^[-._a-zA-Z0-9]*[-_a-zA-Z0-9][-._a-zA-Z0-9]*$"
ConfigKey = Annotated[str, StringConstraints(pattern=CONFIG_KEY_PATTERN, min_length=1, max_length=253)]
"""A key of a ConfigMap or Secret: letters, digits, '-', '_' and '.'."""

# A label key (Kubernetes qualified name): an optional lowercase DNS-subdomain prefix and '/', then a name
# of at most 63 characters. Kubernetes allows a 253-character prefix beside a 63-character name (317 in
# all); capping the whole key at 255 keeps every prefix within 253 without a second rule.
LABEL_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
LABEL_KEY_MAX_LENGTH = 255
LabelKey = Annotated[str, StringConstraints(pattern=LABEL_KEY_PATTERN, min_length=1, max_length=LABEL_KEY_MAX_LENGTH)]
"""A label key: an optional DNS-subdomain prefix and '/', then up to 63 letters, digits, '-', '_', '.', e.g. topology.kubernetes.io/zone."""
_LABEL_KEY_RE = re.compile(LABEL_KEY_PATTERN)

NamespaceName = Annotated[str, StringConstraints(pattern=DNS_LABEL_PATTERN, min_length=1, max_length=63)]
"""A namespace name (lowercase DNS label)."""

# What the apiserver accepts as a resource quantity (resource.ParseQuantity), restricted to non-negative
# plain decimals: up to 18 digits, an optional fraction of up to 9, then a binary suffix (Ki..Ei), a decimal
# suffix (n, u, m, k, M, G, T, P, E) or a decimal exponent of up to 2 digits (e3, E-2). Kubernetes also
# accepts a sign, ".5", "5.", "e3" (zero) and surrounding blanks; those are refused here, so everything this
# pattern accepts the apiserver reads the same way (tests/e2e/test_pod_types_contract.py checks it).
KUBE_QUANTITY_PATTERN = r"^[0-9]{1,18}(\.[0-9]{1,9})?([eE][-+]?[0-9]{1,2}|[KMGTPE]i|[numkMGTPE])?$"
KubeQuantity = Annotated[str, StringConstraints(pattern=KUBE_QUANTITY_PATTERN, min_length=1, max_length=36)]
"""A Kubernetes quantity written as a string, e.g. "500m", "2", "1.5", "64Gi", "129M", "1e3" (numbers must be quoted in YAML: cpu: "2")."""
_KUBE_QUANTITY_RE = re.compile(KUBE_QUANTITY_PATTERN)

_BINARY_SUFFIXES = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
#: resource.ParseQuantity caps a value with a binary suffix at the largest int64 (other values are unbounded)
#: and rounds a non-zero value up to a whole nano.
QUANTITY_BINARY_MAX = Decimal(2**63 - 1)
_NANO = Decimal("1e-9")


def parse_kube_quantity(value: str) -> Decimal:
    """The value of a KubeQuantity as the apiserver's resource.ParseQuantity (and CEL's quantity()) reads it:
    "500m" -> 0.5, "64Gi" -> 68719476736, "1.5n" -> 2E-9 (rounded up to a whole nano), "8Ei" -> 2^63-1 (a
    binary value is capped at the largest int64).

    Raises ValueError for anything KUBE_QUANTITY_PATTERN refuses. (A Pod's resources are then rounded up to
    a whole milli by the Pod's defaulting; CEL compares the values before that.)
    """
    match = _KUBE_QUANTITY_RE.fullmatch(value) if isinstance(value, str) else None
    if not match:
        raise ValueError(f"invalid quantity {value!r}: use digits with an optional suffix, e.g. '500m', '2', '64Gi'")
    suffix = match.group(2) or ""
    with localcontext() as context:
        context.prec = 160  # every step exact, whatever the digits and the suffix
        number = Decimal(value[: len(value) - len(suffix)])
        if suffix in _BINARY_SUFFIXES:
            amount = number * (Decimal(1024) ** _BINARY_SUFFIXES[suffix])
        elif suffix in _DECIMAL_SUFFIXES:
            amount = number.scaleb(_DECIMAL_SUFFIXES[suffix])
        else:  # a decimal exponent
            amount = number.scaleb(int(suffix[1:]))
        if amount != 0 and amount.as_tuple().exponent < -9:
            amount = amount.quantize(_NANO, rounding=ROUND_UP)
        if suffix in _BINARY_SUFFIXES and amount > QUANTITY_BINARY_MAX:
            amount = QUANTITY_BINARY_MAX
        return amount


def _quantity_ok(value: str) -> bool:
    return bool(_KUBE_QUANTITY_RE.fullmatch(value))


def _label_key_ok(key: str) -> bool:
    return len(key) <= LABEL_KEY_MAX_LENGTH and bool(_LABEL_KEY_RE.fullmatch(key))


def _cel_label_keys(path: str) -> str:
    """CEL: every key of the map at `path` is a label key (absent map: true)."""
    return f"!has({path}) || {path}.all(k, k.size() <= {LABEL_KEY_MAX_LENGTH} && k.matches(r'{LABEL_KEY_PATTERN}'))"


def _unique_names(items: list[Any]) -> list[Any]:
    names = [item.name for item in items]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate is not None:
        raise ValueError(f"Duplicate value: name {duplicate!r}")
    return items


def _unique_spread_keys(items: list[Any]) -> list[Any]:
    keys = [(c.topology_key, c.when_unsatisfiable) for c in items]
    duplicate = next((k for k in keys if keys.count(k) > 1), None)
    if duplicate is not None:
        raise ValueError(f"Duplicate value: topologyKey {duplicate[0]!r} with whenUnsatisfiable {duplicate[1]}")
    return items


# ---------------------------------------------------------------------------------------------------
# Environment.

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


CONTAINER_RESOURCE_NAMES: tuple[str, ...] = ("cpu", "memory", "ephemeral-storage")
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
        Rule(
            cel="[has(self.secretKeyRef), has(self.configMapKeyRef), has(self.fieldRef), has(self.resourceFieldRef)]"
                ".filter(x, x).size() == 1",
            message=(
                "env[].valueFrom needs exactly one of secretKeyRef, configMapKeyRef, fieldRef or resourceFieldRef: "
                "e.g. valueFrom: {secretKeyRef: {name: hf-token, key: token}}"
            ),
            check=lambda s: [s.secret_key_ref, s.config_map_key_ref, s.field_ref, s.resource_field_ref].count(None) == 3,
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
        Rule(
            cel="has(self.value) != has(self.valueFrom)",
            message='env[] needs exactly one of env[].value (may be "") and env[].valueFrom: e.g. {name: LOG_LEVEL, value: debug}',
            check=lambda e: (e.value is None) != (e.value_from is None),
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
    AfterValidator(_unique_names),
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
        Rule(
            cel="has(self.configMapRef) != has(self.secretRef)",
            message="envFrom[] needs exactly one of envFrom[].configMapRef and envFrom[].secretRef: e.g. {secretRef: {name: hf-token}}",
            check=lambda e: (e.config_map_ref is None) != (e.secret_ref is None),
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


# ---------------------------------------------------------------------------------------------------
# Container resources.

GPU_RESOURCE = "nvidia.com/gpu"
_RESOURCE_NAMES_CEL = "[" + ", ".join(f"'{name}'" for name in CONTAINER_RESOURCE_NAMES) + "]"
ResourceList = Annotated[dict[str, KubeQuantity], Field(max_length=4)]


def _limits_not_below_requests(r: ContainerResources) -> bool:
    for name in CONTAINER_RESOURCE_NAMES:
        request, limit = (r.requests or {}).get(name), (r.limits or {}).get(name)
        if request is None or limit is None or not _quantity_ok(request) or not _quantity_ok(limit):
            continue
        if parse_kube_quantity(limit) < parse_kube_quantity(request):
            return False
    return True


class ContainerResources(ApiModel):
    """CPU, memory and ephemeral-storage requests and limits of the container; its GPUs are set by the operator."""

    rules = (
        Rule(
            cel=f"(!has(self.requests) || !('{GPU_RESOURCE}' in self.requests)) && (!has(self.limits) || !('{GPU_RESOURCE}' in self.limits))",
            message=(
                f"resources.requests and resources.limits must not hold {GPU_RESOURCE}: the operator sets the GPUs "
                "from spec.resources.gpusPerReplica (DrafterTraining: spec.resources.gpus)"
            ),
            check=lambda r: GPU_RESOURCE not in (r.requests or {}) and GPU_RESOURCE not in (r.limits or {}),
            reason="FieldValueForbidden",
        ),
        Rule(
            cel=(
                f"(!has(self.requests) || self.requests.all(k, k in {_RESOURCE_NAMES_CEL} || k == '{GPU_RESOURCE}')) && "
                f"(!has(self.limits) || self.limits.all(k, k in {_RESOURCE_NAMES_CEL} || k == '{GPU_RESOURCE}'))"
            ),
            message=(
                "resources.requests and resources.limits take only cpu, memory and ephemeral-storage: "
                'e.g. requests: {cpu: "8", memory: 64Gi}'
            ),
            check=lambda r: all(k in CONTAINER_RESOURCE_NAMES or k == GPU_RESOURCE for k in [*(r.requests or {}), *(r.limits or {})]),
        ),
        Rule(
            cel=(
                f"!has(self.requests) || !has(self.limits) || {_RESOURCE_NAMES_CEL}.all(n, !(n in self.requests) || "
                f"!(n in self.limits) || !self.requests[n].matches(r'{KUBE_QUANTITY_PATTERN}') || "
                f"!self.limits[n].matches(r'{KUBE_QUANTITY_PATTERN}') || "
                "!quantity(self.limits[n]).isLessThan(quantity(self.requests[n])))"
            ),
            message=(
                "resources.limits must not be below resources.requests (cpu, memory, ephemeral-storage): "
                "raise the limit or lower the request"
            ),
            check=_limits_not_below_requests,
            field_path=".limits",
        ),
    )

    requests: ResourceList | None = None
    """Resources the scheduler reserves, e.g. {cpu: "8", memory: 64Gi} (keys cpu, memory, ephemeral-storage)."""
    limits: ResourceList | None = None
    """Most the container may use, e.g. {memory: 128Gi}; none may be below its request."""


# ---------------------------------------------------------------------------------------------------
# Scheduling: node affinity, pod (anti-)affinity, topology spread.

_INTEGER_VALUE_PATTERN = r"^[0-9]{1,18}$"


def _values_rules(field: str, example: str) -> tuple[Rule, Rule]:
    """The two rules every selector requirement shares: In/NotIn list values, Exists/DoesNotExist none.
    ``field`` names the list in messages (e.g. matchExpressions[].values), ``example`` a value."""
    return (
        Rule(
            cel="!(self.operator in ['In', 'NotIn']) || (has(self.values) && self.values.size() > 0)",
            message=f"{field} must not be empty when operator is In or NotIn: e.g. values: [{example}]",
            check=lambda r: r.operator not in ("In", "NotIn") or bool(r.values),
            field_path=".values",
            reason="FieldValueRequired",
        ),
        Rule(
            cel="!(self.operator in ['Exists', 'DoesNotExist']) || !has(self.values) || self.values.size() == 0",
            message=f"{field} must be empty when operator is Exists or DoesNotExist: remove values or use operator In",
            check=lambda r: r.operator not in ("Exists", "DoesNotExist") or not r.values,
            field_path=".values",
            reason="FieldValueForbidden",
        ),
    )


class NodeSelectorRequirement(ApiModel):
    """A condition on one node label (or, in matchFields, on the node's name)."""

    rules = (
        *_values_rules("matchExpressions[].values", "NVIDIA-H200"),
        Rule(
            cel=(
                "!(self.operator in ['Gt', 'Lt']) || (has(self.values) && self.values.size() == 1 "
                f"&& self.values[0].matches(r'{_INTEGER_VALUE_PATTERN}'))"
            ),
            message='matchExpressions[].values must be one integer when operator is Gt or Lt: e.g. values: ["7"]',
            check=lambda r: r.operator not in ("Gt", "Lt") or (
                r.values is not None and len(r.values) == 1 and re.fullmatch(_INTEGER_VALUE_PATTERN, r.values[0]) is not None),
            field_path=".values",
        ),
    )

    key: LabelKey
    """The node label key, e.g. nvidia.com/gpu.product (in matchFields: metadata.name)."""
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    """In, NotIn (values listed), Exists, DoesNotExist (no values), Gt, Lt (one integer value)."""
    values: Annotated[list[LabelValue], Field(max_length=32)] | None = None
    """The values to compare with."""


def _match_fields_ok(term: NodeSelectorTerm) -> bool:
    return all(
        f.key == "metadata.name" and f.operator in ("In", "NotIn") and f.values is not None and len(f.values) == 1
        and re.fullmatch(DNS_SUBDOMAIN_PATTERN, f.values[0]) is not None
        for f in term.match_fields or []
    )


class NodeSelectorTerm(ApiModel):
    """Conditions a node must meet all of."""

    rules = (
        Rule(
            cel="(has(self.matchExpressions) && self.matchExpressions.size() > 0) || (has(self.matchFields) && self.matchFields.size() > 0)",
            message="nodeSelectorTerms[] needs nodeSelectorTerms[].matchExpressions or matchFields: an empty term matches no node",
            check=lambda t: bool(t.match_expressions) or bool(t.match_fields),
            reason="FieldValueRequired",
        ),
        Rule(
            cel=(
                "!has(self.matchFields) || self.matchFields.all(f, f.key == 'metadata.name' && f.operator in ['In', 'NotIn'] "
                f"&& has(f.values) && f.values.size() == 1 && f.values[0].matches(r'{DNS_SUBDOMAIN_PATTERN}'))"
            ),
            message="nodeSelectorTerms[].matchFields may only compare metadata.name, with operator In or NotIn and one node name: e.g. {key: metadata.name, operator: In, values: [gpu-node-1]}",
            check=_match_fields_ok,
            field_path=".matchFields",
        ),
    )

    match_expressions: Annotated[list[NodeSelectorRequirement], Field(max_length=16)] | None = None
    """Conditions on node labels."""
    match_fields: Annotated[list[NodeSelectorRequirement], Field(max_length=4)] | None = None
    """Conditions on node fields (only metadata.name)."""


class NodeSelector(ApiModel):
    """Terms of which a node must match at least one."""

    node_selector_terms: Annotated[list[NodeSelectorTerm], Field(min_length=1, max_length=8)]
    """The terms (ORed)."""


class PreferredSchedulingTerm(ApiModel):
    """A node preference with a weight."""

    weight: Annotated[int, Field(ge=1, le=100)]
    """Weight 1..100 added to the score of a node that matches."""
    preference: NodeSelectorTerm
    """The conditions."""


class NodeAffinity(ApiModel):
    """Which nodes the pods may or prefer to run on."""

    required_during_scheduling_ignored_during_execution: NodeSelector | None = None
    """Nodes the pods must run on."""
    preferred_during_scheduling_ignored_during_execution: Annotated[list[PreferredSchedulingTerm], Field(max_length=8)] | None = None
    """Nodes the pods prefer, by weight."""


class LabelSelectorRequirement(ApiModel):
    """A condition on one label."""

    rules = _values_rules("labelSelector.matchExpressions[].values", "engine")

    key: LabelKey
    """The label key."""
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    """In, NotIn (values listed), Exists or DoesNotExist (no values)."""
    values: Annotated[list[LabelValue], Field(max_length=32)] | None = None
    """The values to compare with."""


class LabelSelector(ApiModel):
    """A label query: every matchLabels pair and every matchExpressions condition must hold."""

    rules = (
        Rule(
            cel=_cel_label_keys("self.matchLabels"),
            message=(
                "labelSelector.matchLabels keys must be label keys: an optional DNS-subdomain prefix and '/', then at most "
                "63 letters, digits, '-', '_' or '.' starting and ending with a letter or digit: e.g. app.kubernetes.io/name"
            ),
            check=lambda s: all(_label_key_ok(k) for k in s.match_labels or {}),
            field_path=".matchLabels",
        ),
    )

    match_labels: Annotated[dict[str, LabelValue], Field(max_length=16)] | None = None
    """Labels that must all be present with these values."""
    match_expressions: Annotated[list[LabelSelectorRequirement], Field(max_length=16)] | None = None
    """Conditions that must all hold."""


def _keys_not_in_selector(keys: list[str] | None, selector: LabelSelector | None) -> bool:
    if not keys or selector is None:
        return True
    taken = set(selector.match_labels or {}) | {e.key for e in selector.match_expressions or []}
    return not taken & set(keys)


_CEL_KEYS_NOT_IN_SELECTOR = (
    "!has(self.matchLabelKeys) || !has(self.labelSelector) || self.matchLabelKeys.all(k, "
    "!(has(self.labelSelector.matchLabels) && k in self.labelSelector.matchLabels) && "
    "!(has(self.labelSelector.matchExpressions) && self.labelSelector.matchExpressions.exists(e, e.key == k)))"
)


class PodAffinityTerm(ApiModel):
    """Pods (by labels, in some namespaces) whose topology domain (node, zone, ...) the pod joins or avoids."""

    rules = (
        Rule(
            cel="has(self.labelSelector) || (!has(self.matchLabelKeys) && !has(self.mismatchLabelKeys))",
            message="podAffinityTerm.matchLabelKeys and mismatchLabelKeys need podAffinityTerm.labelSelector: add a labelSelector or remove them",
            check=lambda t: t.label_selector is not None or (t.match_label_keys is None and t.mismatch_label_keys is None),
            field_path=".labelSelector",
            reason="FieldValueRequired",
        ),
        Rule(
            cel="!has(self.matchLabelKeys) || !has(self.mismatchLabelKeys) || !self.matchLabelKeys.exists(k, k in self.mismatchLabelKeys)",
            message="podAffinityTerm.matchLabelKeys and podAffinityTerm.mismatchLabelKeys must not share a key: keep it in one of them",
            check=lambda t: not set(t.match_label_keys or ()) & set(t.mismatch_label_keys or ()),
            field_path=".matchLabelKeys",
        ),
        Rule(
            cel=_CEL_KEYS_NOT_IN_SELECTOR,
            message="podAffinityTerm.matchLabelKeys must not name a key labelSelector already uses: remove it from one of them",
            check=lambda t: _keys_not_in_selector(t.match_label_keys, t.label_selector),
            field_path=".matchLabelKeys",
        ),
    )

    label_selector: LabelSelector | None = None
    """The pods this term is about; none selects no pod."""
    namespaces: Annotated[list[NamespaceName], Field(max_length=16)] | None = None
    """Namespaces of those pods; with namespaceSelector unset, empty means the pod's own namespace."""
    topology_key: LabelKey
    """Node label whose value is the domain, e.g. kubernetes.io/hostname or topology.kubernetes.io/zone."""
    namespace_selector: LabelSelector | None = None
    """Namespaces (by labels) of those pods, added to namespaces; {} means every namespace."""
    match_label_keys: Annotated[list[LabelKey], Field(max_length=8)] | None = None
    """Label keys whose values are taken from the incoming pod and must match too."""
    mismatch_label_keys: Annotated[list[LabelKey], Field(max_length=8)] | None = None
    """Label keys whose values are taken from the incoming pod and must differ."""


class WeightedPodAffinityTerm(ApiModel):
    """A pod (anti-)affinity preference with a weight."""

    weight: Annotated[int, Field(ge=1, le=100)]
    """Weight 1..100 added to the score of a node that matches."""
    pod_affinity_term: PodAffinityTerm
    """The term."""


class PodAffinity(ApiModel):
    """Run near pods that match."""

    required_during_scheduling_ignored_during_execution: Annotated[list[PodAffinityTerm], Field(max_length=8)] | None = None
    """Terms that must all hold."""
    preferred_during_scheduling_ignored_during_execution: Annotated[list[WeightedPodAffinityTerm], Field(max_length=8)] | None = None
    """Terms preferred, by weight."""


class PodAntiAffinity(ApiModel):
    """Keep away from pods that match, e.g. one engine replica per node."""

    required_during_scheduling_ignored_during_execution: Annotated[list[PodAffinityTerm], Field(max_length=8)] | None = None
    """Terms that must all hold."""
    preferred_during_scheduling_ignored_during_execution: Annotated[list[WeightedPodAffinityTerm], Field(max_length=8)] | None = None
    """Terms preferred, by weight."""


class Affinity(ApiModel):
    """Scheduling constraints: node affinity, pod affinity and pod anti-affinity."""

    node_affinity: NodeAffinity | None = None
    """Which nodes."""
    pod_affinity: PodAffinity | None = None
    """Near which pods."""
    pod_anti_affinity: PodAntiAffinity | None = None
    """Away from which pods."""


class TopologySpreadConstraint(ApiModel):
    """How evenly matching pods spread over a topology (nodes, zones, ...)."""

    rules = (
        Rule(
            cel="!has(self.minDomains) || self.whenUnsatisfiable == 'DoNotSchedule'",
            message="topologySpreadConstraints[].minDomains needs whenUnsatisfiable DoNotSchedule: remove minDomains or set whenUnsatisfiable: DoNotSchedule",
            check=lambda c: c.min_domains is None or c.when_unsatisfiable == "DoNotSchedule",
            field_path=".minDomains",
        ),
        Rule(
            cel="has(self.labelSelector) || !has(self.matchLabelKeys)",
            message="topologySpreadConstraints[].matchLabelKeys needs topologySpreadConstraints[].labelSelector: add a labelSelector or remove matchLabelKeys",
            check=lambda c: c.label_selector is not None or c.match_label_keys is None,
            field_path=".labelSelector",
            reason="FieldValueRequired",
        ),
        Rule(
            cel=_CEL_KEYS_NOT_IN_SELECTOR,
            message="topologySpreadConstraints[].matchLabelKeys must not name a key labelSelector already uses: remove it from one of them",
            check=lambda c: _keys_not_in_selector(c.match_label_keys, c.label_selector),
            field_path=".matchLabelKeys",
        ),
    )

    max_skew: Annotated[int, Field(ge=1, le=1000)]
    """Largest allowed difference in matching pods between two domains (at least 1)."""
    topology_key: LabelKey
    """Node label whose value is the domain, e.g. topology.kubernetes.io/zone."""
    when_unsatisfiable: Literal["DoNotSchedule", "ScheduleAnyway"]
    """DoNotSchedule (keep the pod pending) or ScheduleAnyway (prefer lower skew)."""
    label_selector: LabelSelector | None = None
    """The pods counted."""
    min_domains: Annotated[int, Field(ge=1, le=1000)] | None = None
    """Fewest eligible domains; fewer count as zero pods each (DoNotSchedule only)."""
    node_affinity_policy: Literal["Honor", "Ignore"] | None = None
    """Whether the pod's node affinity limits the domains counted (default Honor)."""
    node_taints_policy: Literal["Honor", "Ignore"] | None = None
    """Whether node taints the pod does not tolerate limit the domains counted (default Ignore)."""
    match_label_keys: Annotated[list[LabelKey], Field(max_length=8)] | None = None
    """Label keys whose values are taken from the incoming pod to narrow the selector, e.g. [pod-template-hash]."""


TopologySpreadConstraints = Annotated[
    list[TopologySpreadConstraint],
    Field(max_length=8, json_schema_extra={"x-kubernetes-list-type": "map",
                                           "x-kubernetes-list-map-keys": ["topologyKey", "whenUnsatisfiable"]}),
    AfterValidator(_unique_spread_keys),
]
"""A pod's topology spread constraints: at most 8, one per (topologyKey, whenUnsatisfiable) as Kubernetes requires."""


# ---------------------------------------------------------------------------------------------------
# Security contexts.

ID = Annotated[int, Field(ge=0, le=2147483647)]
LOCAL_PROFILE_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9._-]*(/[A-Za-z0-9_][A-Za-z0-9._-]*)*$"
CAPABILITY_PATTERN = r"^[A-Za-z][A-Za-z0-9_]*$"
SELINUX_PATTERN = r"^[A-Za-z0-9_.:,-]+$"
SYSCTL_PATTERN = r"^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?$"


def _profile_rules(field: str, what: str) -> tuple[Rule, ...]:
    return (
        Rule(
            cel="self.type == 'Localhost' || !has(self.localhostProfile)",
            message=f"{field}.localhostProfile is only for {field}.type Localhost: remove localhostProfile or set type: Localhost",
            check=lambda p: p.type == "Localhost" or p.localhost_profile is None,
            field_path=".localhostProfile",
            reason="FieldValueForbidden",
        ),
        Rule(
            cel="self.type != 'Localhost' || has(self.localhostProfile)",
            message=f"{field}.type Localhost needs {field}.localhostProfile: the {what} profile file on the node, e.g. profiles/engine.json",
            check=lambda p: p.type != "Localhost" or p.localhost_profile is not None,
            field_path=".localhostProfile",
            reason="FieldValueRequired",
        ),
    )


class SeccompProfile(ApiModel):
    """The seccomp filter of the container (or of every container of the pod)."""

    rules = _profile_rules("seccompProfile", "seccomp")

    type: Literal["RuntimeDefault", "Unconfined", "Localhost"]
    """RuntimeDefault (the container runtime's), Unconfined (none) or Localhost (a file on the node)."""
    localhost_profile: Annotated[str, StringConstraints(pattern=LOCAL_PROFILE_PATTERN, min_length=1, max_length=255)] | None = None
    """With type Localhost: the profile's path relative to the kubelet's seccomp directory."""


class AppArmorProfile(ApiModel):
    """The AppArmor profile of the container (or of every container of the pod)."""

    rules = _profile_rules("appArmorProfile", "AppArmor")

    type: Literal["RuntimeDefault", "Unconfined", "Localhost"]
    """RuntimeDefault (the container runtime's), Unconfined (none) or Localhost (a profile loaded on the node)."""
    localhost_profile: Annotated[str, StringConstraints(pattern=LOCAL_PROFILE_PATTERN, min_length=1, max_length=255)] | None = None
    """With type Localhost: the name of a profile loaded on the node."""


class Capabilities(ApiModel):
    """Linux capabilities added to or dropped from the container runtime's default set."""

    add: Annotated[list[Annotated[str, StringConstraints(pattern=CAPABILITY_PATTERN, max_length=64)]], Field(max_length=64)] | None = None
    """Capabilities to add, e.g. [IPC_LOCK]."""
    drop: Annotated[list[Annotated[str, StringConstraints(pattern=CAPABILITY_PATTERN, max_length=64)]], Field(max_length=64)] | None = None
    """Capabilities to drop, e.g. [ALL]."""


class SELinuxOptions(ApiModel):
    """The SELinux context of the container (or of every container of the pod)."""

    user: Annotated[str, StringConstraints(pattern=SELINUX_PATTERN, max_length=253)] | None = None
    """SELinux user, e.g. system_u."""
    role: Annotated[str, StringConstraints(pattern=SELINUX_PATTERN, max_length=253)] | None = None
    """SELinux role, e.g. system_r."""
    type: Annotated[str, StringConstraints(pattern=SELINUX_PATTERN, max_length=253)] | None = None
    """SELinux type, e.g. container_t."""
    level: Annotated[str, StringConstraints(pattern=SELINUX_PATTERN, max_length=253)] | None = None
    """SELinux level, e.g. s0:c123,c456."""


def _non_root_rule(field: str) -> Rule:
    return Rule(
        cel="!has(self.runAsNonRoot) || !self.runAsNonRoot || !has(self.runAsUser) || self.runAsUser != 0",
        message=f"{field}.runAsNonRoot true contradicts {field}.runAsUser 0 (the kubelet would refuse to start the container): remove one of them",
        check=lambda c: not c.run_as_non_root or c.run_as_user != 0,
        field_path=".runAsUser",
    )


class SecurityContext(ApiModel):
    """Security settings of the container (they override the pod's)."""

    rules = (
        Rule(
            cel="!has(self.allowPrivilegeEscalation) || self.allowPrivilegeEscalation || !has(self.privileged) || !self.privileged",
            message=(
                "securityContext.allowPrivilegeEscalation false contradicts securityContext.privileged true "
                "(Kubernetes refuses both): remove one of them"
            ),
            check=lambda c: c.allow_privilege_escalation is not False or c.privileged is not True,
            field_path=".allowPrivilegeEscalation",
        ),
        Rule(
            cel=(
                "!has(self.allowPrivilegeEscalation) || self.allowPrivilegeEscalation || !has(self.capabilities) || "
                "!has(self.capabilities.add) || !self.capabilities.add.exists(c, c in ['CAP_SYS_ADMIN', 'SYS_ADMIN'])"
            ),
            message=(
                "securityContext.allowPrivilegeEscalation false contradicts securityContext.capabilities.add SYS_ADMIN "
                "(Kubernetes refuses both): remove one of them"
            ),
            check=lambda c: c.allow_privilege_escalation is not False or c.capabilities is None or not any(
                cap in ("CAP_SYS_ADMIN", "SYS_ADMIN") for cap in c.capabilities.add or ()),
            field_path=".allowPrivilegeEscalation",
        ),
        _non_root_rule("securityContext"),
    )

    run_as_user: ID | None = None
    """UID the container's process runs as, e.g. 1000."""
    run_as_group: ID | None = None
    """GID the container's process runs as."""
    run_as_non_root: bool | None = None
    """Refuse to start the container as root (UID 0)."""
    privileged: bool | None = None
    """Run with all host devices and capabilities (rarely needed; GPUs do not need it)."""
    allow_privilege_escalation: bool | None = None
    """Whether a process may gain more privileges than its parent (setuid); false with privileged is refused."""
    read_only_root_filesystem: bool | None = None
    """Mount the container's root filesystem read-only."""
    capabilities: Capabilities | None = None
    """Capabilities to add or drop."""
    seccomp_profile: SeccompProfile | None = None
    """The seccomp filter."""
    app_armor_profile: AppArmorProfile | None = None
    """The AppArmor profile."""
    proc_mount: Literal["Default"] | None = None
    """/proc masking: only Default (Unmasked needs a pod with hostUsers false, which these pods are not)."""
    se_linux_options: SELinuxOptions | None = None
    """The SELinux context."""


class Sysctl(ApiModel):
    """A namespaced kernel parameter set for the pod."""

    name: Annotated[str, StringConstraints(pattern=SYSCTL_PATTERN, min_length=1, max_length=253)]
    """Parameter name, e.g. net.ipv4.tcp_keepalive_time (the kubelet allows only safe ones unless configured)."""
    value: Annotated[str, StringConstraints(max_length=256)]
    """Value to set."""


class PodSecurityContext(ApiModel):
    """Security settings of every container of the pod, and of its volumes."""

    rules = (_non_root_rule("securityContext"),)

    run_as_user: ID | None = None
    """UID every container's process runs as, e.g. 1000."""
    run_as_group: ID | None = None
    """GID every container's process runs as."""
    run_as_non_root: bool | None = None
    """Refuse to start any container as root (UID 0)."""
    fs_group: ID | None = None
    """GID that owns supporting volumes and is added to every container's groups."""
    fs_group_change_policy: Literal["OnRootMismatch", "Always"] | None = None
    """When volume ownership is changed to fsGroup: OnRootMismatch (faster on big model volumes) or Always."""
    supplemental_groups: Annotated[list[ID], Field(max_length=32)] | None = None
    """Extra GIDs of every container's process."""
    seccomp_profile: SeccompProfile | None = None
    """The seccomp filter of every container."""
    app_armor_profile: AppArmorProfile | None = None
    """The AppArmor profile of every container."""
    sysctls: Annotated[
        list[Sysctl],
        Field(max_length=16, json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]}),
        AfterValidator(_unique_names),
    ] | None = None
    """Namespaced kernel parameters, names unique."""
    se_linux_options: SELinuxOptions | None = None
    """The SELinux context of every container."""


# ---------------------------------------------------------------------------------------------------
# Pod-level settings.

#: Label keys the operator sets on its pods (resources/labels.py, resources/benchmark_job.py) and selects
#: them by, and the prefix of its own keys: users may not set them.
OPERATOR_LABEL_PREFIX = "drafter.dev/"
OPERATOR_LABEL_KEYS: tuple[str, ...] = (
    "app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "app.kubernetes.io/component",
)
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
            cel=_cel_label_keys("self.labels"),
            message=(
                "labels keys must be label keys: an optional DNS-subdomain prefix and '/', then at most 63 letters, "
                "digits, '-', '_' or '.' starting and ending with a letter or digit: e.g. example.com/team"
            ),
            check=lambda p: all(_label_key_ok(k) for k in p.labels or {}),
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
            cel=_cel_label_keys("self.annotations"),
            message=(
                "annotations keys must be label keys: an optional DNS-subdomain prefix and '/', then at most 63 letters, "
                "digits, '-', '_' or '.' starting and ending with a letter or digit: e.g. example.com/owner"
            ),
            check=lambda p: all(_label_key_ok(k) for k in p.annotations or {}),
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


# ---------------------------------------------------------------------------------------------------
# Placement: where the pods may run.

class Toleration(ApiModel):
    """A toleration for a node taint (same meaning as in a Pod spec)."""

    rules = (
        Rule(
            cel="self.operator != 'Exists' || !has(self.value)",
            message="tolerations[].value must be empty when operator is Exists: remove value or use operator Equal",
            check=lambda t: t.operator != "Exists" or t.value is None,
            field_path=".value",
            reason="FieldValueForbidden",
        ),
        Rule(
            cel="!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
            message="tolerations[].tolerationSeconds applies only to effect NoExecute: set effect: NoExecute or remove tolerationSeconds",
            check=lambda t: t.toleration_seconds is None or t.effect == "NoExecute",
            field_path=".tolerationSeconds",
        ),
    )

    key: Annotated[str, StringConstraints(max_length=317)] | None = None
    """Taint key to tolerate; empty with operator Exists tolerates every taint."""
    operator: Literal["Exists", "Equal"] = "Equal"
    """Equal (key and value must match) or Exists (any value)."""
    value: LabelValue | None = None
    """Taint value to match with operator Equal."""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    """Taint effect to match; empty matches all effects."""
    toleration_seconds: Annotated[int, Field(ge=0, le=31536000)] | None = None
    """With effect NoExecute: how long the pod stays bound after the taint appears."""


class Placement(ApiModel):
    """Where the pods may run: the GPU product, node labels and tolerations."""

    rules = (
        Rule(
            cel="!has(self.gpuProduct) || !has(self.nodeSelector) || !('nvidia.com/gpu.product' in self.nodeSelector)",
            message="placement.gpuProduct and placement.nodeSelector['nvidia.com/gpu.product'] set the same label: keep only one",
            check=lambda p: p.gpu_product is None or not p.node_selector or "nvidia.com/gpu.product" not in p.node_selector,
            field_path=".gpuProduct",
        ),
    )

    gpu_product: Annotated[str, StringConstraints(pattern=LABEL_VALUE_PATTERN, min_length=1, max_length=63)] | None = None
    """Required value of the node label nvidia.com/gpu.product, e.g. "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"."""
    node_selector: Annotated[dict[str, LabelValue], Field(max_length=32)] | None = None
    """Node labels the pods require (label key -> value)."""
    tolerations: Annotated[list[Toleration], Field(max_length=32)] | None = None
    """Taints the pods tolerate, e.g. the nvidia.com/gpu NoSchedule taint of GPU nodes."""
    affinity: Affinity | None = None
    """Node affinity and pod (anti-)affinity, as in a Pod spec, e.g. keep replicas on different racks."""
    topology_spread_constraints: TopologySpreadConstraints | None = None
    """How the pods spread over zones or nodes, as in a Pod spec."""


#: The core/v1 type each model mirrors (same JSON field names and meaning); PodPolicy spreads over ObjectMeta,
#: PodSpec and Container (see PodPolicy.pod_metadata and pod_spec).
KUBERNETES_TYPES: dict[type[ApiModel], str] = {
    SecretKeySelector: "io.k8s.api.core.v1.SecretKeySelector",
    ConfigMapKeySelector: "io.k8s.api.core.v1.ConfigMapKeySelector",
    ObjectFieldSelector: "io.k8s.api.core.v1.ObjectFieldSelector",
    ResourceFieldSelector: "io.k8s.api.core.v1.ResourceFieldSelector",
    EnvVarSource: "io.k8s.api.core.v1.EnvVarSource",
    EnvVar: "io.k8s.api.core.v1.EnvVar",
    ConfigMapEnvSource: "io.k8s.api.core.v1.ConfigMapEnvSource",
    SecretEnvSource: "io.k8s.api.core.v1.SecretEnvSource",
    EnvFromSource: "io.k8s.api.core.v1.EnvFromSource",
    ContainerResources: "io.k8s.api.core.v1.ResourceRequirements",
    NodeSelectorRequirement: "io.k8s.api.core.v1.NodeSelectorRequirement",
    NodeSelectorTerm: "io.k8s.api.core.v1.NodeSelectorTerm",
    NodeSelector: "io.k8s.api.core.v1.NodeSelector",
    PreferredSchedulingTerm: "io.k8s.api.core.v1.PreferredSchedulingTerm",
    NodeAffinity: "io.k8s.api.core.v1.NodeAffinity",
    LabelSelectorRequirement: "io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelectorRequirement",
    LabelSelector: "io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector",
    PodAffinityTerm: "io.k8s.api.core.v1.PodAffinityTerm",
    WeightedPodAffinityTerm: "io.k8s.api.core.v1.WeightedPodAffinityTerm",
    PodAffinity: "io.k8s.api.core.v1.PodAffinity",
    PodAntiAffinity: "io.k8s.api.core.v1.PodAntiAffinity",
    Affinity: "io.k8s.api.core.v1.Affinity",
    TopologySpreadConstraint: "io.k8s.api.core.v1.TopologySpreadConstraint",
    SeccompProfile: "io.k8s.api.core.v1.SeccompProfile",
    AppArmorProfile: "io.k8s.api.core.v1.AppArmorProfile",
    Capabilities: "io.k8s.api.core.v1.Capabilities",
    SELinuxOptions: "io.k8s.api.core.v1.SELinuxOptions",
    SecurityContext: "io.k8s.api.core.v1.SecurityContext",
    Sysctl: "io.k8s.api.core.v1.Sysctl",
    PodSecurityContext: "io.k8s.api.core.v1.PodSecurityContext",
    PullSecretReference: "io.k8s.api.core.v1.LocalObjectReference",
    Toleration: "io.k8s.api.core.v1.Toleration",
}

#: Where each PodPolicy field goes in a Pod: (core/v1 type, its field).
POD_POLICY_FIELDS: dict[str, tuple[str, str]] = {
    "labels": ("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "labels"),
    "annotations": ("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "annotations"),
    "serviceAccountName": ("io.k8s.api.core.v1.PodSpec", "serviceAccountName"),
    "imagePullSecrets": ("io.k8s.api.core.v1.PodSpec", "imagePullSecrets"),
    "priorityClassName": ("io.k8s.api.core.v1.PodSpec", "priorityClassName"),
    "runtimeClassName": ("io.k8s.api.core.v1.PodSpec", "runtimeClassName"),
    "securityContext": ("io.k8s.api.core.v1.PodSpec", "securityContext"),
    "containerSecurityContext": ("io.k8s.api.core.v1.Container", "securityContext"),
}
