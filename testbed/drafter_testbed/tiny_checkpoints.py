"""Tiny checkpoints in the layouts the training frameworks export, for tests and demos.

A Llama target (4 layers, hidden 64, 2 heads of 64, the emulator's 4096-token tokenizer) and EAGLE-3
drafters for it: SpecForge's HF/SGLang export (``architectures: [LlamaForCausalLMEagle3]``, draft
weights named ``midlayer.*``, ``eagle_config.eagle_aux_hidden_state_layer_ids`` in SGLang's
convention) and a speculators checkpoint (``speculators_model_type: eagle3``, ``transformer_layer_config``,
``layers.0.*``, top-level layer ids in vLLM's convention). Weights are zeros (the d2t mapping is real:
a sorted sample of target ids), written with the stdlib safetensors writer; the real `safetensors`
loads them (tests/contract).
"""

from __future__ import annotations

import json
import random
import shutil
from importlib import resources
from pathlib import Path
from typing import Any

from drafter_operator.preflight.safetensors import pack_integers, write_safetensors

HIDDEN = 64
LAYERS = 4
VOCAB = 4096
DRAFT_VOCAB = 1024
HEADS = 2
INTERMEDIATE = 128
DTYPE = "BF16"
# The positions (residual stream after p layers) the tiny drafters are trained on.
TRAINED_POSITIONS = (1, 2, 3)

Tensors = dict[str, tuple[str, tuple[int, ...], bytes | None]]


def tokenizer_dir() -> Path:
    return Path(str(resources.files("drafter_operator.data").joinpath("tokenizer")))


def target_config(layers: int = LAYERS, hidden: int = HIDDEN, vocab: int = VOCAB, **extra: Any) -> dict:
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
            "intermediate_size": INTERMEDIATE, "num_hidden_layers": layers, "num_attention_heads": HEADS,
            "num_key_value_heads": HEADS, "head_dim": hidden // HEADS, "vocab_size": vocab,
            "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "torch_dtype": "bfloat16",
            "tie_word_embeddings": False, "bos_token_id": 0, "eos_token_id": 2, "hidden_act": "silu",
            "attention_bias": False, "attention_dropout": 0.0, "mlp_bias": False, "pretraining_tp": 1,
            "initializer_range": 0.02, "use_cache": True, **extra}


