"""The swap state machine (pure): every step of Recreate and BlueGreen, timeouts, restarts."""

from __future__ import annotations


from hypothesis import given
from hypothesis import strategies as st

from drafter_operator.controllers.swap import plan_swap
from tests.support.swaps import T0, inp, rev


def test_first_revision_points_traffic_at_itself_and_becomes_ready():
    starting = plan_swap(inp(active=None, revisions=[]))
    assert starting.scale == {"new": 1} and starting.service_revision == "new"
    assert starting.ready.status == "False" and starting.progressing.reason == "RevisionStarting"
    ready = plan_swap(inp(active=None, revisions=[rev("new", ready=1)]))
    assert ready.ready.status == "True" and ready.mark_good == "new"


def test_bluegreen_keeps_traffic_on_the_old_revision_until_the_new_one_is_ready():
    plan = plan_swap(inp(revisions=[rev("old", ready=1), rev("new", ready=0)]))
    assert plan.scale == {"old": 1, "new": 1}
    assert plan.service_revision == "old" and plan.delete == []
    assert plan.ready.status == "True"  # still serving
    assert plan.progressing.status == "True"


def test_bluegreen_switches_then_deletes_the_old_revision_once_drained():
    plan = plan_swap(inp(revisions=[rev("old", ready=1), rev("new", ready=1)]))
    assert plan.service_revision == plan.active == "new"
    assert plan.switched_from == "old" and plan.delete == [] and plan.mark_good == "new"
    assert ("Normal", "Switched", "traffic moved from revision old to new (BlueGreen)") in plan.events
    both = [rev("old", ready=1), rev("new", ready=1)]
    draining = plan_swap(inp(active="new", revisions=both, previous="old", switched_ago=5))
    assert draining.delete == [] and draining.service_revision == "new"
    drained = plan_swap(inp(active="new", revisions=both, previous="old", switched_ago=16))
    assert drained.delete == ["old"]
    # Requests still running on the old pods (or no answer from them) hold the drain until drain_timeout.
    busy = plan_swap(inp(active="new", revisions=both, previous="old", switched_ago=16, in_flight={"old": 1}))
    unknown = plan_swap(inp(active="new", revisions=both, previous="old", switched_ago=299, in_flight={}))
    assert busy.delete == [] and unknown.delete == []
    assert plan_swap(inp(active="new", revisions=both, previous="old", switched_ago=301, in_flight={"old": 1})).delete == ["old"]


def test_bluegreen_without_capacity_says_so():
    plan = plan_swap(inp(revisions=[rev("old", ready=1), rev("new", unschedulable="0/2 nodes are available: "
                                                             "2 Insufficient nvidia.com/gpu.")]))
    assert plan.progressing.reason == "InsufficientCapacity"
    assert "Insufficient nvidia.com/gpu" in plan.progressing.message and "Recreate" in plan.progressing.message
    assert plan.service_revision == "old"


def test_recreate_stops_the_old_revision_first_and_waits_for_its_pods():
    plan = plan_swap(inp(strategy="Recreate", revisions=[rev("old", ready=1, pods=1)]))
    assert plan.scale == {"old": 0} and "new" not in plan.scale
    assert plan.progressing.reason == "StoppingOldRevision"
    plan = plan_swap(inp(strategy="Recreate", revisions=[rev("old", ready=0, replicas=0, pods=0)]))
    assert plan.scale == {"old": 0, "new": 1}
    assert plan.service_revision == "old"  # traffic moves only once the new revision is Ready


def test_recreate_switches_when_ready_and_deletes_the_old_deployment():
    plan = plan_swap(inp(strategy="Recreate", revisions=[rev("old", replicas=0, pods=0), rev("new", ready=1)]))
    assert plan.service_revision == "new" and plan.switched_from == "old"


def test_recreate_timeout_rolls_back_to_the_old_revision():
    plan = plan_swap(inp(strategy="Recreate", revisions=[rev("old", replicas=0, pods=0),
                                                          rev("new", ready=0, age_min=46)]))
    assert plan.mark_failed == "new" and "new" in plan.delete
    assert plan.scale == {"old": 1} and plan.service_revision == "old"
    assert plan.progressing.reason == "RevisionFailed"
    assert plan.events[0][:2] == ("Warning", "RevisionFailed")


