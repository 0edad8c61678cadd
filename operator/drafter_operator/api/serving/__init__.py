"""DrafterServing: a target model served by vLLM or SGLang with (or without) a speculative drafter.

The spec by section: target (the model and the engine flags the operator owns), drafter, rollout (resources,
storage, startup, swap), acceptance; spec (the sections together and the rules across them), status, and
problems (what the operator checks and the apiserver cannot). This module holds the kind and re-exports them.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from drafter_operator.api.kind import KindModel
from drafter_operator.api.serving.acceptance import (
    AUTO,
    DECIMAL_OR_AUTO_PATTERN,
    RATIO_OR_AUTO_PATTERN,
    AcceptanceSpec,
    DecimalOrAuto,
    EndpointName,
    RatioOrAuto,
)
from drafter_operator.api.serving.drafter import (
    CONTENT_DIGEST_PATTERN,
    ContentDigest,
    DrafterSpec,
)
from drafter_operator.api.serving.families import DsparkSettings, NgramSettings, SuffixSettings
from drafter_operator.api.serving.retraining import RetrainingSpec, RetrainingTemplate
from drafter_operator.api.serving.sglang_rules import SGLANG_BLOCK_METHODS, SGLANG_REFUSED_METHODS
from drafter_operator.constants import (
    API_GROUP_VERSION,
    DRAFTER_METHODS,
    METHODS_WITH_MODEL,
    SERVING_PLURAL,
    ApiGroupVersion,
    DrafterMethod,
)
from drafter_operator.api.serving.problems import (
    SERVING_OPERATOR_CHECKS,
    capacity_problems,
    extra_args_repeat_problems,
    extra_args_shape_problems,
    image_engine_problems,
    label_key_problem,
    node_selector_problems,
    serving_problems,
)
from drafter_operator.api.serving.rollout import (
    ResourcesSpec,
    StartupSpec,
    StorageSpec,
    SwapSpec,
)
from drafter_operator.api.serving.spec import (
    DrafterServingSpec,
)
from drafter_operator.api.serving.status import (
    AcceptanceStatus,
    AcceptanceThresholdStatus,
    AtPromotionStatus,
    DegradedActionStatus,
    DrafterServingStatus,
    EndpointStatus,
    GatingStatus,
    LastBenchmarkStatus,
    PromotionStatus,
    ReplicaAcceptanceStatus,
    RevisionStatus,
    ScheduleRangeStatus,
    ServingNowStatus,
    SpeculationScheduleStatus,
)
from drafter_operator.api.serving.target import (
    OWNED_FLAG_PREFIXES,
    OWNED_FLAG_SPELLINGS,
    ParserName,
    TargetSpec,
    owned_flag,
)


class DrafterServing(KindModel):
    """A target model served by vLLM or SGLang with a speculative drafter (or none, as a baseline)."""

    kind_name: ClassVar[str] = "DrafterServing"
    plural: ClassVar[str] = SERVING_PLURAL
    singular: ClassVar[str] = "drafterserving"
    short_names: ClassVar[tuple[str, ...]] = ("dsv",)
    printer_columns: ClassVar[tuple[dict[str, Any], ...]] = (
        {"name": "Engine", "type": "string", "jsonPath": ".status.serving.engine"},
        {"name": "Drafter", "type": "string", "jsonPath": ".status.serving.method"},
        {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
        {"name": "Degraded", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Degraded")].status'},
        {"name": "Acceptance", "type": "string", "jsonPath": ".status.display.acceptance"},
        {"name": "Speedup", "type": "string", "jsonPath": ".status.display.speedup"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        {"name": "Revision", "type": "string", "jsonPath": ".status.activeRevision", "priority": 1},
        {"name": "TP", "type": "integer", "jsonPath": ".spec.target.tensorParallelSize", "priority": 1},
    )

    api_version: ApiGroupVersion = API_GROUP_VERSION
    """drafter.dev/v1alpha1"""
    kind: Literal["DrafterServing"] = "DrafterServing"
    """DrafterServing"""
    spec: DrafterServingSpec
    """Desired state."""
    status: DrafterServingStatus | None = None
    """Observed state, written by the operator."""


__all__ = [
    "RetrainingSpec", "RetrainingTemplate",
    "AUTO", "AcceptanceSpec", "AcceptanceStatus", "AcceptanceThresholdStatus", "AtPromotionStatus",
    "CONTENT_DIGEST_PATTERN",
    "ContentDigest", "DECIMAL_OR_AUTO_PATTERN", "DRAFTER_METHODS", "DecimalOrAuto", "DegradedActionStatus",
    "DrafterMethod", "DrafterServing", "DrafterServingSpec", "DrafterServingStatus", "DrafterSpec", "DsparkSettings",
    "EndpointName", "NgramSettings", "SGLANG_BLOCK_METHODS", "SGLANG_REFUSED_METHODS",
    "SuffixSettings",
    "EndpointStatus", "GatingStatus", "LastBenchmarkStatus", "METHODS_WITH_MODEL",
    "OWNED_FLAG_PREFIXES", "OWNED_FLAG_SPELLINGS", "ParserName", "PromotionStatus", "RATIO_OR_AUTO_PATTERN",
    "RatioOrAuto", "ReplicaAcceptanceStatus", "ResourcesSpec", "RevisionStatus", "SERVING_OPERATOR_CHECKS",
    "ScheduleRangeStatus", "ServingNowStatus", "SpeculationScheduleStatus", "StartupSpec", "StorageSpec",
    "SwapSpec", "TargetSpec", "capacity_problems", "extra_args_repeat_problems", "extra_args_shape_problems",
    "image_engine_problems", "label_key_problem", "node_selector_problems", "owned_flag", "serving_problems",
]
