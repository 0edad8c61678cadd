"""The four broken promises of the serving-guarantees issue, each as the decision now keeps it (pure).

docs/guarantees.md names these tests; the simulation (tests/simulation) checks the same properties
under random operations and faults, and its mutants re-introduce each defect.
"""

from __future__ import annotations

import datetime as dt

from drafter_operator.controllers.serving.decide import decide
from drafter_operator.resources.labels import REVISION_LABEL
from tests.support.serving_acceptance import converge_with, look, measured, on_degraded
from tests.support.servings import finish_gate, gated_body, seed_body, swapped, World


def start_new_revision(world: World, tokens: int = 3) -> None:
    """A new k in the spec (a new generation): the new revision is created and its pods become Ready."""
    world.ask_for_k(tokens)
    world.apply(world.decide())
    world.settle()


def endpoint(world: World) -> tuple:
    ports = [(p["port"], p["targetPort"]) for p in world.service["spec"]["ports"]]
    return world.service["metadata"]["name"], ports, world.body["status"]["endpoint"]


def test_an_engine_switch_keeps_the_service_port_and_the_published_endpoint():
    world = World(seed_body(swap={"strategy": "BlueGreen"}))
    world.converge()
    before = endpoint(world)
    assert before[1] == [(8000, "http")] and before[2]["url"].endswith(":8000/v1")
    world.body["spec"]["engine"] = "sglang"
    world.body["spec"]["image"] = "lmsysorg/sglang:v0.5.23"
    world.body["spec"]["drafter"] = {"method": "eagle3", "model": "/models/drafters/kimi-k25-eagle3", "numSteps": 3}
    world.body["metadata"]["generation"] = 2
    starting = world.decide()
    # The swap's first step starts the SGLang revision beside the vLLM one and leaves the Service alone.
    assert [w.plural for w in starting.writes] == ["deployments"]
    world.apply(starting)
    assert endpoint(world) == before
    world.settle()
    world.converge()
    assert world.body["status"]["serving"]["engine"] == "sglang"
    assert endpoint(world) == before  # the SGLang pods listen on 30000; the Service reaches them by port name


def test_disable_speculation_with_a_gate_takes_effect_without_being_gated():
    body = gated_body()
    body["spec"]["acceptance"]["onDegraded"] = "DisableSpeculation"
    world = World(body)
    world.converge()
    bad = world.body["status"]["activeRevision"]
    acted = look(world, measured(world, "True", 0.15))
    baseline = acted.record_first["degradedAction"]["revision"]
    assert world.condition("Degraded")["reason"] == "LowAcceptanceRate"
    look(world, measured(world, "True", 0.15))
    assert world.condition("Degraded")["reason"] == "ActionInProgress"  # not SpeculationDisabled: bad still serves
    assert f"revision {bad} (degraded) keeps serving" in world.condition("Degraded")["message"]
    world.settle()
    converge_with(world, lambda w: None)
    assert world.benchmarks == {}  # no gate benchmark of the no-speculation revision
    assert world.body["status"]["activeRevision"] == baseline
    assert world.service["spec"]["selector"][REVISION_LABEL] == baseline
    assert (world.condition("Degraded")["status"], world.condition("Degraded")["reason"]) == ("True", "SpeculationDisabled")
    assert world.body["status"]["serving"]["method"] == "none"


