"""DrafterTraining's spec.method: DFlash and DSpark drafters trained with speculators, promoted as that family.

The frameworks' own parsers and a real CPU training run hold the same renders in
tests/contract/test_training_contract.py; these are the rules, the renders and the promotion as pure logic.
"""

from __future__ import annotations

import json

import pytest
import yaml

from drafter_operator.api import DrafterServing
from drafter_operator.api.training import DrafterTrainingSpec
from drafter_operator.controllers.training.promotion import promoted_drafter, promotion_patch, serving_problems
from drafter_operator.training import RenderOptions, TrainingPaths, render
from drafter_operator.training.speculators import base_in_speculators_format
from tests.support.training_renders import SEED, flag
from tests.support.training_families import OPTIONS, spec_of

EXAMPLES = SEED.parent


def train_command(spec: DrafterTrainingSpec, options: RenderOptions = OPTIONS):
    stages = {stage.name: stage for stage in render(spec, TrainingPaths(), options)}
    return stages["Train"].commands


@pytest.mark.parametrize("method", ["eagle3", "dflash", "dspark"])
def test_the_method_is_the_speculator_type_and_the_rest_of_the_pipeline_is_shared(method: str) -> None:
    spec = spec_of(method=method)
    (train,) = train_command(spec)
    assert flag(train.argv, "--speculator-type") == method
    eagle3 = {stage.name: stage for stage in render(spec_of(), TrainingPaths(), OPTIONS)}
    stages = {stage.name: stage for stage in render(spec, TrainingPaths(), OPTIONS)}
    # The same prepared data and hidden states: only Train differs between the families.
    for name in ("Generate", "Extract", "Export"):
        assert stages[name] == eagle3[name]


def test_dflash_and_dspark_fuse_any_number_of_layers_eagle3_three() -> None:
    five = {"layers": [1, 15, 30, 45, 58], "storage": {"size": "1Ti"}}
    spec = spec_of(method="dflash", hiddenStates=five)
    (train,) = train_command(spec)
    assert train.argv[train.argv.index("--target-layer-ids") + 1:][:5] == ("1", "15", "30", "45", "58")
    with pytest.raises(ValueError, match="spec.hiddenStates.layers must name three layers"):
        spec_of(method="eagle3", hiddenStates=five)
    with pytest.raises(ValueError, match="three layers"):
        spec_of(hiddenStates={"layers": [2, 30], "storage": {"size": "1Ti"}})


@pytest.mark.parametrize("method", ["dflash", "dspark"])
def test_specforge_is_refused_for_the_dflash_family_naming_the_fix(method: str) -> None:
    with pytest.raises(ValueError, match="set framework: speculators"):
        spec_of(method=method, framework="specforge")
    assert spec_of(method=method).framework == "speculators"


SPECULATORS_DFLASH = {"speculators_model_type": "dflash", "architectures": ["DFlashDraftModel"]}
ZLAB_DFLASH = {"architectures": ["DFlashDraftModel"], "block_size": 16,
               "dflash_config": {"target_layer_ids": [1, 15, 30, 45, 58]}}


def test_a_research_format_dflash_base_is_converted_with_its_layers() -> None:
    spec = spec_of(method="dflash", baseDrafter="z-lab/Kimi-K2.5-DFlash")
    convert, train = train_command(spec, RenderOptions(**{**OPTIONS.__dict__, "base_drafter_config": ZLAB_DFLASH}))
    assert convert.argv[:6] == ("speculators", "convert", "z-lab/Kimi-K2.5-DFlash", "--algorithm", "dflash",
                                "--verifier")
    assert json.loads(flag(convert.argv, "--algorithm-kwargs")) == {"aux_hidden_state_layer_ids": [2, 30, 58]}
    assert flag(train.argv, "--from-pretrained") == "/work/base_drafter"


@pytest.mark.parametrize("method", ["eagle3", "dflash", "dspark"])
def test_a_speculators_base_of_the_same_family_is_loaded_as_it_is(method: str) -> None:
    base = "/models/drafters/earlier"
    spec = spec_of(method=method, baseDrafter=base)
    options = RenderOptions(**{**OPTIONS.__dict__, "base_drafter_config": {"speculators_model_type": method}})
    assert base_in_speculators_format(spec, options)
    (train,) = train_command(spec, options)  # no convert: speculators' convert refuses its own format
    assert flag(train.argv, "--from-pretrained") == base
    assert "--draft-vocab-size" not in train.argv


