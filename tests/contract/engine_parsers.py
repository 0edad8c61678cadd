"""Run the real engines' argument parsers on command lines: the helper the contract tests drive.

Runs under the engine environment's python (.ci/engine-contract-env), never under the operator's:
it imports vLLM or SGLang and nothing of drafter_operator. Two modes:

    python engine_parsers.py serve vllm|sglang
        Reads one JSON request per line on stdin, a list of cases {"id", "argv", "full"}, and answers
        one JSON line with a list of results in the same order. "argv" is the full command line as
        rendered (`vllm serve ...` or `python3 -m sglang.launch_server ...`).
    python engine_parsers.py exit vllm|sglang ARG...
        Parses ARG... (the flags after the entrypoint) the way the engine's CLI does and exits with
        the parser's own status (2 for an unknown flag), printing nothing on stdout.
    python engine_parsers.py table vllm|sglang
        Prints the engine's flag table as JSON: every option string of the parser `vllm serve` /
        `python -m sglang.launch_server` builds, with its destination, action, nargs, type, choices
        and default, plus the names of the tool-call and reasoning parsers the engine registers.
        The operator's copies live in operator/drafter_operator/engines/flagtables/; regenerate with
        `$DRAFTER_ENGINE_PYTHON tests/contract/engine_parsers.py table vllm > .../vllm.json`.

A result is {"id", "status": "ok" | "exit" | "raised" | "invalid" | "error", ...}. "exit" means the
parser called sys.exit (with "code" and its "stderr"); "raised" that parsing itself raised (e.g. an
unreadable --config file); "invalid" that parsing succeeded but the engine's own post-parse
validation raised ("error"); "error" is a failure of this helper. On "ok":
- vllm: "args" (the parsed namespace, JSON-able values; others as repr), "parsers" (whether the tool
  and reasoning parser names are registered in vLLM), and with --speculative-config "speculative":
  {"fields": SpeculativeConfig built from the JSON with __post_init__ skipped (field types, literals,
  ranges, unknown keys, the model validator), "full" (when the case asks for it): the real
  SpeculativeConfig, __post_init__ included, against a fake local target checkpoint (tiny
  DeepSeek-V3 config.json with one MTP layer, no weights) and the parsed tensor parallel size, with
  the drafter path mapped to a fake checkpoint of the method's kind}.
- sglang: "args" (ServerArgs fields from prepare_server_args) and "algorithm" (the name
  SpeculativeAlgorithm.from_string resolves the flag to, or an error).
No GPU, no network: HF_HUB_OFFLINE is set and nothing is downloaded.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import sys
import tempfile
import time
import traceback

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")

VLLM_PREFIX = ["vllm", "serve"]
FAKE_ROOTS: list[str] = []  # temp dirs of fake checkpoints, removed when the helper ends
SGLANG_PREFIX = ["python3", "-m", "sglang.launch_server"]


def jsonable(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    return repr(value)


def short_error(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) < 2000 else text[:2000] + "..."


# --------------------------------------------------------------------------------------------------
# vLLM


class Vllm:
    def __init__(self):
        from vllm.entrypoints.common.cli_args import make_arg_parser, validate_parsed_serve_args
        from vllm.utils.argparse_utils import FlexibleArgumentParser

        self.validate = validate_parsed_serve_args
        self.parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
        self._fakes = None
        self._targets: dict[int, object] = {}
        self.baseline = {k: jsonable(v) for k, v in vars(self.parser.parse_args(["/model"])).items()}

    # parsing --------------------------------------------------------------------------------------
    def parse(self, args: list[str]):
        return self.parser.parse_args(args)

    def check(self, case: dict) -> dict:
        argv = case["argv"]
        if argv[:2] != VLLM_PREFIX:
            return {"status": "error", "error": f"not a `vllm serve` command line: {argv[:3]}"}
        stderr = io.StringIO()
        try:
            with contextlib.redirect_stderr(stderr):
                ns = self.parse(argv[2:])
        except SystemExit as exc:
            return {"status": "exit", "code": exc.code, "stderr": stderr.getvalue()[-800:]}
        except Exception as exc:  # noqa: BLE001 - e.g. --config FILE that cannot be read: the CLI crashes
            return {"status": "raised", "error": short_error(exc)}
        try:
            self.validate(ns)
        except Exception as exc:  # noqa: BLE001 - any validation failure is the result
            return {"status": "invalid", "error": short_error(exc)}
        args = jsonable(vars(ns))
        out = {"status": "ok", "args": args, "parsers": self.parser_names(ns),
               "changed": sorted(k for k, v in args.items() if k == "model_tag" or self.baseline.get(k) != v)}
        if ns.speculative_config is not None:
            out["speculative"] = self.speculative(ns, full=bool(case.get("full")))
        out["merged"] = self.merged(ns)
        return out

    @staticmethod
    def merged(ns) -> dict | None:
        """The speculative config `vllm serve` builds (EngineArgs.create_speculative_config merges the
        --spec-* shorthands into --speculative-config), field-checked with __post_init__ skipped."""
        import copy
        from types import SimpleNamespace

        from vllm.config import SpeculativeConfig
        from vllm.engine.arg_utils import EngineArgs

        original = SpeculativeConfig.__post_init__
        SpeculativeConfig.__post_init__ = lambda self: None
        try:
            # The real method on just the attributes it reads (EngineArgs() itself resolves the model).
            holder = SimpleNamespace(spec_method=ns.spec_method, spec_model=ns.spec_model,
                                     spec_tokens=ns.spec_tokens, speculative_config=copy.deepcopy(ns.speculative_config))
            config = EngineArgs.create_speculative_config(holder, None, None)
            return None if config is None else {"ok": Vllm.summary(config)}
        except Exception as exc:  # noqa: BLE001 - the refusal is the result
            return {"error": short_error(exc)}
        finally:
            SpeculativeConfig.__post_init__ = original

    @staticmethod
    def parser_names(ns) -> dict:
        from vllm.reasoning import ReasoningParserManager
        from vllm.tool_parsers import ToolParserManager

        def known(name, manager, eager):
            if name is None:
                return None
            return name in getattr(manager, eager) or name in manager.lazy_parsers

        return {"tool_call_parser": known(ns.tool_call_parser, ToolParserManager, "tool_parsers"),
                "reasoning_parser": known(ns.reasoning_parser or None, ReasoningParserManager, "reasoning_parsers")}

    # SpeculativeConfig ----------------------------------------------------------------------------
    # The per-family keys the operator renders (and parallel_drafting, which vLLM forces for the block drafters).
    FAMILY_FIELDS = ("prompt_lookup_min", "prompt_lookup_max", "suffix_decoding_max_tree_depth",
                     "suffix_decoding_max_cached_requests", "suffix_decoding_max_spec_factor",
                     "suffix_decoding_min_token_prob", "dspark_draft_topk", "enable_adaptive_verification",
                     "parallel_drafting", "num_speculative_tokens_per_batch_size")

    @classmethod
    def summary(cls, config, names: dict[str, str] | None = None) -> dict:
        model = config.model
        return {"method": config.method, "model": (names or {}).get(model, model),
                "num_speculative_tokens": config.num_speculative_tokens,
                "draft_tensor_parallel_size": config.draft_tensor_parallel_size,
                **{name: jsonable(getattr(config, name)) for name in cls.FAMILY_FIELDS}}

    @staticmethod
    def runner(config) -> dict:
        """Which model runner vLLM picks for this SpeculativeConfig and whether the dynamic schedule survives it:
        VllmConfig's own _get_v2_model_runner_unsupported_features and _maybe_disable_dynamic_sd_for_v1, run on
        the real config (the rest of VllmConfig at its defaults: no pipeline parallelism, no micro-batching,
        VLLM_USE_V2_MODEL_RUNNER unset, Triton present as on the GPU image)."""
        from types import SimpleNamespace

        from vllm.config import VllmConfig

        parallel = SimpleNamespace(distributed_executor_backend=None, pipeline_parallel_size=1, use_ubatching=False)
        probe = SimpleNamespace(speculative_config=config, parallel_config=parallel)
        unsupported = VllmConfig._get_v2_model_runner_unsupported_features(probe)
        probe.use_v2_model_runner = not unsupported
        with contextlib.redirect_stdout(sys.stderr):
            VllmConfig._maybe_disable_dynamic_sd_for_v1(probe)
        return {"v2": probe.use_v2_model_runner, "v2_unsupported": unsupported,
                "schedule_kept": jsonable(config.num_speculative_tokens_per_batch_size)}

    def speculative(self, ns, full: bool) -> dict:
        from vllm.config import SpeculativeConfig

        raw = ns.speculative_config
        out: dict = {"json": jsonable(raw)}
        if not isinstance(raw, dict):
            out["fields"] = {"error": f"--speculative-config parsed to {type(raw).__name__}, not an object"}
            return out
        original = SpeculativeConfig.__post_init__
        SpeculativeConfig.__post_init__ = lambda self: None
        try:
            out["fields"] = {"ok": self.summary(SpeculativeConfig(**raw))}
        except Exception as exc:  # noqa: BLE001
            out["fields"] = {"error": short_error(exc)}
        finally:
            SpeculativeConfig.__post_init__ = original
        if full:
            out["full"] = self.full(raw, ns)
        return out

    def fakes(self) -> dict[str, str]:
        """Config-only checkpoints in a temp dir: a DeepSeek-V3 target with one MTP layer and drafters."""
        if self._fakes is None:
            root = tempfile.mkdtemp(prefix="drafter-contract-ckpt-")
            FAKE_ROOTS.append(root)
            heads = 128  # divisible by every tensor parallel size up to 64 in powers of two
            common = {"vocab_size": 4096, "max_position_embeddings": 1 << 20, "torch_dtype": "bfloat16",
                      "num_attention_heads": heads, "num_key_value_heads": heads, "rope_theta": 10000.0}
            llama = {**common, "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 1024,
                     "intermediate_size": 2048, "num_hidden_layers": 2, "rms_norm_eps": 1e-5}
            qwen3 = {**common, "model_type": "qwen3", "hidden_size": 1024, "intermediate_size": 2048,
                     "num_hidden_layers": 1, "rms_norm_eps": 1e-6, "head_dim": 64}
            configs = {
                "target": {**common, "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
                           "hidden_size": 1024, "intermediate_size": 2048, "moe_intermediate_size": 256,
                           "num_hidden_layers": 4, "n_routed_experts": 8, "n_shared_experts": 1,
                           "num_experts_per_tok": 2, "first_k_dense_replace": 1, "kv_lora_rank": 64,
                           "q_lora_rank": 64, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32,
                           "num_nextn_predict_layers": 1, "n_group": 1, "topk_group": 1,
                           # DSpark weights bundled in the target, as DeepSeek-V4.1-Flash ships them: vLLM reads the
                           # block size from the target's config when spec.drafter.model is unset.
                           "dspark_block_size": 7},
                "eagle3": {**llama, "architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1,
                           "draft_vocab_size": 1024, "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 3]}},
                "eagle": {**llama, "num_hidden_layers": 1},
                "draft": llama,
                # What vLLM's DFlash and DSpark loaders read (models/qwen3_dflash.py, qwen3_dspark.py;
                # spec_decode/llm_base_proposer.py for the mask token): a one-layer Qwen3 draft.
                "dflash": {**qwen3, "architectures": ["DFlashDraftModel"], "block_size": 16,
                           "target_hidden_size": 1024, "draft_vocab_size": 4096,
                           "dflash_config": {"mask_token_id": 5, "target_layer_ids": [0, 1, 2], "causal": False}},
                "dspark": {**qwen3, "architectures": ["Qwen3DSparkModel"], "block_size": 7, "markov_rank": 16,
                           "enable_confidence_head": True, "target_hidden_size": 1024, "mask_token_id": 5,
                           "dspark_target_layer_ids": [0, 1, 2], "draft_vocab_size": 4096},
            }
            self._fakes = {}
            for name, config in configs.items():
                path = os.path.join(root, name)
                os.makedirs(path)
                with open(os.path.join(path, "config.json"), "w") as f:
                    json.dump(config, f)
                self._fakes[name] = path
        return self._fakes

    @staticmethod
    @contextlib.contextmanager
    def arctic_inference(method):
        """For suffix: vLLM's presence check for the arctic_inference package answers yes. The package is an sdist
        with CUDA custom ops that does not build here (docs/engines-contract.md); _validate_suffix_decoding only
        asks whether it is importable before checking the suffix_decoding_* values and defaulting k, which is what
        the contract holds the rendering to. The engine image must ship it."""
        from vllm.config import speculative

        original = speculative.has_arctic_inference
        if method == "suffix":
            speculative.has_arctic_inference = lambda: True
        try:
            yield
        finally:
            speculative.has_arctic_inference = original

    def target(self, tp: int):
        from vllm.config import ModelConfig, ParallelConfig

        if tp not in self._targets:
            path = self.fakes()["target"]
            model = ModelConfig(model=path, tokenizer=path, skip_tokenizer_init=True)
            self._targets[tp] = (model, ParallelConfig(tensor_parallel_size=tp))
        return self._targets[tp]

    def full(self, raw: dict, ns) -> dict:
        """The real SpeculativeConfig, as `vllm serve` builds it after loading the target's config."""
        from vllm.config import SpeculativeConfig

        fakes = self.fakes()
        kind = {"eagle3": "eagle3", "eagle": "eagle", "draft_model": "draft", "mtp": "target", "dflash": "dflash",
                "dspark": "dspark"}
        kwargs = dict(raw)
        names = {fakes["target"]: ns.model_tag}
        if kwargs.get("model") is not None:
            fake = fakes.get(kind.get(kwargs.get("method"), "draft"))
            names[fake] = kwargs["model"]
            kwargs["model"] = fake
        try:
            model, parallel = self.target(ns.tensor_parallel_size)
            with contextlib.redirect_stdout(sys.stderr), self.arctic_inference(kwargs.get("method")):
                config = SpeculativeConfig(**kwargs, target_model_config=model, target_parallel_config=parallel)
            return {"ok": {**self.summary(config, names), "runner": self.runner(config)}}
        except Exception as exc:  # noqa: BLE001
            return {"error": short_error(exc)}


