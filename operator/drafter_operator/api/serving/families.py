"""spec.drafter's per-family settings: one nullable object per family, allowed only with its method (the rules
in drafter.py and spec.py). Every field defaults to None, so an object without them keeps its revision hash.

The bounds are vLLM 0.33.0's own (vllm/config/speculative.py: prompt lookup at 503-509 and 1300-1327, suffix
decoding at 538-556 and 1740-1760, DSpark at 585 and 642); tests/contract holds the rendering to that class.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from drafter_operator.api.common import ApiModel, Decimal, Ratio, Rule


class SuffixSettings(ApiModel):
    """vLLM suffix decoding (method suffix): drafts from a suffix tree of this request's prompt and output and of earlier requests' outputs, with no model. Unset fields keep vLLM's defaults."""

    max_tree_depth: Annotated[int, Field(ge=1, le=1024)] | None = None
    """Deepest suffix tree vLLM builds, which bounds the prefix match plus the speculated tokens (suffix_decoding_max_tree_depth; vLLM's default 24). It is also the draft length when numSpeculativeTokens is unset."""
    max_cached_requests: Annotated[int, Field(ge=0, le=10_000_000)] | None = None
    """Earlier requests whose outputs the global suffix tree keeps (suffix_decoding_max_cached_requests; vLLM's default 10000); 0 drafts from the current request only."""
    max_spec_factor: Decimal | None = None
    """At most this many tokens are speculated per matched token, e.g. "1.0" (suffix_decoding_max_spec_factor; vLLM's default 1.0): a long match drafts more."""
    min_token_prob: Ratio | None = None
    """Tokens whose estimated probability in the tree is below this are not speculated, e.g. "0.1" (suffix_decoding_min_token_prob; vLLM's default 0.1)."""


class NgramSettings(ApiModel):
    """vLLM prompt lookup (methods ngram and ngramGpu): the n-gram lengths matched against the text so far. Setting one sets both (vLLM copies it to the other); unset, both are 5."""

    rules = (
        Rule(
            cel="!has(self.promptLookupMin) || !has(self.promptLookupMax) || self.promptLookupMin <= self.promptLookupMax",
            message=(
                "spec.drafter.ngram.promptLookupMin must not exceed promptLookupMax (vLLM refuses it): e.g. "
                "promptLookupMin 2, promptLookupMax 5"
            ),
            check=lambda n: n.prompt_lookup_min is None or n.prompt_lookup_max is None
            or n.prompt_lookup_min <= n.prompt_lookup_max,
            field_path=".promptLookupMin",
        ),
    )

    prompt_lookup_min: Annotated[int, Field(ge=1, le=64)] | None = None
    """Shortest n-gram matched (prompt_lookup_min), e.g. 2."""
    prompt_lookup_max: Annotated[int, Field(ge=1, le=64)] | None = None
    """Longest n-gram matched (prompt_lookup_max), e.g. 5; tried first."""


class DsparkSettings(ApiModel):
    """vLLM DSpark settings (method dspark). SGLang's DSpark flags are not offered: its SPS table and confidence calibration are files made by its own profilers, and both become no-ops under some ragged-verify modes (docs/engines-contract.md)."""

    draft_topk: Annotated[int, Field(ge=1, le=64)] | None = None
    """Candidates the draft keeps per position (dspark_draft_topk), e.g. 4. vLLM accepts it only for Qwen3 DSpark drafts (architecture Qwen3DSparkModel or Qwen3OmniDSparkModel) and refuses it at startup for others."""
    adaptive_verification: bool | None = None
    """Verify only as many drafted tokens as the draft's confidence head supports (enable_adaptive_verification; vLLM's default false)."""
