"""vLLM: ports, endpoints, exact metric names, and parsing of its ``/metrics``.

Facts checked against the installed vLLM 0.33.0 by the contract tier (tests/contract, docs/engines-contract.md). Sections:
1. endpoints and ports; 2. metric names; 3. parsing ``/metrics`` into spec-decode counters.
Command rendering (``vllm serve ... --speculative-config``) belongs in this module too, in its own
section.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from drafter_operator.capture import records
from drafter_operator.capture.spool import CAPTURE_FILES_DIRECTORY, SPOOL_DIRECTORY, ReopenedLog
from drafter_operator.constants import METHODS_WITH_MODEL
from drafter_operator.engines import vllm_loading
from drafter_operator.engines.dynamic import SCHEDULE_KEY
from drafter_operator.engines.extra_args import (
    OwnedDestination,
    SecretDestination,
    check_extra_args,
    owned_by_every_engine,
    parallel_field_problems,
    parser_name_problems,
)
from drafter_operator.engines.group import LEADER_ADDRESS, NODE_RANK, Parallelism
from drafter_operator.engines.launch import LaunchFacts
from drafter_operator.engines.metrics import GAUGE_RANGES, SpecDecodeCounters
from drafter_operator.engines.metrics_verdicts import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_POSITIONS,
    UnusableReason,
    unusable,
)
from drafter_operator.engines.metrics_body import count_total, counter_series, gauge_mean, position_totals, read_series

ENGINE = "vllm"
#: The release whose command line, metrics and loading code this module restates (tests/contract checks it).
VERSION = "0.33.0"
#: The upstream image at that release (engines.DEFAULT_IMAGES).
DEFAULT_IMAGE = f"vllm/vllm-openai:v{VERSION}"

# --------------------------------------------------------------------------------------------------
# 0. Capabilities: what the operator asks of an engine instead of testing its name
# --------------------------------------------------------------------------------------------------

#: Renders spec.drafter.dynamic's per-batch-size schedule (num_speculative_tokens_per_batch_size in
#: --speculative-config, section 4); the CRD refuses spec.drafter.dynamic on an engine without it.
SUPPORTS_DYNAMIC_SCHEDULE = True
#: The speculative methods of the API this engine has no implementation of (refused by the CRD): none.
REFUSED_METHODS: tuple[str, ...] = ()
#: Keeps spec.drafter.dynamic's per-batch-size schedule with data parallelism: no. vLLM 0.33.0 drops
#: num_speculative_tokens_per_batch_size when data_parallel_size > 1 (its ranks could pick different k and deadlock;
#: vllm/config/vllm.py _maybe_disable_dynamic_sd_for_data_parallel) and drafts a static k.
DYNAMIC_WITH_DATA_PARALLEL = False
#: Drafter methods that cannot run with pipeline parallelism: none (vLLM 0.33.0's V2 runner hands the draft between
#: stages). DSpark's adaptive verification is refused with it (vllm/config/vllm.py: "Adaptive verification is not
#: currently compatible with pipeline parallelism"): the API's rule on spec.drafter.dspark.adaptiveVerification.
PIPELINE_REFUSED_METHODS: tuple[str, ...] = ()
#: Drafter methods that cannot run with data parallelism: none.
DATA_PARALLEL_REFUSED_METHODS: tuple[str, ...] = ()
#: Reads a drafter checkpoint in the speculators format (speculators_model_type, no model_type): vLLM converts it
#: (vllm/transformers_utils/configs/speculators/algos.py); the preflight and DrafterTraining's promote ask.
READS_SPECULATORS_FORMAT = True
#: How vLLM loads a drafter checkpoint: the layer ids it reads, the class it builds, the fields it requires (the
#: facts and their sources: engines/vllm_loading.py). The preflight's rules ask it instead of the engine's name.
CHECKPOINT_LOADING = vllm_loading.LOADING
#: Positionals `vllm serve` takes before the flags (the model), as placeholders: extraArgs are parsed after them.
PLACEHOLDER_POSITIONALS: tuple[str, ...] = ("/model",)
# vllm/envs.py: VLLM_USE_V2_MODEL_RUNNER is read with maybe_convert_bool (bool(int(value))); unset, the v2
# runner is the GPU default (vllm/config/vllm.py VllmConfig.use_v2_model_runner).
#: The environment variable that chooses the model runner, and the runners (where vLLM reads EAGLE-3 layer ids
#: depends on it: engines/vllm_loading.py capture; known-bad rows may name one).
MODEL_RUNNER_ENV = "VLLM_USE_V2_MODEL_RUNNER"
MODEL_RUNNERS: tuple[str, ...] = ("v1", "v2")


def model_runner_from_env(value: str | None) -> str:
    """The model runner vLLM picks from VLLM_USE_V2_MODEL_RUNNER's value (None: unset). vLLM also falls
    back to v1 by itself for features v2 lacks; that choice is made at startup and is not known here."""
    try:
        return "v1" if value is not None and int(value) == 0 else "v2"
    except ValueError:
        return "v2"  # vLLM itself refuses a non-integer value at startup: nothing to check against


def model_runner_env(spec) -> str | None:
    """The literal value spec.env gives VLLM_USE_V2_MODEL_RUNNER (None: unset, or from a Secret or field)."""
    return next((v.value for v in spec.env or () if v.name == MODEL_RUNNER_ENV and v.value is not None), None)


def model_runner(spec) -> str | None:
    """The model runner a DrafterServingSpec runs vLLM with (from spec.env)."""
    return model_runner_from_env(model_runner_env(spec))

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
#: The OpenAI request body's field a client names its request by (ChatCompletionRequest and CompletionRequest
#: ``request_id``, entrypoints/openai/{chat_completion,completion}/protocol.py): the request log's body line carries
#: it, and the response line the same with the endpoint's prefix.
CLIENT_REQUEST_ID_FIELD = "request_id"

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
# The gauges whose sum is the requests an engine still owes answers to: a draining revision is
# stopped when they read zero on every pod.
REQUESTS_IN_FLIGHT = (NUM_REQUESTS_RUNNING, NUM_REQUESTS_WAITING)
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


# Counters this parser reads; everything else in the body is skipped without being kept.
PARSED_COUNTERS = SPEC_DECODE_METRICS + (GENERATION_TOKENS, PROMPT_TOKENS)
# vLLM registers these together (SpecDecodingProm); one without the others is not vLLM's exposition.
_SPEC_DECODE_TOTALS = (SPEC_DECODE_NUM_DRAFTS, SPEC_DECODE_NUM_DRAFT_TOKENS, SPEC_DECODE_NUM_ACCEPTED_TOKENS)


def parse_spec_decode_metrics(body: str | bytes, model_name: str | None = None, *,
                              max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
                              max_positions: int = DEFAULT_MAX_POSITIONS) -> SpecDecodeCounters:
    """Spec-decode counters from a vLLM ``/metrics`` body, or :class:`~.metrics.MetricsUnusable`.

    Series are summed over engine cores (label ``engine``); ``model_name`` restricts them to one
    served model. ``speculative`` is False when the server exports vLLM series but no spec-decode
    ones (plain serving, or a data-parallel server of a vLLM version without a per-core spec-decode
    logger); an empty body, or one without any ``vllm:`` series (for that model), is a verdict,
    not "not speculative". The body is refused above ``max_body_bytes`` and a position label at or
    beyond ``max_positions`` (vLLM 0.33.0 labels positions 0..k-1).
    """
    found = read_series(body, f"{ENGINE}:", PARSED_COUNTERS + (NUM_REQUESTS_RUNNING,), {LABEL_MODEL_NAME: model_name},
                        max_body_bytes=max_body_bytes)
    present = [name for name in _SPEC_DECODE_TOTALS if name in found]
    if present and len(present) < len(_SPEC_DECODE_TOTALS):
        missing = sorted(set(_SPEC_DECODE_TOTALS) - set(present))
        raise unusable(UnusableReason.MISSING_SERIES,
                       f"{', '.join(present)} without {', '.join(missing)}: vLLM registers them together")
    drafts = count_total(found, SPEC_DECODE_NUM_DRAFTS)
    draft_tokens = count_total(found, SPEC_DECODE_NUM_DRAFT_TOKENS)
    accepted = count_total(found, SPEC_DECODE_NUM_ACCEPTED_TOKENS)
    positions = position_totals(found.get(SPEC_DECODE_NUM_ACCEPTED_TOKENS_PER_POS, ()), LABEL_POSITION, max_positions)
    scope = f" for model_name={model_name!r}" if model_name is not None else ""
    if accepted is not None and accepted > (draft_tokens or 0.0):
        raise unusable(UnusableReason.ACCEPTED_EXCEEDS_DRAFTED,
                       f"{SPEC_DECODE_NUM_ACCEPTED_TOKENS} is {accepted:g} but {SPEC_DECODE_NUM_DRAFT_TOKENS} "
                       f"is {draft_tokens or 0:g}{scope}", SPEC_DECODE_NUM_ACCEPTED_TOKENS)
    for position, value in enumerate(positions):
        if value > (drafts or 0.0):
            raise unusable(UnusableReason.ACCEPTED_EXCEEDS_DRAFTED,
                           f'{SPEC_DECODE_NUM_ACCEPTED_TOKENS_PER_POS}{{position="{position}"}} is {value:g} but '
                           f"{SPEC_DECODE_NUM_DRAFTS} is {drafts or 0:g}{scope}",
                           SPEC_DECODE_NUM_ACCEPTED_TOKENS_PER_POS, ((LABEL_POSITION, str(position)),))
    return SpecDecodeCounters(
        engine=ENGINE,
        speculative=bool(present),
        drafts=drafts,
        draft_tokens=draft_tokens,
        accepted_tokens=accepted,
        accepted_per_position=positions,
        generation_tokens=count_total(found, GENERATION_TOKENS),
        prompt_tokens=count_total(found, PROMPT_TOKENS),
        # Per engine core (the mean over its ``engine`` label): each core schedules its own batch.
        running_requests=gauge_mean(found, NUM_REQUESTS_RUNNING, 0.0, GAUGE_RANGES["running_requests"]),
        series=counter_series(found, PARSED_COUNTERS),
    )


#: Families whose drafting steps draft fewer than k tokens: the scheduler observes each request's
#: actual draft (vllm/v1/core/sched/scheduler.py:3305-3322, SpecDecodingStats.observe_draft in
#: vllm/v1/spec_decode/metrics.py:41-49; a step with no draft is not observed at all), so the engine's rate is
#: accepted / tokens actually drafted, above (L - 1) / k by the ratio k / mean draft (acceptance/break_even.py
#: rate_problem: no rate threshold follows from a length for these).
RATE_NOT_PER_K_DRAFTS: dict[str, str] = {
    "suffix": "suffix decoding drafts up to k tokens per request and step, as far as the suffix tree matches",
    "ngram": "the n-gram proposer drafts only when the prompt or output repeats, up to k tokens",
    "ngramGpu": "the GPU n-gram proposer drafts only when the prompt or output repeats, up to k tokens",
    "dspark": "a DSpark block may be cut short (adaptive verification verifies fewer than k drafts)",
}
#: The engine's rate is accepted / tokens actually drafted, both counted: for the families above, the break-even
#: rate follows from a benchmark's mean draft per step instead of k (acceptance/break_even.py). A Prometheus
#: window (acceptance/prometheus_*.py) reads the rate as accepted / draft tokens and the length as
#: 1 + accepted / drafts.
RATE_PER_DRAFTED_TOKEN = True

#: A Prometheus window query (acceptance/prometheus_query.py): each SpecDecodeCounters field's counter, whose
#: increase travels under the field's name as its tag, and the fields without which a replica has no figure
#: (generation tokens are informative).
WINDOW_COUNTERS: dict[str, str] = {
    "drafts": SPEC_DECODE_NUM_DRAFTS,
    "draft_tokens": SPEC_DECODE_NUM_DRAFT_TOKENS,
    "accepted_tokens": SPEC_DECODE_NUM_ACCEPTED_TOKENS,
    "generation_tokens": GENERATION_TOKENS,
}
WINDOW_REQUIRED: tuple[str, ...] = ("drafts", "draft_tokens", "accepted_tokens")
#: The counter of accepted tokens per draft position (label ``position``), summed by position in a window.
PER_POSITION_COUNTER: str | None = SPEC_DECODE_NUM_ACCEPTED_TOKENS_PER_POS
#: Gauges a window query reads per replica, as (aggregation, tag, metric): none, the counters say it all.
WINDOW_GAUGES: tuple[tuple[str, str, str], ...] = ()


# --------------------------------------------------------------------------------------------------
# 4. Command rendering
# --------------------------------------------------------------------------------------------------

#: Methods for which the user must give num_speculative_tokens: vLLM 0.33.0 raises without it
#: (vllm/config/speculative.py 1614-1618, 1946-1950). Not mtp (the renderer defaults it to 1, one MTP layer as in
#: DeepSeek-V3/Kimi), dspark (vLLM reads the draft's block_size, 1592-1599) or suffix (vLLM uses the tree depth,
#: 1732-1739); tests/contract holds each to the real class. The API's rule (api/serving/spec.py) refuses a spec
#: without it.
METHODS_NEEDING_K: tuple[str, ...] = (*METHODS_WITH_MODEL, "ngram", "ngramGpu")
#: The block drafter whose k vLLM 0.33.0 takes from the draft's block_size when numSpeculativeTokens is unset
#: (1592-1599), and which drafts with the target's bundled weights only when k is given.
K_FROM_BLOCK_SIZE = "dspark"
#: Methods for which vLLM 0.33.0 silently drops the dynamic schedule: suffix is not implemented by Model Runner
#: V2 (config/vllm.py 3067-3068), so vLLM falls back to V1, where _maybe_disable_dynamic_sd_for_v1
#: (1088-1108) keeps num_speculative_tokens_per_batch_size only for ngram, eagle, eagle3, mtp, draft_model and
#: dflash. dspark runs on V2 only and ngramGpu on V2 by default, where the schedule is kept.
METHODS_WITHOUT_DYNAMIC: tuple[str, ...] = ("suffix",)

# spec.drafter.method -> SpeculativeConfig.method (vLLM spells the draft-model method draft_model and the GPU
# n-gram proposer ngram_gpu; vllm/config/speculative.py 38-83). vLLM implements every method of the API.
SPECULATIVE_CONFIG_METHODS = {"eagle3": "eagle3", "eagle": "eagle", "mtp": "mtp", "ngram": "ngram",
                              "ngramGpu": "ngram_gpu", "suffix": "suffix", "dflash": "dflash", "dspark": "dspark",
                              "draftModel": "draft_model"}
#: The engine's name for each family it implements (the interface's name for SPECULATIVE_CONFIG_METHODS).
METHOD_SPELLINGS: dict[str, str] = SPECULATIVE_CONFIG_METHODS
#: num_speculative_tokens rendered for method mtp when the spec leaves it unset (vLLM requires it).
MTP_DEFAULT_SPECULATIVE_TOKENS = 1
#: suffix_decoding_max_tree_depth's default (vllm/config/speculative.py 538): suffix's k when neither k nor the
#: depth is set (1731-1739). Not rendered; the gate's k annotation and acceptance read it.
SUFFIX_DEFAULT_TREE_DEPTH = 24
#: spec.drafter's per-family settings (api/serving/families.py) -> SpeculativeConfig keys, by settings object.
FAMILY_KEYS: dict[str, dict[str, str]] = {
    "suffix": {"max_tree_depth": "suffix_decoding_max_tree_depth",
               "max_cached_requests": "suffix_decoding_max_cached_requests",
               "max_spec_factor": "suffix_decoding_max_spec_factor",
               "min_token_prob": "suffix_decoding_min_token_prob"},
    "ngram": {"prompt_lookup_min": "prompt_lookup_min", "prompt_lookup_max": "prompt_lookup_max"},
    "dspark": {"draft_topk": "dspark_draft_topk", "adaptive_verification": "enable_adaptive_verification"},
}


def _family_settings(drafter) -> dict:
    """The set fields of the drafter's per-family settings as SpeculativeConfig keys (decimal strings as floats:
    vLLM's fields are floats and the API carries no floats)."""
    config: dict = {}
    for name, keys in FAMILY_KEYS.items():
        settings = getattr(drafter, name, None)
        for attr, key in keys.items():
            value = getattr(settings, attr) if settings is not None else None
            if value is not None:
                config[key] = float(value) if isinstance(value, str) else value
    return config


