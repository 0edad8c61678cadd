"""The break-even threshold per drafter family (acceptance/break_even.py rate_problem): a length threshold holds for
every family; a rate threshold where the engine's rate is accepted / (drafting steps x k), or, for a family that
drafts fewer, where the engine counts what it drafted and the benchmark recorded its mean draft (vLLM)."""

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
def test_a_variable_draft_family_without_a_mean_draft_refuses_an_auto_rate_with_the_reason_and_the_fix(engine, method):
    why = be.from_last_benchmark(LAST, ("r1",), (engine, method), rate_auto=True)
    assert isinstance(why, str)
    assert method in why and "use minAcceptanceLength: auto" in why
    if engine == "sglang":  # its draft tokens are never counted: no benchmark can give a mean draft
        assert why.startswith("minAcceptanceRate: auto cannot be learned") and engine in why
    else:
        assert "recorded no mean draft" in why and "benchmark the serving again" in why
    # Its length threshold is learned all the same: L* = E / S does not depend on how many tokens were drafted.
    learned = be.from_last_benchmark(LAST, ("r1",), (engine, method), rate_auto=False)
    assert learned.min_length == pytest.approx(3.1 / 1.4 * 1.05)


@pytest.mark.parametrize("method", VARIABLE["vllm"])
def test_on_vllm_a_variable_draft_family_learns_its_rate_from_the_benchmarks_mean_draft(method):
    last = {**LAST, "meanDraftTokens": 2.5}  # k = 4, but 2.5 tokens drafted per drafting step
    learned = be.from_last_benchmark(last, ("r1",), ("vllm", method), rate_auto=True)
    assert isinstance(learned, be.BreakEven)
    # L* = 3.1 / 1.4 = 2.214286 whatever was drafted; + 5% = 2.325; per drafted token (2.325 - 1) / 2.5 = 0.53
    assert learned.min_length == pytest.approx(3.1 / 1.4 * 1.05)
    assert learned.min_rate == pytest.approx(0.53, abs=1e-6)
    assert "mean draft 2.50" in learned.basis()
    # SGLang counts no drafted tokens: the same figure teaches it nothing.
    assert isinstance(be.from_last_benchmark(last, ("r1",), ("sglang", "ngram"), rate_auto=True), str)
    # A mean draft above k is not a measurement of this revision.
    assert "outside (0, 4]" in be.from_last_benchmark({**LAST, "meanDraftTokens": 4.5}, ("r1",), ("vllm", method),
                                                      rate_auto=True)


@given(k=st.integers(1, 16), drawn=st.floats(0.05, 1.0), s=st.floats(0.2, 4.0), frac=st.floats(0.0, 1.0),
       live_draft=st.floats(0.05, 1.0))
def test_at_the_learned_rate_speculation_pays_whatever_the_live_steps_draft(k, drawn, s, frac, live_draft):
    """A step that drafts d' tokens at rate r costs 1 + d' c and yields 1 + r d': at the learned minimum rate it
    yields at least its cost (no slower than no speculation), for any d', not only the benchmark's."""
    mean_draft = max(drawn * k, 1e-3)
    last = {**LAST, "speedup": s, "acceptanceLength": 1.0 + frac * mean_draft, "numSpeculativeTokens": k,
            "meanDraftTokens": mean_draft}
    learned = be.from_last_benchmark(last, ("r1",), ("vllm", "suffix"), rate_auto=True)
    assert isinstance(learned, be.BreakEven), learned
    d = live_draft * k
    assert 1 + learned.min_rate * d >= (1 + d * learned.draft_cost) * (1 - 1e-9)


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
