"""Contract tier: the preflight's DFlash, DSpark and MTP rules against vLLM 0.33.0's and SGLang 0.5.23's own
config code, on CPU.

Tiny DFlash/DSpark drafters (drafter_testbed/tiny_blocks.py: SpecForge's and speculators' layouts, valid and
broken one way each) for tiny.py's 4-layer Llama target are read by the real engines in a helper process
per engine (test_preflight_contract.py's PROBE, extended below with block-drafter ops):

- vLLM: `SpeculativeConfig(method=dflash|dspark)` against the target's `ModelConfig`; on the draft
  hf_config it builds, the layer ids the model runner reads (`get_eagle3_aux_layers_from_config`), each
  draft layer's causality (`qwen3_dflash._dflash_layer_causal`), the proposer's mask-token lookup
  (`SpecDecodeBaseProposer._init_parallel_drafting_params`), and for Qwen3DSparkModel the real
  `Qwen3DSparkModel.__init__` (its DFlash base's __init__ stubbed: it builds attention layers that
  need a GPU backend), which builds the Markov and confidence heads from the config.
  `SpeculativeConfig.hf_config_override` on a target config gives the MTP variant per model_type.
- SGLang: `get_config` on the drafter, then `parse_dflash_draft_config` + `resolve_target_layer_ids`
  (DFlash) or `parse_dspark_draft_config` + `resolve_runtime_config` (DSpark), as the model runner and the
  DSpark worker call them at startup.

Each case says what the engine does (ok, raises, or accepts silently what it then mis-serves) and what the
preflight says; where the engine raises, the preflight must refuse too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from drafter_operator.engines import sglang_loading, vllm_loading
from drafter_operator.preflight import preflight
from drafter_testbed import tiny_blocks as tb
from drafter_testbed import tiny_checkpoints as tiny
from tests.support.contract_preflight import PROBE, running_probes

pytestmark = pytest.mark.contract

BLOCK_OPS = r'''
class BlockVllm(Vllm):
    def block(self, target, drafter, method):
        from vllm.model_executor.models.qwen3_dflash import _dflash_layer_causal
        from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer
        from vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils import get_eagle3_aux_layers_from_config
        sc = self.SpeculativeConfig(method=method, model=drafter, num_speculative_tokens=3,
                                    target_model_config=self.target(target),
                                    target_parallel_config=self.ParallelConfig())
        hf = sc.draft_model_config.hf_config
        out = {"method": sc.method, "architectures": sc.draft_model_config.architectures,
               "model_type": getattr(hf, "model_type", None), "hf_class": type(hf).__name__,
               "aux": jsonable(get_eagle3_aux_layers_from_config(sc)),
               "causal": [_dflash_layer_causal(hf, i) for i in range(hf.num_hidden_layers)]}
        me = NS(draft_model_config=sc.draft_model_config, pass_hidden_states_to_model=False)
        try:
            SpecDecodeBaseProposer._init_parallel_drafting_params(me)
            out["mask"] = me.parallel_drafting_token_id
        except ValueError as exc:
            out["mask_error"] = str(exc)[:300]
        if sc.draft_model_config.architectures[0] in ("Qwen3DSparkModel", "Qwen3OmniDSparkModel"):
            out["heads"] = self.dspark_heads(hf)
        return out

    def dspark_heads(self, hf):
        """Qwen3DSparkModel.__init__ on this hf_config (its DFlash base stubbed): the heads it builds."""
        from unittest import mock
        from torch import nn
        from vllm.config import VllmConfig, set_current_vllm_config
        from vllm.model_executor.models import qwen3_dspark
        base = qwen3_dspark.Qwen3DSparkModel.__mro__[1]
        def base_init(module, *, vllm_config, start_layer_id=0, prefix=""):
            nn.Module.__init__(module)
            module.config, module.quant_config = hf, None
        with set_current_vllm_config(VllmConfig()):
            if not self.dist:
                from vllm.distributed import init_distributed_environment, initialize_model_parallel
                init_distributed_environment(1, 0, "tcp://127.0.0.1:%d" % int(os.environ.get("PROBE_PORT", "29561")),
                                             0, backend="gloo")
                initialize_model_parallel(1, 1)
                self.dist = True
            try:
                with mock.patch.object(base, "__init__", base_init):
                    model = qwen3_dspark.Qwen3DSparkModel(vllm_config=None, prefix="model")
            except AttributeError as exc:
                return {"error": str(exc)}
        return {"markov": type(model.markov_head).__name__, "confidence": model.confidence_head is not None}

    def mtp_variant(self, model_type, architecture):
        from typing import get_args
        from transformers import PretrainedConfig
        from vllm.config.speculative import MTPModelTypes
        hf = PretrainedConfig(architectures=[architecture], num_nextn_predict_layers=1, mtp_num_hidden_layers=1,
                              num_hidden_layers=4, hidden_size=64, vocab_size=4096)
        hf.model_type = model_type
        out = self.SpeculativeConfig.hf_config_override(hf)
        return {"model_type": out.model_type, "mtp": out.model_type in get_args(MTPModelTypes)}


class BlockSglang(Sglang):
    def block(self, target, drafter, method):
        from sglang.srt.speculative.dflash_utils import parse_dflash_draft_config
        from sglang.srt.speculative.dspark_components.dspark_config import (parse_dspark_draft_config,
                                                                           resolve_runtime_config)
        hf = self.get_config(drafter, trust_remote_code=False)
        target_hf = self.get_config(target, trust_remote_code=False)
        base = parse_dflash_draft_config(draft_hf_config=hf)
        ids = base.resolve_target_layer_ids(target_num_layers=target_hf.num_hidden_layers,
                                            draft_num_layers=base.require_num_layers())
        out = {"architectures": list(hf.architectures), "target_layer_ids": ids, "block_size": base.block_size,
               "mask_token_id": base.mask_token_id}
        if method == "dspark":
            parsed = parse_dspark_draft_config(draft_hf_config=hf)
            runtime = resolve_runtime_config(draft_hf_config=hf, speculative_num_draft_tokens=None,
                                             target_vocab_size=target_hf.vocab_size)
            out.update(gamma=runtime.gamma, mask_token_id=runtime.mask_token_id, markov_rank=parsed.markov_rank,
                       markov_head_type=parsed.markov_head_type, target_layer_ids=parsed.target_layer_ids)
        return out

    def nextn_targets(self):
        """The class list _handle_eagle_family defaults the NEXTN/EAGLE draft path to the target for (read
        from its source: running it needs the server's full resolution context)."""
        import ast, inspect
        from sglang.srt.arg_groups import speculative_hook
        tree = ast.parse(inspect.getsource(speculative_hook._handle_eagle_family))
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id == "model_arch" \
                    and isinstance(node.comparators[0], ast.List):
                return sorted(e.value for e in node.comparators[0].elts)
        return None

    def block_entry_classes(self):
        import importlib
        return {name: [c.__name__ for c in importlib.import_module("sglang.srt.models." + name).EntryClass]
                for name in ("dflash", "dspark")}


Vllm, Sglang = BlockVllm, BlockSglang
'''


def probe_script() -> str:
    head, call = PROBE.rsplit("main(sys.argv[1])", 1)
    return head + BLOCK_OPS + "\n\nmain(sys.argv[1])" + call


@pytest.fixture(scope="module")
def probes(engine_python, tmp_path_factory):
    with running_probes(engine_python, tmp_path_factory.mktemp("probe") / "block_probe.py", probe_script()) as started:
        yield started


def _without(config: dict, *keys: str, nested: str | None = None) -> dict:
    config = json.loads(json.dumps(config))
    holder = config[nested] if nested else config
    for key in keys:
        holder.pop(key, None)
    return config


def _with(config: dict, nested: str | None = None, **values) -> dict:
    config = json.loads(json.dumps(config))
    (config[nested] if nested else config).update(values)
    return config


# name -> (method, config(target path)): the valid exports and each broken way.
CASES = {
    "specforge_dflash": ("dflash", lambda t: tb.specforge_dflash_config()),
    "specforge_dspark": ("dspark", lambda t: tb.specforge_dspark_config()),
    "flat_dspark": ("dspark", lambda t: tb.flattened_dspark_config()),
    "speculators_dflash": ("dflash", lambda t: tb.speculators_block_config("dflash", t)),
    "speculators_dflash_non_causal": ("dflash", lambda t: tb.speculators_block_config(
        "dflash", t, sliding_window_non_causal=True)),
    "speculators_dspark": ("dspark", lambda t: tb.speculators_block_config("dspark", t)),
    "speculators_dspark_no_mask": ("dspark", lambda t: _without(tb.speculators_block_config("dspark", t),
                                                                "mask_token_id")),
    "speculators_dflash_no_layers": ("dflash", lambda t: _without(tb.speculators_block_config("dflash", t),
                                                                  "aux_hidden_state_layer_ids")),
    "dflash_no_mask": ("dflash", lambda t: _without(tb.specforge_dflash_config(), "mask_token_id",
                                                    nested="dflash_config")),
    "dspark_no_mask": ("dspark", lambda t: _without(tb.flattened_dspark_config(), "mask_token_id",
                                                    nested="dflash_config")),
    "dspark_mask_out_of_vocab": ("dspark", lambda t: _with(tb.flattened_dspark_config(), "dflash_config",
                                                           mask_token_id=tiny.VOCAB + 10)),
    "dflash_layers_out_of_range": ("dflash", lambda t: _with(tb.specforge_dflash_config(), "dflash_config",
                                                             target_layer_ids=[1, 2, tiny.LAYERS])),
    "dspark_gated_head": ("dspark", lambda t: _with(_with(tb.flattened_dspark_config(), markov_head_type="gated"),
                                                    "dflash_config", markov_head_type="gated")),
    "dspark_no_head_type": ("dspark", lambda t: _without(tb.specforge_dspark_config(), "markov_head_type",
                                                         nested="dflash_config")),
    "dspark_qwen3_class": ("dspark", lambda t: _with(tb.flattened_dspark_config(), architectures=["Qwen3ForCausalLM"])),
    "dflash_qwen3_class": ("dflash", lambda t: _with(tb.specforge_dflash_config(), architectures=["Qwen3ForCausalLM"])),
}


@pytest.fixture(scope="module")
def ck(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("blocks")
    paths = {"target": str(tiny.make_target(root / "target"))}
    for name, (_, config) in CASES.items():
        paths[name] = str(tb.make_block_drafter(root / name, config(paths["target"])))
    return paths


def problems(ck, name: str, engine: str) -> set[str]:
    return {f.reason for f in preflight(ck[name], ck["target"], engine, CASES[name][0]).problems}


def engine_answer(probes, ck, name: str, engine: str) -> dict:
    return probes[engine].ask("block", target=ck["target"], drafter=ck[name], method=CASES[name][0])


# ---------------------------------------------------------------------------------------------------
# Accepted by the engine: the preflight passes, and reads what the engine reads


@pytest.mark.parametrize("name,engine", [("specforge_dflash", "vllm"), ("specforge_dflash", "sglang"),
                                         ("flat_dspark", "vllm"), ("flat_dspark", "sglang"),
                                         ("specforge_dspark", "sglang"), ("speculators_dspark", "vllm"),
                                         ("speculators_dflash_non_causal", "vllm")])
def test_valid_exports(probes, ck, name, engine):
    v = preflight(ck[name], ck["target"], engine, CASES[name][0])
    assert v.ok, [f.line() for f in v.problems]
    real = engine_answer(probes, ck, name, engine)["ok"]
    assert real["mask_token_id" if engine == "sglang" else "mask"] == v.facts["mask_token_id"] == tb.MASK_TOKEN_ID
    if engine == "vllm":
        assert real["method"] == CASES[name][0]
        assert real["aux"] == v.facts["block_layers"]["read"] == list(tiny.TRAINED_POSITIONS)
        assert not any(real["causal"])  # every full-attention layer bidirectional, as trained
        if CASES[name][0] == "dspark":
            assert real["heads"] == {"markov": "DSparkMarkovHead", "confidence": True}
    else:
        assert real["target_layer_ids"] == v.facts["block_layers"]["read"] == tb.TARGET_LAYER_IDS
        assert real["block_size"] == v.facts["block_size"] == tb.BLOCK_SIZE
        if CASES[name][0] == "dspark":
            assert real["gamma"] == tb.BLOCK_SIZE and real["markov_rank"] == tb.MARKOV_RANK


# ---------------------------------------------------------------------------------------------------
# Refused by the engine: the preflight refuses too, before the target's load


@pytest.mark.parametrize("name,engine,reason", [
    ("speculators_dflash", "sglang", "SpeculatorsFormatOnSglang"),
    ("speculators_dspark", "sglang", "SpeculatorsFormatOnSglang"),
    ("speculators_dflash_no_layers", "vllm", "SpeculatorsFieldMissing"),
    ("dspark_no_mask", "sglang", "MaskTokenMissing"),
    ("dspark_mask_out_of_vocab", "sglang", "MaskTokenOutOfVocab"),
    ("dflash_layers_out_of_range", "sglang", "TargetLayerOutOfRange"),
    ("dspark_no_head_type", "sglang", "MarkovHeadTypeMissing"),
    ("dflash_qwen3_class", "vllm", "ArchitectureUnsupported"),
])
def test_engine_raises_preflight_refuses(probes, ck, name, engine, reason):
    answer = engine_answer(probes, ck, name, engine)
    assert "error" in answer, answer
    assert problems(ck, name, engine) == {reason}


def test_vllm_proposer_refuses_a_missing_mask_token(probes, ck):
    for name in ("dflash_no_mask", "dspark_no_mask", "speculators_dspark_no_mask"):
        assert "mask_token_id" in engine_answer(probes, ck, name, "vllm")["ok"]["mask_error"]
        assert problems(ck, name, "vllm") == {"MaskTokenMissing"}
    # SGLang's DFlash looks the mask token up in the tokenizer instead: accepted, with a warning.
    assert engine_answer(probes, ck, "dflash_no_mask", "sglang")["ok"]["mask_token_id"] is None
    v = preflight(ck["dflash_no_mask"], ck["target"], "sglang", "dflash")
    assert v.ok and "MaskTokenFromTokenizer" in {f.reason for f in v.warnings}


def test_specforge_dspark_export_fails_vllm_qwen3_dspark_model(probes, ck):
    real = engine_answer(probes, ck, "specforge_dspark", "vllm")["ok"]
    assert real["architectures"] == ["Qwen3DSparkModel"]  # SpeculativeConfig accepts it...
    assert "markov_rank" in real["heads"]["error"]  # ...the model's __init__ does not (after the target load)
    assert problems(ck, "specforge_dspark", "vllm") == {"MarkovRankNotTopLevel"}


# ---------------------------------------------------------------------------------------------------
# Accepted silently and mis-served: the preflight is what catches them


def test_speculators_dflash_served_causal_by_vllm(probes, ck):
    real = engine_answer(probes, ck, "speculators_dflash", "vllm")["ok"]
    assert real["hf_class"] == "SpeculatorsConfig" and real["causal"] == [True]  # trained bidirectional
    assert problems(ck, "speculators_dflash", "vllm") == {"DFlashCausalMismatch"}


def test_gated_markov_head_built_as_vanilla_by_vllm(probes, ck):
    real = engine_answer(probes, ck, "dspark_gated_head", "vllm")["ok"]
    assert real["heads"]["markov"] == "DSparkMarkovHead"
    assert problems(ck, "dspark_gated_head", "vllm") == {"MarkovHeadUnsupported"}
    assert engine_answer(probes, ck, "dspark_gated_head", "sglang")["ok"]["markov_head_type"] == "gated"
    assert problems(ck, "dspark_gated_head", "sglang") == set()


def test_unknown_dspark_class_rewritten_to_deepseek_v4_by_vllm(probes, ck):
    real = engine_answer(probes, ck, "dspark_qwen3_class", "vllm")["ok"]
    assert real["architectures"] == ["DSparkDraftModel"] and real["model_type"] == "deepseek_v4"
    assert problems(ck, "dspark_qwen3_class", "vllm") == {"DSparkArchitectureRewritten"}


def test_out_of_range_layers_and_mask_pass_vllm_config(probes, ck):
    real = engine_answer(probes, ck, "dflash_layers_out_of_range", "vllm")["ok"]
    assert real["aux"] == [2, 3, tiny.LAYERS + 1]  # position 5 of a 4-layer target
    assert problems(ck, "dflash_layers_out_of_range", "vllm") == {"TargetLayerOutOfRange"}
    assert engine_answer(probes, ck, "dspark_mask_out_of_vocab", "vllm")["ok"]["mask"] == tiny.VOCAB + 10
    assert problems(ck, "dspark_mask_out_of_vocab", "vllm") == {"MaskTokenOutOfVocab"}


# ---------------------------------------------------------------------------------------------------
# The tables against the engines' code


def test_block_architecture_tables(probes):
    registry = set(probes["vllm"].ok("registry"))
    assert vllm_loading.DFLASH_ARCHITECTURES | vllm_loading.DSPARK_ARCHITECTURES <= registry
    entry = probes["sglang"].ok("block_entry_classes")
    assert set(entry["dflash"]) == sglang_loading.DFLASH_ARCHITECTURES
    assert set(entry["dspark"]) == sglang_loading.DSPARK_ARCHITECTURES


MTP_CASES = ([(t, "X") for t in vllm_loading.MTP_BY_MODEL_TYPE]
             + [("x", a) for a in vllm_loading.MTP_BY_ARCHITECTURE]
             + [(t, "X") for t in sorted(vllm_loading.MTP_UNMAPPED_MODEL_TYPES)])


@pytest.mark.parametrize("model_type,architecture", MTP_CASES)
def test_vllm_mtp_variant_table(probes, model_type, architecture):
    real = probes["vllm"].ok("mtp_variant", model_type=model_type, architecture=architecture)
    ours = vllm_loading.mtp_variant(model_type, architecture)
    assert real["mtp"] == (ours is not None)
    if ours is not None:
        assert real["model_type"] == ours


def test_kimi_targets_refused_for_mtp_on_vllm(tmp_path):
    for model_type, arch in (("kimi_k2", "DeepseekV3ForCausalLM"), ("kimi_k25", "KimiK25ForConditionalGeneration")):
        target = tiny.make_target(tmp_path / model_type)
        config = json.loads((Path(target) / "config.json").read_text())
        config.update(model_type=model_type, architectures=[arch], num_nextn_predict_layers=1)
        (Path(target) / "config.json").write_text(json.dumps(config))
        v = preflight(None, target, "vllm", "mtp")
        assert {f.reason for f in v.problems} == {"MtpVariantMissing"}


def test_sglang_nextn_target_table(probes):
    assert set(probes["sglang"].ok("nextn_targets")) == sglang_loading.NEXTN_TARGETS