def test_a_base_of_another_family_or_a_dspark_base_speculators_cannot_convert_is_refused_naming_the_fix() -> None:
    spec = spec_of(method="dspark", baseDrafter="/models/drafters/earlier")
    with pytest.raises(ValueError, match="is a dflash drafter and spec.method is dspark.*set method: dflash"):
        train_command(spec, RenderOptions(**{**OPTIONS.__dict__, "base_drafter_config": SPECULATORS_DFLASH}))
    with pytest.raises(ValueError, match="converts only eagle3 and dflash drafters.*unset baseDrafter"):
        train_command(spec, RenderOptions(**{**OPTIONS.__dict__, "base_drafter_config": ZLAB_DFLASH}))


def serving(example: str) -> dict:
    body = yaml.safe_load((EXAMPLES / example).read_text())
    body["metadata"]["namespace"] = "team"
    return body


def promoting(method: str, serving_name: str) -> DrafterTrainingSpec:
    return spec_of(method=method, promote={"servingRef": {"name": serving_name}})


def test_a_trained_dflash_drafter_is_promoted_as_dflash_keeping_the_depth_the_serving_chose() -> None:
    vllm = serving("serving-vllm-kimi-k25-eagle3.yaml")  # eagle3 with numSpeculativeTokens 5
    spec = promoting("dflash", vllm["metadata"]["name"])
    assert serving_problems(spec, vllm) == []
    patch = promotion_patch(vllm, spec, "kimi-dflash (generation 1)", 40.0, "sha256:" + "cd" * 32)
    drafter = patch["spec"]["drafter"]
    assert drafter["method"] == "dflash" and drafter["model"] == spec.output.path
    assert drafter["numSpeculativeTokens"] == 5  # vLLM's dflash needs k; the serving's own is kept
    promoted = {**vllm, "spec": {**vllm["spec"], "drafter": {k: v for k, v in drafter.items() if v is not None}}}
    assert DrafterServing.model_validate(promoted).spec.drafter.method == "dflash"


def test_sglang_tree_settings_stay_within_the_family_only() -> None:
    sglang = serving("serving-sglang-kimi-k25-eagle3.yaml")  # eagle3, numSteps 3, eagleTopk 1, numDraftTokens 4
    same = promoted_drafter(sglang, promoting("eagle3", sglang["metadata"]["name"]), None)
    assert (same["numSteps"], same["eagleTopk"], same["numDraftTokens"]) == (3, 1, 4)
    other = promoted_drafter(sglang, promoting("dspark", sglang["metadata"]["name"]), None)
    assert other["method"] == "dspark"
    assert other["numSteps"] is None and other["eagleTopk"] is None and other["numDraftTokens"] is None


def test_a_serving_that_cannot_serve_the_trained_family_is_a_problem_before_any_stage_runs() -> None:
    vllm = serving("serving-vllm-kimi-k25-eagle3.yaml")
    del vllm["spec"]["drafter"]["numSpeculativeTokens"]  # vLLM's eagle3 default; its dflash has none
    vllm["spec"]["drafter"]["method"] = "mtp"
    vllm["spec"]["drafter"].pop("model")
    spec = promoting("dflash", vllm["metadata"]["name"])
    (problem,) = serving_problems(spec, vllm)
    assert problem.startswith("spec.method: DrafterServing 'kimi-k25-vllm-eagle3' could not serve the trained dflash")
    assert "numSpeculativeTokens" in problem


@pytest.mark.parametrize("method", ["eagle3", "dflash", "dspark"])
def test_a_speculators_drafter_is_never_promoted_into_sglang_which_cannot_load_its_format(method: str) -> None:
    sglang = serving("serving-sglang-kimi-k25-eagle3.yaml")
    problems = serving_problems(promoting(method, sglang["metadata"]["name"]), sglang)
    assert any("runs SGLang, which cannot load a speculators checkpoint" in p and "promote into a vLLM serving" in p
               for p in problems), problems
