"""The engines' metrics parser answers with a verdict, not a number, for bodies it cannot trust.

Named bad cases (each gives its reason code), the bounds (body size, position labels), the window's
reset rules, and hypothesis properties: random bodies built from the real metric names never crash
the parser, never exceed its bounds, and never yield a rate outside [0, 1], NaN or a negative count.
"""

from __future__ import annotations

import math
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drafter_operator.engines import metrics as m
from drafter_operator.engines import metrics_verdicts as mv
from drafter_operator.engines import sglang, vllm
from drafter_operator.engines.metrics_verdicts import UnusableReason as R

SAMPLE = (Path(__file__).parents[1] / "data" / "vllm-0.33.0-spec-decode-metrics.txt").read_text(encoding="utf-8")
MODEL = "/models/kimi-k2.5-int4"
LABELS = f'engine="0",model_name="{MODEL}"'


def verdict(parse, body, **kwargs) -> mv.ScrapeVerdict:
    with pytest.raises(mv.MetricsUnusable) as info:
        parse(body, **kwargs)
    return info.value.verdict


def verdict_and_peak_bytes(body: str) -> tuple:
    """The vLLM parser's verdict on ``body`` and the peak bytes it allocated (tracemalloc)."""
    tracemalloc.start()
    try:
        found = verdict(vllm.parse_spec_decode_metrics, body)
        return found, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def with_value(text: str, series_prefix: str, value: str) -> str:
    """``text`` with the value of the line starting ``series_prefix`` replaced (the line must exist)."""
    lines = text.splitlines()
    hits = [i for i, line in enumerate(lines) if line.startswith(series_prefix)]
    assert len(hits) == 1, series_prefix
    lines[hits[0]] = lines[hits[0]].rsplit(" ", 1)[0] + " " + value
    return "\n".join(lines) + "\n"


DRAFTS = f"vllm:spec_decode_num_drafts_total{{{LABELS}}}"
DRAFT_TOKENS = f"vllm:spec_decode_num_draft_tokens_total{{{LABELS}}}"
ACCEPTED = f"vllm:spec_decode_num_accepted_tokens_total{{{LABELS}}}"
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"


# ------------------------------------------------------------------------------------ named bodies

@pytest.mark.parametrize("body", ["", "\n\n  \n", "# HELP vllm:x nothing\n# TYPE vllm:x counter\n", b""])
def test_an_empty_body_is_not_not_speculative(body):
    assert verdict(vllm.parse_spec_decode_metrics, body).reason == R.EMPTY
    assert verdict(sglang.parse_spec_decode_metrics, body).reason == R.EMPTY


def test_a_body_without_the_engines_series_is_not_engine_metrics():
    process_only = "python_gc_objects_collected_total{generation=\"0\"} 12.0\nprocess_open_fds 9.0\n"
    v = verdict(vllm.parse_spec_decode_metrics, process_only)
    assert v.reason == R.NOT_ENGINE_METRICS and "vllm:" in v.message
    # the other engine's body
    assert verdict(sglang.parse_spec_decode_metrics, SAMPLE).reason == R.NOT_ENGINE_METRICS
    # this engine, another served model
    v = verdict(vllm.parse_spec_decode_metrics, SAMPLE, model_name="other")
    assert v.reason == R.NOT_ENGINE_METRICS and "other" in v.message


def test_engine_series_without_spec_decode_is_the_legitimate_not_speculative():
    c = vllm.parse_spec_decode_metrics(f'vllm:generation_tokens_total{{{LABELS}}} 10.0\n')
    assert not c.speculative and c.generation_tokens == 10


@pytest.mark.parametrize("value", ["NaN", "+Inf", "-Inf", "1e999"])
@pytest.mark.parametrize("series", [DRAFTS, DRAFT_TOKENS, ACCEPTED])
def test_non_finite_counters_are_a_verdict_naming_the_series(series, value):
    v = verdict(vllm.parse_spec_decode_metrics, with_value(SAMPLE, series, value))
    assert v.reason == R.NON_FINITE
    assert v.metric == series.split("{")[0] and dict(v.labels)["model_name"] == MODEL
    assert series.split("{")[0] in v.message


def test_inf_drafts_no_longer_read_as_a_collapsed_drafter():
    assert verdict(vllm.parse_spec_decode_metrics, with_value(SAMPLE, DRAFT_TOKENS, "+Inf")).reason == R.NON_FINITE


