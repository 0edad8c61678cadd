"""vLLM: ports, endpoints, exact metric names, and parsing of its ``/metrics``.

Facts from ../shared/reference/engines.md (vLLM 0.33.0). Sections:
1. endpoints and ports; 2. metric names; 3. parsing ``/metrics`` into spec-decode counters.
Command rendering (``vllm serve ... --speculative-config``) belongs in this module too, in its own
section.
"""

from __future__ import annotations

import json

from drafter_operator.engines.metrics import (
    SpecDecodeCounters,
    parse_samples,
    select,
    sum_samples,
)

ENGINE = "vllm"

# --------------------------------------------------------------------------------------------------
# 1. Endpoints and ports
# --------------------------------------------------------------------------------------------------

DEFAULT_PORT = 8000
#: 200 once the engine serves, 503 when it is dead (the emulator also answers 503 while loading).
HEALTH_PATH = "/health"
#: What the readiness and startup probes should hit.
READINESS_PATH = HEALTH_PATH
METRICS_PATH = "/metrics"
MODELS_PATH = "/v1/models"
COMPLETIONS_PATH = "/v1/completions"
CHAT_COMPLETIONS_PATH = "/v1/chat/completions"

# --------------------------------------------------------------------------------------------------
# 2. Metric names, as exposed (counters carry their ``_total`` suffix; declare them with these names
#    in prometheus_client and the exposition is identical)
# --------------------------------------------------------------------------------------------------

LABEL_MODEL_NAME = "model_name"
LABEL_ENGINE = "engine"
LABEL_POSITION = "position"
LABEL_FINISHED_REASON = "finished_reason"

# Speculative decoding (vllm/v1/spec_decode/metrics.py); registered only when speculation is on.
SPEC_DECODE_NUM_DRAFTS = "vllm:spec_decode_num_drafts_total"
SPEC_DECODE_NUM_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
SPEC_DECODE_NUM_ACCEPTED_TOKENS = "vllm:spec_decode_num_accepted_tokens_total"
SPEC_DECODE_NUM_ACCEPTED_TOKENS_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
# Counters (vllm/v1/metrics/loggers.py).
GENERATION_TOKENS = "vllm:generation_tokens_total"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
REQUEST_SUCCESS = "vllm:request_success_total"
# Gauges.
NUM_REQUESTS_RUNNING = "vllm:num_requests_running"
NUM_REQUESTS_WAITING = "vllm:num_requests_waiting"
KV_CACHE_USAGE_PERC = "vllm:kv_cache_usage_perc"
# Histograms (family names; samples add _bucket, _sum, _count).
TIME_TO_FIRST_TOKEN_SECONDS = "vllm:time_to_first_token_seconds"
INTER_TOKEN_LATENCY_SECONDS = "vllm:inter_token_latency_seconds"
E2E_REQUEST_LATENCY_SECONDS = "vllm:e2e_request_latency_seconds"

SPEC_DECODE_METRICS = (
    SPEC_DECODE_NUM_DRAFTS,
    SPEC_DECODE_NUM_DRAFT_TOKENS,
    SPEC_DECODE_NUM_ACCEPTED_TOKENS,
    SPEC_DECODE_NUM_ACCEPTED_TOKENS_PER_POS,
)

# --------------------------------------------------------------------------------------------------
# 3. Parsing /metrics
# --------------------------------------------------------------------------------------------------


def parse_spec_decode_metrics(text: str, model_name: str | None = None) -> SpecDecodeCounters:
    """Spec-decode counters from a vLLM ``/metrics`` text.

    Series are summed over engine cores (label ``engine``); ``model_name`` restricts them to one
    served model. ``speculative`` is False when the server exports no spec-decode metrics (plain
    serving, or a data-parallel server whose spec-decode logger is missing, see engines.md).
    """
    samples = parse_samples(text)
    labels = {LABEL_MODEL_NAME: model_name}
    drafts = sum_samples(samples, SPEC_DECODE_NUM_DRAFTS, labels)
    per_position: dict[int, float] = {}
    for sample in select(samples, SPEC_DECODE_NUM_ACCEPTED_TOKENS_PER_POS, labels):
        try:
            position = int(sample.labels.get(LABEL_POSITION, ""))
        except ValueError:
            continue
        per_position[position] = per_position.get(position, 0.0) + sample.value
    positions = tuple(per_position.get(i, 0.0) for i in range(max(per_position) + 1)) if per_position else ()
    return SpecDecodeCounters(
        engine="vllm",
        speculative=drafts is not None,
        drafts=drafts,
        draft_tokens=sum_samples(samples, SPEC_DECODE_NUM_DRAFT_TOKENS, labels),
        accepted_tokens=sum_samples(samples, SPEC_DECODE_NUM_ACCEPTED_TOKENS, labels),
        accepted_per_position=positions,
        generation_tokens=sum_samples(samples, GENERATION_TOKENS, labels),
        prompt_tokens=sum_samples(samples, PROMPT_TOKENS, labels),
    )


# --------------------------------------------------------------------------------------------------
# 4. Command rendering
# --------------------------------------------------------------------------------------------------

# spec.drafter.method -> SpeculativeConfig.method (vLLM spells the draft-model method draft_model).
SPECULATIVE_METHODS = {"eagle3": "eagle3", "eagle": "eagle", "mtp": "mtp", "ngram": "ngram",
                       "draftModel": "draft_model"}
#: num_speculative_tokens rendered for method mtp when the spec leaves it unset (vLLM requires it).
MTP_DEFAULT_SPECULATIVE_TOKENS = 1


def speculative_config(drafter) -> dict | None:
    """The `--speculative-config` JSON object for a DrafterSpec, or None for method none."""
    if drafter.method == "none":
        return None
    config: dict = {"method": SPECULATIVE_METHODS[drafter.method]}
    if drafter.model:
        config["model"] = drafter.model
    if drafter.num_speculative_tokens is not None:
        config["num_speculative_tokens"] = drafter.num_speculative_tokens
    elif drafter.method == "mtp":
        # vLLM 0.33.0 does not read it from the model for MTP: SpeculativeConfig raises without it
        # (ValueError with no model, TypeError with one; tests/contract). One MTP layer (DeepSeek-V3/Kimi).
        config["num_speculative_tokens"] = MTP_DEFAULT_SPECULATIVE_TOKENS
    return config


def render_command(spec) -> list[str]:
    """`vllm serve` argv for a DrafterServingSpec (the image's entrypoint plus every flag we own)."""
    target = spec.target
    argv = ["vllm", "serve", target.model, "--host", "0.0.0.0", "--port", str(DEFAULT_PORT),
            "--tensor-parallel-size", str(target.tensor_parallel_size)]
    if target.max_model_len is not None:
        argv += ["--max-model-len", str(target.max_model_len)]
    if target.gpu_memory_utilization is not None:
        argv += ["--gpu-memory-utilization", target.gpu_memory_utilization]
    if target.trust_remote_code:
        argv.append("--trust-remote-code")
    if target.tool_call_parser:
        argv += ["--tool-call-parser", target.tool_call_parser, "--enable-auto-tool-choice"]
    if target.reasoning_parser:
        argv += ["--reasoning-parser", target.reasoning_parser]
    config = speculative_config(spec.drafter)
    if config is not None:
        argv += ["--speculative-config", json.dumps(config, separators=(",", ":"))]
    return argv + list(target.extra_args or [])