def speculative_config(drafter, schedule=None) -> dict | None:
    """The `--speculative-config` JSON object for a DrafterSpec, or None for method none.

    ``schedule`` (spec.drafter.dynamic, engines/dynamic.py): ``[(start, end, k or 0), ...]`` rendered as
    vLLM 0.33.0's num_speculative_tokens_per_batch_size; num_speculative_tokens stays the maximum."""
    if drafter.method == "none":
        return None
    config: dict = {"method": SPECULATIVE_CONFIG_METHODS[drafter.method]}
    if drafter.model:
        config["model"] = drafter.model
    k = draft_tokens_per_step(drafter)
    if k is not None and (drafter.num_speculative_tokens is not None or drafter.method == "mtp"):
        # mtp: vLLM 0.33.0 does not read it from the model: SpeculativeConfig raises without it (ValueError
        # with no model, TypeError with one; tests/contract). One MTP layer (DeepSeek-V3/Kimi).
        config["num_speculative_tokens"] = k
    config.update(_family_settings(drafter))
    if schedule:
        config[SCHEDULE_KEY] = [[int(start), int(end), int(k)] for start, end, k in schedule]
    return config


def draft_tokens_per_step(drafter) -> int | None:
    """The num_speculative_tokens vLLM 0.33.0 runs a DrafterSpec with, or None where only the checkpoint says
    (dspark without k: the draft's block_size). For suffix it is the upper bound per request: k, else the tree
    depth (set, or its default 24; vLLM copies it, vllm/config/speculative.py 1732-1739)."""
    if drafter.method == "none":
        return None
    if drafter.num_speculative_tokens is not None:
        return drafter.num_speculative_tokens
    if drafter.method == "mtp":
        return MTP_DEFAULT_SPECULATIVE_TOKENS
    if drafter.method == "suffix":
        depth = drafter.suffix.max_tree_depth if drafter.suffix is not None else None
        return depth if depth is not None else SUFFIX_DEFAULT_TREE_DEPTH
    return None