def test_negative_and_fractional_counters():
    assert verdict(vllm.parse_spec_decode_metrics, with_value(SAMPLE, DRAFTS, "-3.0")).reason == R.NEGATIVE_COUNTER
    v = verdict(vllm.parse_spec_decode_metrics, with_value(SAMPLE, DRAFTS, "1506.5"))
    assert v.reason == R.NOT_A_COUNT and "1506.5" in v.message
    assert verdict(vllm.parse_spec_decode_metrics, with_value(SAMPLE, DRAFTS, "1e300")).reason == R.NOT_A_COUNT


def test_more_accepted_than_drafted_tokens_is_a_verdict_not_rate_ten():
    v = verdict(vllm.parse_spec_decode_metrics, with_value(SAMPLE, ACCEPTED, "75300.0"))
    assert v.reason == R.ACCEPTED_EXCEEDS_DRAFTED and "75300" in v.message and "7530" in v.message


def test_a_position_accepted_more_often_than_there_were_drafts():
    body = with_value(SAMPLE, f'{PER_POS}{{{LABELS},position="0"}}', "1507.0")
    v = verdict(vllm.parse_spec_decode_metrics, body)
    assert v.reason == R.ACCEPTED_EXCEEDS_DRAFTED and dict(v.labels) == {"position": "0"}


def test_a_duplicated_series_is_a_verdict_not_a_sum():
    line = next(line for line in SAMPLE.splitlines() if line.startswith(DRAFTS))
    v = verdict(vllm.parse_spec_decode_metrics, SAMPLE + line + "\n")
    assert v.reason == R.DUPLICATE_SERIES and v.metric == "vllm:spec_decode_num_drafts_total"
    # the same labels in another order are the same series
    reordered = f'vllm:spec_decode_num_drafts_total{{model_name="{MODEL}",engine="0"}} 1.0\n'
    assert verdict(vllm.parse_spec_decode_metrics, SAMPLE + reordered).reason == R.DUPLICATE_SERIES


@pytest.mark.parametrize("position", ["-1", "01", "abc", "1.0", " 1", "", "\u0661"])
def test_position_labels_must_be_plain_non_negative_integers(position):
    body = SAMPLE + f'{PER_POS}{{{LABELS},position="{position}"}} 1.0\n'
    assert verdict(vllm.parse_spec_decode_metrics, body).reason == R.BAD_POSITION


def test_a_per_position_sample_without_a_position_label():
    body = SAMPLE.replace(f'{PER_POS}{{{LABELS},position="4"}}', f'{PER_POS}{{{LABELS},extra="4"}}')
    assert verdict(vllm.parse_spec_decode_metrics, body).reason == R.BAD_POSITION


@pytest.mark.parametrize("position", ["64", "100000000", "9" * 5000])
def test_huge_positions_are_refused_without_allocating_them(position):
    body = SAMPLE + f'{PER_POS}{{{LABELS},position="{position}"}} 1.0\n'
    v, peak = verdict_and_peak_bytes(body)
    assert v.reason == R.TOO_MANY_POSITIONS
    assert peak < 2_000_000  # the old parser built a 10**8-long tuple (~900 MB) for "100000000"
    assert len(v.message) < 400  # the 5000-digit label is clipped in the message


def test_the_position_cap_is_a_parameter():
    assert len(vllm.parse_spec_decode_metrics(SAMPLE, max_positions=5).accepted_per_position) == 5
    assert verdict(vllm.parse_spec_decode_metrics, SAMPLE, max_positions=4).reason == R.TOO_MANY_POSITIONS


def test_spec_decode_counters_come_together():
    body = "\n".join(line for line in SAMPLE.splitlines() if not line.startswith(ACCEPTED)) + "\n"
    v = verdict(vllm.parse_spec_decode_metrics, body)
    assert v.reason == R.MISSING_SERIES and "accepted_tokens" in v.message


@pytest.mark.parametrize("body", [
    'vllm:spec_decode_num_drafts_total{engine="0" 1\n',
    "vllm:spec_decode_num_drafts_total one\n",
    "vllm:spec_decode_num_drafts_total{engine=0} 1\n",
    "}{ garbage\n",
    b"vllm:generation_tokens_total 1\n\xff\xfe\n",
])
def test_unparseable_bodies(body):
    v = verdict(vllm.parse_spec_decode_metrics, body)
    assert v.reason == R.UNPARSEABLE
    with pytest.raises(mv.MetricsParseError):  # the old exception still catches it
        vllm.parse_spec_decode_metrics(body)


