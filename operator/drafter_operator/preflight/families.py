"""What vLLM 0.33.0 and SGLang 0.5.23 do with a DFlash or DSpark (block-drafting) checkpoint, and with a
target under method mtp, as pure functions of config.json.

Each function restates one piece of the installed engines' loading code (file:line in its docstring,
paths below vllm/ and sglang/srt/); tests/contract/test_preflight_families_contract.py runs the real code
on the same configs and asserts the same answers. Nothing here imports an engine.

Layer ids. Both families record ``target_layer_ids`` 0-based: id i is the output of target layer i, the
residual stream after i + 1 layers (position i + 1, as in engines.py). vLLM adds 1 when it reads them
(v1/worker/gpu/spec_decode/eagle/eagle3_utils.py:119-140) and captures positions 0..N; SGLang refuses an
id outside 0..N-1 (speculative/dflash_utils.py:577-584 resolve_target_layer_ids).
"""

from __future__ import annotations

from typing import Any


# model_executor/models/registry.py:664-697 (_SPECULATIVE_DECODING_MODELS): the classes vLLM builds.
VLLM_DFLASH_ARCHITECTURES: frozenset[str] = frozenset({
    "DFlashDraftModel", "DFlash2DraftModel", "DFlash2BeamDraftModel", "MuseGlimmerAssistantModel",
    "DFlashMuseGlimmerAssistantModel", "DFlashLagunaForCausalLM", "DFlashQwen3XPressModel",
})
# config/speculative.py:1533-1551: these separate DSpark drafts keep their class; DSparkDraftModel with
# model_type qwen3 (SpecForge's export) becomes Qwen3DSparkModel; any other class is rewritten to
# DeepSeek-V4's bundled DSparkDraftModel (model_type forced to deepseek_v4).
VLLM_DSPARK_ARCHITECTURES: frozenset[str] = frozenset({
    "Qwen3DSparkModel", "Qwen3OmniDSparkModel", "MuseSparkDSparkModel", "Gemma4DSparkModel", "K3DSparkModel",
})
VLLM_DSPARK_BUNDLED_TARGETS: frozenset[str] = frozenset({"deepseek_v4", "deepseek_v41"})
# models/dflash.py:1317-1324 and models/dspark.py:995 (EntryClass): SGLang builds the class config.json names.
SGLANG_DFLASH_ARCHITECTURES: frozenset[str] = frozenset({
    "DFlashDraftModel", "DFlashLagunaForCausalLM", "MuseGlimmerAssistantModel", "DFlash2DraftModel",
    "DFlash2BeamDraftModel", "MiniMaxDFlash2DraftModel",
})
SGLANG_DSPARK_ARCHITECTURES: frozenset[str] = frozenset({"Qwen3DSparkModel", "LingDSparkModel", "DSparkDraftModel"})
# speculative/dspark_components/dspark_config.py:22.
SGLANG_MARKOV_HEAD_TYPES: tuple[str, ...] = ("vanilla", "gated", "rnn")
# dspark_config.py:172-185 checkpoint_bundles_dspark_draft: the keys that mark a target carrying its DSpark head.
SGLANG_BUNDLED_DSPARK_KEYS: tuple[str, ...] = ("dspark_block_size", "dspark_markov_rank", "dspark_noise_token_id",
                                               "dspark_target_layer_ids")
# v1/spec_decode/llm_base_proposer.py:355-379: where vLLM looks for the parallel-drafting mask token, in order.
VLLM_MASK_TOKEN_KEYS: tuple[str, ...] = ("dflash_config.mask_token_id", "mask_token_id", "dspark_noise_token_id",
                                         "pard_token", "ptd_token_id")


def nested(config: dict, key: str) -> dict:
    value = config.get(key)
    return value if isinstance(value, dict) else {}


def vllm_dflash_architecture(architecture: str) -> str:
    """transformers_utils/configs/eagle.py:46-76 EAGLEConfig (method dflash): DFlash{arch} unless marked."""
    if architecture.startswith("DFlash") or architecture.endswith("DFlash"):
        return architecture
    return f"DFlash{architecture}"


