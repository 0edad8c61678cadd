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

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drafter_operator.engines import sglang_loading, vllm_loading
from drafter_operator.preflight import preflight
from drafter_testbed import tiny_checkpoints as tiny
from drafter_operator.preflight.safetensors import read_header
from tests.support.contract_preflight import PROBE, running_probes

# One worker runs the module, so its module-scoped fixture (the costly part) is built once, not once per worker.
pytestmark = [pytest.mark.xdist_group("preflight-contract"), pytest.mark.contract]


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
    assert vllm_loading.EAGLE3_ARCHITECTURES | vllm_loading.EAGLE_ARCHITECTURES <= registry
    assert {a for a in registry if "Eagle3" in a} <= vllm_loading.EAGLE3_ARCHITECTURES
    entry = probes["sglang"].ok("entry_classes")
    assert set(entry["llama_eagle3"] + entry["kimi_k25_eagle3"]) == sglang_loading.EAGLE3_ARCHITECTURES
    assert set(entry["llama_eagle"] + entry["qwen2_eagle"] + entry["mistral_eagle"]
               + entry["mistral_large_3_eagle"]) == sglang_loading.EAGLE_ARCHITECTURES


layer_lists = st.lists(st.integers(min_value=0, max_value=70), min_size=1, max_size=4)


@pytest.mark.parametrize("arch", sorted(sglang_loading.CAPTURE_RULES))
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(min_value=4, max_value=64), data=st.data())
def test_sglang_layer_rule_table(probes, arch, n, data):
    some = st.lists(st.integers(min_value=0, max_value=n + 2), min_size=1, max_size=4)
    ids = data.draw(st.one_of(st.none(), some, some.map(lambda x: [1] + x), some.map(lambda x: x + [n])))
    real = probes["sglang"].ok("capture", arch=arch, layer_ids=ids, num_layers=n)
    rule, known = sglang_loading.capture_rule(arch)
    assert known and real == sglang_loading.layers_to_capture(rule, ids, n)


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
    ours = vllm_loading.capture(config, n, runner)  # type: ignore[arg-type]
    assert (list(ours.layer_ids) if ours.layer_ids else None) == (real["ids"] or None)
    assert sorted(set(ours.requested)) == real["kept"]


def test_sglang_reads_only_eagle_config_ids(probes, ck, tmp_path):
    # A top-level list (what vLLM reads first) is invisible to SGLang: the default [2, N//2, N-3] applies.
    drafter = tiny.make_specforge(tmp_path / "top_only", config=tiny.specforge_config(
        eagle_aux_hidden_state_layer_ids=[1, 2, 3]) | {"eagle_config": {}})
    config = probes["sglang"].ok("config", target=ck["target"], drafter=str(drafter))
    assert config["eagle_aux_ids"] is None and config["layers_to_capture"] == [2, 2, 1]
    capture = sglang_loading.capture(json.loads((drafter / "config.json").read_text()), tiny.LAYERS, "LlamaForCausalLM")
    assert list(capture.requested) == config["layers_to_capture"]
