"""The acceptance monitor fed mangled engine bodies (the smoke version of bench/metrics_fuzz.py): no
exception escapes and a healthy drafter is never Degraded. Then the holes the fuzz found, each pinned."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drafter_operator.engines import metrics as m
from drafter_operator.engines import metrics_verdicts as mv
from drafter_operator.engines import sglang, vllm
from drafter_operator.engines.metrics_verdicts import UnusableReason as R
from drafter_operator.acceptance import verdict as a
from drafter_operator.acceptance.engine_source import EngineSource, Replica
from drafter_testbed.metrics_mutations import MUTATIONS, false_degraded, run_sequence

# Thousands of extra series take ~50 ms a body: the benchmark has them, the smoke test does not.
FAST = sorted(set(MUTATIONS) - {"many series"})
scrape_faults = st.one_of(st.just(()), st.lists(st.sampled_from(FAST), min_size=1, max_size=3).map(tuple))


@st.composite
def plans(draw) -> list[tuple[str, ...]]:
    """Independent faults per scrape, with a persistent one (the same mutation on consecutive scrapes)."""
    plan = draw(st.lists(scrape_faults, min_size=6, max_size=14))
    name = draw(st.sampled_from(FAST))
    start = draw(st.integers(0, len(plan) - 1))
    length = draw(st.integers(0, 8))
    return [(name,) if start <= i < start + length else step for i, step in enumerate(plan)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(engine=st.sampled_from(["vllm", "sglang"]), seed=st.integers(0, 2**32 - 1), plan=plans())
def test_mangled_bodies_never_raise_and_never_degrade_a_healthy_drafter(engine, seed, plan):
    run = run_sequence(engine, seed, plan)
    assert [s.error for s in run.steps if s.error] == []
    assert false_degraded(run) == [], [(s.mutations, s.condition) for s in run.steps]
    for step in run.steps:
        status, reason = step.condition
        assert status != "Unknown" or reason in (a.INSUFFICIENT_DATA, a.METRICS_INVALID)
        if step.parsed != "counters":
            assert step.condition == ("Unknown", a.METRICS_INVALID)


def test_true_bodies_alone_are_healthy():
    run = run_sequence("sglang", 7, [()] * 8)
    assert [s.condition for s in run.steps][1:] == [("False", a.HEALTHY)] * 7


# ---------------------------------------------------------------------------------- what it found

def test_an_integer_too_large_for_a_double_is_a_verdict_not_an_overflow():
    body = 'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} ' + "9" * 400 + "\n"
    with pytest.raises(mv.MetricsUnusable) as info:
        vllm.parse_spec_decode_metrics(body)
    assert info.value.reason == R.NON_FINITE and "999" in str(info.value)


def vllm_counters(drafts: float, draft_tokens: float, accepted: float, generation: float = 0.0) -> m.SpecDecodeCounters:
    return m.SpecDecodeCounters(engine="vllm", speculative=True, drafts=drafts, draft_tokens=draft_tokens,
                                accepted_tokens=accepted, generation_tokens=generation)


def sglang_counters(verify_calls: float | None, generation: float | None) -> m.SpecDecodeCounters:
    return m.SpecDecodeCounters(engine="sglang", speculative=True, drafts=verify_calls, generation_tokens=generation)


def test_a_scaled_draft_counter_is_refused_instead_of_read_as_low_acceptance():
    # SGLang: 1,000 verification calls cannot have produced 300 tokens (each emits at least one).
    with pytest.raises(mv.MetricsUnusable) as info:
        m.window(sglang_counters(100, 400), sglang_counters(1_100, 700), num_speculative_tokens=3)
    assert info.value.reason == R.INCONSISTENT_COUNTERS and "fewer than one per call" in str(info.value)
    # vLLM: at most k draft tokens per draft, and at least one.
    with pytest.raises(mv.MetricsUnusable) as info:
        m.window(vllm_counters(100, 500, 350), vllm_counters(200, 100_500, 420), num_speculative_tokens=5)
    assert info.value.reason == R.INCONSISTENT_COUNTERS and "not 1 to 5 per draft" in str(info.value)
    with pytest.raises(mv.MetricsUnusable):
        m.window(vllm_counters(100, 500, 350), vllm_counters(10_000, 1_000, 420), num_speculative_tokens=5)
    # The real thing passes: 100 drafts of 5 tokens, 71% accepted.
    assert m.window(vllm_counters(100, 500, 350), vllm_counters(200, 1_000, 705), 5).acceptance_rate == 0.71


def test_a_family_missing_from_the_first_scrape_counts_from_its_first_value():
    # The first scrape lost spec_verify_calls_total (cut at a line); counting it from zero would put the
    # engine's whole history (1,000 calls) against 300 tokens of this window: acceptance 0.
    window = m.window(sglang_counters(None, 3_400), sglang_counters(1_000, 3_700), num_speculative_tokens=3)
    assert window.drafts == 0 and not window.has_data
    # A fresh engine (nothing counted yet) still counts its first requests.
    fresh = m.window(sglang_counters(None, None), sglang_counters(100, 340), num_speculative_tokens=3)
    assert fresh.drafts == 100 and fresh.acceptance_rate == pytest.approx(0.8)


def test_a_scrape_that_contradicts_its_neighbours_spoils_every_window_it_is_in():
    history = a.ScrapeHistory(60)
    history.add(0, vllm_counters(100, 500, 350))
    history.add(15, vllm_counters(200, 1_000, 100))  # accepted went back while the rest grew
    history.add(30, vllm_counters(300, 1_500, 1_050))
    history.add(45, vllm_counters(400, 2_000, 1_400))
    # The ends alone (0 and 45) look fine; the scrape at 15 does not fit between its neighbours.
    with pytest.raises(mv.MetricsUnusable) as info:
        history.window(60, 5)
    assert info.value.reason == R.COUNTER_DECREASE
    history.add(75, vllm_counters(500, 2_500, 1_750))
    with pytest.raises(mv.MetricsUnusable):  # it is the window's start now: still refused
        history.window(60, 5)
    history.add(90, vllm_counters(600, 3_000, 2_100))  # the bad scrape has left the window
    assert history.window(60, 5)[0].acceptance_rate == pytest.approx(0.7)


def test_a_parser_bug_on_a_body_is_a_metrics_invalid_verdict(monkeypatch):
    source = EngineSource("sglang", 60, 3)

    def broken(*_args, **_kwargs):
        raise KeyError("a parser bug")

    monkeypatch.setattr(sglang, "parse_spec_decode_metrics", broken)
    result = source.parse(b"sglang:anything 1\n")
    assert isinstance(result, mv.MetricsUnusable) and result.reason == R.UNPARSEABLE
    sample = source.sample_from([(Replica("p", "127.0.0.1", 1), result)], at=0)
    assert sample.problem[0] == a.METRICS_INVALID and "the parser failed on this body: KeyError" in sample.problem[1]
