"""The engines' own request logs, written by the emulator as vLLM 0.33.0 and SGLang 0.5.23 write them, so that a
capture (drafter_operator/capture/) reads the same lines from an emulated engine as from a real one.

vLLM (``vllm/entrypoints/serve/utils/request_logger.py``, ``vllm/logger.py``): ``--enable-log-requests`` turns the
request logger on; its lines reach whatever handlers the logging configuration gives the logger
``vllm.entrypoints.serve.utils.request_logger``. That configuration is vLLM's default one (the console, at
``VLLM_LOGGING_LEVEL``) or the dictConfig JSON file ``VLLM_LOGGING_CONFIG_PATH`` (or ``--log-config-file``) names,
with ``VLLM_CONFIGURE_LOGGING``, ``--log-level`` and ``--logging-config`` read as vLLM reads them. The handlers are
Python's own classes built from that file (a ``WatchedFileHandler`` reopens a file renamed away at its next write);
vLLM's own console formatters become plain formatters of the same format (the emulator's records carry the
``vllm_process_name`` and ``fileinfo`` fields they name). Per request: the JSON body at
``VLLM_REQUEST_BODY_LOG_LEVEL`` (default DEBUG) under the request's ``request_id``; ``Received request <id>: params:
SamplingParams(...)`` at INFO (the prompt and its ids at DEBUG before it); with ``--enable-log-outputs`` the
response, per streamed delta unless ``--no-enable-log-deltas``, and complete. ``--max-log-len`` cuts as vLLM cuts.

SGLang (``sglang/srt/utils/request_logger.py``, ``log_utils.py``): ``--log-requests`` with ``--log-requests-level``
0-3, ``--log-requests-format`` json or text, ``--log-requests-target`` (stdout, or directories where
``<hostname>_0.log`` rotates hourly to ``<name>.<YYYY-mm-dd_HH>``, never deleted). Per request:
``request.received.openai`` (OpenAI routes, level 2 and above), ``request.received`` and ``request.finished``.
``obj`` is SGLang's ``GenerateReqInput`` with every field (``GENERATE_REQ_INPUT_FIELDS``); the emulator fills the
ones it serves from (``rid``, ``text`` or ``input_ids``, ``sampling_params``, ``stream``) and leaves the others at
SGLang's defaults, and ``request.received.openai`` carries the fields the client sent (SGLang's own model adds its
defaults). The tokenizer process is not a distributed rank, so the rank in the file name is always 0.

``tests/contract/test_capture_emulator_contract.py`` holds these lines to the ones the real loggers write.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import logging
import logging.handlers
import os
import socket
import sys
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from drafter_operator import container_paths
from drafter_operator.engines.vllm import LOGGING_CONFIG_ENV, REQUEST_BODY_LEVEL_ENV, REQUEST_LOGGER

# ------------------------------------------------------------------------------------------------ vLLM

#: The flags of `vllm serve` that shape request logging (parser dests).
VLLM_FLAGS = ("enable_log_requests", "enable_log_outputs", "enable_log_deltas", "max_log_len", "log_level",
              "log_config_file", "logging_config")
#: vLLM's console format and date format (vllm/logger.py _FORMAT with an empty VLLM_LOGGING_PREFIX).
VLLM_CONSOLE_FORMAT = ("(%(vllm_process_name)s pid=%(process)d) %(levelname)s %(asctime)s "
                       "[%(fileinfo)s:%(lineno)d] %(message)s")
VLLM_CONSOLE_DATE_FORMAT = "%m-%d %H:%M:%S"
#: The formatter classes of vLLM's own logging configuration: single-line messages render as a plain formatter
#: of the same format renders them (the emulator's request lines are single lines).
VLLM_FORMATTER_FACTORIES = frozenset({"vllm.logging_utils.NewLineFormatter", "vllm.logging_utils.ColoredFormatter",
                                      "vllm.logging.NewLineFormatter"})
#: What vLLM's record factory puts on the API server's records.
VLLM_RECORD_FIELDS = {"vllm_process_name": "APIServer", "fileinfo": "request_logger.py"}
#: Line numbers of the request logger's calls in vLLM 0.33.0 (the console format shows them).
VLLM_LINES = {"level_warning": 25, "level_info": 31, "prompt": 56, "params": 66, "body_level": 77, "body": 84,
              "output_ids": 112, "output": 119}
#: ChatCompletionRequest's and CompletionRequest's fields in declaration order: the order pydantic dumps the body
#: in (model_dump_json(exclude_unset=True)); fields the model does not declare follow (extra="allow").
VLLM_CHAT_FIELDS = (
    "messages", "model", "frequency_penalty", "logit_bias", "logprobs", "top_logprobs", "max_tokens",
    "max_completion_tokens", "n", "presence_penalty", "response_format", "seed", "stop", "stream", "stream_options",
    "temperature", "top_p", "tools", "tool_choice", "reasoning_effort", "thinking_token_budget", "include_reasoning",
    "parallel_tool_calls", "user", "use_beam_search", "top_k", "min_p", "repetition_penalty", "watermarking",
    "length_penalty", "stop_token_ids", "include_stop_str_in_output", "ignore_eos", "min_tokens",
    "skip_special_tokens", "spaces_between_special_tokens", "truncate_prompt_tokens", "truncation_side",
    "prompt_logprobs", "logprob_token_ids", "allowed_token_ids", "bad_words", "echo", "add_generation_prompt",
    "continue_final_message", "add_special_tokens", "documents", "chat_template", "chat_template_kwargs",
    "media_io_kwargs", "mm_processor_kwargs", "structured_outputs", "priority", "request_id", "session_id",
    "return_tokens_as_token_ids", "return_token_ids", "return_weight_versions", "routed_experts_prompt_start",
    "return_token_offsets", "return_prompt_text", "mm_payload", "return_mm_kwargs", "cache_salt",
    "kv_transfer_params", "ec_transfer_params", "vllm_xargs", "repetition_detection", "stream_interval")
VLLM_COMPLETION_FIELDS = (
    "model", "prompt", "echo", "frequency_penalty", "logit_bias", "logprobs", "max_tokens", "n", "presence_penalty",
    "seed", "stop", "stream", "stream_options", "suffix", "temperature", "top_p", "user", "use_beam_search", "top_k",
    "min_p", "repetition_penalty", "watermarking", "length_penalty", "stop_token_ids", "include_stop_str_in_output",
    "ignore_eos", "min_tokens", "skip_special_tokens", "spaces_between_special_tokens", "truncate_prompt_tokens",
    "truncation_side", "allowed_token_ids", "prompt_logprobs", "logprob_token_ids", "bad_words", "prompt_embeds",
    "add_special_tokens", "response_format", "structured_outputs", "priority", "request_id", "session_id",
    "return_tokens_as_token_ids", "return_token_ids", "return_weight_versions", "routed_experts_prompt_start",
    "return_token_offsets", "mm_payload", "return_mm_kwargs", "cache_salt", "kv_transfer_params",
    "ec_transfer_params", "vllm_xargs", "repetition_detection", "thinking_token_budget", "stream_interval")
#: The float fields pydantic turns an integer into a float for (``"temperature": 1`` dumps as ``1.0``).
VLLM_FLOAT_FIELDS = frozenset({"frequency_penalty", "presence_penalty", "temperature", "top_p", "min_p",
                               "repetition_penalty", "length_penalty"})
#: The order a message's keys dump in (the TypedDicts of the message params): the assistant's starts with its role.
VLLM_MESSAGE_KEYS = {"assistant": ("role", "content", "name", "reasoning", "tool_calls"),
                     None: ("content", "role", "name", "tool_call_id")}
#: SamplingParams' repr (vllm/sampling_params.py __repr__): its fields in order, with the defaults a request that
#: sets none of them gets from a model without a generation config.
VLLM_SAMPLING_DEFAULTS: tuple[tuple[str, object], ...] = (
    ("n", 1), ("presence_penalty", 0.0), ("frequency_penalty", 0.0), ("repetition_penalty", 1.0),
    ("temperature", 1.0), ("watermarking", None), ("top_p", 1.0), ("top_k", 0), ("min_p", 0.0), ("seed", None),
    ("stop", []), ("stop_token_ids", []), ("bad_words", []), ("thinking_token_budget", None),
    ("include_stop_str_in_output", False), ("ignore_eos", False), ("max_tokens", None), ("min_tokens", 0),
    ("logprobs", None), ("prompt_logprobs", None), ("skip_special_tokens", True),
    ("spaces_between_special_tokens", True), ("structured_outputs", None), ("extra_args", None))


class RequestLogRefused(ValueError):
    """A logging setup the engine refuses when it starts (its own message)."""


def _level(value: object) -> int:
    if isinstance(value, int):
        return value
    name = str(value).upper()
    if name not in logging.getLevelNamesMapping():
        raise RequestLogRefused(f"Unknown level: {value!r}")
    return logging.getLevelNamesMapping()[name]


def _external(value: object) -> object:
    """dictConfig's ``ext://`` values (the streams vLLM's configurations name)."""
    if isinstance(value, str) and value.startswith("ext://"):
        module, _, attribute = value[len("ext://"):].rpartition(".")
        return getattr(importlib.import_module(module), attribute)
    return value


def _resolve(dotted: str) -> Any:
    module, _, name = dotted.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise RequestLogRefused(f"Unable to configure handler: cannot resolve {dotted!r}: {exc}") from None


def _formatter(spec: Mapping[str, Any]) -> logging.Formatter:
    """One formatter of a dictConfig: a ``()`` factory called with the other keys, else ``class`` (default
    logging.Formatter) with format, datefmt and style. vLLM's own formatters render single lines as a plain one."""
    spec = dict(spec)
    factory = spec.pop("()", None)
    if factory is not None and factory not in VLLM_FORMATTER_FACTORIES:
        return _resolve(factory)(**spec)
    cls = _resolve(spec["class"]) if factory is None and "class" in spec else logging.Formatter
    if spec.get("class") in VLLM_FORMATTER_FACTORIES:
        cls = logging.Formatter
    return cls(spec.get("format"), spec.get("datefmt"), spec.get("style", "%"))


