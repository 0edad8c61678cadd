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

One module per topic: values (validated strings and quantities), env, resources, scheduling, security,
policy (PodPolicy), placement, kubernetes_types (the core/v1 namesakes); this package re-exports them all.
"""

from __future__ import annotations

from drafter_operator.api.pod.env import (
    FIELD_PATH_PATTERN,
    HUB_TOKEN_VARIABLES,
    ConfigMapEnvSource,
    ConfigMapKeySelector,
    EnvFromSource,
    EnvFromSources,
    EnvVar,
    EnvVarSource,
    EnvVars,
    ObjectFieldSelector,
    ResourceFieldSelector,
    SecretEnvSource,
    SecretKeySelector,
)
from drafter_operator.api.pod.kubernetes_types import (
    KUBERNETES_TYPES,
    POD_POLICY_FIELDS,
)
from drafter_operator.api.pod.placement import (
    Placement,
    Toleration,
)
from drafter_operator.api.pod.policy import (
    OPERATOR_LABEL_KEYS,
    AnnotationValue,
    PodPolicy,
    PullSecretReference,
    operator_label_key,
)
from drafter_operator.constants import OPERATOR_LABEL_PREFIX
from drafter_operator.api.pod.resources import (
    CONTAINER_RESOURCE_NAMES,
    GPU_RESOURCE,
    ContainerResources,
    ResourceList,
)
from drafter_operator.api.pod.scheduling import (
    Affinity,
    LabelSelector,
    LabelSelectorRequirement,
    NodeAffinity,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodAffinity,
    PodAffinityTerm,
    PodAntiAffinity,
    PreferredSchedulingTerm,
    TopologySpreadConstraint,
    TopologySpreadConstraints,
    WeightedPodAffinityTerm,
)
from drafter_operator.api.pod.security import (
    CAPABILITY_PATTERN,
    ID,
    LOCAL_PROFILE_PATTERN,
    SELINUX_PATTERN,
    SYSCTL_PATTERN,
    AppArmorProfile,
    Capabilities,
    PodSecurityContext,
    SELinuxOptions,
    SeccompProfile,
    SecurityContext,
    Sysctl,
)
from drafter_operator.api.pod.values import (
    CONFIG_KEY_PATTERN,
    ENV_NAME_PATTERN,
    ENV_PREFIX_PATTERN,
    KUBE_QUANTITY_PATTERN,
    LABEL_KEY_MAX_LENGTH,
    LABEL_KEY_PATTERN,
    QUANTITY_BINARY_MAX,
    ConfigKey,
    EnvName,
    KubeQuantity,
    LabelKey,
    NamespaceName,
    cel_label_keys,
    label_key_ok,
    parse_kube_quantity,
    quantity_ok,
    unique_names,
)

__all__ = [
    "Affinity", "AnnotationValue", "AppArmorProfile", "CAPABILITY_PATTERN", "CONFIG_KEY_PATTERN",
    "CONTAINER_RESOURCE_NAMES", "Capabilities", "ConfigKey", "ConfigMapEnvSource", "ConfigMapKeySelector",
    "ContainerResources", "ENV_NAME_PATTERN", "ENV_PREFIX_PATTERN", "EnvFromSource", "EnvFromSources", "EnvName",
    "EnvVar", "EnvVarSource", "EnvVars", "FIELD_PATH_PATTERN", "GPU_RESOURCE", "HUB_TOKEN_VARIABLES", "ID",
    "KUBERNETES_TYPES", "KUBE_QUANTITY_PATTERN", "KubeQuantity", "LABEL_KEY_MAX_LENGTH", "LABEL_KEY_PATTERN",
    "LOCAL_PROFILE_PATTERN", "LabelKey", "LabelSelector", "LabelSelectorRequirement", "NamespaceName",
    "NodeAffinity", "NodeSelector", "NodeSelectorRequirement", "NodeSelectorTerm", "OPERATOR_LABEL_KEYS",
    "OPERATOR_LABEL_PREFIX", "ObjectFieldSelector", "POD_POLICY_FIELDS", "Placement", "PodAffinity",
    "PodAffinityTerm", "PodAntiAffinity", "PodPolicy", "PodSecurityContext", "PreferredSchedulingTerm",
    "PullSecretReference", "QUANTITY_BINARY_MAX", "ResourceFieldSelector", "ResourceList", "SELINUX_PATTERN",
    "SELinuxOptions", "SYSCTL_PATTERN", "SeccompProfile", "SecretEnvSource", "SecretKeySelector", "SecurityContext",
    "Sysctl", "Toleration", "TopologySpreadConstraint", "TopologySpreadConstraints", "WeightedPodAffinityTerm",
    "cel_label_keys", "label_key_ok", "operator_label_key", "parse_kube_quantity", "quantity_ok", "unique_names",
]
