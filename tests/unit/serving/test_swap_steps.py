"""The named steps of plan_swap, each through plan_swap on an input that takes it there: the first revision, a
failed desired revision, the swap step (roll back, gate, switch, start beside, recreate) and what keeps the
active revision serving. The steps themselves are private: a re-cut of the planner keeps these tests."""

from __future__ import annotations

import dataclasses
import datetime as dt

from hypothesis import given
from hypothesis import strategies as st

from drafter_operator.controllers.swap import Verdict, plan_swap, start_failure
from tests.support.swaps import T0, inp, rev


def test_a_first_revision_that_failed_has_nothing_to_fall_back_to():
    plan = plan_swap(inp(active=None, revisions=[rev("new", exited="exit 1", restarts=2)]))
    assert plan.mark_failed == "new" and plan.mark_good is None and plan.service_revision == "new"
    assert plan.progressing.message.endswith("there is no earlier revision to fall back to")
    again = plan_swap(inp(active=None, failed=["new"], revisions=[rev("new")]))
    assert again.mark_failed is None and again.events == []  # recorded already: said once
    assert "did not become Ready within 45m" in again.progressing.message


def test_a_desired_revision_that_failed_before_leaves_the_active_one_serving():
    plan = plan_swap(inp(failed=["new"], revisions=[rev("old", ready=1), rev("new")]))
    assert plan.service_revision == "old" and plan.delete == ["new"] and plan.scale == {"old": 1}
    assert plan.progressing.reason == "RevisionFailed" and "Change the spec" in plan.progressing.message


def test_keep_active_fails_the_desired_revision_and_scales_the_active_one():
    # A swap whose new revision failed to start: plan_swap keeps the active one, with the failure's own reason.
    swap = inp(revisions=[rev("old", ready=1), rev("new", exited="exit 1", restarts=2)])
    plan = plan_swap(swap)
    why = start_failure(swap.revisions["new"], swap.replicas, swap)
    assert why is not None
    assert (plan.mark_failed, plan.failure_reason, plan.delete, plan.scale) == ("new", why, ["new"], {"old": 1})
    assert plan.ready.status == "True"


def gated(**fields):
    return dataclasses.replace(inp(revisions=[rev("old", ready=1), rev("new", ready=1)]), gated=True, **fields)


def test_the_gate_step_runs_the_gate_then_fails_it_on_a_bad_verdict_or_past_its_deadline():
    running = plan_swap(gated())
    assert running.run_gate == "new" and running.scale == {"old": 1, "new": 1} and running.progressing.reason == "Gating"
    refused = plan_swap(gated(gate=Verdict("False", "BelowGate", "slow")))
    assert refused.mark_failed == "new" and refused.failure_reason == "failed spec.swap.gate (slow)"
    late = plan_swap(gated(gating_since=T0 - dt.timedelta(minutes=31)))
    assert late.progressing.reason == "GateTimedOut" and late.delete == ["new"]
    passed = plan_swap(gated(gate=Verdict("True", "GateMet", "ok")))  # the gate step steps aside: traffic moves
    assert passed.run_gate is None and passed.mark_failed is None and passed.service_revision == "new"


@given(st.integers(min_value=0, max_value=3))
def test_a_switch_moves_the_service_and_marks_good_only_a_revision_with_pods(replicas):
    plan = plan_swap(inp(replicas=replicas, revisions=[rev("new", ready=replicas)]))
    assert plan.service_revision == plan.active == "new" and plan.switched_from == "old"
    assert plan.mark_good == ("new" if replicas > 0 else None)


def test_bluegreen_starts_beside_and_says_when_capacity_is_short():
    plan = plan_swap(inp(revisions=[rev("old", ready=1), rev("new", unschedulable="0/3 nodes")]))
    assert plan.scale == {"old": 1, "new": 1} and plan.progressing.reason == "InsufficientCapacity"
    assert plan_swap(inp(revisions=[rev("old", ready=1)])).progressing.reason == "RevisionStarting"


def test_recreate_stops_the_old_revision_before_starting_the_new_one():
    stopping = plan_swap(inp(strategy="Recreate", revisions=[rev("old", ready=1)]))
    assert stopping.scale == {"old": 0} and stopping.progressing.reason == "StoppingOldRevision"
    stopped = plan_swap(inp(strategy="Recreate", revisions=[rev("old", pods=0)]))
    assert stopped.scale == {"old": 0, "new": 1} and stopped.progressing.reason == "RevisionStarting"


def test_the_swap_step_rolls_back_a_revision_that_failed_to_start_and_spares_a_draining_one():
    both = [rev("old", ready=1), rev("new", exited="exit 1", restarts=2), rev("older", ready=1)]
    plan = plan_swap(inp(revisions=both, previous="older", switched_ago=5))
    assert plan.mark_failed == "new" and plan.delete == ["new"]  # "older" still drains
    assert plan.events[0][1] == "RevisionFailed" and "rolled back to revision old" in plan.progressing.message
