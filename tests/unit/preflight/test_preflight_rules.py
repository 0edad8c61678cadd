"""The named steps of the preflight's architecture and aux-layers checks, on configs alone (no files).

tests/unit/preflight/test_preflight.py runs the whole preflight on tiny real checkpoints; here each step gets the
Context it reads, built from config dicts, so every branch is one case.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drafter_operator.engines import sglang_loading, vllm_loading
from drafter_operator.preflight.checkpoint import Checkpoint
from drafter_operator.preflight.rules import Context, Report
from drafter_operator.preflight.rules.architecture import (
    check_architecture,
    check_eagle3_architecture,
    check_eagle_architecture,
    check_speculators_architecture,
)
from drafter_operator.preflight.rules.aux_layers import (
    RecordedLayers,
    aux_layer_facts,
    capture_problems,
    check_aux_layers,
    describe_capture,
    note_sglang_capture_rule,
    recorded_layers,
    trained_position_problems,
    warn_if_layer_lists_disagree,
)

TARGET = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 32, "hidden_size": 64}


def _ctx(drafter: dict, engine: str = "vllm", method: str = "eagle3", target: dict | None = None, **kw) -> Context:
    return Context(engine=engine, method=method, target=Checkpoint("/t", config=target or TARGET),
                   drafter=Checkpoint("/d", config=drafter), **kw)


def _said(report: Report) -> list[tuple[str, str]]:
    """(severity, reason) of each finding, ok lines as ("ok", "")."""
    return [(f.severity, f.reason) for f in report.findings]


# --- architecture ---------------------------------------------------------------------------------------------

def _speculators(kind: str = "eagle3", model_type: str = "llama") -> dict:
    return {"speculators_model_type": kind, "transformer_layer_config": {"model_type": model_type}}


@pytest.mark.parametrize("engine, method, config, said", [
    ("sglang", "eagle3", _speculators(), [("problem", "SpeculatorsFormatOnSglang")]),
    ("vllm", "eagle3", _speculators("medusa"), [("problem", "SpeculatorsTypeUnsupported")]),
    ("vllm", "eagle3", _speculators("dflash"), [("problem", "DrafterMethodMismatch")]),
    ("vllm", "eagle", _speculators(), [("problem", "Eagle3DrafterAsEagle")]),
    ("vllm", "eagle3", _speculators(model_type="gpt2"), [("problem", "SpeculatorsModelTypeUnsupported")]),
    ("vllm", "eagle3", _speculators("peagle"), [("warning", "ParallelDrafting"), ("ok", "")]),
    ("vllm", "eagle3", _speculators(model_type="qwen3"), [("ok", "")]),
])
def test_speculators_architecture(engine, method, config, said):
    ctx, report = _ctx(config, engine, method), Report()
    check_speculators_architecture(ctx, report)
    assert _said(report) == said
    assert ctx.facts["drafter_format"] == f"speculators ({config['speculators_model_type']})"
    if said == [("ok", "")]:
        assert "Eagle3Qwen3ForCausalLM" in report.findings[0].message


@pytest.mark.parametrize("config, said", [
    ({"model_type": "llama"}, [("problem", "ArchitectureMissing")]),
    ({"model_type": "llama", "architectures": [""]}, [("problem", "ArchitectureMissing")]),
    ({"architectures": ["LlamaForCausalLMEagle3"]}, [("problem", "ModelTypeMissing")]),
    ({"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama"}, [("ok", "")]),
])
def test_architecture_needs_a_class_and_a_model_type_before_the_method_step(config, said):
    ctx, report = _ctx(config), Report()
    check_architecture(ctx, report)
    assert _said(report) == said
    named_eagle3 = any("Eagle3" in a for a in config.get("architectures", []))
    assert ctx.facts["drafter_format"] == "hf" and ctx.facts["drafter_head"] == ("eagle3" if named_eagle3 else "unknown")


def test_architecture_sends_speculators_checkpoints_to_their_own_step():
    ctx, report = _ctx(_speculators()), Report()
    check_architecture(ctx, report)
    assert _said(report) == [("ok", "")] and ctx.facts["drafter_format"] == "speculators (eagle3)"


@pytest.mark.parametrize("engine, kind, arch, said", [
    ("vllm", "eagle", "LlamaForCausalLM", [("problem", "EagleDrafterAsEagle3")]),
    ("sglang", "eagle", "LlamaForCausalLM", [("problem", "EagleDrafterAsEagle3")]),
    ("vllm", "eagle3", "GPT2LMHeadModel", [("problem", "ArchitectureUnsupported")]),
    ("vllm", "eagle3", "LlamaForCausalLM", [("ok", "")]),  # vLLM renames it Eagle3LlamaForCausalLM
    ("sglang", "eagle3", "Eagle3LlamaForCausalLM", [("problem", "ArchitectureUnsupported")]),
    ("sglang", "eagle3", "LlamaForCausalLMEagle3", [("ok", "")]),
    ("sglang", "eagle3", "Eagle3DeepseekV2ForCausalLM", [("ok", ""), ("warning", "TensorRulesPartial")]),
])
def test_eagle3_architecture(engine, kind, arch, said):
    report = Report()
    check_eagle3_architecture(_ctx({"architectures": [arch]}, engine), report, kind, [arch])
    assert _said(report) == said


@pytest.mark.parametrize("engine, kind, arch, said", [
    ("vllm", "eagle3", "LlamaForCausalLMEagle3", [("problem", "Eagle3DrafterAsEagle")]),
    ("vllm", "eagle", "GPT2LMHeadModel", [("problem", "ArchitectureUnsupported")]),
    ("vllm", "eagle", "LlamaForCausalLM", [("ok", "")]),  # vLLM renames it EagleLlamaForCausalLM
    ("sglang", "eagle", "LlamaForCausalLM", [("problem", "ArchitectureUnsupported")]),
    ("sglang", "eagle", "LlamaForCausalLMEagle", [("ok", "")]),
])
def test_eagle_architecture(engine, kind, arch, said):
    report = Report()
    check_eagle_architecture(_ctx({"architectures": [arch]}, engine, "eagle"), report, kind, [arch])
    assert _said(report) == said


# --- aux-layers -----------------------------------------------------------------------------------------------

def _hf(eagle_ids=None, top_ids=None) -> dict:
    config = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama"}
    if eagle_ids is not None:
        config["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": eagle_ids}
    if top_ids is not None:
        config["eagle_aux_hidden_state_layer_ids"] = top_ids
    return config


def test_recorded_layers_take_the_convention_given_or_the_formats():
    assert recorded_layers(_ctx(_hf())) == RecordedLayers(None, "", "vllm", None)
    assert recorded_layers(_ctx(_hf([1, 15, 28]))) == RecordedLayers(
        (1, 15, 28), "eagle_config.eagle_aux_hidden_state_layer_ids", "sglang", (2, 16, 29))
    assert recorded_layers(_ctx(_hf([1, 15, 28]), trained_convention="vllm")).positions == (1, 15, 28)
    assert recorded_layers(_ctx(_hf(top_ids=[2, 16, 29]))) == RecordedLayers(
        (2, 16, 29), "eagle_aux_hidden_state_layer_ids", "vllm", (2, 16, 29))


def test_aux_layer_facts():
    capture = vllm_loading.capture(_hf(top_ids=[2, 16, 29]), 32)
    facts = aux_layer_facts(32, 3, capture, RecordedLayers((1, 15, 28), "f", "sglang", (2, 16, 29)))
    assert facts == {"target_layers": 32, "recorded_ids": [1, 15, 28], "recorded_field": "f",
                     "trained_convention": "sglang", "trained_positions": [2, 16, 29],
                     "engine_source": "eagle_aux_hidden_state_layer_ids", "engine_requested": [2, 16, 29],
                     "engine_captured": [2, 16, 29], "drafter_expects": 3}
    bare = aux_layer_facts(32, 3, capture, RecordedLayers(None, "", "vllm", None))
    assert bare["recorded_ids"] is bare["recorded_field"] is bare["trained_convention"] is bare["trained_positions"] is None


@pytest.mark.parametrize("target_class, known", [("LlamaForCausalLM", True), ("NewModelForCausalLM", False)])
def test_note_sglang_capture_rule(target_class, known):
    ctx, report = _ctx(_hf(), "sglang", target={**TARGET, "architectures": [target_class]}), Report()
    ctx.facts["aux_layers"] = {}
    note_sglang_capture_rule(ctx, report)
    assert ctx.facts["aux_layers"]["sglang_rule"] == sglang_loading.PLUS_ONE
    assert _said(report) == ([] if known else [("warning", "CaptureRuleUnverified")])


def test_describe_capture():
    ctx = _ctx(_hf([1, 15, 28]), vllm_runner="v2")
    recorded = recorded_layers(ctx)
    default = describe_capture(ctx, vllm_loading.capture(ctx.draft, 32, "v2"), recorded)
    assert default.startswith("vllm (v2 model runner) finds no layer ids (it does not read "
                              "eagle_config.eagle_aux_hidden_state_layer_ids) and uses the target default")
    sglang = _ctx(_hf([1, 15, 28]), "sglang")
    said = describe_capture(sglang, sglang_loading.capture(sglang.draft, 32, "LlamaForCausalLM"), recorded)
    assert said.startswith("sglang reads [1, 15, 28] from eagle_config") and "captures the residual stream" in said


@pytest.mark.parametrize("config, num_aux, said, fixed", [
    (_hf(top_ids=[2, 16, 29]), 3, [], None),
    (_hf(top_ids=[2, 16, 40]), 3, [("problem", "AuxLayerOutOfRange")], "deeper target"),
    (_hf(top_ids=[2, 2, 29]), 3, [("problem", "AuxLayerCount")], "record 3 distinct layer ids"),
])
def test_capture_problems(config, num_aux, said, fixed):
    ctx, report = _ctx(config), Report()
    capture = vllm_loading.capture(ctx.draft, 32)
    bad = capture_problems(ctx, report, "what", capture, RecordedLayers(None, "", "vllm", None), num_aux, 32)
    assert bad == bool(said) and _said(report) == said
    if fixed:
        assert fixed in report.findings[0].fix


@pytest.mark.parametrize("positions, bad_before, said, bad_after", [
    ((2, 16, 29), False, [], False),
    ((2, 16, 29), True, [], True),
    ((2, 16, 40), False, [("problem", "AuxLayerOutOfRange")], True),
    ((2, 16, 40), True, [], True),  # already reported: stays bad, says nothing more
    ((3, 16, 29), False, [("problem", "AuxLayerMismatch")], True),
])
def test_trained_position_problems(positions, bad_before, said, bad_after):
    ctx, report = _ctx(_hf(top_ids=[2, 16, 29])), Report()
    capture = vllm_loading.capture(ctx.draft, 32)
    recorded = RecordedLayers(positions, "eagle_aux_hidden_state_layer_ids", "vllm", positions)
    assert trained_position_problems(ctx, report, "what", capture, recorded, 32, bad_before) is bad_after
    assert _said(report) == said


def test_trained_positions_warn_when_the_other_vllm_runner_captures_others():
    ctx, report = _ctx(_hf([1, 15, 28], top_ids=None), vllm_runner="v1"), Report()  # v1 reads eagle_config's list
    capture = vllm_loading.capture(ctx.draft, 32, "v1")
    recorded = RecordedLayers((1, 15, 28), "eagle_config.eagle_aux_hidden_state_layer_ids", "vllm", (1, 15, 28))
    assert trained_position_problems(ctx, report, "what", capture, recorded, 32, False) is False
    assert _said(report) == [("warning", "VllmRunnerDiffers")]


@given(top=st.lists(st.integers(0, 31), min_size=1, max_size=4), eagle=st.lists(st.integers(0, 30), min_size=1, max_size=4))
def test_layer_lists_disagree_exactly_when_their_positions_differ(top, eagle):
    ctx, report = _ctx(_hf(eagle, top_ids=top)), Report()
    warn_if_layer_lists_disagree(ctx, report, recorded_layers(ctx))
    differ = set(top) != {i + 1 for i in eagle}  # eagle_config's ids are SGLang's: position id + 1
    assert _said(report) == ([("warning", "AuxLayerListsDisagree")] if differ else [])


def test_layer_lists_are_compared_only_for_an_hf_export_with_both():
    for config in (_hf([1, 15, 28]), _hf(top_ids=[9, 9, 9])):
        report = Report()
        warn_if_layer_lists_disagree(_ctx(config), report, recorded_layers(_ctx(config)))
        assert report.findings == []


def test_check_aux_layers_puts_the_steps_together():
    ctx, report = _ctx(_hf([1, 15, 28], top_ids=[2, 16, 29]), "sglang"), Report()
    check_aux_layers(ctx, report)
    assert _said(report) == [("ok", "")]
    assert ctx.facts["aux_layers"]["engine_captured"] == [2, 16, 29] and ctx.facts["aux_layers"]["sglang_rule"]
    assert "trained on" in report.findings[0].message
    ctx, report = _ctx(_hf(), "vllm"), Report()
    check_aux_layers(ctx, report)
    assert _said(report) == [("warning", "AuxLayersNotRecorded"), ("ok", "")]  # the default layers fit: a look, not a fault
