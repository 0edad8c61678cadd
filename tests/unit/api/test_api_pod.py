"""The pod-level types of api/pod/: Kubernetes JSON round trips, every rule, quantities, the generated schema.

The apiserver side (the same rules as CEL, field names against the apiserver's OpenAPI, rendered Pods) is
tests/e2e/test_pod_types_contract.py, which also proves the `apiserver` column of QUANTITY_SAMPLES.
"""

from __future__ import annotations

import inspect
import re
from decimal import ROUND_UP, Decimal, localcontext

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes.utils import parse_quantity
from pydantic import BaseModel, ValidationError

from drafter_operator.api import pod
from drafter_operator.api.common import ApiModel
from drafter_operator.api.pod import (
    KUBE_QUANTITY_PATTERN,
    KUBERNETES_TYPES,
    POD_POLICY_FIELDS,
    Affinity,
    AppArmorProfile,
    ContainerResources,
    EnvFromSource,
    EnvVar,
    EnvVarSource,
    LabelSelector,
    LabelSelectorRequirement,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodAffinityTerm,
    PodPolicy,
    PodSecurityContext,
    ResourceFieldSelector,
    SeccompProfile,
    SecurityContext,
    TopologySpreadConstraint,
    parse_kube_quantity,
)
from drafter_operator.api.schema import iter_nodes, model_schema, structural_problems
from drafter_operator.resources.benchmark_job import benchmark_labels
from drafter_operator.resources.labels import revision_labels, serving_labels
from tests.support.quantities import QUANTITY_SAMPLES, _exact

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# JSON Schema keywords a CRD's structural schema cannot carry (api/schema.py refuses a model that needs one).
UNSUPPORTED = {"oneOf", "not", "exclusiveMinimum", "exclusiveMaximum", "const_", "prefixItems", "uniqueItems",
               "patternProperties", "propertyNames", "if", "then", "else", "dependentRequired"}
# PodPolicy and Placement mirror no single core/v1 type: they spread over ObjectMeta and PodSpec.
MODELS: list[type[ApiModel]] = [*KUBERNETES_TYPES, PodPolicy, pod.Placement]


def _refusal(model: type[BaseModel], data) -> str | None:
    """None when the model accepts `data`, else the error text."""
    try:
        model.model_validate(data)
        return None
    except ValidationError as error:
        return str(error)


def _pod_models() -> list[type]:
    return [obj for _, obj in inspect.getmembers(pod, inspect.isclass)
            if issubclass(obj, ApiModel) and obj.__module__.startswith(pod.__name__ + ".")]


# --- round trips: Kubernetes JSON in, the same JSON out ----------------------------------------------------------

