"""The acceptance a traffic mix sees, from acceptance per category (engines/traffic_mix.py)."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from drafter_operator.traffic_categories import TRAFFIC_CATEGORIES
from drafter_operator.engines import traffic_mix


def curve(a: float, k: int) -> tuple[float, ...]:
    return tuple(a ** (i + 1) for i in range(k))


per_token = st.floats(0.05, 0.95)
mixes = st.dictionaries(st.sampled_from(TRAFFIC_CATEGORIES), st.floats(0.01, 100.0), min_size=1)


@given(mixes, st.data(), st.integers(1, 8))
def test_the_mix_lies_between_its_categories_and_its_length_is_their_token_weighted_harmonic_mean(mix, data, k):
    per_category = {c: curve(data.draw(per_token), k) for c in mix}
    mixed = traffic_mix.mixed_per_position(per_category, mix)
    assert len(mixed) == k
    for i in range(k):
        low, high = min(p[i] for p in per_category.values()), max(p[i] for p in per_category.values())
        assert low - 1e-12 <= mixed[i] <= high + 1e-12
    lengths = {c: 1 + sum(p) for c, p in per_category.items()}
    assert 1 + sum(mixed) == pytest.approx(traffic_mix.mixed_length(lengths, mix), rel=1e-9)


@given(mixes, st.data(), st.floats(0.1, 10.0))
def test_only_the_shares_matter_and_one_category_alone_is_itself(mix, data, scale):
    per_category = {c: curve(data.draw(per_token), 4) for c in mix}
    scaled = {c: w * scale for c, w in mix.items()}
    assert traffic_mix.mixed_per_position(per_category, scaled) == \
        pytest.approx(traffic_mix.mixed_per_position(per_category, mix), rel=1e-9)
    only = next(iter(mix))
    assert traffic_mix.mixed_per_position(per_category, {only: 1.0}) == pytest.approx(per_category[only])


@given(per_token, per_token)
def test_a_half_and_half_mix_weighs_the_categories_by_their_steps_not_their_tokens(a, b):
    assume(abs(a - b) > 0.05)
    per_category = {"code": curve(a, 5), "chat": curve(b, 5)}
    mixed = 1 + sum(traffic_mix.mixed_per_position(per_category, {"code": 1, "chat": 1}))
    by_tokens = (2 + sum(per_category["code"]) + sum(per_category["chat"])) / 2
    assert mixed < by_tokens  # the category that accepts more takes fewer steps for the same tokens


def test_the_published_drafter_on_an_even_code_and_writing_mix():
    """4.57 on code and 2.64 on writing (speculators#1135): half the tokens each yield 3.34 tokens a step."""
    assert traffic_mix.mixed_length({"code": 4.573, "writing": 2.636}, {"code": 1, "writing": 1}) == \
        pytest.approx(3.344, abs=0.001)


@pytest.mark.parametrize("per_category, mix, message", [
    ({"code": (0.5,)}, {"chat": 1.0}, "no acceptance measured for chat"),
    ({"code": (0.5,)}, {"poetry": 1.0}, "unknown category 'poetry'"),
    ({"code": (0.5,)}, {"code": 0.0}, "the weights must sum to more than 0"),
    ({"code": (0.5,)}, {"code": -1.0}, "the weight of code must be a number >= 0"),
    ({"code": (0.5,), "chat": (0.5, 0.2)}, {"code": 1, "chat": 1}, "must cover the same positions"),
])
def test_a_mix_that_cannot_be_computed_says_why(per_category, mix, message):
    with pytest.raises(ValueError, match=message):
        traffic_mix.mixed_per_position(per_category, mix)


def test_a_benchmarks_category_rows_give_the_mix_at_k():
    rows = [{"category": "code", "perPositionAcceptance": [0.8, 0.6, 0.4]},
            {"category": "chat", "acceptanceLength": 2.0}]  # SGLang: the mean length only
    mixed = traffic_mix.acceptance_for_mix(rows, {"code": 3, "chat": 1}, 3)
    assert len(mixed) == 3 and 0.4 < mixed[0] < 0.8
    assert traffic_mix.acceptance_for_mix(rows, {"math": 1}, 3) is None