def _handler(spec: Mapping[str, Any], formatters: Mapping[str, Any]) -> logging.Handler:
    """One handler of a dictConfig, built as dictConfig builds it (its class, its keyword arguments)."""
    spec = dict(spec)
    cls = _resolve(spec.pop("class"))
    level, formatter = spec.pop("level", None), spec.pop("formatter", None)
    spec.pop("filters", None)
    handler = cls(**{key: _external(value) for key, value in spec.items()})
    if level is not None:
        handler.setLevel(_level(level))
    if formatter is not None:
        handler.setFormatter(_formatter(formatters[formatter]))
    return handler


@dataclasses.dataclass
class _Logger:
    """The request logger as a logging configuration leaves it: its effective level and the handlers its records
    reach (its own and its ancestors' while they propagate). Private to the engine: nothing global is touched."""

    name: str
    level: int
    handlers: list[logging.Handler]
    fields: Mapping[str, object]

    def enabled_for(self, level: int) -> bool:
        return level >= self.level

    def log(self, level: int, line: int, message: str, *args: object) -> None:
        if not self.enabled_for(level):
            return
        record = logging.LogRecord(self.name, level, f"{self.name.replace('.', '/')}.py", line, message, args, None)
        record.__dict__.update(self.fields)
        for handler in self.handlers:
            if level >= handler.level:
                handler.handle(record)

    def close(self) -> None:
        for handler in self.handlers:
            handler.close()


