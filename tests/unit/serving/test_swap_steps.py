"""The named steps of plan_swap, each on its own: the first revision, a failed desired revision, the swap
step (roll back, gate, switch, start beside, recreate) and what keeps the active revision serving."""

from __future__ import annotations

import dataclasses
import datetime as dt

from hypothesis import given
from hypothesis import strategies as st

from drafter_operator.controllers.swap import (
    SwapPlan,
    Verdict,
    _failed_earlier,
    _first_revision,
    _gate_step,
    _keep_active,
    _recreate,
    _start_beside,
    _swap_step,
    _switch,
)
from tests.support.swaps import T0, inp, rev


def test_a_first_revision_that_failed_has_nothing_to_fall_back_to():
    plan = _first_revision(inp(active=None, revisions=[rev("new", exited="exit 1", restarts=2)]), SwapPlan())
    assert plan.mark_failed == "new" and plan.mark_good is None and plan.service_revision == "new"
    assert plan.progressing.message.endswith("there is no earlier revision to fall back to")
    again = _first_revision(inp(active=None, failed=["new"], revisions=[rev("new")]), SwapPlan())
    assert again.mark_failed is None and again.events == []  # recorded already: said once
    assert "did not become Ready within 45m" in again.progressing.message


def test_a_desired_revision_that_failed_before_leaves_the_active_one_serving():
    plan = _failed_earlier(inp(failed=["new"], revisions=[rev("old", ready=1), rev("new")]), SwapPlan())
    assert plan.service_revision == "old" and plan.delete == ["new"] and plan.scale == {"old": 1}
    assert plan.progressing.reason == "RevisionFailed" and "Change the spec" in plan.progressing.message


def test_keep_active_fails_the_desired_revision_and_scales_the_active_one():
    plan = SwapPlan()
    _keep_active(inp(revisions=[rev("old", ready=1)]), plan, "was bad")
    assert (plan.mark_failed, plan.failure_reason, plan.delete, plan.scale) == ("new", "was bad", ["new"], {"old": 1})
    assert plan.ready.status == "True"


def gated(**fields):
    return dataclasses.replace(inp(revisions=[rev("old", ready=1), rev("new", ready=1)]), gated=True, **fields)


def test_the_gate_step_runs_the_gate_then_fails_it_on_a_bad_verdict_or_past_its_deadline():
    running = _gate_step(gated(), SwapPlan())
    assert running.run_gate == "new" and running.scale == {"old": 1, "new": 1} and running.progressing.reason == "Gating"
    refused = _gate_step(gated(gate=Verdict("False", "BelowGate", "slow")), SwapPlan())
    assert refused.mark_failed == "new" and refused.failure_reason == "failed spec.swap.gate (slow)"
    late = _gate_step(gated(gating_since=T0 - dt.timedelta(minutes=31)), SwapPlan())
    assert late.progressing.reason == "GateTimedOut" and late.delete == ["new"]
    assert _gate_step(gated(gate=Verdict("True", "GateMet", "ok")), SwapPlan()) is None


@given(st.integers(min_value=0, max_value=3))
def test_a_switch_moves_the_service_and_marks_good_only_a_revision_with_pods(replicas):
    plan = _switch(inp(replicas=replicas, revisions=[rev("new", ready=replicas)]), SwapPlan())
    assert plan.service_revision == plan.active == "new" and plan.switched_from == "old"
    assert plan.mark_good == ("new" if replicas > 0 else None)


def test_bluegreen_starts_beside_and_says_when_capacity_is_short():
    plan = _start_beside(inp(revisions=[rev("old", ready=1), rev("new", unschedulable="0/3 nodes")]), SwapPlan())
    assert plan.scale == {"old": 1, "new": 1} and plan.progressing.reason == "InsufficientCapacity"
    assert _start_beside(inp(revisions=[rev("old", ready=1)]), SwapPlan()).progressing.reason == "RevisionStarting"


def test_recreate_stops_the_old_revision_before_starting_the_new_one():
    stopping = _recreate(inp(strategy="Recreate", revisions=[rev("old", ready=1)]), SwapPlan())
    assert stopping.scale == {"old": 0} and stopping.progressing.reason == "StoppingOldRevision"
    stopped = _recreate(inp(strategy="Recreate", revisions=[rev("old", pods=0)]), SwapPlan())
    assert stopped.scale == {"old": 0, "new": 1} and stopped.progressing.reason == "RevisionStarting"


def test_the_swap_step_rolls_back_a_revision_that_failed_to_start_and_spares_a_draining_one():
    both = [rev("old", ready=1), rev("new", exited="exit 1", restarts=2), rev("older", ready=1)]
    plan = _swap_step(inp(revisions=both, previous="older", switched_ago=5), SwapPlan())
    assert plan.mark_failed == "new" and plan.delete == ["new"]  # "older" still drains
    assert plan.events[0][1] == "RevisionFailed" and "rolled back to revision old" in plan.progressing.message