def test_an_action_whose_revision_fails_says_so_and_the_degraded_revision_is_still_measured():
    world = World(on_degraded("DisableSpeculation"))
    world.converge()
    bad = world.body["status"]["activeRevision"]
    look(world, measured(world, "True", 0.15))
    # The no-speculation revision never becomes Ready: its pods stay unready until the startup limit.
    world.now += dt.timedelta(hours=2)
    for _ in range(3):
        plan = look(world, measured(world, "True", 0.13))
        world.now += dt.timedelta(seconds=20)
    assert world.body["status"]["activeRevision"] == bad
    degraded = world.condition("Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "ActionFailed"), degraded
    assert "could not take effect" in degraded["message"]
    assert ("Warning", "ActionFailed") in [(e[0], e[1]) for e in world.events]
    assert world.body["status"]["acceptance"]["revision"] == bad  # measurement goes on
    assert plan is not None


def test_a_gate_that_never_finishes_frees_the_new_revision_at_its_deadline():
    world = World(gated_body())
    world.converge()
    old = world.body["status"]["activeRevision"]
    start_new_revision(world)
    gating = world.decide()
    world.apply(gating)
    assert next(c for c in gating.status["conditions"] if c["type"] == "Progressing")["reason"] == "Gating"
    assert gating.recheck_at is not None  # the deadline wakes the loop: no event is needed
    since = world.body["status"]["gating"]["since"]
    deadline = dt.datetime.fromisoformat(since.replace("Z", "+00:00")) + dt.timedelta(minutes=30)
    assert gating.recheck_at <= deadline + dt.timedelta(seconds=1)
    world.now += dt.timedelta(minutes=10)
    assert world.decide().status.get("gating") is None  # since stays where the gating began
    world.now = deadline - dt.timedelta(seconds=5)
    assert not world.decide().deletes  # still within gateTimeout
    world.now = deadline + dt.timedelta(seconds=5)
    timed_out = world.decide()
    assert [p.rsplit("/", 1)[1] for p in timed_out.deletes] != [] and not swapped(timed_out)
    assert ("Warning", "GateTimedOut") in [(e[0], e[1]) for e in timed_out.events]
    world.apply(timed_out)
    world.converge()
    assert [d["metadata"]["labels"][REVISION_LABEL] for d in world.deployments.values()] == [old]
    assert world.condition("Progressing")["reason"] == "RevisionFailed"
    assert "spec.swap.gateTimeout 30m" in world.condition("Progressing")["message"]
    assert "gating" not in world.body["status"]


def test_a_gate_that_finishes_in_time_is_judged_as_before():
    world = World(gated_body(), now=dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc))
    world.converge()
    world.body["spec"]["drafter"]["numSpeculativeTokens"] = 3
    world.apply(world.decide())
    world.settle()
    world.apply(world.decide())
    world.now += dt.timedelta(minutes=29)  # within gateTimeout of the gating
    finish_gate(world, True, "every spec.swap.gate threshold met")
    assert swapped(world.decide()) == "BlueGreen"


def test_status_serving_and_speedup_describe_the_revision_that_serves_not_the_spec():
    world = World(on_degraded("DisableSpeculation"))
    world.converge()
    assert world.body["status"]["serving"]["method"] == "eagle3"
    assert world.body["status"]["serving"]["numSpeculativeTokens"] == 5
    world.body["status"]["lastBenchmark"] = {"name": "by-hand", "speedup": 0.66,
                                             "revision": world.body["status"]["activeRevision"]}
    look(world, measured(world, "True", 0.15))
    world.settle()
    converge_with(world, lambda w: None)
    serving = world.body["status"]["serving"]
    assert serving["method"] == "none" and "numSpeculativeTokens" not in serving
    assert world.body["spec"]["drafter"]["method"] == "eagle3"
    assert "lastBenchmark" not in world.body["status"]  # 0.66x was the degraded drafter's


def switched_world(**swap) -> tuple[World, str, str]:
    """A BlueGreen swap that just moved traffic: (world, old revision, new revision)."""
    world = World(seed_body(swap={"strategy": "BlueGreen", **swap}))
    world.converge()
    old = world.body["status"]["activeRevision"]
    start_new_revision(world)
    switched = world.decide()
    assert swapped(switched) == "BlueGreen"
    world.apply(switched)
    return world, old, world.body["status"]["activeRevision"]


def old_deployment_kept(world: World, old: str) -> bool:
    return any(d["metadata"]["labels"][REVISION_LABEL] == old for d in world.deployments.values())


def test_the_old_revision_runs_until_its_streams_finish_then_stops_at_once():
    world, old, new = switched_world()
    world.in_flight[old] = 2  # two long streams still running on the old pods
    world.now += dt.timedelta(minutes=2)  # far past the 15 s drain for proxies
    plan = world.decide()
    assert not plan.deletes and old_deployment_kept(world, old)
    assert plan.recheck_at is not None and plan.recheck_at <= world.now + dt.timedelta(seconds=6)  # asks again soon
    world.in_flight[old] = 0
    done = world.decide()
    assert [p.rsplit("/", 1)[1] for p in done.deletes] == [f"kimi-{old}"]