def _vllm_default_config(level: str, stream: str) -> dict[str, Any]:
    """vLLM's DEFAULT_LOGGING_CONFIG as _configure_vllm_root_logger refreshes it."""
    return {"version": 1, "disable_existing_loggers": False,
            "formatters": {"vllm": {"()": "vllm.logging_utils.NewLineFormatter", "datefmt": VLLM_CONSOLE_DATE_FORMAT,
                                    "format": VLLM_CONSOLE_FORMAT}},
            "handlers": {"vllm": {"class": "logging.StreamHandler", "formatter": "vllm", "level": level,
                                  "stream": stream}},
            "loggers": {"vllm": {"handlers": ["vllm"], "level": level, "propagate": False}}}


def vllm_logging_config(flags: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any] | None:
    """The dictConfig `vllm serve` applies (configure_logging_from_args with LoggingConfig's defaults from the
    environment), or None when it configures nothing (VLLM_CONFIGURE_LOGGING=0 and no file)."""
    try:
        configure = bool(int(env.get("VLLM_CONFIGURE_LOGGING", "1")))
    except ValueError as exc:
        raise RequestLogRefused(f"VLLM_CONFIGURE_LOGGING: {exc}") from None
    level = env.get("VLLM_LOGGING_LEVEL", "INFO").upper()
    path = env.get(LOGGING_CONFIG_ENV)
    given = flags.get("logging_config")
    if isinstance(given, str):
        given = json.loads(given)
    if isinstance(given, dict):
        level = given.get("log_level", level)
        configure = given.get("configure_logging", configure)
        path = given.get("pylogging_config_file", path)
        if given.get("formatter", "text") != "text" and not path:
            raise RequestLogRefused("the emulator writes vLLM's text console format only (--logging-config "
                                    "formatter json)")
    if flags.get("log_level") is not None:
        level = str(flags["log_level"]).upper()
    if flags.get("log_config_file") is not None:
        path = flags["log_config_file"]
    if not configure and path:
        raise RequestLogRefused("Logging configuration is disabled, but a Python logging config file was given. "
                                "pylogging_config_file requires configure_logging to be enabled.")
    config = _vllm_default_config(level, env.get("VLLM_LOGGING_STREAM", "ext://sys.stdout")) if configure else None
    if path:
        if not os.path.exists(path):
            raise RequestLogRefused(f"Could not load logging config. File does not exist: {path}")
        with open(path, encoding="utf-8") as file:
            config = json.loads(file.read())
        if not isinstance(config, dict):
            raise RequestLogRefused(f"Invalid logging config. Expected dict, got {type(config).__name__}.")
        # On the local process runner the file's paths are the container's: a real pod mounts the spool at the path
        # the file names, a host process opens it where the runner put that volume (container_paths.py).
        paths = container_paths.from_environment(env) or container_paths.from_environment()
        for handler in (config.get("handlers") or {}).values():
            if isinstance(handler, dict) and isinstance(handler.get("filename"), str):
                handler["filename"] = container_paths.remap(handler["filename"], paths)
    return config