# --------------------------------------------------------------------------------------------------
# SGLang


class Sglang:
    def __init__(self):
        import msgspec
        from sglang.srt.server_args import prepare_server_args
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        self.prepare = prepare_server_args
        self.algorithms = SpeculativeAlgorithm
        self.asdict = msgspec.structs.asdict
        self.baseline = jsonable(self.asdict(self.prepare(["--model-path", "/model"])))

    def parse(self, args: list[str]):
        return self.prepare(args)

    def check(self, case: dict) -> dict:
        argv = case["argv"]
        if argv[:3] != SGLANG_PREFIX:
            return {"status": "error", "error": f"not a `python3 -m sglang.launch_server` command line: {argv[:3]}"}
        stderr = io.StringIO()
        try:
            with contextlib.redirect_stderr(stderr):
                server_args = self.parse(argv[3:])
        except SystemExit as exc:
            return {"status": "exit", "code": exc.code, "stderr": stderr.getvalue()[-800:]}
        except Exception as exc:  # noqa: BLE001 - e.g. --config FILE that cannot be read: the launcher crashes
            return {"status": "raised", "error": short_error(exc)}
        args = jsonable(self.asdict(server_args))
        out = {"status": "ok", "args": args,
               "changed": sorted(k for k, v in args.items() if self.baseline.get(k) != v)}
        try:
            out["algorithm"] = {"ok": self.algorithms.from_string(server_args.speculative_algorithm).name}
        except Exception as exc:  # noqa: BLE001
            out["algorithm"] = {"error": short_error(exc)}
        if server_args.speculative_algorithm in self.BLOCK_HANDLERS:
            out["resolved"] = self.resolve(argv[3:], server_args.speculative_algorithm)
        return out

    # The block drafters' handlers of SGLang's speculative hook (arg_groups/speculative_hook.py), which set the
    # steps, topk and verified tokens from the block size after parsing.
    BLOCK_HANDLERS = {"DFLASH": "_handle_dflash", "DSPARK": "_handle_dspark"}
    RESOLVED = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens",
                "speculative_dflash_block_size", "speculative_dspark_block_size", "speculative_draft_model_path")

    def resolve(self, args: list[str], algorithm: str) -> dict:
        """What the algorithm's own handler resolves, on CUDA as in the pod (the handlers refuse other devices).
        A handler that must read the draft's config to find the block size imports SGLang's config registry,
        which needs torchvision, absent from this environment: that is reported as the error it is."""
        from sglang.srt.arg_groups import speculative_hook
        from sglang.srt.arg_groups.model_override_base import resolved_view

        try:
            with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(sys.stderr):
                server_args = self.parse([*args, "--device", "cuda"])
                getattr(speculative_hook, self.BLOCK_HANDLERS[algorithm])(server_args)
            view = resolved_view(server_args)
            return {"ok": {name: jsonable(getattr(view, name)) for name in self.RESOLVED}}
        except Exception as exc:  # noqa: BLE001
            return {"error": short_error(exc)}


