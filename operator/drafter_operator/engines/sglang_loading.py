"""How SGLang 0.5.23 loads a drafter checkpoint: its ``CheckpointLoading`` record (engines/checkpoint_loading.py),
declared by engines/sglang.py as ``CHECKPOINT_LOADING``, and the tables and functions it is made of.

Each one restates a piece of SGLang's loading code (paths below python/sglang/srt/, with file:line where the
release pins it); tests/contract/test_preflight_contract.py and test_preflight_families_contract.py run the real
code on the same inputs and assert the same answers. Nothing here imports SGLang.

SGLang builds the draft class config.json names (no renaming). For an EAGLE-3 drafter it reads only
``eagle_config.eagle_aux_hidden_state_layer_ids``; the target class's set_eagle3_layers_to_capture maps them to
``layers_to_capture``, layer indices whose *input* is captured (models/llama.py LlamaModel.forward), so a value is a
position too, but only 0..N-1 exist. A block drafter's ``target_layer_ids`` must lie in 0..N-1
(speculative/dflash_utils.py:577-584 resolve_target_layer_ids).
"""

from __future__ import annotations

import os
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
# EAGLE and EAGLE-3 heads: the class SGLang builds

# SGLang loads the draft under the architecture its config.json names (python/sglang/srt/models/*: the
# EntryClass lists of llama_eagle3.py and kimi_k25_eagle3.py; llama_eagle.py, qwen2_eagle.py,
# mistral_eagle.py, mistral_large_3_eagle.py).
EAGLE3_ARCHITECTURES: frozenset[str] = frozenset({"LlamaForCausalLMEagle3", "Eagle3DeepseekV2ForCausalLM"})
EAGLE_ARCHITECTURES: frozenset[str] = frozenset({
    "LlamaForCausalLMEagle", "Qwen2ForCausalLMEagle", "MistralForCausalLMEagle", "MistralLarge3ForCausalLMEagle",
})


def draft_class(architecture: str, method: str, model_type: str | None) -> str:
    """SGLang builds the class config.json names, whatever the method."""
    return architecture


# ---------------------------------------------------------------------------------------------------
# EAGLE-3: the target layers the drafter reads

# SGLang 0.5.23: how each target class's set_eagle3_layers_to_capture maps ids to layers_to_capture.
PLUS_ONE = "plus-one"  # [id + 1 ...]: llama.py, qwen2.py, qwen3_moe.py, glm4_moe.py, minimax_m2.py, ...
PLUS_ONE_IF_FIRST_IS_ONE = "plus-one-if-first-is-one"  # deepseek_v2.py, glm4_moe_lite.py
AS_WRITTEN_IF_MAX_IS_N = "as-written-if-max-is-n"  # gpt_oss.py
CAPTURE_RULES: dict[str, str] = {
    "LlamaForCausalLM": PLUS_ONE,
    "Qwen2ForCausalLM": PLUS_ONE,
    "Qwen3ForCausalLM": PLUS_ONE,
    "Qwen3MoeForCausalLM": PLUS_ONE,
    "Glm4MoeForCausalLM": PLUS_ONE,
    "MiniMaxM2ForCausalLM": PLUS_ONE,
    "DeepseekV2ForCausalLM": PLUS_ONE_IF_FIRST_IS_ONE,
    "DeepseekV3ForCausalLM": PLUS_ONE_IF_FIRST_IS_ONE,
    "DeepseekV32ForCausalLM": PLUS_ONE_IF_FIRST_IS_ONE,
    "KimiK25ForConditionalGeneration": PLUS_ONE_IF_FIRST_IS_ONE,  # delegates to its DeepseekV3ForCausalLM
    "Glm4MoeLiteForCausalLM": PLUS_ONE_IF_FIRST_IS_ONE,
    "GptOssForCausalLM": AS_WRITTEN_IF_MAX_IS_N,
}


def capture_rule(target_architecture: str | None) -> tuple[str, bool]:
    """(rule, known): the rule for this target class; unknown classes are assumed to add 1 (most do)."""
    rule = CAPTURE_RULES.get(target_architecture or "")
    return (rule, True) if rule else (PLUS_ONE, False)


