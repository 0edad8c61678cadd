"""DrafterTraining: train (or fine-tune) a drafter (EAGLE-3, DFlash or DSpark) for a target, stage by stage.

sections (target, storage, data, hidden states, train, output, promote, resources), spec (the sections together
and the path rules across them), status, problems (what the operator checks and the apiserver cannot). This
module holds the kind and re-exports them.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from drafter_operator.api.kind import KindModel
from drafter_operator.api.training.problems import (
    TRAINING_OPERATOR_CHECKS,
    training_problems,
)
from drafter_operator.api.training.sections import (
    LEARNING_RATE_PATTERN,
    STAGES,
    CapturedData,
    DataSpec,
    GenerationSpec,
    HiddenStatesSpec,
    HiddenStatesStorage,
    OutputSpec,
    PromoteSpec,
    TrainSpec,
    TrainingResources,
    TrainingStorage,
    TrainingTarget,
)
from drafter_operator.api.training.spec import (
    DrafterTrainingSpec,
)
from drafter_operator.api.training.status import (
    Artifact,
    DrafterTrainingStatus,
    EvaluationResult,
    HiddenStatesStatus,
    TrainingProgress,
)
from drafter_operator.constants import API_GROUP_VERSION, TRAINING_PLURAL, ApiGroupVersion


class DrafterTraining(KindModel):
    """Train or fine-tune a drafter (EAGLE-3, DFlash or DSpark): generate -> extract -> train -> export -> evaluate -> promote."""

    kind_name: ClassVar[str] = "DrafterTraining"
    plural: ClassVar[str] = TRAINING_PLURAL
    singular: ClassVar[str] = "draftertraining"
    short_names: ClassVar[tuple[str, ...]] = ("dtrain",)
    printer_columns: ClassVar[tuple[dict[str, Any], ...]] = (
        {"name": "Stage", "type": "string", "jsonPath": ".status.stage"},
        {"name": "Progress", "type": "string", "jsonPath": ".status.progress.summary"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    )

    api_version: ApiGroupVersion = API_GROUP_VERSION
    """drafter.dev/v1alpha1"""
    kind: Literal["DrafterTraining"] = "DrafterTraining"
    """DrafterTraining"""
    spec: DrafterTrainingSpec
    """Desired training run."""
    status: DrafterTrainingStatus | None = None
    """Observed state, written by the operator."""


__all__ = [
    "Artifact", "CapturedData", "DataSpec", "DrafterTraining", "DrafterTrainingSpec", "DrafterTrainingStatus", "EvaluationResult",
    "GenerationSpec", "HiddenStatesSpec", "HiddenStatesStatus", "HiddenStatesStorage", "LEARNING_RATE_PATTERN",
    "OutputSpec", "PromoteSpec", "STAGES", "TRAINING_OPERATOR_CHECKS", "TrainSpec", "TrainingProgress",
    "TrainingResources", "TrainingStorage", "TrainingTarget", "training_problems",
]