def vllm_dspark_architecture(architecture: str, model_type: str | None) -> str:
    """config/speculative.py:1533-1567: the class vLLM builds a separate DSpark draft as."""
    if architecture in VLLM_DSPARK_ARCHITECTURES:
        return architecture
    if architecture == "DSparkDraftModel" and model_type == "qwen3":
        return "Qwen3DSparkModel"
    return "DSparkDraftModel"  # DeepSeek-V4's bundled head, whatever the checkpoint holds


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


def vllm_mask_token_id(config: dict) -> tuple[int | None, str | None]:
    """(id, field) vLLM's proposer takes the mask token from (llm_base_proposer.py:355-379), or (None, None):
    then it raises ValueError when the drafter is built."""
    dflash = nested(config, "dflash_config")
    if "mask_token_id" in dflash:
        return dflash["mask_token_id"], "dflash_config.mask_token_id"
    if config.get("mask_token_id") is not None:
        return config["mask_token_id"], "mask_token_id"
    for key in VLLM_MASK_TOKEN_KEYS[2:]:
        if key in config:
            return config[key], key
    return None, None


def vllm_block_positions(config: dict) -> tuple[list[int] | None, str]:
    """(positions, field) vLLM captures for a block drafter (eagle3_utils.py:111-145
    get_eagle3_aux_layers_from_config): a top-level eagle_aux_hidden_state_layer_ids as written, else
    dflash_config.target_layer_ids, dspark_target_layer_ids, target_layer_ids each + 1."""
    if config.get("eagle_aux_hidden_state_layer_ids"):
        return list(config["eagle_aux_hidden_state_layer_ids"]), "eagle_aux_hidden_state_layer_ids"
    for source, ids in (("dflash_config.target_layer_ids", nested(config, "dflash_config").get("target_layer_ids")),
                        ("dspark_target_layer_ids", config.get("dspark_target_layer_ids")),
                        ("target_layer_ids", config.get("target_layer_ids"))):
        if ids:
            return [int(i) + 1 for i in ids], source
    return None, ""


def sglang_dflash_fields(config: dict) -> dict[str, Any]:
    """What sglang's parse_dflash_draft_config (speculative/dflash_utils.py:588-815) reads: dflash_config
    first, the top level as the fallback."""
    dflash = nested(config, "dflash_config")

    def get(key: str) -> Any:
        return dflash.get(key, config.get(key))
    return {"block_size": get("block_size"), "target_layer_ids": get("target_layer_ids"),
            "mask_token_id": get("mask_token_id"), "mask_token": get("mask_token") or "<|MASK|>",
            "num_hidden_layers": config.get("num_hidden_layers")}


def sglang_dspark_fields(config: dict) -> dict[str, Any]:
    """What parse_dspark_draft_config (dspark_config.py:214-316) reads: the dspark_* keys, then
    dflash_config merged with dspark_config, then the top level."""
    merged = {**nested(config, "dflash_config"), **nested(config, "dspark_config")}

    def get(prefixed: str | None, key: str) -> Any:
        if prefixed and config.get(prefixed) is not None:
            return config[prefixed]
        return merged.get(key, config.get(key))
    base = sglang_dflash_fields(config)
    rank = get("dspark_markov_rank", "markov_rank")
    return {"markov_rank": int(rank) if rank is not None else 0,
            "markov_head_type": get("dspark_markov_head_type", "markov_head_type"),
            "mask_token_id": get("dspark_noise_token_id", "mask_token_id"),
            "block_size": config["dspark_block_size"] if config.get("dspark_block_size") is not None
            else base["block_size"],
            "target_layer_ids": get("dspark_target_layer_ids", "target_layer_ids"),
            "prefixed": any(config.get(k) is not None for k in SGLANG_BUNDLED_DSPARK_KEYS),
            "num_hidden_layers": base["num_hidden_layers"]}


# ---------------------------------------------------------------------------------------------------
# Method mtp: the MTP variant vLLM makes of the target (config/speculative.py:711-1182 hf_config_override)

