"""Parsing engines' /metrics into spec-decode counters, and the window math (engines/metrics.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from drafter_testbed.emulator.exporters import SglangExporter, VllmExporter
from drafter_operator.engines import metrics as m
from drafter_operator.engines import metrics_verdicts as mv
from drafter_operator.engines import sglang, vllm

SAMPLE = Path(__file__).parents[1] / "data" / "vllm-0.33.0-spec-decode-metrics.txt"


def sample_text() -> str:
    return SAMPLE.read_text(encoding="utf-8")


def scale_sample(factor: float) -> str:
    """The sample with every counter value multiplied (a later scrape of the same server)."""
    out = []
    for line in sample_text().splitlines():
        if line.startswith("vllm:") and "_total{" in line:
            head, value = line.rsplit(" ", 1)
            line = f"{head} {float(value) * factor}"
        out.append(line)
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------------------- vLLM sample

def test_vllm_sample_parses_to_the_seed_counters():
    c = vllm.parse_spec_decode_metrics(sample_text())
    assert c.engine == "vllm" and c.speculative
    assert (c.drafts, c.draft_tokens, c.accepted_tokens) == (1506, 7530, 1127)
    assert c.accepted_per_position == (650, 260, 120, 62, 35)
    assert sum(c.accepted_per_position) == c.accepted_tokens
    assert c.num_speculative_tokens == 5
    assert c.generation_tokens is None  # not in the sample


def test_vllm_window_from_zero_reproduces_the_seed_figures():
    before = m.SpecDecodeCounters(engine="vllm", speculative=True)
    w = m.window(before, vllm.parse_spec_decode_metrics(sample_text()))
    assert w.acceptance_rate == pytest.approx(1127 / 7530)  # 15.0 %
    assert w.mean_acceptance_length == pytest.approx(1 + 1127 / 1506)  # 1.748
    assert w.rate_source == "counters" and not w.estimated and not w.reset
    assert w.per_position[0] == pytest.approx(650 / 1506)


def test_vllm_window_uses_deltas_not_lifetime_totals():
    before = vllm.parse_spec_decode_metrics(sample_text())
    # Between two scrapes, 1506 more drafts with 4000 of 7530 draft tokens accepted.
    after = m.SpecDecodeCounters(engine="vllm", speculative=True, drafts=3012, draft_tokens=15060,
                                 accepted_tokens=5127, accepted_per_position=(1650, 1260, 1120, 662, 435))
    w = m.window(before, after)
    assert w.drafts == 1506 and w.draft_tokens == 7530 and w.accepted_tokens == 4000
    assert w.acceptance_rate == pytest.approx(4000 / 7530)
    assert w.mean_acceptance_length == pytest.approx(1 + 4000 / 1506)


def test_vllm_window_same_ratio_when_counters_double():
    w = m.window(vllm.parse_spec_decode_metrics(sample_text()),
                 vllm.parse_spec_decode_metrics(scale_sample(2.0)))
    assert w.drafts == 1506
    assert w.acceptance_rate == pytest.approx(1127 / 7530)


def test_counter_reset_counts_from_the_restart():
    before = vllm.parse_spec_decode_metrics(scale_sample(3.0))
    after = vllm.parse_spec_decode_metrics(sample_text())
    w = m.window(before, after)
    assert w.reset
    assert w.drafts == 1506 and w.acceptance_rate == pytest.approx(1127 / 7530)


def test_no_speculation_and_no_data():
    plain = vllm.parse_spec_decode_metrics('vllm:generation_tokens_total{engine="0",model_name="m"} 10.0\n')
    assert not plain.speculative and plain.drafts is None and plain.generation_tokens == 10
    w = m.window(plain, plain)
    assert not w.has_data and w.acceptance_rate is None and w.mean_acceptance_length is None
    assert w.rate_source == "none"


def test_model_name_filter_and_engine_sum():
    def series(engine: str, model: str, drafts: int) -> str:
        labels = f'{{engine="{engine}",model_name="{model}"}}'
        return (f"vllm:spec_decode_num_drafts_total{labels} {drafts}.0\n"
                f"vllm:spec_decode_num_draft_tokens_total{labels} {3 * drafts}.0\n"
                f"vllm:spec_decode_num_accepted_tokens_total{labels} {drafts}.0\n")

    text = series("0", "a", 10) + series("1", "a", 5) + series("0", "b", 100)
    assert vllm.parse_spec_decode_metrics(text, model_name="a").drafts == 15
    assert vllm.parse_spec_decode_metrics(text, model_name="a").draft_tokens == 45
    assert vllm.parse_spec_decode_metrics(text).drafts == 115


def test_bad_text_raises_a_parse_error():
    with pytest.raises(mv.MetricsParseError):
        vllm.parse_spec_decode_metrics('vllm:spec_decode_num_drafts_total{engine="0" 1\n')


def test_rate_helpers():
    assert m.acceptance_rate(0, 0) is None
    assert m.mean_acceptance_length(5, 0) is None
    assert m.tokens_per_verification(30, 10) == 3.0
    assert m.acceptance_rate(3, 4) == 0.75


def test_detect_reset_needs_every_moving_counter_to_go_down():
    old = m.SpecDecodeCounters(engine="vllm", speculative=True, drafts=10, draft_tokens=30, accepted_tokens=9)
    assert not m.detect_reset(old, old)
    # all lower: a restart
    assert m.detect_reset(old, m.SpecDecodeCounters(engine="vllm", speculative=True, drafts=2, draft_tokens=6,
                                                    accepted_tokens=1))
    # a counter that was zero may grow after a restart
    assert m.detect_reset(
        m.SpecDecodeCounters(engine="vllm", speculative=True, drafts=10, draft_tokens=30, accepted_tokens=0),
        m.SpecDecodeCounters(engine="vllm", speculative=True, drafts=2, draft_tokens=6, accepted_tokens=1))


def test_comparing_engines_is_an_error():
    with pytest.raises(ValueError):
        m.window(m.SpecDecodeCounters(engine="vllm", speculative=True),
                 m.SpecDecodeCounters(engine="sglang", speculative=True))


# ----------------------------------------------------------------------------------------- SGLang

SGLANG_TEXT = """\
# HELP sglang:spec_accept_length Mean acceptance length of speculative decoding.
# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 3.3
# HELP sglang:spec_accept_rate Speculative acceptance rate.
# TYPE sglang:spec_accept_rate gauge
sglang:spec_accept_rate{engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 0.77
# HELP sglang:spec_num_steps Currently active speculative_num_steps.
# TYPE sglang:spec_num_steps gauge
sglang:spec_num_steps{engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 3.0
# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{engine_type="unified",is_streaming="true",model_name="m"} 600.0
sglang:generation_tokens_total{engine_type="unified",is_streaming="false",model_name="m"} 400.0
# HELP sglang:spec_verify_calls_total Number of speculative decoding verification calls.
# TYPE sglang:spec_verify_calls_total counter
sglang:spec_verify_calls_total{engine_type="unified",model_name="m"} 300.0
"""


def test_sglang_parse_sums_streaming_split_and_reads_gauges():
    c = sglang.parse_spec_decode_metrics(SGLANG_TEXT)
    assert c.engine == "sglang" and c.speculative
    assert c.generation_tokens == 1000 and c.drafts == 300
    assert c.accept_length_gauge == pytest.approx(3.3) and c.accept_rate_gauge == pytest.approx(0.77)
    assert c.num_speculative_tokens == 3
    assert c.draft_tokens is None and c.accepted_tokens is None


def test_sglang_window_length_is_generation_over_verify_calls():
    before = m.SpecDecodeCounters(engine="sglang", speculative=True, drafts=100, generation_tokens=300)
    after = sglang.parse_spec_decode_metrics(SGLANG_TEXT)
    w = m.window(before, after)
    assert w.mean_acceptance_length == pytest.approx(700 / 200)
    # k = 3 from the spec_num_steps gauge: rate derived from the counters
    assert w.rate_source == "derived" and w.estimated
    assert w.acceptance_rate == pytest.approx((3.5 - 1) / 3)
    assert w.draft_tokens == 600


def test_sglang_window_falls_back_to_the_gauge_without_k():
    before = m.SpecDecodeCounters(engine="sglang", speculative=True, drafts=0, generation_tokens=0)
    after = m.SpecDecodeCounters(engine="sglang", speculative=True, drafts=10, generation_tokens=30,
                                 accept_rate_gauge=0.5)
    w = m.window(before, after)
    assert w.mean_acceptance_length == 3.0
    assert w.rate_source == "gauge" and w.acceptance_rate == 0.5


# ------------------------------------------------------------------- the emulator's own exposition

def test_vllm_exporter_round_trip():
    e = VllmExporter("served", 4)
    e.prefill(prompt_tokens=7, ttft=0.01, streaming=True)
    for accepted in (0, 4, 2, 1):
        e.step(emitted=1 + accepted, drafted=4, accepted=accepted, interval=0.02)
    c = vllm.parse_spec_decode_metrics(e.render().decode(), model_name="served")
    assert (c.drafts, c.draft_tokens, c.accepted_tokens) == (4, 16, 7)
    assert c.accepted_per_position == (3, 2, 1, 1)
    assert c.generation_tokens == 1 + 4 + 7 and c.prompt_tokens == 7
    w = m.window(m.SpecDecodeCounters(engine="vllm", speculative=True), c)
    assert w.acceptance_rate == pytest.approx(7 / 16) and w.mean_acceptance_length == pytest.approx(1 + 7 / 4)


def test_vllm_exporter_without_speculation_has_no_spec_metrics():
    text = VllmExporter("served", 0).render().decode()
    assert "spec_decode" not in text
    assert not vllm.parse_spec_decode_metrics(text).speculative


def test_sglang_exporter_round_trip():
    e = SglangExporter("served", 3, 4)
    e.prefill(prompt_tokens=5, ttft=0.01, streaming=True)
    for accepted in (3, 3, 1, 0):
        e.step(emitted=1 + accepted, drafted=3, accepted=accepted, interval=0.02)
    before = sglang.parse_spec_decode_metrics(e.render().decode())
    assert before.drafts is None  # counters move when the request finishes, as in SGLang
    e.finished(prompt_tokens=5, generated=12, verify_steps=4, e2e=0.1, finish_reason="length", streaming=True)
    after = sglang.parse_spec_decode_metrics(e.render().decode(), model_name="served")
    assert after.drafts == 4 and after.generation_tokens == 12 and after.num_speculative_tokens == 3
    w = m.window(before, after)
    assert w.mean_acceptance_length == pytest.approx(12 / 4)
    assert e.avg_spec_accept_length == pytest.approx(11 / 4)


def test_emulator_vllm_spec_decode_exposition_matches_the_real_sample():
    """Same HELP, TYPE and series (names and labels) as vLLM 0.33.0's SpecDecodingProm; values aside."""
    def shape(text: str) -> set[str]:
        return {line if line.startswith("#") else line.rsplit(" ", 1)[0]
                for line in text.splitlines() if "vllm:spec_decode" in line}

    emulated = VllmExporter("/models/kimi-k2.5-int4", 5).render().decode()
    assert shape(emulated) == shape(sample_text())


def test_emulator_metric_types():
    from prometheus_client.parser import text_string_to_metric_families

    def types(text: str) -> dict[str, str]:
        return {f.name: f.type for f in text_string_to_metric_families(text)}

    v = types(VllmExporter("m", 3).render().decode())
    assert v["vllm:spec_decode_num_drafts"] == v["vllm:generation_tokens"] == v["vllm:request_success"] == "counter"
    assert v[vllm.NUM_REQUESTS_RUNNING] == v[vllm.NUM_REQUESTS_WAITING] == v[vllm.KV_CACHE_USAGE_PERC] == "gauge"
    for name in (vllm.TIME_TO_FIRST_TOKEN_SECONDS, vllm.INTER_TOKEN_LATENCY_SECONDS, vllm.E2E_REQUEST_LATENCY_SECONDS):
        assert v[name] == "histogram"
    s = types(SglangExporter("m", 3, 4).render().decode())
    for name in (sglang.SPEC_ACCEPT_LENGTH, sglang.SPEC_ACCEPT_RATE, sglang.SPEC_NUM_STEPS, sglang.SPEC_NUM_DRAFT_TOKENS,
                 sglang.NUM_RUNNING_REQS, sglang.NUM_QUEUE_REQS, sglang.GEN_THROUGHPUT, sglang.TOKEN_USAGE,
                 sglang.CACHE_HIT_RATE):
        assert s[name] == "gauge", name
    for name in (sglang.PROMPT_TOKENS, sglang.GENERATION_TOKENS, sglang.SPEC_VERIFY_CALLS, sglang.NUM_REQUESTS):
        assert s[name.removesuffix("_total")] == "counter", name
    for name in (sglang.TIME_TO_FIRST_TOKEN_SECONDS, sglang.INTER_TOKEN_LATENCY_SECONDS,
                 sglang.E2E_REQUEST_LATENCY_SECONDS):
        assert s[name] == "histogram"


def test_an_idle_sglang_window_has_no_rate_even_with_the_gauge_at_zero():
    """SGLang 0.5.23 sets spec_accept_rate to 0 before its first request: no drafts, no figure."""
    from drafter_operator.engines import sglang

    idle = ('sglang:spec_accept_rate{model_name="m",tp_rank="0"} 0.0\n'
            'sglang:spec_accept_length{model_name="m",tp_rank="0"} 0.0\n')
    before = sglang.parse_spec_decode_metrics(idle.encode())
    after = sglang.parse_spec_decode_metrics(idle.encode())
    window = m.window(before, after)
    assert window.drafts == 0 and window.acceptance_rate is None and window.rate_source == "none"
