"""Drift against promotion (acceptance/drift.py, pure): the live mean acceptance length against what the gate
measured, on the Degraded verdict's own clock and evidence rules, and the words DriftDetected says."""

from __future__ import annotations

import dataclasses

from hypothesis import example, given, settings
from hypothesis import strategies as st

from drafter_operator.acceptance import drift as d
from drafter_operator.acceptance import verdict as a
from drafter_operator.api.serving import AcceptanceSpec
from tests.support.windows import vllm_window

#: Gated at 3.0 tokens per step; the default tolerance 0.25 puts the floor at 2.25.
BASELINE = d.Baseline(revision="r1", benchmark="kimi-gate-r1", length=3.0, tolerance=0.25)
SPEC = AcceptanceSpec.model_validate({"minAcceptanceRate": "0.1", "window": "2m", "for": "5m", "minDraftTokens": 1000})
T = d.thresholds(SPEC, BASELINE)
INTERVAL = 60.0


def at_length(length: float, drafts: float = 2000) -> a.AcceptanceSample:
    return a.AcceptanceSample(at=0, window=vllm_window(drafts, (length - 1) * drafts))


def run(lengths: list[float | None], drafts: list[float] | None = None) -> list[d.Drift]:
    """One look a minute; None is a look without usable metrics."""
    previous, looks = None, []
    for i, length in enumerate(lengths):
        at = i * INTERVAL
        if length is None:
            sample = a.AcceptanceSample.unavailable(at, "GET http://10.0.0.1:8000/metrics: connection refused")
        else:
            sample = dataclasses.replace(at_length(length, drafts[i] if drafts else 2000), at=at)
        seen = d.look(previous, sample, BASELINE, T)
        previous = seen.verdict
        looks.append(seen)
    return looks


def test_the_floor_is_the_figure_at_promotion_less_the_tolerance_and_for_is_the_specs():
    assert BASELINE.floor == 2.25
    assert (T.min_rate, T.min_length, T.window_seconds, T.for_seconds, T.min_draft_tokens) == (None, 2.25, 120, 300, 1000)
    assert not T.judge_lost


def test_drift_is_detected_after_for_below_the_floor_and_says_both_figures_and_the_runbook():
    looks = run([2.9, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0])
    assert [x.condition.reason for x in looks] == [d.WITHIN] + [d.PENDING] * 5 + [d.DRIFTED]
    assert looks[3].condition.message.endswith("for 2m of 5m")
    detected = looks[-1].condition
    assert detected.status == "True" and detected.message.startswith(
        "mean acceptance length 2.00 over 2m (2000 drafts) < 2.25, more than 25% under the 3.00 gate benchmark "
        "kimi-gate-r1 measured at promotion (revision r1)")
    assert "acceptance-drift runbook" in detected.message
    assert looks[0].condition.message == ("mean acceptance length 2.90 over 2m (2000 drafts), within 25% of the 3.00 "
                                          "gate benchmark kimi-gate-r1 measured at promotion (revision r1)")


def test_it_clears_only_after_for_clear_of_the_floor():
    looks = run([2.0] * 6 + [2.8] * 6)
    assert looks[5].condition.status == "True"
    assert [x.condition.status for x in looks[6:]] == ["True"] * 5 + ["False"]
    assert "back above 2.25 for 1m of 5m needed to clear" in looks[7].condition.message
    assert looks[-1].condition.reason == d.WITHIN


def test_a_lost_drafter_is_no_shortcut_drift_waits_the_whole_for():
    looks = run([1.0, 1.0, 1.0])  # Degraded says DrafterLost after one window; drift is still pending
    assert [x.condition.reason for x in looks] == [d.PENDING] * 3


def test_too_few_drafts_or_unusable_metrics_are_unknown_never_drift():
    looks = run([2.0, None, 2.0], drafts=[100, 2000, 100])  # 500 draft tokens (k = 5), under minDraftTokens
    assert [(x.condition.status, x.condition.reason) for x in looks] == [
        ("Unknown", a.INSUFFICIENT_DATA), ("Unknown", a.METRICS_UNAVAILABLE), ("Unknown", a.INSUFFICIENT_DATA)]


