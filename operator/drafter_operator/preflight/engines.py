"""What vLLM 0.33.0 and SGLang 0.5.23 do with a drafter checkpoint, as pure functions of its config.

Every function here restates one piece of the installed engines' loading code (file and function named
in its docstring); tests/contract/test_preflight_contract.py runs the real code on the same inputs and
asserts the same answers. Nothing here imports an engine.

Layer positions. Both engines feed an EAGLE-3 drafter the target's residual stream at a few depths. A
*position* p below is "the residual stream after p target layers": 0 is the embeddings, N (the
target's num_hidden_layers) the last layer's output before the final norm. Each engine turns the
drafter's ``eagle_aux_hidden_state_layer_ids`` into positions its own way:

- vLLM (vllm/model_executor/models/llama.py LlamaModel.forward, interfaces.py
  EagleModelMixin._maybe_add_hidden_state): an id is a position; 0..N can be captured.
- SGLang (python/sglang/srt/models/llama.py LlamaForCausalLM.set_eagle3_layers_to_capture,
  LlamaModel.forward): ``layers_to_capture`` holds layer indices whose *input* is captured, so a value
  is a position too, but only 0..N-1 exist; the id -> value rule depends on the target's class.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Sequence

from drafter_operator import engines as engine_modules
from drafter_operator.constants import ENGINES, Engine
from drafter_operator.engines import vllm as vllm_engine

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
# Architectures

# vllm/model_executor/models/registry.py _SPECULATIVE_DECODING_MODELS: the EAGLE-3 heads.
VLLM_EAGLE3_ARCHITECTURES: frozenset[str] = frozenset({
    "Eagle3LlamaForCausalLM", "LlamaForCausalLMEagle3", "Eagle3MiniMaxM2ForCausalLM", "Eagle3Qwen2_5vlForCausalLM",
    "Eagle3Qwen3vlForCausalLM", "Eagle3Qwen3ForCausalLM", "Eagle3DeepseekV2ForCausalLM", "Eagle3DeepseekV3ForCausalLM",
    "PEagleDraftModel", "PeagleLlamaForCausalLM", "PeagleQwen3ForCausalLM",
})
# ... and the EAGLE(-1/2) heads.
VLLM_EAGLE_ARCHITECTURES: frozenset[str] = frozenset({
    "EagleLlamaForCausalLM", "EagleLlama4ForCausalLM", "EagleMiniCPMForCausalLM", "EagleCohereForCausalLM",
    "EagleMistralForCausalLM", "EagleMistralLarge3ForCausalLM", "EagleDeepSeekMTPModel",
})
# SGLang loads the draft under the architecture its config.json names (python/sglang/srt/models/*: the
# EntryClass lists of llama_eagle3.py and kimi_k25_eagle3.py; llama_eagle.py, qwen2_eagle.py,
# mistral_eagle.py, mistral_large_3_eagle.py).
SGLANG_EAGLE3_ARCHITECTURES: frozenset[str] = frozenset({"LlamaForCausalLMEagle3", "Eagle3DeepseekV2ForCausalLM"})
SGLANG_EAGLE_ARCHITECTURES: frozenset[str] = frozenset({
    "LlamaForCausalLMEagle", "Qwen2ForCausalLMEagle", "MistralForCausalLMEagle", "MistralLarge3ForCausalLMEagle",
})
# Llama-style EAGLE-3 heads: fc + one decoder layer + norm + lm_head (+ d2t/t2d), the tensor rules' shape.
LLAMA_STYLE_EAGLE3 = frozenset({"LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM", "LlamaForCausalLM"})
# vllm/transformers_utils/configs/speculators/algos.py: the speculators_model_type values vLLM reads,
# and update_eagle3's model_type -> architecture map.
VLLM_SPECULATORS_TYPES: frozenset[str] = frozenset({"eagle3", "peagle", "dflash", "dflash2", "dspark"})
VLLM_SPECULATORS_EAGLE3_MODEL_TYPES: dict[str, str] = {"llama": "Eagle3LlamaForCausalLM",
                                                       "qwen3": "Eagle3Qwen3ForCausalLM"}


def vllm_eagle_architecture(architecture: str, method: str) -> str:
    """The architecture vLLM loads a drafter as (vllm/transformers_utils/configs/eagle.py
    EAGLEConfig.__init__): eagle prefixes "Eagle", eagle3 prefixes "Eagle3", unless already marked."""
    if method == "eagle":
        return architecture if architecture.startswith("Eagle") else f"Eagle{architecture}"
    if architecture.startswith("Eagle3") or architecture.endswith("Eagle3"):
        return architecture
    return f"Eagle3{architecture}"


# ---------------------------------------------------------------------------------------------------
# Layer ids -> positions


def vllm_default_layers(num_layers: int) -> tuple[int, ...]:
    """interfaces.py SupportsEagle3.get_eagle3_default_aux_hidden_state_layers."""
    return (2, num_layers // 2, num_layers - 3)


# SGLang 0.5.23: how each target class's set_eagle3_layers_to_capture maps ids to layers_to_capture.
PLUS_ONE = "plus-one"  # [id + 1 ...]: llama.py, qwen2.py, qwen3_moe.py, glm4_moe.py, minimax_m2.py, ...
PLUS_ONE_IF_FIRST_IS_ONE = "plus-one-if-first-is-one"  # deepseek_v2.py, glm4_moe_lite.py
AS_WRITTEN_IF_MAX_IS_N = "as-written-if-max-is-n"  # gpt_oss.py
SGLANG_CAPTURE_RULES: dict[str, str] = {
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


def sglang_capture_rule(target_architecture: str | None) -> tuple[str, bool]:
    """(rule, known): the rule for this target class; unknown classes are assumed to add 1 (most do)."""
    rule = SGLANG_CAPTURE_RULES.get(target_architecture or "")
    return (rule, True) if rule else (PLUS_ONE, False)


def sglang_layers_to_capture(rule: str, layer_ids: Sequence[int] | None, num_layers: int) -> list[int]:
    """``model.layers_to_capture`` after set_eagle3_layers_to_capture(layer_ids) (None: the default)."""
    if layer_ids is None:
        return [2, num_layers // 2, num_layers - 3]
    ids = list(layer_ids)
    if rule == PLUS_ONE_IF_FIRST_IS_ONE:
        return [i + 1 for i in ids] if ids and ids[0] == 1 else ids
    if rule == AS_WRITTEN_IF_MAX_IS_N:
        return ids if ids and max(ids) == num_layers else [i + 1 for i in ids]
    return [i + 1 for i in ids]


def trained_positions(layer_ids: Sequence[int], convention: Convention) -> tuple[int, ...]:
    """The positions a drafter was trained on: vLLM/speculators ids are positions; SGLang/SpecForge
    ids name the layer whose output is taken (position id + 1)."""
    return tuple(i + 1 for i in layer_ids) if convention == "sglang" else tuple(layer_ids)


def ids_for_positions(engine: Engine, positions: Sequence[int], rule: str, num_layers: int) -> list[int] | None:
    """Layer ids that make ``engine`` capture ``positions`` (None if no list of ids can)."""
    wanted = sorted(set(positions))
    if engine == "vllm":
        return list(positions)
    for candidate in ([p - 1 for p in positions], list(positions)):
        if sorted(set(sglang_layers_to_capture(rule, candidate, num_layers))) == wanted:
            return candidate
    return None


# ---------------------------------------------------------------------------------------------------
# Which config field each engine reads


def _eagle_config(config: dict) -> dict:
    value = config.get("eagle_config")
    return value if isinstance(value, dict) else {}


def uses_aux_hidden_states(config: dict) -> bool:
    """eagle_config.use_aux_hidden_state (default true): vLLM eagle3_utils.requires_aux_hidden_states,
    SGLang spec_aux_hidden_state._resolve_eagle_aux_hidden_state."""
    return bool(_eagle_config(config).get("use_aux_hidden_state", True))


def num_aux_hidden_states(config: dict) -> int:
    """How many target states the drafter's fc takes: num_aux_hidden_states, else the length of
    eagle_config.eagle_aux_hidden_state_layer_ids, else 3 (vLLM llama_eagle3.py LlamaModel.__init__,
    SGLang llama_eagle3.py LlamaModel.__init__; neither counts a top-level id list)."""
    explicit = config.get("num_aux_hidden_states")
    if explicit is not None:
        return int(explicit)
    ids = _eagle_config(config).get("eagle_aux_hidden_state_layer_ids")
    return len(ids) if ids else 3


@dataclass(frozen=True)
class Capture:
    """What one engine captures from the target for this drafter."""

    engine: str
    source: str  # where the ids came from, e.g. "eagle_config.eagle_aux_hidden_state_layer_ids"
    layer_ids: tuple[int, ...] | None  # as read (None: the engine's default)
    requested: tuple[int, ...]  # positions asked for (vLLM: the ids; SGLang: layers_to_capture)
    valid: tuple[int, int]  # the positions that exist, inclusive
    captured: tuple[int, ...] = field(default=())  # positions really captured, in order, each once

    @property
    def out_of_range(self) -> tuple[int, ...]:
        lo, hi = self.valid
        return tuple(p for p in self.requested if not lo <= p <= hi)


def vllm_capture(config: dict, num_layers: int, runner: VllmRunner = "v2") -> Capture:
    """The positions vLLM captures for an EAGLE-3 drafter whose (vLLM-side) hf_config is ``config``.

    v2 (the default model runner on GPUs in 0.33.0, vllm/config/vllm.py VllmConfig.use_v2_model_runner):
    vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py get_eagle3_aux_layers_from_config reads the
    top-level eagle_aux_hidden_state_layer_ids, then dflash/dspark fields, then eagle_config["layer_ids"]
    -- never eagle_config["eagle_aux_hidden_state_layer_ids"]. v1 (VLLM_USE_V2_MODEL_RUNNER=0):
    vllm/v1/worker/gpu_model_runner.py GPUModelRunner._get_eagle3_aux_layers_from_config reads the
    top-level list, else eagle_config["eagle_aux_hidden_state_layer_ids"]. With neither, the target's
    default (2, N//2, N-3). EagleModelMixin._set_aux_hidden_state_layers sorts and de-duplicates.
    """
    eagle = _eagle_config(config)
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
        requested = vllm_default_layers(num_layers)
    valid = (0, num_layers)
    captured = tuple(p for p in sorted(set(requested)) if valid[0] <= p <= valid[1])
    return Capture("vllm", source, layer_ids, tuple(requested), valid, captured)


def sglang_capture(config: dict, num_layers: int, target_architecture: str | None) -> Capture:
    """The positions SGLang captures for an EAGLE-3 drafter.

    python/sglang/srt/model_executor/model_runner_components/spec_aux_hidden_state.py
    _resolve_eagle_aux_hidden_state reads only eagle_config["eagle_aux_hidden_state_layer_ids"] (a
    top-level list is ignored; no eagle_config means None, the target's default); the target class's
    set_eagle3_layers_to_capture maps the ids (sglang_layers_to_capture); its forward captures the
    input of each listed layer index that exists (0..N-1).
    """
    ids = _eagle_config(config).get("eagle_aux_hidden_state_layer_ids")
    rule, _ = sglang_capture_rule(target_architecture)
    if ids:
        layer_ids: tuple[int, ...] | None = tuple(int(i) for i in ids)
        source = f"eagle_config.eagle_aux_hidden_state_layer_ids ({rule} for {target_architecture})"
    else:
        layer_ids, source = None, f"target default [2, N//2, N-3] for N={num_layers}"
    requested = tuple(sglang_layers_to_capture(rule, layer_ids, num_layers))
    valid = (0, num_layers - 1)
    captured = tuple(p for p in sorted(set(requested)) if valid[0] <= p <= valid[1])
    return Capture("sglang", source, layer_ids, requested, valid, captured)


def engine_capture(engine: Engine, config: dict, num_layers: int, target_architecture: str | None,
                   runner: VllmRunner = "v2") -> Capture:
    if engine == "vllm":
        return vllm_capture(config, num_layers, runner)
    return sglang_capture(config, num_layers, target_architecture)


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