#: Parser destinations the operator sets or depends on: extraArgs may not reach them by any spelling
#: (engines/extra_args.py matches spellings the way vLLM does). Keys are `vllm serve` argparse dests.
OWNED_DESTINATIONS: dict[str, OwnedDestination] = {
    **owned_by_every_engine(DEFAULT_PORT),
    "model_tag": OwnedDestination("the served model", "use spec.target.model"),
    "model": OwnedDestination("the served model", "use spec.target.model"),
    "uds": OwnedDestination("the listener (a Unix socket instead of TCP: probes, traffic and metrics would fail)",
                            "remove it: the operator sets host and port"),
    "grpc": OwnedDestination("the protocol served (gRPC instead of the HTTP API)",
                             "remove it: the operator needs the HTTP API"),
    "headless": OwnedDestination("whether an API server runs at all", "remove it: the operator needs the API server"),
    "tensor_parallel_size": OwnedDestination("the GPUs one model instance is sharded over",
                                             "use spec.target.tensorParallelSize"),
    "pipeline_parallel_size": OwnedDestination("the GPUs one replica needs (pipeline stages)",
                                               "use spec.target.pipelineParallelSize"),
    "data_parallel_size": OwnedDestination("the GPUs one replica needs (data-parallel ranks)",
                                           "use spec.target.dataParallelSize (or spec.replicas for whole replicas)"),
    "data_parallel_size_local": OwnedDestination("the data-parallel ranks on each node of a replica",
                                                 "use spec.target.dataParallelSize and spec.resources.nodesPerReplica"),
    "data_parallel_start_rank": OwnedDestination("the first data-parallel rank of a node (vLLM reads it from the node "
                                                 "rank the operator renders)",
                                                 "use spec.target.dataParallelSize and spec.resources.nodesPerReplica"),
    "data_parallel_rank": OwnedDestination("the one data-parallel rank this engine runs (external load balancing: "
                                           "the replica's endpoint would serve one rank)",
                                           "use spec.target.dataParallelSize"),
    "data_parallel_address": OwnedDestination("where a replica's data-parallel ranks meet (its leader pod)",
                                              "use spec.resources.nodesPerReplica"),
    "data_parallel_rpc_port": OwnedDestination("the port a replica's data-parallel ranks meet on",
                                               "use spec.resources.nodesPerReplica"),
    "master_addr": OwnedDestination("where a replica's nodes meet (its leader pod)",
                                    "use spec.resources.nodesPerReplica"),
    "master_port": OwnedDestination("the port a replica's nodes meet on", "use spec.resources.nodesPerReplica"),
    "max_model_len": OwnedDestination("the context length", "use spec.target.maxModelLen"),
    "gpu_memory_utilization": OwnedDestination("the GPU memory fraction", "use spec.target.gpuMemoryUtilization"),
    "enable_auto_tool_choice": OwnedDestination("automatic tool choice (on with a tool-call parser)",
                                                "use spec.target.toolCallParser"),
    "speculative_config": OwnedDestination("the drafter (speculative decoding configuration)", "use spec.drafter"),
    # vLLM 0.33.0's shorthands, merged into the speculative config (EngineArgs.create_speculative_config).
    "spec_method": OwnedDestination("the drafter method", "use spec.drafter.method"),
    "spec_model": OwnedDestination("the drafter model", "use spec.drafter.model"),
    "spec_tokens": OwnedDestination("the tokens drafted per step", "use spec.drafter.numSpeculativeTokens"),
    "disable_log_stats": OwnedDestination("whether the engine exports the metrics acceptance monitoring reads",
                                          "remove it: the operator needs the metrics"),
}


