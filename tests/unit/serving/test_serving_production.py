"""What production does to a serving and the simulation of old never drew, each as the decision now keeps it
(pure): hands on the serving's children, settings that change under it. docs/guarantees.md names these tests.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import random

import pytest

from drafter_operator import timestamps
from drafter_operator.controllers.serving.observe import Observed, revision_observation, revision_pods
from drafter_operator.controllers.serving.pointer import draining_revisions, recorded_drains
from drafter_operator.controllers.swap import SwapInput, start_deadline, start_failure

from drafter_operator.controllers.serving.apply import ServingReconciler
from drafter_operator.kube import ApiError
from drafter_operator.resources.pod_policy import TenantPolicy
from drafter_operator.resources.labels import REVISION_LABEL, deployment_name
from drafter_testbed.simulation.apiserver import FakeApiserver
from drafter_testbed.simulation.clock import Clock
from tests.support.recording_kube import RecordingKube
from tests.support.servings import DRAIN, finish_gate, gated_body, IMAGES, seed_body, swapped, T0, World


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
    assert swapped(plan) is None and not plan.deletes
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
    assert swapped(plan) is None
    world.apply(plan)
    assert selected(world) == old  # nothing serves until the gate passes: what serves is always gated
    finish_gate(world, passed=True, message="1.3x")
    world.converge()
    assert selected(world) == new


class HandMadeServiceKube(RecordingKube):
    """An apiserver holding a Service of the serving's name that the operator's label-selected watch never
    delivers: a create of it answers AlreadyExists (Kube.create returns None), a GET shows it."""

    def __init__(self, world: World, service: dict):
        super().__init__(world)
        self.hand_made = service

    def create(self, path: str, body: dict) -> dict | None:
        if path.endswith("/services"):
            self.requests.append(("create", path, body))
            return None
        return super().create(path, body)

    def get(self, path: str) -> dict | None:
        self.requests.append(("get", path, {}))
        return self.hand_made if path.endswith(f"/services/{self.hand_made['metadata']['name']}") else None


def hand_made_service(owner_uid: str | None = None) -> dict:
    meta = {"name": "kimi", "namespace": "team", "uid": "svc-1"}
    if owner_uid:
        meta["ownerReferences"] = [{"apiVersion": "drafter.dev/v1alpha1", "kind": "DrafterServing", "name": "kimi",
                                    "uid": owner_uid, "controller": True}]
    return {"metadata": meta, "spec": {"selector": {"app": "legacy-kimi"}, "ports": [{"port": 8000}]}}


def test_a_hand_made_service_without_labels_is_a_name_conflict_never_adopted():
    world = World(seed_body())
    kube = HandMadeServiceKube(world, hand_made_service())
    reconciler = ServingReconciler(kube, default_images=IMAGES, clock=lambda: T0, drain=DRAIN, verify=False)
    events: list[tuple[str, str, str]] = []
    with pytest.raises(ApiError):
        reconciler.reconcile(world.body, lambda *e: events.append(e), world.state().observed)
    ready, progressing = world.condition("Ready"), world.condition("Progressing")
    assert (ready["status"], ready["reason"]) == ("False", "NameConflict")
    assert progressing["reason"] == "NameConflict" and "Service team/kimi exists and is not owned" in progressing["message"]
    assert ("Warning", "NameConflict") in [(kind, reason) for kind, reason, _ in events]
    assert not [r for r in kube.requests if r[0] in ("patch", "delete") and "/services/" in r[1]]  # never touched


def test_our_own_service_that_the_watch_has_not_delivered_yet_is_no_conflict():
    world = World(seed_body())
    kube = HandMadeServiceKube(world, hand_made_service(owner_uid=world.body["metadata"]["uid"]))
    reconciler = ServingReconciler(kube, default_images=IMAGES, clock=lambda: T0, drain=DRAIN, verify=False)
    reconciler.reconcile(world.body, lambda *e: None, world.state().observed)
    assert world.condition("Progressing")["reason"] != "NameConflict"


def gates(world: World) -> list[dict]:
    return list(world.benchmarks.values())


def test_a_failed_gate_is_run_again_on_the_retry_annotation_and_its_new_verdict_decides():
    world, old, new = gating_swap()
    finish_gate(world, passed=False, message="0.8x: the cluster was busy")
    world.converge()
    assert selected(world) == old and deployment_name("kimi", new) not in world.deployments
    world.body["metadata"]["annotations"] = {"drafter.dev/retry": "quiet-cluster"}
    retry = world.decide()
    # The old verdict is no verdict any more: the revision starts again and its stale gate goes.
    assert [p.rsplit("/", 1)[1] for p in retry.deletes] == [b["metadata"]["name"] for b in gates(world)]
    world.apply(retry)
    world.settle()
    world.apply(world.decide())
    (gate,) = gates(world)
    assert "status" not in gate and gate["metadata"]["annotations"]["drafter.dev/gate-attempt"] == "quiet-cluster"
    assert world.condition("Progressing")["reason"] == "Gating" and selected(world) == old
    finish_gate(world, passed=True, message="1.3x")
    world.converge()
    assert selected(world) == new


def test_a_stale_failed_gate_still_in_view_after_the_retry_never_fails_the_revision_again():
    world, old, new = gating_swap()
    finish_gate(world, passed=False, message="0.8x")
    world.converge()
    world.body["metadata"]["annotations"] = {"drafter.dev/retry": "1"}
    kept = dict(world.benchmarks)
    world.apply(world.decide())
    world.benchmarks = kept  # the benchmark watch lags: the deleted failed gate is still seen
    world.settle()
    for _ in range(3):
        world.apply(world.decide())
        world.settle()
    assert not [r for r in world.body["status"]["revisions"] if r["name"] == new and r.get("good") is False]
    assert deployment_name("kimi", new) in world.deployments


def test_a_revision_with_no_pod_yet_is_never_failed_on_placement_unless_its_pods_cannot_be_created():
    world = World(seed_body(replicas=0))
    world.converge()
    (deployment,) = world.deployments.values()
    world.now += dt.timedelta(days=3)  # scaled to zero for days, never Ready: never good
    world.body["spec"]["replicas"] = 2
    world.body["metadata"]["generation"] = 2
    scale = world.decide()
    (write,) = [w for w in scale.writes if w.plural == "deployments"]
    assert write.body["spec"]["replicas"] == 2
    assert not scale.record_first  # not failed before any pod of the scale-up could be placed
    world.apply(scale)
    scaled = world.deployments[deployment["metadata"]["name"]]
    scaled["status"] = {"readyReplicas": 0, "observedGeneration": scaled["metadata"]["generation"]}  # caught up
    # The ReplicaSet controller has not made the pods yet (or they went with a node): no pod waits to be placed.
    observed = revision_observation("r", scaled, [], None)
    inputs = SwapInput(desired="r", strategy="BlueGreen", replicas=2, startup_timeout=dt.timedelta(minutes=45),
                       active=None, failed=frozenset(), revisions={"r": observed}, now=world.now + dt.timedelta(hours=5))
    assert observed.pods == 0 and start_failure(observed, 2, inputs) is None
    # Its pods cannot be created at all (a quota): that fails it once it lasted longer than the placement bound.
    scaled["status"]["conditions"] = [{"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
                                       "message": "pods \"kimi-r-x\" is forbidden: exceeded quota: gpus",
                                       "lastTransitionTime": timestamps.format_seconds(world.now)}]
    refused = revision_observation("r", scaled, [], None)
    assert start_failure(refused, 2, dataclasses.replace(inputs, now=world.now + dt.timedelta(minutes=29))) is None
    failure = start_failure(refused, 2, dataclasses.replace(inputs, now=world.now + dt.timedelta(minutes=31)))
    assert "placementTimeout 30m" in failure and "exceeded quota" in failure
    assert start_deadline(refused, inputs) == world.now + dt.timedelta(minutes=30)
    # Its only pod is on its way out (a template change replaces it; simulation seed 150): nothing waits to be
    # placed either, however long ago the Deployment was created.
    leaving = {"metadata": {"name": "kimi-r-old", "labels": {REVISION_LABEL: "r"}, "deletionTimestamp": "2026-12-01T10:00:00Z",
                            "creationTimestamp": timestamps.format_seconds(world.now)}, "status": {}}
    scaled["status"].pop("conditions")
    going = revision_observation("r", scaled, [leaving], None)
    assert going.pods == 1 and start_failure(going, 2, inputs) is None


def test_two_swaps_in_a_row_keep_the_first_revisions_streams_until_they_finish_or_the_drain_timeout():
    world = World(seed_body(swap={"strategy": "BlueGreen"}))
    world.converge()
    first = world.body["status"]["activeRevision"]
    for k in (3, 2):  # A -> B, and at once B -> C: both A and B carry 4,000-token streams
        world.in_flight[world.body["status"]["activeRevision"]] = 5
        world.ask_for_k(k)
        world.apply(world.decide())
        world.settle()
        world.apply(world.decide())  # the switch
        world.settle()
    third = world.body["status"]["activeRevision"]
    assert selected(world) == third and third != first
    world.now += dt.timedelta(minutes=4)  # past the proxies' drain, within drainTimeout (5m) of the first switch
    world.apply(world.decide())
    assert deployment_name("kimi", first) in world.deployments  # its streams are still running
    world.in_flight[first] = 0  # they finished
    world.apply(world.decide())
    assert deployment_name("kimi", first) not in world.deployments


def test_a_revision_left_two_switches_ago_is_stopped_at_its_own_drain_timeout_when_its_count_is_unreadable():
    world = World(seed_body(swap={"strategy": "BlueGreen"}))
    world.converge()
    first = world.body["status"]["activeRevision"]
    world.ask_for_k(3)
    world.apply(world.decide())
    world.settle()
    switch = world.decide()
    world.apply(switch)
    world.settle()
    world.in_flight[first] = 5
    world.now += dt.timedelta(seconds=30)
    world.ask_for_k(2)
    world.apply(world.decide())
    world.settle()
    world.apply(world.decide())  # the second switch: the first revision drains since the first one
    assert deployment_name("kimi", first) in world.deployments
    state = world.state()
    state.observed.in_flight.pop(first)  # its engines did not answer
    from drafter_operator.controllers.serving.decide import decide
    assert deployment_name("kimi", first) not in [p.rsplit("/", 1)[1] for p in decide(state).deletes]
    world.now = switch_time(switch) + dt.timedelta(minutes=5, seconds=1)
    state = world.state()
    state.observed.in_flight.pop(first)
    assert deployment_name("kimi", first) in [p.rsplit("/", 1)[1] for p in decide(state).deletes]


def switch_time(plan) -> dt.datetime:
    (write,) = [w for w in plan.writes if w.plural == "services"]
    return timestamps.parse(write.body["metadata"]["annotations"]["drafter.dev/switched-at"])


def test_the_loop_reads_the_streams_of_every_revision_that_drains_and_a_hand_edited_record_is_none():
    service = {"metadata": {"annotations": {"drafter.dev/previous-revision": "b",
                                            "drafter.dev/draining": '{"a":"2026-12-01T00:00:00Z","b":"2026-12-01T00:01:00Z"}'}},
               "spec": {"selector": {REVISION_LABEL: "c"}}}
    observed = Observed(deployments={"a": {}, "b": {}, "c": {}}, service=service)
    assert draining_revisions(observed) == ["a", "b"]
    for edited in ("not json", '["a"]', '{"a": "yesterday"}'):
        service["metadata"]["annotations"]["drafter.dev/draining"] = edited
        assert recorded_drains(service) == {} and draining_revisions(observed) == ["b"]


def decide_under(world: World, policy: TenantPolicy):
    from drafter_operator.controllers.serving.decide import decide
    return decide(dataclasses.replace(world.state(), tenant_policy=policy))


ONLY_INTERNAL = TenantPolicy(image_prefixes=("registry.internal/",))


def test_an_allow_list_tightened_mid_swap_keeps_the_active_revision_serving_and_frees_the_pending_ones_gpus():
    world, old, new = gating_swap()
    refused = decide_under(world, ONLY_INTERNAL)
    assert [p.rsplit("/", 1)[1] for p in refused.deletes] == [deployment_name("kimi", new)]
    assert not refused.writes and swapped(refused) is None
    world.apply(refused)
    assert selected(world) == old and sorted(world.deployments) == [deployment_name("kimi", old)]
    ready, progressing = world.condition("Ready"), world.condition("Progressing")
    assert (ready["status"], ready["reason"]) == ("True", "EngineReady")  # what serves, serves
    assert progressing["reason"] == "InvalidSpec" and "tenancy.allowedImagePrefixes" in progressing["message"]
    assert f"revision {old} keeps serving" in progressing["message"]
    assert "gating" not in world.body["status"]
    assert ("Warning", "InvalidSpec") in [e[:2] for e in world.events]
    again = decide_under(world, ONLY_INTERNAL)
    assert not again.writes_anything()  # steady while refused: no churn
    world.converge()  # the administrator allows the image again: the swap starts over, through its gate
    assert selected(world) == old and world.condition("Progressing")["reason"] == "Gating"


def test_a_refused_spec_lets_a_draining_revision_finish_its_streams_then_stops_it():
    world = World(seed_body(swap={"strategy": "BlueGreen"}))
    world.converge()
    old = world.body["status"]["activeRevision"]
    world.in_flight[old] = 3
    world.ask_for_k(3)
    world.apply(world.decide())
    world.settle()
    world.apply(world.decide())  # switched: old drains with 3 streams
    world.now += dt.timedelta(seconds=30)
    refused = decide_under(world, ONLY_INTERNAL)
    assert refused.deletes == [] and refused.recheck_at is not None  # it wakes to look again
    world.in_flight[old] = 0
    world.now = refused.recheck_at
    done = decide_under(world, ONLY_INTERNAL)
    assert [p.rsplit("/", 1)[1] for p in done.deletes] == [deployment_name("kimi", old)]


def test_a_spec_the_models_refuse_mid_swap_stops_the_pending_revision_too():
    world, old, new = gating_swap()
    world.body["spec"]["replicas"] = "many"  # what an older CRD let through, refused by an upgraded operator
    refused = world.decide()
    assert [p.rsplit("/", 1)[1] for p in refused.deletes] == [deployment_name("kimi", new)]
    world.apply(refused)
    assert world.condition("Progressing")["reason"] == "InvalidSpec" and "spec.replicas" in world.condition("Progressing")["message"]
    assert world.condition("Ready")["status"] == "True" and selected(world) == old


def apiserver_holding(world: World) -> FakeApiserver:
    """The simulation's in-memory apiserver (the real Kube client over a store) holding the world as it is now."""
    clock = Clock()
    api = FakeApiserver(clock, lambda: random.Random(0), lambda *_: None)
    objects = [(f"/apis/drafter.dev/v1alpha1/namespaces/team/drafterservings/kimi", world.body)]
    objects += [(f"/apis/apps/v1/namespaces/team/deployments/{n}", d) for n, d in world.deployments.items()]
    objects += [(f"/api/v1/namespaces/team/services/kimi", world.service)]
    objects += [(f"/apis/drafter.dev/v1alpha1/namespaces/team/drafterbenchmarks/{n}", b) for n, b in world.benchmarks.items()]
    for key, obj in objects:
        if obj is None:
            continue
        stored = api.put("test", key, copy.deepcopy(obj))
        if obj["metadata"].get("uid"):  # keep the uid the owner references name
            api.by_uid.pop(stored["metadata"]["uid"])
            stored["metadata"]["uid"] = obj["metadata"]["uid"]
            api.by_uid[obj["metadata"]["uid"]] = key
    return api


