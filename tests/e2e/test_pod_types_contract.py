"""The pod-level types of the api/pod package against the real apiserver.

(a) Every field of every model exists, with a compatible type, in the apiserver's own OpenAPI v3 schema of
    the core/v1 type it mirrors (KUBERNETES_TYPES), so our field names cannot drift from Kubernetes.
(b) A throwaway CRD generated from a wrapper of the types (the project's schema code) is installed, and one
    table of good and bad objects is judged by the apiserver (`kubectl apply --dry-run=server`) and by the
    Python models: same verdicts, with our messages. Every good object then renders a Pod the apiserver
    accepts; bad objects Kubernetes itself would refuse in a Pod are refused there too.
(c) Quantities: our pattern and parser against the apiserver's (a Pod's resources, read back canonical), on the
    unit tests' table of samples (tests/unit/api/test_api_pod.py QUANTITY_SAMPLES), and the limit rule on random pairs.
"""

from __future__ import annotations

import json
import types
import typing
import uuid
from decimal import ROUND_UP, Decimal
from typing import Annotated, Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field, ValidationError

from drafter_operator.api.common import ApiModel
from drafter_operator.api.pod import (
    KUBERNETES_TYPES,
    POD_POLICY_FIELDS,
    Affinity,
    ContainerResources,
    EnvFromSource,
    EnvVars,
    PodPolicy,
    SecurityContext,
    Toleration,
    TopologySpreadConstraints,
    parse_kube_quantity,
)
from drafter_operator.api.schema import model_schema
from tests.conftest import NAMESPACE_PREFIX
from tests.structures import contains
from tests.support.quantities import QUANTITY_SAMPLES, _exact

pytestmark = pytest.mark.e2e

SUFFIX = uuid.uuid4().hex[:6]
GROUP = "test.drafter.dev"
PLURAL = f"podcontracts{SUFFIX}"
KIND = f"PodContract{SUFFIX.upper()}"
PRIORITY_CLASS = f"drafter-test-{SUFFIX}"
RUNTIME_CLASS = f"drafter-test-{SUFFIX}"
IMAGE = "registry.k8s.io/pause:3.10"
E2E_SETTINGS = settings(max_examples=25, deadline=None, derandomize=True,
                        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


class PodContractSpec(ApiModel):
    """Every pod-level type, as a kind's spec would hold them."""

    pod: PodPolicy | None = None
    """Pod-level settings."""
    env: EnvVars | None = None
    """Container env."""
    env_from: Annotated[list[EnvFromSource], Field(max_length=16)] | None = None
    """Container envFrom."""
    resources: ContainerResources | None = None
    """Container resources."""
    affinity: Affinity | None = None
    """Pod affinity."""
    topology_spread_constraints: TopologySpreadConstraints | None = None
    """Pod topology spread constraints."""
    tolerations: Annotated[list[Toleration], Field(max_length=32)] | None = None
    """Pod tolerations."""


def contract_crd() -> dict:
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP, "scope": "Namespaced",
            "names": {"kind": KIND, "listKind": f"{KIND}List", "plural": PLURAL, "singular": PLURAL[:-1]},
            "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                "type": "object",
                "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                               "metadata": {"type": "object"}, "spec": model_schema(PodContractSpec)},
            }}}],
        },
    }


# --- fixtures ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def k8s_schemas(cluster) -> dict[str, dict]:
    doc = json.loads(cluster.kubectl("get", "--raw", "/openapi/v3/api/v1").stdout)
    return doc["components"]["schemas"]