#: `vllm serve` destinations whose value is a credential (every str-valued flag of vLLM 0.33.0 that carries
#: one; tests/contract checks they exist in the real parser), refused in extraArgs with the env variable
#: vLLM reads instead: huggingface_hub reads HF_TOKEN, vllm/envs.py VLLM_API_KEY. SSL files are paths.
SECRET_DESTINATIONS: dict[str, SecretDestination] = {
    "hf_token": SecretDestination("a Hugging Face token", "HF_TOKEN"),
    "api_key": SecretDestination("the API key clients must send", "VLLM_API_KEY"),
}


#: What spec.capture owns besides OWNED_DESTINATIONS while it is set: the request logging its flags turn on
#: (capture_flags) and the logging configuration that routes it into the spool (capture_environment).
_CAPTURE_REMEDY = "remove it: spec.capture sets vLLM's request logging while it is set"
CAPTURE_OWNED_DESTINATIONS: dict[str, OwnedDestination] = {
    "enable_log_requests": OwnedDestination("whether requests are logged, which spec.capture needs", _CAPTURE_REMEDY),
    "enable_log_outputs": OwnedDestination("whether responses are logged (spec.capture.responses)",
                                           "use spec.capture.responses"),
    "enable_log_deltas": OwnedDestination("whether a streamed response is logged whole or in fragments (capture "
                                          "reads whole ones)", _CAPTURE_REMEDY),
    "max_log_len": OwnedDestination("how much of a request is logged (a cut body is not JSON: capture would "
                                    "lose the request)", _CAPTURE_REMEDY),
    "logging_config": OwnedDestination("vLLM's logging configuration, which routes the request log into the "
                                       "capture spool", _CAPTURE_REMEDY),
    "log_config_file": OwnedDestination("vLLM's logging configuration file, which routes the request log into "
                                        "the capture spool", _CAPTURE_REMEDY),
}


