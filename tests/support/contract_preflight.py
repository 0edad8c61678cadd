"""The probe that asks the real vLLM and SGLang config code what they make of a checkpoint (the contract tier)."""
from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import threading
from pathlib import Path

START_TIMEOUT = 240.0
REQUEST_TIMEOUT = 300.0

PROBE = r'''
import json, os, sys, traceback
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")
from types import SimpleNamespace as NS

real_stdout = sys.stdout
sys.stdout = sys.stderr  # engine logging never mixes with the answers


def stub_missing_packages():
    """SGLang's config package imports torchvision/dill/gguf/compressed_tensors at module level; the
    engine-contract environment does not ship them. transformers records them as absent first."""
    import importlib.abc, importlib.machinery, pickle, types
    from unittest import mock
    import transformers.utils.import_utils  # noqa: F401
    dill = types.ModuleType("dill")
    dill.__dict__.update({k: v for k, v in vars(pickle).items() if not k.startswith("__")})
    dill.extend = lambda use_dill=True: None
    dill.__spec__ = importlib.machinery.ModuleSpec("dill", None)
    sys.modules.setdefault("dill", dill)
    stubbed = {"torchvision", "gguf", "compressed_tensors"}

    class Stub(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, name, path, target=None):
            if name.split(".")[0] in stubbed:
                return importlib.machinery.ModuleSpec(name, self, is_package=True)
        def create_module(self, spec):
            m = mock.MagicMock(name=spec.name); m.__path__ = []; m.__spec__ = spec; m.__name__ = spec.name
            return m
        def exec_module(self, module):
            pass
    sys.meta_path.append(Stub())


def jsonable(v):
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    return repr(v)


class Vllm:
    def __init__(self):
        import torch
        from vllm.config import ModelConfig, ParallelConfig, SpeculativeConfig
        self.torch = torch
        self.ModelConfig, self.ParallelConfig, self.SpeculativeConfig = ModelConfig, ParallelConfig, SpeculativeConfig
        self.targets = {}
        self.dist = False

    def target(self, path):
        if path not in self.targets:
            self.targets[path] = self.ModelConfig(model=path, tokenizer=path, skip_tokenizer_init=True, dtype="float32")
        return self.targets[path]

    def spec(self, target, drafter, method):
        return self.SpeculativeConfig(method=method, model=drafter, num_speculative_tokens=3,
                                      target_model_config=self.target(target),
                                      target_parallel_config=self.ParallelConfig())

    @staticmethod
    def aux(spec_config, runner):
        if runner == "v1":
            from vllm.v1.worker.gpu_model_runner import GPUModelRunner
            return GPUModelRunner._get_eagle3_aux_layers_from_config(NS(speculative_config=spec_config))
        from vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils import get_eagle3_aux_layers_from_config
        return get_eagle3_aux_layers_from_config(spec_config)

    @staticmethod
    def kept(layer_ids, num_layers):
        """What the target keeps: the ids, else its default, through _set_aux_hidden_state_layers."""
        from vllm.model_executor.models.interfaces import EagleModelMixin, SupportsEagle3
        if not layer_ids:
            layer_ids = SupportsEagle3.get_eagle3_default_aux_hidden_state_layers(NS(model=NS(layers=[0] * num_layers)))
        holder = type("Holder", (EagleModelMixin,), {})()
        holder._set_aux_hidden_state_layers(tuple(layer_ids))
        return list(holder.aux_hidden_state_layers)

    def speculative(self, target, drafter, method="eagle3"):
        sc = self.spec(target, drafter, method)
        hf = sc.draft_model_config.hf_config
        n = self.target(target).get_total_num_hidden_layers()
        out = {"architectures": sc.draft_model_config.architectures, "hf_class": type(hf).__name__,
               "target_layers": n, "target_vocab": self.target(target).get_vocab_size()}
        for key in ("draft_vocab_size", "vocab_size", "hidden_size", "target_hidden_size",
                    "eagle_aux_hidden_state_layer_ids", "eagle_config", "num_aux_hidden_states"):
            out[key] = jsonable(getattr(hf, key, None))
        for runner in ("v1", "v2"):
            ids = self.aux(sc, runner)
            out[runner] = jsonable(ids)
            out["kept_" + runner] = self.kept(ids, n)
        return out

    def load(self, target, drafter, method="eagle3"):
        """The real Eagle3LlamaForCausalLM built from the SpeculativeConfig and fed the checkpoint."""
        from vllm.config import DeviceConfig, VllmConfig, set_current_vllm_config
        from vllm.distributed import init_distributed_environment, initialize_model_parallel
        from vllm.model_executor.model_loader.weight_utils import safetensors_weights_iterator
        from vllm.model_executor.models.llama_eagle3 import Eagle3LlamaForCausalLM
        import glob
        sc = self.spec(target, drafter, method)
        vc = VllmConfig(model_config=self.target(target), speculative_config=sc, device_config=DeviceConfig("cpu"))
        torch = self.torch
        with set_current_vllm_config(vc):
            if not self.dist:
                init_distributed_environment(1, 0, "tcp://127.0.0.1:%d" % int(os.environ.get("PROBE_PORT", "29561")),
                                             0, backend="gloo")
                initialize_model_parallel(1, 1)
                self.dist = True
            with torch.device("cpu"):
                model = Eagle3LlamaForCausalLM(vllm_config=vc)
            files = sorted(glob.glob(os.path.join(drafter, "*.safetensors")))
            model.load_weights(safetensors_weights_iterator(files, use_tqdm_on_load=False))
        d2t = model.draft_id_to_target_id
        out = {"fc": list(model.model.fc.weight.shape), "lm_head": list(model.lm_head.weight.shape),
               "d2t": None if d2t is None else list(d2t.shape)}
        if d2t is not None:
            targets = (torch.arange(d2t.shape[0]) + d2t.data).tolist()
            out.update(d2t_nonzero=int((d2t.data != 0).sum()), targets_head=targets[:8])
        return out

    def capture(self, config, num_layers, runner):
        """The runners' layer-id reading on a draft hf_config with exactly these attributes."""
        from transformers import PretrainedConfig
        hf = PretrainedConfig(**config)
        sc = NS(draft_model_config=NS(hf_config=hf))
        ids = self.aux(sc, runner)
        return {"ids": jsonable(ids), "kept": self.kept(ids, num_layers)}

    def header(self, path):
        from safetensors import safe_open
        with safe_open(path, "pt") as f:
            return {"metadata": f.metadata(),
                    "tensors": {k: [str(f.get_slice(k).get_dtype()), list(f.get_slice(k).get_shape())] for k in f.keys()}}

    def registry(self):
        from vllm.model_executor.models.registry import _SPECULATIVE_DECODING_MODELS
        return sorted(_SPECULATIVE_DECODING_MODELS)


SGLANG_MODULES = {
    "LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3_moe", "Glm4MoeForCausalLM": "glm4_moe", "MiniMaxM2ForCausalLM": "minimax_m2",
    "DeepseekV2ForCausalLM": "deepseek_v2", "DeepseekV3ForCausalLM": "deepseek_v2",
    "DeepseekV32ForCausalLM": "deepseek_v2", "KimiK25ForConditionalGeneration": "kimi_k25",
    "Glm4MoeLiteForCausalLM": "glm4_moe_lite", "GptOssForCausalLM": "gpt_oss",
}


class Sglang:
    def __init__(self):
        stub_missing_packages()
        from sglang.srt.configs.model_config import ModelConfig
        from sglang.srt.server_args import prepare_server_args
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
        from sglang.srt.utils.hf_transformers_utils import get_config
        self.ModelConfig, self.prepare, self.Algorithm, self.get_config = (ModelConfig, prepare_server_args,
                                                                           SpeculativeAlgorithm, get_config)

    @staticmethod
    def target_class(arch):
        import importlib
        module = importlib.import_module("sglang.srt.models." + SGLANG_MODULES[arch])
        return getattr(module, arch)

    def layers_to_capture(self, arch, layer_ids, num_layers):
        cls = self.target_class(arch)

        class Inner:
            def __init__(self):
                self.layers_to_capture = []
                self.layers = [NS() for _ in range(num_layers)]
            def set_eagle3_layers_to_capture(self, ids):
                self.layers_to_capture = list(ids)

        def fake():
            config = NS(num_hidden_layers=num_layers, text_config=NS(num_hidden_layers=num_layers))
            return NS(pp_group=NS(is_last_rank=True), config=config, model=Inner(), capture_aux_hidden_states=False)

        from sglang.srt.runtime_context import get_parallel
        with get_parallel().override(pp_group=NS(is_last_rank=True)):  # classes that ask the runtime context
            return self._capture(cls, arch, fake, layer_ids)

    def _capture(self, cls, arch, fake, layer_ids):
        me = fake()
        if arch == "KimiK25ForConditionalGeneration":  # its language_model is a DeepseekV3ForCausalLM
            inner = fake()
            deepseek = self.target_class("DeepseekV3ForCausalLM")
            me.language_model = NS(set_eagle3_layers_to_capture=lambda ids: deepseek.set_eagle3_layers_to_capture(inner, ids))
            cls.set_eagle3_layers_to_capture(me, layer_ids)
            return list(inner.model.layers_to_capture)
        cls.set_eagle3_layers_to_capture(me, layer_ids)
        return list(me.model.layers_to_capture)

    def config(self, target, drafter, algorithm="EAGLE3"):
        import sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state as sah
        from sglang.srt.speculative.eagle_utils import get_draft_input_from_target_hidden_dim
        hf = self.get_config(drafter, trust_remote_code=False)  # refuses what SGLang cannot read
        args = self.prepare(["--model-path", target, "--speculative-algorithm", algorithm,
                             "--speculative-draft-model-path", drafter, "--device", "cpu"])
        sah.get_spec = lambda: NS(speculative_draft_model_path=args.speculative_draft_model_path,
                                  speculative_draft_model_revision=None)
        sah.get_exec = lambda: NS(features=NS(aux_hidden_state_capture=None))
        target_config = self.ModelConfig.from_server_args(args)
        draft_config = self.ModelConfig.from_server_args(args, model_path=drafter, is_draft_model=True)
        algo = self.Algorithm.from_string(algorithm)
        aux = sah.resolve_spec_aux_hidden_state_config(server_args=args, model_config=target_config,
                                                       spec_algorithm=algo, is_draft_worker=False)
        arch = target_config.hf_config.architectures[0]
        n = target_config.hf_text_config.num_hidden_layers
        ids = aux.eagle_aux_hidden_state_layer_ids
        fc_in = get_draft_input_from_target_hidden_dim(NS(model_config=draft_config, spec_algorithm=algo))
        return {"architectures": draft_config.hf_config.architectures, "hf_class": type(hf).__name__,
                "draft_vocab_size": getattr(draft_config.hf_config, "draft_vocab_size", None),
                "vocab_size": draft_config.vocab_size, "eagle_use_aux": aux.eagle_use_aux_hidden_state,
                "eagle_aux_ids": jsonable(ids), "target_architecture": arch, "target_layers": n,
                "layers_to_capture": self.layers_to_capture(arch, ids, n), "fc_input": fc_in}

    def load(self, drafter):
        """LlamaForCausalLMEagle3.load_weights' d2t/t2d handling, on SGLang's own weights iterator."""
        import glob
        import torch
        from sglang.srt.model_loader.weight_utils import safetensors_weights_iterator
        from sglang.srt.models.llama_eagle3 import LlamaForCausalLMEagle3
        me = NS(named_parameters=lambda: iter(()), hot_token_id=None)
        files = sorted(glob.glob(os.path.join(drafter, "*.safetensors")))
        LlamaForCausalLMEagle3.load_weights(me, safetensors_weights_iterator(files))
        hot = me.hot_token_id
        return {"hot_token_id": None if hot is None else list(hot.shape),
                "targets_head": None if hot is None else hot[:8].tolist()}

    def capture(self, arch, layer_ids, num_layers):
        return self.layers_to_capture(arch, layer_ids, num_layers)

    def entry_classes(self):
        import importlib
        out = {}
        for name in ("llama_eagle3", "kimi_k25_eagle3", "llama_eagle", "qwen2_eagle", "mistral_eagle",
                     "mistral_large_3_eagle"):
            module = importlib.import_module("sglang.srt.models." + name)
            entry = module.EntryClass if isinstance(module.EntryClass, list) else [module.EntryClass]
            out[name] = [c.__name__ for c in entry]
        return out


def main(engine):
    impl = Vllm() if engine == "vllm" else Sglang()
    real_stdout.write(json.dumps({"ready": engine}) + "\n"); real_stdout.flush()
    for line in sys.stdin:
        request = json.loads(line)
        try:
            answer = {"ok": getattr(impl, request["op"])(**request.get("args", {}))}
        except Exception as exc:  # the refusal is the answer
            answer = {"error": ("%s: %s" % (type(exc).__name__, exc))[:3000],
                      "where": traceback.format_exc().splitlines()[-6:]}
        real_stdout.write(json.dumps(answer) + "\n"); real_stdout.flush()


main(sys.argv[1])
'''


