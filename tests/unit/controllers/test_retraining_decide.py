"""spec.retraining's decision (controllers/retraining/decide.py): what starts a training, what waits, what is kept."""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
from pathlib import Path

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from drafter_operator.constants import RETRAIN_ANNOTATION, RETRAINING_LABEL, RETRAINING_TRIGGER_ANNOTATION
from drafter_operator.controllers.retraining.decide import SAMPLES_RECHECK, NewSamples, RetrainingState, decide
from drafter_operator.timestamps import format_seconds

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
T0 = dt.datetime(2026, 12, 6, 12, 0, tzinfo=dt.timezone.utc)
UID = "uid-kimi"


def template() -> dict:
    spec = yaml.safe_load((EXAMPLES / "training-kimi-k25-eagle3-from-capture.yaml").read_text())["spec"]
    spec.pop("promote")
    spec.pop("baseDrafter")
    return {"spec": spec}


def serving(retraining: dict | None = None, annotations: dict | None = None, drift_since: dt.datetime | None = None,
            status: dict | None = None) -> dict:
    body = yaml.safe_load((EXAMPLES / "serving-sglang-kimi-k25-eagle3.yaml").read_text())
    body["metadata"].update(namespace="team", uid=UID, creationTimestamp=format_seconds(T0 - dt.timedelta(days=30)),
                            annotations=annotations or {})
    if retraining is not None:
        body["spec"]["retraining"] = {"template": template(), **retraining}
    body["status"] = copy.deepcopy(status or {})
    if drift_since is not None:
        body["status"].setdefault("conditions", []).append(
            {"type": "DriftDetected", "status": "True", "reason": "AcceptanceDrifted",
             "lastTransitionTime": format_seconds(drift_since)})
    return body


def training(name: str, started: dt.datetime, stage: str | None = None, trigger: str = "DriftDetected",
             uid: str = UID, request: str | None = None) -> dict:
    annotations = {RETRAINING_TRIGGER_ANNOTATION: trigger, **({RETRAIN_ANNOTATION: request} if request else {})}
    return {"metadata": {"name": name, "namespace": "team", "creationTimestamp": format_seconds(started),
                         "labels": {RETRAINING_LABEL: "kimi-k25-sglang-eagle3"}, "annotations": annotations,
                         "ownerReferences": [{"uid": uid, "controller": True}]},
            "status": {"stage": stage} if stage else {}}


def run(body: dict, trainings=(), now: dt.datetime = T0):
    return decide(RetrainingState(body, tuple(trainings), now))


def created(plan) -> list[dict]:
    return [w.body for w in plan.writes if w.verb == "create"]


def test_a_serving_without_retraining_starts_nothing_and_writes_nothing():
    plan = run(serving(annotations={RETRAIN_ANNOTATION: "now"}, drift_since=T0))
    assert not plan.writes and not plan.status and not plan.deletes


def test_a_request_starts_a_training_from_the_template_with_an_output_of_its_own_promoted_here_through_the_gate():
    gate = {"minAcceptanceRate": "0.4", "numPrompts": 20}
    plan = run(serving({"gate": gate}, annotations={RETRAIN_ANNOTATION: "2026-12-06"}))
    (body,) = created(plan)
    spec = body["spec"]
    assert body["metadata"]["name"] == "kimi-k25-sglang-eagle3-r1"
    assert body["metadata"]["ownerReferences"][0]["uid"] == UID
    assert body["metadata"]["annotations"] == {RETRAINING_TRIGGER_ANNOTATION: "Requested",
                                               RETRAIN_ANNOTATION: "2026-12-06"}
    assert spec["output"]["path"] == "/models/drafters/kimi-k25-eagle3-retrained-r1"
    assert spec["data"]["capture"]["claimName"] == "kimi-capture"
    # Warm-started from the drafter the serving runs, since the template names no base.
    served = serving({"gate": gate})["spec"]["drafter"]["model"]
    assert spec["baseDrafter"] == served
    assert spec["promote"] == {"servingRef": {"name": "kimi-k25-sglang-eagle3"}, "gate": {**gate, "maxTokens": 512}}
    assert plan.status == {"retraining": {"runs": 1, "lastStart": format_seconds(T0), "request": "2026-12-06",
                                          "history": [{"name": "kimi-k25-sglang-eagle3-r1", "trigger": "Requested",
                                                       "startedAt": format_seconds(T0), "stage": "Pending"}]}}
    assert [e[1] for e in plan.events] == ["RetrainingStarted"]