def extra_args_problems(extra_args: list[str], *, known_flags_only: bool = True, capture: bool = False) -> list[str]:
    """Why these extraArgs cannot go on a `vllm serve` line (parsed by vLLM 0.33.0's rules); with ``capture``
    (spec.capture set), the request logging is owned too (CAPTURE_OWNED_DESTINATIONS)."""
    owned = {**OWNED_DESTINATIONS, **(CAPTURE_OWNED_DESTINATIONS if capture else {})}
    # The operator renders the model positional first; a placeholder keeps the parse faithful.
    return check_extra_args(ENGINE, extra_args, owned, known_flags_only=known_flags_only,
                            placeholder_positionals=PLACEHOLDER_POSITIONALS, secrets=SECRET_DESTINATIONS)


#: spec.target's parallel fields whose flags extraArgs may still set (when the field is unset): the parser
#: destinations each renders (parallel_flags). The other sizes' destinations are owned.
PARALLEL_FIELD_DESTINATIONS: dict[str, tuple[str, ...]] = {"expert_parallel": ("enable_expert_parallel",)}


def spec_problems(spec) -> list[str]:
    """What vLLM would refuse in a DrafterServingSpec beyond the schema: parser names, extraArgs, and spec.env
    against what spec.capture needs."""
    target = spec.target
    return [
        *parser_name_problems(ENGINE, "spec.target.toolCallParser", "tool_call_parser", target.tool_call_parser),
        *parser_name_problems(ENGINE, "spec.target.reasoningParser", "reasoning_parser", target.reasoning_parser),
        *parallel_field_problems(ENGINE, spec, PARALLEL_FIELD_DESTINATIONS, PLACEHOLDER_POSITIONALS),
        *capture_env_problems(spec),
    ]


