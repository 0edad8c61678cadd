"""The preflight's view of how the engines load an EAGLE drafter, as pure functions of its config.

What each engine does differently is its record, ``engines.engine(name).CHECKPOINT_LOADING``
(engines/checkpoint_loading.py; vLLM 0.33.0's in engines/vllm_loading.py, SGLang 0.5.23's in
engines/sglang_loading.py), each fact with the engine source it restates. Here: what the rules read the same way on
every engine (whether the drafter takes auxiliary hidden states, how many; the speculators format as vLLM, its one
reader, converts it; MTP weight names) and the layer-id conventions a drafter is trained in (named after the
engines). Nothing here imports an engine.

Layer positions: a *position* p is "the residual stream after p target layers" (engines/checkpoint_loading.py).
"""

from __future__ import annotations

from typing import Literal, Sequence

from drafter_operator import engines as engine_modules
from drafter_operator.constants import ENGINES, Engine
from drafter_operator.engines import vllm as vllm_engine
from drafter_operator.engines.checkpoint_loading import Capture, eagle_config

#: The engine whose layer-id convention a drafter was trained with (the same two names as the engines).
Convention = Engine
VllmRunner = Literal["v1", "v2"]

CONVENTIONS: tuple[str, ...] = ENGINES
VLLM_RUNNERS: tuple[str, ...] = vllm_engine.MODEL_RUNNERS
#: The release each engine module restates (its VERSION), for the verdict's facts.
ENGINE_VERSIONS: dict[str, str] = {name: module.VERSION for name, module in engine_modules.ENGINES.items()}
#: The model runner vLLM picks from VLLM_USE_V2_MODEL_RUNNER's value (its home: engines/vllm.py).
vllm_runner_from_env = vllm_engine.model_runner_from_env

# ---------------------------------------------------------------------------------------------------
# Architectures the rules read on every engine

# Llama-style EAGLE-3 heads: fc + one decoder layer + norm + lm_head (+ d2t/t2d), the tensor rules' shape.
LLAMA_STYLE_EAGLE3 = frozenset({"LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM", "LlamaForCausalLM"})
# vllm/transformers_utils/configs/speculators/algos.py: the speculators_model_type values vLLM reads,
# and update_eagle3's model_type -> architecture map.
VLLM_SPECULATORS_TYPES: frozenset[str] = frozenset({"eagle3", "peagle", "dflash", "dflash2", "dspark"})
VLLM_SPECULATORS_EAGLE3_MODEL_TYPES: dict[str, str] = {"llama": "Eagle3LlamaForCausalLM",
                                                       "qwen3": "Eagle3Qwen3ForCausalLM"}


# ---------------------------------------------------------------------------------------------------
# Layer ids -> positions


def trained_positions(layer_ids: Sequence[int], convention: Convention) -> tuple[int, ...]:
    """The positions a drafter was trained on, from the ids it records in ``convention`` (an engine's: its
    CHECKPOINT_LOADING.layer_id_offset; vLLM/speculators ids are positions, SGLang/SpecForge ids name the layer whose
    output is taken, position id + 1). Ids that are positions already are kept as written."""
    offset = engine_modules.engine(convention).CHECKPOINT_LOADING.layer_id_offset
    return tuple(i + offset for i in layer_ids) if offset else tuple(layer_ids)



# ---------------------------------------------------------------------------------------------------
# What both engines read the same way, and the capture each makes


def uses_aux_hidden_states(config: dict) -> bool:
    """eagle_config.use_aux_hidden_state (default true): vLLM eagle3_utils.requires_aux_hidden_states,
    SGLang spec_aux_hidden_state._resolve_eagle_aux_hidden_state."""
    return bool(eagle_config(config).get("use_aux_hidden_state", True))


def num_aux_hidden_states(config: dict) -> int:
    """How many target states the drafter's fc takes: num_aux_hidden_states, else the length of
    eagle_config.eagle_aux_hidden_state_layer_ids, else 3 (vLLM llama_eagle3.py LlamaModel.__init__,
    SGLang llama_eagle3.py LlamaModel.__init__; neither counts a top-level id list)."""
    explicit = config.get("num_aux_hidden_states")
    if explicit is not None:
        return int(explicit)
    ids = eagle_config(config).get("eagle_aux_hidden_state_layer_ids")
    return len(ids) if ids else 3



# ---------------------------------------------------------------------------------------------------
# The speculators format as vLLM reads it


def speculators_as_vllm_config(config: dict) -> dict:
    """The hf_config vLLM builds from a speculators config.json
    (vllm/transformers_utils/configs/speculators/base.py
    SpeculatorsConfig.extract_transformers_pre_trained_config + algos.update_eagle3): the
    transformer_layer_config, plus draft_vocab_size, target_hidden_size and the top-level
    eagle_aux_hidden_state_layer_ids."""
    out = dict(config.get("transformer_layer_config") or {})
    out["draft_vocab_size"] = config.get("draft_vocab_size")
    if config.get("target_hidden_size") is not None:
        out["target_hidden_size"] = config["target_hidden_size"]
    if config.get("eagle_aux_hidden_state_layer_ids"):
        out["eagle_aux_hidden_state_layer_ids"] = config["eagle_aux_hidden_state_layer_ids"]
    model_type = out.get("model_type", "llama")
    if model_type in VLLM_SPECULATORS_EAGLE3_MODEL_TYPES:
        out["architectures"] = [VLLM_SPECULATORS_EAGLE3_MODEL_TYPES[model_type]]
    return out


# ---------------------------------------------------------------------------------------------------
# MTP heads

MTP_LAYER_KEYS: tuple[str, ...] = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_layers")


def mtp_layer_weight_prefixes(num_layers: int, index: int) -> tuple[str, ...]:
    """vllm/model_executor/models/utils.py get_spec_layer_idx_from_weight_name: the MTP layer i of a
    target with N layers is stored as layer N + i (SGLang deepseek_nextn.py reads model.layers.N too)."""
    n = num_layers + index
    return (f"model.layers.{n}.", f"layers.{n}.", f"model.language_model.layers.{n}.")


def describe_positions(positions: Sequence[int]) -> str:
    return "[" + ", ".join(str(p) for p in positions) + "]"