K8S_EXAMPLES: list[tuple[type[ApiModel], dict]] = [
    (EnvVar, {"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"}),
    (EnvVar, {"name": "EMPTY", "value": ""}),
    (EnvVar, {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token", "optional": False}}}),
    (EnvVar, {"name": "CFG", "valueFrom": {"configMapKeyRef": {"name": "engine", "key": "cfg.json", "optional": True}}}),
    (EnvVar, {"name": "POD", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}}),
    (EnvVar, {"name": "TEAM", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['example.com/team']"}}}),
    (EnvVar, {"name": "MEM", "valueFrom": {"resourceFieldRef": {"containerName": "engine", "resource": "limits.memory", "divisor": "1Mi"}}}),
    (EnvVar, {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu", "divisor": "1m"}}}),
    (EnvFromSource, {"prefix": "HUB_", "secretRef": {"name": "hub", "optional": True}}),
    (EnvFromSource, {"configMapRef": {"name": "engine-env"}}),
    (ContainerResources, {"requests": {"cpu": "500m", "memory": "64Gi", "ephemeral-storage": "10Gi"}, "limits": {"cpu": "2", "memory": "128Gi"}}),
    (ContainerResources, {"limits": {"cpu": "1.5", "memory": "1e9"}}),
    (Affinity, {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-H200"]},
                                      {"key": "nvidia.com/gpu.count", "operator": "Gt", "values": ["3"]},
                                      {"key": "example.com/draining", "operator": "DoesNotExist"}]},
                {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["node-1"]}]}]},
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "preference": {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a", "b"]}]}}]},
        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": "kubernetes.io/hostname", "namespaces": ["models"]}]},
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "podAffinityTerm": {
                "labelSelector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]}, "topologyKey": "kubernetes.io/hostname",
                "namespaceSelector": {}, "matchLabelKeys": ["example.com/revision"], "mismatchLabelKeys": ["example.com/tenant"]}}]},
    }),
    (TopologySpreadConstraint, {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
                                "labelSelector": {"matchLabels": {"app": "engine"}}, "minDomains": 3, "nodeAffinityPolicy": "Honor",
                                "nodeTaintsPolicy": "Ignore", "matchLabelKeys": ["pod-template-hash"]}),
    (SecurityContext, {"runAsUser": 1000, "runAsGroup": 1000, "runAsNonRoot": True, "privileged": False,
                       "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                       "capabilities": {"add": ["IPC_LOCK"], "drop": ["ALL"]},
                       "seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/engine.json"},
                       "appArmorProfile": {"type": "RuntimeDefault"}, "procMount": "Default",
                       "seLinuxOptions": {"user": "system_u", "role": "system_r", "type": "container_t", "level": "s0:c1,c2"}}),
    (PodSecurityContext, {"runAsUser": 0, "runAsGroup": 0, "runAsNonRoot": False, "fsGroup": 2000, "fsGroupChangePolicy": "OnRootMismatch",
                          "supplementalGroups": [44, 107], "seccompProfile": {"type": "RuntimeDefault"},
                          "appArmorProfile": {"type": "Localhost", "localhostProfile": "k8s-engine"},
                          "sysctls": [{"name": "net.ipv4.tcp_keepalive_time", "value": "600"}, {"name": "kernel/shm_rmid_forced", "value": "1"}],
                          "seLinuxOptions": {"level": "s0"}}),
    (PodPolicy, {"labels": {"example.com/team": "inference", "app.kubernetes.io/part-of": "kimi", "tier": ""},
                 "annotations": {"example.com/owner": "ML platform <ml@example.com>", "Note": "x" * 4096},
                 "serviceAccountName": "engine", "imagePullSecrets": [{"name": "regcred"}, {"name": "mirror.v2"}],
                 "priorityClassName": "serving-high", "runtimeClassName": "nvidia",
                 "securityContext": {"runAsNonRoot": True, "runAsUser": 1000},
                 "containerSecurityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}),
]


@pytest.mark.parametrize("model, data", K8S_EXAMPLES, ids=[f"{m.__name__}-{i}" for i, (m, _) in enumerate(K8S_EXAMPLES)])
def test_kubernetes_json_round_trips_exactly(model, data):
    parsed = model.model_validate(data)
    assert parsed.to_json() == data
    assert model.model_validate(parsed.to_json()) == parsed


def test_python_names_give_kubernetes_json():
    env = EnvVar(name="HF_TOKEN", value_from=EnvVarSource(secret_key_ref={"name": "hf", "key": "token"}))
    assert env.to_json() == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}
    spread = TopologySpreadConstraint(max_skew=2, topology_key="kubernetes.io/hostname", when_unsatisfiable="ScheduleAnyway")
    assert spread.to_json() == {"maxSkew": 2, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway"}
    context = SecurityContext(se_linux_options={"type": "spc_t"}, app_armor_profile={"type": "Unconfined"})
    assert context.to_json() == {"seLinuxOptions": {"type": "spc_t"}, "appArmorProfile": {"type": "Unconfined"}}


def test_pod_policy_splits_into_pod_metadata_and_pod_spec():
    data = dict(next(d for m, d in K8S_EXAMPLES if m is PodPolicy))
    policy = PodPolicy.model_validate(data)
    assert policy.pod_metadata() == {"labels": data["labels"], "annotations": data["annotations"]}
    assert policy.pod_spec() == {k: data[k] for k in ("serviceAccountName", "imagePullSecrets", "priorityClassName",
                                                       "runtimeClassName", "securityContext")}
    assert PodPolicy().pod_metadata() == {} and PodPolicy().pod_spec() == {}
    assert PodPolicy(runtime_class_name="nvidia").pod_spec() == {"runtimeClassName": "nvidia"}


# --- every rule refuses what it should, naming the field -------------------------------------------------------------

_NODE_EXPR = lambda **e: {"matchExpressions": [{"key": "example.com/x", **e}]}  # noqa: E731
_SPREAD = {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}

# (model, data, a part of the message, the field it must name)
REFUSALS: list[tuple[type[BaseModel], dict, str, str]] = [
    (EnvVar, {"name": "HF_TOKEN", "value": "hf_secret"}, "must not hold a hub token", "env[].value"),
    (EnvVar, {"name": "HUGGING_FACE_HUB_TOKEN", "value": ""}, "must not hold a hub token", "env[].value"),
    (EnvVar, {"name": "HUGGINGFACE_HUB_TOKEN", "value": "x"}, "valueFrom.secretKeyRef or envFrom[].secretRef", "env[].value"),
    (EnvVar, {"name": "A"}, "needs exactly one of env[].value", "env[].valueFrom"),
    (EnvVar, {"name": "A", "value": "", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}}, "needs exactly one of", "env[].value"),
    (EnvVarSource, {}, "needs exactly one of secretKeyRef, configMapKeyRef, fieldRef or resourceFieldRef", "env[].valueFrom"),
    (EnvVarSource, {"fieldRef": {"fieldPath": "metadata.uid"}, "configMapKeyRef": {"name": "a", "key": "b"}}, "needs exactly one", "valueFrom"),
    (ResourceFieldSelector, {"resource": "limits.cpu", "divisor": "1Mi"}, "must be 1 or 1m for cpu", "resourceFieldRef.divisor"),
    (ResourceFieldSelector, {"resource": "requests.memory", "divisor": "1m"}, "1Ei for memory", "resourceFieldRef.divisor"),
    (EnvFromSource, {"prefix": "A_"}, "needs exactly one of envFrom[].configMapRef and envFrom[].secretRef", "envFrom[].secretRef"),
    (EnvFromSource, {"configMapRef": {"name": "a"}, "secretRef": {"name": "b"}}, "needs exactly one", "envFrom[].configMapRef"),
    (ContainerResources, {"requests": {"nvidia.com/gpu": "8"}}, "spec.resources.gpusPerReplica", "resources.requests"),
    (pod.Placement, {"gpuProduct": "NVIDIA-B200", "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H200"}},
     "set the same label: keep only one", "placement.gpuProduct"),
    (pod.Toleration, {"key": "nvidia.com/gpu", "operator": "Exists", "value": "present"},
     "must be empty when operator is Exists", "tolerations[].value"),
    (pod.Toleration, {"key": "a", "value": "b", "effect": "NoSchedule", "tolerationSeconds": 30},
     "applies only to effect NoExecute", "tolerations[].tolerationSeconds"),
    (ContainerResources, {"limits": {"nvidia.com/gpu": "1"}}, "must not hold nvidia.com/gpu", "resources.limits"),
    (ContainerResources, {"requests": {"hugepages-2Mi": "1Gi"}}, "take only cpu, memory and ephemeral-storage", "resources.requests"),
    (ContainerResources, {"limits": {"example.com/fpga": "1"}}, "take only cpu, memory and ephemeral-storage", "resources.limits"),
    (ContainerResources, {"requests": {"cpu": "2"}, "limits": {"cpu": "1999m"}}, "must not be below", "resources.limits"),
    (ContainerResources, {"requests": {"memory": "1025Mi"}, "limits": {"memory": "1Gi"}}, "raise the limit or lower the request", "resources.requests"),
    (ContainerResources, {"requests": {"ephemeral-storage": "1e10"}, "limits": {"ephemeral-storage": "9G"}}, "must not be below", "resources.limits"),
    (NodeSelectorRequirement, {"key": "a", "operator": "In"}, "must not be empty when operator is In", "matchExpressions[].values"),
    (NodeSelectorRequirement, {"key": "a", "operator": "NotIn", "values": []}, "must not be empty", "matchExpressions[].values"),
    (NodeSelectorRequirement, {"key": "a", "operator": "Exists", "values": ["x"]}, "must be empty when operator is Exists", "matchExpressions[].values"),
    (NodeSelectorRequirement, {"key": "a", "operator": "DoesNotExist", "values": ["x"]}, "must be empty", "matchExpressions[].values"),
    (NodeSelectorRequirement, {"key": "a", "operator": "Gt"}, "must be one integer", "matchExpressions[].values"),
    (NodeSelectorRequirement, {"key": "a", "operator": "Lt", "values": ["1", "2"]}, "must be one integer", "matchExpressions[].values"),
    (NodeSelectorRequirement, {"key": "a", "operator": "Gt", "values": ["1.5"]}, "must be one integer", "matchExpressions[].values"),
    (NodeSelectorTerm, {}, "an empty term matches no node", "nodeSelectorTerms[].matchExpressions"),
    (NodeSelectorTerm, {"matchExpressions": [], "matchFields": []}, "an empty term matches no node", "matchFields"),
    (NodeSelectorTerm, {"matchFields": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["a"]}]},
     "may only compare metadata.name", "nodeSelectorTerms[].matchFields"),
    (NodeSelectorTerm, {"matchFields": [{"key": "metadata.name", "operator": "Exists"}]}, "may only compare metadata.name", "matchFields"),
    (NodeSelectorTerm, {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["Node_1"]}]}, "one node name", "matchFields"),
    (LabelSelectorRequirement, {"key": "a", "operator": "In"}, "must not be empty when operator is In", "labelSelector.matchExpressions[].values"),
    (LabelSelectorRequirement, {"key": "a", "operator": "Exists", "values": ["x"]}, "must be empty when operator is Exists", "matchExpressions[].values"),
    (LabelSelector, {"matchLabels": {"-a": "x"}}, "keys must be label keys", "labelSelector.matchLabels"),
    (LabelSelector, {"matchLabels": {"Example.com/a": "x"}}, "keys must be label keys", "labelSelector.matchLabels"),
    (PodAffinityTerm, {"topologyKey": "zone", "matchLabelKeys": ["a"]}, "need podAffinityTerm.labelSelector", "podAffinityTerm.labelSelector"),
    (PodAffinityTerm, {"topologyKey": "zone", "mismatchLabelKeys": ["a"]}, "need podAffinityTerm.labelSelector", "podAffinityTerm.labelSelector"),
    (PodAffinityTerm, {"topologyKey": "zone", "labelSelector": {}, "matchLabelKeys": ["a", "b"], "mismatchLabelKeys": ["b"]},
     "must not share a key", "podAffinityTerm.mismatchLabelKeys"),
    (PodAffinityTerm, {"topologyKey": "zone", "labelSelector": {"matchLabels": {"a": "1"}}, "matchLabelKeys": ["a"]},
     "must not name a key labelSelector already uses", "podAffinityTerm.matchLabelKeys"),
    (PodAffinityTerm, {"topologyKey": "zone", "labelSelector": {"matchExpressions": [{"key": "a", "operator": "Exists"}]}, "matchLabelKeys": ["a"]},
     "must not name a key labelSelector already uses", "podAffinityTerm.matchLabelKeys"),
    (TopologySpreadConstraint, {**_SPREAD, "whenUnsatisfiable": "ScheduleAnyway", "minDomains": 2},
     "needs whenUnsatisfiable DoNotSchedule", "topologySpreadConstraints[].minDomains"),
    (TopologySpreadConstraint, {**_SPREAD, "matchLabelKeys": ["pod-template-hash"]}, "needs topologySpreadConstraints[].labelSelector",
     "topologySpreadConstraints[].matchLabelKeys"),
    (TopologySpreadConstraint, {**_SPREAD, "labelSelector": {"matchLabels": {"h": "1"}}, "matchLabelKeys": ["h"]},
     "must not name a key labelSelector already uses", "topologySpreadConstraints[].matchLabelKeys"),
    (SecurityContext, {"privileged": True, "allowPrivilegeEscalation": False}, "contradicts securityContext.privileged true",
     "securityContext.allowPrivilegeEscalation"),
    (SecurityContext, {"capabilities": {"add": ["SYS_ADMIN"]}, "allowPrivilegeEscalation": False}, "capabilities.add SYS_ADMIN",
     "securityContext.allowPrivilegeEscalation"),
    (SecurityContext, {"capabilities": {"add": ["CAP_SYS_ADMIN"]}, "allowPrivilegeEscalation": False}, "Kubernetes refuses both",
     "securityContext.capabilities.add"),
    (SecurityContext, {"runAsNonRoot": True, "runAsUser": 0}, "runAsNonRoot true contradicts", "securityContext.runAsUser"),
    (PodSecurityContext, {"runAsNonRoot": True, "runAsUser": 0}, "the kubelet would refuse to start", "securityContext.runAsNonRoot"),
    (SeccompProfile, {"type": "Localhost"}, "Localhost needs seccompProfile.localhostProfile", "seccompProfile.type"),
    (SeccompProfile, {"type": "Unconfined", "localhostProfile": "a.json"}, "is only for seccompProfile.type Localhost", "seccompProfile.localhostProfile"),
    (AppArmorProfile, {"type": "Localhost"}, "Localhost needs appArmorProfile.localhostProfile", "appArmorProfile.type"),
    (AppArmorProfile, {"type": "RuntimeDefault", "localhostProfile": "p"}, "is only for appArmorProfile.type Localhost", "appArmorProfile.localhostProfile"),
    (PodPolicy, {"labels": {"drafter.dev/serving": "x"}}, "must not use the operator's keys", "labels"),
    (PodPolicy, {"labels": {"drafter.dev/anything-new": "x"}}, "prefix drafter.dev/", "labels"),
    (PodPolicy, {"labels": {"app.kubernetes.io/name": "x"}}, "it selects its pods by them", "labels"),
    (PodPolicy, {"labels": {"app.kubernetes.io/instance": "x"}}, "choose another key", "labels"),
    (PodPolicy, {"labels": {"app.kubernetes.io/managed-by": "helm"}}, "must not use the operator's keys", "labels"),
    (PodPolicy, {"labels": {"app.kubernetes.io/component": "x"}}, "must not use the operator's keys", "labels"),
    (PodPolicy, {"labels": {"a/b/c": "x"}}, "labels keys must be label keys", "labels"),
    (PodPolicy, {"labels": {"example.com/" + "a" * 64: "x"}}, "labels keys must be label keys", "labels"),
    (PodPolicy, {"annotations": {"has space": "x"}}, "annotations keys must be label keys", "annotations"),
    (PodPolicy, {"annotations": {"example.com/": "x"}}, "annotations keys must be label keys", "annotations"),
]