def test_a_decision_from_a_lagging_serving_watch_never_recreates_a_revision_recorded_as_failed():
    world, old, new = gating_swap()
    stale_body = copy.deepcopy(world.body)  # what a lagging serving watch still shows: new not failed yet
    finish_gate(world, passed=False, message="0.8x")
    world.converge()
    assert deployment_name("kimi", new) not in world.deployments
    stale_view = world.state().observed

    def created(verify: bool) -> list[str]:
        api = apiserver_holding(world)
        reconciler = ServingReconciler(api, default_images=IMAGES, clock=lambda: world.now, drain=DRAIN, verify=verify)
        reconciler.verified_at[("team", "kimi")] = world.now  # its view was checked a moment ago: not due again
        try:
            reconciler.reconcile(copy.deepcopy(stale_body), lambda *e: None, copy.deepcopy(stale_view))
        except ApiError:
            pass  # a status patch from the stale view: 409, as the real apiserver answers
        return [k.rsplit("/", 1)[1] for k in api.store if "/deployments/" in k]

    assert deployment_name("kimi", new) in created(verify=False)  # the stale decision alone re-creates it
    assert created(verify=True) == [deployment_name("kimi", old)]


def test_a_recreate_swap_waiting_on_a_ghost_pod_goes_on_once_the_view_is_checked():
    world = World(seed_body(swap={"strategy": "Recreate"}))
    world.converge()
    old = world.body["status"]["activeRevision"]
    world.ask_for_k(3)
    world.apply(world.decide())  # the old revision scaled to zero: its pods stop
    world.deployments[deployment_name("kimi", old)]["status"] = {"readyReplicas": 0, "observedGeneration": 99}
    ghost_view = world.state()
    ghost_view.observed.revisions[old] = dataclasses.replace(ghost_view.observed.revisions[old], pods=1)  # a re-list kept it
    from drafter_operator.controllers.serving.decide import decide
    waiting = decide(ghost_view)
    assert waiting.waiting and not [w for w in waiting.writes if w.verb == "create"]
    for verify, deployments in ((False, 1), (True, 2)):  # unchecked, the ghost holds the swap for ever
        api = apiserver_holding(world)
        reconciler = ServingReconciler(api, default_images=IMAGES, clock=lambda: world.now, drain=DRAIN, verify=verify)
        reconciler.verified_at[("team", "kimi")] = world.now - dt.timedelta(seconds=61)  # it has waited a minute
        reconciler.reconcile(copy.deepcopy(world.body), lambda *e: None, copy.deepcopy(ghost_view.observed))
        assert len([k for k in api.store if "/deployments/" in k]) == deployments  # 2: the new revision started
    # Checked at most every verify_waiting (60 s) while it waits.
    assert not reconciler.check_due("team", "kimi", waiting, world.now + dt.timedelta(seconds=10))
    assert reconciler.check_due("team", "kimi", waiting, world.now + dt.timedelta(seconds=61))