def configured_logger(config: Mapping[str, Any] | None, name: str, fields: Mapping[str, object]) -> _Logger:
    """Logger ``name`` as ``logging.config.dictConfig(config)`` leaves it (None: Python's defaults, WARNING)."""
    config = config or {}
    loggers = config.get("loggers", {})
    parts = name.split(".")
    chain = [".".join(parts[:n]) for n in range(len(parts), 0, -1)]
    if config.get("disable_existing_loggers", True) and loggers and not any(n in loggers for n in chain):
        return _Logger(name, logging.CRITICAL + 1, [], fields)  # an existing logger the configuration disables
    level: int | None = None
    names: list[str] = []
    propagate = True
    for spec in [loggers[n] for n in chain if n in loggers] + [config.get("root") or {}]:
        if level is None and _level(spec.get("level", logging.NOTSET)) != logging.NOTSET:
            level = _level(spec["level"])
        if propagate:
            names.extend(spec.get("handlers", []))
        propagate = propagate and spec.get("propagate", True)
    handlers = [_handler(config["handlers"][handler], config.get("formatters", {})) for handler in names]
    return _Logger(name, logging.WARNING if level is None else level, handlers, fields)


def _vllm_body(body: Mapping[str, Any], chat: bool) -> str:
    """``request.model_dump_json(exclude_unset=True)``: the fields the client set, in the model's order."""
    order = VLLM_CHAT_FIELDS if chat else VLLM_COMPLETION_FIELDS
    keys = [key for key in order if key in body] + [key for key in body if key not in order]
    dumped: dict[str, Any] = {}
    for key in keys:
        value = body[key]
        if key in VLLM_FLOAT_FIELDS and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if key == "messages" and isinstance(value, list):
            value = [_vllm_message(m) for m in value]
        dumped[key] = value
    return json.dumps(dumped, ensure_ascii=False, separators=(",", ":"))


