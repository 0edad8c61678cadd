"""How vLLM 0.33.0 loads a drafter checkpoint: its ``CheckpointLoading`` record (engines/checkpoint_loading.py),
declared by engines/vllm.py as ``CHECKPOINT_LOADING``, and the tables and functions it is made of.

Each one restates a piece of vLLM's loading code (paths below vllm/, with file:line where the release pins it);
tests/contract/test_preflight_contract.py and test_preflight_families_contract.py run the real code on the same
inputs and assert the same answers. Nothing here imports vLLM.

vLLM reads an EAGLE-3 drafter's layer ids as positions (model_executor/models/llama.py LlamaModel.forward,
interfaces.py EagleModelMixin._maybe_add_hidden_state): 0..N can be captured. A block drafter's
``target_layer_ids`` are 0-based target layer outputs, which vLLM turns into positions by adding 1
(v1/worker/gpu/spec_decode/eagle/eagle3_utils.py:119-140).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from drafter_operator.engines.checkpoint_loading import (
    BlockLayersRead,
    Capture,
    CheckpointLoading,
    MaskTokenRead,
    eagle_config,
    first_ids_capturing,
    nested,
)

# ---------------------------------------------------------------------------------------------------
# EAGLE and EAGLE-3 heads: the class vLLM builds

# vllm/model_executor/models/registry.py _SPECULATIVE_DECODING_MODELS: the EAGLE-3 heads.
EAGLE3_ARCHITECTURES: frozenset[str] = frozenset({
    "Eagle3LlamaForCausalLM", "LlamaForCausalLMEagle3", "Eagle3MiniMaxM2ForCausalLM", "Eagle3Qwen2_5vlForCausalLM",
    "Eagle3Qwen3vlForCausalLM", "Eagle3Qwen3ForCausalLM", "Eagle3DeepseekV2ForCausalLM", "Eagle3DeepseekV3ForCausalLM",
    "PEagleDraftModel", "PeagleLlamaForCausalLM", "PeagleQwen3ForCausalLM",
})
# ... and the EAGLE(-1/2) heads.
EAGLE_ARCHITECTURES: frozenset[str] = frozenset({
    "EagleLlamaForCausalLM", "EagleLlama4ForCausalLM", "EagleMiniCPMForCausalLM", "EagleCohereForCausalLM",
    "EagleMistralForCausalLM", "EagleMistralLarge3ForCausalLM", "EagleDeepSeekMTPModel",
})


def eagle_architecture(architecture: str, method: str) -> str:
    """The architecture vLLM loads a drafter as (vllm/transformers_utils/configs/eagle.py
    EAGLEConfig.__init__): eagle prefixes "Eagle", eagle3 prefixes "Eagle3", unless already marked."""
    if method == "eagle":
        return architecture if architecture.startswith("Eagle") else f"Eagle{architecture}"
    if architecture.startswith("Eagle3") or architecture.endswith("Eagle3"):
        return architecture
    return f"Eagle3{architecture}"


# ---------------------------------------------------------------------------------------------------
# EAGLE-3: the target layers the drafter reads


def default_layers(num_layers: int) -> tuple[int, ...]:
    """interfaces.py SupportsEagle3.get_eagle3_default_aux_hidden_state_layers."""
    return (2, num_layers // 2, num_layers - 3)


def capture(config: dict, num_layers: int, runner: str = "v2") -> Capture:
    """The positions vLLM captures for an EAGLE-3 drafter whose (vLLM-side) hf_config is ``config``.

    v2 (the default model runner on GPUs in 0.33.0, vllm/config/vllm.py VllmConfig.use_v2_model_runner):
    vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py get_eagle3_aux_layers_from_config reads the
    top-level eagle_aux_hidden_state_layer_ids, then dflash/dspark fields, then eagle_config["layer_ids"]
    -- never eagle_config["eagle_aux_hidden_state_layer_ids"]. v1 (VLLM_USE_V2_MODEL_RUNNER=0):
    vllm/v1/worker/gpu_model_runner.py GPUModelRunner._get_eagle3_aux_layers_from_config reads the
    top-level list, else eagle_config["eagle_aux_hidden_state_layer_ids"]. With neither, the target's
    default (2, N//2, N-3). EagleModelMixin._set_aux_hidden_state_layers sorts and de-duplicates.
    """
    eagle = eagle_config(config)
    ids: Any = config.get("eagle_aux_hidden_state_layer_ids") or None
    source = "eagle_aux_hidden_state_layer_ids"
    if not ids:
        if runner == "v1" and eagle.get("eagle_aux_hidden_state_layer_ids"):
            ids, source = eagle["eagle_aux_hidden_state_layer_ids"], "eagle_config.eagle_aux_hidden_state_layer_ids"
        elif runner == "v2" and eagle.get("layer_ids"):
            ids, source = eagle["layer_ids"], "eagle_config.layer_ids"
    if ids and isinstance(ids, (list, tuple)):
        layer_ids: tuple[int, ...] | None = tuple(int(i) for i in ids)
        requested = layer_ids
    else:
        layer_ids, source = None, f"target default (2, N//2, N-3) for N={num_layers}"
        requested = default_layers(num_layers)
    valid = (0, num_layers)
    captured = tuple(p for p in sorted(set(requested)) if valid[0] <= p <= valid[1])
    return Capture("vllm", source, layer_ids, tuple(requested), valid, captured)


def _capture_for_target(config: dict, num_layers: int, target_architecture: str | None, runner: str) -> Capture:
    """``capture``: where vLLM reads the ids depends on its model runner, not on the target's class."""
    return capture(config, num_layers, runner)


def layer_ids_for_positions(positions: Sequence[int], rule: str, num_layers: int) -> list[int] | None:
    """Layer ids that make vLLM capture ``positions``: the positions themselves (an id is a position whatever the
    target's class, so there is no ``rule``)."""
    return first_ids_capturing(positions, (0,), lambda ids: ids)


def layer_ids_fix(positions: Sequence[int], num_layers: int, target_architecture: str | None) -> str:
    ids = layer_ids_for_positions(positions, "", num_layers)
    return (f'add "eagle_aux_hidden_state_layer_ids": {list(ids or [])} at the top level of the drafter\'s '
            "config.json (vLLM reads the top-level list first with either model runner; SGLang ignores it)")


# ---------------------------------------------------------------------------------------------------
# Block drafters (dflash, dspark): the class, the mask token, the target layers, a target's own DSpark head

# model_executor/models/registry.py:664-697 (_SPECULATIVE_DECODING_MODELS): the classes vLLM builds.
DFLASH_ARCHITECTURES: frozenset[str] = frozenset({
    "DFlashDraftModel", "DFlash2DraftModel", "DFlash2BeamDraftModel", "MuseGlimmerAssistantModel",
    "DFlashMuseGlimmerAssistantModel", "DFlashLagunaForCausalLM", "DFlashQwen3XPressModel",
})
# config/speculative.py:1533-1551: these separate DSpark drafts keep their class; DSparkDraftModel with
# model_type qwen3 (SpecForge's export) becomes Qwen3DSparkModel; any other class is rewritten to
# DeepSeek-V4's bundled DSparkDraftModel (model_type forced to deepseek_v4).
DSPARK_ARCHITECTURES: frozenset[str] = frozenset({
    "Qwen3DSparkModel", "Qwen3OmniDSparkModel", "MuseSparkDSparkModel", "Gemma4DSparkModel", "K3DSparkModel",
})
DSPARK_BUNDLED_TARGETS: frozenset[str] = frozenset({"deepseek_v4", "deepseek_v41"})
# models/qwen3_dspark.py:209-224: the DSpark classes that read markov_rank, markov_head_type and the confidence-head
# flags at config.json's top level (the other classes read their own fields).
TOP_LEVEL_MARKOV_CLASSES: frozenset[str] = frozenset({"Qwen3DSparkModel", "Qwen3OmniDSparkModel"})
# v1/spec_decode/llm_base_proposer.py:355-379: where vLLM looks for the parallel-drafting mask token, in order.
MASK_TOKEN_KEYS: tuple[str, ...] = ("dflash_config.mask_token_id", "mask_token_id", "dspark_noise_token_id",
                                    "pard_token", "ptd_token_id")


def dflash_architecture(architecture: str) -> str:
    """transformers_utils/configs/eagle.py:46-76 EAGLEConfig (method dflash): DFlash{arch} unless marked."""
    if architecture.startswith("DFlash") or architecture.endswith("DFlash"):
        return architecture
    return f"DFlash{architecture}"


def dspark_architecture(architecture: str, model_type: str | None) -> str:
    """config/speculative.py:1533-1567: the class vLLM builds a separate DSpark draft as."""
    if architecture in DSPARK_ARCHITECTURES:
        return architecture
    if architecture == "DSparkDraftModel" and model_type == "qwen3":
        return "Qwen3DSparkModel"
    return "DSparkDraftModel"  # DeepSeek-V4's bundled head, whatever the checkpoint holds


def draft_class(architecture: str, method: str, model_type: str | None) -> str:
    """The class vLLM builds config.json's architecture as, for the method."""
    if method == "dflash":
        return dflash_architecture(architecture)
    if method == "dspark":
        return dspark_architecture(architecture, model_type)
    return eagle_architecture(architecture, method)


def mask_token_id(config: dict) -> tuple[int | None, str | None]:
    """(id, field) vLLM's proposer takes the mask token from (llm_base_proposer.py:355-379), or (None, None):
    then it raises ValueError when the drafter is built."""
    dflash = nested(config, "dflash_config")
    if "mask_token_id" in dflash:
        return dflash["mask_token_id"], "dflash_config.mask_token_id"
    if config.get("mask_token_id") is not None:
        return config["mask_token_id"], "mask_token_id"
    for key in MASK_TOKEN_KEYS[2:]:
        if key in config:
            return config[key], key
    return None, None


def _mask_token(config: dict, method: str) -> MaskTokenRead:
    value, field = mask_token_id(config)
    return MaskTokenRead(value, field, "llm_base_proposer.py:355-379 (raises ValueError when the drafter is built)")


def block_positions(config: dict) -> tuple[list[int] | None, str]:
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


def _block_target_layers(config: dict, method: str, num_layers: int) -> BlockLayersRead:
    positions, field = block_positions(config)
    return BlockLayersRead(positions, field, (0, num_layers),
                           "vLLM captures positions 0..N (eagle3_utils.py:111-145 adds 1 to target_layer_ids)")


def bundled_dspark_head(path: str, config: dict, text_config: dict) -> tuple[bool, str]:
    """Method dspark with no drafter: vLLM builds DeepSeek-V4's DSpark head from the target's own config."""
    model_type = text_config.get("model_type")
    return model_type in DSPARK_BUNDLED_TARGETS, (
        f"vLLM builds DeepSeek-V4's DSparkDraftModel from the target's config when no draft is given "
        f"(config/speculative.py:1269-1275, 1542-1567); the target's model_type is {model_type!r}")


# ---------------------------------------------------------------------------------------------------
# Method mtp: the MTP variant vLLM makes of the target (config/speculative.py:711-1182 hf_config_override)

# model_type -> the MTP model_type vLLM rewrites it to (the branches a plain config reaches; those that need
# more of the target's config, such as qwen4_exp's hc_count, are left out: a target the tables do not
# know earns a warning, not a refusal).
MTP_BY_MODEL_TYPE: dict[str, str] = {
    "deepseek_v3": "deepseek_mtp", "deepseek_v32": "deepseek_mtp", "glm_moe_dsa": "deepseek_mtp",
    "deepseek_mtp": "deepseek_mtp", "deepseek_v4": "deepseek_mtp", "pangu_ultra_moe": "pangu_ultra_moe_mtp",
    "kimi_k3": "kimi_k3_mtp", "ernie4_5_moe": "ernie_mtp", "qwen3_next": "qwen3_next_mtp",
    "bailing_hybrid": "bailing_hybrid_mtp",
    "exaone_moe": "exaone_moe_mtp", "qwen3_5": "qwen3_5_mtp", "qwen3_5_moe": "qwen3_5_mtp",
    "qwen3_5_text": "qwen3_5_mtp", "qwen3_5_moe_text": "qwen3_5_mtp", "longcat_flash": "longcat_flash_mtp",
    "step3p5": "step3p5_mtp", "hy_v3": "hy_v3_mtp", "hy_v4": "hy_v4_mtp",
}
# architectures[0] -> the MTP model_type (the branches that test the class, not the model_type).
MTP_BY_ARCHITECTURE: dict[str, str] = {
    "MiMoForCausalLM": "mimo_mtp", "MiMoV2FlashForCausalLM": "mimo_v2_mtp", "MiMoV2ForCausalLM": "mimo_v2_mtp",
    "Glm4MoeForCausalLM": "glm4_moe_mtp",
    "Glm4MoeLiteForCausalLM": "glm4_moe_lite_mtp", "BailingMoeV2_5ForCausalLM": "bailing_hybrid_mtp",
    "BailingMoeV3ForCausalLM": "bailing_hybrid_v3_mtp",
}
# Model types hf_config_override leaves as they are (checked against it in the contract tier): mtp on these
# reaches NotImplementedError. Kimi-K2 (kimi_k2) and Kimi-K2.5 (kimi_k25) declare DeepSeek-V3 layers but a
# model_type of their own, which no branch maps.
MTP_UNMAPPED_MODEL_TYPES: frozenset[str] = frozenset({
    "kimi_k2", "kimi_k25", "llama", "qwen2", "qwen3", "qwen3_moe", "mistral", "mixtral", "gpt_oss",
})
# speculative.py:1474-1485: DeepSeek-V4.1 ships DSpark stages, not a classic MTP head.
MTP_REFUSED_MODEL_TYPES: dict[str, str] = {"deepseek_v41": "dspark"}


def mtp_variant(model_type: str | None, architecture: str | None) -> str | None:
    """The MTP model_type vLLM serves the target's MTP layers as, or None: then SpeculativeConfig raises
    NotImplementedError("Unsupported speculative method: 'mtp'") (speculative.py:1496-1501)."""
    if architecture in MTP_BY_ARCHITECTURE:
        return MTP_BY_ARCHITECTURE[architecture]
    return MTP_BY_MODEL_TYPE.get(model_type or "")


# ---------------------------------------------------------------------------------------------------
# The record

LOADING = CheckpointLoading(
    # speculators (vLLM's own training framework) records the positions at the top level.
    layer_ids_field="eagle_aux_hidden_state_layer_ids",
    layer_id_offset=0,
    capture=_capture_for_target,
    capture_rule=None,
    layer_ids_for_positions=layer_ids_for_positions,
    layer_ids_fix=layer_ids_fix,
    renames_draft_class=True,
    draft_class=draft_class,
    draft_classes={"eagle3": EAGLE3_ARCHITECTURES, "eagle": EAGLE_ARCHITECTURES, "dflash": DFLASH_ARCHITECTURES,
                   "dspark": DSPARK_ARCHITECTURES},
    # llama_eagle3.py Eagle3LlamaForCausalLM: draft_id_to_target_id exists only when draft_vocab_size < vocab_size,
    # and load_weights refuses a d2t weight without it.
    refuses_d2t_with_full_vocab=True,
    lm_head_from_target_without_draft_vocab=False,
    tied_head_ignores_draft_vocab=False,
    mask_token=_mask_token,
    block_target_layers=_block_target_layers,
    requires_draft_num_hidden_layers=False,
    reads_markov_head_nested=False,
    top_level_markov_classes=TOP_LEVEL_MARKOV_CLASSES,
    # models/qwen3_dspark.py:209-218: only the low-rank (vanilla) DSparkMarkovHead, whatever the config says.
    markov_head_types=("vanilla",),
    # v1/worker/gpu/spec_decode/dflash/speculator.py:80-90 (anchor-as-bonus only), models/qwen3_dflash.py:62-73,
    # 127-137 (the mask per draft layer; mixed sliding and full layers need the V2 model runner).
    dflash_layout_limits=True,
    bundled_dspark_head=bundled_dspark_head,
    mtp_variant=mtp_variant,
    mtp_refused_model_types=MTP_REFUSED_MODEL_TYPES,
    mtp_unmapped_model_types=MTP_UNMAPPED_MODEL_TYPES,
    nextn_target_classes=frozenset(),
)
