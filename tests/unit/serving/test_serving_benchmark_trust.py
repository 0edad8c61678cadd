"""Which finished DrafterBenchmarks a DrafterServing learns from: only those that measured it.

A serving learns three things from benchmarks of its active revision: its load schedule
(`drafter.dynamic: fromBenchmark`, status.speculationSchedule), its SPEEDUP (status.lastBenchmark) and its
`auto` acceptance thresholds (status.acceptanceThreshold). Anyone who may create a DrafterBenchmark can
measure any URL and label the run with a serving's revision, and the benchmark controller records that label as
the run's revision: counted, such a run steered a production serving (a schedule with speculation off at every
load, a made-up SPEEDUP, thresholds from made-up numbers). What counts: a run whose target is the serving itself
(spec.servingRef; the benchmark controller recorded the revision it found active when the run started) and the
operator's own gates (owned by the serving). The real decide, on chosen inputs.
"""

from __future__ import annotations

import copy

from drafter_operator.constants import GATE_LABEL, REVISION_LABEL, SERVING_LABEL
from tests.support.servings import World, seed_body

#: A load sweep that says speculation never pays (0.5x at every level): learned, the schedule turns it off.
NEVER_PAYS = [{"concurrency": c, "speedup": 0.5, "tokensPerSecond": 100.0 * c} for c in (1, 8, 32)]


def serving() -> World:
    spec = seed_body(acceptance={"minAcceptanceRate": "auto"})
    spec["spec"]["drafter"]["dynamic"] = "fromBenchmark"
    world = World(spec)
    world.converge()
    return world


def finished(name: str, revision: str, *, spec: dict, labels: dict | None = None, owners: list | None = None) -> dict:
    """A DrafterBenchmark the benchmark controller finished: status.revision as it records it (the serving's
    active revision for a servingRef run, the revision label for an endpoint run)."""
    metadata: dict = {"name": name, "namespace": "team", "labels": labels or {}}
    if owners:
        metadata["ownerReferences"] = owners
    return {"metadata": metadata, "spec": spec, "status": {
        "state": "Succeeded", "completionTime": "2026-11-29T13:00:00Z", "revision": revision, "numSpeculativeTokens": 5,
        "result": {"tokensPerSecond": 900.0, "speedup": 0.5, "acceptanceLength": 1.2, "levels": NEVER_PAYS}}}


def learned(world: World) -> tuple:
    status = world.body["status"]
    return (status.get("speculationSchedule"), status.get("lastBenchmark"), status.get("acceptanceThreshold"),
            status.get("activeRevision"), sorted(world.deployments))


def after(world: World, benchmark: dict) -> World:
    world = copy.deepcopy(world)
    world.benchmarks[benchmark["metadata"]["name"]] = benchmark
    world.events = []
    world.converge()
    return world


def test_an_endpoint_run_labelled_with_the_revision_changes_no_schedule_speedup_or_threshold():
    world = serving()
    active = world.body["status"]["activeRevision"]
    before = learned(world)
    assert before[0]["source"] == "static" and before[1] is None and before[2] is None
    labels = {SERVING_LABEL: "kimi", REVISION_LABEL: active}
    for forged in (
        finished("endpoint-run", active, spec={"endpoint": "http://10.9.9.9:8000"}, labels=labels),
        # owned like a gate but no gate: only the operator's gates speak for the serving
        finished("owned-endpoint-run", active, spec={"endpoint": "http://10.9.9.9:8000"}, labels=labels,
                 owners=[{"uid": "u-1"}]),
        # a run of another serving, labelled with this one's
        finished("other-serving", active, spec={"servingRef": {"name": "other"}}, labels=labels),
    ):
        steered = after(world, forged)
        assert learned(steered) == before, forged["metadata"]["name"]
        # and it says nothing wrong: Ready, no Warning, no condition naming the run
        assert steered.condition("Ready")["status"] == "True"
        assert not [e for e in steered.events if e[0] == "Warning"]
        assert not [c for c in steered.body["status"]["conditions"] if forged["metadata"]["name"] in c.get("message", "")]


def test_a_run_against_the_serving_itself_still_sets_schedule_speedup_and_threshold():
    world = serving()
    active = world.body["status"]["activeRevision"]
    measured = after(world, finished("by-hand", active, spec={"servingRef": {"name": "kimi"}}))
    schedule, last, threshold, now_active, _ = learned(measured)
    assert schedule["source"] == "benchmark by-hand" and schedule["revision"] == active
    assert schedule["ranges"][0]["numSpeculativeTokens"] == 0  # speculation off from the first stream
    assert last["name"] == "by-hand" and last["speedup"] == 0.5
    assert threshold["source"] == "benchmark by-hand"
    assert now_active != active  # the learned schedule is a new revision, rolled out


def test_the_operators_own_gate_still_counts_and_a_gate_label_alone_does_not():
    world = serving()
    active = world.body["status"]["activeRevision"]
    gate_labels = {SERVING_LABEL: "kimi", REVISION_LABEL: active, GATE_LABEL: "true"}
    endpoint = {"endpoint": "http://10.0.0.1:8000"}
    unowned = after(world, finished("kimi-gate-x", active, spec=endpoint, labels=gate_labels))
    assert learned(unowned) == learned(world)
    own = after(world, finished("kimi-gate-x", active, spec=endpoint, labels=gate_labels, owners=[{"uid": "u-1"}]))
    assert learned(own)[1]["name"] == "kimi-gate-x" and learned(own)[0]["source"] == "benchmark kimi-gate-x"
