"""Contract tier: the preflight's model of vLLM 0.33.0 and SGLang 0.5.23 against the engines' own code.

The same tiny checkpoints as tests/unit/preflight/test_preflight.py (drafter_testbed/tiny_checkpoints.py: a 4-layer, hidden-64 Llama
target; SpecForge and speculators EAGLE-3 drafters) are read by the real engines on CPU, in a helper
process per engine (PROBE below, run under DRAFTER_ENGINE_PYTHON):

- vLLM: `SpeculativeConfig` built against the target's `ModelConfig` (what `vllm serve` does before any
  weight is loaded); the real `Eagle3LlamaForCausalLM` constructed from it and `load_weights` fed the
  checkpoint through vLLM's own `safetensors_weights_iterator`; the layer ids each model runner reads
  (v1 `GPUModelRunner._get_eagle3_aux_layers_from_config`, v2 `eagle3_utils.get_eagle3_aux_layers_from_config`)
  and what `EagleModelMixin._set_aux_hidden_state_layers` keeps.
- SGLang: `get_config` on the drafter, the draft `ModelConfig`, the real
  `resolve_spec_aux_hidden_state_config` (its runtime-context accessors pointed at the parsed server
  args), `get_draft_input_from_target_hidden_dim`, the target class's `set_eagle3_layers_to_capture`, and
  `LlamaForCausalLMEagle3.load_weights` (on a parameterless stand-in: only its d2t/t2d handling runs).

Where the engine refuses a broken copy, the preflight must refuse it too; where the engine accepts it
silently (a missing d2t, the other engine's layer-id convention), the preflight must be what catches it.

The engine environment lacks three packages SGLang's config package imports at module level
(torchvision, dill, gguf/compressed_tensors for the quantization registry); the probe stubs them
after transformers has recorded them as absent. No code that uses them runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drafter_operator.preflight import engines as eng
from drafter_operator.preflight import preflight
from drafter_testbed import tiny_checkpoints as tiny
from drafter_operator.preflight.safetensors import read_header

pytestmark = pytest.mark.contract

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


@pytest.fixture(scope="module")
def probes(engine_python, tmp_path_factory):
    with running_probes(engine_python, tmp_path_factory.mktemp("probe") / "preflight_probe.py", PROBE) as started:
        yield started


@pytest.fixture(scope="module")
def ck(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("ckpt")
    target = tiny.make_target(root / "target")
    t = str(target)
    paths = {
        "target": target,
        "target128": tiny.make_target(root / "target128", hidden=128),
        "specforge": tiny.make_specforge(root / "specforge"),
        "specforge_both": tiny.make_specforge(root / "specforge_both",
                                              eagle_aux_hidden_state_layer_ids=list(tiny.TRAINED_POSITIONS)),
        "speculators": tiny.make_speculators(root / "speculators", verifier=t),
        "no_d2t": tiny.make_specforge(root / "no_d2t", drop=("d2t",),
                                      eagle_aux_hidden_state_layer_ids=list(tiny.TRAINED_POSITIONS)),
        "speculators_no_d2t": tiny.make_speculators(root / "speculators_no_d2t", verifier=t, drop=("d2t",)),
        "eagle1": tiny.make_eagle1(root / "eagle1"),
        "sglang_out_of_range": tiny.make_specforge(root / "sglang_oor", layer_ids=[2, 3, 4]),
        "vllm_out_of_range": tiny.make_speculators(root / "vllm_oor", verifier=t, layer_ids=[3, 5, 6]),
        "vllm_ids_on_sglang": tiny.make_specforge(root / "vllm_ids_on_sglang", layer_ids=[0, 1, 2]),
        "sglang_ids_on_vllm": tiny.make_specforge(root / "sglang_ids_on_vllm", eagle_aux_hidden_state_layer_ids=[0, 1, 2]),
        "vocab5000": tiny.make_specforge(root / "vocab5000", vocab=5000,
                                         eagle_aux_hidden_state_layer_ids=list(tiny.TRAINED_POSITIONS)),
    }
    broken = {"fc_2h": ("fc.weight", ("BF16", (tiny.HIDDEN, 2 * tiny.HIDDEN), None)),
              "lm_head_512": ("lm_head.weight", ("BF16", (512, tiny.HIDDEN), None)),
              "d2t_512": ("d2t", tiny.mapping_tensors(draft_vocab=512)["d2t"])}
    for name, (tensor, value) in broken.items():
        tensors = tiny.eagle3_tensors()
        tensors[tensor] = value
        paths[name] = tiny.make_specforge(root / name, tensors=tensors,
                                          eagle_aux_hidden_state_layer_ids=list(tiny.TRAINED_POSITIONS))
    return {k: str(v) for k, v in paths.items()}


def verdict(ck, drafter, engine, target="target", **kw):
    return preflight(ck[drafter], ck[target], engine, kw.pop("method", "eagle3"), **kw)


def problems(v) -> set[str]:
    return {f.reason for f in v.problems}


# ---------------------------------------------------------------------------------------------------
# The good checkpoints: the engines read what the preflight read


def test_our_safetensors_files_are_what_the_safetensors_package_reads(probes, ck):
    for name in ("specforge", "speculators", "target"):
        path = str(Path(ck[name]) / "model.safetensors")
        real = probes["vllm"].ok("header", path=path)
        ours, _ = read_header(path)
        assert real["tensors"] == {n: [t.dtype, list(t.shape)] for n, t in ours.items()}
        assert real["metadata"] == {"format": "pt"}


@pytest.mark.parametrize("name", ["specforge_both", "speculators"])
def test_good_checkpoints_on_vllm(probes, ck, name):
    v = verdict(ck, name, "vllm")
    assert v.ok, [f.line() for f in v.problems]
    spec = probes["vllm"].ok("speculative", target=ck["target"], drafter=ck[name])
    loaded = probes["vllm"].ok("load", target=ck["target"], drafter=ck[name])
    assert spec["draft_vocab_size"] == v.facts["draft_vocab_size"] == tiny.DRAFT_VOCAB
    assert spec["target_vocab"] == v.facts["target_vocab_size"]
    assert spec["kept_v2"] == v.facts["aux_layers"]["engine_captured"] == list(tiny.TRAINED_POSITIONS)
    assert loaded["fc"] == v.facts["fc_expected"] == [tiny.HIDDEN, 3 * tiny.HIDDEN]
    assert loaded["lm_head"] == [tiny.DRAFT_VOCAB, tiny.HIDDEN]
    assert loaded["d2t"] == [tiny.DRAFT_VOCAB]
    assert loaded["targets_head"] == tiny.draft_targets()[:8] == v.facts["d2t_targets_head"]


@pytest.mark.parametrize("name", ["specforge", "specforge_both"])
def test_good_checkpoints_on_sglang(probes, ck, name):
    v = verdict(ck, name, "sglang")
    assert v.ok, [f.line() for f in v.problems]
    config = probes["sglang"].ok("config", target=ck["target"], drafter=ck[name])
    assert config["architectures"] == ["LlamaForCausalLMEagle3"]
    assert config["eagle_aux_ids"] == v.facts["aux_layers"]["recorded_ids"] == [0, 1, 2]
    assert config["layers_to_capture"] == v.facts["aux_layers"]["engine_requested"] == [1, 2, 3]
    assert config["fc_input"] == v.facts["fc_expected"][1]
    assert config["draft_vocab_size"] == v.facts["draft_vocab_size"]
    loaded = probes["sglang"].ok("load", drafter=ck[name])
    assert loaded["hot_token_id"] == [tiny.DRAFT_VOCAB] and loaded["targets_head"] == tiny.draft_targets()[:8]


# ---------------------------------------------------------------------------------------------------
# Broken copies the engine itself refuses: the preflight refuses them too (in seconds, before the load)


def test_speculators_format_refused_by_sglang(probes, ck):
    answer = probes["sglang"].ask("config", target=ck["target"], drafter=ck["speculators"])
    assert "error" in answer and "model_type" in answer["error"]
    assert problems(verdict(ck, "speculators", "sglang")) == {"SpeculatorsFormatOnSglang"}


def test_eagle3_drafter_as_method_eagle_refused_by_vllm(probes, ck):
    answer = probes["vllm"].ask("speculative", target=ck["target"], drafter=ck["specforge_both"], method="eagle")
    assert "error" in answer and "EagleLlamaForCausalLMEagle3" in answer["error"]
    assert problems(verdict(ck, "specforge_both", "vllm", method="eagle")) == {"Eagle3DrafterAsEagle"}


def test_eagle1_drafter_as_eagle3_passes_vllm_config_then_fails_its_load(probes, ck):
    spec = probes["vllm"].ok("speculative", target=ck["target"], drafter=ck["eagle1"])
    assert spec["architectures"] == ["Eagle3LlamaForCausalLM"]  # renamed, accepted
    answer = probes["vllm"].ask("load", target=ck["target"], drafter=ck["eagle1"])
    assert "error" in answer  # only the (30-minute) weight load finds out
    for engine in ("vllm", "sglang"):
        assert problems(verdict(ck, "eagle1", engine)) == {"EagleDrafterAsEagle3"}


@pytest.mark.parametrize("name,reason", [("fc_2h", "FcShape"), ("lm_head_512", "LmHeadShape"),
                                         ("d2t_512", "DraftVocabMappingShape")])
def test_wrong_shapes_accepted_by_vllm_config_refused_by_its_load(probes, ck, name, reason):
    probes["vllm"].ok("speculative", target=ck["target"], drafter=ck[name])
    answer = probes["vllm"].ask("load", target=ck["target"], drafter=ck[name])
    assert "error" in answer and answer["error"].startswith("AssertionError"), answer  # a weight-shape assertion
    assert problems(verdict(ck, name, "vllm")) == {reason}


def test_fc_width_sglang_builds_is_not_the_checkpoints(probes, ck):
    config = probes["sglang"].ok("config", target=ck["target"], drafter=ck["fc_2h"])
    assert config["fc_input"] == 3 * tiny.HIDDEN != 2 * tiny.HIDDEN
    assert problems(verdict(ck, "fc_2h", "sglang")) == {"FcShape"}


# ---------------------------------------------------------------------------------------------------
# Broken copies the engines accept silently: the preflight is what catches them


def test_missing_d2t_is_loaded_as_the_identity_by_both_engines(probes, ck):
    for name in ("no_d2t", "speculators_no_d2t"):
        loaded = probes["vllm"].ok("load", target=ck["target"], drafter=ck[name])
        assert loaded["d2t_nonzero"] == 0 and loaded["targets_head"] == list(range(8))  # draft id i -> target id i
        assert problems(verdict(ck, name, "vllm")) == {"DraftVocabMappingMissing"}
    assert probes["sglang"].ok("load", drafter=ck["no_d2t"])["hot_token_id"] is None
    probes["sglang"].ok("config", target=ck["target"], drafter=ck["no_d2t"])
    assert problems(verdict(ck, "no_d2t", "sglang")) == {"DraftVocabMappingMissing"}


def test_short_d2t_is_taken_as_is_by_sglang(probes, ck):
    loaded = probes["sglang"].ok("load", drafter=ck["d2t_512"])
    assert loaded["hot_token_id"] == [512]  # a 1024-row head indexed through a 512-entry map
    assert problems(verdict(ck, "d2t_512", "sglang")) == {"DraftVocabMappingShape"}


def test_specforge_export_alone_on_vllm(probes, ck):
    spec = probes["vllm"].ok("speculative", target=ck["target"], drafter=ck["specforge"])
    assert spec["v2"] is None and spec["kept_v2"] == [1, 2]  # default (2, 2, 1): 2 states for a 3-state fc
    assert spec["v1"] == [0, 1, 2] and spec["kept_v1"] == [0, 1, 2]  # SGLang's ids read as positions
    v2 = verdict(ck, "specforge", "vllm")
    assert problems(v2) == {"AuxLayerCount"} and v2.facts["aux_layers"]["engine_captured"] == spec["kept_v2"]
    v1 = verdict(ck, "specforge", "vllm", vllm_runner="v1")
    assert problems(v1) == {"AuxLayerMismatch"} and v1.facts["aux_layers"]["engine_captured"] == spec["kept_v1"]


def test_other_engines_convention_is_accepted_silently(probes, ck):
    # vLLM ids (positions 0..2) written into eagle_config for SGLang: SGLang captures 1..3, no error.
    config = probes["sglang"].ok("config", target=ck["target"], drafter=ck["vllm_ids_on_sglang"])
    assert config["layers_to_capture"] == [1, 2, 3]
    v = verdict(ck, "vllm_ids_on_sglang", "sglang", trained_convention="vllm")
    assert problems(v) == {"AuxLayerMismatch"} and v.facts["aux_layers"]["engine_captured"] == [1, 2, 3]
    # SpecForge's ids copied unconverted to the top level for vLLM: vLLM captures 0..2, trained 1..3.
    spec = probes["vllm"].ok("speculative", target=ck["target"], drafter=ck["sglang_ids_on_vllm"])
    assert spec["v2"] == spec["v1"] == [0, 1, 2]
    loaded = probes["vllm"].ok("load", target=ck["target"], drafter=ck["sglang_ids_on_vllm"])
    assert loaded["fc"] == [tiny.HIDDEN, 3 * tiny.HIDDEN]
    v = verdict(ck, "sglang_ids_on_vllm", "vllm")
    assert problems(v) == {"AuxLayerMismatch"} and v.facts["aux_layers"]["trained_positions"] == [1, 2, 3]


def test_out_of_range_ids_pass_both_engines_config(probes, ck):
    config = probes["sglang"].ok("config", target=ck["target"], drafter=ck["sglang_out_of_range"])
    assert config["layers_to_capture"] == [3, 4, 5]  # layers 4 and 5 do not exist in a 4-layer target
    assert problems(verdict(ck, "sglang_out_of_range", "sglang")) == {"AuxLayerOutOfRange"}
    spec = probes["vllm"].ok("speculative", target=ck["target"], drafter=ck["vllm_out_of_range"])
    assert spec["v2"] == [3, 5, 6] and spec["target_layers"] == 4
    assert problems(verdict(ck, "vllm_out_of_range", "vllm")) == {"AuxLayerOutOfRange"}


def test_hidden_and_vocab_mismatches_pass_vllm_config_and_load(probes, ck):
    for name, target, reason in (("specforge_both", "target128", "HiddenSizeMismatch"),
                                 ("vocab5000", "target", "VocabSizeMismatch")):
        probes["vllm"].ok("speculative", target=ck[target], drafter=ck[name])
        probes["vllm"].ok("load", target=ck[target], drafter=ck[name])  # only the first forward would fail
        assert reason in problems(verdict(ck, name, "vllm", target=target))


# ---------------------------------------------------------------------------------------------------
# The preflight's tables and layer-id rules against the engines' code


def test_architecture_tables(probes):
    registry = set(probes["vllm"].ok("registry"))
    assert eng.VLLM_EAGLE3_ARCHITECTURES | eng.VLLM_EAGLE_ARCHITECTURES <= registry
    assert {a for a in registry if "Eagle3" in a} <= eng.VLLM_EAGLE3_ARCHITECTURES
    entry = probes["sglang"].ok("entry_classes")
    assert set(entry["llama_eagle3"] + entry["kimi_k25_eagle3"]) == eng.SGLANG_EAGLE3_ARCHITECTURES
    assert set(entry["llama_eagle"] + entry["qwen2_eagle"] + entry["mistral_eagle"]
               + entry["mistral_large_3_eagle"]) == eng.SGLANG_EAGLE_ARCHITECTURES


layer_lists = st.lists(st.integers(min_value=0, max_value=70), min_size=1, max_size=4)


@pytest.mark.parametrize("arch", sorted(eng.SGLANG_CAPTURE_RULES))
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(min_value=4, max_value=64), data=st.data())
def test_sglang_layer_rule_table(probes, arch, n, data):
    some = st.lists(st.integers(min_value=0, max_value=n + 2), min_size=1, max_size=4)
    ids = data.draw(st.one_of(st.none(), some, some.map(lambda x: [1] + x), some.map(lambda x: x + [n])))
    real = probes["sglang"].ok("capture", arch=arch, layer_ids=ids, num_layers=n)
    rule, known = eng.sglang_capture_rule(arch)
    assert known and real == eng.sglang_layers_to_capture(rule, ids, n)


ids_or_none = st.one_of(st.none(), st.just([]), layer_lists)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(top=ids_or_none, eagle=ids_or_none, eagle_layer_ids=ids_or_none, has_eagle_config=st.booleans(),
       n=st.integers(min_value=4, max_value=64), runner=st.sampled_from(["v1", "v2"]))
def test_vllm_layer_reading(probes, top, eagle, eagle_layer_ids, has_eagle_config, n, runner):
    config: dict = {}
    if top is not None:
        config["eagle_aux_hidden_state_layer_ids"] = top
    if has_eagle_config:
        config["eagle_config"] = {k: v for k, v in (("eagle_aux_hidden_state_layer_ids", eagle),
                                                     ("layer_ids", eagle_layer_ids)) if v is not None}
    real = probes["vllm"].ok("capture", config=config, num_layers=n, runner=runner)
    ours = eng.vllm_capture(config, n, runner)  # type: ignore[arg-type]
    assert (list(ours.layer_ids) if ours.layer_ids else None) == (real["ids"] or None)
    assert sorted(set(ours.requested)) == real["kept"]


def test_sglang_reads_only_eagle_config_ids(probes, ck, tmp_path):
    # A top-level list (what vLLM reads first) is invisible to SGLang: the default [2, N//2, N-3] applies.
    drafter = tiny.make_specforge(tmp_path / "top_only", config=tiny.specforge_config(
        eagle_aux_hidden_state_layer_ids=[1, 2, 3]) | {"eagle_config": {}})
    config = probes["sglang"].ok("config", target=ck["target"], drafter=str(drafter))
    assert config["eagle_aux_ids"] is None and config["layers_to_capture"] == [2, 2, 1]
    capture = eng.sglang_capture(json.loads((drafter / "config.json").read_text()), tiny.LAYERS, "LlamaForCausalLM")
    assert list(capture.requested) == config["layers_to_capture"]
