"""What every rule reads (Context: the checkpoints, the engine and how it loads a drafter, the method, the drafter
as the engine sees it) and writes (Report: problems, warnings and ok lines; Context.facts for the verdict)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from drafter_operator import engines as engine_modules
from drafter_operator.engines.checkpoint_loading import CheckpointLoading
from drafter_operator.preflight import engines as eng
from drafter_operator.preflight.checkpoint import Checkpoint
from drafter_operator.preflight.safetensors import TensorInfo
from drafter_operator.preflight.verdict import Finding

# The methods with rules are constants.CHECKED_METHODS (each family's checks, families.py). Methods whose drafter
# checkpoint is optional are constants.METHODS_IN_TARGET: mtp drafts with the target's layers, dspark with the
# target's bundled DSpark head (DeepSeek-V4 style) when no drafter is given.
MAPPING_READ_LIMIT = 64 * 1024 * 1024


@dataclass
class Context:
    engine: str
    method: str
    target: Checkpoint
    drafter: Checkpoint | None
    trained_convention: str | None = None  # as given; None: inferred from the checkpoint's format
    vllm_runner: str = "v2"
    facts: dict[str, Any] = field(default_factory=dict)
    num_speculative_tokens: int | None = None  # spec.drafter.numSpeculativeTokens, when known

    # -- the drafter as the engine sees it ---------------------------------------------------------
    @property
    def raw(self) -> dict[str, Any]:
        return (self.drafter.config if self.drafter else None) or {}

    @property
    def is_speculators(self) -> bool:
        return "speculators_model_type" in self.raw

    @property
    def speculators_refused(self) -> bool:
        """A speculators checkpoint on an engine that cannot read the format (its READS_SPECULATORS_FORMAT)."""
        return self.is_speculators and not engine_modules.engine(self.engine).READS_SPECULATORS_FORMAT

    @property
    def checkpoint_loading(self) -> CheckpointLoading:
        """How the engine loads a drafter checkpoint (its module's CHECKPOINT_LOADING): what a rule asks where the
        engines differ, instead of the engine's name."""
        return engine_modules.engine(self.engine).CHECKPOINT_LOADING

    @property
    def draft(self) -> dict[str, Any]:
        """The drafter's config as vLLM reads it (speculators: the transformer_layer_config view)."""
        return eng.speculators_as_vllm_config(self.raw) if self.is_speculators else self.raw

    @property
    def target_config(self) -> dict[str, Any]:
        return self.target.text_config()

    @property
    def target_architecture(self) -> str | None:
        archs = (self.target.config or {}).get("architectures") or []
        return archs[0] if archs else None

    def target_int(self, key: str) -> int | None:
        value = self.target_config.get(key)
        return int(value) if isinstance(value, int) and not isinstance(value, bool) else None

    def draft_int(self, key: str) -> int | None:
        value = self.draft.get(key)
        return int(value) if isinstance(value, int) and not isinstance(value, bool) else None

    def draft_tensor(self, *names: str) -> TensorInfo | None:
        if self.drafter is None:
            return None
        for name in names:
            for candidate in (name, "model." + name):
                if candidate in self.drafter.tensors:
                    return self.drafter.tensors[candidate]
        return None

    @property
    def has_tensors(self) -> bool:
        return bool(self.drafter and self.drafter.tensors)


class Report:
    def __init__(self) -> None:
        self.findings: list[Finding] = []

    def problem(self, check: str, reason: str, message: str, fix: str = "") -> None:
        self.findings.append(Finding(check, "problem", reason, message, fix))

    def warning(self, check: str, reason: str, message: str, fix: str = "") -> None:
        self.findings.append(Finding(check, "warning", reason, message, fix))

    def ok(self, check: str, message: str) -> None:
        self.findings.append(Finding(check, "ok", "", message))


def shape(t: TensorInfo | None) -> str:
    return "absent" if t is None else f"{t.dtype}{list(t.shape)}"
