"""The operator's fixed names (constants.py): spelled once, consistent with each other and with the API."""

from __future__ import annotations

from typing import get_args

from drafter_operator import constants, engines
from drafter_operator.api import DrafterBenchmark, DrafterServing, DrafterTraining
from drafter_operator.api.serving import DrafterSpec
from drafter_operator.engines import sglang, vllm


def test_the_group_and_version_make_the_group_version():
    assert constants.API_GROUP_VERSION == f"{constants.API_GROUP}/{constants.API_VERSION}" == "drafter.dev/v1alpha1"


def test_every_operator_key_is_under_the_group_and_distinct():
    keys = [value for name, value in vars(constants).items()
            if name.endswith(("_LABEL", "_ANNOTATION")) and value.startswith(constants.OPERATOR_LABEL_PREFIX)]
    assert len(keys) >= 15
    assert len(keys) == len(set(keys))


def test_engine_and_method_lists_are_their_literals():
    assert constants.ENGINES == get_args(constants.Engine) == ("vllm", "sglang")
    assert constants.DRAFTER_METHODS == get_args(constants.DrafterMethod)
    assert "none" not in constants.SPECULATIVE_METHODS
    assert set(constants.SPECULATIVE_METHODS) | {"none"} == set(constants.DRAFTER_METHODS)
    assert set(constants.METHODS_WITH_MODEL) <= set(constants.SPECULATIVE_METHODS)
    model_classes = (constants.METHODS_WITH_MODEL, constants.METHODS_WITHOUT_MODEL, constants.METHODS_IN_TARGET)
    # Each speculative method has exactly one model rule: required, forbidden, or optional (the target's own).
    assert sorted(m for methods in model_classes for m in methods) == sorted(constants.SPECULATIVE_METHODS)


def test_the_api_models_take_their_literals_from_constants():
    """The models' fields are typed by the constants (no second list lives in api/: tests/unit/policy/test_one_home.py)."""
    for kind in (DrafterServing, DrafterBenchmark, DrafterTraining):
        assert kind.model_fields["api_version"].annotation is constants.ApiGroupVersion
        assert kind.model_fields["api_version"].default == constants.API_GROUP_VERSION
    assert DrafterSpec.model_fields["method"].annotation is constants.DrafterMethod


def test_each_engine_translates_every_speculative_method():
    """Every method is either translated by an engine or explicitly refused for it (the CRD refuses it), never both."""
    translations = {"vllm": vllm.SPECULATIVE_CONFIG_METHODS, "sglang": sglang.SPECULATIVE_ALGORITHMS}
    assert set(translations) == set(constants.ENGINES) == set(engines.METHODS_REFUSED_BY_ENGINE)
    for engine, table in translations.items():
        refused = set(engines.METHODS_REFUSED_BY_ENGINE[engine])
        assert not refused & set(table), engine
        assert set(table) | refused == set(constants.SPECULATIVE_METHODS), engine


def test_the_engines_spellings_are_in_their_flag_tables():
    """Each translation is a method the pinned engine's own parser knows (its flag table, generated from it)."""
    from drafter_operator.engines import flags

    vllm_methods = flags.table("vllm").extras["speculative_config"]["methods"]
    assert set(vllm.SPECULATIVE_CONFIG_METHODS.values()) <= set(vllm_methods)
    sglang_algorithms = flags.table("sglang").extras["speculative_algorithms"]
    known = set(sglang_algorithms["members"]) | set(sglang_algorithms["aliases"])
    assert set(sglang.SPECULATIVE_ALGORITHMS.values()) <= known


def test_the_engine_modules_are_the_engines_in_order():
    assert tuple(engines.ENGINES) == constants.ENGINES
    assert tuple(engines.DEFAULT_IMAGES) == constants.ENGINES