def _vllm_message(message: object) -> object:
    if not isinstance(message, dict):
        return message
    order = VLLM_MESSAGE_KEYS.get(message.get("role"), VLLM_MESSAGE_KEYS[None])
    return {**{key: message[key] for key in order if key in message},
            **{key: value for key, value in message.items() if key not in order}}


def vllm_sampling_params(body: Mapping[str, Any], max_tokens: int) -> str:
    """The repr of the SamplingParams vLLM builds from a request's body (the fields it carries over as given)."""
    values = []
    for name, default in VLLM_SAMPLING_DEFAULTS:
        value = max_tokens if name == "max_tokens" else body.get(name, default)
        if name in VLLM_FLOAT_FIELDS and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if name == "stop" and isinstance(value, str):
            value = [value]
        values.append(f"{name}={value}")
    return f"SamplingParams({', '.join(values)})"


class VllmRequestLog:
    """vLLM's RequestLogger for one served engine (None of it when ``--enable-log-requests`` is off)."""

    def __init__(self, flags: Mapping[str, Any], env: Mapping[str, str]) -> None:
        self.log_outputs = bool(flags.get("enable_log_outputs"))
        self.log_deltas = flags.get("enable_log_deltas", True) is not False
        self.max_log_len: int | None = flags.get("max_log_len")
        self.body_level = env.get(REQUEST_BODY_LEVEL_ENV, "DEBUG").upper()
        self.logger = configured_logger(vllm_logging_config(flags, env), REQUEST_LOGGER, VLLM_RECORD_FIELDS)
        self._warned_body_level = False
        if not self.logger.enabled_for(logging.INFO):
            self.logger.log(logging.WARNING, VLLM_LINES["level_warning"],
                            "`--enable-log-requests` is set but the minimum log level is higher than INFO. "
                            "No request information will be logged.")
        elif not self.logger.enabled_for(logging.DEBUG):
            self.logger.log(logging.INFO, VLLM_LINES["level_info"],
                            "`--enable-log-requests` is set but the minimum log level is higher than DEBUG. "
                            "Only limited information will be logged to minimize overhead. "
                            "To view more details, set `--log-level DEBUG`.")

    @property
    def details(self) -> bool:
        """Whether the DEBUG lines (the prompt, the output's token ids) are written."""
        return self.logger.enabled_for(logging.DEBUG)

    def _cut(self, value):
        return value if self.max_log_len is None or value is None else value[:self.max_log_len]

    def request_body(self, request_id: str, body: Mapping[str, Any], chat: bool) -> None:
        level = logging.getLevelNamesMapping().get(self.body_level)
        if level is None:
            if not self._warned_body_level:
                self._warned_body_level = True
                self.logger.log(logging.WARNING, VLLM_LINES["body_level"], "Invalid logging level for request "
                                "content: %s. Request JSON body will not be logged.", self.body_level)
            return
        self.logger.log(level, VLLM_LINES["body"], "Request %s JSON body: %s", request_id,
                        self._cut(_vllm_body(body, chat)))

    def inputs(self, request_id: str, prompt: str | None, prompt_ids: Sequence[int], params: str) -> None:
        if self.logger.enabled_for(logging.DEBUG):
            self.logger.log(logging.DEBUG, VLLM_LINES["prompt"], "Request %s details: prompt: %r, prompt_token_ids: "
                            "%s, prompt_embeds shape: %s.", request_id, self._cut(prompt),
                            self._cut(list(prompt_ids)), None)
        self.logger.log(logging.INFO, VLLM_LINES["params"], "Received request %s: params: %s, lora_request: %s.",
                        request_id, params, None)

    def outputs(self, request_id: str, text: str, token_ids: Sequence[int] | None, finish_reason: str | None, *,
                streaming: bool, delta: bool = False) -> None:
        """One response line, where the serving code logs one: every output when outputs are logged, a delta only
        with deltas on, a non-streamed output only when it has text."""
        if not self.log_outputs or (delta and not self.log_deltas) or (not streaming and not text):
            return
        stream_info = (" (streaming delta)" if delta else " (streaming complete)") if streaming else ""
        if self.logger.enabled_for(logging.DEBUG):
            self.logger.log(logging.DEBUG, VLLM_LINES["output_ids"], "Generated response %s%s details: "
                            "output_token_ids: %s", request_id, stream_info,
                            None if token_ids is None else self._cut(list(token_ids)))
        self.logger.log(logging.INFO, VLLM_LINES["output"], "Generated response %s%s: output: %r, finish_reason: %s",
                        request_id, stream_info, self._cut(text), finish_reason)

    def close(self) -> None:
        self.logger.close()