def test_the_pods_of_a_deleted_servings_same_named_deployment_never_start_the_new_ones_clock():
    deployment = {"metadata": {"name": "kimi-r", "creationTimestamp": "2026-12-01T10:00:00Z", "generation": 1},
                  "spec": {"replicas": 1}, "status": {}}
    leftover = {"metadata": {"name": "kimi-r-old", "creationTimestamp": "2026-12-01T08:00:00Z",
                             "labels": {REVISION_LABEL: "r"}},
                "status": {"conditions": [{"type": "PodScheduled", "status": "True",
                                           "lastTransitionTime": "2026-12-01T08:00:01Z"}]}}
    own = copy.deepcopy(leftover)
    own["metadata"].update(name="kimi-r-new", creationTimestamp="2026-12-01T10:00:01Z")
    own["status"]["conditions"][0]["lastTransitionTime"] = "2026-12-01T10:00:02Z"
    assert revision_observation("r", deployment, revision_pods("r", deployment, [leftover]), None).scheduled is None
    observed = revision_observation("r", deployment, revision_pods("r", deployment, [leftover, own]), None)
    assert observed.pods == 1 and observed.scheduled == timestamps.parse("2026-12-01T10:00:02Z")


def test_a_gated_swap_at_zero_replicas_moves_no_traffic_and_gates_the_revision_once_scaled_up():
    world = World(gated_body())
    world.converge()
    old = world.body["status"]["activeRevision"]
    world.body["spec"]["replicas"] = 0
    world.converge()
    world.ask_for_k(3)
    world.converge()
    assert selected(world) == old  # nothing to gate at zero: no switch
    assert world.condition("Progressing")["reason"] == "ScaledToZero"
    world.body["spec"]["replicas"] = 1
    world.body["metadata"]["generation"] += 1
    world.converge()
    assert selected(world) == old and world.condition("Progressing")["reason"] == "Gating"
    finish_gate(world, passed=True, message="1.3x")
    world.converge()
    assert selected(world) != old


