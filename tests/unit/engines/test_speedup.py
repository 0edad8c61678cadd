"""The speculative-decoding model (engines/speedup.py): calibration figures and algebraic properties."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drafter_operator.engines import speedup as sp

acceptances = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
interior = st.floats(min_value=0.001, max_value=0.999, allow_nan=False)
ks = st.integers(min_value=1, max_value=12)
costs = st.floats(min_value=0.0, max_value=2.0, allow_nan=False)


# ----------------------------------------------------------------------------- calibration (the seed)

def test_baseline_is_82_5_tokens_per_second():
    assert sp.tokens_per_second(0.0, 0) == pytest.approx(82.5, abs=0.01)
    assert sp.predict(0.0, 0).speedup == 1.0


def test_seed_vllm_drafter_gives_15_percent_and_0_66x():
    p = sp.predict(0.432, 5)
    assert p.acceptance_rate == pytest.approx(0.150, abs=0.001)
    assert p.mean_acceptance_length == pytest.approx(1.75, abs=0.002)
    assert p.speedup == pytest.approx(0.66, abs=0.002)
    assert p.tokens_per_second == pytest.approx(54.4, abs=0.1)  # the seed measured 54.4 tok/s


def test_seed_counters_imply_the_calibrated_draft_cost():
    # 1,127 accepted of 7,530 drafted in 1,506 drafts; 0.66x.
    length = 1 + 1127 / 1506
    assert length == pytest.approx(1.748, abs=0.001)
    assert sp.draft_cost_from_benchmark(length, 0.66, 5) == pytest.approx(sp.DEFAULT_DRAFT_COST, abs=0.002)


def test_public_drafter_on_sglang_gives_about_1_7x():
    p = sp.predict(0.89, 3)
    assert 3.2 <= p.mean_acceptance_length <= 3.5
    assert p.speedup == pytest.approx(1.70, abs=0.01)
    # the documented range a = 0.85..0.91 spans 1.60x..1.75x
    assert sp.speedup(0.85, 3) == pytest.approx(1.60, abs=0.01)
    assert sp.speedup(0.91, 3) == pytest.approx(1.75, abs=0.01)


def test_closed_forms_match_the_sums():
    a, k = 0.432, 5
    assert sp.mean_acceptance_length(a, k) == pytest.approx((1 - a ** (k + 1)) / (1 - a))
    assert sp.acceptance_rate(a, k) == pytest.approx((a - a ** (k + 1)) / (k * (1 - a)))


def test_edges():
    assert sp.mean_acceptance_length(1.0, 4) == 5.0
    assert sp.mean_acceptance_length(0.0, 4) == 1.0
    assert sp.acceptance_rate(1.0, 4) == 1.0
    assert sp.break_even_length(5) == pytest.approx(2.65)
    assert sp.break_even_rate(5) == pytest.approx(0.33)
    with pytest.raises(ValueError):
        sp.acceptance_rate(0.5, 0)
    with pytest.raises(ValueError):
        sp.mean_acceptance_length(1.5, 3)
    with pytest.raises(ValueError):
        sp.per_token_acceptance_from_length(0.5, 3)
    with pytest.raises(ValueError):
        sp.draft_cost_from_benchmark(2.0, 0.0, 3)


# --------------------------------------------------------------------------------------- properties

@given(acceptances, ks)
def test_length_and_rate_bounds(a, k):
    length = sp.mean_acceptance_length(a, k)
    assert 1.0 <= length <= k + 1 + 1e-12
    rate = sp.acceptance_rate(a, k)
    assert -1e-12 <= rate <= 1 + 1e-12
    # the rate never exceeds the per-token acceptance (later positions need every earlier one)
    assert rate <= a + 1e-12
    assert sp.mean_acceptance_length(a, k) == pytest.approx(1 + k * rate)


@given(interior, interior, ks)
def test_monotonic_in_acceptance(a1, a2, k):
    lo, hi = sorted((a1, a2))
    assert sp.mean_acceptance_length(lo, k) <= sp.mean_acceptance_length(hi, k) + 1e-12
    assert sp.acceptance_rate(lo, k) <= sp.acceptance_rate(hi, k) + 1e-12


@given(acceptances, ks)
def test_rate_round_trip(a, k):
    rate = sp.acceptance_rate(a, k)
    solved = sp.per_token_acceptance_from_rate(min(max(rate, 0.0), 1.0), k)
    assert sp.acceptance_rate(solved, k) == pytest.approx(rate, abs=1e-9)
    assert solved == pytest.approx(a, abs=1e-6)


@given(acceptances, ks)
def test_length_round_trip(a, k):
    length = sp.mean_acceptance_length(a, k)
    solved = sp.per_token_acceptance_from_length(min(length, k + 1.0), k)
    assert solved == pytest.approx(a, abs=1e-6)


@given(acceptances, ks, costs)
@settings(max_examples=200)
def test_draft_cost_round_trip(a, k, c):
    length = sp.mean_acceptance_length(a, k)
    assert sp.draft_cost_from_benchmark(length, sp.speedup(a, k, c), k) == pytest.approx(c, abs=1e-9)


@given(acceptances, ks, costs)
def test_speedup_above_one_exactly_past_break_even(a, k, c):
    length = sp.mean_acceptance_length(a, k)
    s = sp.speedup(a, k, c)
    if not math.isclose(length, sp.break_even_length(k, c), rel_tol=1e-9):
        assert (s > 1.0) == (length > sp.break_even_length(k, c))


@given(acceptances, ks, costs, st.floats(min_value=1.0, max_value=100.0))
def test_throughput_is_length_over_step_time(a, k, c, step_ms):
    tps = sp.tokens_per_second(a, k, c, step_ms)
    assert tps == pytest.approx(sp.mean_acceptance_length(a, k) / (step_ms / 1000 * (1 + k * c)))
    assert tps / sp.tokens_per_second(0.0, 0, c, step_ms) == pytest.approx(sp.speedup(a, k, c))
