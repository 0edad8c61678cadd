"""Placement: where the pods may run (the GPU product, node labels, tolerations, affinity, topology spread)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from drafter_operator.api.common import LABEL_VALUE_PATTERN, ApiModel, LabelValue, Rule
from drafter_operator.api.pod.scheduling import Affinity, TopologySpreadConstraints


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
