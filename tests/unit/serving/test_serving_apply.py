"""ServingReconciler.apply against refusing and racing apiservers (a recording Kube stand-in): a refused
write is in the serving's status and Events within the reconcile, and nothing after it is applied; status
writes carry the resourceVersion the decision read."""

from __future__ import annotations


import pytest
from prometheus_client import REGISTRY

from drafter_operator.controllers.serving.apply import ServingReconciler, never_the_serving_one
from drafter_operator.kube import ApiError
from tests.support.servings import DRAIN, IMAGES, T0, World, seed_body
from tests.support.recording_kube import RecordingKube


def failing(name: str) -> float | None:
    return REGISTRY.get_sample_value("drafter_reconcile_failing",
                                     {"kind": "DrafterServing", "namespace": "team", "name": name})


def test_a_refused_deployment_is_in_status_and_events_within_the_reconcile_and_nothing_follows_it():
    world = World(seed_body())
    world.body["metadata"]["resourceVersion"] = "7"
    kube = RecordingKube(world, refuse_plural="deployments")
    reconciler = ServingReconciler(kube, default_images=IMAGES, clock=lambda: T0, drain=DRAIN, verify=False)
    events: list[tuple[str, str, str]] = []
    with pytest.raises(ApiError):
        reconciler.reconcile(world.body, lambda *e: events.append(e), world.state().observed)
    assert [verb for verb, path, _ in kube.requests if "/services" in path] == []  # the Service waits for it
    progressing = world.condition("Progressing")
    assert (progressing["status"], progressing["reason"]) == ("False", "WriteRefused")
    assert "create Deployment kimi-" in progressing["message"] and "at most 8 GPUs per namespace" in progressing["message"]
    assert [e[1] for e in events].count("WriteRefused") == 1
    assert not [e for e in events if e[2].startswith("Progressing=")]  # its RevisionStarting never happened
    assert failing("kimi") == 1
    # The retry meets the same refusal: no second Event, no status rewrite.
    kube.requests.clear()
    events.clear()
    with pytest.raises(ApiError):
        reconciler.reconcile(world.body, lambda *e: events.append(e), world.state().observed)
    assert events == [] and [p for v, p, _ in kube.requests if p.endswith("/status")] == []
    # The policy is lifted: the next reconcile creates it, Progressing moves on, the gauge clears.
    kube.refuse_plural = None
    reconciler.reconcile(world.body, lambda *e: events.append(e), world.state().observed)
    assert world.condition("Progressing")["reason"] == "RevisionStarting" and failing("kimi") == 0


def test_a_status_write_from_a_stale_view_is_refused_not_applied():
    world = World(seed_body())
    world.body["metadata"]["resourceVersion"] = "7"
    kube = RecordingKube(world)
    reconciler = ServingReconciler(kube, default_images=IMAGES, clock=lambda: T0, drain=DRAIN, verify=False)
    stale = {**world.body, "metadata": {**world.body["metadata"], "resourceVersion": "6"}}
    with pytest.raises(ApiError) as refused:
        reconciler.reconcile(stale, lambda *e: None, world.state().observed)
    assert refused.value.status == 409 and "status" not in world.body
    status_patches = [body for verb, path, body in kube.requests if path.endswith("/status")]
    assert status_patches and all(p["metadata"]["resourceVersion"] == "6" for p in status_patches)


def test_a_decision_on_a_stale_view_never_deletes_the_revision_the_service_selects_now():
    """The simulation's seed 2306: a lagging watch showed the Service before this operator's own switch,
    and the decision deleted the revision traffic had just moved to."""
    world = World(seed_body(swap={"strategy": "BlueGreen"}))
    world.converge()
    serving_now = world.body["status"]["activeRevision"]
    kube = RecordingKube(world)
    reconciler = ServingReconciler(kube, default_images=IMAGES, clock=lambda: T0, drain=DRAIN, verify=False)
    stale = [f"/apis/apps/v1/namespaces/team/deployments/kimi-{serving_now}",
             "/apis/apps/v1/namespaces/team/deployments/kimi-0123456789"]
    assert never_the_serving_one(reconciler.kube, "team", "kimi", stale) == stale[1:]
    world.service["spec"]["selector"]["drafter.dev/revision"] = "0123456789"
    assert never_the_serving_one(reconciler.kube, "team", "kimi", stale) == stale[:1]


def test_a_refused_service_switch_leaves_the_status_on_the_revision_that_still_serves():
    world = World(seed_body(swap={"strategy": "BlueGreen"}))
    world.converge()
    old = world.body["status"]["activeRevision"]
    world.ask_for_k(3)
    world.apply(world.decide())
    world.settle()
    world.body["metadata"]["resourceVersion"] = "9"
    kube = RecordingKube(world, refuse_plural="services")
    reconciler = ServingReconciler(kube, default_images=IMAGES, clock=lambda: world.now, drain=DRAIN, verify=False)
    with pytest.raises(ApiError):
        reconciler.reconcile(world.body, lambda *e: None, world.state().observed)
    assert world.body["status"]["activeRevision"] == old == world.service["spec"]["selector"]["drafter.dev/revision"]
    assert world.body["status"]["serving"]["revision"] == old
    assert world.condition("Progressing")["reason"] == "WriteRefused"


def test_a_new_serving_on_the_normal_path_costs_four_writes_and_posts_no_event():
    """Its Deployment and Service, the status that says it starts, and the one that says it serves (its revision
    recorded good in the same patch): no Event, since nothing went wrong that a person should read."""
    body = seed_body()
    body["spec"]["drafter"] = {"method": "ngram", "numSpeculativeTokens": 4}  # a combination no known-bad row names
    world = World(body)
    world.body["metadata"]["resourceVersion"] = "7"
    kube = RecordingKube(world)
    reconciler = ServingReconciler(kube, default_images=IMAGES, clock=lambda: T0, drain=DRAIN, verify=False)
    events: list[tuple[str, str, str]] = []
    reconciler.reconcile(world.body, lambda *e: events.append(e), world.state().observed)
    world.settle()
    reconciler.reconcile(world.body, lambda *e: events.append(e), world.state().observed)
    assert world.condition("Ready")["status"] == "True" and world.body["status"]["revisions"][0]["good"] is True
    writes = [(verb, path.rsplit("/", 2)[-2] if path.endswith("/status") else path.rsplit("/", 1)[-1])
              for verb, path, _ in kube.requests if verb in ("create", "patch", "delete")]
    assert writes == [("create", "deployments"), ("create", "services"), ("patch", "kimi"), ("patch", "kimi")], writes
    assert events == []
    # Steady: nothing more.
    kube.requests.clear()
    reconciler.reconcile(world.body, lambda *e: events.append(e), world.state().observed)
    assert [r for r in kube.requests if r[0] != "get"] == [] and events == []
