"""Every Degraded reason and sentence has one home (acceptance/message.py); the verdict and the serving's
acceptance step both say it in those words."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from drafter_operator.acceptance import message
from drafter_operator.acceptance import verdict as a
from drafter_operator.controllers.serving import acceptance as sa
from drafter_operator.monitoring.http_fetch import MetricsUnavailable


def test_the_reasons_are_one_camel_case_word_each_and_distinct():
    reasons = [message.INSUFFICIENT_DATA, message.LOW_RATE, message.LOW_LENGTH, message.BELOW_THRESHOLD,
               message.HEALTHY, message.METRICS_UNAVAILABLE, message.METRICS_INVALID, message.NOT_MONITORED,
               message.NO_BENCHMARK, message.SPECULATION_DISABLED, message.ACTION_IN_PROGRESS,
               message.ACTION_FAILED, message.ACTION_BLOCKED]
    assert len(set(reasons)) == len(reasons)
    assert all(r.isalpha() and r[0].isupper() for r in reasons)
    # The verdict and the fetch say the same reasons, not copies that could drift.
    assert (a.LOW_RATE, a.NO_BENCHMARK) == (message.LOW_RATE, message.NO_BENCHMARK)
    assert MetricsUnavailable.condition_reason == message.METRICS_UNAVAILABLE
    assert message.DATA_PROBLEMS == {message.METRICS_UNAVAILABLE, message.METRICS_INVALID}


def test_the_first_verdict_and_the_serving_say_not_measured_alike():
    sample = a.AcceptanceSample(at=0.0, window=None)
    thresholds = a.Thresholds(min_rate=0.5, min_length=None, window_seconds=300, for_seconds=60, min_draft_tokens=1)
    first = a.evaluate(None, sample, thresholds)
    assert first.reason == message.INSUFFICIENT_DATA
    assert sa.NOT_MEASURED_VERDICT.message == message.NOT_MEASURED_MESSAGE


@given(st.lists(st.sampled_from(["minAcceptanceRate", "minAcceptanceLength"]), min_size=1, max_size=2, unique=True),
       st.text(min_size=1, max_size=20))
def test_no_benchmark_names_each_auto_field_with_the_right_verb(fields, why):
    text = message.no_benchmark(fields, why)
    assert all(f in text for f in fields) and text.endswith(why)
    assert (" is auto" in text) == (len(fields) == 1) and (" are auto" in text) == (len(fields) == 2)


def test_the_action_sentences_name_the_action_and_who_serves():
    serving = message.who_serves("r1", "r2")
    assert serving == "revision r1 (degraded) keeps serving"
    assert message.who_serves(None, "r2") == message.who_serves("r2", "r2") == "no revision serves"
    assert message.action_failed("Rollback", "r2", "timeout", serving).startswith("onDegraded Rollback could not")
    assert "starting revision r2; revision r1 (degraded) keeps serving until it is Ready" in \
        message.action_in_progress("Rollback", "r2", serving)
    assert message.action_blocked("DisableSpeculation", "name taken", "r1").endswith("r1 (degraded) keeps serving")


@given(st.floats(0, 10_000), st.floats(1, 10_000))
def test_pending_and_recovering_carry_the_figures_first(elapsed, needed):
    assert message.pending("acceptance 10%", elapsed, needed).startswith("acceptance 10% for ")
    assert message.recovering("acceptance 60%", elapsed, needed).endswith("needed to recover")
    assert message.still_low("x", True) == "x" and message.still_low("x", False).startswith("x (not yet clear")


def test_unmeasured_keeps_the_condition_unless_what_it_says_is_over():
    assert sa.unmeasured(None, False) == sa.NOT_MEASURED_VERDICT
    assert sa.unmeasured({"reason": message.LOW_RATE}, False) is None
    assert sa.unmeasured({"reason": message.NO_BENCHMARK}, False) == sa.NOT_MEASURED_VERDICT
    assert sa.unmeasured({"reason": message.ACTION_FAILED}, False) is None
    assert sa.unmeasured({"reason": message.ACTION_FAILED}, True) == sa.NOT_MEASURED_VERDICT


# The serving's acceptance step in its named parts (controllers/serving/acceptance.py).

def _measurement(status: str, revision: str = "r1", block: dict | None = None):
    from drafter_operator.acceptance.measurement import Measurement
    reason = {"True": message.LOW_RATE, "False": message.HEALTHY}[status]
    return Measurement(revision=revision, verdict=a.AcceptanceVerdict(status=status, reason=reason, message="acceptance 20%"),
                       previous=None, status=block)


def test_record_measurement_rewrites_degraded_only_when_the_condition_or_the_figures_move():
    block = {"revision": "r1", "rate": 0.2, "windowEnd": "2026-11-29T12:00:00Z", "windowSeconds": 300}
    out = sa.AcceptanceDecision()
    verdict = sa.record_measurement(out, {}, {}, _measurement("True", block=block))
    assert verdict.degraded and out.degraded.reason == message.LOW_RATE and out.write_acceptance
    same = sa.AcceptanceDecision()
    condition = {"status": "True", "reason": message.LOW_RATE}
    sa.record_measurement(same, condition, {"acceptance": block}, _measurement("True", block=block))
    assert same.degraded is None and not same.write_acceptance  # nothing moved: nothing written


def test_act_on_degraded_rolls_back_to_the_last_good_restorable_revision():
    import datetime as dt
    from drafter_operator.api import DrafterServing
    from drafter_operator.controllers.serving.revisions import revision_hash
    from tests.support.servings import IMAGES, seed_body

    body = seed_body()
    body["spec"]["acceptance"]["onDegraded"] = "Rollback"
    spec = DrafterServing.model_validate(body).spec
    image = IMAGES["vllm"]
    good = sa.revision_record(spec, image, revision_hash(spec, image), "2026-11-29T11:00:00Z")
    good["good"] = True
    running = sa.running_spec(spec, image, {})
    out = sa.AcceptanceDecision()
    now = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.timezone.utc)
    sa.act_on_degraded(out, spec, running, "r-bad", [good, {"name": "r-bad", "drafter": "eagle3", "good": True}],
                       "acceptance 20%", now)
    assert out.action["action"] == "Rollback" and out.action["revision"] == good["name"]
    assert out.action["message"].endswith("(acceptance 20%)") and out.rolled_back
    assert out.mark_degraded == ("r-bad",) and out.events[0][1] == "RollingBack"
    alone = sa.AcceptanceDecision()
    sa.act_on_degraded(alone, spec, running, "r-bad", [{"name": "r-bad", "drafter": "eagle3", "good": True}],
                       "acceptance 20%", now)
    assert alone.action is None and alone.events[0][1] == "NoRollbackTarget"


def test_the_comparison_cites_a_learned_threshold_and_rounds_a_spec_one():
    assert message.below_rate(0.4, False, None) == "< 40%"
    assert message.below_rate(0.331, True, None) == "< 33.1%"
    assert message.below_rate(0.331, True, "break-even 2.65") == "< 33.1% (break-even 2.65): speculation no longer pays"
    assert message.below_length(2.5, None) == "< 2.50"
    assert message.below_length(2.5, "b").endswith("(b): speculation no longer pays")


def test_figures_put_the_comparison_after_the_figure_it_is_about():
    from drafter_operator.engines.metrics import AcceptanceWindow
    w = AcceptanceWindow(engine="vllm", drafts=200, draft_tokens=1000, accepted_tokens=150, generation_tokens=400,
                         acceptance_rate=0.15, mean_acceptance_length=1.75, rate_source="counters")
    text = message.figures(w, 300, (message.LOW_RATE, "< 40%"))
    assert text.startswith("acceptance 15.0% over 5m (150/1000 draft tokens) < 40%, mean acceptance length 1.75")
    assert message.figures(w, 300, (message.LOW_LENGTH, "< 2.00")).endswith("(200 drafts) < 2.00")
