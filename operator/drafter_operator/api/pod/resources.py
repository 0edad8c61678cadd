"""Container resources: CPU, memory and ephemeral-storage requests and limits (GPUs are the operator's own)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from drafter_operator.api.common import ApiModel, Rule
from drafter_operator.api.pod.values import KUBE_QUANTITY_PATTERN, KubeQuantity, parse_kube_quantity, quantity_ok

CONTAINER_RESOURCE_NAMES: tuple[str, ...] = ("cpu", "memory", "ephemeral-storage")
GPU_RESOURCE = "nvidia.com/gpu"
_RESOURCE_NAMES_CEL = "[" + ", ".join(f"'{name}'" for name in CONTAINER_RESOURCE_NAMES) + "]"
ResourceList = Annotated[dict[str, KubeQuantity], Field(max_length=4)]


def _limits_not_below_requests(r: ContainerResources) -> bool:
    for name in CONTAINER_RESOURCE_NAMES:
        request, limit = (r.requests or {}).get(name), (r.limits or {}).get(name)
        if request is None or limit is None or not quantity_ok(request) or not quantity_ok(limit):
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