# --------------------------------------------------------------------------------------------------
# Flag tables


# argparse action classes -> the kind the operator's table-built parser re-creates.
ACTION_KINDS = {
    "_StoreAction": "store", "_StoreTrueAction": "store_true", "_StoreFalseAction": "store_false",
    "_StoreConstAction": "store_const", "_AppendAction": "append", "_AppendConstAction": "append_const",
    "_CountAction": "count", "_HelpAction": "help", "_VersionAction": "version",
    "BooleanOptionalAction": "boolean_optional", "EnableDisableAction": "boolean_optional",
    "_ExtendAction": "extend",
}


def type_name(kind) -> str | None:
    """A stable name for an argparse `type` callable (None means str)."""
    if kind is None:
        return None
    if kind in (int, float, str):
        return kind.__name__
    name = getattr(kind, "__qualname__", None) or type(kind).__name__
    module = getattr(kind, "__module__", "") or ""
    # Closures made by factories (vLLM's optional_type(int), parse_type(json.loads), ...): record the
    # factory and what it wraps, which is what decides the accepted values.
    closure = getattr(kind, "__closure__", None) or ()
    wrapped = []
    for cell in closure:
        try:
            inner = cell.cell_contents
        except ValueError:
            continue
        if callable(inner) and not isinstance(inner, type) or inner in (int, float, str, bool):
            wrapped.append(getattr(inner, "__qualname__", repr(inner)))
        elif isinstance(inner, type):
            wrapped.append(inner.__qualname__)
    suffix = f"[{','.join(sorted(set(wrapped)))}]" if wrapped else ""
    return f"{module.split('.')[0]}:{name}{suffix}"