@pytest.fixture(scope="module")
def contract(cluster):
    """The throwaway CRD installed and served, a namespace, and what the good Pod refers to (a ServiceAccount,
    a PriorityClass and a RuntimeClass)."""
    namespace = f"{NAMESPACE_PREFIX}pod-{SUFFIX}"
    cluster.kubectl("create", "-f", "-", input=json.dumps(contract_crd()))
    cluster.kubectl("create", "-f", "-", input=json.dumps({
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": PRIORITY_CLASS}, "value": 1000}))
    cluster.kubectl("create", "-f", "-", input=json.dumps({
        "apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": RUNTIME_CLASS}, "handler": "nvidia"}))
    cluster.kubectl("create", "namespace", namespace)
    try:
        cluster.kubectl("-n", namespace, "create", "serviceaccount", "engine")
        cluster.kubectl("wait", "--for", "condition=established", "--timeout=60s", f"crd/{PLURAL}.{GROUP}")
        cluster.wait_for(f"{PLURAL} to be served",
                         lambda: cluster.kubectl("-n", namespace, "get", PLURAL, check=False).returncode == 0, timeout=60)
        yield namespace
    finally:
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        cluster.kubectl("delete", f"crd/{PLURAL}.{GROUP}", "--wait=false", check=False)
        cluster.kubectl("delete", "priorityclass", PRIORITY_CLASS, "--wait=false", check=False)
        cluster.kubectl("delete", "runtimeclass", RUNTIME_CLASS, "--wait=false", check=False)


# --- (a) field names and types against the apiserver's OpenAPI ----------------------------------------------------


def _ref(node: dict) -> str | None:
    if "$ref" in node:
        return node["$ref"].split("/")[-1]
    if len(node.get("allOf", [])) == 1 and "$ref" in node["allOf"][0]:
        return node["allOf"][0]["$ref"].split("/")[-1]
    return None


def _k8s_types(node: dict, schemas: dict) -> set[str]:
    if node.get("x-kubernetes-int-or-string"):
        return {"integer", "string"}
    if "oneOf" in node:
        return set().union(*(_k8s_types(option, schemas) for option in node["oneOf"]))
    name = _ref(node)
    if name:
        return _k8s_types(schemas[name], schemas)
    return {node["type"]} if "type" in node else set()


def _inner(annotation: Any) -> Any:
    """list[X] / dict[str, X] / X with Annotated and Optional stripped (the element types too)."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _inner(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        real = [a for a in typing.get_args(annotation) if a is not type(None)]
        assert len(real) == 1, annotation
        return _inner(real[0])
    if origin in (list, dict):
        return origin[tuple(_inner(a) for a in typing.get_args(annotation))]
    return annotation


def _model_of(annotation: Any) -> tuple[str, type | None]:
    """('array'|'map'|'scalar', the model class held, if any)."""
    inner = _inner(annotation)
    origin = typing.get_origin(inner)
    if origin is list:
        held, shape = typing.get_args(inner)[0], "array"
    elif origin is dict:
        held, shape = typing.get_args(inner)[1], "map"
    else:
        held, shape = inner, "scalar"
    return shape, held if isinstance(held, type) and issubclass(held, BaseModel) else None


def _check_field(problems: list[str], where: str, ours: dict, annotation: Any, theirs: dict, schemas: dict) -> None:
    if ours["type"] not in _k8s_types(theirs, schemas):
        problems.append(f"{where}: ours is {ours['type']}, Kubernetes' is {_k8s_types(theirs, schemas)}")
    shape, held = _model_of(annotation)
    target = theirs.get("items") if shape == "array" else theirs.get("additionalProperties") if shape == "map" else theirs
    if shape != "scalar" and not isinstance(target, dict):
        problems.append(f"{where}: ours is a {shape}, Kubernetes' is not")
        return
    if held is not None:
        want = KUBERNETES_TYPES.get(held)
        if want is None or _ref(target) != want:
            problems.append(f"{where}: ours holds {held.__name__} ({want}), Kubernetes' holds {_ref(target)}")
    elif shape != "scalar" and target.get("type") and target["type"] != (ours.get("items") or ours.get("additionalProperties"))["type"]:
        problems.append(f"{where}: element types differ")
    if "enum" in ours and "enum" in theirs and not set(ours["enum"]) <= set(theirs["enum"]):
        problems.append(f"{where}: values {sorted(set(ours['enum']) - set(theirs['enum']))} are not Kubernetes'")


def test_every_field_exists_in_the_kubernetes_type_it_mirrors(k8s_schemas):
    problems: list[str] = []
    checked = 0
    for model, k8s_name in KUBERNETES_TYPES.items():
        assert k8s_name in k8s_schemas, f"{model.__name__}: the apiserver has no {k8s_name}"
        theirs = k8s_schemas[k8s_name]
        ours = model_schema(model)
        for name, field in model.model_fields.items():
            alias = field.alias or name
            if alias not in theirs.get("properties", {}):
                problems.append(f"{model.__name__}.{alias}: no such field in {k8s_name}")
                continue
            _check_field(problems, f"{model.__name__}.{alias}", ours["properties"][alias], field.annotation,
                         theirs["properties"][alias], k8s_schemas)
            checked += 1
        # what Kubernetes requires, we require (or we would render objects Kubernetes refuses)
        for required in theirs.get("required", []):
            if required not in ours.get("required", []):
                problems.append(f"{model.__name__}.{required}: required by Kubernetes, optional here")
    assert not problems, "\n".join(problems)
    assert checked >= 90, checked  # guards against an emptied KUBERNETES_TYPES


def test_pod_policy_fields_land_on_kubernetes_fields(k8s_schemas):
    problems: list[str] = []
    ours = model_schema(PodPolicy)
    assert set(POD_POLICY_FIELDS) == {f.alias for f in PodPolicy.model_fields.values()}
    for name, field in PodPolicy.model_fields.items():
        k8s_type, k8s_field = POD_POLICY_FIELDS[field.alias]
        theirs = k8s_schemas[k8s_type]["properties"].get(k8s_field)
        if theirs is None:
            problems.append(f"PodPolicy.{field.alias}: {k8s_type} has no {k8s_field}")
            continue
        _check_field(problems, f"PodPolicy.{field.alias}", ours["properties"][field.alias], field.annotation, theirs, k8s_schemas)
    assert not problems, "\n".join(problems)


def test_the_drift_check_catches_drift(k8s_schemas):
    """The checker itself: a misspelt field, a wrong type and a wrong nested type are reported."""
    problems: list[str] = []
    env_var = k8s_schemas["io.k8s.api.core.v1.EnvVar"]
    _check_field(problems, "x", {"type": "integer"}, int, env_var["properties"]["value"], k8s_schemas)
    _check_field(problems, "y", {"type": "object"}, SecurityContext, env_var["properties"]["valueFrom"], k8s_schemas)
    assert len(problems) == 2 and "ours is integer" in problems[0] and "SecurityContext" in problems[1]
    assert "valueFom" not in env_var["properties"]


# --- (b) one table, two judges -------------------------------------------------------------------------------------


def good_spec() -> dict:
    """Every type, fully used, valid."""
    return {
        "pod": {
            "labels": {"example.com/team": "inference", "app.kubernetes.io/part-of": "kimi"},
            "annotations": {"example.com/owner": "ml-platform <ml@example.com>", "prometheus.io/scrape": "true"},
            "serviceAccountName": "engine",
            "imagePullSecrets": [{"name": "regcred"}],
            "priorityClassName": PRIORITY_CLASS,
            "runtimeClassName": RUNTIME_CLASS,
            "securityContext": {"runAsUser": 1000, "runAsGroup": 1000, "runAsNonRoot": True, "fsGroup": 1000,
                                "fsGroupChangePolicy": "OnRootMismatch", "supplementalGroups": [44],
                                "seccompProfile": {"type": "RuntimeDefault"},
                                "sysctls": [{"name": "net.ipv4.tcp_keepalive_time", "value": "600"}],
                                "seLinuxOptions": {"level": "s0:c123,c456"}},
            "containerSecurityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                         "capabilities": {"drop": ["ALL"], "add": ["IPC_LOCK"]},
                                         "seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/engine.json"},
                                         "appArmorProfile": {"type": "RuntimeDefault"}, "procMount": "Default"},
        },
        "env": [
            {"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"},
            {"name": "EMPTY", "value": ""},
            {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}},
            {"name": "SETTINGS", "valueFrom": {"configMapKeyRef": {"name": "engine-settings", "key": "extra.json", "optional": True}}},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
            {"name": "POD_TEAM", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['example.com/team']"}}},
            {"name": "MEMORY_MIB", "valueFrom": {"resourceFieldRef": {"containerName": "engine", "resource": "limits.memory", "divisor": "1Mi"}}},
        ],
        "envFrom": [{"prefix": "HUB_", "secretRef": {"name": "hub-credentials"}},
                    {"configMapRef": {"name": "engine-env", "optional": True}}],
        "resources": {"requests": {"cpu": "500m", "memory": "64Gi", "ephemeral-storage": "10Gi"},
                      "limits": {"cpu": "2", "memory": "128Gi"}},
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-H200"]},
                                          {"key": "nvidia.com/gpu.count", "operator": "Gt", "values": ["3"]},
                                          {"key": "example.com/draining", "operator": "DoesNotExist"}]},
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-node-1"]}]}]},
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 50, "preference": {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}]}}],
            },
            "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 10, "podAffinityTerm": {"labelSelector": {"matchLabels": {"example.com/cache": "warm"}},
                                                   "topologyKey": "kubernetes.io/hostname", "namespaces": ["models"]}}]},
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchExpressions": [{"key": "example.com/role", "operator": "Exists"}]},
                 "topologyKey": "kubernetes.io/hostname", "namespaceSelector": {},
                 "matchLabelKeys": ["example.com/revision"], "mismatchLabelKeys": ["example.com/tenant"]}]},
        },
        "topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
             "labelSelector": {"matchLabels": {"example.com/team": "inference"}}, "minDomains": 2,
             "nodeAffinityPolicy": "Honor", "nodeTaintsPolicy": "Ignore", "matchLabelKeys": ["pod-template-hash"]},
            {"maxSkew": 2, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway"},
        ],
        "tolerations": [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "example.com/maintenance", "operator": "Equal", "value": "soon", "effect": "NoExecute",
             "tolerationSeconds": 300},
        ],
    }


def _affinity_expr(expression: dict) -> dict:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [expression]}]}}}


def _anti_affinity(term: dict) -> dict:
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "kubernetes.io/hostname", **term}]}}


# (id, spec, expected) - expected None: accepted; a string: refused with that text in both judges' messages.
# A fourth element True marks bad objects Kubernetes itself refuses in a Pod (the rule mirrors Kubernetes').
CASES: list[tuple] = [
    ("good", good_spec(), None),
    ("empty", {}, None),
    ("empty-value", {"env": [{"name": "A", "value": ""}]}, None),
    ("token-from-secret", {"env": [{"name": "HUGGING_FACE_HUB_TOKEN", "valueFrom": {"secretKeyRef": {"name": "t", "key": "k"}}}]}, None),
    ("token-via-envfrom", {"envFrom": [{"secretRef": {"name": "hf-token"}}]}, None),
    ("equal-in-two-spellings", {"resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1000m", "memory": "1073741824"}}}, None),
    ("exponent-equals-suffix", {"resources": {"requests": {"memory": "1e3"}, "limits": {"memory": "1k"}}}, None),
    ("nano-rounding", {"resources": {"requests": {"cpu": "1n"}, "limits": {"cpu": "0.5n"}}}, None),
    ("binary-capped-at-int64", {"resources": {"requests": {"memory": "9Ei"}, "limits": {"memory": "8Ei"}}}, None),
    ("only-limits", {"resources": {"limits": {"cpu": "1.5", "memory": "129M"}}}, None),
    ("gt-integer", {"affinity": _affinity_expr({"key": "example.com/gen", "operator": "Lt", "values": ["10"]})}, None),
    ("exists-empty-values", {"affinity": _affinity_expr({"key": "example.com/x", "operator": "Exists", "values": []})}, None),
    ("mismatch-key-in-selector", {"affinity": _anti_affinity({"labelSelector": {"matchLabels": {"example.com/t": "a"}}, "mismatchLabelKeys": ["example.com/t"]})}, None),
    ("part-of-label", {"pod": {"labels": {"app.kubernetes.io/part-of": "x", "team": "a"}}}, None),

    ("hub-token-literal", {"env": [{"name": "HF_TOKEN", "value": "hf_abc"}]}, "env[].value must not hold a hub token"),
    ("hub-token-literal-2", {"env": [{"name": "HUGGINGFACE_HUB_TOKEN", "value": ""}]}, "env[].value must not hold a hub token"),
    ("value-and-value-from", {"env": [{"name": "A", "value": "x", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]},
     "env[] needs exactly one of env[].value", True),
    ("no-value", {"env": [{"name": "A"}]}, "env[] needs exactly one of env[].value"),
    ("two-sources", {"env": [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"},
                                                         "secretKeyRef": {"name": "s", "key": "k"}}}]}, "env[].valueFrom needs exactly one", True),
    ("cpu-divisor", {"env": [{"name": "A", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "1Mi"}}}]},
     "valueFrom.resourceFieldRef.divisor must be 1 or 1m", True),
    ("duplicate-env", {"env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]}, "Duplicate value"),
    ("envfrom-both", {"envFrom": [{"secretRef": {"name": "a"}, "configMapRef": {"name": "b"}}]}, "envFrom[] needs exactly one", True),
    ("envfrom-none", {"envFrom": [{"prefix": "A_"}]}, "envFrom[] needs exactly one", True),
    ("drafter-label", {"pod": {"labels": {"drafter.dev/serving": "other"}}}, "labels must not use the operator's keys"),
    ("managed-by-label", {"pod": {"labels": {"app.kubernetes.io/managed-by": "helm"}}}, "labels must not use the operator's keys"),
    ("component-label", {"pod": {"labels": {"app.kubernetes.io/component": "x"}}}, "labels must not use the operator's keys"),
    ("bad-label-key", {"pod": {"labels": {"-team": "a"}}}, "labels keys must be label keys", True),
    ("long-label-name", {"pod": {"labels": {"a" * 64: "a"}}}, "labels keys must be label keys", True),
    ("bad-annotation-key", {"pod": {"annotations": {"my key": "a"}}}, "annotations keys must be label keys", True),
    ("gpu-request", {"resources": {"requests": {"nvidia.com/gpu": "8"}}}, "must not hold nvidia.com/gpu"),
    ("gpu-limit", {"resources": {"limits": {"cpu": "1", "nvidia.com/gpu": "1"}}}, "must not hold nvidia.com/gpu"),
    ("hugepages", {"resources": {"limits": {"hugepages-2Mi": "1Gi"}}}, "take only cpu, memory and ephemeral-storage"),
    ("cpu-limit-below-request", {"resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1500m"}}},
     "resources.limits must not be below resources.requests", True),
    ("memory-limit-below-request", {"resources": {"requests": {"memory": "1025Mi"}, "limits": {"memory": "1Gi"}}},
     "resources.limits must not be below resources.requests", True),
    ("storage-limit-below-request", {"resources": {"requests": {"ephemeral-storage": "1e10"}, "limits": {"ephemeral-storage": "9G"}}},
     "resources.limits must not be below resources.requests", True),
    ("decimal-not-capped", {"resources": {"requests": {"memory": "1e99"}, "limits": {"memory": "1e98"}}},
     "resources.limits must not be below resources.requests", True),
    # CEL compares nano-rounded values (1.5n -> 2n < 3n), a Pod milli-rounded ones (1m = 1m): stricter, never laxer
    ("nano-limit-below-request", {"resources": {"requests": {"cpu": "3n"}, "limits": {"cpu": "1.5n"}}},
     "resources.limits must not be below resources.requests"),
    ("exists-with-values", {"affinity": _affinity_expr({"key": "example.com/x", "operator": "Exists", "values": ["a"]})},
     "values must be empty when operator is Exists", True),
    ("toleration-exists-with-value", {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "value": "x"}]},
     "tolerations[].value must be empty when operator is Exists", True),
    ("toleration-seconds-without-noexecute", {"tolerations": [{"key": "a", "value": "b", "effect": "NoSchedule",
                                                               "tolerationSeconds": 30}]},
     "tolerations[].tolerationSeconds applies only to effect NoExecute", True),
    ("in-without-values", {"affinity": _affinity_expr({"key": "example.com/x", "operator": "In"})},
     "values must not be empty when operator is In", True),
    ("gt-two-values", {"affinity": _affinity_expr({"key": "example.com/x", "operator": "Gt", "values": ["1", "2"]})},
     "values must be one integer", True),
    ("gt-not-integer", {"affinity": _affinity_expr({"key": "example.com/x", "operator": "Gt", "values": ["big"]})},
     "values must be one integer"),
    ("empty-term", {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{}]}}}},
     "needs nodeSelectorTerms[].matchExpressions or matchFields"),
    ("match-fields-label", {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "example.com/x", "operator": "In", "values": ["a"]}]}]}}}}, "matchFields may only compare metadata.name", True),
    ("selector-exists-with-values", {"affinity": _anti_affinity({"labelSelector": {"matchExpressions": [
        {"key": "example.com/x", "operator": "DoesNotExist", "values": ["a"]}]}})}, "values must be empty when operator is Exists", True),
    ("selector-bad-key", {"affinity": _anti_affinity({"labelSelector": {"matchLabels": {"example.com/a/b": "x"}}})},
     "labelSelector.matchLabels keys must be label keys", True),
    ("match-label-keys-without-selector", {"affinity": _anti_affinity({"matchLabelKeys": ["example.com/t"]})},
     "need podAffinityTerm.labelSelector", True),
    ("match-and-mismatch", {"affinity": _anti_affinity({"labelSelector": {}, "matchLabelKeys": ["a"], "mismatchLabelKeys": ["a"]})},
     "must not share a key", True),
    ("match-key-in-selector", {"affinity": _anti_affinity({"labelSelector": {"matchLabels": {"a": "1"}, "matchExpressions": [
        {"key": "a", "operator": "Exists"}]}, "matchLabelKeys": ["a"]})}, "must not name a key labelSelector already uses", True),
    ("min-domains-schedule-anyway", {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway",
                                                                    "minDomains": 2}]}, "minDomains needs whenUnsatisfiable DoNotSchedule", True),
    ("spread-keys-without-selector", {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
                                                                     "matchLabelKeys": ["pod-template-hash"]}]},
     "matchLabelKeys needs topologySpreadConstraints[].labelSelector", True),
    ("duplicate-spread", {"topologySpreadConstraints": [
        {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"},
        {"maxSkew": 2, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]}, "Duplicate value", True),
    ("privileged-no-escalation", {"pod": {"containerSecurityContext": {"privileged": True, "allowPrivilegeEscalation": False}}},
     "allowPrivilegeEscalation false contradicts securityContext.privileged true", True),
    ("sys-admin-no-escalation", {"pod": {"containerSecurityContext": {"capabilities": {"add": ["CAP_SYS_ADMIN"]}, "allowPrivilegeEscalation": False}}},
     "contradicts securityContext.capabilities.add SYS_ADMIN", True),
    ("non-root-uid-0", {"pod": {"securityContext": {"runAsNonRoot": True, "runAsUser": 0}}}, "runAsNonRoot true contradicts"),
    ("seccomp-localhost-without-profile", {"pod": {"securityContext": {"seccompProfile": {"type": "Localhost"}}}},
     "seccompProfile.type Localhost needs seccompProfile.localhostProfile", True),
    ("seccomp-profile-without-localhost", {"pod": {"containerSecurityContext": {"seccompProfile": {"type": "RuntimeDefault", "localhostProfile": "p.json"}}}},
     "seccompProfile.localhostProfile is only for seccompProfile.type Localhost", True),
    ("apparmor-localhost-without-profile", {"pod": {"containerSecurityContext": {"appArmorProfile": {"type": "Localhost"}}}},
     "appArmorProfile.type Localhost needs", True),
    ("apparmor-profile-without-localhost", {"pod": {"securityContext": {"appArmorProfile": {"type": "Unconfined", "localhostProfile": "p"}}}},
     "appArmorProfile.localhostProfile is only for appArmorProfile.type Localhost", True),
    ("duplicate-sysctl", {"pod": {"securityContext": {"sysctls": [{"name": "kernel.shm_rmid_forced", "value": "1"},
                                                                  {"name": "kernel.shm_rmid_forced", "value": "0"}]}}}, "Duplicate value", True),
    # schema (not rule) failures: both refuse; the messages differ in wording, so only the verdict is compared
    ("quantity-K", {"resources": {"requests": {"cpu": "1K"}}}, "", True),
    ("quantity-negative", {"resources": {"requests": {"cpu": "-1"}}}, "", True),
    ("quantity-unquoted", {"resources": {"requests": {"cpu": 2}}}, ""),
    ("weight-0", {"affinity": {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 0, "podAffinityTerm": {"topologyKey": "zone"}}]}}}, "", True),
    ("max-skew-0", {"topologySpreadConstraints": [{"maxSkew": 0, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]}, "", True),
    ("unknown-operator", {"affinity": _affinity_expr({"key": "a", "operator": "Has"})}, "", True),
    ("unknown-field", {"pod": {"hostNetwork": True}}, ""),
    ("field-path", {"env": [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "spec.containers"}}}]}, "", True),
    ("proc-mount-unmasked", {"pod": {"containerSecurityContext": {"procMount": "Unmasked"}}}, "", True),
]


def _dry_run(cluster, namespace: str, obj: dict):
    return cluster.kubectl("-n", namespace, "apply", "--dry-run=server", "--validate=strict", "-o", "json", "-f", "-",
                           input=json.dumps(obj), check=False)


def _object(name: str, spec: dict) -> dict:
    return {"apiVersion": f"{GROUP}/v1", "kind": KIND, "metadata": {"name": name}, "spec": spec}


def _models_say(spec: dict) -> tuple[bool, str]:
    try:
        PodContractSpec.model_validate(spec)
        return True, ""
    except ValidationError as error:
        return False, str(error)


def test_the_table_covers_every_rule():
    from drafter_operator.api import pod

    messages = {rule.message for model in KUBERNETES_TYPES for rule in model.rules} | {r.message for r in pod.PodPolicy.rules}
    expected = [case[2] for case in CASES if case[2]]
    untested = [m for m in messages if not any(e in m for e in expected)]
    assert not untested, untested
    assert sum(case[2] is None for case in CASES) >= 10 and sum(case[2] is not None for case in CASES) >= 40


@pytest.mark.parametrize("case", CASES, ids=[case[0] for case in CASES])
def test_apiserver_and_models_give_the_same_verdict(cluster, contract, case):
    name, spec, expected = case[:3]
    model_ok, model_error = _models_say(spec)
    proc = _dry_run(cluster, contract, _object(f"c-{name}".lower()[:52], spec))
    server_ok, server_error = proc.returncode == 0, proc.stderr
    assert model_ok == server_ok == (expected is None), (
        f"models {'accept' if model_ok else 'refuse'}, apiserver {'accepts' if server_ok else 'refuses'}, "
        f"expected {'accept' if expected is None else 'refuse'}\nmodels: {model_error}\napiserver: {server_error}")
    if expected:
        assert expected in model_error, model_error
        assert expected in server_error, server_error
    if server_ok:  # nothing was pruned on the way: the apiserver kept every field
        assert json.loads(proc.stdout)["spec"] == PodContractSpec.model_validate(spec).to_json()


def pod_from(spec: dict, name: str) -> dict:
    """The Pod a renderer builds from these fields (raw JSON, so bad objects render too)."""
    policy = spec.get("pod", {})
    container = {"name": "engine", "image": IMAGE, "env": spec.get("env"), "envFrom": spec.get("envFrom"),
                 "resources": spec.get("resources"), "securityContext": policy.get("containerSecurityContext")}
    pod_spec = {"containers": [{k: v for k, v in container.items() if v is not None}],
                "affinity": spec.get("affinity"), "topologySpreadConstraints": spec.get("topologySpreadConstraints"),
                "tolerations": spec.get("tolerations"),
                **{k: v for k, v in policy.items() if k not in ("labels", "annotations", "containerSecurityContext")}}
    metadata = {"name": name, "labels": policy.get("labels"), "annotations": policy.get("annotations")}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {k: v for k, v in metadata.items() if v is not None},
            "spec": {k: v for k, v in pod_spec.items() if v is not None}}


def rendered_pod(spec: PodContractSpec, name: str) -> dict:
    """The Pod built from the models' JSON, as a renderer will build it."""
    policy = spec.pod or PodPolicy()
    container: dict[str, Any] = {"name": "engine", "image": IMAGE}
    if spec.env is not None:
        container["env"] = [e.to_json() for e in spec.env]
    if spec.env_from is not None:
        container["envFrom"] = [e.to_json() for e in spec.env_from]
    if spec.resources is not None:
        container["resources"] = spec.resources.to_json()
    if policy.container_security_context is not None:
        container["securityContext"] = policy.container_security_context.to_json()
    pod_spec: dict[str, Any] = {"containers": [container], **policy.pod_spec()}
    if spec.affinity is not None:
        pod_spec["affinity"] = spec.affinity.to_json()
    if spec.topology_spread_constraints is not None:
        pod_spec["topologySpreadConstraints"] = [c.to_json() for c in spec.topology_spread_constraints]
    if spec.tolerations is not None:
        pod_spec["tolerations"] = [t.to_json() for t in spec.tolerations]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, **policy.pod_metadata()}, "spec": pod_spec}


