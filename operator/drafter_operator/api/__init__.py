"""The drafter.dev/v1alpha1 API: pydantic models (the single source of truth) and the CRDs generated from them.

    from drafter_operator.api import DrafterServing, serving_problems, parse_duration
    serving = DrafterServing.model_validate(body)      # a kopf body or `kubectl get -o json` output
    problems = serving_problems(serving.spec)          # what the apiserver could not check
"""

from __future__ import annotations

from drafter_operator.api.benchmark import (
    BENCHMARK_OPERATOR_CHECKS,
    DrafterBenchmark,
    DrafterBenchmarkSpec,
    DrafterBenchmarkStatus,
    benchmark_problems,
)
from drafter_operator.api.common import (
    Condition,
    Rule,
    condition,
    format_duration,
    parse_decimal,
    parse_duration,
)
from drafter_operator.api.kind import KindModel
from drafter_operator.api.schema import crd_manifest, model_schema, structural_problems
from drafter_operator.api.serving import (
    OWNED_FLAG_SPELLINGS,
    SERVING_OPERATOR_CHECKS,
    DrafterServing,
    DrafterServingSpec,
    DrafterServingStatus,
    owned_flag,
    serving_problems,
)
from drafter_operator.api.training import (
    TRAINING_OPERATOR_CHECKS,
    DrafterTraining,
    DrafterTrainingSpec,
    DrafterTrainingStatus,
    training_problems,
)

KINDS: tuple[type[KindModel], ...] = (DrafterServing, DrafterBenchmark, DrafterTraining)
KIND_BY_NAME: dict[str, type[KindModel]] = {kind.kind_name: kind for kind in KINDS}
OPERATOR_CHECKS: dict[str, tuple[str, ...]] = {
    "DrafterServing": SERVING_OPERATOR_CHECKS,
    "DrafterBenchmark": BENCHMARK_OPERATOR_CHECKS,
    "DrafterTraining": TRAINING_OPERATOR_CHECKS,
}


def parse_object(obj: dict) -> KindModel:
    """Any drafter.dev object (by its kind) -> its model. Raises KeyError for other kinds."""
    return KIND_BY_NAME[obj["kind"]].model_validate(obj)


__all__ = [
    "KINDS", "KIND_BY_NAME", "OPERATOR_CHECKS", "OWNED_FLAG_SPELLINGS",
    "Condition", "Rule", "KindModel",
    "DrafterServing", "DrafterServingSpec", "DrafterServingStatus",
    "DrafterBenchmark", "DrafterBenchmarkSpec", "DrafterBenchmarkStatus",
    "DrafterTraining", "DrafterTrainingSpec", "DrafterTrainingStatus",
    "benchmark_problems", "condition", "crd_manifest", "format_duration", "model_schema", "owned_flag",
    "parse_decimal", "parse_duration", "parse_object", "serving_problems", "structural_problems", "training_problems",
]