def describe_action(action, option_strings: list[str]) -> dict:
    """One action; `option_strings` are every spelling the parser matches (hidden ones included)."""
    kind = ACTION_KINDS.get(type(action).__name__, "custom:" + type(action).__name__)
    nargs = action.nargs
    if nargs is not None and not isinstance(nargs, int):
        nargs = str(nargs)
    choices = None
    if action.choices is not None:
        try:
            choices = sorted(str(c) for c in action.choices)
        except TypeError:
            choices = [repr(action.choices)]
    # Spellings that set a boolean to False: argparse's --no-x, vLLM's --disable-x for --enable-x.
    negative = sorted(getattr(action, "negative_option_strings", None)
                      or [o for o in option_strings if o.startswith("--no-")]) if kind == "boolean_optional" else []
    default = action.default
    plain = isinstance(default, (type(None), bool, int, float, str)) or (
        isinstance(default, (list, dict)) and len(json.dumps(jsonable(default))) < 200)
    return {
        "flags": option_strings,
        "negative_flags": negative,
        "dest": action.dest,
        "action": kind,
        "nargs": nargs,
        "type": type_name(action.type),
        "choices": choices,
        "const": jsonable(action.const) if isinstance(action.const, (type(None), bool, int, float, str)) else repr(action.const),
        # Dataclass-valued defaults (vLLM's config groups) are not needed by anyone and not stable text.
        "default": jsonable(default) if plain else None,
        "required": bool(action.required),
    }