def capture_env_problems(spec) -> list[str]:
    """With spec.capture: spec.env sets none of the variables its logging depends on."""
    if spec.capture is None:
        return []
    return [f"spec.env[{index}] {entry.name}: {CAPTURE_OWNED_ENV[entry.name]} while spec.capture is set; remove it "
            "from spec.env (or remove spec.capture)"
            for index, entry in enumerate(spec.env or ()) if entry.name in CAPTURE_OWNED_ENV]


def schedule_files(schedule) -> dict[str, str]:
    """Files the engine pod needs to run ``schedule``: none, the schedule rides in --speculative-config."""
    return {}


#: Where a replica's nodes meet: the leader's torch.distributed port (vLLM's --master-port default) and the port its
#: data-parallel ranks hand shake on (vLLM's --data-parallel-rpc-port default, ParallelConfig.data_parallel_rpc_port).
GROUP_MASTER_PORT = 29501
GROUP_DATA_PARALLEL_RPC_PORT = 29550


def parallel_flags(layout: Parallelism) -> list[str]:
    """The sizes beyond tensor parallelism, as flags (none for a plain tensor-parallel replica): pipeline stages,
    data-parallel ranks, and expert parallelism, which vLLM spreads over all tensor x data-parallel GPUs."""
    argv: list[str] = []
    if layout.pipeline > 1:
        argv += ["--pipeline-parallel-size", str(layout.pipeline)]
    if layout.data > 1:
        argv += ["--data-parallel-size", str(layout.data)]
    if layout.expert:
        argv.append("--enable-expert-parallel")
    return argv


