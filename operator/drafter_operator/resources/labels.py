"""Labels and names shared by everything the operator creates for a DrafterServing."""

from __future__ import annotations

from drafter_operator.api.serving import DrafterServingSpec
from drafter_operator.constants import (
    COMPONENT_LABEL,
    INSTANCE_LABEL,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    NAME_LABEL,
    REVISION_LABEL,
    SERVING_LABEL,
)
from drafter_operator.resources.names import DEPLOYMENT_NAME_MAX, child_name

MANAGED_BY = {MANAGED_BY_LABEL: MANAGED_BY_VALUE}


def serving_labels(serving: str) -> dict[str, str]:
    return {NAME_LABEL: "drafter-engine", INSTANCE_LABEL: serving,
            **MANAGED_BY, SERVING_LABEL: serving}


def revision_labels(serving: str, revision: str) -> dict[str, str]:
    return {**serving_labels(serving), COMPONENT_LABEL: "engine", REVISION_LABEL: revision}


def revision_selector(serving: str, revision: str) -> dict[str, str]:
    """The minimal selector of one revision's pods (immutable on a Deployment, so keep it small)."""
    return {SERVING_LABEL: serving, REVISION_LABEL: revision}


def deployment_name(serving: str, revision: str) -> str:
    """The revision's Deployment, ``<serving>-<revision>``: at most 52 + 1 + 10 = 63 characters, so a
    serving's is never shortened (resources/names.py DEPLOYMENT_NAME_MAX)."""
    return child_name(serving, revision, DEPLOYMENT_NAME_MAX)


def drafter_summary(spec: DrafterServingSpec) -> str:
    """A short human description of the drafter, e.g. "eagle3:/models/drafters/kimi-eagle3 k=5"."""
    drafter = spec.drafter
    if drafter.method == "none":
        return "none"
    parts = [drafter.method + (f":{drafter.model}" if drafter.model else "")]
    if drafter.num_speculative_tokens:
        parts.append(f"k={drafter.num_speculative_tokens}")
    if drafter.num_steps:
        parts.append(f"steps={drafter.num_steps}")
    return " ".join(parts)
