"""Parse a real vLLM or SGLang command line into the configuration the emulator serves.

Accepted forms (the argv the container would run, after ``drafter-operator emulate``):

- ``vllm serve MODEL [flags]`` (also ``vllm serve --model MODEL``);
- ``python -m vllm.entrypoints.openai.api_server --model MODEL [flags]``;
- ``python -m sglang.launch_server --model-path MODEL [flags]`` (any ``python``/``python3.x``);
- ``sglang [serve] --model-path MODEL [flags]`` (shorthand).

The flags are parsed by the engine's own flag table and matching rules (``engines/command_line.py``, generated
from the real parsers): every real flag is accepted with its real type and choices, abbreviations and
vLLM's underscores and dotted keys work, and anything the real parser refuses exits with status 2.
After parsing, the checks each engine runs before it loads a model are repeated: vLLM's
``validate_parsed_serve_args`` and the field checks of its ``SpeculativeConfig``; SGLang's
``SpeculativeAlgorithm.from_string``. ``tests/contract`` holds a corpus of command lines to the same
verdicts and resolved values as the real parsers.

The group flags of a replica that spans nodes (vLLM's ``--nnodes --node-rank --master-addr --master-port
--headless``, SGLang's ``--nnodes --node-rank --dist-init-addr``) become ``EngineConfig.group``; what each engine
refuses of them once it starts (the nodes not dividing the GPUs, a node rank out of range) is in
``EngineConfig.group_problems``, refused at the emulator's "load" as the engines refuse it after parsing
(emulator/group.py plays the group).

What the real engines only find out while loading the model (a drafter checkpoint missing for
EAGLE-3 on SGLang, vLLM inferring a method from the drafter's config) is checked by
``emulator/families.py`` (``startup_problems``) instead, which the emulator runs as its "load".
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any

from drafter_operator.constants import Engine
from drafter_operator.engines import command_line, dynamic, flags, sglang
from drafter_testbed.emulator import families, request_log, sglang_adaptive
from drafter_testbed.emulator.group import GroupConfig, parse_host_port

VLLM_API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
SGLANG_LAUNCH_MODULE = "sglang.launch_server"

#: Context length when the command line does not give one (the model config would).
DEFAULT_MAX_MODEL_LEN = 131072

#: What SGLang 0.5.23 auto-chooses for a DeepSeek-V3/Kimi target when steps, topk and draft tokens are
#: all unset (sglang/srt/arg_groups/speculative_hook.py, _auto_choose_speculative_params).
SGLANG_AUTO_STEPS, SGLANG_AUTO_TOPK, SGLANG_AUTO_DRAFT_TOKENS = 3, 1, 4
#: SGLang's NGRAM defaults (_handle_ngram): 12 draft tokens, topk from the BFS breadth.
SGLANG_NGRAM_DRAFT_TOKENS = 12
#: The flags the emulator models; every other flag given is recorded in ``EngineConfig.ignored``.
MODELLED_DESTINATIONS = {
    "vllm": frozenset({"model_tag", "model", "host", "port", "tensor_parallel_size", "max_model_len",
                       "gpu_memory_utilization", "trust_remote_code", "tool_call_parser", "reasoning_parser",
                       "enable_auto_tool_choice", "served_model_name", "speculative_config", "spec_method",
                       "spec_model", "spec_tokens", *("nnodes", "node_rank", "master_addr", "master_port",
                                                      "headless"), *request_log.VLLM_FLAGS}),
    "sglang": frozenset({"model_path", "host", "port", "tp_size", "context_length", "mem_fraction_static",
                         "trust_remote_code", "tool_call_parser", "reasoning_parser", "enable_metrics",
                         "served_model_name", "speculative_algorithm", "speculative_draft_model_path",
                         "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens",
                         "speculative_ngram_max_bfs_breadth", "speculative_dflash_block_size",
                         "speculative_dspark_block_size", "speculative_adaptive", "speculative_adaptive_config",
                         *("nnodes", "node_rank", "dist_init_addr"), *request_log.SGLANG_FLAGS}),
}


@dataclass(frozen=True)
class SpeculationConfig:
    """Speculative decoding as the command line configures it.

    ``num_speculative_tokens`` is the model's ``k``: vLLM's ``num_speculative_tokens``, SGLang's
    resolved ``speculative_num_steps`` (the draft chain length; for NGRAM, draft tokens // topk).
    """

    method: str
    draft_model: str | None
    num_speculative_tokens: int
    eagle_topk: int | None = None
    num_draft_tokens: int | None = None
    #: SGLang's resolved ``speculative_num_steps`` (1 for DFLASH and DSPARK, whose k is their block).
    num_steps: int | None = None
    #: vLLM: the speculative config's other keys; SGLang: the ``speculative_*`` values given.
    options: dict[str, object] = field(default_factory=dict)
    #: vLLM's ``num_speculative_tokens_per_batch_size`` as its scheduler normalises it (engines/dynamic.py):
    #: the k each step drafts depends on how many requests the step schedules. Empty: k every step.
    schedule: tuple[tuple[int, int, int], ...] = ()
    #: SGLang's adaptive speculation in force (``--speculative-adaptive`` kept): the tiers that pick each decode
    #: step's steps (emulator/sglang_adaptive.py). None: every step drafts ``num_speculative_tokens``.
    adaptive: sglang_adaptive.AdaptiveConfig | None = None
    #: Why SGLang dropped a ``--speculative-adaptive`` it was given and serves static steps; None otherwise.
    adaptive_dropped: str | None = None

    @property
    def drafter_key(self) -> str:
        """What the acceptance profile is looked up by: the drafter model, else the method."""
        return self.draft_model or self.method


@dataclass(frozen=True)
class EngineConfig:
    engine: Engine
    entrypoint: str
    model: str
    served_model_names: tuple[str, ...]
    host: str
    port: int
    tensor_parallel_size: int = 1
    data_parallel_size: int = 1
    max_model_len: int | None = None
    memory_fraction: float | None = None
    trust_remote_code: bool = False
    tool_call_parser: str | None = None
    reasoning_parser: str | None = None
    enable_auto_tool_choice: bool = False
    enable_metrics: bool = True
    speculation: SpeculationConfig | None = None
    #: Real flags given that the emulator accepts but does not model: canonical spelling -> value.
    ignored: dict[str, object] = field(default_factory=dict)
    #: This process's place in a replica that spans nodes (emulator/group.py); None on one node.
    group: GroupConfig | None = None
    #: What the engine refuses of the group flags once it starts (after parsing: its parser accepts them).
    group_problems: tuple[str, ...] = ()
    #: The request-logging flags (``request_log.VLLM_FLAGS`` / ``SGLANG_FLAGS``: parser dest -> value, defaults
    #: included), read by emulator/request_log.py as the engine's request logger reads them.
    request_logging: dict[str, Any] = field(default_factory=dict)

    @property
    def serves_api(self) -> bool:
        return self.group is None or self.group.serves_api

    @property
    def model_name(self) -> str:
        """The served model name (metrics label ``model_name``, the OpenAI ``model``)."""
        return self.served_model_names[0] if self.served_model_names else self.model

    @property
    def context_length(self) -> int:
        return self.max_model_len or DEFAULT_MAX_MODEL_LEN

    @property
    def k(self) -> int:
        return self.speculation.num_speculative_tokens if self.speculation else 0


class CommandLineError(Exception):
    """Not an engine command line the emulator knows (exit status 2)."""


class EngineRefused(Exception):
    """The engine would refuse this command line; ``status`` is its exit status."""

    def __init__(self, message: str, status: int = 2) -> None:
        super().__init__(message)
        self.status = status


def _parse_flags(engine: str, prog: str, args: list[str], usage: str) -> command_line.ParsedCommandLine:
    """The engine's own parse (table, matching rules, --config files); its refusals and --help exit."""
    try:
        parsed = command_line.parse(engine, args, read_config=True)
    except command_line.CommandLineRejected as exc:
        raise EngineRefused(f"usage: {prog} {usage}\n{prog}: error: {exc}") from None
    if "help" in parsed.given:  # the engine prints its help and exits 0 without serving
        raise EngineRefused(command_line.format_help(engine), status=0)
    return parsed


def _ignored(engine: str, parsed: command_line.ParsedCommandLine) -> dict[str, object]:
    table = flags.table(engine)
    out: dict[str, object] = {}
    for dest in sorted(parsed.given):
        if dest in MODELLED_DESTINATIONS[engine]:
            continue
        option = table.by_dest(dest)
        value = parsed.values.get(dest)
        out[option.canonical if option else dest] = value if isinstance(value, (str, int, float, bool, list, dict, type(None))) else repr(value)
    return out


# ---------------------------------------------------------------------------------------------- vLLM

def _hoist_vllm_model(args: list[str]) -> list[str]:
    """``vllm serve ... --model M ...`` -> ``vllm serve M ...`` (FlexibleArgumentParser, serve only)."""
    for index, arg in enumerate(args):
        if re.match(r"^--model(=.+|$)", arg):
            if arg == "--model":
                if index + 1 >= len(args):
                    return args  # argparse reports the missing value
                return [args[index + 1], *args[:index], *args[index + 2:]]
            return [arg.removeprefix("--model="), *args[:index], *args[index + 1:]]
    return args


def _vllm_validate(values: dict[str, Any]) -> None:
    """The checks of vLLM 0.33.0's ``validate_parsed_serve_args`` that apply without a GPU."""
    if values.get("grpc_port") is not None:
        raise EngineRefused("--grpc-port requires VLLM_USE_RUST_FRONTEND=1 vllm serve", status=1)
    effort_map = values.get("reasoning_effort_map")
    if effort_map is not None and (not isinstance(effort_map, dict)
                                   or not all(isinstance(v, str) for v in effort_map.values())):
        raise EngineRefused("Error: --reasoning-effort-map must be a JSON object mapping reasoning efforts to strings.", 1)
    if values.get("enable_auto_tool_choice") and not values.get("tool_call_parser"):
        raise EngineRefused("Error: --enable-auto-tool-choice requires --tool-call-parser", status=1)
    if values.get("enable_log_outputs") and not values.get("enable_log_requests"):
        raise EngineRefused("Error: --enable-log-outputs requires --enable-log-requests", status=1)
    if (values.get("sse_keep_alive_interval") or 0) < 0:
        raise EngineRefused("Error: --sse-keep-alive-interval must be a non-negative integer", status=1)
    if values.get("enable_per_request_metrics") and values.get("disable_log_stats"):
        raise EngineRefused("Error: --enable-per-request-metrics requires engine statistics logging", status=1)


def _vllm_speculation(values: dict[str, Any]) -> SpeculationConfig | None:
    """The speculative config as vLLM 0.33.0 builds it (``create_speculative_config``), field-checked."""
    raw = values.get("speculative_config")
    config: dict[str, Any] | None = dict(raw) if isinstance(raw, dict) else None
    if raw is not None and config is None:
        raise EngineRefused(f"--speculative-config must be a JSON object, got {type(raw).__name__}", status=1)
    for flag, key, value in (("--spec-method", "method", values.get("spec_method")),
                             ("--spec-model", "model", values.get("spec_model")),
                             ("--spec-tokens", "num_speculative_tokens", values.get("spec_tokens"))):
        if value is None:
            continue
        config = {} if config is None else config
        if key in config:
            raise EngineRefused(f"{flag} and --speculative-config['{key}'] are mutually exclusive", status=1)
        config[key] = value
    if config is None:
        return None
    config = {str(k).replace("-", "_"): v for k, v in config.items()}
    facts = flags.table("vllm").extras["speculative_config"]
    unknown = sorted(set(config) - set(facts["fields"]))
    if unknown:
        raise EngineRefused(f"SpeculativeConfig: unexpected keyword argument(s) {unknown}", status=1)
    if config.get("tensor_parallel_size") is not None:
        raise EngineRefused("'tensor_parallel_size' is not a valid argument in the speculative_config. "
                            "Please pass 'draft_tensor_parallel_size' instead.", status=1)
    method = config.pop("method", None)
    if method is not None and method not in facts["methods"]:
        raise EngineRefused(f"SpeculativeConfig.method: input should be one of {facts['methods']}, got {method!r}", 1)
    model = config.pop("model", None)
    if model is not None and not isinstance(model, str):
        raise EngineRefused("SpeculativeConfig.model: input should be a valid string", status=1)
    k = config.pop("num_speculative_tokens", None)
    if isinstance(k, str) and re.fullmatch(r"\s*[+-]?\d+\s*", k):
        k = int(k)  # pydantic's lax mode reads numeric strings
    elif isinstance(k, float) and k.is_integer():
        k = int(k)
    if method is None:
        method = families.vllm_inferred_method(model)
    if str(method).endswith("_mtp"):
        method = "mtp"  # vLLM rewrites the model-specific MTP methods (vllm/config/speculative.py:1244-1250)
    if k is None:
        k = families.vllm_default_k(str(method), config)
    if k is None:
        raise EngineRefused("num_speculative_tokens must be provided with speculative model unless the draft model "
                            "config contains an n_predict parameter.", status=1)
    if not isinstance(k, int):
        raise EngineRefused("SpeculativeConfig.num_speculative_tokens: input should be a valid integer", status=1)
    if k <= 0:
        raise EngineRefused(f"Expected num_speculative_tokens to be greater than zero ({k}).", status=1)
    raw_schedule = config.pop(dynamic.SCHEDULE_KEY, None)
    try:
        # vLLM validates the schedule when its scheduler starts, before serving anything
        schedule = tuple(dynamic.validate_schedule(raw_schedule)) if raw_schedule is not None else ()
    except (TypeError, ValueError) as exc:
        raise EngineRefused(f"ValueError: {exc}", status=1) from None
    return SpeculationConfig(method=str(method), draft_model=model, num_speculative_tokens=k, options=config,
                             schedule=schedule)


def _vllm_group(values: dict[str, Any]) -> tuple[GroupConfig | None, tuple[str, ...]]:
    """The group flags, and what vLLM 0.33.0 refuses of them when it builds its engine config (EngineArgs.
    create_engine_config, after parsing): the nodes must divide the world size, the node rank be one of them, the
    data-parallel backend be MP."""
    nnodes, node_rank = values["nnodes"], values["node_rank"]
    if nnodes <= 1:
        if values.get("headless"):
            return None, ("--headless on one node: the emulator plays a headless vLLM only as a node of a replica "
                          "that spans nodes (--nnodes above 1)",)
        return None, ()
    problems = []
    if (values.get("data_parallel_backend") or "mp") != "mp":
        problems.append(f"ValueError: Invalid data-parallel launch options: `--nnodes {nnodes}` requires "
                        f"`--data-parallel-backend mp`; got `--data-parallel-backend "
                        f"{values['data_parallel_backend']}`. Use the MP backend or set `--nnodes 1`.")
    world_size = (values["tensor_parallel_size"] * (values.get("pipeline_parallel_size") or 1)
                  * (values.get("prefill_context_parallel_size") or 1) * (values.get("data_parallel_size") or 1))
    if world_size % nnodes:
        problems.append(f"ValueError: Invalid data-parallel launch options: `--nnodes {nnodes}` must evenly divide "
                        f"the total world size ({world_size}). Adjust `--nnodes`, `--data-parallel-size`, "
                        "`--pipeline-parallel-size`, `--tensor-parallel-size`, or `--prefill-context-parallel-size`.")
    if not 0 <= node_rank < nnodes:
        problems.append(f"ValueError: Invalid data-parallel launch options: `--node-rank` must be between 0 and "
                        f"{nnodes - 1}; got `--node-rank {node_rank}`. Set it to this node's zero-based index.")
    group = GroupConfig(nnodes=nnodes, node_rank=node_rank, leader_host=values["master_addr"],
                        leader_port=values["master_port"], serves_api=not values.get("headless"))
    return group, tuple(problems)


def _parse_vllm(prog: str, args: list[str], hoist_model: bool) -> EngineConfig:
    if hoist_model:
        args = _hoist_vllm_model(args)
    parsed = _parse_flags("vllm", prog, args, "[model_tag] [options]")
    values = parsed.values
    _vllm_validate(values)
    speculation = _vllm_speculation(values)
    group, group_problems = _vllm_group(values)
    model = values.get("model_tag") or values["model"]
    served = values.get("served_model_name") or []
    return EngineConfig(
        engine="vllm", entrypoint=prog, model=model,
        served_model_names=tuple(n for n in served if n),
        host=values.get("host") or "0.0.0.0",
        port=values["port"],
        tensor_parallel_size=values["tensor_parallel_size"],
        data_parallel_size=values.get("data_parallel_size") or 1,
        max_model_len=values.get("max_model_len") if (values.get("max_model_len") or 0) > 0 else None,
        memory_fraction=values.get("gpu_memory_utilization"),
        trust_remote_code=bool(values.get("trust_remote_code")),
        tool_call_parser=values.get("tool_call_parser"),
        reasoning_parser=values.get("reasoning_parser") or None,
        enable_auto_tool_choice=bool(values.get("enable_auto_tool_choice")),
        enable_metrics=True,
        speculation=speculation,
        ignored=_ignored("vllm", parsed),
        group=group,
        group_problems=group_problems,
        request_logging={name: values.get(name) for name in request_log.VLLM_FLAGS},
    )


# -------------------------------------------------------------------------------------------- SGLang

def _sglang_algorithm(name: str | None) -> str | None:
    """``SpeculativeAlgorithm.from_string``: case-insensitive members, NEXTN an alias of EAGLE."""
    if name is None:
        return None
    facts = flags.table("sglang").extras["speculative_algorithms"]
    upper = name.upper()
    if upper in facts["members"] or upper in facts["aliases"]:
        return upper
    raise EngineRefused(f"Unknown speculative algorithm name: {name}", status=1)


def _sglang_adaptive_speculation(algorithm: str, values: dict[str, Any], given: dict[str, Any]) -> SpeculationConfig:
    """EAGLE or EAGLE-3 under adaptive speculation, resolved as SGLang's ``_init_adaptive_speculative_params``
    does: the config read at start-up (refused as SGLang refuses it), topk 1, the steps given or the middle of
    every tier's candidates (refused when no tier offers them) and one more draft token than steps."""
    try:
        config = sglang_adaptive.read_config(values.get("speculative_adaptive_config"))
    except sglang_adaptive.AdaptiveConfigRefused as exc:
        raise EngineRefused(f"{exc.kind}: {exc}", status=1) from None
    steps = values.get("speculative_num_steps")
    steps = config.default_steps if steps is None else steps
    refusal = sglang_adaptive.steps_refusal(steps, config)
    if refusal is not None:
        raise EngineRefused(f"ValueError: {refusal}", status=1)
    return SpeculationConfig(method=algorithm, draft_model=values.get("speculative_draft_model_path"),
                             num_speculative_tokens=steps, eagle_topk=1, num_draft_tokens=steps + 1,
                             num_steps=steps, options=given, adaptive=config)


def _sglang_speculation(values: dict[str, Any]) -> SpeculationConfig | None:
    algorithm = _sglang_algorithm(values.get("speculative_algorithm"))
    if algorithm is None:
        return None
    steps = values.get("speculative_num_steps")
    topk = values.get("speculative_eagle_topk")
    draft_tokens = values.get("speculative_num_draft_tokens")
    given = {key: value for key, value in values.items() if key.startswith("speculative_") and value is not None}
    dropped = sglang.adaptive_dropped_by(algorithm, values) if values.get("speculative_adaptive") else None
    if values.get("speculative_adaptive") and dropped is None:
        return _sglang_adaptive_speculation(algorithm, values, given)
    block = families.sglang_block_shape(algorithm, values)
    if block is not None:
        return SpeculationConfig(method=algorithm, draft_model=values.get("speculative_draft_model_path"),
                                 num_speculative_tokens=block.k, eagle_topk=block.topk,
                                 num_draft_tokens=block.draft_tokens, num_steps=block.steps, options=given,
                                 adaptive_dropped=dropped)
    if algorithm == "NGRAM":
        topk = values.get("speculative_ngram_max_bfs_breadth")  # always replaced (_handle_ngram)
        draft_tokens = draft_tokens if draft_tokens is not None else SGLANG_NGRAM_DRAFT_TOKENS
        steps = steps if steps is not None else draft_tokens // topk
    elif steps is None and algorithm != "FROZEN_KV_MTP":
        steps, topk, draft_tokens = SGLANG_AUTO_STEPS, SGLANG_AUTO_TOPK, SGLANG_AUTO_DRAFT_TOKENS
    steps = steps if steps is not None else 0  # FROZEN_KV_MTP without steps: refused at load (families.py)
    topk = topk if topk is not None else 1
    draft_tokens = draft_tokens if draft_tokens is not None else steps + 1
    depth = steps
    if algorithm == "NGRAM" and draft_tokens >= 2:
        # The steps SGLang resolves may be 0 (fewer draft tokens than the BFS breadth), and it still serves:
        # the NGRAM worker drafts its tree of draft tokens whatever the steps (speculative/ngram_worker.py:
        # 99-116), the KV sizing reads 0 steps as 1 (mem_cache/allocation_sizing.py:39) and the metrics count
        # draft tokens - 1 per verify (managers/scheduler_components/metrics_reporter.py:975-977). The tree is
        # at least one token deep, so the emulator drafts at least one.
        depth = max(steps, 1)
    return SpeculationConfig(method=algorithm, draft_model=values.get("speculative_draft_model_path"),
                             num_speculative_tokens=depth, eagle_topk=topk, num_draft_tokens=draft_tokens,
                             num_steps=steps, options=given, adaptive_dropped=dropped)


def _sglang_group(values: dict[str, Any]) -> tuple[GroupConfig | None, tuple[str, ...]]:
    """The group flags, and what SGLang 0.5.23 refuses of them when it launches, after parsing (arg_groups/
    validation_hook.py check_server_args, and NetworkAddress.parse of --dist-init-addr)."""
    nnodes, node_rank = values["nnodes"], values["node_rank"]
    if nnodes <= 1:
        return None, ()
    problems = []
    if values.get("ep_join_mode") != "scale" and (values["tp_size"] * (values.get("pp_size") or 1)) % nnodes:
        problems.append("AssertionError: tp_size must be divisible by number of nodes")
    if (values.get("dp_size") or 1) > 1:
        problems.append("AssertionError: multi-node data-parallel replicas are not supported; use attention DP "
                        "(--attn-dp-size) across nodes")
    if not values.get("dist_init_addr"):
        return None, (*problems, "--nnodes above 1 without --dist-init-addr: the emulator's process group meets "
                                 "only at an address given")
    try:
        host, port = parse_host_port(values["dist_init_addr"])
    except ValueError as exc:
        return None, (*problems, f"ValueError: {exc}")
    return GroupConfig(nnodes=nnodes, node_rank=node_rank, leader_host=host, leader_port=port,
                       serves_api=node_rank == 0), tuple(problems)


def _parse_sglang(prog: str, args: list[str]) -> EngineConfig:
    parsed = _parse_flags("sglang", prog, args, "[-h] --model-path MODEL_PATH [options]")
    values = parsed.values
    if values.get("model_path") is None:
        raise EngineRefused(f"{prog}: error: the following arguments are required: --model-path")
    speculation = _sglang_speculation(values)
    group, group_problems = _sglang_group(values)
    served = values.get("served_model_name")
    return EngineConfig(
        engine="sglang", entrypoint=prog, model=values["model_path"],
        served_model_names=(served,) if served else (),
        host=values["host"], port=values["port"], tensor_parallel_size=values["tp_size"],
        max_model_len=values.get("context_length"),
        memory_fraction=values.get("mem_fraction_static"),
        trust_remote_code=bool(values.get("trust_remote_code")),
        tool_call_parser=values.get("tool_call_parser"),
        reasoning_parser=values.get("reasoning_parser"),
        enable_metrics=bool(values.get("enable_metrics")),
        speculation=speculation,
        ignored=_ignored("sglang", parsed),
        group=group,
        group_problems=group_problems,
        request_logging={name: values.get(name) for name in request_log.SGLANG_FLAGS},
    )


# ------------------------------------------------------------------------------------------ dispatch

USAGE = ("usage: drafter-operator emulate vllm serve MODEL [flags]\n"
         "       drafter-operator emulate python -m vllm.entrypoints.openai.api_server --model MODEL [flags]\n"
         "       drafter-operator emulate python3 -m sglang.launch_server --model-path MODEL [flags]\n"
         "       drafter-operator emulate sglang [serve] --model-path MODEL [flags]")


def parse_engine_command_line(argv: list[str]) -> EngineConfig:
    """The engine configuration a command line asks for; raises like the engine refuses it.

    Raises :class:`CommandLineError` for an unrecognised program and :class:`EngineRefused` (with the
    engine's exit status) for a command line the engine's parser or its pre-load checks refuse.
    """
    if not argv:
        raise CommandLineError("no engine command line given")
    program = os.path.basename(argv[0])
    rest = argv[1:]
    if program == "vllm":
        if not rest or rest[0] != "serve":
            raise CommandLineError(f"only 'vllm serve' is emulated, got {' '.join(argv[:2])!r}")
        return _parse_vllm("vllm serve", rest[1:], hoist_model=True)
    if program == "sglang":
        if rest and rest[0] == "serve":
            rest = rest[1:]
        return _parse_sglang("sglang serve", rest)
    if program.startswith("python"):
        if len(rest) >= 2 and rest[0] == "-m":
            module, rest = rest[1], rest[2:]
            if module == VLLM_API_SERVER_MODULE:
                return _parse_vllm(f"python -m {module}", rest, hoist_model=False)
            if module == SGLANG_LAUNCH_MODULE:
                return _parse_sglang(f"python -m {module}", rest)
        raise CommandLineError(f"unknown engine entrypoint {' '.join(argv[:3])!r}")
    raise CommandLineError(f"unknown engine program {argv[0]!r}")


def parse_command_line(argv: list[str]) -> EngineConfig:
    """:func:`parse_engine_command_line`, exiting like the engine: message on stderr, its status."""
    try:
        return parse_engine_command_line(argv)
    except EngineRefused as exc:
        if exc.status == 0:
            print(exc)  # --help
        else:  # parser errors carry argparse's usage and "error:"; the pre-load checks raise an error
            print(exc if exc.status == 2 else f"error: {exc}", file=sys.stderr)
        raise SystemExit(exc.status) from None