def test_a_start_whose_status_write_was_lost_is_read_from_the_training_itself_and_never_repeated():
    body = serving({}, annotations={RETRAIN_ANNOTATION: "once"})
    first = created(run(body))[0]
    # The operator crashed after the create: status.retraining was never written.
    again = run(body, [training(first["metadata"]["name"], T0, trigger="Requested", request="once")],
                now=T0 + dt.timedelta(minutes=1))
    assert not created(again)
    assert again.status["retraining"]["runs"] == 1 and again.status["retraining"]["request"] == "once"


def test_drift_starts_one_training_per_drift_and_not_again_for_a_drift_older_than_the_last_start():
    body = serving({"cooldown": "1h"}, drift_since=T0 - dt.timedelta(minutes=5))
    (first,) = created(run(body))
    assert first["metadata"]["annotations"][RETRAINING_TRIGGER_ANNOTATION] == "DriftDetected"
    done = [training("kimi-k25-sglang-eagle3-r1", T0, "Succeeded")]
    # Two hours on, the same drift (it turned True before the last start) still holds: nothing new.
    assert not created(run(body, done, now=T0 + dt.timedelta(hours=2)))
    # It cleared and came back after the start: a new drift, a new training.
    again = serving({"cooldown": "1h"}, drift_since=T0 + dt.timedelta(hours=1, minutes=30))
    (second,) = created(run(again, done, now=T0 + dt.timedelta(hours=2)))
    assert second["metadata"]["name"].endswith("-r2")


def test_the_cooldown_holds_automatic_starts_but_not_a_request():
    done = [training("kimi-k25-sglang-eagle3-r1", T0 - dt.timedelta(hours=1), "Succeeded")]
    body = serving({"cooldown": "24h"}, drift_since=T0 - dt.timedelta(minutes=1))
    plan = run(body, done)
    assert not created(plan)
    assert plan.status["retraining"]["waiting"] == "DriftDetected: cooldown until 2026-12-07T11:00:00Z"
    assert plan.recheck_at == T0 + dt.timedelta(hours=23)
    asked = serving({"cooldown": "24h"}, annotations={RETRAIN_ANNOTATION: "please"},
                    drift_since=T0 - dt.timedelta(minutes=1))
    (body,) = created(run(asked, done))
    assert body["metadata"]["annotations"][RETRAINING_TRIGGER_ANNOTATION] == "Requested"


def test_one_at_a_time_a_trigger_waits_for_the_running_training_and_says_so():
    running = [training("kimi-k25-sglang-eagle3-r1", T0 - dt.timedelta(days=2), "Train")]
    plan = run(serving({}, annotations={RETRAIN_ANNOTATION: "x"}), running)
    assert not created(plan)
    assert plan.status["retraining"]["waiting"] == "Requested: kimi-k25-sglang-eagle3-r1 is still running (Train)"
    assert "request" not in plan.status["retraining"]  # not acted on: it starts once r1 is done
    finished = [training("kimi-k25-sglang-eagle3-r1", T0 - dt.timedelta(days=2), "Failed")]
    later = run(serving({}, annotations={RETRAIN_ANNOTATION: "x"}, status={"retraining": plan.status["retraining"]}),
                finished)
    assert len(created(later)) == 1 and later.status["retraining"]["waiting"] is None  # the wait is cleared



