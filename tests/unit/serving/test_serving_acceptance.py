"""Acceptance in the DrafterServing decision (pure): Degraded, status.acceptance, and onDegraded actions.

The cluster is played by `World` (test_serving_decide.py); measurements are what the acceptance watch
would hand `decide` after a look at the active revision.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt

from hypothesis import given, settings
from hypothesis import strategies as st

from drafter_operator.acceptance.measurement import AcceptanceMonitor, Measurement, persisted_verdict
from drafter_operator.controllers.serving.acceptance import WatchedByVersion, acceptance_due, watched_revision
from drafter_operator.controllers.serving.decide import decide
from drafter_operator.engines import metrics as m
from drafter_operator.acceptance import verdict as a
from drafter_operator.resources.labels import REVISION_LABEL
from tests.support.servings import rolled_back, seed_body, World
from tests.support.serving_acceptance import (auto_body, change_drafter, converge_with, gated_swap, look, measured,
                                              on_degraded)


def command(world: World, revision: str) -> list[str]:
    deployment = world.deployments[f"kimi-{revision}"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    return container.get("command", []) + container.get("args", [])


def test_before_any_measurement_degraded_is_unknown_and_healthy_figures_land_once():
    world = World(seed_body())
    world.converge()
    assert (world.condition("Degraded")["status"], world.condition("Degraded")["reason"]) == ("Unknown", a.INSUFFICIENT_DATA)
    healthy = look(world, measured(world))
    assert healthy.status["acceptance"]["rate"] == 0.7 and healthy.status["acceptance"]["revision"]
    assert world.condition("Degraded")["status"] == "False"
    assert healthy.events == []  # a healthy first verdict is what everyone expects: the condition says it
    world.now += dt.timedelta(seconds=15)
    again = look(world, measured(world, rate=0.701))  # the same figures a scrape later: no write
    assert not again.writes_anything(), again


def test_alert_marks_the_revision_posts_one_warning_and_changes_nothing_else():
    world = World(on_degraded("Alert"))
    world.converge()
    plan = look(world, measured(world, "True", 0.15))
    assert plan.writes == [] and plan.deletes == []
    assert plan.record_first["revisions"][-1]["degraded"] is True
    assert [(e[0], e[1]) for e in plan.events] == [("Warning", a.LOW_RATE)]
    assert "15.0%" in world.condition("Degraded")["message"]
    assert not look(world, measured(world, "True", 0.15)).writes_anything()


def test_disable_speculation_serves_method_none_until_the_spec_changes():
    world = World(on_degraded("DisableSpeculation"))
    world.converge()
    bad = world.body["status"]["activeRevision"]
    acted = look(world, measured(world, "True", 0.15))
    action = acted.record_first["degradedAction"]
    assert action["action"] == "DisableSpeculation" and action["degradedRevision"] == bad
    assert acted.record_first["speculationDisabled"].startswith(f"revision {bad} is Degraded")
    assert [w.verb for w in acted.writes] == ["create"]  # the baseline revision, beside the bad one (BlueGreen)
    assert ("Warning", "SpeculationDisabled") in [(e[0], e[1]) for e in acted.events]
    world.settle()
    converge_with(world, lambda w: None)
    status = world.body["status"]
    assert status["activeRevision"] == action["revision"] != bad
    assert not any("speculative" in arg for arg in command(world, action["revision"]))
    assert world.body["spec"]["drafter"]["method"] == "eagle3"  # the spec is never rewritten
    assert (world.condition("Degraded")["status"], world.condition("Degraded")["reason"]) == ("True", "SpeculationDisabled")
    assert [r["drafter"] for r in status["revisions"]][-1] == "none"
    # A new drafter in the spec ends the action: speculation is back, on the new revision.
    world.events.clear()
    change_drafter(world, 3)
    status = world.body["status"]
    assert "degradedAction" not in status and "speculationDisabled" not in status
    assert "DegradedActionEnded" in [e[1] for e in world.events]
    assert status["activeRevision"] not in (bad, action["revision"])
    assert any("speculative" in arg for arg in command(world, status["activeRevision"]))


def test_a_spec_change_that_keeps_the_revision_keeps_speculation_disabled():
    world = World(on_degraded("DisableSpeculation"))
    world.converge()
    look(world, measured(world, "True", 0.15))
    world.settle()
    converge_with(world, lambda w: None)
    baseline = world.body["status"]["activeRevision"]
    world.body["spec"]["replicas"] = 2
    world.body["metadata"]["generation"] += 1
    converge_with(world, lambda w: None)
    assert world.body["status"]["activeRevision"] == baseline and world.body["status"]["degradedAction"]


def test_rollback_returns_to_the_last_good_drafter_and_never_back():
    world = World(on_degraded("Rollback"))
    world.converge()
    good = world.body["status"]["activeRevision"]
    change_drafter(world, 3)
    bad = world.body["status"]["activeRevision"]
    assert bad != good and f"kimi-{good}" not in world.deployments  # the good one was deleted after its drain
    acted = look(world, measured(world, "True", 0.15))
    assert rolled_back(acted) and acted.record_first["degradedAction"]["revision"] == good
    assert [(w.verb, w.body["metadata"]["name"]) for w in acted.writes] == [("create", f"kimi-{good}")]
    world.settle()
    # The watch now looks at the rolled-back revision, which is healthy again.
    converge_with(world, lambda w: measured(w) if w.body["status"]["activeRevision"] == good else None)
    status = world.body["status"]
    assert status["activeRevision"] == good and world.service["spec"]["selector"][REVISION_LABEL] == good
    assert [r["name"] for r in status["revisions"] if r.get("degraded")] == [bad]
    assert world.condition("Degraded")["status"] == "False"
    assert "--speculative-config" in " ".join(command(world, good)) and '"num_speculative_tokens":5' in \
        " ".join(command(world, good)).replace(" ", "")
    # The rolled-back-to drafter degrading too finds no other target: it stays, and says so once.
    world.events.clear()
    look(world, measured(world, "True", 0.2))
    assert status["activeRevision"] == good and [e[1] for e in world.events].count("NoRollbackTarget") == 1
    look(world, measured(world, "True", 0.2))
    assert [e[1] for e in world.events].count("NoRollbackTarget") == 1


def test_rollback_with_no_earlier_revision_stays_and_says_why():
    world = World(on_degraded("Rollback"))
    world.converge()
    plan = look(world, measured(world, "True", 0.15))
    assert plan.writes == [] and "degradedAction" not in plan.record_first
    assert "NoRollbackTarget" in [e[1] for e in plan.events]


def test_a_measurement_of_another_revision_is_ignored_mid_swap():
    world = World(on_degraded("Rollback"))
    world.converge()
    old = world.body["status"]["activeRevision"]
    world.body["spec"]["drafter"]["numSpeculativeTokens"] = 3
    world.apply(world.decide())  # the new revision starts beside the old one
    plan = look(world, measured(world, "True", 0.15, revision=old))
    assert "degradedAction" not in (plan.record_first or {}) and not rolled_back(plan)


def test_the_watch_measures_the_drafter_the_active_revision_runs():
    world = World(on_degraded("Rollback"))
    world.converge()
    change_drafter(world, 3)
    look(world, measured(world, "True", 0.15))
    world.settle()
    converge_with(world, lambda w: None)
    watched = watched_revision(world.body)
    spec, revision = watched.spec, watched.revision
    assert revision == world.body["status"]["activeRevision"]
    assert spec.drafter.num_speculative_tokens == 5 and world.body["spec"]["drafter"]["numSpeculativeTokens"] == 3


def test_the_watch_derives_what_to_measure_once_per_version_of_the_body():
    world = World(on_degraded("Alert"))
    world.converge()
    body = copy.deepcopy(world.body)
    body["metadata"].update(uid="u-1", resourceVersion="7")
    watch = WatchedByVersion()
    first = watch.of(body)
    assert first is not None and first == watched_revision(body)
    assert watch.of(copy.deepcopy(body)) is first  # the same version: not derived again
    newer = copy.deepcopy(body)
    newer["metadata"]["resourceVersion"] = "8"
    del newer["spec"]["acceptance"]
    assert watch.of(newer) is None  # a new version is read afresh: here, nothing to watch any more
    again = copy.deepcopy(body)
    again["metadata"]["uid"] = "u-2"  # another incarnation that happens to carry the same version
    assert watch.of(again) is not None
    unversioned = copy.deepcopy(newer)
    del unversioned["metadata"]["resourceVersion"]
    assert watch.of(body) is not None and watch.of(unversioned) is None  # no version: never a cached answer


def test_a_restart_resumes_degraded_with_its_clock():
    world = World(on_degraded("Alert"))
    world.converge()
    look(world, measured(world, "True", 0.15))
    revision = world.body["status"]["activeRevision"]
    resumed = persisted_verdict(world.body["status"], revision)
    assert resumed.degraded and resumed.below_since == world.now.timestamp()
    assert persisted_verdict(world.body["status"], "other") is None


def test_status_acceptance_is_rewritten_only_when_it_says_something_new():
    old = {"rate": 0.5, "meanLength": 2.0, "windowEnd": "2026-11-30T12:00:00Z", "windowSeconds": 300,
           "revision": "r", "source": "engine"}
    assert not acceptance_due(old, {**old, "rate": 0.508, "windowEnd": "2026-11-30T12:01:30Z"}, "r")
    assert not acceptance_due(old, {**old, "rate": 0.6, "windowEnd": "2026-11-30T12:00:45Z"}, "r")  # < a minute
    assert acceptance_due(old, {**old, "rate": 0.51, "windowEnd": "2026-11-30T12:01:00Z"}, "r")
    assert acceptance_due(old, {**old, "meanLength": 2.06, "windowEnd": "2026-11-30T12:01:00Z"}, "r")
    assert acceptance_due(old, {**old, "windowEnd": "2026-11-30T12:05:00Z"}, "r")  # a whole window old
    short = {**old, "windowSeconds": 30}
    assert not acceptance_due(short, {**short, "windowEnd": "2026-11-30T12:00:45Z"}, "r")  # a minute at least
    assert acceptance_due(short, {**short, "windowEnd": "2026-11-30T12:01:00Z"}, "r")
    assert acceptance_due(old, {**old, "revision": "s"}, "s")
    assert acceptance_due(old, None, "s") and not acceptance_due(old, None, "r")


def test_a_verdict_change_rewrites_the_figures_with_it_however_recent():
    world = World(on_degraded("Alert"))
    world.converge()
    look(world, measured(world, rate=0.7))
    world.now += dt.timedelta(seconds=15)
    plan = look(world, measured(world, "True", 0.3))
    assert plan.status["acceptance"]["rate"] == 0.3 and world.condition("Degraded")["status"] == "True"


@settings(max_examples=30, deadline=None)
@given(st.lists(st.sampled_from(["degrade", "heal", "new-drafter"]), min_size=1, max_size=8))
def test_rollback_never_returns_to_a_degraded_revision_and_every_sequence_settles(steps):
    world = World(on_degraded("Rollback"))
    world.converge()
    tokens = iter(range(1, 17))
    for step in steps:
        if step == "new-drafter":
            change_drafter(world, next(tokens))
            continue
        measurement = measured(world, "True" if step == "degrade" else "False", 0.15 if step == "degrade" else 0.7)
        state = dataclasses.replace(world.state(), acceptance=measurement)
        assert decide(state) == decide(copy.deepcopy(state))  # deterministic, whatever the history
        plan = look(world, measurement)
        action = plan.record_first.get("degradedAction") if plan.record_first else None
        if action:
            marked = {r["name"] for r in world.body["status"]["revisions"] if r.get("degraded")}
            assert action["revision"] not in marked and action["degradedRevision"] in marked
        world.settle()
        converge_with(world, lambda w: None)
        status = world.body["status"]
        assert world.service["spec"]["selector"][REVISION_LABEL] == status["activeRevision"]
        assert len(world.deployments) == 1


def test_a_second_rollback_from_a_revision_with_another_image_keeps_the_spec_revision():
    """A rollback target may run another image than the spec's: the next action is still keyed by the spec."""
    world = World(on_degraded("Rollback"))
    world.converge()
    oldest = world.body["status"]["activeRevision"]
    world.body["spec"]["image"] = "vllm/vllm-openai:v0.32.0"
    change_drafter(world, 4)
    middle = world.body["status"]["activeRevision"]
    world.body["spec"]["image"] = "vllm/vllm-openai:v0.33.0"
    change_drafter(world, 3)
    spec_revision = world.body["status"]["activeRevision"]
    for expected, image in ((middle, "v0.32.0"), (oldest, "v0.33.0")):
        acted = look(world, measured(world, "True", 0.15))
        assert [w.path.rsplit("/", 1)[-1] if w.verb == "patch" else w.body["metadata"]["name"]
                for w in acted.writes if w.plural == "deployments"] == [f"kimi-{expected}"]
        world.settle()
        converge_with(world, lambda w: None)
        action = world.body["status"]["degradedAction"]
        assert (world.body["status"]["activeRevision"], action["specRevision"]) == (expected, spec_revision)
        container = world.deployments[f"kimi-{expected}"]["spec"]["template"]["spec"]["containers"][0]
        assert container["image"].endswith(image)