# model_type -> the MTP model_type vLLM rewrites it to (the branches a plain config reaches; those that need
# more of the target's config, such as qwen4_exp's hc_count, are left out: a target the tables do not
# know earns a warning, not a refusal).
VLLM_MTP_BY_MODEL_TYPE: dict[str, str] = {
    "deepseek_v3": "deepseek_mtp", "deepseek_v32": "deepseek_mtp", "glm_moe_dsa": "deepseek_mtp",
    "deepseek_mtp": "deepseek_mtp", "deepseek_v4": "deepseek_mtp", "pangu_ultra_moe": "pangu_ultra_moe_mtp",
    "kimi_k3": "kimi_k3_mtp", "ernie4_5_moe": "ernie_mtp", "qwen3_next": "qwen3_next_mtp",
    "bailing_hybrid": "bailing_hybrid_mtp",
    "exaone_moe": "exaone_moe_mtp", "qwen3_5": "qwen3_5_mtp", "qwen3_5_moe": "qwen3_5_mtp",
    "qwen3_5_text": "qwen3_5_mtp", "qwen3_5_moe_text": "qwen3_5_mtp", "longcat_flash": "longcat_flash_mtp",
    "step3p5": "step3p5_mtp", "hy_v3": "hy_v3_mtp", "hy_v4": "hy_v4_mtp",
}
# architectures[0] -> the MTP model_type (the branches that test the class, not the model_type).
VLLM_MTP_BY_ARCHITECTURE: dict[str, str] = {
    "MiMoForCausalLM": "mimo_mtp", "MiMoV2FlashForCausalLM": "mimo_v2_mtp", "MiMoV2ForCausalLM": "mimo_v2_mtp",
    "Glm4MoeForCausalLM": "glm4_moe_mtp",
    "Glm4MoeLiteForCausalLM": "glm4_moe_lite_mtp", "BailingMoeV2_5ForCausalLM": "bailing_hybrid_mtp",
    "BailingMoeV3ForCausalLM": "bailing_hybrid_v3_mtp",
}
# Model types hf_config_override leaves as they are (checked against it in the contract tier): mtp on these
# reaches NotImplementedError. Kimi-K2 (kimi_k2) and Kimi-K2.5 (kimi_k25) declare DeepSeek-V3 layers but a
# model_type of their own, which no branch maps.
VLLM_MTP_UNMAPPED_MODEL_TYPES: frozenset[str] = frozenset({
    "kimi_k2", "kimi_k25", "llama", "qwen2", "qwen3", "qwen3_moe", "mistral", "mixtral", "gpt_oss",
})
# speculative.py:1474-1485: DeepSeek-V4.1 ships DSpark stages, not a classic MTP head.
VLLM_MTP_REFUSED_MODEL_TYPES: dict[str, str] = {"deepseek_v41": "dspark"}
# arg_groups/speculative_hook.py:1120-1148: NEXTN/EAGLE without a draft path drafts with the target's own
# layers only on these classes (configs/model_config.py:1032-1036 then loads DeepseekV3ForCausalLMNextN).
SGLANG_NEXTN_TARGETS: frozenset[str] = frozenset({
    "DeepseekV32ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV4ForCausalLM", "Glm4MoeForCausalLM",
    "Glm4MoeLiteForCausalLM", "GlmMoeDsaForCausalLM", "BailingMoeForCausalLM", "BailingMoeV2ForCausalLM",
    "BailingMoeV2_5ForCausalLM", "MistralLarge3ForCausalLM", "PixtralForConditionalGeneration", "HYV3ForCausalLM",
    "HYV4ForCausalLM", "Qwen4ExpForConditionalGeneration",
})


def vllm_mtp_variant(model_type: str | None, architecture: str | None) -> str | None:
    """The MTP model_type vLLM serves the target's MTP layers as, or None: then SpeculativeConfig raises
    NotImplementedError("Unsupported speculative method: 'mtp'") (speculative.py:1496-1501)."""
    if architecture in VLLM_MTP_BY_ARCHITECTURE:
        return VLLM_MTP_BY_ARCHITECTURE[architecture]
    return VLLM_MTP_BY_MODEL_TYPE.get(model_type or "")