def test_a_failed_first_revision_whose_deployment_someone_deleted_is_not_started_again():
    world = World(seed_body())
    world.apply(world.decide())  # created, never Ready
    for deployment in world.deployments.values():
        deployment["status"] = {"readyReplicas": 0, "observedGeneration": deployment["metadata"]["generation"]}
    world.now += dt.timedelta(hours=2)
    world.apply(world.decide())
    (failed,) = [r for r in world.body["status"]["revisions"] if r.get("good") is False]
    world.deployments.clear()  # kubectl delete deploy
    plan = world.decide()
    assert not [w for w in plan.writes if w.plural == "deployments"]
    world.body["metadata"]["annotations"] = {"drafter.dev/retry": "1"}  # asked: it starts again
    assert [w.verb for w in world.decide().writes if w.plural == "deployments"] == ["create"]


def test_a_failed_revision_a_failed_swap_left_serving_is_not_started_again_once_someone_deletes_it():
    """The first revision failed and still runs (nothing else to serve), a swap to a new one failed too: when
    someone deletes the first one's Deployment it is not rebuilt from its record, since it failed (simulation seed 75)."""
    world = World(seed_body(swap={"strategy": "BlueGreen"}))

    def fail_what_starts():
        world.apply(world.decide())
        for deployment in world.deployments.values():
            deployment["status"] = {"readyReplicas": 0, "observedGeneration": deployment["metadata"]["generation"]}
        world.now += dt.timedelta(hours=2)
        world.apply(world.decide())

    fail_what_starts()
    (first,) = [r["name"] for r in world.body["status"]["revisions"] if r.get("good") is False]
    assert deployment_name("kimi", first) in world.deployments  # failed, yet kept: there is nothing else
    world.ask_for_k(3)
    fail_what_starts()
    assert all(r.get("good") is False for r in world.body["status"]["revisions"])
    assert world.body["status"]["activeRevision"] == first
    world.deployments.clear()  # kubectl delete deploy
    assert not [w for w in world.decide().writes if w.plural == "deployments"]


