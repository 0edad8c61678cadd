"""DrafterTrainingSpec: the sections together, and the path rules across them (every path normalised, on the
model volume, and the output apart from every model and dataset it could overwrite)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import Field

from drafter_operator.api.common import (
    PATH_FIX,
    ApiModel,
    Image,
    ModelRef,
    QueueName,
    Rule,
    cel_path_normalised,
    cel_paths_overlap,
    path_normalised,
    path_on_mount,
    paths_overlap,
)
from drafter_operator.api.pod import EnvFromSources, EnvVars, Placement, PodPolicy
from drafter_operator.api.training.sections import (
    DataSpec,
    HiddenStatesSpec,
    OutputSpec,
    PromoteSpec,
    TrainSpec,
    TrainingLimits,
    TrainingResources,
    TrainingStorage,
    TrainingTarget,
)
from drafter_operator.constants import TrainedMethod


def _apart(output: str, other: str | None) -> bool:
    """output.path neither is, contains nor lies under ``other`` (unset or a hub id: nothing to overwrite)."""
    return other is None or not other.startswith("/") or not paths_overlap(output, other)


def _normalised_rule(field: str, attr: Callable[[Any], str | None], example: str, optional: bool = False) -> Rule:
    """The rule that the path field ``field`` (JSON path under spec) is normalised."""
    cel = cel_path_normalised(f"self.{field}")
    return Rule(
        cel=f"!has(self.{field}) || {cel}" if optional else cel,
        message=f"spec.{field} must be a normalised absolute path ({PATH_FIX}): e.g. {example}",
        check=lambda s: path_normalised(attr(s)),
        field_path=f".{field}",
    )


def _under_mount_rule(field: str, attr: Callable[[Any], str | None], optional: bool = False) -> Rule:
    cel = f"!self.{field}.startsWith('/') || self.{field}.startsWith(self.storage.mountPath + '/')"
    return Rule(
        cel=f"!has(self.{field}) || {cel}" if optional else cel,
        message=f"spec.{field} is an absolute path outside spec.storage.mountPath: put it under mountPath or use a hub id",
        check=lambda s: path_on_mount(attr(s), s.storage.mount_path),
        field_path=f".{field}",
    )


def _apart_rule(field: str, attr: Callable[[Any], str | None], optional: bool = False) -> Rule:
    cel = f"!self.{field}.startsWith('/') || !{cel_paths_overlap('self.output.path', f'self.{field}')}"
    return Rule(
        cel=f"!has(self.{field}) || {cel}" if optional else cel,
        message=(f"spec.output.path must not overwrite spec.{field}: it is, contains or lies under it; "
                 "choose a directory of its own, e.g. /models/drafters/my-drafter"),
        check=lambda s: _apart(s.output.path, attr(s)),
        field_path=".output.path",
    )


class DrafterTrainingSpec(ApiModel):
    """Desired training run."""

    rules = (
        Rule(
            cel="self.resources.gpus % self.target.tensorParallelSize == 0",
            message="spec.target.tensorParallelSize must divide spec.resources.gpus (default 8): e.g. 8 and 8",
            check=lambda s: s.resources.gpus % s.target.tensor_parallel_size == 0,
            field_path=".target.tensorParallelSize",
        ),
        Rule(
            cel="self.output.path.startsWith(self.storage.mountPath + '/')",
            message=(
                "spec.output.path must be under spec.storage.mountPath (the drafter is written to the model volume, "
                "where servings load it): e.g. /models/drafters/kimi-k25-eagle3"
            ),
            check=lambda s: s.output.path.startswith(s.storage.mount_path + "/"),
            field_path=".output.path",
        ),
        Rule(
            # Export may write only the output's parent directory (resources/training_job.py): that must
            # not be the volume's root, where the target and every other model live.
            cel="!self.output.path.startsWith(self.storage.mountPath + '/') || self.output.path.lastIndexOf('/') > size(self.storage.mountPath)",
            message=(
                "spec.output.path must be in a directory of its own under spec.storage.mountPath (Export may write "
                "only the output's parent directory, never the volume's root): e.g. /models/drafters/kimi-k25-eagle3"
            ),
            check=lambda s: not s.output.path.startswith(s.storage.mount_path + "/")
            or s.output.path.rfind("/") > len(s.storage.mount_path),
            field_path=".output.path",
        ),
        _normalised_rule("output.path", lambda s: s.output.path, "/models/drafters/kimi-k25-eagle3"),
        _normalised_rule("target.model", lambda s: s.target.model, "/models/Kimi-K2.5"),
        _normalised_rule("baseDrafter", lambda s: s.base_drafter, "/models/drafters/kimi-k2-eagle3", optional=True),
        _normalised_rule("data.dataset", lambda s: s.data.dataset, "/models/datasets/prompts.jsonl", optional=True),
        _under_mount_rule("target.model", lambda s: s.target.model),
        _under_mount_rule("baseDrafter", lambda s: s.base_drafter, optional=True),
        _under_mount_rule("data.dataset", lambda s: s.data.dataset, optional=True),
        Rule(
            cel="self.framework != 'specforge' || has(self.data.chatTemplate)",
            message="spec.data.chatTemplate is required with framework specforge (its loss masks follow the target's template): e.g. kimi-k2-instruct, deepseek-v3, qwen or llama3",
            check=lambda s: s.framework != "specforge" or s.data.chat_template is not None,
            field_path=".data.chatTemplate",
            reason="FieldValueRequired",
        ),
        Rule(
            # SpecForge 0.2.0 trains the DFlash family from a capture layout of its own (hidden states
            # without the EAGLE-3 target projection, DSpark's with the target's last layer), which the Extract
            # stage does not write; speculators 0.9.0 trains both from the hidden states it extracts for EAGLE-3.
            cel="self.method == 'eagle3' || self.framework == 'speculators'",
            message="spec.method dflash and dspark train with spec.framework speculators (this operator trains them "
                    "with speculators 0.9.0 only): set framework: speculators, or method: eagle3",
            check=lambda s: s.method == "eagle3" or s.framework == "speculators",
            field_path=".method",
        ),
        Rule(
            cel="self.method != 'eagle3' || !has(self.hiddenStates.layers) || size(self.hiddenStates.layers) == 3",
            message="spec.hiddenStates.layers must name three layers (low, middle, high) for method eagle3, "
                    "e.g. [2, 30, 58]; dflash and dspark take one to eight",
            check=lambda s: s.method != "eagle3" or s.hidden_states.layers is None or len(s.hidden_states.layers) == 3,
            field_path=".hiddenStates.layers",
        ),
        _apart_rule("target.model", lambda s: s.target.model),
        _apart_rule("baseDrafter", lambda s: s.base_drafter, optional=True),
        _apart_rule("data.dataset", lambda s: s.data.dataset, optional=True),
    )

    target: TrainingTarget
    """The target model."""
    base_drafter: ModelRef | None = None
    """A drafter checkpoint to fine-tune from (path or hub id), e.g. AQ-MedAI/Kimi-K2-Instruct-eagle3; unset trains from scratch."""
    framework: Literal["specforge", "speculators"] = "specforge"
    """Training framework: specforge (SGLang's) or speculators (vLLM's)."""
    method: TrainedMethod = "eagle3"
    """The drafter family trained: eagle3, dflash (block drafting) or dspark (block drafting with a confidence head); dflash and dspark need framework speculators. A promoted drafter is served with the same spec.drafter.method."""
    image: Image | None = None
    """Trainer image; defaults from the operator's configuration."""
    storage: TrainingStorage
    """The model volume."""
    data: DataSpec
    """Training data."""
    hidden_states: HiddenStatesSpec
    """Hidden-state extraction."""
    train: TrainSpec = Field(default_factory=TrainSpec)
    """Hyper-parameters."""
    output: OutputSpec
    """Where the drafter goes."""
    promote: PromoteSpec | None = None
    """Optional: benchmark and swap the new drafter into a serving."""
    resources: TrainingResources = Field(default_factory=TrainingResources)
    """Resources of each stage pod."""
    placement: Placement | None = None
    """Where the stage pods may run."""
    env: EnvVars | None = None
    """Variables of the stage containers (Kubernetes EnvVar), e.g. NCCL settings or HF_TOKEN from a Secret through valueFrom."""
    env_from: EnvFromSources | None = None
    """Every key of a Secret or ConfigMap as a variable of the stage containers, e.g. {secretRef: {name: hf-token}}."""
    pod: PodPolicy | None = None
    """Pod settings of the stage pods: labels, annotations, serviceAccountName, imagePullSecrets, priorityClassName, runtimeClassName, security contexts."""
    limits: TrainingLimits = Field(default_factory=TrainingLimits)
    """Stage deadlines and disruption retries."""
    queue_name: QueueName | None = None
    """A Kueue LocalQueue in this namespace: every stage Job is created suspended in it and runs once Kueue admits all its pods at once (a stage across nodes is admitted whole or not at all); status says Queued, with Kueue's reason, while a stage waits. Unset: stages start at once. Generate's engine pod is not queued."""
