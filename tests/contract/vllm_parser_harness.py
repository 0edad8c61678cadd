"""vLLM's side of the engine-parser harness (engine_parsers.py): `vllm serve`'s own parser and
validator, the speculative config it merges, and the real SpeculativeConfig against fake checkpoints."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import tempfile

from parser_harness_common import FAKE_ROOTS, VLLM_PREFIX, jsonable, short_error



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
        --spec-* shorthands into --speculative-config), field-checked with __post_init__ skipped, except for
        suffix decoding: it needs no model, and its __post_init__ is where vLLM defaults k to the tree depth and
        checks the ranges (config/speculative.py 1333-1334, 1727-1739), so it runs in full. arctic-inference is
        not in the contract environment; __post_init__ only checks that it imports before it does both."""
        import copy
        from types import SimpleNamespace

        import vllm.config.speculative as speculative_module
        from vllm.config import SpeculativeConfig
        from vllm.engine.arg_utils import EngineArgs

        original, has_arctic = SpeculativeConfig.__post_init__, speculative_module.has_arctic_inference
        SpeculativeConfig.__post_init__ = lambda self: original(self) if self.method == "suffix" else None
        speculative_module.has_arctic_inference = lambda: True
        try:
            # The real method on just the attributes it reads (EngineArgs() itself resolves the model).
            holder = SimpleNamespace(spec_method=ns.spec_method, spec_model=ns.spec_model,
                                     spec_tokens=ns.spec_tokens, speculative_config=copy.deepcopy(ns.speculative_config))
            config = EngineArgs.create_speculative_config(holder, None, None)
            return None if config is None else {"ok": Vllm.summary(config)}
        except Exception as exc:  # noqa: BLE001 - the refusal is the result
            return {"error": short_error(exc)}
        finally:
            SpeculativeConfig.__post_init__, speculative_module.has_arctic_inference = original, has_arctic

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
