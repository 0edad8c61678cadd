"""What production does to a serving and the simulation of old never drew, each as the decision now keeps it
(pure): hands on the serving's children, settings that change under it. docs/guarantees.md names these tests.
"""

from __future__ import annotations

from drafter_operator.resources.labels import REVISION_LABEL, deployment_name
from tests.unit.test_serving_decide import World, finish_gate, gated_body


def gating_swap() -> tuple[World, str, str]:
    """A gated serving mid-swap: revision old serves, revision new is Ready and being benchmarked."""
    world = World(gated_body())
    world.converge()
    old = world.body["status"]["activeRevision"]
    world.ask_for_k(3)
    world.apply(world.decide())
    world.settle()
    world.apply(world.decide())  # Ready: its gate benchmark is created
    (new,) = [r["name"] for r in world.body["status"]["revisions"] if r["name"] != old]
    assert world.condition("Progressing")["reason"] == "Gating"
    return world, old, new


def selected(world: World) -> str:
    return world.service["spec"]["selector"][REVISION_LABEL]


def test_deleting_the_active_deployment_mid_swap_never_moves_traffic_past_the_gate_and_brings_the_active_back():
    world, old, new = gating_swap()
    del world.deployments[deployment_name("kimi", old)]  # kubectl delete deploy, to restart it
    plan = world.decide()
    created = [w.body["metadata"]["name"] for w in plan.writes if w.verb == "create" and w.plural == "deployments"]
    assert created == [deployment_name("kimi", old)]  # rebuilt from its record
    assert plan.swapped is None and not plan.deletes
    world.apply(plan)
    assert selected(world) == old and world.body["status"]["activeRevision"] == old
    world.settle()
    world.apply(world.decide())
    assert selected(world) == old  # still gating: traffic waits for the verdict
    finish_gate(world, passed=True, message="1.3x")
    world.converge()
    assert selected(world) == new


def test_deleting_the_active_deployment_after_the_new_revision_failed_never_serves_the_failed_one():
    world, old, new = gating_swap()
    finish_gate(world, passed=False, message="0.8x")
    world.converge()
    assert selected(world) == old and deployment_name("kimi", new) not in world.deployments
    del world.deployments[deployment_name("kimi", old)]
    world.converge()
    assert selected(world) == old
    assert sorted(world.deployments) == [deployment_name("kimi", old)]  # the good one is back, the failed one not
    assert world.condition("Ready")["status"] == "True"


def test_an_active_revision_that_cannot_be_rebuilt_is_not_replaced_by_an_ungated_one():
    world, old, new = gating_swap()
    # The target changed since: no revision record rebuilds the old revision from this spec.
    world.body["status"]["revisions"] = [dict(r, image="registry.example/other:1") if r["name"] == old else r
                                         for r in world.body["status"]["revisions"]]
    del world.deployments[deployment_name("kimi", old)]
    plan = world.decide()
    assert not [w for w in plan.writes if w.verb == "create" and w.plural == "deployments"]
    assert plan.swapped is None
    world.apply(plan)
    assert selected(world) == old  # nothing serves until the gate passes: what serves is always gated
    finish_gate(world, passed=True, message="1.3x")
    world.converge()
    assert selected(world) == new