def vllm_request_id(body: Mapping[str, Any]) -> str:
    """The request's ``request_id``: the body's, else the random one vLLM's model gives it."""
    given = body.get("request_id")
    return given if isinstance(given, str) else uuid.uuid4().hex


# ---------------------------------------------------------------------------------------------- SGLang

SGLANG_FLAGS = ("log_requests", "log_requests_level", "log_requests_format", "log_requests_target")
SGLANG_FORMAT, SGLANG_DATE_FORMAT = "[%(asctime)s] %(message)s", "%Y-%m-%d %H:%M:%S"
#: The logger names SGLang's targets get (log_utils.create_log_targets with the request logger's module name).
SGLANG_LOGGER = "sglang.srt.utils.request_logger"
#: Logged only above this end-to-end latency (SGLANG_LOG_REQUEST_EXCEEDED_MS; 0 logs every request).
SGLANG_EXCEEDED_ENV = "SGLANG_LOG_REQUEST_EXCEEDED_MS"
#: SGLang 0.5.23's GenerateReqInput: every field in order, with its default as the logger renders it.
GENERATE_REQ_INPUT_FIELDS: tuple[tuple[str, object], ...] = tuple({
    "rid": None, "session_id": None, "text": None, "input_ids": None, "input_embeds": None, "image_data": None,
    "video_data": None, "audio_data": None, "mm_hashes": None, "mm_content_hashes": None, "use_audio_in_video": False,
    "video_config": None, "sampling_params": None, "watermark": None, "return_logprob": None,
    "logprob_start_len": None, "top_logprobs_num": None, "token_ids_logprob": None, "return_sampling_mask": None,
    "sampling_logprobs_mode": None, "return_text_in_logprobs": False, "return_flat_raw_top_logprobs": False,
    "return_flat_raw_output_top_logprobs": False, "return_flat_raw_top_logprobs_b64": False, "stream": False,
    "log_metrics": True, "return_hidden_states": False, "return_routed_experts": False,
    "routed_experts_start_len": 0, "return_indexer_topk": False, "modalities": None, "session_params": None,
    "lora_path": None, "lora_id": None, "custom_logit_processor": None, "positional_embed_overrides": None,
    "bootstrap_host": None, "bootstrap_port": None, "bootstrap_room": None, "bootstrap_pair_key": None,
    "decode_tp_size": None, "routed_dp_rank": None, "data_parallel_rank": None, "disagg_prefill_dp_rank": None,
    "routing_key": None, "conversation_id": None, "http_worker_ipc": None, "background": False,
    "require_reasoning": False, "max_thinking_tokens": None, "priority": None, "extra_key": None, "no_logs": False,
    "custom_labels": None, "return_bytes": False, "return_entropy": False, "return_prompt_token_ids": False,
    "external_trace_header": None, "received_time": None, "need_wait_for_mm_inputs": None,
    "num_items_assigned": None, "encoder_urls": None, "max_dynamic_patch": None, "min_dynamic_patch": None,
    "image_max_dynamic_patch": None, "video_max_dynamic_patch": None, "images_config": None,
    "mm_processor_kwargs": None, "multi_item_delimiter_indices": None, "token_indices_to_pool": None,
    "cache_salt": None, "kv_hints": None}.items())
