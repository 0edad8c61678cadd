"""spec.drafter: the speculative method, its checkpoint and its draft settings per engine."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from drafter_operator.api.common import ApiModel, ModelRef, Rule
from drafter_operator.constants import METHODS_WITH_MODEL, DrafterMethod

# Methods for which the user must give vLLM's num_speculative_tokens (for mtp the renderer defaults it to 1,
# one MTP layer as in DeepSeek-V3/Kimi; vLLM 0.33.0 requires it, see tests/contract).
METHODS_NEEDING_K_ON_VLLM: tuple[str, ...] = (*METHODS_WITH_MODEL, "ngram")

CONTENT_DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"
ContentDigest = Annotated[str, StringConstraints(pattern=CONTENT_DIGEST_PATTERN, max_length=71)]
"""A checkpoint's content digest, "sha256:<64 lowercase hex>" (what a DrafterTraining's Export records)."""


class DrafterSpec(ApiModel):
    """The speculative drafter. method none serves without speculation: the baseline every speedup is measured against."""

    rules = (
        Rule(
            cel=(
                "self.method != 'none' || (!has(self.model) && !has(self.numSpeculativeTokens) && !has(self.numSteps) "
                "&& !has(self.eagleTopk) && !has(self.numDraftTokens))"
            ),
            message=(
                "spec.drafter.method none serves without speculation: remove drafter.model, numSpeculativeTokens, "
                "numSteps, eagleTopk and numDraftTokens, or choose a method"
            ),
            check=lambda d: d.method != "none" or all(
                v is None for v in (d.model, d.num_speculative_tokens, d.num_steps, d.eagle_topk, d.num_draft_tokens)
            ),
            reason="FieldValueForbidden",
        ),
        Rule(
            cel="!(self.method in ['eagle3', 'eagle', 'draftModel']) || has(self.model)",
            message=(
                "spec.drafter.model is required for methods eagle3, eagle and draftModel: set it to the drafter "
                "checkpoint (a path on the model volume or a hub id)"
            ),
            check=lambda d: d.method not in METHODS_WITH_MODEL or d.model is not None,
            field_path=".model",
            reason="FieldValueRequired",
        ),
        Rule(
            cel="self.method != 'ngram' || !has(self.model)",
            message="spec.drafter.model must be empty for method ngram (n-gram speculation drafts from the prompt): remove it",
            check=lambda d: d.method != "ngram" or d.model is None,
            field_path=".model",
            reason="FieldValueForbidden",
        ),
        Rule(
            cel=(
                "!has(self.eagleTopk) || self.eagleTopk != 1 || !has(self.numSteps) || !has(self.numDraftTokens) "
                "|| self.numDraftTokens == self.numSteps + 1"
            ),
            message=(
                "spec.drafter.numDraftTokens must equal numSteps + 1 when eagleTopk is 1 (SGLang would silently "
                "change it): e.g. numSteps 3, eagleTopk 1, numDraftTokens 4"
            ),
            check=lambda d: d.eagle_topk != 1 or d.num_steps is None or d.num_draft_tokens is None
            or d.num_draft_tokens == d.num_steps + 1,
            field_path=".numDraftTokens",
        ),
        Rule(
            cel="!has(self.contentDigest) || has(self.model)",
            message="spec.drafter.contentDigest names what is at drafter.model: set drafter.model or remove contentDigest",
            check=lambda d: d.content_digest is None or d.model is not None,
            field_path=".contentDigest",
            reason="FieldValueForbidden",
        ),
        Rule(
            cel="self.method != 'none' || !has(self.dynamic)",
            message="spec.drafter.dynamic needs speculation but spec.drafter.method is none: remove dynamic or choose a method",
            check=lambda d: d.method != "none" or d.dynamic is None,
            field_path=".dynamic",
            reason="FieldValueForbidden",
        ),
    )

    method: DrafterMethod
    """eagle3, eagle, mtp (the target's own multi-token-prediction layers), ngram (prompt lookup), draftModel (a small LLM), or none."""
    model: ModelRef | None = None
    """The drafter checkpoint: a path on the model volume or a hub id. Required for eagle3, eagle and draftModel."""
    content_digest: ContentDigest | None = None
    """What is at drafter.model, as "sha256:<64 hex>": set by a DrafterTraining's Promote to the digest its Export recorded (drafter-digest.json beside the weights). Part of the revision's identity, so changing it starts a new revision even at the same path (a retrained drafter exported over the old one); the operator does not read the files to check it."""
    num_speculative_tokens: Annotated[int, Field(ge=1, le=16)] | None = None
    """vLLM only: tokens drafted per step (num_speculative_tokens), e.g. 5. Required on vLLM except for mtp."""
    num_steps: Annotated[int, Field(ge=1, le=32)] | None = None
    """SGLang only: draft steps per verification (--speculative-num-steps), e.g. 3. Unset: SGLang chooses steps, eagleTopk and numDraftTokens together (3, 1, 4 for DeepSeek-V3/Kimi), so set it whenever you set either of the others. Not for ngram (SGLang derives it)."""
    eagle_topk: Annotated[int, Field(ge=1, le=64)] | None = None
    """SGLang only: branching factor of the draft tree (--speculative-eagle-topk), e.g. 1. Not for ngram: SGLang replaces it with its n-gram BFS breadth (10)."""
    num_draft_tokens: Annotated[int, Field(ge=1, le=256)] | None = None
    """SGLang only: tokens verified per step (--speculative-num-draft-tokens), e.g. 4; numSteps + 1 when eagleTopk is 1. The one ngram setting on SGLang (default 12; steps become numDraftTokens // 10)."""
    dynamic: Literal["fromBenchmark"] | None = None
    """vLLM only: load-aware speculation. fromBenchmark drafts numSpeculativeTokens below the break-even of the serving's last gate benchmark with a load sweep (where the speedup crosses 1.0 between the last level at or above 1.0x and the first below, which the sweep brackets within 10%) and none from it upwards (vLLM's num_speculative_tokens_per_batch_size). Until such a sweep exists the static k is served; status.speculationSchedule says which. SGLang has no per-batch-size control."""
    allow_known_bad: bool = True
    """Serve a combination listed as known-bad (engine version x method x architecture) with a warning; false refuses it."""
