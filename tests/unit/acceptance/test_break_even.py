"""The break-even threshold `auto` learns from a benchmark (acceptance/break_even.py), against hand-computed
values and the speculative-decoding model of engines/speedup.py."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drafter_operator.api.serving import AcceptanceSpec
from drafter_operator.engines import speedup as model
from drafter_operator.acceptance import verdict as a
from drafter_operator.acceptance import break_even as be

SEED = be.BenchmarkFigures(name="kimi-gate-abc", speedup=0.66, acceptance_length=1.75, num_speculative_tokens=5)


def test_the_seed_by_hand():
    # c = (1.75 / 0.66 - 1) / 5 = (2.651515 - 1) / 5 = 0.330303; L* = 1 + 5 c = 2.651515 (= E / S)
    learned = be.learn(SEED, "r1")
    assert learned.draft_cost == pytest.approx(0.330303, abs=1e-6)
    assert learned.break_even_length == pytest.approx(2.651515, abs=1e-6)
    # + 5%: 2.651515 x 1.05 = 2.784091; per drafted token (2.784091 - 1) / 5 = 0.356818
    assert learned.min_length == pytest.approx(2.784091, abs=1e-6)
    assert learned.min_rate == pytest.approx(0.356818, abs=1e-6)
    assert learned.basis() == ("break-even 2.65 + 5%, from benchmark kimi-gate-abc: 0.66x at length 1.75, k=5, "
                               "draft cost 0.33")
    # The model's calibration (c = 0.33) is what the seed's benchmark gives back.
    assert learned.draft_cost == pytest.approx(model.DEFAULT_DRAFT_COST, abs=0.001)
    assert learned.break_even_length == pytest.approx(model.break_even_length(5, learned.draft_cost))


def test_a_second_hand_computed_benchmark():
    # 0.64x at length 1.76, k=5: c = (1.76 / 0.64 - 1) / 5 = 0.35, L* = 2.75, threshold 2.8875
    learned = be.learn(be.BenchmarkFigures("g", 0.64, 1.76, 5))
    assert (learned.draft_cost, learned.break_even_length) == (pytest.approx(0.35), pytest.approx(2.75))
    assert learned.min_length == pytest.approx(2.8875)


def test_the_model_round_trips():
    """A benchmark the model itself predicts gives back the model's draft cost and break-even."""
    for a_tok, k, c in [(0.432, 5, 0.33), (0.8, 3, 0.05), (0.6, 7, 0.1)]:
        p = model.predict(a_tok, k, c)
        learned = be.learn(be.BenchmarkFigures("m", p.speedup, p.mean_acceptance_length, k))
        assert learned.draft_cost == pytest.approx(c)
        assert learned.break_even_length == pytest.approx(model.break_even_length(k, c))
        assert be.rate_for_length(learned.break_even_length, k) == pytest.approx(model.break_even_rate(k, c))


def test_a_benchmark_faster_than_its_acceptance_allows_means_free_drafts_not_negative_cost():
    learned = be.learn(be.BenchmarkFigures("g", 2.0, 1.5, 4))  # E / S = 0.75 < 1
    assert learned.draft_cost == 0.0 and learned.break_even_length == 1.0


@pytest.mark.parametrize("figures", [
    be.BenchmarkFigures("g", 0.0, 1.75, 5), be.BenchmarkFigures("g", 0.66, 0.9, 5),
    be.BenchmarkFigures("g", 0.66, 6.5, 5), be.BenchmarkFigures("g", 0.66, 1.75, 0),
    be.BenchmarkFigures("g", float("nan"), 1.75, 5),
])
def test_figures_that_cannot_give_a_threshold_are_refused(figures):
    with pytest.raises(ValueError):
        be.learn(figures)


ks = st.integers(1, 16)


@given(k=ks, e=st.floats(1.0, 17.0), s=st.floats(0.05, 5.0))
def test_break_even_is_at_least_one(k, e, s):
    e = min(e, k + 1.0)
    learned = be.learn(be.BenchmarkFigures("g", s, e, k))
    assert learned.break_even_length >= 1.0 and learned.draft_cost >= 0.0
    assert learned.min_length >= learned.break_even_length


@given(k=ks, e=st.floats(1.0, 17.0))
def test_a_benchmark_at_speedup_one_breaks_even_at_its_own_length(k, e):
    e = min(e, k + 1.0)
    assert be.learn(be.BenchmarkFigures("g", 1.0, e, k)).break_even_length == pytest.approx(e)


@given(k=ks, c1=st.floats(0.0, 2.0), c2=st.floats(0.0, 2.0))
def test_break_even_grows_with_the_draft_cost(k, c1, c2):
    lo, hi = sorted((c1, c2))
    assert model.break_even_length(k, lo) <= model.break_even_length(k, hi)


@given(k=ks, e=st.floats(1.0, 17.0), s1=st.floats(0.05, 5.0), s2=st.floats(0.05, 5.0))
def test_a_faster_benchmark_lowers_the_threshold(k, e, s1, s2):
    e, (slow, fast) = min(e, k + 1.0), sorted((s1, s2))
    assert be.learn(be.BenchmarkFigures("g", fast, e, k)).min_length <= \
        be.learn(be.BenchmarkFigures("g", slow, e, k)).min_length + 1e-12