# --- minAcceptanceLength / minAcceptanceRate: auto (the break-even threshold of the last benchmark) ---------


def watched_verdict(world: World, mean_length: float) -> Measurement:
    """What the acceptance watch hands decide after one window at ``mean_length`` (k = 5, vLLM counters),
    through the watch's own path: watched_revision, then the monitor's thresholds, then evaluate."""
    watched = watched_revision(world.body)
    revision = watched.revision
    monitor = AcceptanceMonitor("team", "kimi")
    monitor.follow(watched)
    drafts = 1000.0
    accepted = (mean_length - 1) * drafts
    window = m.AcceptanceWindow(engine="vllm", drafts=drafts, draft_tokens=5 * drafts, accepted_tokens=accepted,
                                generation_tokens=drafts + accepted, acceptance_rate=accepted / (5 * drafts),
                                mean_acceptance_length=mean_length, rate_source="counters")
    sample = a.AcceptanceSample(at=world.now.timestamp(), window=window)
    verdict = a.evaluate(None, sample, monitor.thresholds)
    block = a.status_block(sample, "engine", 300, world.now.strftime("%Y-%m-%dT%H:%M:%SZ"))
    return Measurement(revision=revision, verdict=verdict, previous=None, status={**block, "revision": revision})


def test_auto_before_any_benchmark_is_unknown_no_benchmark_and_nothing_is_watched():
    world = World(auto_body(minAcceptanceRate="auto"))
    world.converge()
    condition = world.condition("Degraded")
    assert (condition["status"], condition["reason"]) == ("Unknown", a.NO_BENCHMARK)
    assert condition["message"].startswith("spec.acceptance.minAcceptanceRate and minAcceptanceLength are auto")
    assert "no benchmark of this serving yet" in condition["message"] and "spec.swap.gate with a baseline" in \
        condition["message"]
    assert "acceptanceThreshold" not in world.body["status"] and "lastBenchmark" not in world.body["status"]
    assert watched_revision(world.body) is None  # no threshold is made up: the watch does not run
    # A measurement that somehow arrives changes nothing: there is nothing to hold it against.
    assert not look(world, measured(world, "True", 0.15)).writes_anything()


