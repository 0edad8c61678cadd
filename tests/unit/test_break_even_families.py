"""The break-even threshold per drafter family (acceptance/break_even.py rate_problem): a length threshold holds for
every family; a rate threshold only where the engine's rate is accepted / (drafting steps x k)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drafter_operator import constants
from drafter_operator.acceptance import break_even as be

LAST = {"name": "gate-1", "speedup": 1.4, "acceptanceLength": 3.1, "numSpeculativeTokens": 4, "revision": "r1"}
# Families whose every drafting step drafts k tokens (vLLM) or whose rate we derive with k (SGLang's chains and
# block drafters): the rate threshold is (L - 1) / k.
FIXED = {"vllm": ("eagle3", "eagle", "mtp", "dflash", "draftModel"),
         "sglang": ("eagle3", "eagle", "mtp", "dflash", "dspark", "draftModel")}
VARIABLE = {"vllm": ("suffix", "ngram", "ngramGpu", "dspark"), "sglang": ("ngram",)}


def test_every_family_is_classified_on_every_engine_that_serves_it():
    methods = set(constants.DrafterMethod.__args__) - {"none"}
    assert set(FIXED["vllm"]) | set(VARIABLE["vllm"]) == methods
    # SGLang has no suffix and no GPU n-gram proposer (refused at apply).
    assert set(FIXED["sglang"]) | set(VARIABLE["sglang"]) == methods - {"suffix", "ngramGpu"}


@pytest.mark.parametrize("engine,method", [(e, m) for e, ms in FIXED.items() for m in ms])
def test_a_fixed_draft_family_learns_a_rate(engine, method):
    learned = be.from_last_benchmark(LAST, ("r1",), (engine, method), rate_auto=True)
    assert isinstance(learned, be.BreakEven)
    # L* = E / S = 3.1 / 1.4 = 2.214286; + 5% = 2.325; per drafted token (2.325 - 1) / 4 = 0.33125
    assert learned.min_rate == pytest.approx(0.33125, abs=1e-6)


@pytest.mark.parametrize("engine,method", [(e, m) for e, ms in VARIABLE.items() for m in ms])
def test_a_variable_draft_family_refuses_an_auto_rate_with_the_reason_and_the_fix(engine, method):
    why = be.from_last_benchmark(LAST, ("r1",), (engine, method), rate_auto=True)
    assert isinstance(why, str)
    assert why.startswith("minAcceptanceRate: auto cannot be learned")
    assert method in why and engine in why and "use minAcceptanceLength: auto" in why
    # Its length threshold is learned all the same: L* = E / S does not depend on how many tokens were drafted.
    learned = be.from_last_benchmark(LAST, ("r1",), (engine, method), rate_auto=False)
    assert learned.min_length == pytest.approx(3.1 / 1.4 * 1.05)


def test_sglang_ngram_names_the_nominal_tree_denominator():
    assert "nominal draft tree" in be.rate_problem("sglang", "ngram")
    assert be.rate_problem("vllm", "eagle3") is None
    assert be.rate_problem(None, None) is None  # no family known: the old behaviour, (L - 1) / k


@given(k=st.integers(1, 16), s=st.floats(0.2, 4.0), frac=st.floats(0.0, 1.0),
       engine=st.sampled_from(["vllm", "sglang"]), method=st.sampled_from(sorted(constants.DrafterMethod.__args__)))
def test_the_length_threshold_is_the_same_for_every_family(k, s, frac, engine, method):
    last = {**LAST, "speedup": s, "acceptanceLength": 1.0 + frac * k, "numSpeculativeTokens": k}
    plain = be.from_last_benchmark(last, ("r1",))
    by_family = be.from_last_benchmark(last, ("r1",), (engine, method), rate_auto=False)
    assert by_family.min_length == pytest.approx(plain.min_length)
    assert by_family.min_length == pytest.approx(last["acceptanceLength"] / s * 1.05) or plain.draft_cost == 0.0
    with_rate = be.from_last_benchmark(last, ("r1",), (engine, method), rate_auto=True)
    assert isinstance(with_rate, str) == (method in VARIABLE[engine])