def write_checkpoint(directory: str | Path, config: dict, tensors: Tensors, tokenizer: bool = False,
                     shards: int = 1) -> Path:
    """config.json + safetensors (``shards`` > 1 writes model-0000i-of-0000n files and the index)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    if shards <= 1:
        write_safetensors(directory / "model.safetensors", tensors, {"format": "pt"})
    else:
        names = list(tensors)
        weight_map = {}
        for s in range(shards):
            part = {n: tensors[n] for n in names[s::shards]}
            file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
            write_safetensors(directory / file, part, {"format": "pt"})
            weight_map.update({n: file for n in part})
        (directory / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    if tokenizer:
        copy_tokenizer(directory)
    return directory


def copy_tokenizer(directory: str | Path) -> None:
    for file in tokenizer_dir().iterdir():
        if file.name.endswith(".json"):
            shutil.copy(file, Path(directory) / file.name)


def target_tensors(layers: int = LAYERS, hidden: int = HIDDEN, vocab: int = VOCAB, mtp_layers: int = 0) -> Tensors:
    tensors: Tensors = {"model.embed_tokens.weight": (DTYPE, (vocab, hidden), None),
                        "lm_head.weight": (DTYPE, (vocab, hidden), None),
                        "model.norm.weight": (DTYPE, (hidden,), None)}
    for i in range(layers + mtp_layers):
        p = f"model.layers.{i}."
        tensors.update({
            p + "input_layernorm.weight": (DTYPE, (hidden,), None),
            p + "post_attention_layernorm.weight": (DTYPE, (hidden,), None),
            p + "self_attn.q_proj.weight": (DTYPE, (hidden, hidden), None),
            p + "self_attn.k_proj.weight": (DTYPE, (hidden, hidden), None),
            p + "self_attn.v_proj.weight": (DTYPE, (hidden, hidden), None),
            p + "self_attn.o_proj.weight": (DTYPE, (hidden, hidden), None),
            p + "mlp.gate_proj.weight": (DTYPE, (INTERMEDIATE, hidden), None),
            p + "mlp.up_proj.weight": (DTYPE, (INTERMEDIATE, hidden), None),
            p + "mlp.down_proj.weight": (DTYPE, (hidden, INTERMEDIATE), None),
        })
    return tensors


def make_target(directory: str | Path, layers: int = LAYERS, hidden: int = HIDDEN, vocab: int = VOCAB,
                shards: int = 1, tokenizer: bool = True, **extra: Any) -> Path:
    return write_checkpoint(directory, target_config(layers, hidden, vocab, **extra),
                            target_tensors(layers, hidden, vocab), tokenizer=tokenizer, shards=shards)


def draft_targets(draft_vocab: int = DRAFT_VOCAB, vocab: int = VOCAB, seed: int = 0) -> list[int]:
    """The target ids of the draft vocabulary (sorted, as SpecForge and speculators build them)."""
    return sorted(random.Random(seed).sample(range(vocab), draft_vocab))


def mapping_tensors(draft_vocab: int = DRAFT_VOCAB, vocab: int = VOCAB, seed: int = 0) -> Tensors:
    targets = draft_targets(draft_vocab, vocab, seed)
    d2t = [t - i for i, t in enumerate(targets)]
    chosen = set(targets)
    t2d = [i in chosen for i in range(vocab)]
    return {"d2t": ("I64", (draft_vocab,), pack_integers(d2t, "I64")),
            "t2d": ("BOOL", (vocab,), pack_integers(t2d, "BOOL"))}


def eagle3_tensors(prefix: str = "midlayer.", hidden: int = HIDDEN, draft_vocab: int = DRAFT_VOCAB,
                   vocab: int = VOCAB, num_aux: int = 3, target_hidden: int | None = None) -> Tensors:
    """A Llama-style EAGLE-3 head: fc, one decoder layer taking [embeddings, hidden], norm, lm_head, d2t/t2d."""
    fed = target_hidden or hidden
    tensors: Tensors = {
        "fc.weight": (DTYPE, (hidden, fed * num_aux), None),
        prefix + "hidden_norm.weight": (DTYPE, (hidden,), None),
        prefix + "input_layernorm.weight": (DTYPE, (hidden,), None),
        prefix + "post_attention_layernorm.weight": (DTYPE, (hidden,), None),
        prefix + "self_attn.q_proj.weight": (DTYPE, (hidden, 2 * hidden), None),
        prefix + "self_attn.k_proj.weight": (DTYPE, (hidden, 2 * hidden), None),
        prefix + "self_attn.v_proj.weight": (DTYPE, (hidden, 2 * hidden), None),
        prefix + "self_attn.o_proj.weight": (DTYPE, (hidden, hidden), None),
        prefix + "mlp.gate_proj.weight": (DTYPE, (INTERMEDIATE, hidden), None),
        prefix + "mlp.up_proj.weight": (DTYPE, (INTERMEDIATE, hidden), None),
        prefix + "mlp.down_proj.weight": (DTYPE, (hidden, INTERMEDIATE), None),
        "norm.weight": (DTYPE, (hidden,), None),
        "lm_head.weight": (DTYPE, (draft_vocab, hidden), None),
    }
    tensors.update(mapping_tensors(draft_vocab, vocab))
    return tensors


def specforge_config(layer_ids: list[int] | None = None, hidden: int = HIDDEN, vocab: int = VOCAB,
                     draft_vocab: int | None = DRAFT_VOCAB, **extra: Any) -> dict:
    """SpecForge's export (`specforge export --to sglang|hf`): SGLang's convention, ids = position - 1."""
    config = {**target_config(1, hidden, vocab), "architectures": ["LlamaForCausalLMEagle3"]}
    if draft_vocab is not None:
        config["draft_vocab_size"] = draft_vocab
    config["eagle_config"] = {"eagle_aux_hidden_state_layer_ids":
                              [p - 1 for p in TRAINED_POSITIONS] if layer_ids is None else list(layer_ids)}
    config.update(extra)
    return config


def make_specforge(directory: str | Path, config: dict | None = None, tensors: Tensors | None = None,
                   drop: tuple[str, ...] = (), **config_extra: Any) -> Path:
    config = config if config is not None else specforge_config(**config_extra)
    tensors = dict(tensors if tensors is not None else eagle3_tensors())
    for name in drop:
        tensors.pop(name, None)
    return write_checkpoint(directory, config, tensors)


def speculators_config(verifier: str, layer_ids: list[int] | None = None, hidden: int = HIDDEN, vocab: int = VOCAB,
                       draft_vocab: int = DRAFT_VOCAB, **extra: Any) -> dict:
    """A speculators 0.9 eagle3 checkpoint config: vLLM's convention, ids = positions."""
    layer = {k: v for k, v in target_config(1, hidden, vocab).items() if k != "architectures"}
    return {
        "architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3", "speculators_version": "0.9.0",
        "draft_vocab_size": draft_vocab, "norm_before_residual": True, "transformer_layer_config": layer,
        "eagle_aux_hidden_state_layer_ids": list(TRAINED_POSITIONS) if layer_ids is None else list(layer_ids),
        "speculators_config": {
            "algorithm": "eagle3", "default_proposal_method": "greedy",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3, "verifier_accept_k": 1,
                                  "accept_tolerance": 0.0}],
            "verifier": {"name_or_path": verifier, "architectures": ["LlamaForCausalLM"]},
        },
        **extra,
    }


def make_speculators(directory: str | Path, verifier: str, config: dict | None = None, tensors: Tensors | None = None,
                     drop: tuple[str, ...] = (), **config_extra: Any) -> Path:
    config = config if config is not None else speculators_config(verifier, **config_extra)
    tensors = dict(tensors if tensors is not None else eagle3_tensors(prefix="layers.0."))
    for name in drop:
        tensors.pop(name, None)
    return write_checkpoint(directory, config, tensors)


def make_eagle1(directory: str | Path, hidden: int = HIDDEN, vocab: int = VOCAB,
                architecture: str = "LlamaForCausalLM") -> Path:
    """An EAGLE(-1) head as the EAGLE authors publish it: a Llama config, fc over [embeddings, hidden]."""
    config = {**target_config(1, hidden, vocab), "architectures": [architecture]}
    tensors: Tensors = {"fc.weight": (DTYPE, (hidden, 2 * hidden), None)}
    for name, (dtype, shape, data) in eagle3_tensors(prefix="layers.0.", hidden=hidden, vocab=vocab).items():
        if name.startswith("layers.0.") and "hidden_norm" not in name:
            shape = (shape[0], hidden) if name.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight")) else shape
            tensors[name] = (dtype, shape, data)
    return write_checkpoint(directory, config, tensors)
