"""Drift against promotion in the DrafterServing decision (pure): status.acceptance.atPromotion follows the revision
that serves, DriftDetected comes from the acceptance watch's drift verdict only where the figures compare, and the
Events and gauges say it. The cluster is `World` (test_serving_decide.py)."""

from __future__ import annotations

import dataclasses
import datetime as dt

from drafter_operator.acceptance import drift as d
from drafter_operator.acceptance import verdict as a
from drafter_operator.acceptance.measurement import AcceptanceMonitor, Measurement
from drafter_operator.controllers.serving.acceptance import watched_revision
from drafter_operator.controllers.serving.drift import acceptance_block, at_promotion
from drafter_operator.controllers.serving.decide import decide
from drafter_operator.monitoring import operator_metrics as om
from tests.support.windows import vllm_window
from tests.support.gauges import value
from tests.support.servings import World, seed_body

GATE = {"minSpeedup": "1.0", "baseline": {"tokensPerSecond": "82.5"}}
FINISHED = "2026-11-29T12:10:00Z"
RESULT = {"tokensPerSecond": 120.0, "baselineTokensPerSecond": 82.5, "speedup": 1.45, "acceptanceLength": 3.0,
          "acceptanceRate": 0.4}


def gated_body(**acceptance) -> dict:
    body = seed_body(swap={"strategy": "BlueGreen", "gate": GATE})
    body["spec"]["acceptance"] = {"minAcceptanceRate": "0.1", "window": "2m", "for": "5m", "minDraftTokens": 1000,
                                  **acceptance}
    return body


def swap_through_gate(world: World, model: str = "/models/drafters/kimi-k25-eagle3-v2", result: dict | None = None,
                      leave_running: bool = False) -> str:
    """A new drafter through the gate, which passes having measured ``result``; the revision it gated. With
    ``leave_running`` the gate is left unfinished (the swap under way)."""
    world.body["spec"]["drafter"]["model"] = model
    world.body["metadata"]["generation"] += 1
    world.apply(world.decide())
    world.settle()
    world.apply(world.decide())  # Ready: its gate benchmark is created
    (gate,) = [b for b in world.benchmarks.values() if "status" not in b]
    revision = gate["metadata"]["labels"]["drafter.dev/revision"]
    if leave_running:
        return revision
    gate["status"] = {"state": "Succeeded", "completionTime": FINISHED,
                      "result": {"verdict": "Passed", "verdictMessage": "met", **(result or RESULT)}}
    world.converge()
    return revision


def watched(world: World, lengths: list[float], start: float | None = None) -> Measurement:
    """What the acceptance watch hands decide after looks at ``lengths`` a minute apart (the last now), through its
    own path: watched_revision (the baseline from status), then the monitor's drift thresholds and clock."""
    seen = watched_revision(world.body)
    monitor = AcceptanceMonitor("team", "kimi")
    monitor.follow(seen)
    t = d.thresholds(seen.spec.acceptance, seen.baseline) if seen.baseline else None
    now = world.now.timestamp() if start is None else start
    previous = verdict = drift = None
    for i, length in enumerate(lengths):
        at = now - (len(lengths) - 1 - i) * 60
        sample = a.AcceptanceSample(at=at, window=vllm_window(2000, (length - 1) * 2000))
        previous, verdict = verdict, a.evaluate(verdict, sample, monitor.thresholds)
        if seen.baseline:
            drift = d.look(drift.verdict if drift else None, sample, seen.baseline, t)
    block = a.status_block(sample, "engine", 120, world.now.strftime("%Y-%m-%dT%H:%M:%SZ"))
    return Measurement(revision=seen.revision, verdict=verdict, previous=previous,
                       status={**block, "revision": seen.revision}, drift=drift)


def look(world: World, measurement: Measurement):
    plan = decide(dataclasses.replace(world.state(), acceptance=measurement))
    world.apply(plan)
    return plan


def condition(world: World, kind: str = d.CONDITION) -> dict | None:
    return next((c for c in world.body["status"]["conditions"] if c["type"] == kind), None)


def test_a_first_revision_has_no_figure_at_promotion_and_no_drift_condition():
    world = World(gated_body())
    world.converge()
    look(world, watched(world, [2.0] * 7))
    assert "atPromotion" not in world.body["status"]["acceptance"] and condition(world) is None
    assert watched_revision(world.body).baseline is None  # the watch has nothing to judge drift against