@pytest.mark.parametrize("model, data, message, field", REFUSALS, ids=[f"{m.__name__}-{i}" for i, (m, *_) in enumerate(REFUSALS)])
def test_each_rule_refuses_naming_the_field(model, data, message, field):
    error = _refusal(model, data)
    assert error is not None, f"{model.__name__} accepted {data}"
    assert message in error, error
    assert field in error, f"{field} not named in:\n{error}"


def test_every_rule_has_a_refusal_case():
    tested = {(m, rule.message) for m, data, message, _ in REFUSALS for rule in m.rules if message in rule.message}
    missing = [(m.__name__, rule.message) for m in _pod_models() for rule in m.rules if (m, rule.message) not in tested]
    assert not missing, missing


def test_every_rule_python_side_runs_on_a_minimal_valid_object():
    """A rule's check must pass on an object that sets nothing it looks at (no AttributeError, no false refusal)."""
    for model, data in [(EnvVar, {"name": "A", "value": "1"}), (EnvVarSource, {"fieldRef": {"fieldPath": "metadata.name"}}),
                        (ContainerResources, {}), (NodeSelectorRequirement, {"key": "a", "operator": "Exists"}),
                        (NodeSelectorTerm, {"matchExpressions": [{"key": "a", "operator": "Exists"}]}), (LabelSelector, {}),
                        (PodAffinityTerm, {"topologyKey": "zone"}), (TopologySpreadConstraint, _SPREAD), (SecurityContext, {}),
                        (PodSecurityContext, {}), (SeccompProfile, {"type": "RuntimeDefault"}), (PodPolicy, {})]:
        assert _refusal(model, data) is None, (model, data)


