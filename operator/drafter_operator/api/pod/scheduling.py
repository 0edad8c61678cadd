"""Scheduling: node affinity, pod (anti-)affinity and topology spread, as in a Pod spec."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field

from drafter_operator.api.common import DNS_SUBDOMAIN_PATTERN, ApiModel, LabelValue, Rule
from drafter_operator.api.pod.values import LabelKey, NamespaceName, cel_label_keys, label_key_ok

_INTEGER_VALUE_PATTERN = r"^[0-9]{1,18}$"

def _unique_spread_keys(items: list[Any]) -> list[Any]:
    keys = [(c.topology_key, c.when_unsatisfiable) for c in items]
    duplicate = next((k for k in keys if keys.count(k) > 1), None)
    if duplicate is not None:
        raise ValueError(f"Duplicate value: topologyKey {duplicate[0]!r} with whenUnsatisfiable {duplicate[1]}")
    return items


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
            cel=cel_label_keys("self.matchLabels"),
            message=(
                "labelSelector.matchLabels keys must be label keys: an optional DNS-subdomain prefix and '/', then at most "
                "63 letters, digits, '-', '_' or '.' starting and ending with a letter or digit: e.g. app.kubernetes.io/name"
            ),
            check=lambda s: all(label_key_ok(k) for k in s.match_labels or {}),
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