def test_bluegreen_timeout_abandons_the_new_revision():
    plan = plan_swap(inp(revisions=[rev("old", ready=1), rev("new", age_min=45.5)]))
    assert plan.mark_failed == "new" and plan.delete == ["new"] and plan.service_revision == "old"


def test_a_failed_revision_is_not_retried_until_the_spec_changes():
    plan = plan_swap(inp(failed={"new"}, revisions=[rev("old", ready=1)]))
    assert "new" not in plan.scale and plan.service_revision == "old"
    assert plan.progressing.reason == "RevisionFailed" and plan.ready.status == "True"


def test_stale_revisions_are_deleted_in_steady_state():
    plan = plan_swap(inp(desired="old", revisions=[rev("old", ready=1), rev("abandoned")]))
    assert plan.delete == ["abandoned"] and plan.scale == {"old": 1}


def test_scaled_to_zero_is_not_ready_but_not_progressing():
    plan = plan_swap(inp(desired="old", replicas=0, revisions=[rev("old", replicas=0, pods=0)]))
    assert plan.ready.reason == "ScaledToZero" and plan.progressing.status == "False"


revisions_st = st.lists(st.builds(rev, name=st.sampled_from(["old", "new", "x"]), ready=st.integers(0, 2),
                                  replicas=st.integers(0, 2), pods=st.integers(0, 2), age_min=st.floats(0, 100)),
                        unique_by=lambda r: r.name, max_size=3)


@given(revisions_st, st.sampled_from(["Recreate", "BlueGreen"]), st.sampled_from([None, "old", "new"]),
       st.integers(0, 2), st.sets(st.sampled_from(["old", "new", "x"])))
def test_invariants(revisions, strategy, active, replicas, failed):
    plan = plan_swap(inp(active=active, strategy=strategy, revisions=revisions, replicas=replicas, failed=failed))
    # Traffic always points somewhere once there is a revision, never at a deleted one.
    assert plan.service_revision is not None
    assert plan.service_revision not in plan.delete
    # Nothing is both kept and deleted, and the desired revision is never deleted unless it failed.
    assert not set(plan.scale) & set(plan.delete)
    assert "new" not in plan.delete or plan.mark_failed == "new" or "new" in failed or active == "new"
    # Traffic moves only to a Ready revision.
    if plan.switched_from:
        target = {r.name: r for r in revisions}[plan.service_revision]
        assert target.ready >= replicas


def _deployment(revision: str, ready: int, generation: int = 1, observed: int = 1, deleting: bool = False) -> dict:
    meta = {"name": f"s-{revision}", "labels": {"drafter.dev/revision": revision}, "generation": generation,
            "creationTimestamp": "2026-11-29T12:00:00Z"}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-29T12:01:00Z"
    return {"metadata": meta, "spec": {"replicas": 1}, "status": {"readyReplicas": ready, "observedGeneration": observed}}


def _pod(revision: str, unschedulable: str | None = None) -> dict:
    conditions = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": unschedulable}] \
        if unschedulable else []
    return {"metadata": {"labels": {"drafter.dev/revision": revision}}, "status": {"conditions": conditions}}


def test_observed_from_groups_children_by_revision():
    from drafter_operator.controllers.serving.observe import observed_from

    observed = observed_from(
        [_deployment("a", 1), _deployment("b", 1, generation=2, observed=1), _deployment("c", 1, deleting=True)],
        [_pod("a"), _pod("b", "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."), _pod("b")], None)
    assert set(observed.revisions) == {"a", "b"}  # a Deployment being deleted is no revision any more
    assert observed.revisions["a"].ready == 1 and observed.revisions["a"].pods == 1
    # readyReplicas of a spec the Deployment controller has not seen yet does not count
    assert observed.revisions["b"].ready == 0 and observed.revisions["b"].pods == 2
    assert "Insufficient nvidia.com/gpu" in observed.revisions["b"].unschedulable
    assert observed.revisions["a"].created == T0


OFFLINE_EXIT = "engine exited with code 1: OSError: We couldn't connect to 'https://huggingface.co' ..."