def _milli(value: Decimal) -> Decimal:
    """A Pod's defaulting rounds every resource quantity up to a whole milli."""
    return value if value.as_tuple().exponent >= -3 else value.quantize(Decimal("0.001"), rounding=ROUND_UP)


@pytest.mark.parametrize("case", [c for c in CASES if c[2] is None], ids=[c[0] for c in CASES if c[2] is None])
def test_every_accepted_object_renders_a_valid_pod(cluster, contract, case):
    name, spec = case[:2]
    pod = rendered_pod(PodContractSpec.model_validate(spec), f"p-{name}".lower()[:52])
    assert pod == pod_from(spec, pod["metadata"]["name"])  # the models' JSON is the input, field for field
    proc = _dry_run(cluster, contract, pod)
    assert proc.returncode == 0, proc.stderr
    live = json.loads(proc.stdout)
    # quantities come back canonical and rounded up to a milli ("1000m" -> "1", "0.5n" -> "1m"): compare values
    for side, parse in ((pod, lambda q: _milli(parse_kube_quantity(q))), (live, _exact)):
        for kind in ("requests", "limits"):
            values = side["spec"]["containers"][0].get("resources", {}).get(kind, {})
            for resource, quantity in values.items():
                values[resource] = parse(quantity)
    # the DefaultTolerationSeconds admission plugin adds its own not-ready/unreachable tolerations
    live["spec"]["tolerations"] = [t for t in live["spec"].get("tolerations") or []
                                   if t.get("key") not in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")]
    if not live["spec"]["tolerations"]:
        del live["spec"]["tolerations"]
    assert contains(pod, live, empty_may_be_absent=True), json.dumps(live["spec"], indent=1, default=str)


@pytest.mark.parametrize("case", [c for c in CASES if len(c) > 3 and c[3]], ids=[c[0] for c in CASES if len(c) > 3 and c[3]])
def test_rules_that_mirror_kubernetes_refuse_what_a_pod_refuses(cluster, contract, case):
    name, spec = case[:2]
    proc = _dry_run(cluster, contract, pod_from(spec, f"p-{name}".lower()[:52]))
    assert proc.returncode != 0, f"Kubernetes accepts this Pod, so the case is not a mirror of its rule:\n{proc.stdout[:2000]}"


def test_cases_marked_ours_only_are_pods_kubernetes_accepts(cluster, contract):
    """The rules that are our policy (hub tokens, operator labels, GPUs, ...), not Kubernetes': the Pod alone is accepted."""
    # A Pod with a GPU or hugepages needs a request equal to the limit (and hugepages a memory request).
    gpu = {"resources": {"requests": {"nvidia.com/gpu": "8"}, "limits": {"nvidia.com/gpu": "8"}}}
    hugepages = {"resources": {"requests": {"hugepages-2Mi": "1Gi", "memory": "1Gi"}, "limits": {"hugepages-2Mi": "1Gi"}}}
    policy_only = {name: spec for name, spec, *_ in CASES if name in (
        "hub-token-literal", "hub-token-literal-2", "drafter-label", "managed-by-label", "component-label", "gt-not-integer",
        "empty-term", "no-value", "non-root-uid-0", "duplicate-env")}
    policy_only.update({"gpu-request": gpu, "gpu-limit": gpu, "hugepages": hugepages})
    assert len(policy_only) == 13
    for name, spec in policy_only.items():
        proc = _dry_run(cluster, contract, pod_from(spec, f"p-{name}"))
        assert proc.returncode == 0, f"{name}: {proc.stderr}"
        assert not _models_say(spec)[0]


# --- (c) quantities against the apiserver ----------------------------------------------------------------------------

def _pod_with_memory(name: str, quantity: Any) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": IMAGE, "resources": {"requests": {"memory": quantity}}}]}}


@pytest.mark.parametrize("quantity, ours, _python_client, apiserver", QUANTITY_SAMPLES, ids=[repr(s[0]) for s in QUANTITY_SAMPLES])
def test_quantities_as_the_apiserver_reads_them(cluster, contract, quantity, ours, _python_client, apiserver):
    """The `apiserver` column of the unit tests' table is the apiserver's verdict on a Pod's resources; what we accept,
    it reads as parse_kube_quantity does (then rounds up to a milli, as a Pod's defaulting does)."""
    proc = _dry_run(cluster, contract, _pod_with_memory(f"q-{uuid.uuid4().hex[:8]}", quantity))
    assert (proc.returncode == 0) == apiserver, (quantity, proc.stderr)
    if ours:
        canonical = json.loads(proc.stdout)["spec"]["containers"][0]["resources"]["requests"]["memory"]
        assert _exact(canonical) == _milli(parse_kube_quantity(quantity)), (quantity, canonical)


_QUANTITY = st.builds(
    lambda digits, fraction, suffix: digits + (f".{fraction}" if fraction else "") + suffix,
    st.from_regex(r"[0-9]{1,4}", fullmatch=True), st.one_of(st.none(), st.from_regex(r"[0-9]{1,3}", fullmatch=True)),
    st.sampled_from(["", "m", "n", "k", "M", "G", "Ki", "Mi", "Gi", "e2", "e-1", "E3"]))


def test_limit_rule_agrees_with_the_apiserver_on_random_pairs(cluster, contract):
    """The Python mirror of quantity(limit).isLessThan(quantity(request)) against the apiserver's CEL."""
    seen = {True: 0, False: 0}

    @E2E_SETTINGS
    @given(st.sampled_from(["cpu", "memory", "ephemeral-storage"]), _QUANTITY, _QUANTITY)
    def run(resource, request, limit):
        spec = {"resources": {"requests": {resource: request}, "limits": {resource: limit}}}
        model_ok, model_error = _models_say(spec)
        proc = _dry_run(cluster, contract, _object(f"q-{uuid.uuid4().hex[:8]}", spec))
        assert model_ok == (proc.returncode == 0), (spec, model_error, proc.stderr)
        assert model_ok == (parse_kube_quantity(limit) >= parse_kube_quantity(request))
        seen[model_ok] += 1

    run()
    assert seen[True] and seen[False], seen


def test_decimal_comparison_is_exact_near_equality():
    assert parse_kube_quantity("1.000000001") > parse_kube_quantity("1")
    assert parse_kube_quantity("1024Mi") == parse_kube_quantity("1Gi") == Decimal(2**30)