def group_flags(layout: Parallelism, *, worker: bool) -> list[str]:
    """Where this pod sits in a replica that spans nodes (none on one node). vLLM 0.33.0 places every rank from
    --nnodes and --node-rank: it infers each node's first data-parallel rank from the node rank
    (EngineArgs.create_engine_config), so one command line serves every pod, the node rank read from the group's
    environment. Data-parallel ranks meet at the leader (--data-parallel-address); a worker runs --headless: its
    engines (data parallelism) or its tensor and pipeline ranks join the leader's, which alone serves the API."""
    if not layout.spans_nodes:
        if worker:
            raise ValueError("a replica on one node has no workers: render the leader's command")
        return []
    argv = ["--nnodes", str(layout.nodes), "--node-rank", NODE_RANK,
            "--master-addr", LEADER_ADDRESS, "--master-port", str(GROUP_MASTER_PORT)]
    if layout.data > 1:
        argv += ["--data-parallel-size-local", str(layout.data_ranks_per_node),
                 "--data-parallel-address", LEADER_ADDRESS,
                 "--data-parallel-rpc-port", str(GROUP_DATA_PARALLEL_RPC_PORT)]
    if worker:
        argv.append("--headless")
    return argv


def render_command(spec, schedule=None, *, worker: bool = False) -> list[str]:
    """`vllm serve` argv for a DrafterServingSpec (``schedule``: see :func:`speculative_config`): the leader's,
    or with ``worker`` a worker pod's of a replica that spans nodes (:func:`group_flags`); the speculative config
    is the same on every pod.

    extraArgs come right after the model and before every flag the operator owns: they are checked
    against the owned destinations, and argparse's last-one-wins rule protects the owned values too.
    """
    target = spec.target
    layout = Parallelism.of(spec)
    argv = ["vllm", "serve", target.model, *(target.extra_args or []),
            "--host", "0.0.0.0", "--port", str(DEFAULT_PORT),
            "--tensor-parallel-size", str(target.tensor_parallel_size),
            *parallel_flags(layout), *group_flags(layout, worker=worker)]
    if target.served_model_name:
        argv += ["--served-model-name", target.served_model_name]
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
    config = speculative_config(spec.drafter, schedule)
    if config is not None:
        argv += ["--speculative-config", json.dumps(config, separators=(",", ":"))]
    return argv + capture_flags(spec.capture)


#: vLLM's batch-invariant mode (vllm/envs.py reads it as ``bool(int(value))``): batch-invariant matmul,
#: attention and all-reduce kernels (vllm/config/vllm.py turns off the fused all-reduce + RMSNorm), so a
#: token's logits do not depend on what else is in the forward, a verify forward included.
DETERMINISTIC_ENV = "VLLM_BATCH_INVARIANT"


def deterministic(spec) -> bool:
    """Whether this serving runs vLLM's batch-invariant mode: spec.env sets VLLM_BATCH_INVARIANT to a non-zero
    integer literally (a value from a Secret or ConfigMap is not known here, so it does not count)."""
    for item in spec.env or []:
        if item.name == DETERMINISTIC_ENV and item.value is not None:
            try:
                return bool(int(item.value))
            except ValueError:
                return False
    return False


# --------------------------------------------------------------------------------------------------
# 5. What extraArgs make of the launch (known-bad rows match on it: controllers/serving/known_bad.py)
# --------------------------------------------------------------------------------------------------

#: vLLM 0.33.0's KVTransferConfig roles (vllm/config/kv_transfer.py): kv_both is a producer and a consumer.
KV_ROLES = {"kv_producer": frozenset({"prefill"}), "kv_consumer": frozenset({"decode"}),
            "kv_both": frozenset({"prefill", "decode"})}


def launch_facts(value: Callable[[str], Any], tensor_parallel: int) -> LaunchFacts:
    """Parallelism, role, page size and sleep mode from the parsed extraArgs (``value(dest)``: given, else the
    parser's default)."""
    data = int(value("data_parallel_size") or 1)
    transfer = value("kv_transfer_config")
    if isinstance(transfer, str):
        try:
            transfer = json.loads(transfer)
        except json.JSONDecodeError:
            transfer = None
    role = transfer.get("kv_role") if isinstance(transfer, dict) and transfer.get("kv_connector") else None
    return LaunchFacts(
        data_parallel=data,
        # --enable-expert-parallel shards the experts over the whole TP x DP group.
        expert_parallel=tensor_parallel * data if value("enable_expert_parallel") else 1,
        pipeline_parallel=int(value("pipeline_parallel_size") or 1),
        roles=KV_ROLES.get(role, frozenset()), page_size=value("block_size"),
        sleep_mode=bool(value("enable_sleep_mode")))


# --------------------------------------------------------------------------------------------------
# Request capture: vLLM's own request logging routed into the capture spool (drafter_operator/capture/)
# --------------------------------------------------------------------------------------------------