def test_a_training_its_refused_spec_stopped_is_unfinished_so_nothing_starts_beside_it_and_history_keeps_it():
    # Failed with Ready InvalidSpec: the allow-list was tightened under it. It resumes by itself once the list allows
    # it again, so a second training started now would run beside it then (found by the batch simulation, seed 310).
    refused = training("kimi-k25-sglang-eagle3-r2", T0 - dt.timedelta(days=2), "Failed")
    refused["status"]["conditions"] = [{"type": "Ready", "status": "False", "reason": "InvalidSpec",
                                        "message": "spec.image is not allowed"}]
    older = training("kimi-k25-sglang-eagle3-r1", T0 - dt.timedelta(days=9), "Succeeded")
    plan = run(serving({"historyLimit": 1}, annotations={RETRAIN_ANNOTATION: "x"}), [refused, older])
    assert not created(plan) and not plan.deletes  # counted as finished, r1 would be trimmed
    assert plan.status["retraining"]["waiting"] == (
        "Requested: kimi-k25-sglang-eagle3-r2 is stopped by its refused spec (InvalidSpec) and resumes once it is "
        "allowed; delete it to start anew")
    # Failed for any other reason (a stage out of retries) is finished: the request starts the next one.
    failed = copy.deepcopy(refused)
    failed["status"]["conditions"][0]["reason"] = "StageFailed"
    assert len(created(run(serving({}, annotations={RETRAIN_ANNOTATION: "x"}), [failed]))) == 1
    # And so is a run that had ended before its spec was refused at a resync: a stage failed it, or every stage
    # succeeded. Nothing of it runs again when the list allows it, so it holds nothing up.
    for ended in ({"Generated": "True", "Extracted": "False"}, {"Generated": "True", "Extracted": "True"}):
        after = copy.deepcopy(refused)
        after["status"]["conditions"] += [{"type": kind, "status": value} for kind, value in ended.items()]
        assert len(created(run(serving({}, annotations={RETRAIN_ANNOTATION: "x"}), [after]))) == 1, ended
    pending = copy.deepcopy(refused)
    pending["status"]["conditions"] += [{"type": "Generated", "status": "True"}, {"type": "Trained", "status": "Unknown"}]
    assert not created(run(serving({}, annotations={RETRAIN_ANNOTATION: "x"}), [pending]))

def test_the_interval_starts_a_training_once_due_and_says_when_to_look_again_before():
    done = [training("kimi-k25-sglang-eagle3-r1", T0 - dt.timedelta(hours=100), "Succeeded")]
    early = run(serving({"interval": "168h", "onDrift": False}), done)
    assert not created(early) and early.recheck_at == T0 + dt.timedelta(hours=68)
    (body,) = created(run(serving({"interval": "168h", "onDrift": False}), done, now=T0 + dt.timedelta(hours=68)))
    assert body["metadata"]["annotations"][RETRAINING_TRIGGER_ANNOTATION] == "Interval"