_INPUT_FIELDS = ("text", "input_ids", "input_embeds", "image_data", "audio_data", "video_data", "lora_path")


def sglang_metadata(level: int) -> tuple[int, frozenset[str], frozenset[str]]:
    """RequestLogger._compute_metadata: the length strings and lists are cut at, the obj's and out's fields left
    out."""
    if level in (0, 1):
        skip = frozenset(_INPUT_FIELDS + (("sampling_params",) if level == 0 else ()))
        return 1 << 30, skip, frozenset({"text", "output_ids", "embedding"})
    if level == 2:
        return 2048, frozenset(), frozenset()
    if level == 3:
        return 1 << 30, frozenset(), frozenset()
    raise RequestLogRefused(f"Invalid --log-requests-level: self.log_requests_level={level}")


def _transform(data: Any, max_length: int, skip: frozenset[str] = frozenset()) -> Any:
    """_transform_data_for_logging (a GenerateReqInput is a dict here: the JSON form renders it the same)."""
    if isinstance(data, str):
        half = max_length // 2
        return data[:half] + "..." + data[-half:] if len(data) > max_length else data
    if isinstance(data, (list, tuple)):
        if len(data) > max_length:
            half = max_length // 2
            return [_transform(v, max_length) for v in data[:half]] + ["..."] + \
                [_transform(v, max_length) for v in data[-half:]]
        return [_transform(v, max_length) for v in data]
    if isinstance(data, dict):
        return {k: _transform(v, max_length) for k, v in data.items() if k not in skip}
    if isinstance(data, (int, float, bool, type(None))):
        return data
    return str(data)


def _as_text(data: Any, max_length: int, skip: frozenset[str] = frozenset(), dataclass_name: str | None = None) -> str:
    """_dataclass_to_string_truncated: the text format's rendering (``dataclass_name``: render a dict as that
    dataclass)."""
    if isinstance(data, str):
        half = max_length // 2
        return f"{data[:half]!r} ... {data[-half:]!r}" if len(data) > max_length else repr(data)
    if isinstance(data, (list, tuple)):
        half = max_length // 2
        return f"{data[:half]} ... {data[-half:]}" if len(data) > max_length else str(data)
    if isinstance(data, dict):
        if dataclass_name is not None:
            return f"{dataclass_name}(" + ", ".join(f"{k}={_as_text(v, max_length)}" for k, v in data.items()
                                                     if k not in skip) + ")"
        return "{" + ", ".join(f"'{k}': {_as_text(v, max_length)}" for k, v in data.items() if k not in skip) + "}"
    return str(data)


