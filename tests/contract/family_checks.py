"""Contract tier: what each drafter family's rendering must have become inside the real engines (issue 27).

The expectations are written from the engines' code (docs/engines-contract.md, "Drafter families"), not from the
renderers' tables; test_engine_parsers.py applies them to every case it parses.
"""

from __future__ import annotations

from typing import Any

# What vLLM 0.33.0 fills in when the spec leaves a setting to it: the model name it gives the methods that draft
# without one (SpeculativeConfig.__post_init__), k from the fake drafts' block_size (engine_parsers.py fakes: the
# DSpark draft's 7) or from suffix decoding's tree depth (default 24), and prompt lookup's 5.
VLLM_MODEL_LESS = {"ngram": "ngram", "ngramGpu": "ngram_gpu", "suffix": "suffix"}
FAKE_DSPARK_BLOCK_SIZE = 7
VLLM_SUFFIX_DEFAULT_DEPTH = 24
VLLM_PROMPT_LOOKUP_DEFAULT = 5
# Each family's own settings, in their "tuned" variation on vLLM.
VLLM_TUNED: dict[str, dict[str, Any]] = {
    "ngram": {"ngram": {"promptLookupMin": 2, "promptLookupMax": 6}},
    "ngramGpu": {"ngram": {"promptLookupMax": 3}},
    "suffix": {"suffix": {"maxTreeDepth": 32, "maxCachedRequests": 0, "maxSpecFactor": "1.5", "minTokenProb": "0.2"}},
    "dspark": {"dspark": {"adaptiveVerification": True}},
}


def vllm_default_k(drafter) -> int:
    if drafter.method == "suffix":
        return (drafter.suffix and drafter.suffix.max_tree_depth) or VLLM_SUFFIX_DEFAULT_DEPTH
    assert drafter.method == "dspark", drafter.method
    return FAKE_DSPARK_BLOCK_SIZE


def check_vllm_family(drafter, real: dict) -> None:
    """Each family's own settings reached the real SpeculativeConfig as the spec says, and nothing was dropped."""
    suffix = drafter.suffix
    for attr, key, kind in (("max_tree_depth", "suffix_decoding_max_tree_depth", int),
                            ("max_cached_requests", "suffix_decoding_max_cached_requests", int),
                            ("max_spec_factor", "suffix_decoding_max_spec_factor", float),
                            ("min_token_prob", "suffix_decoding_min_token_prob", float)):
        value = getattr(suffix, attr) if suffix else None
        if value is not None:
            assert real[key] == kind(value), key
    if drafter.method in ("ngram", "ngramGpu"):
        low = drafter.ngram.prompt_lookup_min if drafter.ngram else None
        high = drafter.ngram.prompt_lookup_max if drafter.ngram else None
        # vLLM copies one bound to the other when only one is set, and uses 5 for both when neither is.
        expected = (low or high or VLLM_PROMPT_LOOKUP_DEFAULT, high or low or VLLM_PROMPT_LOOKUP_DEFAULT)
        assert (real["prompt_lookup_min"], real["prompt_lookup_max"]) == expected
    dspark = drafter.dspark
    assert real["dspark_draft_topk"] == (dspark.draft_topk if dspark else None)
    assert real["enable_adaptive_verification"] is bool(dspark and dspark.adaptive_verification)
    # The block drafters draft the whole block in one pass (vLLM forces it); no other family does here.
    assert real["parallel_drafting"] is (drafter.method in ("dflash", "dspark"))
    # Model Runner V2 unless the family needs V1 (suffix): the runner each family will really get.
    assert real["runner"]["v2"] is (drafter.method != "suffix")


def check_sglang_block(drafter, args: dict, resolved: dict) -> None:
    """k drafted tokens per step: a DFlash block of k + 1 (the anchor and k drafts), a DSpark block size (gamma) of k,
    and SGLang's own handler turns either into one step, topk 1 and k + 1 verified tokens."""
    k = drafter.num_speculative_tokens
    dflash, dspark = args["speculative_dflash_block_size"], args["speculative_dspark_block_size"]
    if drafter.method == "dflash":
        assert (dflash, dspark) == ((k + 1 if k else None), None)
    else:
        assert (dflash, dspark) == (None, k)
    if k is None:
        return  # the handler reads the block size from the draft's config (torchvision-dependent, see resolve())
    if "error" in resolved and "torchvision" in resolved["error"] and drafter.method == "dspark":
        return  # _handle_dspark always reads the draft's config: not reachable in this environment
    assert resolved.get("ok", {}) | {"speculative_draft_model_path": None} == {
        "speculative_num_steps": 1, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": k + 1,
        "speculative_dflash_block_size": dflash, "speculative_dspark_block_size": dspark,
        "speculative_draft_model_path": None}, resolved
