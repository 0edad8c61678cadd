"""The emulator's acceptance by traffic category: the profile's factors, the draws (the classifier it reads a request's
category with is the operator's: tests/unit/capture/test_capture_categorize.py)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drafter_testbed.emulator.model import Decoder, Settings
from drafter_testbed.emulator.cmdline import parse_command_line
from drafter_testbed.emulator.engine import EmulatedEngine
from drafter_testbed.emulator.profiles import ProfileError, load_profile, parse_profile
from tests.support.emulator_server import vllm_argv


def test_a_request_offering_tools_is_a_tool_call_and_the_engine_classifies_only_when_categories_are_on():
    body = {"model": "m", "messages": [{"role": "user", "content": "What's the weather in Oslo?"}], "max_tokens": 8}
    tools = {**body, "tools": [{"type": "function", "function": {"name": "weather", "parameters": {}}}]}
    on = EmulatedEngine(parse_command_line(vllm_argv()), Settings(category_acceptance=True), load_profile())
    off = EmulatedEngine(parse_command_line(vllm_argv()), Settings(), load_profile())
    assert (on.traffic_category(body), on.traffic_category(tools)) == ("chat", "toolCalls")
    assert on.rejection_factor("toolCalls") == 0.89 and on.rejection_factor(None) == 1.0
    assert off.traffic_category(tools) is None and off.rejection_factor("nonEnglish") == 1.0


def test_the_packaged_profile_orders_the_categories_as_the_published_drafter_does():
    profile = load_profile()
    factor = profile.rejection_factor
    assert factor("code") < factor("math") < factor("toolCalls") < factor("chat") <= factor("writing") < factor("nonEnglish")
    assert factor(None) == 1.0 and factor("longContext") == 1.0


def _document(categories):
    return {"default": {"vllm": 0.7, "sglang": 0.7}, "categories": categories}


@pytest.mark.parametrize("categories, message", [
    ({"poetry": 1.0}, "categories: unknown category 'poetry': use one of code"),
    ({"code": -0.5}, r"categories.code: a rejection factor is >= 0"),
    ({"code": "low"}, r"categories.code: expected a number"),
    (["code"], "categories: expected a mapping of traffic category -> rejection factor"),
])
def test_a_bad_categories_section_names_the_key_and_the_fix(categories, message):
    with pytest.raises(ProfileError, match=message):
        parse_profile(_document(categories), "p.yaml")


def test_category_acceptance_is_off_unless_the_environment_turns_it_on():
    assert Settings.from_env({}).category_acceptance is False
    assert Settings.from_env({"DRAFTER_EMULATOR_CATEGORIES": "1"}).category_acceptance is True
    with pytest.raises(ValueError, match="DRAFTER_EMULATOR_CATEGORIES='maybe' must be 1 or 0"):
        Settings.from_env({"DRAFTER_EMULATOR_CATEGORIES": "maybe"})


def _decoder(acceptance, seed, decay=1.0):
    from drafter_testbed.emulator.model import Family
    return Decoder(5, acceptance, target_step_ms=10.0, draft_cost=0.3, rng=random.Random(seed), family=Family(decay))


@given(st.floats(0.0, 1.0), st.integers(0, 10**6), st.sampled_from((1.0, 0.8, 0.5)))
def test_a_neutral_factor_draws_exactly_as_before(acceptance, seed, decay):
    plain, neutral = _decoder(acceptance, seed, decay), _decoder(acceptance, seed, decay)
    assert [plain.draw(5, 100) for _ in range(50)] == [neutral.draw(5, 100, 1.0) for _ in range(50)]


def test_a_lower_rejection_factor_accepts_more_as_the_formula_says():
    def mean_accepted(rejection):
        decoder = _decoder(0.7, 7)
        return sum(decoder.draw(5, 0, rejection)[1] for _ in range(20000)) / 20000
    expected = {f: sum((1 - 0.3 * f) ** i for i in range(1, 6)) for f in (0.6, 1.0, 1.5)}
    for f, e in expected.items():
        assert mean_accepted(f) == pytest.approx(e, rel=0.03)
    assert _decoder(0.5, 1).draw(5, 0, 2.5) == (5, 0)  # rejected every time: never below probability 0


def test_the_packaged_factors_reproduce_the_published_acceptance_lengths():
    """Calibration anchor (docs/emulator-model.md): at the published drafter's mean per-token acceptance with 8
    drafts, the factors give 4.57 on code and 2.64 on writing (its figures: 4.573 and 2.636)."""
    profile = load_profile()
    def length(category):
        a = 1 - (1 - 0.6945) * profile.rejection_factor(category)
        return sum(a ** i for i in range(9))
    assert length("code") == pytest.approx(4.573, abs=0.02) and length("writing") == pytest.approx(2.636, abs=0.03)
    assert length("math") == pytest.approx(4.436, abs=0.02) and length("toolCalls") == pytest.approx(3.462, abs=0.02)


def _engine_for(drafter: str) -> EmulatedEngine:
    import json

    spec = json.dumps({"method": "eagle3", "model": drafter, "num_speculative_tokens": 5})
    argv = ["vllm", "serve", "/models/Kimi-K2.5", "--speculative-config", spec]
    return EmulatedEngine(parse_command_line(argv), Settings(category_acceptance=True), load_profile())


def test_a_drafters_own_categories_replace_the_profiles_for_those_it_names_only():
    profile = load_profile()
    code_trained = _engine_for("/models/drafters/kimi-k25-eagle3-code")
    retrained = _engine_for("/models/drafters/kimi-k25-eagle3-from-traffic-r1")
    other = _engine_for("/models/drafters/kimi-k25-eagle3-regenerated")
    assert code_trained.acceptance_source == "profile:code-trained-kimi-k2.5-eagle3"
    assert retrained.acceptance_source == "profile:retrained-from-traffic"
    assert code_trained.rejection_factor("nonEnglish") == 3.0 and retrained.rejection_factor("nonEnglish") == 1.0
    assert other.rejection_factor("nonEnglish") == profile.rejection_factor("nonEnglish") == 1.5
    for category in ("code", "chat", "math"):  # not named by the entries: the profile's
        assert code_trained.rejection_factor(category) == retrained.rejection_factor(category) \
            == profile.rejection_factor(category)


def test_the_retraining_storys_drafters_give_the_lengths_their_descriptions_state():
    """docs/demo.md's retraining story: at k = 5, E = (1 - a^6) / (1 - a) with a = 1 - (1 - p) factor."""
    def length(drafter: str, category: str) -> float:
        engine = _engine_for(drafter)
        a = 1 - (1 - engine.decoder.acceptance) * engine.rejection_factor(category)
        return sum(a ** i for i in range(6))
    assert length("/models/drafters/kimi-k25-eagle3-code", "code") == pytest.approx(4.8, abs=0.05)
    assert length("/models/drafters/kimi-k25-eagle3-code", "nonEnglish") == pytest.approx(2.2, abs=0.05)
    assert length("/models/drafters/kimi-k25-eagle3-from-traffic-r1", "nonEnglish") == pytest.approx(4.6, abs=0.05)


def test_a_bad_drafter_categories_entry_names_the_entry():
    document = {**_document({"code": 0.6}),
                "drafters": [{"name": "x", "acceptance": {"vllm": 0.8}, "categories": {"klingon": 2.0}}]}
    with pytest.raises(ProfileError, match=r"drafters\[0\]\.categories: unknown category 'klingon'"):
        parse_profile(document, "p.yaml")