@pytest.mark.parametrize("key", sorted({*serving_labels("s"), *revision_labels("s", "r"), *benchmark_labels("b")}))
def test_every_label_key_the_operator_sets_is_refused(key):
    error = _refusal(PodPolicy, {"labels": {key: "x"}})
    assert error is not None and "must not use the operator's keys" in error


@pytest.mark.parametrize("key", ["app.kubernetes.io/part-of", "app.kubernetes.io/version", "team", "example.com/drafter.dev",
                                 "drafter.dev", "sub.drafter.dev/x", "app", "kubernetes.io/name"])
def test_other_label_keys_are_accepted(key):
    assert _refusal(PodPolicy, {"labels": {key: "x"}, "annotations": {key: "y"}}) is None


@pytest.mark.parametrize("data, duplicate", [
    ([{"name": "A", "value": "1"}, {"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}], "A"),
])
def test_env_names_are_unique(data, duplicate):
    from pydantic import TypeAdapter

    with pytest.raises(ValidationError, match=f"Duplicate value: name '{duplicate}'"):
        TypeAdapter(pod.EnvVars).validate_python(data)
    assert len(TypeAdapter(pod.EnvVars).validate_python(data[:1])) == 1


def test_spread_constraints_and_sysctls_are_unique_by_their_keys():
    from pydantic import TypeAdapter

    spreads = TypeAdapter(pod.TopologySpreadConstraints)
    spreads.validate_python([_SPREAD, {**_SPREAD, "whenUnsatisfiable": "ScheduleAnyway"}])
    with pytest.raises(ValidationError, match="Duplicate value: topologyKey 'zone' with whenUnsatisfiable DoNotSchedule"):
        spreads.validate_python([_SPREAD, {**_SPREAD, "maxSkew": 3}])
    with pytest.raises(ValidationError, match="Duplicate value: name 'kernel.sem'"):
        PodSecurityContext.model_validate({"sysctls": [{"name": "kernel.sem", "value": "1"}, {"name": "kernel.sem", "value": "2"}]})


@pytest.mark.parametrize("model, data", [
    (EnvVar, {"name": "1ABC", "value": "x"}), (EnvVar, {"name": "A=B", "value": "x"}), (EnvVar, {"name": "", "value": "x"}),
    (EnvVar, {"name": "A" * 257, "value": "x"}), (EnvVar, {"name": "A", "value": "x" * 32769}),
    (EnvVar, {"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "spec.containers"}}}),
    (EnvVar, {"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name", "apiVersion": "v2"}}}),
    (EnvVar, {"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": ".."}}}),
    (EnvVar, {"name": "A", "valueFrom": {"secretKeyRef": {"name": "S", "key": "k"}}}),
    (EnvVar, {"name": "A", "valueFrom": {"resourceFieldRef": {"resource": "limits.nvidia.com/gpu"}}}),
    (ContainerResources, {"requests": {"cpu": 2}}), (ContainerResources, {"requests": {"cpu": "1K"}}),
    (ContainerResources, {"requests": {"cpu": "-1"}}), (ContainerResources, {"limits": {"a": "1", "b": "1", "c": "1", "d": "1", "e": "1"}}),
    (NodeSelectorRequirement, {"key": "a", "operator": "Has"}), (NodeSelectorRequirement, {"key": "a", "operator": "In", "values": ["bad value"]}),
    (LabelSelectorRequirement, {"key": "a", "operator": "Gt", "values": ["1"]}),
    (TopologySpreadConstraint, {**_SPREAD, "maxSkew": 0}), (TopologySpreadConstraint, {**_SPREAD, "whenUnsatisfiable": "Never"}),
    (TopologySpreadConstraint, {**_SPREAD, "minDomains": 0}), (PodAffinityTerm, {"topologyKey": ""}),
    (PodAffinityTerm, {"topologyKey": "zone", "namespaces": ["Models"]}),
    (pod.WeightedPodAffinityTerm, {"weight": 0, "podAffinityTerm": {"topologyKey": "zone"}}),
    (pod.PreferredSchedulingTerm, {"weight": 101, "preference": {"matchExpressions": [{"key": "a", "operator": "Exists"}]}}),
    (pod.NodeSelector, {"nodeSelectorTerms": []}),
    (SecurityContext, {"runAsUser": -1}), (SecurityContext, {"runAsUser": 2**31}), (SecurityContext, {"procMount": "Unmasked"}),
    (SecurityContext, {"capabilities": {"add": ["NET ADMIN"]}}), (SeccompProfile, {"type": "Localhost", "localhostProfile": "/abs.json"}),
    (SeccompProfile, {"type": "Localhost", "localhostProfile": "../up.json"}), (SeccompProfile, {"type": "docker/default"}),
    (PodSecurityContext, {"sysctls": [{"name": "Net.IPv4", "value": "1"}]}), (PodSecurityContext, {"fsGroupChangePolicy": "Never"}),
    (PodPolicy, {"labels": {"a": "bad value"}}), (PodPolicy, {"annotations": {"a": "x" * 4097}}),
    (PodPolicy, {"serviceAccountName": "Engine"}), (PodPolicy, {"imagePullSecrets": [{"name": "a"}] * 9}),
    (PodPolicy, {"hostNetwork": True}),
])
def test_schema_level_refusals(model, data):
    assert _refusal(model, data) is not None


# --- rules against independent statements of them ---------------------------------------------------------------------

_VALUES = st.one_of(st.none(), st.lists(st.sampled_from(["1", "42", "a", "x1", "", "007"]), max_size=3))


@FAST
@given(operator=st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]), values=_VALUES)
def test_node_selector_requirement_against_kubernetes_rules(operator, values):
    data = {"key": "example.com/x", "operator": operator, **({"values": values} if values is not None else {})}
    n = len(values or [])
    expected = {"In": n > 0, "NotIn": n > 0, "Exists": n == 0, "DoesNotExist": n == 0,
                "Gt": n == 1 and values[0].isdigit(), "Lt": n == 1 and values[0].isdigit()}[operator]
    assert (_refusal(NodeSelectorRequirement, data) is None) == expected
    if operator not in ("Gt", "Lt"):
        assert (_refusal(LabelSelectorRequirement, data) is None) == expected