def describe_parser(parser) -> dict:
    spellings: dict[int, list[str]] = {}
    for option, action in parser._option_string_actions.items():
        spellings.setdefault(id(action), []).append(option)
    options, positionals = [], []
    for action in parser._actions:
        if action.option_strings:
            # Declared order first (the help's spelling), then hidden aliases.
            names = list(dict.fromkeys([*action.option_strings, *sorted(spellings.get(id(action), []))]))
            options.append(describe_action(action, names))
        else:
            positionals.append(describe_action(action, []))
    return {
        "prog": parser.prog,
        "allow_abbrev": parser.allow_abbrev,
        "prefix_chars": parser.prefix_chars,
        "class": type(parser).__name__,
        "positionals": positionals,
        "options": sorted(options, key=lambda o: o["flags"]),
    }


def vllm_table() -> dict:
    from importlib.metadata import version

    from vllm.reasoning import ReasoningParserManager
    from vllm.tool_parsers import ToolParserManager

    import dataclasses
    import typing

    from vllm.config import SpeculativeConfig

    engine = Vllm()
    names = lambda manager, eager: sorted(set(getattr(manager, eager)) | set(manager.lazy_parsers))  # noqa: E731
    method_hint = typing.get_type_hints(SpeculativeConfig)["method"]
    methods = sorted(a for arg in typing.get_args(method_hint) for a in typing.get_args(arg) if isinstance(a, str))
    return {"engine": "vllm", "version": version("vllm"), "parser": describe_parser(engine.parser),
            "registries": {"tool_call_parser": names(ToolParserManager, "tool_parsers"),
                           "reasoning_parser": names(ReasoningParserManager, "reasoning_parsers")},
            # --speculative-config JSON: SpeculativeConfig's method literal and its init fields (extra=forbid).
            "speculative_config": {"methods": methods,
                                   "fields": sorted(f.name for f in dataclasses.fields(SpeculativeConfig) if f.init)}}


