"""Published target model configs, as the training's cost estimate and the API read them."""
from __future__ import annotations

#: Kimi-K2's published text config (DeepSeek-V3's architecture: MLA, 384 routed experts, top 8 plus one shared).
KIMI = {"text_config": {"hidden_size": 7168, "num_hidden_layers": 61, "num_attention_heads": 64,
                        "intermediate_size": 18432, "moe_intermediate_size": 2048, "n_routed_experts": 384,
                        "num_experts_per_tok": 8, "n_shared_experts": 1, "first_k_dense_replace": 1,
                        "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
                        "v_head_dim": 128, "vocab_size": 163840}}
