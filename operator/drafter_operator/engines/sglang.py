"""SGLang: ports, endpoints, exact metric names, and parsing of its ``/metrics``.

Facts checked against the installed SGLang 0.5.23 by the contract tier (tests/contract; ``sglang/srt/observability/
metrics_collector.py``). Sections: 1. endpoints and ports; 2. metric names; 3. parsing ``/metrics``.
Command rendering (``python -m sglang.launch_server ... --speculative-*``) belongs in this module
too, in its own section. Remember ``/metrics`` exists only with ``--enable-metrics``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from drafter_operator.capture import records
from drafter_operator.capture.spool import SPOOL_DIRECTORY, RotatedLogs
from drafter_operator.engines import flags, sglang_loading
from drafter_operator.engines.command_line import CommandLineRejected, parse
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
from drafter_operator.engines.metrics_verdicts import DEFAULT_MAX_BODY_BYTES
from drafter_operator.engines.metrics_body import count_total, counter_series, gauge_mean, read_series

ENGINE = "sglang"
#: The release whose command line, metrics and loading code this module restates (tests/contract checks it).
VERSION = "0.5.23"
#: The upstream image at that release (engines.DEFAULT_IMAGES).
DEFAULT_IMAGE = f"lmsysorg/sglang:v{VERSION}"

# --------------------------------------------------------------------------------------------------
# 0. Capabilities: what the operator asks of an engine instead of testing its name
# --------------------------------------------------------------------------------------------------

#: spec.drafter.dynamic renders SGLang 0.5.23's adaptive speculation (--speculative-adaptive with a tier config:
#: the draft steps per batch-size tier, 0 drafting nothing; srt/speculative/adaptive_spec_params.py), section 6.
SUPPORTS_DYNAMIC_SCHEDULE = True
#: The speculative methods of the API SGLang 0.5.23 has no algorithm for (refused by the CRD): no suffix decoding
#: and no GPU n-gram proposer (see SPECULATIVE_ALGORITHMS, section 4).
REFUSED_METHODS: tuple[str, ...] = ("suffix", "ngramGpu")
#: Keeps spec.drafter.dynamic's adaptive speculation with data parallelism: no. SGLang 0.5.23 drops
#: --speculative-adaptive with attention DP, which is how it runs spec.target.dataParallelSize
#: (adaptive_unsupported_reason, section 6).
DYNAMIC_WITH_DATA_PARALLEL = False
#: Drafter methods SGLang 0.5.23 cannot speculate with across pipeline stages: all but EAGLE (mtp runs as EAGLE).
#: sglang/srt/arg_groups/validation_hook.py check_pipeline_parallel_compat: PP with speculation is EAGLE only
#: (non-multi-layer), and then only with SGLANG_ENABLE_PP_SPEC (PIPELINE_SPECULATION_ENV) or on PD prefill nodes;
#: DFLASH (speculative_hook.py _handle_dflash) and DSPARK (_handle_dspark) refuse pp_size > 1 outright.
PIPELINE_REFUSED_METHODS: tuple[str, ...] = ("eagle3", "ngram", "dflash", "dspark", "draftModel")
#: The switch SGLang 0.5.23 reads (an EnvBool: true, 1, yes or y) to speculate with pipeline parallelism outside PD
#: prefill; it refuses it with --speculative-adaptive and with attention DP.
PIPELINE_SPECULATION_ENV = "SGLANG_ENABLE_PP_SPEC"
PIPELINE_SPECULATION_ON = ("true", "1", "yes", "y")
#: Drafter methods SGLang 0.5.23 refuses with attention DP (speculative_hook.py: "Currently ngram speculative
#: decoding does not support dp attention", "Currently standalone speculative decoding does not support dp
#: attention").
DATA_PARALLEL_REFUSED_METHODS: tuple[str, ...] = ("ngram", "draftModel")
#: Block drafters that need the LM head data-parallel too with attention DP (_handle_dflash: "DFLASH with dp
#: attention requires --enable-dp-lm-head"; _handle_dspark likewise): the flag is the user's, in extraArgs.
DATA_PARALLEL_LM_HEAD_METHODS: tuple[str, ...] = ("dflash", "dspark")
#: SGLang 0.5.23 reads draft configs with transformers' AutoConfig and never reads speculators_model_type: a
#: speculators checkpoint (no model_type) is refused when its model runner starts (preflight
#: SpeculatorsFormatOnSglang; DrafterTraining's promote refuses it too).
READS_SPECULATORS_FORMAT = False
#: How SGLang loads a drafter checkpoint: the layer ids it reads, the class it builds, the fields it requires (the
#: facts and their sources: engines/sglang_loading.py). The preflight's rules ask it instead of the engine's name.
CHECKPOINT_LOADING = sglang_loading.LOADING
#: The launch line takes no positionals: extraArgs are parsed as they are.
PLACEHOLDER_POSITIONALS: tuple[str, ...] = ()
#: SGLang has one model runner: no variable chooses it.
MODEL_RUNNER_ENV: str | None = None
MODEL_RUNNERS: tuple[str, ...] = ()


def model_runner(spec) -> str | None:
    """SGLang has no model runner to choose."""
    return None

# --------------------------------------------------------------------------------------------------
# 1. Endpoints and ports
# --------------------------------------------------------------------------------------------------

DEFAULT_PORT = 30000
HEALTH_PATH = "/health"
#: Runs a one-token generation: 503 while the model loads, so this is what readiness should hit.
READINESS_PATH = "/health_generate"
METRICS_PATH = "/metrics"
MODEL_INFO_PATH = "/model_info"
SERVER_INFO_PATH = "/server_info"
#: Older builds only serve these two.
LEGACY_MODEL_INFO_PATH = "/get_model_info"
LEGACY_SERVER_INFO_PATH = "/get_server_info"
MODELS_PATH = "/v1/models"
COMPLETIONS_PATH = "/v1/completions"
CHAT_COMPLETIONS_PATH = "/v1/chat/completions"
#: The OpenAI request body's field a client names its request by (``rid`` of ChatCompletionRequest and
#: CompletionRequest, srt/entrypoints/openai/protocol.py, passed on as the request's rid by serving_chat.py and
#: serving_completions.py): the request log's ``rid``.
CLIENT_REQUEST_ID_FIELD = "rid"

# --------------------------------------------------------------------------------------------------
# 2. Metric names, as exposed
# --------------------------------------------------------------------------------------------------

LABEL_MODEL_NAME = "model_name"
LABEL_ENGINE_TYPE = "engine_type"
LABEL_TP_RANK = "tp_rank"
LABEL_PP_RANK = "pp_rank"
LABEL_MOE_EP_RANK = "moe_ep_rank"
LABEL_IS_STREAMING = "is_streaming"
#: Labels of the scheduler's gauges; the tokenizer's counters carry model_name and engine_type only.
SCHEDULER_LABELS = (LABEL_MODEL_NAME, LABEL_ENGINE_TYPE, LABEL_TP_RANK, LABEL_PP_RANK, LABEL_MOE_EP_RANK)
TOKENIZER_LABELS = (LABEL_MODEL_NAME, LABEL_ENGINE_TYPE)
#: engine_type of a server that does prefill and decode itself (no PD disaggregation).
ENGINE_TYPE_UNIFIED = "unified"

# Scheduler gauges (interval values, "mostrecent").
SPEC_ACCEPT_LENGTH = "sglang:spec_accept_length"
SPEC_ACCEPT_RATE = "sglang:spec_accept_rate"
SPEC_NUM_STEPS = "sglang:spec_num_steps"
SPEC_NUM_DRAFT_TOKENS = "sglang:spec_num_draft_tokens"
NUM_RUNNING_REQS = "sglang:num_running_reqs"
NUM_QUEUE_REQS = "sglang:num_queue_reqs"
# The gauges whose sum is the requests an engine still owes answers to: a draining revision is
# stopped when they read zero on every pod.
REQUESTS_IN_FLIGHT = (NUM_RUNNING_REQS, NUM_QUEUE_REQS)
GEN_THROUGHPUT = "sglang:gen_throughput"
TOKEN_USAGE = "sglang:token_usage"
CACHE_HIT_RATE = "sglang:cache_hit_rate"
# Tokenizer counters, incremented when a request finishes.
PROMPT_TOKENS = "sglang:prompt_tokens_total"            # + is_streaming
GENERATION_TOKENS = "sglang:generation_tokens_total"    # + is_streaming
SPEC_VERIFY_CALLS = "sglang:spec_verify_calls_total"
NUM_REQUESTS = "sglang:num_requests_total"              # + is_streaming
NUM_ABORTED_REQUESTS = "sglang:num_aborted_requests_total"
# Tokenizer histograms (family names).
TIME_TO_FIRST_TOKEN_SECONDS = "sglang:time_to_first_token_seconds"    # + is_streaming
INTER_TOKEN_LATENCY_SECONDS = "sglang:inter_token_latency_seconds"
E2E_REQUEST_LATENCY_SECONDS = "sglang:e2e_request_latency_seconds"    # + is_streaming

# --------------------------------------------------------------------------------------------------
# 3. Parsing /metrics
# --------------------------------------------------------------------------------------------------


# What this parser reads (counters, then gauges with the SpecDecodeCounters field they fill); the
# rest of the body is skipped without being kept.
PARSED_COUNTERS = (SPEC_VERIFY_CALLS, GENERATION_TOKENS, PROMPT_TOKENS)
PARSED_GAUGES = {SPEC_ACCEPT_LENGTH: "accept_length_gauge", SPEC_ACCEPT_RATE: "accept_rate_gauge",
                 SPEC_NUM_STEPS: "num_steps_gauge", SPEC_NUM_DRAFT_TOKENS: "num_draft_tokens_gauge",
                 NUM_RUNNING_REQS: "running_requests"}


def parse_spec_decode_metrics(body: str | bytes, model_name: str | None = None, *,
                              max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> SpecDecodeCounters:
    """Spec-decode counters and gauges from an SGLang ``/metrics`` body, or :class:`~.metrics.MetricsUnusable`.

    Counters are summed over ``is_streaming`` (and any other split); gauges are averaged over the
    series present (one per scheduler rank that logs; several with data parallelism) and refused
    outside their domain (a rate outside [0, 1]...). ``speculative`` is True when
    ``sglang:spec_num_steps`` is positive or verify calls were counted; an empty body, or one without
    any ``sglang:`` series (for that model), is a verdict, not "not speculative".
    """
    found = read_series(body, f"{ENGINE}:", PARSED_COUNTERS + tuple(PARSED_GAUGES),
                        {LABEL_MODEL_NAME: model_name}, max_body_bytes=max_body_bytes)
    gauges = {field: gauge_mean(found, name, 0.0, GAUGE_RANGES[field]) for name, field in PARSED_GAUGES.items()}
    verify_calls = count_total(found, SPEC_VERIFY_CALLS)
    return SpecDecodeCounters(
        engine=ENGINE,
        speculative=bool(gauges["num_steps_gauge"]) or bool(verify_calls),
        drafts=verify_calls,
        generation_tokens=count_total(found, GENERATION_TOKENS),
        prompt_tokens=count_total(found, PROMPT_TOKENS),
        series=counter_series(found, PARSED_COUNTERS),
        **gauges,
    )


#: Families whose live rate is not per drafted token. NGRAM drafts a tree from what matches: its
#: rate is derived with spec_num_steps, which SGLang sets to num_draft_tokens // bfs breadth
#: (srt/arg_groups/speculative_hook.py:1324-1329), or is SGLang's gauge, correct drafts / (verify calls x
#: (speculative_num_draft_tokens - 1)) (srt/managers/scheduler_components/metrics_reporter.py:974-982): both
#: nominal, whatever was drafted.
RATE_NOT_PER_K_DRAFTS: dict[str, str] = {
    "ngram": "SGLang's NGRAM rate divides by a nominal draft tree (its steps, or numDraftTokens - 1 per verify "
             "call, drafted or not)",
}
#: SGLang's draft tokens are derived (k x verify calls), never counted: no mean draft tells a family that drafts
#: fewer apart, so no rate threshold is learned for the families above. A Prometheus window
#: (acceptance/prometheus_*.py) reads the length as generation tokens / verify calls and derives the rate with k.
RATE_PER_DRAFTED_TOKEN = False

#: A Prometheus window query (acceptance/prometheus_query.py): each SpecDecodeCounters field's counter (its tag)
#: and the fields without which a replica has no figure.
WINDOW_COUNTERS: dict[str, str] = {
    "drafts": SPEC_VERIFY_CALLS,
    "generation_tokens": GENERATION_TOKENS,
}
WINDOW_REQUIRED: tuple[str, ...] = ("drafts", "generation_tokens")
#: SGLang counts no accepted tokens per draft position.
PER_POSITION_COUNTER: str | None = None
#: Gauges a window query reads per replica, as (aggregation, tag, metric): the last spec_num_steps and
#: spec_num_draft_tokens (k: DFLASH and DSPARK run one step of a block, so k is the window minus the anchor,
#: metrics.sglang_draft_tokens) and spec_accept_rate, the fallbacks engines.metrics.window uses.
WINDOW_GAUGES: tuple[tuple[str, str, str], ...] = (
    ("max", "num_steps", SPEC_NUM_STEPS),
    ("max", "num_draft_tokens", SPEC_NUM_DRAFT_TOKENS),
    ("avg", "accept_rate_gauge", SPEC_ACCEPT_RATE),
)


# --------------------------------------------------------------------------------------------------
# 4. Command rendering
# --------------------------------------------------------------------------------------------------

# spec.drafter.method -> --speculative-algorithm (NEXTN is SGLang's name for MTP heads; it resolves to EAGLE on
# the target's own MTP layers, or FROZEN_KV_MTP for a Gemma4 assistant draft). SGLang 0.5.23 has no suffix
# decoding and no GPU n-gram proposer: REFUSED_METHODS (section 0), refused by the CRD.
SPECULATIVE_ALGORITHMS = {"eagle3": "EAGLE3", "eagle": "EAGLE", "mtp": "NEXTN", "ngram": "NGRAM",
                          "dflash": "DFLASH", "dspark": "DSPARK", "draftModel": "STANDALONE"}
#: The engine's name for each family it implements (the interface's name for SPECULATIVE_ALGORITHMS).
METHOD_SPELLINGS: dict[str, str] = SPECULATIVE_ALGORITHMS
#: The block drafters' size flag and what it holds for k = spec.drafter.numSpeculativeTokens (the tokens drafted
#: per step): a DFlash block is the anchor plus k drafts (_handle_dflash, speculative_hook.py 368-387: the block
#: is the verify window), a DSpark block size is gamma, the drafts (_handle_dspark 806-850: the window is gamma+1).
BLOCK_SIZE_FLAGS: dict[str, tuple[str, int]] = {"dflash": ("--speculative-dflash-block-size", 1),
                                                "dspark": ("--speculative-dspark-block-size", 0)}
#: What SGLang 0.5.23 resolves for NGRAM (sglang/srt/arg_groups/speculative_hook.py, _handle_ngram):
#: topk always becomes --speculative-ngram-max-bfs-breadth, draft tokens default to 12 and steps to
#: draft tokens // topk. So eagleTopk and numSteps do not mean what they say for ngram.
NGRAM_DEFAULT_NUM_DRAFT_TOKENS = 12
NGRAM_DEFAULT_MAX_BFS_BREADTH = 10
#: The drafter fields SGLang replaces for NGRAM, refused by spec_problems.
NGRAM_REPLACED_FIELDS = ("numSteps", "eagleTopk")

#: Parser destinations the operator sets or depends on: extraArgs may not reach them by any spelling
#: (engines/extra_args.py). A key ending in * covers every destination it starts.
OWNED_DESTINATIONS: dict[str, OwnedDestination] = {
    **owned_by_every_engine(DEFAULT_PORT),
    "model_path": OwnedDestination("the served model", "use spec.target.model"),
    "tp_size": OwnedDestination("the GPUs one model instance is sharded over", "use spec.target.tensorParallelSize"),
    "pp_size": OwnedDestination("the GPUs one replica needs (pipeline stages)",
                                "use spec.target.pipelineParallelSize"),
    "dp_size": OwnedDestination("the GPUs one replica needs (data-parallel engine copies)",
                                "use spec.replicas for whole copies, or spec.target.dataParallelSize for attention "
                                "data parallelism"),
    "dist_init_addr": OwnedDestination("where a replica's nodes meet (its leader pod)",
                                       "use spec.resources.nodesPerReplica"),
    "context_length": OwnedDestination("the context length", "use spec.target.maxModelLen"),
    "mem_fraction_static": OwnedDestination("the GPU memory fraction", "use spec.target.gpuMemoryUtilization"),
    "enable_metrics": OwnedDestination("whether /metrics exists (the operator always turns it on)",
                                       "remove it: the operator sets it"),
    "speculative_*": OwnedDestination("the drafter (speculative decoding configuration)", "use spec.drafter"),
    "grpc_mode": OwnedDestination("the protocol served (gRPC instead of the HTTP API)",
                                  "remove it: the operator needs the HTTP API"),
}


#: SGLang 0.5.23 launch destinations whose value is a credential (tests/contract checks they exist in the
#: real parser). SGLang reads none of them from the environment (sglang/srt/environ.py has no such
#: variable), so the fix is an env variable from a Secret referenced as $(NAME) in the item.
SECRET_DESTINATIONS: dict[str, SecretDestination] = {
    "api_key": SecretDestination("the API key clients must send", None),
    "admin_api_key": SecretDestination("the admin API key", None),
    "ssl_keyfile_password": SecretDestination("the TLS key file's password", None),
}


#: What spec.capture owns besides OWNED_DESTINATIONS while it is set: the request logging its flags render
#: (capture_flags: on, level 3, JSON, into the spool); a prefix, so every --log-requests-* flag is covered.
CAPTURE_OWNED_DESTINATIONS: dict[str, OwnedDestination] = {
    "log_requests*": OwnedDestination("SGLang's request logging (whether, how much, in which format, where), which "
                                      "spec.capture sets", "remove it: spec.capture sets the request logging while "
                                      "it is set"),
}


def extra_args_problems(extra_args: list[str], *, known_flags_only: bool = True, capture: bool = False) -> list[str]:
    """Why these extraArgs cannot go on an SGLang launch line (parsed by SGLang 0.5.23's rules); with ``capture``
    (spec.capture set), the request logging is owned too (CAPTURE_OWNED_DESTINATIONS)."""
    owned = {**OWNED_DESTINATIONS, **(CAPTURE_OWNED_DESTINATIONS if capture else {})}
    return check_extra_args(ENGINE, extra_args, owned, known_flags_only=known_flags_only,
                            secrets=SECRET_DESTINATIONS)


def spec_problems(spec) -> list[str]:
    """What SGLang would refuse, or silently reinterpret, in a DrafterServingSpec beyond the schema."""
    target, drafter = spec.target, spec.drafter
    problems = [
        *parser_name_problems(ENGINE, "spec.target.toolCallParser", "tool_call_parser", target.tool_call_parser),
        *parser_name_problems(ENGINE, "spec.target.reasoningParser", "reasoning_parser", target.reasoning_parser),
    ]
    if drafter.method == "ngram":
        for name, value in (("numSteps", drafter.num_steps), ("eagleTopk", drafter.eagle_topk)):
            if value is not None:
                problems.append(
                    f"spec.drafter.{name} has no effect with method ngram on sglang: SGLang sets the tree width from "
                    f"its n-gram BFS breadth ({NGRAM_DEFAULT_MAX_BFS_BREADTH}) and the steps from numDraftTokens "
                    f"(default {NGRAM_DEFAULT_NUM_DRAFT_TOKENS}); remove {name} and tune numDraftTokens")
    elif drafter.method != "none" and drafter.num_steps is None and (
            drafter.eagle_topk is not None or drafter.num_draft_tokens is not None):
        # SGLang only auto-chooses steps, topk and draft tokens together (it asserts the other two are unset).
        problems.append("spec.drafter.numSteps is required on sglang when eagleTopk or numDraftTokens is set "
                        "(SGLang chooses all three itself only when none is given): set numSteps, or remove the others")
    problems += parallel_problems(spec)
    if getattr(drafter, "dynamic", None) == "fromBenchmark" and (dropped := adaptive_dropped(spec)):
        problems.append(f"spec.drafter.dynamic: SGLang 0.5.23 would drop --speculative-adaptive and serve static steps "
                        f"({dropped}): remove what spec.target.extraArgs or spec.drafter sets for it, or remove "
                        "spec.drafter.dynamic")
    return problems


#: spec.target's parallel fields whose flags extraArgs may still set (when the field is unset): the parser
#: destinations each renders (parallel_flags), the deprecated spelling of attention DP included.
PARALLEL_FIELD_DESTINATIONS: dict[str, tuple[str, ...]] = {
    "data_parallel_size": ("attn_dp_size", "enable_dp_attention"), "expert_parallel": ("ep_size",)}


def parallel_problems(spec) -> list[str]:
    """What SGLang 0.5.23 refuses at startup of the drafter with spec.target's pipeline or data-parallel sizes and
    the API's rules cannot see (they live in spec.env and extraArgs)."""
    layout, method = Parallelism.of(spec), spec.drafter.method
    problems = parallel_field_problems(ENGINE, spec, PARALLEL_FIELD_DESTINATIONS)
    if layout.pipeline > 1 and method != "none" and not _env_on(spec, PIPELINE_SPECULATION_ENV):
        problems.append(
            f"spec.target.pipelineParallelSize {layout.pipeline} with a drafter on sglang needs "
            f"{PIPELINE_SPECULATION_ENV}=1 in spec.env: SGLang 0.5.23 otherwise speculates across pipeline stages "
            "only on PD prefill nodes and refuses to start; add it, or set pipelineParallelSize 1")
    if layout.data > 1 and method in DATA_PARALLEL_LM_HEAD_METHODS and not _given(spec, "enable_dp_lm_head"):
        problems.append(
            f"spec.target.dataParallelSize {layout.data} with method {method} on sglang needs --enable-dp-lm-head in "
            "spec.target.extraArgs: SGLang 0.5.23's block drafters borrow the target's LM head, data-parallel with "
            "attention DP; add it, or set dataParallelSize 1")
    return problems


def _env_on(spec, name: str) -> bool:
    """spec.env sets ``name`` literally to a value SGLang reads as true (one from a Secret is not known here)."""
    return any(v.name == name and v.value is not None and v.value.lower() in PIPELINE_SPECULATION_ON
               for v in spec.env or ())


def _given(spec, dest: str) -> bool:
    """spec.target.extraArgs sets ``dest`` (read with SGLang's parser rules)."""
    try:
        return bool(parse(ENGINE, list(spec.target.extra_args or []), with_defaults=False, known_only=True).get(dest))
    except CommandLineRejected:
        return False


def draft_tokens_per_step(drafter) -> int | None:
    """k, the tokens SGLang drafts per verification for a DrafterSpec: numSteps (the draft chain), or for the block
    drafters numSpeculativeTokens; None where SGLang picks it (auto steps, NGRAM, a block size from the draft)."""
    if drafter.method in BLOCK_SIZE_FLAGS:
        return drafter.num_speculative_tokens
    return drafter.num_steps if drafter.method != "none" else None


def speculative_flags(drafter, schedule=None) -> list[str]:
    if drafter.method == "none":
        return []
    flags_ = ["--speculative-algorithm", SPECULATIVE_ALGORITHMS[drafter.method]]
    if drafter.model:
        flags_ += ["--speculative-draft-model-path", drafter.model]
    if drafter.method in BLOCK_SIZE_FLAGS and drafter.num_speculative_tokens is not None:
        flag, anchor = BLOCK_SIZE_FLAGS[drafter.method]
        flags_ += [flag, str(drafter.num_speculative_tokens + anchor)]
    steps, draft_tokens = drafter.num_steps, drafter.num_draft_tokens
    if schedule:
        # SGLang starts from --speculative-num-steps, which must be one of the tiers' candidates, and sets the
        # draft tokens to steps + 1 itself (speculative_hook._init_adaptive_speculative_params).
        steps, draft_tokens = adaptive_start_steps(schedule), None
        flags_ += ["--speculative-adaptive", "--speculative-adaptive-config", ADAPTIVE_CONFIG_PATH]
    for flag, value in (("--speculative-num-steps", steps),
                        ("--speculative-eagle-topk", drafter.eagle_topk),
                        ("--speculative-num-draft-tokens", draft_tokens)):
        if value is not None:
            flags_ += [flag, str(value)]
    return flags_


#: The leader's port a replica's nodes initialise their process group on (--dist-init-addr HOST:PORT).
GROUP_DIST_INIT_PORT = 20000


def tensor_parallel_size(layout: Parallelism) -> int:
    """SGLang's --tp-size: with attention data parallelism the tensor-parallel group is every data-parallel
    rank's GPUs together (attention splits it into --attn-dp-size ranks of spec.target.tensorParallelSize GPUs
    each; the MoE and dense layers shard over all of it)."""
    return layout.tensor * layout.data


def parallel_flags(layout: Parallelism) -> list[str]:
    """The sizes beyond --tp-size, as flags (none for a plain tensor-parallel replica): pipeline stages,
    attention data-parallel ranks, and expert parallelism over the whole tensor-parallel group."""
    argv: list[str] = []
    if layout.pipeline > 1:
        argv += ["--pp-size", str(layout.pipeline)]
    if layout.data > 1:
        argv += ["--attn-dp-size", str(layout.data)]
    if layout.expert:
        argv += ["--ep-size", str(tensor_parallel_size(layout))]
    return argv


def group_flags(layout: Parallelism, *, worker: bool) -> list[str]:
    """Where this pod sits in a replica that spans nodes (none on one node): the nodes, this pod's node rank from
    the group's environment, and the leader's address for the process group. SGLang's node rank alone tells a
    worker from the leader (node 0 serves the API), so every pod runs the same command line."""
    if not layout.spans_nodes:
        if worker:
            raise ValueError("a replica on one node has no workers: render the leader's command")
        return []
    return ["--nnodes", str(layout.nodes), "--node-rank", NODE_RANK,
            "--dist-init-addr", f"{LEADER_ADDRESS}:{GROUP_DIST_INIT_PORT}"]


def render_command(spec, schedule=None, *, worker: bool = False) -> list[str]:
    """`python3 -m sglang.launch_server` argv for a DrafterServingSpec; metrics are always on. ``worker``: a
    worker pod's of a replica that spans nodes (:func:`group_flags`; the same flags, drafter's included).

    extraArgs come first, before every flag the operator owns: they are checked against the owned
    destinations, and argparse's last-one-wins rule protects the owned values too. ``schedule``
    (spec.drafter.dynamic: ``[(start, end, k), ...]``) turns on adaptive speculation with the tiers in
    :data:`ADAPTIVE_CONFIG_PATH` (:func:`schedule_files`).
    """
    target = spec.target
    layout = Parallelism.of(spec)
    argv = ["python3", "-m", "sglang.launch_server", *(target.extra_args or []),
            "--model-path", target.model, "--host", "0.0.0.0",
            "--port", str(DEFAULT_PORT), "--tp-size", str(tensor_parallel_size(layout)),
            *parallel_flags(layout), *group_flags(layout, worker=worker)]
    if target.served_model_name:
        argv += ["--served-model-name", target.served_model_name]
    if target.max_model_len is not None:
        argv += ["--context-length", str(target.max_model_len)]
    if target.gpu_memory_utilization is not None:
        argv += ["--mem-fraction-static", target.gpu_memory_utilization]
    if target.trust_remote_code:
        argv.append("--trust-remote-code")
    if target.tool_call_parser:
        argv += ["--tool-call-parser", target.tool_call_parser]
    if target.reasoning_parser:
        argv += ["--reasoning-parser", target.reasoning_parser]
    argv.append("--enable-metrics")  # off by default in SGLang; acceptance monitoring needs it
    return argv + speculative_flags(spec.drafter, schedule) + capture_flags(spec.capture)


def deterministic(spec) -> bool:
    """Whether this serving runs SGLang's deterministic inference (``--enable-deterministic-inference`` in
    spec.target.extraArgs): deterministic attention backends and MoE reductions, and speculative verification
    kept greedy (sglang/srt/arg_groups/speculative_hook.py never turns rejection sampling on with it)."""
    try:
        parsed = parse(ENGINE, list(spec.target.extra_args or []), with_defaults=False, known_only=True)
    except CommandLineRejected:
        return False
    return bool(parsed.get("enable_deterministic_inference"))


# --------------------------------------------------------------------------------------------------
# 5. What extraArgs make of the launch (known-bad rows match on it: controllers/serving/known_bad.py)
# --------------------------------------------------------------------------------------------------

#: SGLang 0.5.23's MoE all-to-all backends that make expert parallelism span the TP group
#: (sglang/srt/arg_groups/overrides.py _A2A_EP_SPANNING_BACKENDS, applied by _a2a_ep_size).
EP_SPANNING_BACKENDS = frozenset({"megamoe", "deepep", "deepep_v2", "mooncake", "nixl", "ascend_fuseep",
                                  "flashinfer", "flashinfer_megamoe", "mori", "pplx"})


def launch_facts(value: Callable[[str], Any], tensor_parallel: int) -> LaunchFacts:
    """Parallelism, role and page size from the parsed extraArgs (``value(dest)``: given, else the parser's
    default)."""
    backend = value("moe_a2a_backend")
    mode = value("disaggregation_mode")
    return LaunchFacts(
        # Data-parallel attention (--attn-dp-size; --dp-size, which the operator owns, for whole engines).
        data_parallel=max(int(value("dp_size") or 1), int(value("attn_dp_size") or 1)),
        expert_parallel=tensor_parallel if backend in EP_SPANNING_BACKENDS else int(value("ep_size") or 1),
        pipeline_parallel=int(value("pp_size") or 1),
        roles=frozenset({mode}) if mode in ("prefill", "decode") else frozenset(), page_size=value("page_size"),
        # SGLang's counterpart (--enable-memory-saver with /release_memory_occupation) is not modelled: no row
        # needs it.
        sleep_mode=False)


# --------------------------------------------------------------------------------------------------
# 6. Adaptive speculation: spec.drafter.dynamic's schedule as SGLang's batch-size tiers
# --------------------------------------------------------------------------------------------------

#: Where the engine pod finds the tier config (a file the pod's template carries: resources/engine.py).
ADAPTIVE_CONFIG_PATH = "/etc/drafter/speculation/adaptive.json"
#: The algorithms whose built-in worker adapts its steps (NEXTN, the API's mtp, runs as EAGLE by then).
ADAPTIVE_METHODS: tuple[str, ...] = tuple(m for m, algorithm in SPECULATIVE_ALGORITHMS.items()
                                          if algorithm in ("EAGLE", "EAGLE3", "NEXTN"))


def adaptive_config(schedule) -> dict:
    """SGLang's adaptive tier config for ``[(start, end, k), ...]``: a tier per range, keyed by its first batch
    size (SGLang routes a batch to the largest key not above it), whose candidate steps are 1 to k, or 0 where
    nothing is drafted. The controller keeps moving within them by the acceptance it sees (down when drafts
    stop being accepted), never above the k the sweep found to pay at that load."""
    tiers = {}
    for start, _end, k in sorted(tuple(entry) for entry in schedule):
        tiers[str(int(start))] = {"candidate_steps": list(range(1, int(k) + 1)) if k > 0 else [0]}
    return tiers


def adaptive_start_steps(schedule) -> int:
    """The steps SGLang starts from: the largest candidate (the lowest load's k), so that --speculative-num-steps
    is one of the candidates as SGLang requires."""
    return max(int(k) for _, _, k in schedule)


def schedule_files(schedule) -> dict[str, str]:
    """The files the engine pod needs to run ``schedule``: the tier config, as SGLang reads it (JSON)."""
    return {ADAPTIVE_CONFIG_PATH: json.dumps(adaptive_config(schedule), sort_keys=True)} if schedule else {}


def adaptive_unsupported_reason(*, algorithm: str | None, eagle_topk: int | None, attention_dp_size: int,
                                multi_layer_eagle: bool, two_batch_overlap: bool, pdmux: bool) -> str | None:
    """Why SGLang 0.5.23 silently drops ``--speculative-adaptive`` and serves static steps, or None when it keeps
    it (speculative/adaptive_spec_params.adaptive_unsupported_reason, in its order and words; the contract tier
    holds this function to it). ``algorithm`` as resolved (NEXTN read as EAGLE); ``attention_dp_size`` the
    attention data-parallel width. SGLang also drops it for an out-of-tree platform's worker, never ours."""
    if algorithm not in ("EAGLE", "EAGLE3"):
        return f"speculative_algorithm={algorithm} (only EAGLE/EAGLE3 are supported)"
    if eagle_topk is not None and eagle_topk != 1:
        return f"speculative_eagle_topk={eagle_topk} (only topk=1 is supported)"
    if attention_dp_size > 1:
        return "attention DP is not supported (adaptive tier decisions are not synchronized across DP ranks)"
    if multi_layer_eagle:
        return "enable_multi_layer_eagle=True is not supported (MultiLayerEagleWorkerV2 does not implement adaptive)"
    if two_batch_overlap:
        return ("enable_two_batch_overlap=True is not supported "
                "(adaptive state swap would discard the TboAttnBackend wrapper)")
    if pdmux:
        return "enable_pdmux=True is not supported (adaptive state swap does not update decode_attn_backend_group)"
    return None


def adaptive_dropped_by(algorithm: str | None, values: Mapping[str, Any]) -> str | None:
    """Why SGLang drops ``--speculative-adaptive`` for a launch with ``algorithm`` and the parsed flag ``values``
    (dests), read as its speculative hook reads them: the algorithm's alias resolved (NEXTN runs as EAGLE), and
    the deprecated ``--dp-size N --enable-dp-attention`` as ``--attn-dp-size N``
    (parallel_hook.handle_deprecated_dp_attention). The emulator asks this with its own parse of a command line."""
    aliases = flags.table(ENGINE).extras["speculative_algorithms"]["aliases"]
    attention_dp = values.get("attn_dp_size") or 1
    if values.get("enable_dp_attention") and attention_dp == 1:
        attention_dp = values.get("dp_size") or 1
    return adaptive_unsupported_reason(
        algorithm=aliases.get(algorithm, algorithm), eagle_topk=values.get("speculative_eagle_topk"),
        attention_dp_size=int(attention_dp), multi_layer_eagle=bool(values.get("enable_multi_layer_eagle")),
        two_batch_overlap=bool(values.get("enable_two_batch_overlap")), pdmux=bool(values.get("enable_pdmux")))


def adaptive_dropped(spec) -> str | None:
    """Why SGLang would drop the adaptive speculation spec.drafter.dynamic asks for, from the spec (its drafter and
    the attention data parallelism spec.target.dataParallelSize renders) and its extraArgs (None when it runs it)."""
    try:
        given = parse(ENGINE, list(spec.target.extra_args or []), with_defaults=False, known_only=True).values
    except CommandLineRejected:
        given = {}
    layout = Parallelism.of(spec)
    rendered = {"attn_dp_size": layout.data} if layout.data > 1 else {}
    return adaptive_dropped_by(SPECULATIVE_ALGORITHMS.get(spec.drafter.method),
                               {**given, **rendered, "speculative_eagle_topk": spec.drafter.eagle_topk})


# --------------------------------------------------------------------------------------------------
# 7. Request capture: SGLang's own request logging into the capture spool (drafter_operator/capture/)
# --------------------------------------------------------------------------------------------------

#: --log-requests-level 3 logs the input and the output whole (sglang/srt/utils/request_logger.py
#: _compute_metadata: 0 and 1 skip the text and token ids, 2 cuts each string and list to 2048 items). The output
#: comes with it at every level that has the prompt; the sidecar drops it unless spec.capture.responses.
CAPTURE_LOG_LEVEL = 3
#: How the capture sidecar follows the files (drafter_operator/capture/following.py), and reads their lines:
#: ``<hostname>_<rank>.log``, rotated hourly to ``<hostname>_<rank>.log.<YYYY-mm-dd_HH>``.
CAPTURE_SPOOL = RotatedLogs(".log")
capture_line = records.sglang_line


def capture_flags(capture) -> list[str]:
    """The flags that make SGLang log each request as one JSON line into the spool: with a directory target,
    sglang/srt/utils/log_utils.py writes ``<dir>/<hostname>_<rank>.log`` and rotates it hourly to
    ``<name>.<YYYY-mm-dd_HH>`` without deleting any (backupCount 0): the sidecar deletes what it has read.
    ``capture``: spec.capture, or None for no flags."""
    if capture is None:
        return []
    return ["--log-requests", "--log-requests-level", str(CAPTURE_LOG_LEVEL), "--log-requests-format", "json",
            "--log-requests-target", SPOOL_DIRECTORY]


def capture_environment(capture) -> dict[str, str]:
    """The engine container's variables for capture: none, the flags say it all."""
    return {}


def capture_files(capture) -> dict[str, str]:
    """The files the engine container reads for capture: none."""
    return {}