def sglang_table() -> dict:
    import argparse
    from importlib.metadata import version

    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang serve")  # as prepare_server_args builds it
    ServerArgs.add_cli_args(parser)
    described = describe_parser(parser)
    by_dest = {o["dest"]: o for o in described["options"]}
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    registries = {dest: by_dest[dest]["choices"] for dest in ("tool_call_parser", "reasoning_parser")
                  if dest in by_dest and by_dest[dest]["choices"]}
    # --speculative-algorithm is a free string checked by SpeculativeAlgorithm.from_string after parsing.
    from sglang.srt.speculative.spec_registry import _RESERVED_ALIASES

    algorithms = sorted(member.name for member in SpeculativeAlgorithm if member.name != "NONE")
    aliases = {alias: SpeculativeAlgorithm.from_string(alias).name for alias in sorted(_RESERVED_ALIASES)}
    return {"engine": "sglang", "version": version("sglang"), "parser": described, "registries": registries,
            # Matched case-insensitively by SpeculativeAlgorithm.from_string; aliases resolve to a member.
            "speculative_algorithms": {"members": algorithms, "aliases": aliases}}


TABLES = {"vllm": vllm_table, "sglang": sglang_table}


ENGINES = {"vllm": Vllm, "sglang": Sglang}


def serve(engine_name: str, out) -> None:
    engine = ENGINES[engine_name]()
    out.write(json.dumps({"ready": engine_name}) + "\n")
    out.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        results = []
        for case in json.loads(line):
            started = time.monotonic()
            try:
                result = engine.check(case)
            except Exception as exc:  # noqa: BLE001 - a crash of the harness is reported, not fatal
                result = {"status": "error", "error": short_error(exc), "traceback": traceback.format_exc()}
            results.append({"id": case.get("id"), **result, "seconds": round(time.monotonic() - started, 3)})
        out.write(json.dumps(results) + "\n")
        out.flush()


def main() -> None:
    mode, engine_name, *args = sys.argv[1:]
    # Engines log to stdout; keep the real stdout for the protocol and send everything else to stderr.
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    if mode == "serve":
        try:
            serve(engine_name, out)
        finally:
            out.flush()
            for path in list(FAKE_ROOTS):
                shutil.rmtree(path, ignore_errors=True)
        os._exit(0)  # skip torch's slow interpreter teardown; nothing else to flush
    elif mode == "table":
        out.write(json.dumps(TABLES[engine_name](), indent=1, sort_keys=True) + "\n")
        out.flush()
        os._exit(0)
    elif mode == "exit":
        ENGINES[engine_name]().parse(args)  # SystemExit from the parser propagates: its status is ours
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
