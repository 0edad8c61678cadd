"""What a training costs before it runs: GPU-seconds of Extract and Train from the spec and the target's config (pure).

The rates are measured, not assumed: bench/gpu_training.py ran both frameworks on one H200 (bench/gpu_training_h200.json,
docs/training.md) on two stand-in targets built locally, one 1024 wide and one as wide as Kimi-K2.5 (7168):

* Train's rate is tokens per second per GPU at the drafter's width, which is the target's hidden size. Between and
  beyond the two measured widths it follows the power law through them (a drafter is one decoder layer of that
  width; how its step time grows with the width is what the two points measure, start-up and compilation excluded).
* Extract's rate is the target's forward pass: its compute per token is twice the parameters a token activates
  (``active_parameters``: a MoE layer counts only its routed and shared experts), so tokens per second per GPU is the
  measured capture's FLOP rate over that. On the Kimi-width stand-in the capture ran 7,504 tok/s at 2.44B active
  parameters; for Kimi-K2.5 (31.5B) that gives 581 tok/s per GPU, where the seed's own SGLang extraction measured
  396 (3,165 tok/s on 8 GPUs): the estimate is that close, not closer.

Tokens are at most ``numSamples x train.maxLength`` (the figure the hidden-state claim is sized by); a run whose
samples are shorter finishes sooner. Generate (the engine's answers), Export, Evaluate and Promote are not counted:
the first is the serving engine's decode rate, the others take minutes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from drafter_operator.training.hidden_state_size import most_tokens

#: Train, tokens per second per H200 at a drafter width (the target's hidden size), per framework: (width, rate) twice.
TRAIN_RATES: dict[str, tuple[tuple[int, float], tuple[int, float]]] = {
    "specforge": ((1024, 5353.5), (7168, 3479.0)),
    "speculators": ((1024, 40106.0), (7168, 5519.5)),
}
#: Extract: the capture's FLOP rate per H200 (7,503.8 tok/s x 2 x 2.437e9 active parameters, the Kimi-width stand-in).
EXTRACT_FLOPS_PER_SECOND = 7503.8 * 2 * 2.437e9
MEASURED_ON = "H200"


@dataclass(frozen=True)
class RunCost:
    """GPU-seconds per stage, the tokens they were counted for, and how."""

    gpu_seconds: Mapping[str, float]
    tokens: int
    basis: str

    @property
    def gpu_hours(self) -> float:
        return sum(self.gpu_seconds.values()) / 3600


def _text_config(config: Mapping) -> Mapping:
    return config.get("text_config") or config


def _attention_parameters(c: Mapping, hidden: int) -> int:
    heads = c.get("num_attention_heads") or 1
    if c.get("kv_lora_rank"):  # multi-head latent attention (DeepSeek-V3, Kimi-K2)
        nope, rope = c.get("qk_nope_head_dim", 128), c.get("qk_rope_head_dim", 64)
        value, kv_rank, q_rank = c.get("v_head_dim", 128), c["kv_lora_rank"], c.get("q_lora_rank")
        query = hidden * q_rank + q_rank * heads * (nope + rope) if q_rank else hidden * heads * (nope + rope)
        return query + hidden * (kv_rank + rope) + kv_rank * heads * (nope + value) + heads * value * hidden
    head_dim = c.get("head_dim") or hidden // heads
    kv_heads = c.get("num_key_value_heads") or heads
    return 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim


def active_parameters(config: Mapping) -> int:
    """Parameters one token's forward pass multiplies by: attention, the MLP (for a MoE layer only its routed top-k
    and shared experts), and the LM head; the embedding is a lookup."""
    c = _text_config(config)
    hidden, layers = int(c["hidden_size"]), int(c["num_hidden_layers"])
    dense_mlp = 3 * hidden * int(c.get("intermediate_size") or 4 * hidden)
    experts = c.get("n_routed_experts") or c.get("num_experts") or c.get("num_local_experts")
    if experts:
        per_expert = 3 * hidden * int(c.get("moe_intermediate_size") or c.get("intermediate_size"))
        active = int(c.get("num_experts_per_tok") or 1) + int(c.get("n_shared_experts") or 0)
        dense_layers = min(layers, int(c.get("first_k_dense_replace") or 0))
        mlp = dense_layers * dense_mlp + (layers - dense_layers) * active * per_expert
    else:
        mlp = layers * dense_mlp
    return layers * _attention_parameters(c, hidden) + mlp + hidden * int(c.get("vocab_size") or 0)


def train_rate(framework: str, hidden_size: int) -> float:
    """Train tokens per second per GPU at ``hidden_size``: the power law through the framework's two measurements."""
    (w1, r1), (w2, r2) = TRAIN_RATES[framework]
    exponent = math.log(r2 / r1) / math.log(w2 / w1)
    return r1 * (hidden_size / w1) ** exponent


def extract_rate(config: Mapping) -> float:
    """Extract tokens per second per GPU: the measured capture FLOP rate over 2 x the active parameters."""
    return EXTRACT_FLOPS_PER_SECOND / (2 * active_parameters(config))


def run_cost(spec, target_config: Mapping) -> RunCost | None:
    """GPU-seconds of Extract and of Train for ``spec`` (a DrafterTrainingSpec) on this target, or None where the
    config lacks the hidden size or layer count it needs."""
    c = _text_config(target_config)
    if not isinstance(c.get("hidden_size"), int) or not isinstance(c.get("num_hidden_layers"), int):
        return None
    tokens = most_tokens(spec)
    extract, train = extract_rate(target_config), train_rate(spec.framework, c["hidden_size"])
    seconds = {"Extract": tokens / extract, "Train": tokens * spec.train.epochs / train}
    basis = (f"at most {tokens:,} tokens ({spec.data.num_samples:,} samples x maxLength {spec.train.max_length}); "
             f"Extract {extract:,.0f} tok/s per GPU ({active_parameters(target_config) / 1e9:.3g}B active parameters), "
             f"Train {train:,.0f} tok/s per GPU x {spec.train.epochs} epoch{'' if spec.train.epochs == 1 else 's'} "
             f"({spec.framework}, hidden size "
             f"{c['hidden_size']}); rates measured on an {MEASURED_ON}")
    return RunCost(gpu_seconds=seconds, tokens=tokens, basis=basis)
