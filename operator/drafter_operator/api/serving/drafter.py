"""spec.drafter: the speculative method, its checkpoint and its draft settings per engine."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from drafter_operator.api.common import ApiModel, ModelRef, Rule, cel_in, needs_rule, spoken
from drafter_operator.api.serving.families import DsparkSettings, NgramSettings, SuffixSettings
from drafter_operator.constants import METHODS_WITH_MODEL, METHODS_WITHOUT_MODEL, DrafterMethod
from drafter_operator.engines import vllm
from drafter_operator.families import settings_methods

#: Each per-family settings object (its JSON name) and the methods it belongs to (their families' records).
FAMILY_SETTINGS: dict[str, tuple[str, ...]] = settings_methods()


def _family_rule(name: str, methods: tuple[str, ...]) -> Rule:
    """spec.drafter.<name> only with its methods."""
    return Rule(
        cel=f"!has(self.{name}) || {cel_in('self.method', methods)}",
        message=(f"spec.drafter.{name} holds settings of method {spoken(methods, 'or')} only: remove it or set "
                 f"spec.drafter.method to {spoken(methods, 'or')}"),
        check=lambda d: getattr(d, name) is None or d.method in methods,
        field_path=f".{name}",
        reason="FieldValueForbidden",
    )

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
            cel=f"!({cel_in('self.method', METHODS_WITH_MODEL)}) || has(self.model)",
            message=(
                f"spec.drafter.model is required for methods {spoken(METHODS_WITH_MODEL)}: set it to the drafter "
                "checkpoint (a path on the model volume or a hub id)"
            ),
            check=lambda d: d.method not in METHODS_WITH_MODEL or d.model is not None,
            field_path=".model",
            reason="FieldValueRequired",
        ),
        Rule(
            cel=f"!({cel_in('self.method', METHODS_WITHOUT_MODEL)}) || !has(self.model)",
            message=(
                f"spec.drafter.model must be empty for methods {spoken(METHODS_WITHOUT_MODEL)} (they draft from the "
                "text itself, with no model): remove it"
            ),
            check=lambda d: d.method not in METHODS_WITHOUT_MODEL or d.model is None,
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
        needs_rule("contentDigest", "model", "spec.drafter.contentDigest names what is at drafter.model: set "
                   "drafter.model or remove contentDigest", field_path=".contentDigest", reason="FieldValueForbidden"),
        Rule(
            cel="self.method != 'none' || !has(self.dynamic)",
            message="spec.drafter.dynamic needs speculation but spec.drafter.method is none: remove dynamic or choose a method",
            check=lambda d: d.method != "none" or d.dynamic is None,
            field_path=".dynamic",
            reason="FieldValueForbidden",
        ),
        Rule(
            cel=f"!has(self.dynamic) || !({cel_in('self.method', vllm.METHODS_WITHOUT_DYNAMIC)})",
            message=(
                f"spec.drafter.dynamic is not kept by vLLM 0.33.0 for method {spoken(vllm.METHODS_WITHOUT_DYNAMIC, 'or')}: "
                "it runs on Model Runner V1, which silently drops the per-batch-size schedule for it; remove dynamic "
                "(suffix decoding already sizes each draft by its own match)"
            ),
            check=lambda d: d.dynamic is None or d.method not in vllm.METHODS_WITHOUT_DYNAMIC,
            field_path=".dynamic",
            reason="FieldValueForbidden",
        ),
        Rule(
            cel=f"!has(self.dynamic) || self.method != '{vllm.K_FROM_BLOCK_SIZE}' || has(self.numSpeculativeTokens)",
            message=(
                "spec.drafter.dynamic with method dspark needs spec.drafter.numSpeculativeTokens: the schedule drafts "
                "k below the break-even and vLLM would otherwise take k from the draft's block size, which the "
                "operator does not read; set it (e.g. the block size, 7)"
            ),
            check=lambda d: d.dynamic is None or d.method != vllm.K_FROM_BLOCK_SIZE or d.num_speculative_tokens is not None,
            field_path=".numSpeculativeTokens",
            reason="FieldValueRequired",
        ),
        *(_family_rule(name, methods) for name, methods in FAMILY_SETTINGS.items()),
        Rule(
            cel="!has(self.dspark) || !has(self.dspark.draftTopk) || has(self.model)",
            message=(
                "spec.drafter.dspark.draftTopk needs a Qwen3 DSpark draft in spec.drafter.model (vLLM 0.33.0 refuses "
                "it for other architectures, such as DSpark weights bundled in the target): set model or remove draftTopk"
            ),
            check=lambda d: d.dspark is None or d.dspark.draft_topk is None or d.model is not None,
            field_path=".dspark.draftTopk",
            reason="FieldValueForbidden",
        ),
    )

    method: DrafterMethod
    """How drafts are made. eagle3 and eagle: an EAGLE head (drafter.model). mtp: the target's own multi-token-prediction layers (the engines pick the variant from the target's architecture: DeepSeek-V3/R1, V3.2 and V4 families; not Kimi-K2 on vLLM). ngram: prompt lookup. ngramGpu: vLLM's GPU prompt lookup (vLLM only). suffix: vLLM's suffix decoding, drafting from this and earlier requests' text (vLLM only; needs arctic-inference in the image). dflash: a DFlash block-diffusion draft (drafter.model). dspark: a DSpark draft (drafter.model, or unset for the weights bundled in the target, as DeepSeek-V4.1-Flash ships them). draftModel: a small LLM with the target's vocabulary. none: no speculation."""
    model: ModelRef | None = None
    """The drafter checkpoint: a path on the model volume or a hub id. Required for eagle3, eagle, draftModel and dflash; optional for mtp and dspark (the target); forbidden for ngram, ngramGpu and suffix."""
    content_digest: ContentDigest | None = None
    """What is at drafter.model, as "sha256:<64 hex>": set by a DrafterTraining's Promote to the digest its Export recorded (drafter-digest.json beside the weights). Part of the revision's identity, so changing it starts a new revision even at the same path (a retrained drafter exported over the old one); the operator does not read the files to check it."""
    num_speculative_tokens: Annotated[int, Field(ge=1, le=16)] | None = None
    """Tokens drafted per step (k), e.g. 5. vLLM: num_speculative_tokens, required except for mtp (default 1), dspark (the draft's block size) and suffix (an upper bound per request; default the tree depth). SGLang: only for dflash (--speculative-dflash-block-size k+1, the block holds the anchor) and dspark (--speculative-dspark-block-size k); unset, SGLang reads the draft's block size."""
    num_steps: Annotated[int, Field(ge=1, le=32)] | None = None
    """SGLang only: draft steps per verification (--speculative-num-steps), e.g. 3. Unset: SGLang chooses steps, eagleTopk and numDraftTokens together (3, 1, 4 for DeepSeek-V3/Kimi), so set it whenever you set either of the others. Not for ngram (SGLang derives it)."""
    eagle_topk: Annotated[int, Field(ge=1, le=64)] | None = None
    """SGLang only: branching factor of the draft tree (--speculative-eagle-topk), e.g. 1. Not for ngram: SGLang replaces it with its n-gram BFS breadth (10)."""
    num_draft_tokens: Annotated[int, Field(ge=1, le=256)] | None = None
    """SGLang only: tokens verified per step (--speculative-num-draft-tokens), e.g. 4; numSteps + 1 when eagleTopk is 1. The one ngram setting on SGLang (default 12; steps become numDraftTokens // 10)."""
    dynamic: Literal["fromBenchmark"] | None = None
    """Load-aware speculation. fromBenchmark drafts, at each batch size, the k from 0 to the spec's (vLLM numSpeculativeTokens, SGLang numSteps) that the load sweep of the serving's static-k revision predicts pays best there (from its step costs and per-position acceptance; without acceptance in the sweep, the spec's k below the break-even and none from it). vLLM runs it as num_speculative_tokens_per_batch_size, SGLang as its adaptive speculation (tiers of candidate steps). Until such a sweep exists the static k is served; status.speculationSchedule says which."""
    suffix: SuffixSettings | None = None
    """vLLM suffix decoding settings (method suffix only)."""
    ngram: NgramSettings | None = None
    """vLLM prompt-lookup settings (methods ngram and ngramGpu on vLLM only; SGLang's NGRAM is tuned with numDraftTokens)."""
    dspark: DsparkSettings | None = None
    """vLLM DSpark settings (method dspark on vLLM only)."""
    allow_known_bad: bool = True
    """Serve a combination listed as known-bad (engine version x method x architecture) with a warning; false refuses it."""