def test_a_schedule_starts_a_training_at_its_next_time_in_its_zone_and_once_for_times_missed():
    """Sundays at 03:00 in Paris (UTC+1 in December): the last start on Sunday 2026-11-29 at 02:00 UTC (03:00 there),
    so the next time is 2026-12-06 02:00 UTC, before T0 (Sunday 12:00 UTC): one training, and the time after that
    is a week later. A week of missed times (the operator down) starts one, not several."""
    weekly = {"schedule": "0 3 * * 0", "timeZone": "Europe/Paris", "onDrift": False, "cooldown": "1h"}
    last = dt.datetime(2026, 11, 29, 2, 0, tzinfo=dt.timezone.utc)
    done = [training("kimi-k25-sglang-eagle3-r1", last, "Succeeded", trigger="Schedule")]
    early = run(serving(weekly), done, now=dt.datetime(2026, 12, 6, 1, 59, tzinfo=dt.timezone.utc))
    assert not created(early) and early.recheck_at == dt.datetime(2026, 12, 6, 2, 0, tzinfo=dt.timezone.utc)
    (body,) = created(run(serving(weekly), done))
    assert body["metadata"]["annotations"][RETRAINING_TRIGGER_ANNOTATION] == "Schedule"
    assert body["metadata"]["name"] == "kimi-k25-sglang-eagle3-r2"
    started = training("kimi-k25-sglang-eagle3-r2", T0, "Succeeded", trigger="Schedule")
    after = run(serving(weekly), [started, *done], now=T0 + dt.timedelta(hours=1))
    assert not created(after) and after.recheck_at == dt.datetime(2026, 12, 13, 2, 0, tzinfo=dt.timezone.utc)
    # Three weeks with no start (the operator down): one training when it looks again, then the next Sunday.
    missed = run(serving(weekly), done, now=T0 + dt.timedelta(days=14))
    assert len(created(missed)) == 1


def test_a_scheduled_time_waits_for_the_running_training_and_the_cooldown():
    hourly = {"schedule": "@hourly", "onDrift": False, "cooldown": "6h"}
    running = [training("kimi-k25-sglang-eagle3-r1", T0 - dt.timedelta(hours=2), "Train", trigger="Schedule")]
    busy = run(serving({**hourly, "cooldown": "1m"}), running)
    assert not created(busy) and busy.status["retraining"]["waiting"].startswith("Schedule: kimi-k25-sglang-eagle3-r1")
    done = [training("kimi-k25-sglang-eagle3-r1", T0 - dt.timedelta(hours=2), "Succeeded", trigger="Schedule")]
    cooling = run(serving(hourly), done)
    assert not created(cooling) and cooling.recheck_at == T0 + dt.timedelta(hours=4)
    assert cooling.status["retraining"]["waiting"].startswith("Schedule: cooldown until")


def test_history_keeps_the_newest_finished_trainings_and_deletes_the_rest_but_never_one_running_or_anothers():
    trainings = [training(f"kimi-k25-sglang-eagle3-r{n}", T0 - dt.timedelta(days=10 - n), "Succeeded")
                 for n in range(1, 6)]
    trainings.append(training("kimi-k25-sglang-eagle3-r6", T0 - dt.timedelta(days=1), "Extract"))
    trainings.append(training("kimi-k25-sglang-eagle3-r9", T0, "Succeeded", uid="an-older-serving"))
    plan = run(serving({"historyLimit": 2}), trainings)
    assert [p.rsplit("/", 1)[1] for p in plan.deletes] == ["kimi-k25-sglang-eagle3-r3", "kimi-k25-sglang-eagle3-r2",
                                                          "kimi-k25-sglang-eagle3-r1"]
    assert [h["name"] for h in plan.status["retraining"]["history"]] == [
        "kimi-k25-sglang-eagle3-r6", "kimi-k25-sglang-eagle3-r5", "kimi-k25-sglang-eagle3-r4"]
    assert plan.status["retraining"]["runs"] == 6


def test_a_serving_being_deleted_or_refused_starts_nothing():
    body = serving({}, annotations={RETRAIN_ANNOTATION: "x"})
    body["metadata"]["deletionTimestamp"] = format_seconds(T0)
    assert not run(body).writes
    refused = serving({}, annotations={RETRAIN_ANNOTATION: "x"})
    refused["spec"]["drafter"]["numSpeculativeTokens"] = 0
    assert not run(refused).writes


# ------------------------------------------------------------------------------------------------
# Any run of events, with any status write lost: never two trainings at once, a request value started once,
# automatic starts at least the cooldown apart, and a request made while nothing runs is started.

STEP = st.one_of(
    st.tuples(st.just("request"), st.integers(0, 3)),
    st.tuples(st.just("drift"), st.booleans()),
    st.tuples(st.just("wait"), st.integers(1, 600)),  # minutes
    st.tuples(st.just("finish"), st.sampled_from(["Succeeded", "Failed"])),
    st.tuples(st.just("lose-next-status"), st.just(0)),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(STEP, max_size=40))
