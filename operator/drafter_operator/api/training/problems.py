"""What the operator checks in a DrafterTrainingSpec and the apiserver cannot (filed as a condition)."""

from __future__ import annotations

from typing import Any

from drafter_operator import engines
from drafter_operator.api.training.spec import DrafterTrainingSpec

# What training_problems() checks, for docs/api.md (one line per check).
TRAINING_OPERATOR_CHECKS: tuple[str, ...] = (
    "spec.promote.servingRef names an existing DrafterServing.",
    "the promote DrafterServing serves spec.target.model.",
    "spec.hiddenStates.layers lie inside the target's layers (from its config.json).",
    "spec.data.maxTokens is below spec.train.maxLength (answers would be cut in training).",
    "spec.output.path neither is, contains nor lies under a path a DrafterServing of the namespace loads on the same "
    "claim (spec, revisions, degraded action), before every Job stage (OutputInUse; overwrite does not lift it).",
    "in the stage pods: spec.output.path does not exist unless spec.output.overwrite (OutputExists), and its parent "
    "directory exists, writable by UID/GID 1000 (OutputParentNotWritable), checked by every stage before Export and "
    "again by Export.",
)


def training_problems(spec: DrafterTrainingSpec, *, serving: Any = None, num_target_layers: int | None = None) -> list[str]:
    """Problems the apiserver cannot detect, each naming the field and the fix.

    `serving` is the DrafterServingSpec that spec.promote.servingRef names (None when not found);
    `num_target_layers` is the target's num_hidden_layers from its config.json, when known.
    """
    problems: list[str] = []
    if spec.promote is not None:
        if serving is None:
            problems.append(
                f"spec.promote.servingRef: DrafterServing {spec.promote.serving_ref.name!r} not found in this namespace: "
                "create it or fix the name"
            )
        elif serving.target.model != spec.target.model:
            problems.append(
                f"spec.promote.servingRef: DrafterServing {spec.promote.serving_ref.name!r} serves {serving.target.model!r}, "
                f"not spec.target.model {spec.target.model!r}: a drafter only fits the target it was trained for"
            )
        elif spec.framework == "speculators" and not engines.engine(serving.engine).READS_SPECULATORS_FORMAT:
            # The preflight's SpeculatorsFormatOnSglang: SGLang 0.5.23 reads draft configs with transformers'
            # AutoConfig, and a speculators checkpoint has no model_type; the swap would be refused after training.
            problems.append(
                f"spec.promote.servingRef: DrafterServing {spec.promote.serving_ref.name!r} runs SGLang, which cannot "
                "load a speculators checkpoint (SGLang 0.5.23 reads draft configs with transformers' AutoConfig; the "
                "speculators format has no model_type): promote into a vLLM serving, or train with framework "
                "specforge (method eagle3)"
            )
    if num_target_layers is not None and spec.hidden_states.layers:
        outside = [layer for layer in spec.hidden_states.layers if layer >= num_target_layers]
        if outside:
            problems.append(
                f"spec.hiddenStates.layers {outside} lie outside the target's {num_target_layers} layers "
                f"(0-{num_target_layers - 1}): choose layers below {num_target_layers}"
            )
    if spec.data.max_tokens >= spec.train.max_length:
        problems.append(
            f"spec.data.maxTokens {spec.data.max_tokens} is not below spec.train.maxLength {spec.train.max_length}: "
            "generated answers would be cut in training; raise train.maxLength or lower data.maxTokens"
        )
    return problems