def layers_to_capture(rule: str, layer_ids: Sequence[int] | None, num_layers: int) -> list[int]:
    """``model.layers_to_capture`` after set_eagle3_layers_to_capture(layer_ids) (None: the default)."""
    if layer_ids is None:
        return [2, num_layers // 2, num_layers - 3]
    ids = list(layer_ids)
    if rule == PLUS_ONE_IF_FIRST_IS_ONE:
        return [i + 1 for i in ids] if ids and ids[0] == 1 else ids
    if rule == AS_WRITTEN_IF_MAX_IS_N:
        return ids if ids and max(ids) == num_layers else [i + 1 for i in ids]
    return [i + 1 for i in ids]


def capture(config: dict, num_layers: int, target_architecture: str | None) -> Capture:
    """The positions SGLang captures for an EAGLE-3 drafter.

    python/sglang/srt/model_executor/model_runner_components/spec_aux_hidden_state.py
    _resolve_eagle_aux_hidden_state reads only eagle_config["eagle_aux_hidden_state_layer_ids"] (a
    top-level list is ignored; no eagle_config means None, the target's default); the target class's
    set_eagle3_layers_to_capture maps the ids (layers_to_capture); its forward captures the
    input of each listed layer index that exists (0..N-1).
    """
    ids = eagle_config(config).get("eagle_aux_hidden_state_layer_ids")
    rule, _ = capture_rule(target_architecture)
    if ids:
        layer_ids: tuple[int, ...] | None = tuple(int(i) for i in ids)
        source = f"eagle_config.eagle_aux_hidden_state_layer_ids ({rule} for {target_architecture})"
    else:
        layer_ids, source = None, f"target default [2, N//2, N-3] for N={num_layers}"
    requested = tuple(layers_to_capture(rule, layer_ids, num_layers))
    valid = (0, num_layers - 1)
    captured = tuple(p for p in sorted(set(requested)) if valid[0] <= p <= valid[1])
    return Capture("sglang", source, layer_ids, requested, valid, captured)


def _capture_for_runner(config: dict, num_layers: int, target_architecture: str | None, runner: str) -> Capture:
    """``capture``: SGLang has one model runner; where it reads the ids depends on the target's class."""
    return capture(config, num_layers, target_architecture)


def layer_ids_for_positions(positions: Sequence[int], rule: str, num_layers: int) -> list[int] | None:
    """Layer ids that make SGLang capture ``positions`` under the target class's ``rule``: SpecForge's convention
    (position - 1) first, then the positions as written (gpt-oss keeps ids whose largest is N)."""
    return first_ids_capturing(positions, (1, 0), lambda ids: layers_to_capture(rule, ids, num_layers))


def layer_ids_fix(positions: Sequence[int], num_layers: int, target_architecture: str | None) -> str:
    rule, _ = capture_rule(target_architecture)
    ids = layer_ids_for_positions(positions, rule, num_layers)
    if ids is None:
        return (f"no eagle_aux_hidden_state_layer_ids make SGLang capture positions {list(positions)} on "
                f"{target_architecture} ({rule}): serve this drafter with vLLM")
    return f"set eagle_config.eagle_aux_hidden_state_layer_ids to {ids} (SGLang {rule} for {target_architecture})"


# ---------------------------------------------------------------------------------------------------
# Block drafters (dflash, dspark): the class, the fields SGLang reads, a target's own DSpark head

# models/dflash.py:1317-1324 and models/dspark.py:995 (EntryClass): SGLang builds the class config.json names.
DFLASH_ARCHITECTURES: frozenset[str] = frozenset({
    "DFlashDraftModel", "DFlashLagunaForCausalLM", "MuseGlimmerAssistantModel", "DFlash2DraftModel",
    "DFlash2BeamDraftModel", "MiniMaxDFlash2DraftModel",
})
DSPARK_ARCHITECTURES: frozenset[str] = frozenset({"Qwen3DSparkModel", "LingDSparkModel", "DSparkDraftModel"})
# speculative/dspark_components/dspark_config.py:22.
MARKOV_HEAD_TYPES: tuple[str, ...] = ("vanilla", "gated", "rnn")
# dspark_config.py:172-185 checkpoint_bundles_dspark_draft: the keys that mark a target carrying its DSpark head.
BUNDLED_DSPARK_KEYS: tuple[str, ...] = ("dspark_block_size", "dspark_markov_rank", "dspark_noise_token_id",
                                        "dspark_target_layer_ids")


def dflash_fields(config: dict) -> dict[str, Any]:
    """What sglang's parse_dflash_draft_config (speculative/dflash_utils.py:588-815) reads: dflash_config
    first, the top level as the fallback."""
    dflash = nested(config, "dflash_config")

    def get(key: str) -> Any:
        return dflash.get(key, config.get(key))
    return {"block_size": get("block_size"), "target_layer_ids": get("target_layer_ids"),
            "mask_token_id": get("mask_token_id"), "mask_token": get("mask_token") or "<|MASK|>",
            "num_hidden_layers": config.get("num_hidden_layers")}


def dspark_fields(config: dict) -> dict[str, Any]:
    """What parse_dspark_draft_config (dspark_config.py:214-316) reads: the dspark_* keys, then
    dflash_config merged with dspark_config, then the top level."""
    merged = {**nested(config, "dflash_config"), **nested(config, "dspark_config")}

    def get(prefixed: str | None, key: str) -> Any:
        if prefixed and config.get(prefixed) is not None:
            return config[prefixed]
        return merged.get(key, config.get(key))
    base = dflash_fields(config)
    rank = get("dspark_markov_rank", "markov_rank")
    return {"markov_rank": int(rank) if rank is not None else 0,
            "markov_head_type": get("dspark_markov_head_type", "markov_head_type"),
            "mask_token_id": get("dspark_noise_token_id", "mask_token_id"),
            "block_size": config["dspark_block_size"] if config.get("dspark_block_size") is not None
            else base["block_size"],
            "target_layer_ids": get("dspark_target_layer_ids", "target_layer_ids"),
            "prefixed": any(config.get(k) is not None for k in BUNDLED_DSPARK_KEYS),
            "num_hidden_layers": base["num_hidden_layers"]}


def block_fields(config: dict, method: str) -> dict[str, Any]:
    """The fields SGLang reads for the method's block drafter (DSpark's parser, else DFlash's)."""
    return dspark_fields(config) if method == "dspark" else dflash_fields(config)


def _mask_token(config: dict, method: str) -> MaskTokenRead:
    """DSpark requires a mask token (dspark_config.py:119-122); DFlash falls back to looking dflash_config.mask_token
    up in the target's tokenizer (dflash_worker_v2.py:1424-1460)."""
    if method == "dspark":
        return MaskTokenRead(dspark_fields(config)["mask_token_id"], "dflash_config/dspark_config.mask_token_id",
                             "speculative/dspark_components/dspark_config.py:119-122 (ValueError at startup)")
    return MaskTokenRead(dflash_fields(config)["mask_token_id"], "dflash_config.mask_token_id", None)


def _block_target_layers(config: dict, method: str, num_layers: int) -> BlockLayersRead:
    return BlockLayersRead(block_fields(config, method)["target_layer_ids"], "target_layer_ids", (0, num_layers - 1),
                           "SGLang refuses an id outside 0..N-1 (dflash_utils.py:577-584)")


def bundled_dspark_head(path: str, config: dict, text_config: dict) -> tuple[bool, str]:
    """Method dspark with no drafter: SGLang drafts with the target when it carries a DSpark head."""
    subfolder = os.path.isfile(os.path.join(path, "dspark", "config.json"))
    return subfolder or any(config.get(k) is not None for k in BUNDLED_DSPARK_KEYS), (
        "SGLang uses the target as the draft only when its config has dspark_* keys, or its dspark/ "
        "subfolder holds a draft (arg_groups/speculative_hook.py:720-755), else raises ValueError")


# ---------------------------------------------------------------------------------------------------
# Method mtp (NEXTN)

# arg_groups/speculative_hook.py:1120-1148: NEXTN/EAGLE without a draft path drafts with the target's own
# layers only on these classes (configs/model_config.py:1032-1036 then loads DeepseekV3ForCausalLMNextN).
NEXTN_TARGETS: frozenset[str] = frozenset({
    "DeepseekV32ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV4ForCausalLM", "Glm4MoeForCausalLM",
    "Glm4MoeLiteForCausalLM", "GlmMoeDsaForCausalLM", "BailingMoeForCausalLM", "BailingMoeV2ForCausalLM",
    "BailingMoeV2_5ForCausalLM", "MistralLarge3ForCausalLM", "PixtralForConditionalGeneration", "HYV3ForCausalLM",
    "HYV4ForCausalLM", "Qwen4ExpForConditionalGeneration",
})


# ---------------------------------------------------------------------------------------------------
# The record

LOADING = CheckpointLoading(
    # SpecForge (`specforge export --to sglang`) records the ids in eagle_config, each naming the layer whose
    # output is taken: position id + 1.
    layer_ids_field="eagle_config.eagle_aux_hidden_state_layer_ids",
    layer_id_offset=1,
    capture=_capture_for_runner,
    capture_rule=capture_rule,
    layer_ids_for_positions=layer_ids_for_positions,
    layer_ids_fix=layer_ids_fix,
    renames_draft_class=False,
    draft_class=draft_class,
    draft_classes={"eagle3": EAGLE3_ARCHITECTURES, "eagle": EAGLE_ARCHITECTURES, "dflash": DFLASH_ARCHITECTURES,
                   "dspark": DSPARK_ARCHITECTURES},
    # llama_eagle3.py load_weights builds hot_token_id from d2t whatever the draft vocabulary.
    refuses_d2t_with_full_vocab=False,
    # llama_eagle3.py LlamaForCausalLMEagle3 sets load_lm_head_from_target without draft_vocab_size
    # (eagle_worker_v2.init_lm_head), and with tie_word_embeddings uses embed_tokens as lm_head.
    lm_head_from_target_without_draft_vocab=True,
    tied_head_ignores_draft_vocab=True,
    mask_token=_mask_token,
    block_target_layers=_block_target_layers,
    # dflash_utils.py:545-551 require_num_layers, at startup.
    requires_draft_num_hidden_layers=True,
    # dspark_config.py:214-316 parse_dspark_draft_config: dspark_* keys, then dflash_config merged with dspark_config.
    reads_markov_head_nested=True,
    top_level_markov_classes=frozenset(),
    markov_head_types=MARKOV_HEAD_TYPES,
    dflash_layout_limits=False,
    bundled_dspark_head=bundled_dspark_head,
    mtp_variant=None,
    mtp_refused_model_types={},
    mtp_unmapped_model_types=frozenset(),
    nextn_target_classes=NEXTN_TARGETS,
)