def test_auto_learns_the_break_even_from_the_gate_benchmark_and_the_verdict_cites_it():
    world = World(auto_body())
    world.converge()
    revision = gated_swap(world, {"tokensPerSecond": 54.4, "baselineTokensPerSecond": 82.5, "speedup": 0.66,
                                  "acceptanceLength": 1.75, "acceptanceRate": 0.15})
    status = world.body["status"]
    assert status["lastBenchmark"] == {"name": f"kimi-gate-{revision}", "tokensPerSecond": 54.4, "speedup": 0.66,
                                       "acceptanceLength": 1.75, "numSpeculativeTokens": 5, "revision": revision}
    # c = (1.75 / 0.66 - 1) / 5 = 0.3303, L* = 1 + 5 c = 2.6515, threshold L* x 1.05 = 2.7841
    assert status["acceptanceThreshold"] == {
        "source": f"benchmark kimi-gate-{revision}", "minAcceptanceLength": 2.7841, "draftCost": 0.3303,
        "breakEvenLength": 2.6515, "margin": 0.05, "revision": revision}
    assert world.condition("Degraded")["reason"] == a.INSUFFICIENT_DATA  # learned, not measured yet
    look(world, watched_verdict(world, 2.9))
    assert world.condition("Degraded")["status"] == "False"
    world.now += dt.timedelta(minutes=5)
    look(world, watched_verdict(world, 1.69))
    condition = world.condition("Degraded")
    assert (condition["status"], condition["reason"]) == ("True", a.LOW_LENGTH)
    assert condition["message"] == (
        f"acceptance 13.8% over 5m (690/5000 draft tokens), mean acceptance length 1.69 (1000 drafts) < 2.78 "
        f"(break-even 2.65 + 5%, from benchmark kimi-gate-{revision}: 0.66x at length 1.75, k=5, draft cost 0.33): speculation no longer pays")
    assert ("Warning", a.LOW_LENGTH) in [(e[0], e[1]) for e in world.events]