def test_a_gated_swap_records_what_its_gate_measured_beside_the_live_window_and_keeps_it():
    world = World(gated_body())
    world.converge()
    gated = swap_through_gate(world)
    status = world.body["status"]
    assert status["activeRevision"] == gated
    gate_name = next(iter(world.benchmarks))
    assert status["acceptance"]["atPromotion"] == {"revision": gated, "benchmark": gate_name, "acceptanceRate": 0.4,
                                                   "acceptanceLength": 3.0, "measuredAt": FINISHED}
    # Taken at the switch: the condition of the revision before says nothing about this one.
    assert (condition(world)["status"], condition(world)["reason"]) == ("Unknown", a.INSUFFICIENT_DATA)
    assert "from the next window" in condition(world)["message"]
    assert watched_revision(world.body).baseline == d.Baseline(gated, gate_name, 3.0, 0.25)
    # The live window lands beside it; the gate benchmark deleted later takes nothing away.
    look(world, watched(world, [2.9]))
    assert world.body["status"]["acceptance"]["meanLength"] == 2.9
    assert world.body["status"]["acceptance"]["atPromotion"]["benchmark"] == gate_name
    world.benchmarks.clear()
    world.now += dt.timedelta(minutes=5)
    look(world, watched(world, [2.8]))
    assert world.body["status"]["acceptance"]["atPromotion"]["benchmark"] == gate_name


def test_a_revision_no_gate_measured_clears_the_figure_and_the_condition_says_why():
    world = World(gated_body())
    world.converge()
    swap_through_gate(world)
    look(world, watched(world, [2.9]))
    del world.body["spec"]["swap"]["gate"]  # the next swap is not gated
    world.body["spec"]["drafter"]["model"] = "/models/drafters/kimi-k25-eagle3-v3"
    world.body["metadata"]["generation"] += 1
    world.converge()
    status = world.body["status"]
    assert "atPromotion" not in status["acceptance"]
    assert (condition(world)["status"], condition(world)["reason"]) == ("Unknown", d.NOT_GATED)
    assert condition(world)["message"].startswith(f"revision {status['activeRevision']} took traffic without a gate")
    assert "set spec.swap.gate" in condition(world)["message"]


def test_drift_is_detected_from_the_watch_with_one_warning_and_clears_with_a_normal_event():
    world = World(gated_body())
    world.converge()
    swap_through_gate(world)
    first = look(world, watched(world, [2.9]))
    assert first.events == []  # a healthy first verdict, and drift within tolerance, are no news
    within = condition(world)
    assert (within["status"], within["reason"]) == ("False", d.WITHIN)
    world.now += dt.timedelta(minutes=10)
    pending = look(world, watched(world, [2.0] * 3))
    assert (condition(world)["status"], condition(world)["reason"]) == ("False", d.PENDING) and pending.events == []
    world.now += dt.timedelta(minutes=1)
    drifted = look(world, watched(world, [2.0] * 7))
    detected = condition(world)
    assert (detected["status"], detected["reason"]) == ("True", d.DRIFTED)
    assert "< 2.25, more than 25% under the 3.00 gate benchmark" in detected["message"]
    assert [(e[0], e[1]) for e in drifted.events] == [("Warning", "DriftDetected")]
    assert drifted.events[0][2] == detected["message"]
    # The same verdict a scrape later: nothing new to say, nothing written.
    world.now += dt.timedelta(seconds=15)
    assert not look(world, watched(world, [2.0] * 7)).writes_anything()
    # Degraded is another question: the seed's 0.1 threshold is met, the drafter still pays.
    assert next(c for c in world.body["status"]["conditions"] if c["type"] == "Degraded")["status"] == "False"
    world.now += dt.timedelta(minutes=10)
    cleared = look(world, watched(world, [2.0] * 7 + [2.9] * 6))
    assert (condition(world)["status"], condition(world)["reason"]) == ("False", d.WITHIN)
    assert [(e[0], e[1]) for e in cleared.events] == [("Normal", "DriftCleared")]


def test_drift_is_not_judged_while_a_swap_is_under_way():
    world = World(gated_body())
    world.converge()
    gated = swap_through_gate(world)
    look(world, watched(world, [2.9]))
    low = watched(world, [2.0] * 7)  # the active revision, low for the whole `for`
    swap_through_gate(world, "/models/drafters/kimi-k25-eagle3-v3", leave_running=True)
    assert next(c for c in world.body["status"]["conditions"] if c["type"] == "Progressing")["status"] == "True"
    assert world.body["status"]["activeRevision"] == gated
    plan = look(world, dataclasses.replace(low, status={**low.status, "windowEnd": "2026-11-29T13:00:00Z"}))
    assert (condition(world)["status"], condition(world)["reason"]) == ("False", d.WITHIN)
    assert "DriftDetected" not in [e[1] for e in plan.events]


def test_a_drift_verdict_against_another_figure_or_revision_changes_nothing():
    world = World(gated_body())
    world.converge()
    swap_through_gate(world)
    look(world, watched(world, [2.9]))
    low = watched(world, [2.0] * 7)
    other = dataclasses.replace(low.drift, baseline=dataclasses.replace(low.drift.baseline, benchmark="another"))
    look(world, dataclasses.replace(low, drift=other))
    assert condition(world)["reason"] == d.WITHIN
    look(world, dataclasses.replace(low, revision="elsewhere"))
    assert condition(world)["reason"] == d.WITHIN