_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"


def _qualified_name(key: str) -> bool:
    """Kubernetes' IsQualifiedName, written independently (plus our 255-character cap)."""
    if len(key) > 255 or key.count("/") > 1:
        return False
    prefix, _, name = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > 253 or not re.fullmatch(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*", prefix)):
        return False
    return 0 < len(name) <= 63 and re.fullmatch(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]", name) is not None


_KEYS = st.one_of(
    st.from_regex(r"([a-z0-9.-]{0,12}/)?[A-Za-z0-9_.-]{0,12}", fullmatch=True),
    st.builds(lambda p, n: f"{p}/{n}", st.from_regex(r"[a-z]{1,60}(\.[a-z]{1,60}){0,4}", fullmatch=True),
              st.from_regex(r"[a-z][a-z0-9]{0,64}", fullmatch=True)),
    st.sampled_from(["a/b/c", "/a", "a/", "example.com/", "-a", "a-", "A.B/c", "a..b/c", "a" * 63, "a" * 64,
                     # the length limits: a 253-character prefix (255 in all), one more, and a 256-character key
                     ".".join(["a" * 63] * 4) + "b/c", ".".join(["a" * 63] * 4) + "bb/c", "a" * 192 + "/" + "b" * 63]),
)


@FAST
@given(_KEYS)
def test_label_keys_against_an_independent_qualified_name_check(key):
    accepted = _refusal(PodPolicy, {"labels": {key: "v"}}) is None
    assert accepted == _qualified_name(key), key
    assert (_refusal(LabelSelector, {"matchLabels": {key: "v"}}) is None) == accepted
    assert (_refusal(TopologySpreadConstraint, {**_SPREAD, "topologyKey": key}) is None) == accepted


@FAST
@given(name=st.sampled_from(["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HUGGINGFACE_HUB_TOKEN", "HF_HOME", "hf_token", "TOKEN"]),
       value=st.one_of(st.none(), st.sampled_from(["", "hf_abc"])), from_secret=st.booleans())
def test_env_var_rules(name, value, from_secret):
    data = {"name": name}
    if value is not None:
        data["value"] = value
    if from_secret:
        data["valueFrom"] = {"secretKeyRef": {"name": "hf", "key": "token"}}
    hub = name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HUGGINGFACE_HUB_TOKEN")
    expected = (value is not None) != from_secret and not (hub and value is not None)
    assert (_refusal(EnvVar, data) is None) == expected


# --- quantities -------------------------------------------------------------------------------------------------------


def _kube_value(text: str) -> Decimal:
    """The apiserver's value of a quantity: rounded up to a whole nano, binary values capped at 2^63-1."""
    exact = _exact(text)
    with localcontext() as context:
        context.prec = 200
        if exact != 0 and exact.as_tuple().exponent < -9:
            exact = exact.quantize(Decimal("1e-9"), rounding=ROUND_UP)
    return min(exact, Decimal(2**63 - 1)) if text.endswith("i") else exact


def _parse_quantity_accepts(text: str) -> bool:
    try:
        parse_quantity(text)
        return True
    except ValueError:
        return False


@pytest.mark.parametrize("text, ours, python_client, _apiserver", QUANTITY_SAMPLES, ids=[repr(s[0]) for s in QUANTITY_SAMPLES])
def test_quantity_samples(text, ours, python_client, _apiserver):
    assert (re.fullmatch(KUBE_QUANTITY_PATTERN, text) is not None) == ours
    assert (_refusal(ContainerResources, {"requests": {"memory": text}}) is None) == ours
    assert _parse_quantity_accepts(text) == python_client
    if ours:
        assert _apiserver
        assert parse_kube_quantity(text) == _kube_value(text)
    else:
        with pytest.raises(ValueError, match="invalid quantity"):
            parse_kube_quantity(text)


_QUANTITY_SUFFIXES = ["", "m", "n", "u", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei",
                      "e3", "E-2", "e+1", "e", "ki", "mi", "ni", "KB", "i", "Mb", "x", "kk", "e1.5", "E", "m3"]


@FAST
@given(st.from_regex(r"[0-9]{1,18}", fullmatch=True), st.one_of(st.none(), st.from_regex(r"[0-9]{1,9}", fullmatch=True)),
       st.sampled_from(_QUANTITY_SUFFIXES))
def test_quantities_agree_with_parse_quantity(digits, fraction, suffix):
    """Within the digits our pattern allows and without the spellings parse_quantity is lax about (a sign, "K",
    an exponent before a suffix, blanks), we accept exactly what kubernetes.utils.parse_quantity accepts, with its value
    up to the apiserver's rounding (up to a whole nano) and capping (binary values at 2^63-1)."""
    text = digits + (f".{fraction}" if fraction is not None else "") + suffix
    ours = re.fullmatch(KUBE_QUANTITY_PATTERN, text) is not None
    assert ours == _parse_quantity_accepts(text), text
    if ours:
        assert parse_kube_quantity(text) == _kube_value(text), text


def test_parse_kube_quantity_rounds_and_caps_like_the_apiserver():
    assert parse_kube_quantity("500m") == Decimal("0.5")
    assert parse_kube_quantity("1.5n") == Decimal("2e-9")  # up to a whole nano
    assert parse_kube_quantity("1e-12") == Decimal("1e-9")
    assert parse_kube_quantity("0") == 0 == parse_kube_quantity("0.000000000")
    assert parse_kube_quantity("8Ei") == 2**63 - 1  # binary: capped
    assert parse_kube_quantity("1e99") == Decimal("1e99")  # decimal: not capped
    assert parse_kube_quantity("1.000000001") > parse_kube_quantity("1")
    assert parse_kube_quantity("1024Mi") == parse_kube_quantity("1Gi") == 2**30
    with pytest.raises(ValueError):
        parse_kube_quantity("1K")


_QUANTITIES = st.builds(lambda d, f, s: d + (f".{f}" if f else "") + s, st.from_regex(r"[0-9]{1,3}", fullmatch=True),
                        st.one_of(st.none(), st.from_regex(r"[0-9]{1,10}", fullmatch=True)),
                        st.sampled_from(["", "m", "n", "k", "Mi", "Gi", "e2", "e-1", "Ei"]))


@FAST
@given(st.sampled_from(["cpu", "memory", "ephemeral-storage"]), _QUANTITIES, _QUANTITIES)
def test_limit_below_request_is_refused(resource, request, limit):
    data = {"requests": {resource: request}, "limits": {resource: limit}}
    error = _refusal(ContainerResources, data)
    well_formed = all(re.fullmatch(KUBE_QUANTITY_PATTERN, q) for q in (request, limit))
    if not well_formed:
        assert error is not None and "must not be below" not in error  # the pattern refuses, the rule stays quiet
    else:
        assert (error is None) == (_kube_value(limit) >= _kube_value(request)), (request, limit, error)


# --- the generated schema ----------------------------------------------------------------------------------------------


def test_every_model_in_pod_py_is_mapped_to_kubernetes():
    assert set(_pod_models()) == set(MODELS)
    assert set(POD_POLICY_FIELDS) == {f.alias for f in PodPolicy.model_fields.values()}


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_schema_is_structural_bounded_and_described(model):
    schema = model_schema(model)
    assert structural_problems(schema) == []
    for path, node in iter_nodes(schema):
        assert not UNSUPPORTED & set(node), path
        if path and not path.endswith(("[]", "{}")):
            assert node.get("description"), f"{model.__name__}.{path}: no description (kubectl explain)"
        if node["type"] == "string":
            assert "maxLength" in node or "enum" in node, f"{path}: unbounded string (CEL cost)"
        if node["type"] == "array":
            assert "maxItems" in node, f"{path}: unbounded list (CEL cost)"
        if node["type"] == "object" and isinstance(node.get("additionalProperties"), dict):
            assert "maxProperties" in node, f"{path}: unbounded map (CEL cost)"
        assert node["type"] != "number", f"{path}: a float in spec"


@pytest.mark.parametrize("model", [m for m in MODELS if m.rules], ids=lambda m: m.__name__)
def test_schema_carries_the_rules_as_cel(model):
    schema = model_schema(model)
    assert schema["x-kubernetes-validations"] == [rule.to_schema() for rule in model.rules]
    for rule in model.rules:
        assert rule.cel.strip() and rule.message
        assert rule.reason in (None, "FieldValueInvalid", "FieldValueForbidden", "FieldValueRequired")
        if rule.field_path:
            assert rule.field_path[1:] in schema["properties"], (model.__name__, rule.field_path)


def test_nested_rules_appear_where_the_models_are_used():
    schema = model_schema(Affinity)
    rules = [rule["rule"] for _, node in iter_nodes(schema) for rule in node.get("x-kubernetes-validations", [])]
    for model in (NodeSelectorRequirement, NodeSelectorTerm, LabelSelectorRequirement, LabelSelector, PodAffinityTerm):
        for rule in model.rules:
            assert rule.cel in rules, (model.__name__, rule.cel)
    quantity = model_schema(ContainerResources)
    assert "quantity(self.limits[n]).isLessThan(quantity(self.requests[n]))" in quantity["x-kubernetes-validations"][2]["rule"]
    assert quantity["properties"]["requests"]["additionalProperties"]["pattern"] == KUBE_QUANTITY_PATTERN


def test_lists_with_kubernetes_keys_are_list_maps():
    class Holder(ApiModel):
        env: pod.EnvVars | None = None
        """Env."""
        spread: pod.TopologySpreadConstraints | None = None
        """Spread."""

    schema = model_schema(Holder)
    assert schema["properties"]["env"]["x-kubernetes-list-type"] == "map"
    assert schema["properties"]["env"]["x-kubernetes-list-map-keys"] == ["name"]
    assert schema["properties"]["spread"]["x-kubernetes-list-map-keys"] == ["topologyKey", "whenUnsatisfiable"]
    sysctls = model_schema(PodSecurityContext)["properties"]["sysctls"]
    assert sysctls["x-kubernetes-list-type"] == "map" and sysctls["x-kubernetes-list-map-keys"] == ["name"]
    # list-map keys must be required (or defaulted) in the items
    assert set(schema["properties"]["spread"]["items"]["required"]) >= {"topologyKey", "whenUnsatisfiable"}
    assert "name" in schema["properties"]["env"]["items"]["required"]


@pytest.mark.parametrize("model", [m for m in MODELS if m.rules], ids=lambda m: m.__name__)
def test_rule_messages_follow_the_api_conventions(model):
    """The conventions tests/unit/api/test_api_generated.py holds every kind's messages to, so wiring these in passes."""
    for rule in model.rules:
        assert len(rule.message) < 400
        assert re.search(r"[a-zA-Z\]]\.[a-z][a-zA-Z]+", rule.message), rule.message
        assert ":" in rule.message or " e.g. " in rule.message or " or " in rule.message, rule.message
