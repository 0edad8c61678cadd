"""An operator killed between any two writes of a swap (pure): the restarted operator decides from what
reached the cluster and finishes the swap with one active revision, no leftover Deployment, and the
revisions history (activeRevision, previousRevision, every revision's verdict) as a swap without a
crash leaves it. bench/swap_faults.py does the same to the real operator on the local cluster.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

from hypothesis import given, settings
from hypothesis import strategies as st

from drafter_operator.controllers.serving.decide import decide
from drafter_operator.controllers.plan import Plan
from drafter_operator.resources.labels import REVISION_LABEL
from tests.support.serving_acceptance import change_drafter, measured, on_degraded
from tests.support.servings import finish_gate, gated_body, merge_patch, seed_body, swapped, World


def operations(world: World, plan: Plan) -> list:
    """The plan's writes in the order ServingReconciler.apply sends them, each a separate request."""
    ops = []
    if plan.record_first:
        ops.append(lambda: world.body.update(status=merge_patch(world.body.get("status") or {}, plan.record_first)))
    for write in plan.writes:
        ops.append(lambda write=write: world.apply(Plan(writes=[write])))
    if plan.status:
        ops.append(lambda: world.body.update(status=merge_patch(world.body.get("status") or {}, plan.status)))
    for path in plan.deletes:
        ops.append(lambda path=path: world.apply(Plan(deletes=[path])))
    return ops


def run_swap(world: World, crashes: list[tuple[int, int]], gate_passes: bool | None = None, steps: int = 16,
             measurement_for=lambda world: None) -> None:
    """Decide and apply until steady; at decision `n` of `crashes` only the first `k` requests land.
    `measurement_for(world)`: what the acceptance watch hands the decision (None: nothing new)."""
    crash_at = dict(crashes)
    for step in range(steps):
        plan = decide(dataclasses.replace(world.state(), acceptance=measurement_for(world)))
        if not plan.writes_anything():
            gates = [b for b in world.benchmarks.values() if "status" not in b]
            if gates and gate_passes is not None:
                finish_gate(world, gate_passes, "every spec.swap.gate threshold met")
                continue
            return
        ops = operations(world, plan)
        for op in ops[:crash_at.get(step, len(ops))]:
            op()
        if step not in crash_at:
            world.events += plan.events
        world.settle()
        world.now += dt.timedelta(seconds=10)
    raise AssertionError(f"no steady state after {steps} steps: {world.decide()}")


def assert_swapped(world: World, old: str) -> None:
    status = world.body["status"]
    new = status["activeRevision"]
    assert new != old
    assert world.service["spec"]["selector"][REVISION_LABEL] == new
    assert [d["metadata"]["labels"][REVISION_LABEL] for d in world.deployments.values()] == [new]
    assert [r["name"] for r in status["revisions"]] == [old, new]
    assert [r.get("good") for r in status["revisions"]] == [True, True]
    assert status["previousRevision"] == old
    assert next(c for c in status["conditions"] if c["type"] == "Ready")["status"] == "True"


crash_points = st.lists(st.tuples(st.integers(0, 8), st.integers(0, 4)), max_size=3)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["BlueGreen", "Recreate"]), crash_points)
def test_a_swap_killed_between_any_two_writes_finishes_with_its_history(strategy, crashes):
    world = World(seed_body(swap={"strategy": strategy}))
    world.converge()
    old = world.body["status"]["activeRevision"]
    world.body["spec"]["drafter"]["numSpeculativeTokens"] = 3
    world.body["metadata"]["generation"] = 2
    run_swap(world, crashes)
    assert_swapped(world, old)


@settings(max_examples=100, deadline=None)
@given(crash_points)
def test_a_gated_swap_killed_between_any_two_writes_benchmarks_once_and_finishes(crashes):
    world = World(gated_body())
    world.converge()
    old = world.body["status"]["activeRevision"]
    world.body["spec"]["drafter"]["numSpeculativeTokens"] = 3
    world.body["metadata"]["generation"] = 2
    run_swap(world, crashes, gate_passes=True)
    assert_swapped(world, old)
    assert len(world.benchmarks) == 1


def test_killed_right_after_the_service_moved_the_restarted_operator_records_previous_revision():
    """The Service switch is the write a restart reads traffic from; the status write after it may never land."""
    world = World(seed_body(swap={"strategy": "BlueGreen"}))
    world.converge()
    old = world.body["status"]["activeRevision"]
    world.body["spec"]["drafter"]["numSpeculativeTokens"] = 3
    world.apply(world.decide())
    world.settle()
    switch = world.decide()
    assert swapped(switch) == "BlueGreen"
    ops = operations(world, switch)
    service_write = next(i for i, w in enumerate(switch.writes) if w.plural == "services")
    for op in ops[:service_write + 1 + bool(switch.record_first)]:  # verdicts, children, the Service: then SIGKILL
        op()
    assert world.body["status"]["activeRevision"] == old  # the status was not written
    world.converge()
    assert_swapped(world, old)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(["Rollback", "DisableSpeculation"]), crash_points)
def test_an_on_degraded_action_killed_between_any_two_writes_finishes(policy, crashes):
    world = World(on_degraded(policy))
    world.converge()
    good = world.body["status"]["activeRevision"]
    if policy == "Rollback":
        change_drafter(world, 3)  # the drafter that will degrade; `good` is the one to roll back to
    bad = world.body["status"]["activeRevision"]
    # The watch keeps finding the bad revision degraded while it serves (a restarted operator's watch too).
    run_swap(world, crashes, measurement_for=lambda w: measured(w, "True", 0.15)
             if w.body["status"]["activeRevision"] == bad else None)
    status = world.body["status"]
    target = status["degradedAction"]["revision"]
    assert status["degradedAction"]["degradedRevision"] == bad
    assert target == (good if policy == "Rollback" else status["revisions"][-1]["name"]) != bad
    assert status["activeRevision"] == target == world.service["spec"]["selector"][REVISION_LABEL]
    assert [d["metadata"]["labels"][REVISION_LABEL] for d in world.deployments.values()] == [target]
    assert status["previousRevision"] == bad
    names = [r["name"] for r in status["revisions"]]
    assert len(names) == len(set(names)) and names[:2] == ([good, bad] if policy == "Rollback" else [bad, target])
    assert next(r for r in status["revisions"] if r["name"] == bad)["degraded"] is True
    assert next(r for r in status["revisions"] if r["name"] == target)["good"] is True
