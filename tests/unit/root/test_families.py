"""The drafter families' table (families.py): one record per speculative method, in the API's order, and every
set of methods derived from it."""

from __future__ import annotations

from typing import get_args

import pytest

from drafter_operator import constants, engines, families
from drafter_operator.engines import sglang, vllm
from drafter_operator.preflight.rules import CHECKS, rules_for


def test_the_table_is_the_apis_literal_in_order():
    assert tuple(f.method for f in families.FAMILIES) + ("none",) == get_args(constants.DrafterMethod)
    assert tuple(f.method for f in families.FAMILIES) == constants.SPECULATIVE_METHODS
    assert families.methods(trained=True) == get_args(constants.TrainedMethod) == constants.TRAINED_METHODS


def test_each_method_has_one_record():
    names = [f.method for f in families.FAMILIES]
    assert len(names) == len(set(names))
    assert all(families.family(name).method == name for name in names)
    assert families.family("none") is None and families.family("medusa") is None


def test_the_method_sets_are_the_records_fields():
    by = {f.method: f for f in families.FAMILIES}
    assert set(constants.METHODS_WITH_MODEL) == {m for m, f in by.items() if f.weights == "own"}
    assert set(constants.METHODS_WITHOUT_MODEL) == {m for m, f in by.items() if f.weights == "text"}
    assert set(constants.METHODS_IN_TARGET) == {m for m, f in by.items() if f.weights in ("target", "own-or-target")}
    assert set(constants.METHODS_OF_TARGET_ONLY) == {m for m, f in by.items() if f.weights == "target"}
    assert set(constants.BLOCK_METHODS) == {m for m, f in by.items() if f.drafting == "block"}
    assert set(constants.LOOKUP_METHODS) == {m for m, f in by.items() if f.drafting == "lookup"}
    assert set(constants.CHECKED_METHODS) == {m for m, f in by.items() if f.preflight}


def test_the_sets_keep_the_order_the_crds_name_them_in():
    """The CRDs' rules and messages list these (tests/unit/api: the generated CRDs are checked in)."""
    assert constants.METHODS_WITH_MODEL == ("eagle3", "eagle", "draftModel", "dflash")
    assert constants.METHODS_WITHOUT_MODEL == ("ngram", "ngramGpu", "suffix")
    assert constants.METHODS_IN_TARGET == ("mtp", "dspark")
    assert constants.BLOCK_METHODS == ("dflash", "dspark")
    assert constants.CHECKED_METHODS == ("eagle3", "eagle", "mtp", "dflash", "dspark")
    assert families.settings_methods() == {"suffix": ("suffix",), "ngram": ("ngram", "ngramGpu"),
                                           "dspark": ("dspark",)}


def test_only_block_drafters_have_block_queries_and_text_drafters_no_checks():
    for f in families.FAMILIES:
        assert f.block_extra_queries == 0 or f.drafting == "block", f.method
        assert not f.preflight or f.weights != "text", f.method
        assert f.preflight_without_drafter is None or f.weights == "own-or-target", f.method
        assert f.settings is None or f.settings in families.SETTINGS_ORDER, f.method
    assert set(families.SETTINGS_ORDER) == {f.settings for f in families.FAMILIES if f.settings}


def test_every_listed_preflight_check_exists():
    listed = {key for f in families.FAMILIES for key in (*f.preflight, *(f.preflight_without_drafter or ()))}
    assert listed == set(CHECKS)


@pytest.mark.parametrize("method", constants.CHECKED_METHODS)
def test_rules_for_gives_the_familys_checks(method):
    f = families.family(method)
    assert rules_for(method) == [CHECKS[key] for key in f.preflight]
    without = f.preflight if f.preflight_without_drafter is None else f.preflight_without_drafter
    assert rules_for(method, bundled=True) == [CHECKS[key] for key in without]


def test_every_engine_spells_every_family_it_does_not_refuse():
    for name, module in engines.ENGINES.items():
        assert set(module.METHOD_SPELLINGS) | set(module.REFUSED_METHODS) == set(constants.SPECULATIVE_METHODS), name
    assert vllm.METHOD_SPELLINGS is vllm.SPECULATIVE_CONFIG_METHODS
    assert sglang.METHOD_SPELLINGS is sglang.SPECULATIVE_ALGORITHMS


def test_the_engines_method_facts_name_families():
    assert set(vllm.METHODS_NEEDING_K) <= set(constants.SPECULATIVE_METHODS)
    assert set(vllm.METHODS_WITHOUT_DYNAMIC) <= set(constants.SPECULATIVE_METHODS)
    assert families.family(vllm.K_FROM_BLOCK_SIZE).drafting == "block"