#: The logger vLLM 0.33.0's RequestLogger writes to (vllm/entrypoints/serve/utils/request_logger.py, init_logger
#: of its module name).
REQUEST_LOGGER = "vllm.entrypoints.serve.utils.request_logger"
#: The file the request logger writes in the spool. A WatchedFileHandler reopens it when the sidecar has renamed
#: it away, so the sidecar consumes the log by renaming, waiting a poll, reading and deleting.
CAPTURE_LOG_NAME = "vllm-requests.log"
CAPTURE_LOG_FILE = f"{SPOOL_DIRECTORY}/{CAPTURE_LOG_NAME}"
#: How the capture sidecar follows that file (drafter_operator/capture/following.py), and reads its lines.
CAPTURE_SPOOL = ReopenedLog(CAPTURE_LOG_NAME)
capture_line = records.vllm_line
#: Where the pod finds the logging configuration below (a file the pod's template carries).
CAPTURE_LOGGING_CONFIG_PATH = f"{CAPTURE_FILES_DIRECTORY}/vllm-logging.json"
#: vLLM reads its whole logging configuration from this file instead of its default one (vllm/logger.py).
LOGGING_CONFIG_ENV = "VLLM_LOGGING_CONFIG_PATH"
#: The level RequestLogger.log_request_body logs the request's JSON body at (vllm/envs.py; default DEBUG). At
#: INFO the body reaches the file with the rest; the prompt itself is logged at DEBUG only otherwise.
REQUEST_BODY_LEVEL_ENV = "VLLM_REQUEST_BODY_LOG_LEVEL"

#: The variables spec.capture's logging depends on while it is set: VLLM_CONFIGURE_LOGGING=0 makes `vllm serve`
#: skip the logging configuration (so no request line reaches the spool), and the other two are the ones
#: capture_environment sets.
CAPTURE_OWNED_ENV: dict[str, str] = {
    "VLLM_CONFIGURE_LOGGING": "it decides whether vLLM applies the logging configuration that routes requests to the "
                              "capture spool",
    LOGGING_CONFIG_ENV: "spec.capture points it at the logging configuration the pod carries",
    REQUEST_BODY_LEVEL_ENV: "spec.capture sets it to INFO so that the request's body is logged",
}

#: vLLM's own console format (vllm/logger.py _FORMAT, with an empty VLLM_LOGGING_PREFIX): the configuration
#: replaces vLLM's default one, so it must keep the engine's console lines as they were.
_CONSOLE_FORMAT = "(%(vllm_process_name)s pid=%(process)d) %(levelname)s %(asctime)s [%(fileinfo)s:%(lineno)d] %(message)s"
_CONSOLE_DATE_FORMAT = "%m-%d %H:%M:%S"


def capture_flags(capture) -> list[str]:
    """`vllm serve` flags that turn request logging on: the request body and, with spec.capture.responses, the
    complete response (never each streamed delta). ``capture``: spec.capture, or None for no flags."""
    if capture is None:
        return []
    return ["--enable-log-requests", *(["--enable-log-outputs", "--no-enable-log-deltas"] if capture.responses else [])]


def capture_environment(capture) -> dict[str, str]:
    """The engine container's variables for capture: the logging configuration's path and the body's level."""
    if capture is None:
        return {}
    return {LOGGING_CONFIG_ENV: CAPTURE_LOGGING_CONFIG_PATH, REQUEST_BODY_LEVEL_ENV: "INFO"}


def capture_files(capture) -> dict[str, str]:
    """The files the engine container reads for capture (path -> content): the logging configuration."""
    if capture is None:
        return {}
    return {CAPTURE_LOGGING_CONFIG_PATH: json.dumps(capture_logging_config(), sort_keys=True)}


def capture_logging_config() -> dict:
    """vLLM's logging configuration with capture: its console handler as by default, and the request logger's
    lines, bare, in the spool only (not on the console as well: the pod's log would carry the prompts)."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "vllm": {"()": "vllm.logging_utils.NewLineFormatter", "datefmt": _CONSOLE_DATE_FORMAT,
                     "format": _CONSOLE_FORMAT},
            "bare": {"format": "%(message)s"},
        },
        "handlers": {
            "vllm": {"class": "logging.StreamHandler", "formatter": "vllm", "level": "INFO",
                     "stream": "ext://sys.stdout"},
            "capture": {"class": "logging.handlers.WatchedFileHandler", "formatter": "bare", "level": "INFO",
                        "filename": CAPTURE_LOG_FILE, "encoding": "utf-8", "delay": True},
        },
        "loggers": {
            "vllm": {"handlers": ["vllm"], "level": "INFO", "propagate": False},
            REQUEST_LOGGER: {"handlers": ["capture"], "level": "INFO", "propagate": False},
        },
    }
