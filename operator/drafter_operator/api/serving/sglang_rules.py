"""The rules on spec.drafter that hold with engine sglang: the families SGLang 0.5.23 lacks, and the block
drafters (DFlash, DSpark), whose draft length is a block size rather than steps x topk.

Facts from sglang/srt/arg_groups/speculative_hook.py (0.5.23): _handle_dflash (287-446) and _handle_dspark
(666-883) force --speculative-num-steps and --speculative-eagle-topk to 1 and derive
--speculative-num-draft-tokens from the block size; tests/contract holds the rendering to them.
"""

from __future__ import annotations

from drafter_operator.api.common import Rule, cel_in, spoken
from drafter_operator.api.serving.drafter import FAMILY_SETTINGS
from drafter_operator.engines import sglang
from drafter_operator.engines.sglang import BLOCK_SIZE_FLAGS

#: The engine these rules hold with (its name, as the CRD's CEL compares self.engine to it).
SGLANG: str = sglang.ENGINE
#: The methods SGLang 0.5.23 has no algorithm for (the CRD refuses them with engine sglang).
SGLANG_REFUSED_METHODS: tuple[str, ...] = sglang.REFUSED_METHODS
#: The block drafters (the ones SGLang renders a block size for): on SGLang their draft length is
#: spec.drafter.numSpeculativeTokens, and SGLang itself sets steps, topk and the verified tokens.
SGLANG_BLOCK_METHODS: tuple[str, ...] = tuple(BLOCK_SIZE_FLAGS)
#: spec.drafter's per-family settings objects are all vLLM's (SGLang's NGRAM is tuned with numDraftTokens; its
#: DSpark flags are not offered, see api/serving/families.py).
_VLLM_ONLY_SETTINGS: tuple[str, ...] = tuple(FAMILY_SETTINGS)


def _not_sglang(cel: str) -> str:
    return f"self.engine != '{SGLANG}' || ({cel})"


SGLANG_DRAFTER_RULES: tuple[Rule, ...] = (
    Rule(
        cel=_not_sglang(f"!({cel_in('self.drafter.method', SGLANG_REFUSED_METHODS)})"),
        message=(
            f"spec.drafter.method {spoken(SGLANG_REFUSED_METHODS, 'and')} are vLLM only: SGLang 0.5.23 has no suffix "
            "decoding and one n-gram proposer (NGRAM); use engine vllm, or method ngram on sglang"
        ),
        check=lambda s: s.engine != SGLANG or s.drafter.method not in SGLANG_REFUSED_METHODS,
        field_path=".drafter.method",
        reason="FieldValueForbidden",
    ),
    Rule(
        cel=_not_sglang(
            f"!has(self.drafter.numSpeculativeTokens) || {cel_in('self.drafter.method', SGLANG_BLOCK_METHODS)}"),
        message=(
            "spec.drafter.numSpeculativeTokens is a vLLM setting except for methods "
            f"{spoken(SGLANG_BLOCK_METHODS)} (their block size): with engine sglang use numSteps, eagleTopk and "
            "numDraftTokens instead"
        ),
        check=lambda s: s.engine != SGLANG or s.drafter.num_speculative_tokens is None
        or s.drafter.method in SGLANG_BLOCK_METHODS,
        field_path=".drafter.numSpeculativeTokens",
        reason="FieldValueForbidden",
    ),
    Rule(
        cel=_not_sglang(
            f"!({cel_in('self.drafter.method', SGLANG_BLOCK_METHODS)}) || (!has(self.drafter.numSteps) "
            "&& !has(self.drafter.eagleTopk) && !has(self.drafter.numDraftTokens))"),
        message=(
            f"spec.drafter.numSteps, eagleTopk and numDraftTokens do not apply to methods {spoken(SGLANG_BLOCK_METHODS)} "
            "on sglang (SGLang drafts one block: steps and topk become 1 and the verified tokens follow the block "
            "size): remove them and set numSpeculativeTokens, or leave it unset for the draft's own block size"
        ),
        check=lambda s: s.engine != SGLANG or s.drafter.method not in SGLANG_BLOCK_METHODS
        or all(v is None for v in (s.drafter.num_steps, s.drafter.eagle_topk, s.drafter.num_draft_tokens)),
        field_path=".drafter",
        reason="FieldValueForbidden",
    ),
    Rule(
        cel=_not_sglang(f"!has(self.drafter.dynamic) || {cel_in('self.drafter.method', sglang.ADAPTIVE_METHODS)}"),
        message=(
            f"spec.drafter.dynamic on sglang needs method {spoken(sglang.ADAPTIVE_METHODS, 'or')}: SGLang 0.5.23 adapts "
            "its draft steps per batch size only for EAGLE and EAGLE-3 (MTP runs as EAGLE); remove dynamic, or use "
            "engine vllm"
        ),
        check=lambda s: s.engine != SGLANG or s.drafter.dynamic is None or s.drafter.method in sglang.ADAPTIVE_METHODS,
        field_path=".drafter.dynamic",
        reason="FieldValueForbidden",
    ),
    Rule(
        cel=_not_sglang("!has(self.drafter.dynamic) || (has(self.drafter.numSteps) && "
                        "(!has(self.drafter.eagleTopk) || self.drafter.eagleTopk == 1))"),
        message=(
            "spec.drafter.dynamic on sglang needs spec.drafter.numSteps (the k the load sweep measures, the most the "
            "schedule drafts) and eagleTopk unset or 1 (SGLang drops adaptive speculation with a tree): set numSteps, "
            "and remove eagleTopk or set it to 1"
        ),
        check=lambda s: s.engine != SGLANG or s.drafter.dynamic is None
        or (s.drafter.num_steps is not None and s.drafter.eagle_topk in (None, 1)),
        field_path=".drafter",
        reason="FieldValueInvalid",
    ),
    Rule(
        cel=_not_sglang(" && ".join(f"!has(self.drafter.{name})" for name in _VLLM_ONLY_SETTINGS)),
        message=(
            f"spec.drafter.{spoken(_VLLM_ONLY_SETTINGS)} are vLLM settings: "
            "with engine sglang remove them (tune ngram with numDraftTokens)"
        ),
        check=lambda s: s.engine != SGLANG or all(getattr(s.drafter, name) is None for name in _VLLM_ONLY_SETTINGS),
        field_path=".drafter",
        reason="FieldValueForbidden",
    ),
)
