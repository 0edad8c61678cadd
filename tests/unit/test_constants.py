"""The operator's fixed names (constants.py): spelled once, consistent with each other and with the API."""

from __future__ import annotations

from typing import get_args

from drafter_operator import API_GROUP, API_VERSION, constants
from drafter_operator.api.common import ENGINES as API_ENGINES
from drafter_operator.api.serving import DRAFTER_METHODS as API_METHODS
from drafter_operator.api.serving import METHODS_WITH_MODEL as API_METHODS_WITH_MODEL
from drafter_operator import engines
from drafter_operator.engines import sglang, vllm


def test_the_package_root_re_exports_the_group_and_version():
    assert (API_GROUP, API_VERSION) == (constants.API_GROUP, constants.API_VERSION)
    assert constants.API_GROUP_VERSION == f"{API_GROUP}/{API_VERSION}"


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


def test_the_api_lists_agree_with_the_one_source():
    """Until the API imports them (the lead switches api/), its copies must say the same."""
    assert tuple(API_ENGINES) == constants.ENGINES
    assert tuple(API_METHODS) == constants.DRAFTER_METHODS
    assert tuple(API_METHODS_WITH_MODEL) == constants.METHODS_WITH_MODEL


def test_each_engine_translates_every_speculative_method():
    assert set(vllm.SPECULATIVE_METHODS) == set(constants.SPECULATIVE_METHODS)
    assert set(sglang.SPECULATIVE_ALGORITHMS) == set(constants.SPECULATIVE_METHODS)


def test_the_engine_modules_are_the_engines_in_order():
    assert tuple(engines.ENGINES) == constants.ENGINES
    assert tuple(engines.DEFAULT_IMAGES) == constants.ENGINES