def test_a_10_mb_body_is_refused_by_size_before_parsing():
    body = SAMPLE * (10_000_000 // len(SAMPLE) + 1)
    v, peak = verdict_and_peak_bytes(body)
    assert v.reason == R.TOO_LARGE and peak < 100_000
    assert verdict(vllm.parse_spec_decode_metrics, body.encode()).reason == R.TOO_LARGE
    # the cap counts UTF-8 bytes: 3 bytes per character here
    assert verdict(vllm.parse_spec_decode_metrics, "\u20ac" * 400, max_body_bytes=1000).reason == R.TOO_LARGE
    assert vllm.parse_spec_decode_metrics(SAMPLE, max_body_bytes=len(SAMPLE)).drafts == 1506


SGLANG = """\
sglang:spec_accept_rate{engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} RATE
sglang:spec_num_steps{engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} STEPS
sglang:spec_verify_calls_total{engine_type="unified",model_name="m"} 300.0
sglang:generation_tokens_total{engine_type="unified",is_streaming="true",model_name="m"} 1000.0
"""


def sglang_body(rate: str = "0.7", steps: str = "3.0") -> str:
    return SGLANG.replace("RATE", rate).replace("STEPS", steps)


def test_sglang_gauges_outside_their_domain():
    assert sglang.parse_spec_decode_metrics(sglang_body()).accept_rate_gauge == pytest.approx(0.7)
    for rate in ("1.5", "-0.1"):
        v = verdict(sglang.parse_spec_decode_metrics, sglang_body(rate=rate))
        assert v.reason == R.OUT_OF_RANGE and v.metric == "sglang:spec_accept_rate"
    assert verdict(sglang.parse_spec_decode_metrics, sglang_body(rate="NaN")).reason == R.NON_FINITE
    assert verdict(sglang.parse_spec_decode_metrics, sglang_body(steps="2.5")).reason == R.OUT_OF_RANGE
    assert verdict(sglang.parse_spec_decode_metrics, sglang_body(steps="1000")).reason == R.OUT_OF_RANGE


def test_verdicts_are_reportable():
    v = verdict(vllm.parse_spec_decode_metrics, with_value(SAMPLE, DRAFTS, "NaN"))
    d = v.as_dict()
    assert d["reason"] == "NonFinite" and d["metric"] == "vllm:spec_decode_num_drafts_total"
    assert d["labels"] == {"engine": "0", "model_name": MODEL}
    assert str(v).startswith("NonFinite: ")


# ---------------------------------------------------------------------------------------- windows

def vllm_counters(drafts, draft_tokens, accepted, per_pos=()) -> m.SpecDecodeCounters:
    return m.SpecDecodeCounters(engine="vllm", speculative=True, drafts=drafts, draft_tokens=draft_tokens,
                                accepted_tokens=accepted, accepted_per_position=per_pos)


def test_window_refuses_more_accepted_than_drafted_between_consistent_scrapes():
    before, after = vllm_counters(10, 100, 10), vllm_counters(20, 120, 60)
    with pytest.raises(mv.MetricsUnusable) as info:
        m.window(before, after)
    assert info.value.reason == R.ACCEPTED_EXCEEDS_DRAFTED and "50" in str(info.value)


def test_window_refuses_an_inconsistent_decrease():
    # drafts went down while draft tokens, already non-zero, went up: no restart explains that
    with pytest.raises(mv.MetricsUnusable) as info:
        m.window(vllm_counters(10, 50, 5), vllm_counters(8, 60, 6))
    assert info.value.reason == R.COUNTER_DECREASE and "drafts" in str(info.value)


def test_window_counts_a_clean_restart_from_zero():
    w = m.window(vllm_counters(100, 500, 200, (100, 60, 30, 10, 0)), vllm_counters(10, 50, 20, (10, 6, 3, 1, 0)))
    assert w.reset and (w.drafts, w.draft_tokens, w.accepted_tokens) == (10, 50, 20)
    assert w.acceptance_rate == pytest.approx(0.4) and w.per_position[0] == pytest.approx(1.0)


def test_window_finds_a_reset_hidden_by_a_sum_over_series():
    """SGLang splits generation tokens by is_streaming; the sum grew although one series restarted."""
    before = sglang.parse_spec_decode_metrics(
        'sglang:generation_tokens_total{engine_type="unified",is_streaming="true",model_name="m"} 100.0\n'
        'sglang:spec_verify_calls_total{engine_type="unified",model_name="m"} 50.0\n')
    after = sglang.parse_spec_decode_metrics(
        'sglang:generation_tokens_total{engine_type="unified",is_streaming="true",model_name="m"} 10.0\n'
        'sglang:generation_tokens_total{engine_type="unified",is_streaming="false",model_name="m"} 200.0\n'
        'sglang:spec_verify_calls_total{engine_type="unified",model_name="m"} 30.0\n')
    w = m.window(before, after, num_speculative_tokens=7)
    assert w.reset and w.generation_tokens == 210 and w.drafts == 30 and w.mean_acceptance_length == 7
    assert w.acceptance_rate == pytest.approx((7 - 1) / 7) and (w.accepted_tokens, w.draft_tokens) == (180, 210)


def test_hand_built_counters_obey_the_parsers_rules():
    for kwargs, reason in [({"drafts": math.nan}, R.NON_FINITE), ({"drafts": -1}, R.NEGATIVE_COUNTER),
                           ({"drafts": 0.5}, R.NOT_A_COUNT), ({"accept_rate_gauge": 2.0}, R.OUT_OF_RANGE),
                           ({"draft_tokens": 5, "accepted_tokens": 6}, R.ACCEPTED_EXCEEDS_DRAFTED),
                           ({"accepted_per_position": (0.0,) * 65}, R.TOO_MANY_POSITIONS)]:
        with pytest.raises(mv.MetricsUnusable) as info:
            m.SpecDecodeCounters(engine="vllm", speculative=True, **kwargs)
        assert info.value.reason == reason, kwargs


# ------------------------------------------------------------------------------------- hypothesis

VLLM_NAMES = [*vllm.SPEC_DECODE_METRICS, vllm.GENERATION_TOKENS, vllm.PROMPT_TOKENS, vllm.NUM_REQUESTS_RUNNING,
              "vllm:spec_decode_num_drafts_created"]
SGLANG_NAMES = [*sglang.PARSED_COUNTERS, *sglang.PARSED_GAUGES, sglang.NUM_RUNNING_REQS]
COUNTS = st.integers(0, 10**6).map(float)
BAD_VALUES = st.one_of(st.sampled_from([math.nan, math.inf, -math.inf, -1.0, 0.5, 1e300, 2.0**53 + 2]),
                       st.floats(allow_nan=True, allow_infinity=True))
VALUES = st.one_of(COUNTS, COUNTS, st.floats(0, 1), BAD_VALUES)  # mostly plausible, so windows get computed
LABEL_VALUES = st.one_of(st.sampled_from(["0", "1", "2", "4", "m", "true"]),
                         st.sampled_from(["63", "64", "100000000", "-1", "01", ""]),
                         st.text(st.characters(codec="utf-8", exclude_characters='"\\\n'), max_size=8))


def value_text(value: float) -> str:
    return {math.inf: "+Inf", -math.inf: "-Inf"}.get(value, "NaN" if math.isnan(value) else repr(value))


@st.composite
def sample_lines(draw, names: list[str]) -> str:
    name = draw(st.sampled_from(names))
    labels = draw(st.dictionaries(st.sampled_from(["engine", "model_name", "position", "is_streaming", "tp_rank"]),
                                  LABEL_VALUES, max_size=4))
    body = ",".join(f'{key}="{value}"' for key, value in labels.items())
    return f"{name}{{{body}}} {value_text(draw(VALUES))}" if labels else f"{name} {value_text(draw(VALUES))}"


GARBAGE = st.sampled_from(["}{", "# TYPE vllm:spec_decode_num_drafts_total counter", "# HELP x y", "",
                           "vllm:spec_decode_num_drafts_total{", "nan nan", 'x{a="1"} 1 2 3'])


def bodies(names: list[str]) -> st.SearchStrategy[str]:
    lines = st.lists(st.one_of(sample_lines(names), sample_lines(names), sample_lines(names), GARBAGE), max_size=25)
    # duplicate a random prefix of the lines now and then (a repeated exposition)
    return st.tuples(lines, st.integers(0, 5)).map(lambda t: "\n".join(t[0] + t[0][: t[1]]) + "\n")


def assert_trustworthy(c: m.SpecDecodeCounters) -> None:
    for value in (c.drafts, c.draft_tokens, c.accepted_tokens, c.generation_tokens, c.prompt_tokens,
                  c.accept_length_gauge, c.accept_rate_gauge, c.num_steps_gauge, c.num_draft_tokens_gauge,
                  *c.accepted_per_position):
        assert value is None or (math.isfinite(value) and value >= 0)
    assert len(c.accepted_per_position) <= mv.DEFAULT_MAX_POSITIONS
    if c.accepted_tokens is not None:
        assert c.accepted_tokens <= (c.draft_tokens or 0)
    assert c.accept_rate_gauge is None or c.accept_rate_gauge <= 1


def assert_sane_window(w: m.AcceptanceWindow) -> None:
    assert w.acceptance_rate is None or 0.0 <= w.acceptance_rate <= 1.0
    for count in (w.drafts, w.draft_tokens, w.accepted_tokens, w.generation_tokens):
        assert count is None or (math.isfinite(count) and count >= 0)
    assert w.mean_acceptance_length is None or (math.isfinite(w.mean_acceptance_length)
                                                and w.mean_acceptance_length >= (1.0 if w.engine == "vllm" else 0.0))
    assert all(0.0 <= p <= 1.0 for p in w.per_position)


def parse_or_verdict(parse, body):
    try:
        return parse(body)
    except mv.MetricsUnusable as exc:
        assert isinstance(exc.verdict.reason, R) and exc.verdict.message
        return exc.verdict


FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(bodies(VLLM_NAMES), bodies(VLLM_NAMES))
def test_random_vllm_bodies_give_trustworthy_counters_or_a_verdict(first, second):
    a, b = (parse_or_verdict(vllm.parse_spec_decode_metrics, body) for body in (first, second))
    for c in (a, b):
        if isinstance(c, m.SpecDecodeCounters):
            assert_trustworthy(c)
    if isinstance(a, m.SpecDecodeCounters) and isinstance(b, m.SpecDecodeCounters):
        try:
            assert_sane_window(m.window(a, b))
        except mv.MetricsUnusable as exc:
            assert exc.reason in (R.COUNTER_DECREASE, R.ACCEPTED_EXCEEDS_DRAFTED, R.INCONSISTENT_COUNTERS)


@FUZZ
@given(bodies(SGLANG_NAMES), bodies(SGLANG_NAMES), st.sampled_from([None, 1, 3, 7]))
def test_random_sglang_bodies_give_trustworthy_counters_or_a_verdict(first, second, k):
    a, b = (parse_or_verdict(sglang.parse_spec_decode_metrics, body) for body in (first, second))
    for c in (a, b):
        if isinstance(c, m.SpecDecodeCounters):
            assert_trustworthy(c)
    if isinstance(a, m.SpecDecodeCounters) and isinstance(b, m.SpecDecodeCounters):
        try:
            assert_sane_window(m.window(a, b, num_speculative_tokens=k))
        except mv.MetricsUnusable as exc:
            assert exc.reason in (R.COUNTER_DECREASE, R.INCONSISTENT_COUNTERS)


@st.composite
def vllm_scrapes(draw):
    """A consistent vLLM scrape: per-position acceptance is a prefix, so counts decrease with position."""
    k = draw(st.integers(1, 8))
    engines = draw(st.integers(1, 3))
    lines, totals = [], [0, 0, 0, [0] * k]
    for engine in range(engines):
        drafts = draw(st.integers(0, 10**6))
        per_pos, bound = [], drafts
        for _ in range(k):
            bound = draw(st.integers(0, bound))
            per_pos.append(bound)
        labels = f'engine="{engine}",model_name="m"'
        lines += [f"vllm:spec_decode_num_drafts_total{{{labels}}} {drafts}.0",
                  f"vllm:spec_decode_num_draft_tokens_total{{{labels}}} {drafts * k}.0",
                  f"vllm:spec_decode_num_accepted_tokens_total{{{labels}}} {sum(per_pos)}.0"]
        lines += [f'{PER_POS}{{{labels},position="{i}"}} {v}.0' for i, v in enumerate(per_pos)]
        totals[0] += drafts
        totals[1] += drafts * k
        totals[2] += sum(per_pos)
        totals[3] = [t + v for t, v in zip(totals[3], per_pos)]
    order = draw(st.permutations(lines))
    return "\n".join(order) + "\n", totals


@FUZZ
@given(vllm_scrapes())
def test_consistent_vllm_bodies_are_never_refused(scrape):
    body, (drafts, draft_tokens, accepted, per_pos) = scrape
    c = vllm.parse_spec_decode_metrics(body, model_name="m")
    assert (c.drafts, c.draft_tokens, c.accepted_tokens, list(c.accepted_per_position)) == (
        drafts, draft_tokens, accepted, per_pos)
    w = m.window(m.SpecDecodeCounters(engine="vllm", speculative=True), c)
    assert_sane_window(w)
    if draft_tokens:
        assert w.acceptance_rate == pytest.approx(accepted / draft_tokens)


@st.composite
def mutated(draw, scrapes):
    """A consistent scrape with up to two defects: a bad value, a repeated line, garbage, a bad
    position label, or a missing line."""
    lines = draw(scrapes)[0].splitlines()
    for _ in range(draw(st.integers(0, 2))):
        i = draw(st.integers(0, len(lines) - 1))
        kind = draw(st.sampled_from(["value", "duplicate", "garbage", "position", "drop"]))
        if kind == "value":
            lines[i] = lines[i].rsplit(" ", 1)[0] + " " + value_text(draw(VALUES))
        elif kind == "duplicate":
            lines.append(lines[i])
        elif kind == "garbage":
            lines.insert(i, draw(GARBAGE))
        elif kind == "position" and 'position="' in lines[i]:
            head, tail = lines[i].split('position="', 1)
            lines[i] = f'{head}position="{draw(LABEL_VALUES)}"{tail.split(chr(34), 1)[1]}'
        elif kind == "drop" and len(lines) > 1:
            del lines[i]
    return "\n".join(lines) + "\n"


@FUZZ
@given(mutated(vllm_scrapes()), mutated(vllm_scrapes()))
def test_windows_between_damaged_vllm_scrapes_are_sane_or_a_verdict(first, second):
    a = parse_or_verdict(vllm.parse_spec_decode_metrics, first)
    b = parse_or_verdict(vllm.parse_spec_decode_metrics, second)
    if isinstance(a, m.SpecDecodeCounters) and isinstance(b, m.SpecDecodeCounters):
        assert_trustworthy(a)
        assert_trustworthy(b)
        try:
            w = m.window(a, b)
        except mv.MetricsUnusable as exc:
            assert exc.reason in (R.COUNTER_DECREASE, R.ACCEPTED_EXCEEDS_DRAFTED, R.INCONSISTENT_COUNTERS)
        else:
            assert_sane_window(w)


# ------------------------------------------------------------------------- the benchmark client

def test_the_benchmark_client_reports_why_acceptance_is_unavailable():
    from drafter_testbed.demo_client import RunResult, measure_acceptance

    good = vllm.parse_spec_decode_metrics(SAMPLE)
    empty = pytest.raises(mv.MetricsUnusable, vllm.parse_spec_decode_metrics, "").value
    result = RunResult(engine="vllm")
    measure_acceptance(result, empty, good, None)
    assert result.acceptance is None and result.acceptance_summary() == "acceptance unavailable: Empty: " \
        "/metrics body has no samples"
    assert result.as_dict()["acceptanceUnavailable"].startswith("Empty: ")

    # a decrease that is not a restart, between two individually fine scrapes
    result = RunResult(engine="vllm")
    measure_acceptance(result, vllm_counters(10, 50, 5), vllm_counters(8, 60, 6), None)
    assert result.acceptance_summary().startswith("acceptance unavailable: CounterDecrease: ")

    result = RunResult(engine="vllm")
    measure_acceptance(result, m.SpecDecodeCounters(engine="vllm", speculative=True), good, None)
    assert result.acceptance_unavailable is None
    assert result.acceptance_summary() == "acceptance rate 15.0% (counters), mean acceptance length 1.748"

    plain = vllm.parse_spec_decode_metrics(f"vllm:generation_tokens_total{{{LABELS}}} 3.0\n")
    result = RunResult(engine="vllm")
    measure_acceptance(result, plain, plain, None)
    assert result.acceptance_summary() == "not speculative"