def test_an_old_revision_that_cannot_be_read_is_stopped_at_drain_timeout_not_before():
    world, old, new = switched_world(drainTimeout="10m")

    def unknown_in_flight():  # its pods' metrics did not answer: the count is unknown, never 0
        state = world.state()
        state.observed.in_flight.clear()
        return state

    world.now += dt.timedelta(minutes=9)
    assert not decide(unknown_in_flight()).deletes
    world.now += dt.timedelta(minutes=1, seconds=1)
    assert [p.rsplit("/", 1)[1] for p in decide(unknown_in_flight()).deletes] == [f"kimi-{old}"]


def test_a_new_swap_during_a_drain_keeps_the_draining_revision():
    world, old, new = switched_world()
    world.in_flight[old] = 1
    world.now += dt.timedelta(seconds=30)
    world.body["spec"]["drafter"]["numSpeculativeTokens"] = 4
    world.body["metadata"]["generation"] = 3
    plan = world.decide()
    assert f"/deployments/kimi-{old}" not in " ".join(plan.deletes)


def test_a_failed_revision_starts_again_on_the_retry_annotation_without_a_spec_change():
    world = World(seed_body(swap={"strategy": "BlueGreen"}))
    world.converge()
    old = world.body["status"]["activeRevision"]
    world.ask_for_k(3)
    world.apply(world.decide())  # started, never Ready (not settled)
    world.now += dt.timedelta(hours=1)
    world.apply(world.decide())
    (failed,) = [r for r in world.body["status"]["revisions"] if r.get("good") is False]
    assert [d["metadata"]["labels"][REVISION_LABEL] for d in world.deployments.values()] == [old]
    world.now += dt.timedelta(minutes=5)
    assert not world.decide().writes  # not retried on its own
    world.body["metadata"]["annotations"] = {"drafter.dev/retry": "node-repaired"}
    retry = world.decide()
    assert [w.body["metadata"]["labels"][REVISION_LABEL] for w in retry.writes if w.plural == "deployments"] == [failed["name"]]
    assert retry.record_first["retryRequest"] == "node-repaired" and ("Normal", "RetryRequested") in [e[:2] for e in retry.events]
    world.apply(retry)
    world.settle()
    world.converge()
    assert world.body["status"]["activeRevision"] == failed["name"]
    assert not world.decide().writes_anything()  # the same annotation value does not retry again


def test_the_loop_asks_the_engines_of_the_revision_traffic_left_and_of_no_other():
    from drafter_operator.controllers.serving.pointer import draining_revisions, revision_engine
    world, old, new = switched_world()
    assert draining_revisions(world.state().observed) == [old]
    assert revision_engine(world.body, old) == "vllm"
    world.now += dt.timedelta(seconds=20)
    world.apply(world.decide())  # drained (the World's engines report nothing in flight) and deleted
    assert draining_revisions(world.state().observed) == []


def test_a_measurement_of_an_earlier_serving_of_the_same_name_is_not_evidence():
    import dataclasses

    from tests.support.serving_acceptance import measured
    world = World(seed_body())
    world.converge()
    old_incarnation = dataclasses.replace(measured(world, "True", 0.12), serving_uid="u-deleted")
    plan = decide(dataclasses.replace(world.state(), acceptance=old_incarnation))
    assert "acceptance" not in plan.status
    assert next(c for c in plan.status.get("conditions", world.body["status"]["conditions"])
                if c["type"] == "Degraded")["status"] == "Unknown"
    mine = dataclasses.replace(old_incarnation, serving_uid=world.body["metadata"]["uid"])
    assert decide(dataclasses.replace(world.state(), acceptance=mine)).status["acceptance"]["rate"] == 0.12


def test_a_revision_asked_for_again_while_it_drains_is_gated_from_now_not_from_its_creation():
    """The simulation's seed 1123: back to the previous drafter 36 s after a switch, with a gate. The old
    revision (Ready, created hours ago) is gated from now on; its streams are not cut by a deadline that
    counted from its creation."""
    world = World(gated_body())
    world.converge()
    first = world.body["status"]["activeRevision"]
    world.now += dt.timedelta(hours=3)
    start_new_revision(world)
    world.apply(world.decide())  # gating the new revision
    finish_gate(world, True, "every spec.swap.gate threshold met")
    world.apply(world.decide())  # switched; the first revision drains
    world.in_flight[first] = 2
    world.now += dt.timedelta(seconds=36)
    world.body["spec"]["drafter"]["numSpeculativeTokens"] = 5
    world.body["metadata"]["generation"] = 3
    back = world.decide()
    assert not [p for p in back.deletes if first in p]
    assert back.status["gating"]["revision"] == first
