"""The preflight's view of block-drafting (DFlash, DSpark) and MTP checkpoints, as pure functions of config.json.

What each engine does differently is its record, ``engines.engine(name).CHECKPOINT_LOADING``
(engines/checkpoint_loading.py; vLLM 0.33.0's in engines/vllm_loading.py, SGLang 0.5.23's in
engines/sglang_loading.py), each fact with the engine source it restates (file:line, paths below vllm/ and
sglang/srt/). Here: the speculators format as vLLM, its one reader, converts a block drafter's config
(transformers_utils/configs/speculators/algos.py). Nothing here imports an engine.

Layer ids. Both families record ``target_layer_ids`` 0-based: id i is the output of target layer i, the
residual stream after i + 1 layers (position i + 1, as in engines.py). vLLM adds 1 when it reads them
(v1/worker/gpu/spec_decode/eagle/eagle3_utils.py:119-140) and captures positions 0..N; SGLang refuses an
id outside 0..N-1 (speculative/dflash_utils.py:577-584 resolve_target_layer_ids).
"""

from __future__ import annotations

from typing import Any

from drafter_operator.engines.checkpoint_loading import nested


def speculators_required_keys(kind: str | None) -> tuple[str, ...]:
    """The keys algos.py indexes (KeyError when absent): update_dspark copies mask_token_id only when set."""
    return ("mask_token_id", "aux_hidden_state_layer_ids") if kind in ("dflash", "dflash2") else ("aux_hidden_state_layer_ids",)


def speculators_as_vllm_block_config(config: dict) -> dict[str, Any]:
    """The hf_config vLLM builds from a speculators dflash/dflash2/dspark config.json
    (transformers_utils/configs/speculators/algos.py:88-220 update_dflash, update_dflash2, update_dspark).
    Raises KeyError where vLLM does: aux_hidden_state_layer_ids, and for dflash mask_token_id, are required."""
    kind = config.get("speculators_model_type")
    out: dict[str, Any] = dict(config.get("transformer_layer_config") or {})
    aux = config["aux_hidden_state_layer_ids"]
    out["eagle_aux_hidden_state_layer_ids"] = aux
    if kind in ("dflash", "dflash2"):
        out["architectures"] = ["DFlashDraftModel" if kind == "dflash" else "DFlash2DraftModel"]
        out["draft_vocab_size"] = config.get("draft_vocab_size")
        if config.get("target_hidden_size") is not None:
            out["target_hidden_size"] = config["target_hidden_size"]
        out["dflash_config"] = {"mask_token_id": config["mask_token_id"], "target_layer_ids": [i - 1 for i in aux],
                                "sample_from_anchor": config.get("sample_from_anchor", False),
                                # algos.py:124-126: one flag for every layer, full attention included.
                                "causal": not config.get("sliding_window_non_causal", True)}
        return out
    archs = [a for a in config.get("architectures") or [] if a in ("Qwen3DSparkModel", "Qwen3OmniDSparkModel")]
    out["architectures"] = archs or ["Qwen3DSparkModel"]
    out["sample_from_anchor"] = config.get("sample_from_anchor", False)
    out["target_layer_ids"] = [i - 1 for i in aux]
    for key in ("draft_vocab_size", "target_hidden_size", "mask_token_id", "markov_rank", "markov_head_type",
                "block_size", "enable_confidence_head", "confidence_head_with_markov", "use_aux_hidden_state"):
        if config.get(key) is not None:
            out[key] = config[key]
    return out
