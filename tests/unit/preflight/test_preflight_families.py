"""The preflight's DFlash, DSpark and MTP-target rules, on configs (no engine; the contract tier,
tests/contract/test_preflight_families_contract.py, holds the same cases to the engines' own code)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drafter_operator.engines import vllm_loading
from drafter_operator.preflight import preflight
from drafter_testbed import tiny_blocks as tb
from drafter_testbed import tiny_checkpoints as tiny
from drafter_operator.preflight.checkpoint import Checkpoint
from drafter_operator.preflight.rules import Context, Report, rules_for
from drafter_operator.preflight.rules.block import drafter_kind
from drafter_operator.preflight.rules.block_fields import check_target_layers

TARGET = tiny.target_config()


def verdict_of(drafter: dict | None, method: str, engine: str, target: dict | None = None, runner: str = "v2"):
    """Every rule of ``method`` on configs alone, as preflight() orders them."""
    ctx = Context(engine=engine, method=method, target=Checkpoint("/t", config=target or TARGET),
                  drafter=Checkpoint("/d", config=drafter) if drafter is not None else None, vllm_runner=runner)
    report = Report()
    for _, rule in rules_for(method, bundled=drafter is None):
        rule(ctx, report)
    return ctx, report


def problems(drafter: dict | None, method: str, engine: str, **kw) -> set[str]:
    return {f.reason for f in verdict_of(drafter, method, engine, **kw)[1].findings if f.severity == "problem"}


def warnings(drafter: dict | None, method: str, engine: str, **kw) -> set[str]:
    return {f.reason for f in verdict_of(drafter, method, engine, **kw)[1].findings if f.severity == "warning"}


def nested(config: dict, **values) -> dict:
    config = json.loads(json.dumps(config))
    config["dflash_config"].update(values)
    return config


VALID = {("dflash", "vllm"): tb.specforge_dflash_config(), ("dflash", "sglang"): tb.specforge_dflash_config(),
         ("dspark", "vllm"): tb.flattened_dspark_config(), ("dspark", "sglang"): tb.specforge_dspark_config()}


@pytest.mark.parametrize("method,engine", sorted(VALID))
def test_valid_exports_pass_with_their_facts(method, engine):
    ctx, report = verdict_of(VALID[(method, engine)], method, engine)
    assert not [f for f in report.findings if f.severity != "ok"], [f.line() for f in report.findings]
    assert ctx.facts["mask_token_id"] == tb.MASK_TOKEN_ID and ctx.facts["block_size"] == tb.BLOCK_SIZE
    read = ctx.facts["block_layers"]["read"]
    assert read == (list(tiny.TRAINED_POSITIONS) if engine == "vllm" else tb.TARGET_LAYER_IDS)


def test_block_size_names_the_tokens_per_step():
    for method, k in (("dflash", tb.BLOCK_SIZE - 1), ("dspark", tb.BLOCK_SIZE)):
        _, report = verdict_of(VALID[(method, "sglang")], method, "sglang")
        line = next(f.message for f in report.findings if f.check == "block-size")
        assert f"numSpeculativeTokens {k}" in line


def test_specforge_dspark_on_vllm_names_the_nested_fields():
    _, report = verdict_of(tb.specforge_dspark_config(), "dspark", "vllm")
    [problem] = [f for f in report.findings if f.severity == "problem"]
    assert problem.reason == "MarkovRankNotTopLevel" and "qwen3_dspark.py:209-213" in problem.message
    assert "markov_rank, markov_head_type, enable_confidence_head, confidence_head_with_markov" in problem.fix


def test_speculators_layouts():
    t = "/t"
    assert problems(tb.speculators_block_config("dspark", t), "dspark", "vllm") == set()
    assert problems(tb.speculators_block_config("dflash", t), "dflash", "vllm") == {"DFlashCausalMismatch"}
    assert problems(tb.speculators_block_config("dflash", t, sliding_window_non_causal=True), "dflash", "vllm") == set()
    # Sliding layers only: causal is what speculators trains them with.
    sliding = tb.speculators_block_config("dflash", t)
    sliding["transformer_layer_config"]["layer_types"] = ["sliding_attention"]
    assert problems(sliding, "dflash", "vllm") == set()
    for kind in ("dflash", "dspark"):
        assert problems(tb.speculators_block_config(kind, t), kind, "sglang") == {"SpeculatorsFormatOnSglang"}
    no_ids = tb.speculators_block_config("dflash", t)
    del no_ids["aux_hidden_state_layer_ids"]
    assert problems(no_ids, "dflash", "vllm") == {"SpeculatorsFieldMissing"}
    no_mask = tb.speculators_block_config("dspark", t)
    del no_mask["mask_token_id"]
    assert problems(no_mask, "dspark", "vllm") == {"MaskTokenMissing"}  # update_dspark copies it only when set


def test_method_and_checkpoint_kind():
    assert drafter_kind(tb.specforge_dflash_config()) == "dflash"
    assert drafter_kind(tb.specforge_dspark_config()) == "dspark"
    assert drafter_kind(tiny.specforge_config()) is None
    assert problems(tb.specforge_dspark_config(), "dflash", "sglang") == {"DrafterMethodMismatch"}
    assert problems(tb.specforge_dflash_config(), "dspark", "vllm") == {"DrafterMethodMismatch"}
    assert problems(tb.speculators_block_config("dspark", "/t"), "dflash", "vllm") == {"DrafterMethodMismatch"}


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_architectures(engine):
    for method, config in (("dflash", tb.specforge_dflash_config()), ("dspark", tb.flattened_dspark_config())):
        unnamed = {k: v for k, v in config.items() if k != "architectures"}
        assert problems(unnamed, method, engine) >= {"ArchitectureMissing"}
        untyped = {k: v for k, v in config.items() if k != "model_type"}
        assert "ModelTypeMissing" in problems(untyped, method, engine)
    plain = {**tb.specforge_dflash_config(), "architectures": ["Qwen3ForCausalLM"]}
    assert "ArchitectureUnsupported" in problems(plain, "dflash", engine)
    dspark_plain = {**tb.flattened_dspark_config(), "architectures": ["Qwen3ForCausalLM"]}
    expected = "DSparkArchitectureRewritten" if engine == "vllm" else "ArchitectureUnsupported"
    assert expected in problems(dspark_plain, "dspark", engine)


def test_vllm_architecture_renames():
    assert vllm_loading.dflash_architecture("DFlashDraftModel") == "DFlashDraftModel"
    assert vllm_loading.dflash_architecture("Qwen3ForCausalLM") == "DFlashQwen3ForCausalLM"
    assert vllm_loading.dspark_architecture("DSparkDraftModel", "qwen3") == "Qwen3DSparkModel"
    assert vllm_loading.dspark_architecture("DSparkDraftModel", "llama") == "DSparkDraftModel"
    assert vllm_loading.dspark_architecture("Gemma4DSparkModel", "gemma4") == "Gemma4DSparkModel"


def test_mask_token():
    no_mask = {**tb.specforge_dflash_config(), "dflash_config": {"target_layer_ids": tb.TARGET_LAYER_IDS}}
    assert problems(no_mask, "dflash", "vllm") == {"MaskTokenMissing"}
    assert problems(no_mask, "dflash", "sglang") == set()
    assert "MaskTokenFromTokenizer" in warnings(no_mask, "dflash", "sglang")
    flat_no_mask = {**tb.flattened_dspark_config(), "dflash_config": {"target_layer_ids": tb.TARGET_LAYER_IDS}}
    for engine in ("vllm", "sglang"):
        assert "MaskTokenMissing" in problems(flat_no_mask, "dspark", engine)
        for bad in (tiny.VOCAB, -1, "4095", True):
            assert problems(nested(tb.flattened_dspark_config(), mask_token_id=bad), "dspark", engine) \
                == {"MaskTokenOutOfVocab"}
    # vLLM's lookup order: dflash_config first, then the top level, then the DSpark/PARD names.
    assert vllm_loading.mask_token_id({"mask_token_id": 7, "dflash_config": {"mask_token_id": 3}}) == \
        (3, "dflash_config.mask_token_id")
    assert vllm_loading.mask_token_id({"pard_token": 9}) == (9, "pard_token")
    assert vllm_loading.mask_token_id({}) == (None, None)


@given(ids=st.lists(st.integers(min_value=-2, max_value=2 * tiny.LAYERS), min_size=1, max_size=5),
       engine=st.sampled_from(["vllm", "sglang"]))
def test_target_layers_in_range(ids, engine):
    ctx = Context(engine=engine, method="dflash", target=Checkpoint("/t", config=TARGET),
                  drafter=Checkpoint("/d", config=nested(tb.specforge_dflash_config(), target_layer_ids=ids)))
    report = Report()
    check_target_layers(ctx, report)
    # vLLM captures id + 1 among positions 0..N; SGLang refuses ids outside 0..N-1: the same ids are good.
    good = all(0 <= i <= tiny.LAYERS - 1 for i in ids) if engine == "sglang" else \
        all(0 <= i + 1 <= tiny.LAYERS for i in ids)
    assert ("TargetLayerOutOfRange" in {f.reason for f in report.findings}) == (not good)


def test_target_layers_and_block_size_edges():
    unrecorded = {**tb.specforge_dflash_config(), "dflash_config": {"mask_token_id": tb.MASK_TOKEN_ID}}
    for engine in ("vllm", "sglang"):
        assert "TargetLayersNotRecorded" in warnings(unrecorded, "dflash", engine)
    assert "DraftLayersMissing" in problems({k: v for k, v in tb.specforge_dflash_config().items()
                                             if k != "num_hidden_layers"}, "dflash", "sglang")
    no_block = {k: v for k, v in tb.specforge_dflash_config().items() if k != "block_size"}
    assert "BlockSizeUnknown" in warnings(no_block, "dflash", "sglang")
    assert problems({**tb.specforge_dflash_config(), "block_size": 1}, "dflash", "sglang") == {"BlockSizeInvalid"}
    assert problems(nested(tb.specforge_dspark_config(), block_size=8), "dspark", "sglang") == set()


@pytest.mark.parametrize("method,engine", sorted(VALID))
def test_num_speculative_tokens_against_the_trained_block(method, engine):
    right = tb.BLOCK_SIZE - 1 if method == "dflash" else tb.BLOCK_SIZE
    config = VALID[(method, engine)]
    ctx = Context(engine=engine, method=method, target=Checkpoint("/t", config=TARGET),
                  drafter=Checkpoint("/d", config=config), num_speculative_tokens=right)
    report = Report()
    for _, rule in rules_for(method):
        rule(ctx, report)
    assert not [f for f in report.findings if f.severity != "ok"]
    for k in (right - 1, right + 1):
        ctx.num_speculative_tokens = k
        report = Report()
        for _, rule in rules_for(method):
            rule(ctx, report)
        [mismatch] = [f for f in report.findings if f.severity != "ok"]
        assert mismatch.reason == "BlockSizeMismatch" and mismatch.fix.endswith(f": {right}")


def test_hidden_width():
    wide = {**tb.specforge_dflash_config(), "target_hidden_size": 2 * tiny.HIDDEN}
    for engine in ("vllm", "sglang"):
        assert problems(wide, "dflash", engine) == {"HiddenSizeMismatch"}


def test_markov_head():
    gated = {**tb.flattened_dspark_config(), "markov_head_type": "gated"}
    assert problems(gated, "dspark", "vllm") == {"MarkovHeadUnsupported"}
    assert problems(nested(tb.specforge_dspark_config(), markov_head_type="gated"), "dspark", "sglang") == set()
    assert problems(nested(tb.specforge_dspark_config(), markov_head_type="mlp"), "dspark", "sglang") \
        == {"MarkovHeadUnsupported"}
    no_type = tb.specforge_dspark_config()
    del no_type["dflash_config"]["markov_head_type"]
    assert problems(no_type, "dspark", "sglang") == {"MarkovHeadTypeMissing"}
    assert problems(nested(tb.specforge_dspark_config(), markov_rank=0), "dspark", "sglang") == {"MarkovRankMissing"}
    bare = {k: v for k, v in tb.flattened_dspark_config().items() if k not in tb.DSPARK_FIELDS}
    bare["dflash_config"] = {"mask_token_id": tb.MASK_TOKEN_ID, "target_layer_ids": tb.TARGET_LAYER_IDS}
    assert problems(bare, "dspark", "vllm") == {"MarkovRankMissing"}


def test_vllm_dflash_attention():
    anchor = nested(tb.specforge_dflash_config(), sample_from_anchor=True)
    assert problems(anchor, "dflash", "vllm") == {"SampleFromAnchorUnsupported"}
    assert problems(anchor, "dflash", "sglang") == set()
    mixed = {**tb.specforge_dflash_config(), "num_hidden_layers": 2, "sliding_window": 64,
             "layer_types": ["sliding_attention", "full_attention"]}
    assert problems(mixed, "dflash", "vllm", runner="v1") == {"MixedAttentionNeedsV2Runner"}
    assert problems(mixed, "dflash", "vllm") == set()


def test_bundled_dspark():
    v4 = {**TARGET, "model_type": "deepseek_v4", "dspark_block_size": 7, "architectures": ["DeepseekV4ForCausalLM"]}
    for engine in ("vllm", "sglang"):
        assert problems(None, "dspark", engine, target=v4) == set()
        assert problems(None, "dspark", engine) == {"NoBundledDSpark"}
    # SGLang reads the dspark_* keys; vLLM the model_type.
    assert problems(None, "dspark", "vllm", target={**TARGET, "dspark_block_size": 7}) == {"NoBundledDSpark"}
    assert problems(None, "dspark", "sglang", target={**TARGET, "dspark_block_size": 7}) == set()


def test_bundled_dspark_subfolder_on_sglang(tmp_path):
    target = tiny.make_target(tmp_path / "t")
    assert {f.reason for f in preflight(None, target, "sglang", "dspark").problems} == {"NoBundledDSpark"}
    tb.make_block_drafter(target / "dspark", tb.specforge_dspark_config())
    assert preflight(None, target, "sglang", "dspark").ok
    assert not preflight(None, target, "sglang", "dflash").ok  # dflash always needs its drafter


@pytest.mark.parametrize("model_type,arch,reason", [
    ("deepseek_v3", "DeepseekV3ForCausalLM", None), ("glm4_moe", "Glm4MoeForCausalLM", None),
    ("kimi_k2", "DeepseekV3ForCausalLM", "MtpVariantMissing"),
    ("kimi_k25", "KimiK25ForConditionalGeneration", "MtpVariantMissing"),
    ("deepseek_v41", "DeepseekV41ForCausalLM", "MtpVariantRefused"),
])
def test_mtp_target_on_vllm(model_type, arch, reason):
    target = {**TARGET, "model_type": model_type, "architectures": [arch], "num_nextn_predict_layers": 1}
    found = problems(None, "mtp", "vllm", target=target) - {"MtpWeightsMissing"}
    assert found == ({reason} if reason else set())


def test_mtp_target_unknown_to_the_tables_is_a_warning():
    target = {**TARGET, "model_type": "brand_new", "num_nextn_predict_layers": 1}
    assert "MtpVariantUnverified" in warnings(None, "mtp", "vllm", target=target)
    sglang = {**TARGET, "architectures": ["DeepseekV3ForCausalLM"], "num_nextn_predict_layers": 1}
    assert "NextnDraftPathNotDefaulted" not in warnings(None, "mtp", "sglang", target=sglang)
    assert "NextnDraftPathNotDefaulted" in warnings(None, "mtp", "sglang", target={**TARGET, "num_nextn_predict_layers": 1})


def test_whole_preflight_on_tiny_block_checkpoints(tmp_path):
    target = tiny.make_target(tmp_path / "t")
    dflash = tb.make_block_drafter(tmp_path / "dflash", tb.specforge_dflash_config())
    dspark = tb.make_block_drafter(tmp_path / "dspark", tb.specforge_dspark_config())
    assert preflight(dflash, target, "vllm", "dflash").ok and preflight(dflash, target, "sglang", "dflash").ok
    assert preflight(dspark, target, "sglang", "dspark").ok
    refused = preflight(dspark, target, "vllm", "dspark")
    assert refused.reason == "MarkovRankNotTopLevel" and "dflash_config" in refused.message
    assert {f.reason for f in preflight(None, target, "vllm", "dflash").problems} == {"DrafterMissing"}


@pytest.mark.parametrize("drafter,argv", [
    ({"method": "dspark", "numSpeculativeTokens": 3}, []),  # the target's bundled head
    ({"method": "dspark", "model": "/models/ds", "numSpeculativeTokens": 3}, ["--drafter", "/models/ds"]),
    ({"method": "dflash", "model": "/models/df", "numSpeculativeTokens": 3}, ["--drafter", "/models/df"]),
    ({"method": "dspark", "model": "org/ds", "numSpeculativeTokens": 3}, None),  # a hub drafter: nothing to read
])
def test_the_preflight_init_container_for_block_drafters(drafter, argv):
    from tests.support.engine_pods import OPERATOR_IMAGE, example, with_spec
    from drafter_operator.resources.engine import EngineHttp, engine_pod_spec

    serving = with_spec(example("serving-vllm-kimi-k25-eagle3.yaml"), drafter=drafter)
    inits = engine_pod_spec(serving, "img", ["x"], EngineHttp(8000, "/h", "/h"), OPERATOR_IMAGE).get("initContainers")
    if argv is None:
        assert inits is None
        return
    (init,) = inits
    command = init["command"]
    assert command[command.index("--method") + 1] == drafter["method"]
    assert [a for a in command if a == "--drafter"] == argv[:1] and all(a in command for a in argv)
    assert command[command.index("--num-speculative-tokens") + 1] == "3"  # checked against the trained block


def test_cli_drafter_optional_for_dspark_only(tmp_path):
    import io

    from drafter_operator.preflight import cli as pf_cli
    from tests.support.preflight import cli_args

    target = str(tiny.make_target(tmp_path / "t"))
    err = io.StringIO()
    assert pf_cli.main(cli_args(target=target, method="dflash"), io.StringIO(), err) == 2
    assert "--drafter is required for method dflash" in err.getvalue()
    out = io.StringIO()
    assert pf_cli.main(cli_args(target=target, method="dspark"), out, io.StringIO()) == 1  # checked, refused
    assert "NoBundledDSpark" in out.getvalue() and "(target's own DSpark head)" in out.getvalue()
