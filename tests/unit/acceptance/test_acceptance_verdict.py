"""The acceptance verdict: windows over replicas and time, and the Degraded state machine."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drafter_operator.engines import metrics as m
from drafter_operator.engines import metrics_verdicts as mv
from drafter_operator.engines import sglang, vllm
from drafter_operator.acceptance import verdict as a
from tests.support.windows import vllm_window

SAMPLE = (Path(__file__).parents[1] / "data" / "vllm-0.33.0-spec-decode-metrics.txt").read_text()
THRESHOLDS = a.Thresholds(min_rate=0.4, min_length=None, min_draft_tokens=1000, window_seconds=300, for_seconds=300)


def counters(drafts: float, accepted: float, k: int = 5, generation: float | None = None) -> m.SpecDecodeCounters:
    return m.SpecDecodeCounters(engine="vllm", speculative=True, drafts=drafts, draft_tokens=drafts * k,
                                accepted_tokens=accepted, generation_tokens=generation or drafts + accepted)


# -------------------------------------------------------------------------------------- the seed window

def test_the_seed_window_gives_the_seed_message():
    window = vllm_window(1506, 1127)
    assert window.draft_tokens == 7530
    verdict = a.evaluate(None, a.AcceptanceSample(at=0, window=window), a.Thresholds(0.4, None, 1000, 300, 0))
    assert verdict.status == "True" and verdict.reason == a.LOW_RATE
    assert verdict.message == ("acceptance 15.0% over 5m (1127/7530 draft tokens) < 40%, mean acceptance length 1.75 "
                               "(1506 drafts)")


# ------------------------------------------------------------------------------------- scrape history

def test_history_window_spans_the_requested_seconds_and_drops_older_scrapes():
    history = a.ScrapeHistory(keep_seconds=300)
    for second in range(0, 601, 30):
        history.add(second, counters(drafts=second * 10, accepted=second * 3))
    window, covered = history.window(300)
    assert covered == 300 and window.drafts == 3000 and window.accepted_tokens == 900
    assert len(history) == 11  # 300 s of 30 s scrapes, plus the one that starts the window


def test_history_counts_a_restart_from_zero_never_negative():
    history = a.ScrapeHistory(keep_seconds=300)
    history.add(0, counters(5000, 2000))
    history.add(60, counters(100, 30))  # the engine restarted
    window, _ = history.window(300)
    assert window.reset and window.drafts == 100 and window.accepted_tokens == 30


def test_history_needs_two_scrapes_and_time_order():
    history = a.ScrapeHistory(keep_seconds=60)
    assert history.window(60) is None
    history.add(10, counters(1, 1))
    with pytest.raises(ValueError):
        history.add(10, counters(2, 1))


def test_history_from_real_metric_texts_of_both_engines():
    before = vllm.parse_spec_decode_metrics(SAMPLE)
    history = a.ScrapeHistory(keep_seconds=60)
    history.add(0, before)
    history.add(30, before)
    window, _ = history.window(60)
    assert window.drafts == 0 and not window.has_data
    body = ('sglang:generation_tokens_total{model_name="m",engine_type="unified",is_streaming="true"} %d\n'
            'sglang:spec_verify_calls_total{model_name="m",engine_type="unified"} %d\n'
            'sglang:spec_num_steps{model_name="m",engine_type="unified",tp_rank="0",pp_rank="0",moe_ep_rank="0"} 3\n')
    sg = a.ScrapeHistory(keep_seconds=60)
    sg.add(0, sglang.parse_spec_decode_metrics(body % (1000, 400)))
    sg.add(30, sglang.parse_spec_decode_metrics(body % (4400, 1400)))
    window, _ = sg.window(60)
    assert window.mean_acceptance_length == pytest.approx(3.4) and window.acceptance_rate == pytest.approx(0.8)


# ----------------------------------------------------------------------------------------- replicas

def test_replicas_are_combined_by_summing_counts_not_averaging_rates():
    busy_good = vllm_window(drafts=1000, accepted=4000)   # 80 %
    idle_bad = vllm_window(drafts=10, accepted=1)          # 2 %
    combined = a.combine([busy_good, idle_bad])
    assert combined.acceptance_rate == pytest.approx(4001 / 5050)  # not (0.8 + 0.02) / 2
    assert combined.drafts == 1010 and combined.draft_tokens == 5050


def test_combine_refuses_mixed_engines_and_nothing():
    sg = m.AcceptanceWindow(engine="sglang", drafts=1, draft_tokens=None, accepted_tokens=None, generation_tokens=3,
                            acceptance_rate=None, mean_acceptance_length=3.0, rate_source="none")
    with pytest.raises(ValueError):
        a.combine([vllm_window(1, 1), sg])
    with pytest.raises(ValueError):
        a.combine([])


@given(st.lists(st.tuples(st.integers(1, 10_000), st.floats(0, 1)), min_size=1, max_size=8))
def test_combined_figures_lie_between_the_replicas(replicas):
    windows = [vllm_window(d, round(d * 5 * frac)) for d, frac in replicas]
    combined = a.combine(windows)
    rates = [w.acceptance_rate for w in windows]
    assert min(rates) - 1e-12 <= combined.acceptance_rate <= max(rates) + 1e-12
    assert 0.0 <= combined.acceptance_rate <= 1.0


def test_per_replica_figures_travel_with_the_sample():
    sample = a.with_replicas(a.AcceptanceSample(at=0), {"pod-b": vllm_window(1000, 500), "pod-a": vllm_window(1000, 4500)})
    assert [name for name, _ in sample.replicas] == ["pod-a", "pod-b"]
    assert sample.window.acceptance_rate == pytest.approx(5000 / 10000)


# -------------------------------------------------------------------------------------- state machine

LOW, MID, HEALTHY = vllm_window(1500, 1125), vllm_window(1500, 3075), vllm_window(1500, 6000)  # 15 %, 41 %, 80 %


def run(sequence: list[tuple[float, a.AcceptanceSample]], t: a.Thresholds = THRESHOLDS) -> list[a.AcceptanceVerdict]:
    verdicts, previous = [], None
    for _, sample in sequence:
        previous = a.evaluate(previous, sample, t)
        verdicts.append(previous)
    return verdicts


def test_degraded_only_after_for_and_recovery_only_after_for_above_hysteresis():
    at = [0, 60, 299, 300, 360, 600, 660, 899, 900, 960]
    windows = [LOW, LOW, LOW, LOW, MID, HEALTHY, HEALTHY, HEALTHY, HEALTHY, HEALTHY]
    verdicts = run([(t, a.AcceptanceSample(at=t, window=w)) for t, w in zip(at, windows)])
    statuses = [(v.status, v.reason) for v in verdicts]
    assert statuses[:3] == [("False", a.BELOW_THRESHOLD)] * 3
    assert statuses[3] == ("True", a.LOW_RATE)
    # 41 % is above 40 % but inside the hysteresis: still Degraded, and it does not start recovery.
    assert statuses[4][0] == "True" and verdicts[4].healthy_since is None
    assert [s[0] for s in statuses[5:8]] == ["True"] * 3  # healthy since 600, for 300 s needed
    assert statuses[8] == ("False", a.HEALTHY) and "recovered" in verdicts[8].message


def test_insufficient_and_invalid_data_are_unknown_and_never_degraded():
    few = vllm_window(100, 20)
    assert a.evaluate(None, a.AcceptanceSample(at=0, window=few), THRESHOLDS).status == "Unknown"
    assert a.evaluate(None, a.AcceptanceSample(at=0, window=few), THRESHOLDS).reason == a.INSUFFICIENT_DATA
    invalid = a.AcceptanceSample.unusable(0, mv.unusable(mv.UnusableReason.NON_FINITE, "NaN drafts"))
    verdict = a.evaluate(a.AcceptanceVerdict("True", a.LOW_RATE, "x"), invalid, THRESHOLDS)
    assert (verdict.status, verdict.reason) == ("Unknown", a.METRICS_INVALID) and verdict.was_degraded
    assert a.evaluate(None, a.AcceptanceSample.unavailable(0, "connection refused"), THRESHOLDS).reason == a.METRICS_UNAVAILABLE


def test_a_gap_in_the_data_neither_clears_degraded_nor_restarts_the_clock():
    verdicts = run([(0, a.AcceptanceSample(at=0, window=LOW)), (300, a.AcceptanceSample(at=300, window=LOW)),
                    (330, a.AcceptanceSample.unavailable(330, "pod restarting")), (360, a.AcceptanceSample(at=360, window=HEALTHY)),
                    (600, a.AcceptanceSample(at=600, window=HEALTHY)), (660, a.AcceptanceSample(at=660, window=HEALTHY))])
    # Degraded survives the gap (no instant recovery after it); recovery takes the full 300 s from 360.
    assert [v.status for v in verdicts] == ["False", "True", "Unknown", "True", "True", "False"]
    assert verdicts[4].healthy_since == 360
    # A low window while recovering restarts the recovery clock.
    assert a.evaluate(verdicts[4], a.AcceptanceSample(at=620, window=LOW), THRESHOLDS).healthy_since is None


def test_length_threshold_and_for_zero():
    t = a.Thresholds(min_rate=None, min_length=2.0, min_draft_tokens=0, window_seconds=300, for_seconds=0)
    verdict = a.evaluate(None, a.AcceptanceSample(at=0, window=vllm_window(1506, 1127)), t)
    assert (verdict.status, verdict.reason) == ("True", a.LOW_LENGTH) and "(1506 drafts) < 2.00" in verdict.message
    assert a.evaluate(verdict, a.AcceptanceSample(at=1, window=HEALTHY), t).status == "False"


KINDS = {"low": LOW, "mid": MID, "healthy": HEALTHY}


@st.composite
def sample_sequences(draw):
    times, now = [], 0.0
    for _ in range(draw(st.integers(1, 60))):
        now += draw(st.sampled_from([1.0, 15.0, 30.0, 60.0, 120.0]))
        kind = draw(st.sampled_from(["low", "mid", "healthy", "problem", "few"]))
        if kind == "problem":
            times.append(a.AcceptanceSample.unavailable(now, "scrape failed"))
        elif kind == "few":
            times.append(a.AcceptanceSample(at=now, window=vllm_window(10, 5)))
        else:
            times.append(a.AcceptanceSample(at=now, window=KINDS[kind]))
    return times


@settings(max_examples=300, deadline=None)
@given(samples=sample_sequences(), for_seconds=st.sampled_from([0.0, 30.0, 120.0, 300.0]))
def test_the_verdict_never_flaps_faster_than_for_and_never_degrades_on_bad_data(samples, for_seconds):
    t = a.Thresholds(min_rate=0.4, min_length=None, min_draft_tokens=1000, window_seconds=300, for_seconds=for_seconds)
    previous, last_known, last_change = None, None, None
    for sample in samples:
        verdict = a.evaluate(previous, sample, t)
        assert verdict == a.evaluate(previous, sample, t)  # deterministic
        if sample.problem is not None or drafted(sample) < t.min_draft_tokens:
            assert verdict.status == "Unknown"
        if verdict.status != "Unknown":
            if last_known is not None and verdict.status != last_known:
                if last_change is not None:
                    assert sample.at - last_change >= for_seconds, (last_change, sample.at)
                last_change = sample.at
            last_known = verdict.status
        previous = verdict


def drafted(sample: a.AcceptanceSample) -> float:
    return a.drafted(sample.window) if sample.window is not None else 0.0


def test_thresholds_from_the_api_spec():
    from drafter_operator.api.serving import AcceptanceSpec

    spec = AcceptanceSpec.model_validate({"minAcceptanceRate": "0.5", "window": "10m", "for": "2m",
                                          "minDraftTokens": 500})
    t = a.Thresholds.from_spec(spec)
    assert (t.min_rate, t.min_length, t.window_seconds, t.for_seconds, t.min_draft_tokens) == (0.5, None, 600, 120, 500)
    with pytest.raises(ValueError):
        a.Thresholds(None, None, 0, 60, 0)


# ------------------------------------------------------------------------- continuous evidence (guarantee 11)

LOW = vllm_window(1506, 1127)  # 15%: below 40%
HEALTHY_THIN = vllm_window(20, 80)  # 80% on 100 draft tokens: too few for a verdict, but healthy


def verdict_after(samples) -> a.AcceptanceVerdict:
    verdict = None
    for sample in samples:
        verdict = a.evaluate(verdict, sample, THRESHOLDS)
    return verdict


def test_two_low_readings_hours_apart_are_not_degraded():
    verdict = verdict_after([a.AcceptanceSample(at=0, window=LOW), a.AcceptanceSample.unavailable(60, "scrape failed"),
                   a.AcceptanceSample(at=3 * 3600, window=LOW)])
    assert verdict.status == "False" and verdict.reason == a.BELOW_THRESHOLD and verdict.below_since == 3 * 3600


def test_the_for_clock_survives_a_gap_shorter_than_a_window():
    verdict = verdict_after([a.AcceptanceSample(at=0, window=LOW), a.AcceptanceSample.unavailable(100, "scrape failed"),
                   a.AcceptanceSample(at=200, window=LOW), a.AcceptanceSample(at=300, window=LOW)])
    assert verdict.status == "True" and verdict.below_since == 0


def test_a_thin_window_that_looks_healthy_stops_the_clock():
    verdict = verdict_after([a.AcceptanceSample(at=0, window=LOW), a.AcceptanceSample(at=150, window=HEALTHY_THIN), a.AcceptanceSample(at=300, window=LOW)])
    assert verdict.status == "False" and verdict.below_since == 300


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4000), st.sampled_from(["low", "gap", "thin", "healthy"])), min_size=1,
                max_size=30))
def test_degraded_only_after_for_of_low_readings_never_a_window_apart(steps):
    """Property: whenever the verdict turns Degraded, the low readings before it cover `for` with no two
    consecutive ones (nor the last one and now) more than a window apart, and no healthy reading between."""
    at, verdict, lows = 0, None, []
    for gap, kind in steps:
        at += gap
        sample = {"low": a.AcceptanceSample(at=at, window=LOW), "gap": a.AcceptanceSample.unavailable(at, "down"),
                  "thin": a.AcceptanceSample(at=at, window=HEALTHY_THIN),
                  "healthy": a.AcceptanceSample(at=at, window=vllm_window(2000, 8000))}[kind]
        before = verdict
        verdict = a.evaluate(verdict, sample, THRESHOLDS)
        lows = lows + [at] if kind == "low" else ([] if kind in ("thin", "healthy") else lows)
        if verdict.degraded and not (before and before.counts_as_degraded):
            run_start = lows[0]
            for earlier, later in zip(lows, lows[1:]):
                if later - earlier > THRESHOLDS.window_seconds:
                    run_start = later
            assert at - run_start >= THRESHOLDS.for_seconds, (steps, lows)


# ------------------------------------------------------------------------------- detection in bounded time


@settings(max_examples=60, deadline=None)
@given(window=st.sampled_from([30, 60, 300]), for_seconds=st.sampled_from([0, 10, 60, 300]),
       interval=st.sampled_from([2, 15, 30]), healthy_for=st.integers(min_value=0, max_value=900),
       drop_phase=st.integers(min_value=0, max_value=29))
def test_a_drop_from_healthy_to_the_seeds_15_percent_degrades_within_window_plus_for_plus_interval(
        window, for_seconds, interval, healthy_for, drop_phase):
    """The end-to-end tests print how long detection took on the real cluster; the bound they promise is
    proven here, on the real scrape history and state machine, without a wall clock: scrapes every
    `interval` seconds, 80 % acceptance until the drop, the seed's 15 % after it, steady traffic throughout."""
    thresholds = a.Thresholds(min_rate=0.4, min_length=None, min_draft_tokens=100, window_seconds=window,
                              for_seconds=for_seconds)
    history = a.ScrapeHistory(keep_seconds=window)
    dropped = healthy_for + drop_phase % interval
    drafts = accepted = 0.0
    verdict, degraded_at, now = None, None, 0
    while degraded_at is None and now <= dropped + window + for_seconds + 2 * interval:
        if now:
            rate = 0.8 if now <= dropped else 0.15
            drafts, accepted = drafts + 20 * interval, accepted + 20 * interval * 5 * rate
        history.add(now, counters(drafts, accepted))
        found = history.window(window)
        sample = a.AcceptanceSample(at=now, window=found[0]) if found else a.AcceptanceSample.unavailable(now, "one scrape so far")
        verdict = a.evaluate(verdict, sample, thresholds)
        if now > dropped:
            assert verdict.status != "Unknown" or verdict.reason == a.METRICS_UNAVAILABLE
        if verdict.status == "True":
            assert now > dropped, "Degraded while the drafter was still healthy"
            degraded_at = now
        now += interval
    assert degraded_at is not None and degraded_at - dropped <= window + for_seconds + interval, \
        (degraded_at, dropped)