class Probe:
    """PROBE under the engine python, one per engine; ask() sends an op and waits for its answer."""

    def __init__(self, python: str, engine: str, script: Path):
        self.engine = engine
        env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1",
               "PROBE_PORT": str(29500 + os.getpid() % 400)}
        self.proc = subprocess.Popen([python, str(script), engine], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.stderr: list[str] = []
        threading.Thread(target=self._pump, args=(self.proc.stdout, self.lines.put), daemon=True).start()
        threading.Thread(target=self._pump, args=(self.proc.stderr, self._keep), daemon=True).start()
        assert self._read(START_TIMEOUT) == {"ready": engine}

    @staticmethod
    def _pump(stream, sink) -> None:
        for line in stream:
            sink(line)
        sink(None)

    def _keep(self, line: str | None) -> None:
        if line is not None:
            self.stderr.append(line)
            del self.stderr[:-200]

    def _read(self, timeout: float):
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"{self.engine} probe: no answer in {timeout:.0f}s\n" + "".join(self.stderr[-40:])) from None
        if line is None:
            raise AssertionError(f"{self.engine} probe exited ({self.proc.wait()})\n" + "".join(self.stderr[-60:]))
        return json.loads(line)

    def ask(self, op: str, **args) -> dict:
        self.proc.stdin.write(json.dumps({"op": op, "args": args}) + "\n")
        self.proc.stdin.flush()
        return self._read(REQUEST_TIMEOUT)

    def ok(self, op: str, **args):
        answer = self.ask(op, **args)
        assert "ok" in answer, f"{self.engine} {op} {args}: {answer}"
        return answer["ok"]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@contextlib.contextmanager


def running_probes(python: str, script: Path, text: str):
    """``text`` written to ``script`` and run as one probe per engine, closed on the way out."""
    script.write_text(text)
    started = {}
    try:
        for engine in ("vllm", "sglang"):
            started[engine] = Probe(python, engine, script)
        yield started
    finally:
        for probe in started.values():
            probe.close()
