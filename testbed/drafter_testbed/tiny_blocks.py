"""Tiny DFlash and DSpark drafters for tiny_checkpoints.py's 4-layer Llama target, in the layouts the training frameworks
export: SpecForge 0.2.0's HF export (a Qwen3 config, architectures DFlashDraftModel / DSparkDraftModel, the
family's fields nested in dflash_config: repo configs/qwen3-8b-dspark.json) and speculators 0.9.0's
(speculators_model_type dflash / dspark, transformer_layer_config, top-level aux_hidden_state_layer_ids,
mask_token_id and, for DSpark, markov_rank). Config only, with one small tensor (the preflight reads
configs and headers; the contract tier loads these configs through the engines' own config code).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from drafter_testbed.tiny_checkpoints import DTYPE, HIDDEN, LAYERS, VOCAB, TRAINED_POSITIONS, target_config, write_checkpoint

BLOCK_SIZE = 4
MASK_TOKEN_ID = VOCAB - 1
MARKOV_RANK = 16
# 0-based target layer outputs: the same positions (1, 2, 3) as tiny.py's EAGLE-3 drafters.
TARGET_LAYER_IDS = [p - 1 for p in TRAINED_POSITIONS]
DSPARK_FIELDS = {"markov_rank": MARKOV_RANK, "markov_head_type": "vanilla", "enable_confidence_head": True,
                 "confidence_head_with_markov": False}


def qwen3_layer(hidden: int = HIDDEN, vocab: int = VOCAB) -> dict[str, Any]:
    config = {k: v for k, v in target_config(1, hidden, vocab).items() if k not in ("architectures", "pretraining_tp",
                                                                                      "mlp_bias")}
    return {**config, "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"]}


def specforge_dflash_config(**dflash: Any) -> dict[str, Any]:
    config = {**qwen3_layer(), "architectures": ["DFlashDraftModel"], "block_size": BLOCK_SIZE,
              "num_target_layers": LAYERS}
    config["dflash_config"] = {"mask_token_id": MASK_TOKEN_ID, "target_layer_ids": list(TARGET_LAYER_IDS), **dflash}
    return config


def specforge_dspark_config(**dflash: Any) -> dict[str, Any]:
    """SpecForge's DSpark export: the Markov head's fields nested in dflash_config."""
    config = specforge_dflash_config(projector_type="dspark", **DSPARK_FIELDS)
    config["architectures"] = ["DSparkDraftModel"]
    config["dflash_config"].update(dflash)
    return config


def flattened_dspark_config() -> dict[str, Any]:
    """SpecForge's DSpark export with the head's fields copied to the top level (what vLLM 0.33.0 reads)."""
    return {**specforge_dspark_config(), **DSPARK_FIELDS}


def speculators_block_config(kind: str, verifier: str, **extra: Any) -> dict[str, Any]:
    """speculators 0.9.0's dflash / dspark export (speculators/models/{dflash,dspark}/config.py)."""
    config: dict[str, Any] = {
        "architectures": ["DFlashSpeculator" if kind == "dflash" else "DSparkSpeculator"],
        "speculators_model_type": kind, "speculators_version": "0.9.0",
        "transformer_layer_config": {k: v for k, v in qwen3_layer().items() if k != "architectures"},
        "draft_vocab_size": VOCAB, "block_size": BLOCK_SIZE, "target_hidden_size": HIDDEN,
        "aux_hidden_state_layer_ids": list(TRAINED_POSITIONS), "mask_token_id": MASK_TOKEN_ID,
        "sample_from_anchor": kind == "dspark",
        "speculators_config": {
            "algorithm": kind, "default_proposal_method": "greedy",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": BLOCK_SIZE - 1,
                                  "verifier_accept_k": 1, "accept_tolerance": 0.0}],
            "verifier": {"name_or_path": verifier, "architectures": ["LlamaForCausalLM"]},
        },
    }
    if kind == "dflash":
        config["sliding_window_non_causal"] = False  # speculators' default (models/dflash/config.py:66-71)
    else:
        config.update(DSPARK_FIELDS)
    return {**config, **extra}


def make_block_drafter(directory: str | Path, config: dict[str, Any]) -> Path:
    return write_checkpoint(directory, config, {"fc.weight": (DTYPE, (HIDDEN, len(TARGET_LAYER_IDS) * HIDDEN), None)})