def test_an_action_whose_revision_stops_with_a_refusal_says_it_is_blocked_not_under_way():
    """An onDegraded action's revision is starting when the administrator's policy refuses the spec: the revision
    stops, and Degraded says the action is blocked by the refusal rather than still under way (simulation seed 56)."""
    from tests.support.serving_acceptance import look, measured, on_degraded
    world = World(on_degraded("DisableSpeculation"))
    world.converge()
    bad = world.body["status"]["activeRevision"]
    look(world, measured(world, "True", 0.15))
    look(world, measured(world, "True", 0.15))
    assert world.condition("Degraded")["reason"] == "ActionInProgress"
    world.apply(decide_under(world, ONLY_INTERNAL))
    degraded = world.condition("Degraded")
    assert degraded["reason"] == "ActionBlocked" and "the spec is refused" in degraded["message"]
    assert "tenancy.allowedImagePrefixes" in degraded["message"] and selected(world) == bad


def test_a_service_deleted_while_the_spec_is_refused_comes_back_pointing_at_what_serves():
    world, old, new = gating_swap()
    world.apply(decide_under(world, ONLY_INTERNAL))
    world.service = None  # kubectl delete service, while the administrator's policy refuses the spec
    plan = decide_under(world, ONLY_INTERNAL)
    (write,) = plan.writes
    assert (write.verb, write.plural) == ("create", "services")
    world.apply(plan)
    assert selected(world) == old
    assert world.service["spec"]["ports"][0]["port"] == world.body["status"]["endpoint"]["port"]


