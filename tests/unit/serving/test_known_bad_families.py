"""The known-bad catalogue (data/known-bad.yaml) after the drafter families: every entry names methods
spec.drafter.method accepts and preflight rules that exist, and the drafter-layout entries (anyTarget)
match every target of their engine and method until their preflight rule passes on the checkpoint."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drafter_operator import constants
from drafter_operator.controllers.serving.drafter_compatible import PreflightOutcome, known_bad, matching_known_bad, unresolved
from drafter_operator.constants import CHECKED_METHODS
from drafter_operator.preflight.rules import rules_for
from tests.support.spec_doubles import UNSET_LAYOUT

IMAGE = {"vllm": "vllm/vllm-openai:v0.33.0", "sglang": "lmsysorg/sglang:v0.5.23"}


def spec(engine: str, method: str, model: str) -> NS:
    return NS(engine=engine, drafter=NS(method=method, num_speculative_tokens=None, num_steps=None, suffix=None),
              target=NS(model=model, extra_args=None, tensor_parallel_size=8, max_model_len=None, **UNSET_LAYOUT),
              resources=NS(nodes_per_replica=None), placement=None,
              env=None)


def rule_names() -> set[str]:
    names = {"checkpoint-files"}
    for method in CHECKED_METHODS:
        names |= {name for name, _ in rules_for(method)} | {name for name, _ in rules_for(method, bundled=True)}
    return names


def test_every_entry_names_real_methods_rules_and_engines():
    for entry in known_bad():
        assert set(entry.methods) <= set(constants.DRAFTER_METHODS), entry.id
        assert entry.engine in constants.ENGINES, entry.id
        assert set(entry.resolved_by_preflight) <= rule_names(), entry.id


def test_drafter_layout_entries_say_where_the_engine_shows_the_fault():
    layout = [e for e in known_bad() if e.any_target and e.resolved_by_preflight]
    assert {e.id for e in layout} >= {"vllm-dspark-specforge-nested-markov-rank", "vllm-dflash-speculators-served-causal"}
    for entry in layout:
        assert entry.source and entry.resolved_by_preflight, entry.id


@given(model=st.text(min_size=1, max_size=40), architecture=st.one_of(st.none(), st.sampled_from(
    ["Qwen3ForCausalLM", "LlamaForCausalLM", "DeepseekV3ForCausalLM"])))
def test_any_target_entries_match_every_target_of_their_engine_and_method(model, architecture):
    for method, entry_id in (("dspark", "vllm-dspark-specforge-nested-markov-rank"),
                             ("dflash", "vllm-dflash-speculators-served-causal")):
        ids = {e.id for e in matching_known_bad(spec("vllm", method, model), IMAGE["vllm"], architecture)}
        assert entry_id in ids
        assert not {e.id for e in matching_known_bad(spec("sglang", method, model), IMAGE["sglang"], architecture)
                    if e.resolved_by_preflight}


def test_a_passed_rule_rules_the_layout_entry_out():
    entries = matching_known_bad(spec("vllm", "dspark", "/models/qwen3-8b"), IMAGE["vllm"], "Qwen3ForCausalLM")
    passed = PreflightOutcome(status="True", reason="PreflightPassed", message="", failed=False, checked=True,
                              passed_checks=frozenset({"markov-head"}))
    assert entries and not unresolved(entries, passed)
    other = PreflightOutcome(status="True", reason="PreflightPassed", message="", failed=False, checked=True,
                             passed_checks=frozenset({"architecture"}))
    assert unresolved(entries, other) == entries


@pytest.mark.parametrize("model,architecture,hit", [
    ("/models/Kimi-K2-Instruct", None, True), ("/models/kimi-k2.5", None, True),
    ("/m", "KimiK25ForConditionalGeneration", True), ("/models/DeepSeek-V3", None, False),
    ("/m", "DeepseekV3ForCausalLM", False),
])
def test_kimi_mtp_on_vllm(model, architecture, hit):
    ids = {e.id for e in matching_known_bad(spec("vllm", "mtp", model), IMAGE["vllm"], architecture)}
    assert ("vllm-mtp-kimi" in ids) == hit
    assert not matching_known_bad(spec("sglang", "mtp", model), IMAGE["sglang"], architecture)
