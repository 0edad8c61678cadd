"""Parse a real vLLM or SGLang command line into the configuration the emulator serves.

Accepted forms (the argv the container would run, after ``drafter-operator emulate``):

- ``vllm serve MODEL [flags]`` (also ``vllm serve --model MODEL``);
- ``python -m vllm.entrypoints.openai.api_server --model MODEL [flags]``;
- ``python -m sglang.launch_server --model-path MODEL [flags]`` (any ``python``/``python3.x``);
- ``sglang [serve] --model-path MODEL [flags]`` (shorthand).

Like the engines' own parsers (argparse), an unknown flag or a bad value exits with status 2. Real
engine flags the emulator does not model are accepted, recorded in ``EngineConfig.ignored`` and
otherwise ignored: they are listed in ``VLLM_IGNORED_FLAGS`` and ``SGLANG_IGNORED_FLAGS``.
Like vLLM's ``FlexibleArgumentParser``, vLLM flags may be spelled with underscores.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass, field
from typing import Literal

from drafter_operator.engines import sglang as sglang_engine
from drafter_operator.engines import vllm as vllm_engine

EngineName = Literal["vllm", "sglang"]

VLLM_API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
SGLANG_LAUNCH_MODULE = "sglang.launch_server"

#: Context length when the command line does not give one (the model config would).
DEFAULT_MAX_MODEL_LEN = 131072

#: vLLM speculative methods (vllm 0.33.0 SpeculativeConfig; model-specific *_mtp are rewritten to mtp).
VLLM_SPECULATIVE_METHODS = frozenset({
    "ngram", "medusa", "mlp_speculator", "draft_model", "suffix", "custom_class", "eagle", "eagle3",
    "extract_hidden_states", "mtp", "dflash", "ngram_gpu", "dspark",
})
#: Methods that work without a drafter model.
VLLM_METHODS_WITHOUT_MODEL = frozenset({"ngram", "ngram_gpu", "suffix", "mtp", "extract_hidden_states"})
#: num_speculative_tokens of an MTP config that leaves it out (n_predict of DeepSeek-V3-style targets).
VLLM_MTP_DEFAULT_TOKENS = 1
#: SGLang --speculative-algorithm builtins (0.5.23).
SGLANG_SPECULATIVE_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO")
SGLANG_ALGORITHMS_NEEDING_DRAFT_MODEL = frozenset({"EAGLE", "EAGLE3", "STANDALONE"})
#: What SGLang picks when --speculative-num-steps / -eagle-topk / -num-draft-tokens are left out
#: (recent versions choose per model; this is the common choice for a topk-1 chain).
SGLANG_DEFAULT_NUM_STEPS = 3
SGLANG_DEFAULT_EAGLE_TOPK = 1

# Real flags we accept and ignore: name -> takes a value (True), or is a switch (False).
# Short aliases map to the long flag they stand for.
VLLM_IGNORED_FLAGS: dict[str, bool] = {
    "--dtype": True, "--quantization": True, "--kv-cache-dtype": True, "--max-num-seqs": True,
    "--max-num-batched-tokens": True, "--block-size": True, "--swap-space": True,
    "--cpu-offload-gb": True, "--seed": True, "--tokenizer": True, "--tokenizer-mode": True,
    "--revision": True, "--code-revision": True, "--tokenizer-revision": True, "--download-dir": True,
    "--load-format": True, "--config-format": True, "--distributed-executor-backend": True,
    "--pipeline-parallel-size": True, "--data-parallel-size": True, "--chat-template": True,
    "--chat-template-content-format": True, "--api-key": True, "--uvicorn-log-level": True,
    "--root-path": True, "--max-logprobs": True, "--generation-config": True,
    "--override-generation-config": True, "--hf-overrides": True, "--compilation-config": True,
    "--kv-transfer-config": True, "--limit-mm-per-prompt": True, "--allowed-origins": True,
    "--ssl-keyfile": True, "--ssl-certfile": True, "--long-prefill-token-threshold": True,
    "--scheduling-policy": True, "--response-role": True, "--hf-config-path": True,
    "--model-impl": True, "--max-log-len": True, "--max-num-partial-prefills": True,
    "--enforce-eager": False, "--enable-prefix-caching": False, "--enable-chunked-prefill": False,
    "--disable-log-requests": False, "--disable-log-stats": False, "--enable-log-requests": False,
    "--enable-expert-parallel": False, "--disable-custom-all-reduce": False,
    "--async-scheduling": False, "--disable-fastapi-docs": False,
    "--enable-prompt-tokens-details": False, "--enable-force-include-usage": False,
    "--enable-server-load-tracking": False, "--disable-uvicorn-access-log": False,
}
VLLM_SHORT_ALIASES = {"-pp": "--pipeline-parallel-size", "-dp": "--data-parallel-size",
                      "-q": "--quantization", "-O": "--compilation-config"}

SGLANG_IGNORED_FLAGS: dict[str, bool] = {
    "--tokenizer-path": True, "--tokenizer-mode": True, "--load-format": True, "--dtype": True,
    "--kv-cache-dtype": True, "--quantization": True, "--revision": True, "--chat-template": True,
    "--max-running-requests": True, "--max-total-tokens": True, "--chunked-prefill-size": True,
    "--max-prefill-tokens": True, "--schedule-policy": True, "--schedule-conservativeness": True,
    "--cuda-graph-max-bs": True, "--attention-backend": True, "--sampling-backend": True,
    "--grammar-backend": True, "--log-level": True, "--api-key": True, "--random-seed": True,
    "--dp-size": True, "--data-parallel-size": True, "--ep-size": True, "--expert-parallel-size": True,
    "--pp-size": True, "--nnodes": True, "--node-rank": True, "--dist-init-addr": True,
    "--decode-log-interval": True, "--watchdog-timeout": True,
    "--speculative-accept-threshold-single": True, "--speculative-accept-threshold-acc": True,
    "--speculative-token-map": True, "--speculative-draft-model-revision": True,
    "--speculative-attention-mode": True, "--torch-compile-max-bs": True, "--moe-runner-backend": True,
    "--moe-a2a-backend": True, "--page-size": True, "--stream-interval": True, "--download-dir": True,
    "--json-model-override-args": True, "--max-queued-requests": True, "--disaggregation-mode": True,
    "--prefill-attention-backend": True, "--decode-attention-backend": True,
    "--skip-server-warmup": False, "--disable-cuda-graph": False, "--disable-radix-cache": False,
    "--enable-torch-compile": False, "--enable-dp-attention": False, "--log-requests": False,
    "--disable-overlap-schedule": False, "--enable-mixed-chunk": False, "--enable-cache-report": False,
    "--show-time-cost": False, "--disable-shared-experts-fusion": False, "--enable-p2p-check": False,
    "--enable-deterministic-inference": False, "--skip-tokenizer-init": False,
}


@dataclass(frozen=True)
class SpeculationConfig:
    """Speculative decoding as the command line configures it.

    ``num_speculative_tokens`` is the model's ``k``: vLLM's ``num_speculative_tokens``, SGLang's
    ``--speculative-num-steps`` (the draft chain length; tree drafting with topk > 1 is not modelled
    beyond that).
    """

    method: str
    draft_model: str | None
    num_speculative_tokens: int
    eagle_topk: int | None = None
    num_draft_tokens: int | None = None
    options: dict[str, object] = field(default_factory=dict)

    @property
    def drafter_key(self) -> str:
        """What the acceptance profile is looked up by: the drafter model, else the method."""
        return self.draft_model or self.method


@dataclass(frozen=True)
class EngineConfig:
    engine: EngineName
    entrypoint: str
    model: str
    served_model_names: tuple[str, ...]
    host: str
    port: int
    tensor_parallel_size: int = 1
    max_model_len: int | None = None
    memory_fraction: float | None = None
    trust_remote_code: bool = False
    tool_call_parser: str | None = None
    reasoning_parser: str | None = None
    enable_auto_tool_choice: bool = False
    enable_metrics: bool = True
    speculation: SpeculationConfig | None = None
    ignored: dict[str, object] = field(default_factory=dict)

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


class _Parser(argparse.ArgumentParser):
    """argparse, but exiting like the engines: usage and message on stderr, status 2."""

    def __init__(self, prog: str, usage: str) -> None:
        super().__init__(prog=prog, usage=usage, allow_abbrev=False,
                         description="drafter-operator engine emulator: accepts the real engine's flags.")


def _add_ignored(parser: argparse.ArgumentParser, flags: dict[str, bool], aliases: dict[str, str],
                 boolean_action: type[argparse.Action] | str) -> None:
    group = parser.add_argument_group("accepted and ignored (real engine flags the emulator does not model)")
    reverse: dict[str, list[str]] = {}
    for short, long in aliases.items():
        reverse.setdefault(long, []).append(short)
    for flag, takes_value in flags.items():
        names = [flag, *reverse.get(flag, [])]
        dest = "ignored__" + flag.lstrip("-").replace("-", "_")
        if takes_value:
            group.add_argument(*names, dest=dest, default=None, metavar="VALUE",
                               nargs="+" if flag == "--allowed-origins" else None)
        else:
            group.add_argument(*names, dest=dest, action=boolean_action, default=None)


def _collect_ignored(ns: argparse.Namespace) -> dict[str, object]:
    return {
        "--" + key[len("ignored__"):].replace("_", "-"): value
        for key, value in sorted(vars(ns).items())
        if key.startswith("ignored__") and value is not None
    }


# ---------------------------------------------------------------------------------------------- vLLM

def _json_object(text: str) -> dict[str, object]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("expected a JSON object")
    return value


def _vllm_parser(prog: str, positional_model: bool) -> _Parser:
    parser = _Parser(prog, f"%(prog)s {'[MODEL]' if positional_model else '--model MODEL'} [options]")
    if positional_model:
        parser.add_argument("model_tag", nargs="?", default=None, help="the model to serve")
    parser.add_argument("--model", default=None)
    parser.add_argument("--host", default=None)
    parser.add_argument("--port", type=int, default=vllm_engine.DEFAULT_PORT)
    parser.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    parser.add_argument("--max-model-len", type=int, default=None)
    parser.add_argument("--gpu-memory-utilization", type=float, default=None)
    parser.add_argument("--trust-remote-code", action=argparse.BooleanOptionalAction, default=False)
    parser.add_argument("--tool-call-parser", default=None)
    parser.add_argument("--reasoning-parser", default=None)
    parser.add_argument("--enable-auto-tool-choice", action=argparse.BooleanOptionalAction, default=False)
    parser.add_argument("--served-model-name", nargs="+", default=None)
    parser.add_argument("--speculative-config", "-sc", type=_json_object, default=None)
    _add_ignored(parser, VLLM_IGNORED_FLAGS, VLLM_SHORT_ALIASES, argparse.BooleanOptionalAction)
    return parser


def _normalise_vllm_flags(args: list[str]) -> list[str]:
    """``--max_model_len=4`` -> ``--max-model-len=4`` (what vLLM's FlexibleArgumentParser does)."""
    out = []
    for arg in args:
        if arg.startswith("--") and "_" in arg.split("=", 1)[0]:
            key, sep, value = arg.partition("=")
            arg = key.replace("_", "-") + sep + value
        out.append(arg)
    return out


def _vllm_speculation(parser: argparse.ArgumentParser, spec: dict[str, object] | None) -> SpeculationConfig | None:
    if spec is None:
        return None
    spec = dict(spec)
    if "tensor_parallel_size" in spec:
        parser.error("--speculative-config: 'tensor_parallel_size' is not a field; use 'draft_tensor_parallel_size'")
    model = spec.pop("model", None)
    if model is not None and not isinstance(model, str):
        parser.error("--speculative-config: 'model' must be a string")
    method = spec.pop("method", None)
    if method is None:
        name = (model or "").lower()
        method = "eagle3" if "eagle3" in name else "eagle" if "eagle" in name else "draft_model" if model else None
        if method is None:
            parser.error("--speculative-config: give 'method' or 'model'")
    method = str(method)
    if method.endswith("_mtp"):
        method = "mtp"
    if method not in VLLM_SPECULATIVE_METHODS:
        parser.error(f"--speculative-config: unknown method {method!r} "
                     f"(choose from {', '.join(sorted(VLLM_SPECULATIVE_METHODS))})")
    if model is None and method not in VLLM_METHODS_WITHOUT_MODEL:
        parser.error(f"--speculative-config: method {method!r} needs a 'model'")
    k = spec.pop("num_speculative_tokens", None)
    if k is None and method == "mtp":
        # vLLM reads n_predict from the target's config (DeepSeek-V3/Kimi: one MTP layer).
        k = VLLM_MTP_DEFAULT_TOKENS
    if isinstance(k, bool) or not isinstance(k, int) or k <= 0:
        parser.error("--speculative-config: 'num_speculative_tokens' must be an integer > 0")
    return SpeculationConfig(method=method, draft_model=model, num_speculative_tokens=k, options=spec)


def _parse_vllm(prog: str, args: list[str], positional_model: bool) -> EngineConfig:
    parser = _vllm_parser(prog, positional_model)
    ns = parser.parse_args(_normalise_vllm_flags(args))
    model = getattr(ns, "model_tag", None) or ns.model
    if not model:
        parser.error("a model is required (vllm serve MODEL, or --model MODEL)")
    if ns.tensor_parallel_size < 1:
        parser.error("--tensor-parallel-size must be >= 1")
    return EngineConfig(
        engine="vllm",
        entrypoint=prog,
        model=model,
        served_model_names=tuple(ns.served_model_name or ()),
        host=ns.host or "0.0.0.0",
        port=ns.port,
        tensor_parallel_size=ns.tensor_parallel_size,
        max_model_len=ns.max_model_len,
        memory_fraction=ns.gpu_memory_utilization,
        trust_remote_code=ns.trust_remote_code,
        tool_call_parser=ns.tool_call_parser,
        reasoning_parser=ns.reasoning_parser,
        enable_auto_tool_choice=ns.enable_auto_tool_choice,
        enable_metrics=True,
        speculation=_vllm_speculation(parser, ns.speculative_config),
        ignored=_collect_ignored(ns),
    )


# -------------------------------------------------------------------------------------------- SGLang

def _sglang_parser(prog: str) -> _Parser:
    parser = _Parser(prog, "%(prog)s --model-path MODEL [options]")
    parser.add_argument("--model-path", "--model", dest="model_path", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=sglang_engine.DEFAULT_PORT)
    parser.add_argument("--tp-size", "--tensor-parallel-size", dest="tp_size", type=int, default=1)
    parser.add_argument("--context-length", type=int, default=None)
    parser.add_argument("--mem-fraction-static", type=float, default=None)
    parser.add_argument("--trust-remote-code", action="store_true")
    parser.add_argument("--enable-metrics", action="store_true")
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--tool-call-parser", default=None)
    parser.add_argument("--reasoning-parser", default=None)
    parser.add_argument("--speculative-algorithm", choices=SGLANG_SPECULATIVE_ALGORITHMS, default=None)
    parser.add_argument("--speculative-draft-model-path", "--speculative-draft-model",
                        dest="speculative_draft_model_path", default=None)
    parser.add_argument("--speculative-num-steps", type=int, default=None)
    parser.add_argument("--speculative-eagle-topk", type=int, default=None)
    parser.add_argument("--speculative-num-draft-tokens", type=int, default=None)
    _add_ignored(parser, SGLANG_IGNORED_FLAGS, {}, "store_true")
    return parser


def _sglang_speculation(parser: argparse.ArgumentParser, ns: argparse.Namespace) -> SpeculationConfig | None:
    algorithm = ns.speculative_algorithm
    if algorithm is None:
        if ns.speculative_draft_model_path or ns.speculative_num_steps:
            parser.error("--speculative-* options need --speculative-algorithm")
        return None
    if algorithm in SGLANG_ALGORITHMS_NEEDING_DRAFT_MODEL and not ns.speculative_draft_model_path:
        parser.error(f"--speculative-algorithm {algorithm} needs --speculative-draft-model-path")
    steps = ns.speculative_num_steps or SGLANG_DEFAULT_NUM_STEPS
    topk = ns.speculative_eagle_topk or SGLANG_DEFAULT_EAGLE_TOPK
    draft_tokens = ns.speculative_num_draft_tokens or steps + 1
    if steps < 1 or topk < 1 or draft_tokens < 2:
        parser.error("--speculative-num-steps and --speculative-eagle-topk must be >= 1, "
                     "--speculative-num-draft-tokens >= 2")
    return SpeculationConfig(method=algorithm, draft_model=ns.speculative_draft_model_path,
                             num_speculative_tokens=steps, eagle_topk=topk, num_draft_tokens=draft_tokens)


def _parse_sglang(prog: str, args: list[str]) -> EngineConfig:
    parser = _sglang_parser(prog)
    ns = parser.parse_args(args)
    if ns.tp_size < 1:
        parser.error("--tp-size must be >= 1")
    return EngineConfig(
        engine="sglang",
        entrypoint=prog,
        model=ns.model_path,
        served_model_names=(ns.served_model_name,) if ns.served_model_name else (),
        host=ns.host,
        port=ns.port,
        tensor_parallel_size=ns.tp_size,
        max_model_len=ns.context_length,
        memory_fraction=ns.mem_fraction_static,
        trust_remote_code=ns.trust_remote_code,
        tool_call_parser=ns.tool_call_parser,
        reasoning_parser=ns.reasoning_parser,
        enable_metrics=ns.enable_metrics,
        speculation=_sglang_speculation(parser, ns),
        ignored=_collect_ignored(ns),
    )


# ------------------------------------------------------------------------------------------ dispatch

USAGE = ("usage: drafter-operator emulate vllm serve MODEL [flags]\n"
         "       drafter-operator emulate python -m vllm.entrypoints.openai.api_server --model MODEL [flags]\n"
         "       drafter-operator emulate python3 -m sglang.launch_server --model-path MODEL [flags]\n"
         "       drafter-operator emulate sglang [serve] --model-path MODEL [flags]")


class CommandLineError(Exception):
    """Not an engine command line the emulator knows (exit status 2)."""


def parse_command_line(argv: list[str]) -> EngineConfig:
    """The engine configuration a command line asks for.

    Raises ``CommandLineError`` for an unrecognised program, and ``SystemExit`` (status 2, or 0 for
    ``--help``) from argparse for bad flags, exactly as the engines do.
    """
    if not argv:
        raise CommandLineError("no engine command line given")
    program = os.path.basename(argv[0])
    rest = argv[1:]
    if program == "vllm":
        if not rest or rest[0] != "serve":
            raise CommandLineError(f"only 'vllm serve' is emulated, got {' '.join(argv[:2])!r}")
        return _parse_vllm("vllm serve", rest[1:], positional_model=True)
    if program == "sglang":
        if rest and rest[0] == "serve":
            rest = rest[1:]
        return _parse_sglang("sglang serve", rest)
    if program.startswith("python"):
        if len(rest) >= 2 and rest[0] == "-m":
            module, rest = rest[1], rest[2:]
            if module == VLLM_API_SERVER_MODULE:
                return _parse_vllm(f"python -m {module}", rest, positional_model=False)
            if module == SGLANG_LAUNCH_MODULE:
                return _parse_sglang(f"python -m {module}", rest)
        raise CommandLineError(f"unknown engine entrypoint {' '.join(argv[:3])!r}")
    raise CommandLineError(f"unknown engine program {argv[0]!r}")
