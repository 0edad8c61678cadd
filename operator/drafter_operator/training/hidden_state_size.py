"""How much the Extract stage writes: the size the hidden-state claim is checked against (pure).

The hidden states are the pipeline's largest artifact (the seed wrote 828 GB for 10k samples of a
7168-wide target); the stage runner records this estimate in its plan and the operator reports the
claim's fill against it.
"""

from __future__ import annotations

from collections.abc import Mapping

#: Hidden states are stored in bf16; each token also stores its id and loss mask (int64 each).
BYTES_PER_VALUE = 2
BYTES_PER_TOKEN_OVERHEAD = 16


def estimate_hidden_state_bytes(num_samples: int, tokens_per_sample: int, hidden_size: int, layers: int = 3) -> int:
    """What an extraction writes: per token the ``layers`` auxiliary hidden states and the last
    one (``layers + 1`` vectors of ``hidden_size`` bf16 values) plus its id and loss mask."""
    if min(num_samples, tokens_per_sample, hidden_size, layers) < 1:
        raise ValueError("samples, tokens per sample, hidden size and layers must all be at least 1")
    per_token = (layers + 1) * hidden_size * BYTES_PER_VALUE + BYTES_PER_TOKEN_OVERHEAD
    return num_samples * tokens_per_sample * per_token


def most_tokens(spec) -> int:
    """The most tokens a run captures and trains per epoch: every sample at train.maxLength (what the claim is sized
    by and what the cost estimate counts)."""
    return spec.data.num_samples * spec.train.max_length


def hidden_states_estimate(spec, target_config: Mapping) -> int | None:
    """What Extract writes at most: every sample at train.maxLength tokens (the claim must hold that)."""
    hidden = (target_config.get("text_config") or target_config).get("hidden_size")
    if not isinstance(hidden, int):
        return None
    return estimate_hidden_state_bytes(1, most_tokens(spec), hidden, len(spec.hidden_states.layers or ()) or 3)