def test_any_run_of_triggers_and_lost_writes_keeps_one_at_a_time_and_the_cooldown(steps):
    now, status, trainings = T0, {}, []
    annotations: dict[str, str] = {}
    drift: dt.datetime | None = None
    lose = False
    started_requests: list[str] = []
    automatic: list[dt.datetime] = []
    for kind, value in steps:
        if kind == "request":
            annotations[RETRAIN_ANNOTATION] = f"ask-{value}"
        elif kind == "drift":
            drift = now if value and drift is None else (drift if value else None)
        elif kind == "wait":
            now += dt.timedelta(minutes=value)
        elif kind == "finish":
            for body in trainings:
                if body["status"].get("stage") not in ("Succeeded", "Failed"):
                    body["status"]["stage"] = value
        else:
            lose = True
        body = serving({"cooldown": "3h", "historyLimit": 2}, annotations=dict(annotations), drift_since=drift,
                       status={"retraining": status} if status else {})
        idle = all(t["status"].get("stage") in ("Succeeded", "Failed") for t in trainings)
        plan = decide(RetrainingState(body, tuple(copy.deepcopy(trainings)), now))
        for manifest in created(plan):
            assert all(t["status"].get("stage") in ("Succeeded", "Failed") for t in trainings), "two at once"
            assert manifest["metadata"]["name"] not in {t["metadata"]["name"] for t in trainings}
            trigger = manifest["metadata"]["annotations"][RETRAINING_TRIGGER_ANNOTATION]
            if trigger == "Requested":
                request = manifest["metadata"]["annotations"][RETRAIN_ANNOTATION]
                # A value is new against the last one acted on (as drafter.dev/retry's): never started twice running.
                assert request != (started_requests[-1] if started_requests else None), "one request, two trainings"
                started_requests.append(request)
            else:
                assert all(now - at >= dt.timedelta(hours=3) for at in automatic), "cooldown broken"
                automatic.append(now)
            trainings.append({**manifest, "metadata": {**manifest["metadata"], "creationTimestamp": format_seconds(now)},
                              "status": {}})
        deleted = {path.rsplit("/", 1)[1] for path in plan.deletes}
        assert not any(t["metadata"]["name"] in deleted and t["status"].get("stage") not in ("Succeeded", "Failed")
                       for t in trainings), "a running training deleted"
        trainings = [t for t in trainings if t["metadata"]["name"] not in deleted]
        if plan.status and not lose:
            status = {k: v for k, v in {**status, **plan.status["retraining"]}.items() if v is not None}
        lose = False
        request = annotations.get(RETRAIN_ANNOTATION)
        if request and idle:  # nothing ran when it was looked at: the request is started (now or before)
            assert request in started_requests


def test_a_template_is_held_to_the_training_spec_by_the_model_though_the_crd_keeps_it_without_a_schema():
    import pydantic
    import pytest

    from drafter_operator.api import DrafterServing

    promoting = serving({})
    promoting["spec"]["retraining"]["template"]["spec"]["promote"] = {"servingRef": {"name": "another"}}
    with pytest.raises(pydantic.ValidationError, match="a retraining always promotes into this serving"):
        DrafterServing.model_validate(promoting)
    broken = serving({})
    broken["spec"]["retraining"]["template"]["spec"]["train"] = {"epochs": 0}
    with pytest.raises(pydantic.ValidationError, match="epochs"):
        DrafterServing.model_validate(broken)
    assert not run(broken).writes  # a refused spec starts nothing (the serving says InvalidSpec)


# --------------------------------------------------------------------------------------------------- minNewSamples

def with_capture(body: dict) -> dict:
    body["spec"]["capture"] = {"sampleRate": "0.05", "claimName": "kimi-capture"}
    return body