def test_a_gap_longer_than_a_window_starts_the_clock_again():
    looks = run([2.0, 2.0, 2.0, None, None, None, 2.0, 2.0, 2.0, 2.0, 2.0])
    assert all(x.condition.status != "True" for x in looks[:10]), [x.condition.reason for x in looks]
    assert looks[10].condition.status == "False" and "for 4m of 5m" in looks[10].condition.message


def test_a_tolerance_of_one_never_reports_drift():
    never = dataclasses.replace(BASELINE, tolerance=1.0)
    t = d.thresholds(SPEC, never)
    verdict = None
    for i in range(10):
        seen = d.look(verdict, dataclasses.replace(at_length(1.0), at=i * INTERVAL), never, t)
        verdict = seen.verdict
        assert seen.condition.status == "False"


@settings(max_examples=200, deadline=None)
@example([(1.0, 2000.0), None, None, (1.0, 2000.0), None, (1.0, 2000.0), (1.0, 2000.0), None, (1.0, 2000.0)])
@given(st.lists(st.one_of(st.none(), st.tuples(st.floats(min_value=1.0, max_value=5.0),
                                               st.sampled_from([100.0, 2000.0]))), min_size=1, max_size=30))
def test_drift_turns_true_only_on_usable_readings_below_the_floor_covering_for(looks):
    """Whatever the windows: DriftDetected turns True only where every usable reading of the last `for` was below the
    floor, the run of them (since the last gap longer than a window) spans `for`, and a healthy reading in between resets
    it; it never says True on a look without a usable window."""
    previous = None
    history: list[tuple[float, bool | None]] = []  # (at, below the floor; None: no evidence)
    was_true = False
    for i, look in enumerate(looks):
        at = i * INTERVAL
        if look is None:
            sample, below = a.AcceptanceSample.unavailable(at, "refused"), None
        else:
            length, drafts = look
            sample = dataclasses.replace(at_length(length, drafts), at=at)
            below = None if a.drafted(sample.window) < T.min_draft_tokens else length < BASELINE.floor
        history.append((at, below))
        seen = d.look(previous, sample, BASELINE, T)
        previous = seen.verdict
        status = seen.condition.status
        if status == "True":
            assert below is not None  # never True without a usable window
            if not was_true:
                run_start, last_below = at, at
                for when, was_below in reversed(history):
                    if was_below is False:
                        break
                    if was_below is True:
                        if last_below - when > T.window_seconds:
                            break  # a gap longer than a window: the run that counts starts after it
                        run_start, last_below = when, when
                assert at - run_start >= T.for_seconds, history
        if status != "Unknown":
            was_true = status == "True"


def test_a_baseline_comes_from_at_promotion_of_the_serving_revision_only():
    record = {"revision": "r1", "benchmark": "kimi-gate-r1", "acceptanceLength": 3.0, "acceptanceRate": 0.4}
    assert d.baseline(record, "0.25", ("r1",)) == BASELINE
    assert d.baseline(record, "0.25", ("r2", "r1")) == BASELINE  # the scheduled revision of the static-k one gated
    assert d.baseline(record, "0.25", ("r2",)) is None
    assert d.baseline({**record, "acceptanceLength": None}, "0.25", ("r1",)) is None
    assert d.baseline(None, "0.25", ("r1",)) is None


def test_a_restart_resumes_drift_with_its_clock_against_the_same_figure_only():
    # status.acceptance's figures may still be of the revision before (a failed swap leaves them): not asked.
    status = {"acceptance": {"revision": "r0", "atPromotion": {"revision": "r1", "benchmark": "kimi-gate-r1"}},
              "conditions": [{"type": "DriftDetected", "status": "True", "reason": d.DRIFTED, "message": "m",
                              "lastTransitionTime": "2026-12-01T10:00:00Z"}]}
    resumed = d.persisted(status, BASELINE)
    assert resumed.status == "True" and resumed.below_since == 1796119200.0
    assert d.persisted(status, dataclasses.replace(BASELINE, revision="r2")) is None
    assert d.persisted(status, dataclasses.replace(BASELINE, benchmark="kimi-gate-r1-again")) is None
    status["conditions"][0].update(status="False", reason=d.PENDING)
    assert d.persisted(status, BASELINE) is None
