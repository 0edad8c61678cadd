"""The core/v1 type each pod-level model mirrors: same JSON field names and meaning, so `model.to_json()` goes
straight into a pod spec (tests/e2e/test_pod_types_contract.py checks the names against the apiserver)."""

from __future__ import annotations

from drafter_operator.api.common import ApiModel
from drafter_operator.api.pod.env import (
    ConfigMapEnvSource,
    ConfigMapKeySelector,
    EnvFromSource,
    EnvVar,
    EnvVarSource,
    ObjectFieldSelector,
    ResourceFieldSelector,
    SecretEnvSource,
    SecretKeySelector,
)
from drafter_operator.api.pod.placement import Toleration
from drafter_operator.api.pod.policy import PullSecretReference
from drafter_operator.api.pod.resources import ContainerResources
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
    WeightedPodAffinityTerm,
)
from drafter_operator.api.pod.security import (
    AppArmorProfile,
    Capabilities,
    PodSecurityContext,
    SELinuxOptions,
    SeccompProfile,
    SecurityContext,
    Sysctl,
)

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