def counted(state: RetrainingState, count: int | None, problem: str = "") -> RetrainingState:
    """The reconciler's second pass: the first plan's question answered."""
    first = decide(state)
    assert first.count_samples_since is not None and not created(first)
    return dataclasses.replace(state, new_samples=NewSamples(first.count_samples_since, count, problem))


def test_drift_waits_for_enough_new_prompts_counted_since_the_last_start_then_starts():
    last = T0 - dt.timedelta(days=3)
    body = with_capture(serving({"minNewSamples": 500}, drift_since=T0 - dt.timedelta(hours=1)))
    state = RetrainingState(body, (training("kimi-k25-sglang-eagle3-r1", last, "Succeeded"),), T0)
    assert decide(state).count_samples_since == last
    short = decide(counted(state, 499))
    assert not created(short)
    assert short.status["retraining"]["waiting"] == (
        f"DriftDetected: 499 prompts captured since {format_seconds(last)}; spec.retraining.minNewSamples is 500")
    assert short.recheck_at == T0 + SAMPLES_RECHECK
    enough = decide(counted(state, 500))
    (body,) = created(enough)
    assert body["metadata"]["annotations"][RETRAINING_TRIGGER_ANNOTATION] == "DriftDetected"
    assert not enough.status["retraining"].get("waiting")


def test_an_unreadable_count_waits_and_says_why_and_a_first_run_counts_from_the_servings_creation():
    body = with_capture(serving({"minNewSamples": 10, "interval": "24h", "onDrift": False}))
    state = RetrainingState(body, (), T0)
    created_at = T0 - dt.timedelta(days=30)
    assert decide(state).count_samples_since == created_at
    plan = decide(counted(state, None, "no Ready pod of the serving to ask"))
    assert not created(plan)
    assert "the capture's count could not be read (no Ready pod of the serving to ask)" in \
        plan.status["retraining"]["waiting"]


def test_a_request_never_waits_for_samples_and_a_count_for_another_moment_is_not_taken():
    body = with_capture(serving({"minNewSamples": 10}, annotations={RETRAIN_ANNOTATION: "now"}))
    plan = decide(RetrainingState(body, (), T0))
    assert plan.count_samples_since is None and len(created(plan)) == 1
    drifting = with_capture(serving({"minNewSamples": 10}, drift_since=T0))
    stale = NewSamples(T0 - dt.timedelta(days=1), 10_000)  # counted for another start: asked again
    assert decide(RetrainingState(drifting, (), T0, new_samples=stale)).count_samples_since is not None


def test_min_new_samples_without_capture_is_refused_naming_the_field():
    from pydantic import ValidationError

    from drafter_operator.api import DrafterServingSpec

    spec = serving({"minNewSamples": 10})["spec"]
    try:
        DrafterServingSpec.model_validate(spec)
    except ValidationError as exc:
        assert "spec.retraining.minNewSamples counts the prompts spec.capture keeps" in str(exc)
    else:
        raise AssertionError("minNewSamples without spec.capture was accepted")


def test_the_reconciler_asks_the_capture_only_when_a_decision_needs_the_count_and_decides_with_its_answer():
    from drafter_operator.controllers.retraining.apply import RetrainingReconciler

    asked = []

    def count(namespace, name, since):
        asked.append((namespace, name, since))
        return NewSamples(since, 20)

    reconciler = RetrainingReconciler(kube=None, clock=lambda: T0, count_samples=count)
    idle = with_capture(serving({"minNewSamples": 10}))
    assert not created(reconciler.decide(RetrainingState(idle, (), T0))) and asked == []
    drifting = with_capture(serving({"minNewSamples": 10}, drift_since=T0))
    assert len(created(reconciler.decide(RetrainingState(drifting, (), T0)))) == 1
    assert asked == [("team", "kimi-k25-sglang-eagle3", T0 - dt.timedelta(days=30))]