def test_auto_rate_is_the_break_even_length_per_drafted_token():
    world = World(auto_body(minAcceptanceLength=None, minAcceptanceRate="auto"))
    world.body["spec"]["acceptance"].pop("minAcceptanceLength")
    world.converge()
    gated_swap(world, {"tokensPerSecond": 52.8, "speedup": 0.64, "acceptanceLength": 1.76})
    # c = (1.76 / 0.64 - 1) / 5 = 0.35, L* = 2.75, threshold 2.8875, per drafted token (2.8875 - 1) / 5 = 0.3775
    assert world.body["status"]["acceptanceThreshold"]["minAcceptanceRate"] == 0.3775
    look(world, watched_verdict(world, 1.69))
    assert world.condition("Degraded")["reason"] == a.LOW_RATE
    assert "acceptance 13.8% over 5m (690/5000 draft tokens) < 37.8% (break-even 2.75 + 5%" in \
        world.condition("Degraded")["message"]


def test_a_gate_without_a_baseline_gives_no_threshold_and_says_why():
    world = World(auto_body())
    world.converge()
    gated_swap(world, {"tokensPerSecond": 54.4, "acceptanceLength": 1.75})
    condition = world.condition("Degraded")
    assert (condition["status"], condition["reason"]) == ("Unknown", a.NO_BENCHMARK)
    assert "measured no speedup: it ran without a baseline" in condition["message"]


def test_numbers_in_the_spec_are_recorded_as_the_threshold_in_force():
    world = World(seed_body())
    world.converge()
    assert world.body["status"]["acceptanceThreshold"] == {"source": "spec", "minAcceptanceRate": 0.4}