def test_a_restart_of_the_watch_resumes_drift_without_waiting_for_again():
    world = World(gated_body())
    world.converge()
    gated = swap_through_gate(world)
    look(world, watched(world, [2.0] * 7))
    assert condition(world)["status"] == "True"
    seen = watched_revision(world.body)
    assert seen.baseline.revision == gated
    resumed = d.persisted(world.body["status"], seen.baseline)
    world.now += dt.timedelta(minutes=1)
    sample = a.AcceptanceSample(at=world.now.timestamp(), window=vllm_window(2000, 2000))  # 2.0 again, one look
    again = d.look(resumed, sample, seen.baseline, d.thresholds(seen.spec.acceptance, seen.baseline))
    assert again.condition.status == "True"


def test_without_spec_acceptance_the_figure_stays_and_drift_is_not_monitored():
    world = World(gated_body())
    world.converge()
    swap_through_gate(world)
    look(world, watched(world, [2.9]))
    del world.body["spec"]["acceptance"]
    world.body["metadata"]["generation"] += 1
    world.converge()
    status = world.body["status"]
    assert set(status["acceptance"]) == {"atPromotion"}  # the window's figures of a watch that stopped are gone
    assert (condition(world)["status"], condition(world)["reason"]) == ("Unknown", d.NOT_MONITORED)


def test_the_acceptance_block_carries_at_promotion_and_nulls_what_it_no_longer_has():
    old = {"rate": 0.5, "meanLength": 2.9, "replicas": [{"pod": "p"}], "revision": "r1",
           "atPromotion": {"revision": "r1", "benchmark": "g"}}
    figures = {"rate": 0.4, "meanLength": 2.6, "revision": "r1"}
    promoted = old["atPromotion"]
    assert acceptance_block(old, figures, True, promoted) == {"replicas": None, **figures, "atPromotion": promoted}
    assert acceptance_block(old, None, False, promoted) == old  # figures not rewritten: as recorded
    assert acceptance_block(old, None, True, None) is None  # nothing measured, nothing promoted
    assert acceptance_block(old, None, True, promoted) == {"rate": None, "meanLength": None, "replicas": None,
                                                           "revision": None, "atPromotion": promoted}
    assert acceptance_block(None, figures, True, None) == figures


def test_at_promotion_takes_a_passed_gate_with_a_length_only():
    def gate(verdict: str, result: dict) -> dict:
        return {"metadata": {"name": "g", "labels": {"drafter.dev/revision": "r1", "drafter.dev/gate": "true"}},
                "status": {"state": "Succeeded", "completionTime": FINISHED, "result": {"verdict": verdict, **result}}}

    assert at_promotion(None, {"r1": gate("Passed", {"acceptanceLength": 2.5})}, ("r1",)) == {
        "revision": "r1", "benchmark": "g", "acceptanceLength": 2.5, "measuredAt": FINISHED}
    assert at_promotion(None, {"r1": gate("Failed", {"acceptanceLength": 2.5})}, ("r1",)) is None
    unmeasured = gate("Passed", {"acceptanceUnavailable": "MetricsUnavailable: x"})
    assert at_promotion(None, {"r1": unmeasured}, ("r1",)) is None
    # The scheduled revision of a dynamic drafter: its static-k revision's gate describes it.
    assert at_promotion(None, {"r1": gate("Passed", {"acceptanceLength": 2.5})}, ("r2", "r1"))["revision"] == "r1"
    kept = {"revision": "r1", "benchmark": "old"}
    assert at_promotion(kept, {}, ("r1",)) is kept and at_promotion(kept, {}, ("r2",)) is None


def test_the_gauges_say_the_figure_at_promotion_and_drift_from_the_status():
    status = {"activeRevision": "r1", "revisions": [{"name": "r1", "drafter": "eagle3:/m"}],
              "acceptance": {"atPromotion": {"revision": "r1", "benchmark": "g", "acceptanceLength": 3.0}},
              "conditions": [{"type": "DriftDetected", "status": "True", "reason": d.DRIFTED}]}
    labels = {"namespace": "drift-ns", "name": "s", "engine": "vllm", "drafter": "eagle3:/m", "revision": "r1"}
    om.set_serving_state("drift-ns", "s", "vllm", status)
    assert value("drafter_acceptance_length_at_promotion", **labels, benchmark="g") == 3.0
    assert value("drafter_acceptance_drift", **labels) == 1.0
    status["conditions"][0]["status"] = "Unknown"
    del status["acceptance"]
    om.set_serving_state("drift-ns", "s", "vllm", status)
    assert value("drafter_acceptance_length_at_promotion", **labels, benchmark="g") is None
    assert value("drafter_acceptance_drift", **labels) is None
    om.forget_serving("drift-ns", "s")