def test_from_last_benchmark_only_learns_from_the_active_revision_with_full_figures():
    last = {"name": "kimi-gate-r1", "speedup": 0.66, "acceptanceLength": 1.75, "numSpeculativeTokens": 5,
            "revision": "r1"}
    learned = be.from_last_benchmark(last, ("r1",))
    assert isinstance(learned, be.BreakEven) and learned.revision == "r1"
    assert "no benchmark" in be.from_last_benchmark(None, ("r1",))
    assert "not the active revision r2" in be.from_last_benchmark(last, ("r2",))
    assert "without a baseline" in be.from_last_benchmark({**last, "speedup": None}, ("r1",))
    assert "no mean acceptance length" in be.from_last_benchmark({**last, "acceptanceLength": None}, ("r1",))
    assert "k = None" in be.from_last_benchmark({**last, "numSpeculativeTokens": None}, ("r1",))
    # a revision running the schedule learned from r1's sweep: same drafter, k and draft cost
    learned = be.from_last_benchmark(last, ("r1-scheduled", "r1"))
    assert isinstance(learned, be.BreakEven) and learned.revision == "r1"


def test_a_scheduled_revision_learns_from_its_static_revision_only_while_it_is_the_one_scheduled():
    from drafter_operator.controllers.serving.revisions import measured_as
    block = {"source": "benchmark sweep", "revision": "static", "scheduledRevision": "scheduled"}
    assert measured_as("scheduled", block) == ("scheduled", "static")
    assert measured_as("older", block) == ("older",)  # mid-swap from another drafter: only its own
    assert measured_as("static", block) == ("static",)
    assert measured_as("static", {"source": "static", "revision": "static"}) == ("static",)
    assert measured_as(None, block) == ()


def test_thresholds_take_the_learned_values_and_the_verdict_cites_the_benchmark():
    learned = be.learn(SEED, "r1")
    spec = AcceptanceSpec.model_validate({"minAcceptanceLength": "auto", "minAcceptanceRate": "auto", "for": "0s"})
    with pytest.raises(ValueError):
        a.Thresholds.from_spec(spec)  # never a made-up threshold
    t = a.Thresholds.from_spec(spec, learned)
    assert (t.min_length, t.min_rate) == (pytest.approx(2.784091, abs=1e-6), pytest.approx(0.356818, abs=1e-6))
    mixed = a.Thresholds.from_spec(AcceptanceSpec.model_validate({"minAcceptanceLength": "auto",
                                                                  "minAcceptanceRate": "0.4"}), learned)
    assert (mixed.min_rate, mixed.auto_rate, mixed.auto_length) == (0.4, False, True)
    numbers = a.Thresholds.from_spec(AcceptanceSpec.model_validate({"minAcceptanceRate": "0.4"}), learned)
    assert numbers.learned is None and numbers.min_length is None

    from drafter_operator.engines import metrics as m
    window = m.AcceptanceWindow(engine="vllm", drafts=1000, draft_tokens=5000, accepted_tokens=690,
                                generation_tokens=1690, acceptance_rate=0.138, mean_acceptance_length=1.69,
                                rate_source="counters")
    verdict = a.evaluate(None, a.AcceptanceSample(at=0.0, window=window),
                         a.Thresholds.from_spec(AcceptanceSpec.model_validate({"minAcceptanceLength": "auto",
                                                                               "for": "0s"}), learned))
    assert (verdict.status, verdict.reason) == ("True", a.LOW_LENGTH)
    assert ("mean acceptance length 1.69 (1000 drafts) < 2.78 (break-even 2.65 + 5%, from benchmark "
            "kimi-gate-abc: 0.66x at length 1.75, k=5, draft cost 0.33): speculation no longer pays") in verdict.message
    rate_verdict = a.evaluate(None, a.AcceptanceSample(at=0.0, window=window), t)
    assert rate_verdict.reason == a.LOW_RATE and "13.8%" in rate_verdict.message and "< 35.7% (break-even 2.65" in \
        rate_verdict.message


def test_the_status_block():
    learned = be.learn(SEED, "r1")
    auto = AcceptanceSpec.model_validate({"minAcceptanceLength": "auto", "minAcceptanceRate": "auto"})
    assert be.status_block(auto, learned) == {
        "source": "benchmark kimi-gate-abc", "minAcceptanceRate": 0.3568, "minAcceptanceLength": 2.7841,
        "draftCost": 0.3303, "breakEvenLength": 2.6515, "margin": 0.05, "revision": "r1"}
    assert be.status_block(auto, None) is None
    assert be.status_block(AcceptanceSpec.model_validate({"minAcceptanceRate": "0.4"}), None) == {
        "source": "spec", "minAcceptanceRate": 0.4}


def test_auto_passes_the_api_and_its_rules_and_other_words_do_not():
    from pydantic import ValidationError

    from drafter_operator.api import DrafterServingSpec

    base = {"engine": "vllm", "target": {"model": "m/x"}, "drafter": {"method": "ngram", "numSpeculativeTokens": 3}}
    for acceptance in ({"minAcceptanceRate": "auto"}, {"minAcceptanceLength": "auto"},
                       {"minAcceptanceLength": "auto", "minAcceptanceRate": "0.3"}):
        DrafterServingSpec.model_validate({**base, "acceptance": acceptance})
    for acceptance in ({"minAcceptanceRate": "Auto"}, {"minAcceptanceLength": "automatic"}, {"minAcceptanceLength": "5"}):
        with pytest.raises(ValidationError):
            DrafterServingSpec.model_validate({**base, "acceptance": acceptance})