# ------------------------------------------------------------------------------------- a lost drafter

LONG_FOR = a.Thresholds(min_rate=0.4, min_length=None, min_draft_tokens=1000, window_seconds=120, for_seconds=900)


def lost_window(first: float, drafts: float = 2000, per_position: bool = True) -> m.AcceptanceWindow:
    """A window whose first position accepted ``first`` of the drafts (later positions next to nothing)."""
    window = vllm_window(drafts, first * drafts)
    return dataclasses.replace(window, per_position=(first, 0.0, 0.0, 0.0, 0.0) if per_position else ())


def test_a_lost_drafter_is_degraded_after_one_window_with_its_own_reason_not_after_the_longer_for():
    first = a.evaluate(None, a.AcceptanceSample(at=0, window=lost_window(0.004)), LONG_FOR)
    assert (first.status, first.reason) == ("False", a.BELOW_THRESHOLD) and "of 2m" in first.message
    after = a.evaluate(first, a.AcceptanceSample(at=120, window=lost_window(0.004)), LONG_FOR)
    assert (after.status, after.reason) == ("True", a.DRAFTER_LOST)
    assert "first draft position accepted 0.4% < 2%" in after.message and "drafter-lost runbook" in after.message
    # A merely poor drafter (the seed's: about 40% at its first position) waits the whole `for`.
    poor = a.evaluate(None, a.AcceptanceSample(at=0, window=lost_window(0.4)), LONG_FOR)
    poor = a.evaluate(poor, a.AcceptanceSample(at=120, window=lost_window(0.4)), LONG_FOR)
    assert (poor.status, poor.reason) == ("False", a.BELOW_THRESHOLD)


@given(st.floats(min_value=0.0, max_value=1.0), st.booleans())
def test_lost_exactly_when_the_first_position_is_below_the_floor_on_either_engine(first, per_position):
    window = lost_window(first, per_position=per_position)  # without per_position: SGLang's accepted per step
    verdict = a.evaluate(None, a.AcceptanceSample(at=0, window=window), a.Thresholds(0.0, None, 1000, 120, 0))
    assert (verdict.reason == a.DRAFTER_LOST) == (first < a.LOST_FIRST_POSITION)


def test_a_lost_drafter_with_too_few_drafts_is_no_verdict():
    verdict = a.evaluate(None, a.AcceptanceSample(at=0, window=lost_window(0.0, drafts=100)), LONG_FOR)
    assert (verdict.status, verdict.reason) == ("Unknown", a.INSUFFICIENT_DATA)