def test_a_first_revision_whose_engine_exits_fails_at_once_with_its_output_even_behind_its_service():
    for active in (None, "new"):  # before and after its Service exists (it points at the revision at once)
        plan = plan_swap(inp(active=active, good=(), revisions=[rev("new", exited=OFFLINE_EXIT)]))
        assert plan.mark_failed == "new" and plan.failure_reason == f"failed to start: {OFFLINE_EXIT} (after 2 restarts)"
        assert plan.progressing.reason == "RevisionFailed" and OFFLINE_EXIT in plan.progressing.message
        assert "no earlier revision to fall back to" in plan.progressing.message
        assert plan.ready.reason == "EngineExited" and OFFLINE_EXIT in plan.ready.message
        assert [e[1] for e in plan.events] == ["RevisionFailed"]
    # recorded: not failed again, the message stays
    again = plan_swap(inp(active="new", good=(), failed=["new"], revisions=[rev("new", exited=OFFLINE_EXIT)]))
    assert again.mark_failed is None and again.events == [] and again.progressing.reason == "RevisionFailed"


def test_a_first_revision_that_never_starts_times_out_behind_its_service_too():
    plan = plan_swap(inp(active="new", good=(), revisions=[rev("new", age_min=46)]))
    assert plan.mark_failed == "new" and "did not become Ready within spec.startup.timeout 45m" in plan.progressing.message


def test_a_new_revision_whose_engine_exits_is_rolled_back_without_waiting_for_the_timeout():
    for strategy in ("BlueGreen", "Recreate"):
        plan = plan_swap(inp(strategy=strategy, revisions=[rev("old", ready=1 if strategy == "BlueGreen" else 0),
                                                           rev("new", exited=OFFLINE_EXIT, age_min=0.2)]))
        assert plan.mark_failed == "new" and plan.failure_reason.startswith("failed to start: engine exited")
        assert "new" in plan.delete and plan.scale["old"] == 1 and plan.service_revision == "old"


def test_a_revision_that_has_served_is_restarted_not_failed_when_its_engine_exits():
    plan = plan_swap(inp(desired="old", active="old", revisions=[rev("old", exited=OFFLINE_EXIT)]))
    assert plan.mark_failed is None and plan.progressing.reason == "RevisionActive"


def test_a_transient_engine_exit_is_restarted_before_the_revision_fails():
    for restarts in (0, 1):
        plan = plan_swap(inp(revisions=[rev("old", ready=1), rev("new", exited=OFFLINE_EXIT, restarts=restarts)]))
        assert plan.mark_failed is None and "new" not in plan.delete and plan.scale["new"] == 1
    failed = plan_swap(inp(revisions=[rev("old", ready=1), rev("new", exited=OFFLINE_EXIT, restarts=2)]))
    assert failed.mark_failed == "new" and "after 2 restarts" in failed.failure_reason


def test_the_startup_limit_counts_from_scheduling_and_placement_has_its_own_bound():
    # Created 50 minutes ago, waited 20 minutes for a GPU node: 30 minutes into a 45-minute load, not failed.
    waited = plan_swap(inp(revisions=[rev("old", ready=1), rev("new", age_min=50, scheduled_min=30)]))
    assert waited.mark_failed is None and waited.progressing.reason == "RevisionStarting"
    slow = plan_swap(inp(revisions=[rev("old", ready=1), rev("new", age_min=90, scheduled_min=46)]))
    assert slow.mark_failed == "new" and "counted from its first pod's scheduling" in slow.failure_reason
    # Never scheduled: fails at placementTimeout (30m), naming the scheduler's reason.
    gpus = "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    pending = plan_swap(inp(revisions=[rev("old", ready=1), rev("new", age_min=29, unschedulable=gpus)]))
    assert pending.mark_failed is None and pending.progressing.reason == "InsufficientCapacity"
    stuck = plan_swap(inp(revisions=[rev("old", ready=1), rev("new", age_min=31, unschedulable=gpus)]))
    assert stuck.mark_failed == "new" and "spec.startup.placementTimeout 30m" in stuck.failure_reason
    assert gpus in stuck.failure_reason and stuck.service_revision == "old"