def test_our_own_service_whose_labels_someone_removed_gets_them_back():
    world = World(seed_body())
    stripped = hand_made_service(owner_uid=world.body["metadata"]["uid"])  # ours, but no labels: out of the watch
    kube = HandMadeServiceKube(world, stripped)
    patches: list[tuple[str, dict]] = []
    kube.patch = lambda path, body: patches.append((path, body)) or {"metadata": {"name": "kimi", "resourceVersion": "9"}}
    reconciler = ServingReconciler(kube, default_images=IMAGES, clock=lambda: T0, drain=DRAIN, verify=False)
    reconciler.reconcile(world.body, lambda *e: None, world.state().observed)
    (path, body), = [(p, b) for p, b in patches if p.endswith("/services/kimi")]
    assert body["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "drafter-operator"
    assert body["metadata"]["labels"]["drafter.dev/serving"] == "kimi"


def test_a_pending_revision_scaled_by_hand_is_not_failed_on_its_startup_clock_before_its_status_catches_up():
    world, old, new = gating_swap()  # new was Ready and is gated
    pending = world.deployments[deployment_name("kimi", new)]
    world.now += dt.timedelta(hours=1)  # long past its startup limit from its pods' scheduling
    pending["spec"]["replicas"] = 0  # kubectl scale --replicas=0
    pending["metadata"]["generation"] += 1  # the Deployment controller has not seen it yet
    plan = world.decide()
    assert not [r for r in plan.record_first.get("revisions") or [] if r["name"] == new and r.get("good") is False]
    assert [w.body["spec"]["replicas"] for w in plan.writes if w.path.endswith(deployment_name("kimi", new))] == [1]


def test_a_steady_serving_and_a_first_rollout_read_nothing_from_the_apiserver_beyond_their_writes():
    world = World(seed_body())
    api = apiserver_holding(world)
    reconciler = ServingReconciler(api, default_images=IMAGES, clock=lambda: world.now, drain=DRAIN)
    reconciler.reconcile(copy.deepcopy(world.body), lambda *e: None, world.state().observed)  # the first rollout
    assert api.requests["GET"] == 0 and api.requests["POST"] == 2  # its Deployment and Service
    world.converge()
    api = apiserver_holding(world)
    reconciler = ServingReconciler(api, default_images=IMAGES, clock=lambda: world.now, drain=DRAIN)
    for _ in range(3):
        reconciler.reconcile(copy.deepcopy(world.body), lambda *e: None, world.state().observed)
    assert sum(api.requests.values()) == 0


def test_a_draining_revision_whose_labels_someone_removed_is_found_relabelled_and_deleted_after_its_drain():
    """GitOps or a hand removes managed-by from the Deployment traffic just left: the watches lose it, so the view
    has nothing to delete at the drain's end. The drain record still names it, so the plan waits on the view, the
    reconciler reads the apiserver within verify_waiting, puts the labels back, and the revision goes after its
    drain (simulation seed 157: two revisions held GPUs for ever)."""
    world = World(seed_body(swap={"strategy": "BlueGreen"}))
    world.converge()
    old = world.body["status"]["activeRevision"]
    world.ask_for_k(3)
    for _ in range(3):  # started, Ready, switched: old drains
        world.apply(world.decide())
        world.settle()
    assert selected(world) != old and deployment_name("kimi", old) in world.deployments
    api = apiserver_holding(world)
    path = f"/apis/apps/v1/namespaces/team/deployments/{deployment_name('kimi', old)}"
    api.store[path]["metadata"]["labels"].pop("app.kubernetes.io/managed-by")  # kubectl label ... managed-by-
    blind = world.state().observed  # the watch's view: the Deployment is gone from it
    blind.deployments.pop(old), blind.revisions.pop(old)
    reconciler = ServingReconciler(api, default_images=IMAGES, clock=lambda: world.now, drain=DRAIN)
    applied = reconciler.reconcile(copy.deepcopy(api.store["/apis/drafter.dev/v1alpha1/namespaces/team/drafterservings/kimi"]),
                                   lambda *e: None, copy.deepcopy(blind))
    assert applied.recheck_at is not None and applied.recheck_at <= world.now + dt.timedelta(seconds=60)
    world.now += dt.timedelta(seconds=61)
    reconciler.reconcile(copy.deepcopy(api.store["/apis/drafter.dev/v1alpha1/namespaces/team/drafterservings/kimi"]),
                         lambda *e: None, copy.deepcopy(blind))
    assert path not in api.store or api.store[path]["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "drafter-operator"
    assert path not in api.store  # its drain (15 s) is over: deleted from the apiserver's view


def test_the_engine_of_a_pod_being_deleted_is_stopped_not_exited():
    """A kubelet reports a deleted pod's engine terminated (143 after SIGTERM) before the pod goes: that is no exit
    to count against a revision's start, nor a reason Ready gives."""
    deployment = {"metadata": {"name": "kimi-r", "creationTimestamp": "2026-12-01T08:00:00Z", "generation": 1},
                  "spec": {"replicas": 1}, "status": {"observedGeneration": 1}}
    terminated = {"name": "engine", "ready": False, "started": False, "restartCount": 0,
                  "state": {"terminated": {"exitCode": 143, "reason": "Completed"}}}
    pod = {"metadata": {"name": "kimi-r-a", "labels": {REVISION_LABEL: "r"}, "creationTimestamp": "2026-12-01T08:00:01Z"},
           "status": {"phase": "Failed", "containerStatuses": [terminated]}}
    assert revision_observation("r", deployment, [pod], None).exited == "engine exited with code 143"
    pod["metadata"]["deletionTimestamp"] = "2026-12-01T08:05:00Z"
    assert revision_observation("r", deployment, [pod], None).exited is None