class SglangRequestLog:
    """SGLang's RequestLogger for one served engine. Its targets open when the engine starts, whether or not
    ``--log-requests`` is on (the tokenizer manager builds the logger either way)."""

    def __init__(self, flags: Mapping[str, Any], env: Mapping[str, str], hostname: str | None = None) -> None:
        self.enabled = bool(flags.get("log_requests"))
        self.level = int(flags.get("log_requests_level", 2))
        self.format = flags.get("log_requests_format") or "text"
        self.max_length, self.skip, self.out_skip = sglang_metadata(self.level) if self.enabled \
            else (1 << 30, frozenset(), frozenset())
        self.exceeded_ms = float(env.get(SGLANG_EXCEEDED_ENV, "0") or 0)
        hostname = hostname or socket.gethostname()
        self.handlers = [self._target(target, hostname) for target in (flags.get("log_requests_target") or ["stdout"])]

    @staticmethod
    def _target(target: str, hostname: str) -> logging.Handler:
        if target.lower() == "stdout":
            handler: logging.Handler = logging.StreamHandler(sys.stdout)
        else:
            os.makedirs(target, exist_ok=True)
            handler = logging.handlers.TimedRotatingFileHandler(os.path.join(target, f"{hostname}_0.log"), when="H",
                                                                backupCount=0, encoding="utf-8")
        handler.setFormatter(logging.Formatter(SGLANG_FORMAT, datefmt=SGLANG_DATE_FORMAT))
        return handler

    def _write(self, message: str) -> None:
        record = logging.LogRecord(SGLANG_LOGGER, logging.INFO, __file__, 0, message, None, None)
        for handler in self.handlers:
            handler.handle(record)

    def _json(self, event: str, data: dict[str, Any]) -> None:
        self._write(json.dumps({"timestamp": datetime.now().isoformat(), "event": event, **data}, ensure_ascii=False))

    def openai_received(self, body: Mapping[str, Any]) -> None:
        """The OpenAI body before SGLang adapts it (level 2 and above)."""
        if not self.enabled or self.level < 2:
            return
        obj = {key: value for key, value in body.items() if value is not None}
        if self.format == "json":
            self._json("request.received.openai", {"obj": _transform(obj, self.max_length)})
        else:
            self._write(f"Receive OpenAI: obj={_as_text(obj, self.max_length)}")

    def received(self, obj: dict[str, Any]) -> None:
        if not self.enabled:
            return
        if self.format == "json":
            self._json("request.received", {"rid": obj["rid"], "obj": _transform(obj, self.max_length, self.skip)})
        else:
            self._write(f"Receive: obj={_as_text(obj, self.max_length, self.skip, 'GenerateReqInput')}")

    def finished(self, obj: dict[str, Any], out: dict[str, Any]) -> None:
        if not self.enabled:
            return
        latency = (out.get("meta_info") or {}).get("e2e_latency") or 0
        if self.exceeded_ms > 0 and latency * 1000 < self.exceeded_ms:
            return
        if self.format == "json":
            self._json("request.finished", {"rid": obj["rid"], "obj": _transform(obj, self.max_length, self.skip),
                                            "out": _transform(out, self.max_length, self.out_skip)})
        else:
            self._write(f"Finish: obj={_as_text(obj, self.max_length, self.skip, 'GenerateReqInput')}, "
                        f"out={_as_text(out, self.max_length, self.out_skip)}")

    def close(self) -> None:
        for handler in self.handlers:
            handler.close()


def generate_req_input(**given: Any) -> dict[str, Any]:
    """A GenerateReqInput as the logger sees it: SGLang's defaults, then the fields given (unknown names refused as
    the dataclass refuses them)."""
    obj = dict(GENERATE_REQ_INPUT_FIELDS)
    unknown = sorted(set(given) - set(obj))
    if unknown:
        raise TypeError(f"GenerateReqInput got unexpected keyword arguments {unknown}")
    obj.update(given)
    return obj


def request_log_for(engine: str, flags: Mapping[str, Any], env: Mapping[str, str]
                    ) -> VllmRequestLog | SglangRequestLog | None:
    """The engine's request logger, as its flags and environment set it up; None where the engine has none."""
    if engine == "vllm":
        return VllmRequestLog(flags, env) if flags.get("enable_log_requests") else None
    return SglangRequestLog(flags, env)
