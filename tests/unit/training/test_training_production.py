"""DrafterTraining decisions where production differs from a quiet cluster (issue 38): a spec refused mid-run, a
pod drained or preempted, a stage that never ends, a name someone else took first. The real decide, played
against the small fake cluster of test_training_decide.py."""

from __future__ import annotations

import json

import pytest

from drafter_operator.api import DrafterTraining
from drafter_operator.resources.pod_policy import TenantPolicy
from drafter_operator.resources.training_job import StageCommand, StageRun, stage_job
from tests.support.trainings import Cluster, creates, start, training

TIGHT = TenantPolicy(image_prefixes=("registry.internal/", "lmsysorg/"))  # refuses the operator's trainer:1
OWNER = {"apiVersion": "drafter.dev/v1alpha1", "kind": "DrafterTraining", "name": "kimi-ft", "uid": "t-1", "controller": True}


def job_paths(plan) -> list[str]:
    return sorted(p.rsplit("/", 1)[1] for p in plan.deletes if "/jobs/" in p)


def job_creates(plan) -> list[str]:
    return [m["metadata"]["name"] for _, m in creates(plan) if m["kind"] == "Job"]


def run_through(cluster: Cluster, *stages: str) -> None:
    """Start the run and finish ``stages`` in order (each next stage's Job created by the decide)."""
    start(cluster)
    for stage in stages:
        cluster.finish(stage)
        cluster.apply(cluster.decide())


def ready_of(plan) -> dict:
    return next(c for c in plan.status["conditions"] if c["type"] == "Ready")


def fail(cluster: Cluster, name: str, reason: str, message: str = "") -> None:
    cluster.jobs[name]["status"] = {"conditions": [{"type": "Failed", "status": "True", "reason": reason,
                                                    "message": message}]}


# ------------------------------------------------------------------------------------------ a refused spec
def test_an_allow_list_tightened_mid_run_stops_the_stage_job_and_the_engine_and_keeps_the_claim_and_the_record():
    cluster = Cluster(training(promote=None))
    start(cluster)  # Generate runs on the target's engine
    assert cluster.engine and job_creates_names(cluster) == ["kimi-ft-generate-g1"]
    cluster.jobs["kimi-ft-generate-g1"]["metadata"]["resourceVersion"] = "42"
    cluster.policy = TIGHT
    plan = cluster.decide()
    cluster.apply(plan)
    assert job_paths(plan) == ["kimi-ft-generate-g1"]
    # Only the Job as read: one that finished since (a lagging list) is kept, its completion the record of the stage.
    assert plan.delete_if_unchanged == {next(p for p in plan.deletes if "/jobs/" in p): "42"}
    assert sorted(p.rsplit("/", 2)[1] for p in plan.deletes if "/jobs/" not in p) == ["deployments", "services"]
    assert not [p for p in plan.deletes if "persistentvolumeclaims" in p] and cluster.claim is not None
    ready = cluster.condition("Ready")
    assert cluster.body["status"]["stage"] == "Failed" and ready["reason"] == "InvalidSpec"
    assert "spec.image" in ready["message"] and "allowedImagePrefixes" in ready["message"] and "registry.internal/" in ready["message"]
    assert ("Warning", "InvalidSpec") in [e[:2] for e in plan.events]
    again = cluster.decide()
    assert creates(again) == [] and again.deletes == [] and again.events == []  # said once, nothing left to stop


def job_creates_names(cluster: Cluster) -> list[str]:
    return sorted(cluster.jobs)


def test_a_refused_run_resumes_after_the_stages_done_when_the_list_allows_it_again_or_the_spec_is_corrected():
    cluster = Cluster(training(promote=None))
    run_through(cluster, "Generate", "Extract")  # Train runs
    cluster.policy = TIGHT
    plan = cluster.decide()
    cluster.apply(plan)
    assert job_paths(plan) == ["kimi-ft-train-g1"]
    assert "a corrected spec resumes after Extract" in cluster.condition("Ready")["message"]
    assert [c["stage"] for c in cluster.body["status"]["completedStages"]] == ["Generate", "Extract"]
    # The administrator allows it again: the same generation goes on with Train, never Generate or Extract.
    cluster.policy = TenantPolicy()
    plan = cluster.decide()
    assert job_creates(plan) == ["kimi-ft-train-g1"]
    # Or the user corrects the image (a new generation that reads the same): Train of generation 2, nothing before.
    cluster.policy = TIGHT
    cluster.body["metadata"]["generation"] = 2
    cluster.body["spec"]["image"] = "registry.internal/trainer:2"
    plan = cluster.decide()
    cluster.apply(plan)
    assert job_creates(plan) == [] and cluster.body["status"]["stage"] != "Failed"  # generation 1's Jobs go first
    plan = cluster.decide()
    assert job_creates(plan) == ["kimi-ft-train-g2"]
    assert [c["generation"] for c in cluster.body["status"]["completedStages"]] == [1, 1]


def test_a_spec_the_models_refuse_mid_run_stops_the_stage_too():
    cluster = Cluster(training(promote=None))
    run_through(cluster, "Generate")
    cluster.body["metadata"]["generation"] = 2
    cluster.body["spec"]["output"]["path"] = "/models/../etc/drafter"
    plan = cluster.decide()
    assert job_paths(plan) == ["kimi-ft-extract-g1"] and cluster.claim is not None
    cluster.apply(plan)
    assert "spec.output.path" in cluster.condition("Ready")["message"] and cluster.condition("Generated")["status"] == "True"


# ------------------------------------------------------------------------------------------ disruptions
def across_two_nodes() -> Cluster:
    return Cluster(training(promote=None, resources={"nodes": 2}))


def test_a_drained_train_starts_its_next_attempt_once_its_pods_stopped_and_never_a_finished_stage():
    cluster = across_two_nodes()
    run_through(cluster, "Generate", "Extract")
    fail(cluster, "kimi-ft-train-g1", "PodFailurePolicy",
         "Pod team/kimi-ft-train-g1-1-abcde has condition DisruptionTarget matching FailJob rule at index 0")
    # The group's other rank still stops on the claim: the next attempt waits for it.
    cluster.running_pods = [{"metadata": {"name": "kimi-ft-train-g1-0-fghij", "labels": {"job-name": "kimi-ft-train-g1"}},
                             "status": {"phase": "Running"}}]
    waiting = cluster.decide()
    cluster.apply(waiting)
    assert job_creates(waiting) == [] and "kimi-ft-train-g1-0-fghij" in cluster.body["status"]["progress"]["summary"]
    assert cluster.body["status"]["stage"] == "Train"
    cluster.running_pods = []
    plan = cluster.decide()
    cluster.apply(plan)
    assert job_creates(plan) == ["kimi-ft-train-g1-r1"] and plan.deletes == []
    job = next(m for _, m in creates(plan) if m["kind"] == "Job")
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    # The attempt's own pods meet at their own pod 0.
    assert command[command.index("--rendezvous-endpoint") + 1].startswith("kimi-ft-train-g1-r1-0.")
    assert job["spec"]["template"]["spec"]["subdomain"] == "kimi-ft-rendezvous"
    assert ("Warning", "StageDisrupted") in [e[:2] for e in plan.events]
    (disruption,) = cluster.body["status"]["disruptions"]
    assert disruption["jobName"] == "kimi-ft-train-g1" and disruption["stage"] == "Train" and "DisruptionTarget" in disruption["message"]
    assert cluster.body["status"]["jobName"] == "kimi-ft-train-g1-r1"
    assert cluster.condition("Extracted")["status"] == "True" and creates(cluster.decide()) == []


def test_a_disruption_seen_on_a_pod_while_it_ran_counts_though_a_peer_failed_the_job_first():
    cluster = across_two_nodes()
    run_through(cluster, "Generate", "Extract")
    cluster.running_pods = [{"metadata": {"name": "kimi-ft-train-g1-1-abcde", "labels": {"job-name": "kimi-ft-train-g1"},
                                          "deletionTimestamp": "2026-12-01T12:00:00Z"},
                             "status": {"phase": "Running", "conditions": [
                                 {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
                                  "message": "Eviction API: evicting"}]}}]
    cluster.apply(cluster.decide())  # recorded while it can be seen
    assert cluster.body["status"]["disruptions"][0]["message"].startswith("pod kimi-ft-train-g1-1-abcde: EvictionByEvictionAPI")
    cluster.running_pods = []  # gone; its peer failed first: the Job says BackoffLimitExceeded
    fail(cluster, "kimi-ft-train-g1", "BackoffLimitExceeded", "Job has reached the specified backoff limit")
    plan = cluster.decide()
    assert job_creates(plan) == ["kimi-ft-train-g1-r1"]


def test_a_stage_disrupted_more_often_than_its_retries_fails_naming_them_and_its_own_failure_is_never_retried():
    cluster = Cluster(training(promote=None, limits={"disruptionRetries": 1}))
    run_through(cluster, "Generate", "Extract")
    fail(cluster, "kimi-ft-train-g1", "PodFailurePolicy", "Pod team/x has condition DisruptionTarget matching FailJob rule at index 0")
    cluster.apply(cluster.decide())
    fail(cluster, "kimi-ft-train-g1-r1", "PodFailurePolicy", "Pod team/y has condition DisruptionTarget matching FailJob rule at index 0")
    plan = cluster.decide()
    cluster.apply(plan)
    ready = cluster.condition("Ready")
    assert job_creates(plan) == [] and cluster.body["status"]["stage"] == "Failed" and ready["reason"] == "Disrupted"
    assert "spec.limits.disruptionRetries 1 spent" in ready["message"] and "raise spec.limits.disruptionRetries" in ready["message"]
    assert len(cluster.body["status"]["disruptions"]) == 2
    own = Cluster(training(promote=None))
    run_through(own, "Generate", "Extract")
    own.finish("Train", ok=False, message=json.dumps({"outcome": "Failed", "command": ["train"], "exitCode": 1, "tail": "OOM"}))
    plan = own.decide()
    own.apply(plan)
    assert job_creates(plan) == [] and own.condition("Ready")["reason"] == "StageFailed"
    assert "disruptions" not in own.body["status"]


# ------------------------------------------------------------------------------------------ deadlines
@pytest.mark.parametrize("stage,default", [("Generate", 86400), ("Extract", 172800), ("Train", 604800), ("Export", 7200)])
def test_every_stage_job_has_a_deadline_the_spec_may_change(stage, default):
    cluster = Cluster(training(promote=None))
    spec = DrafterTraining.model_validate(cluster.body).spec
    assert stage_job("team", "kimi-ft", spec, StageRun(stage, 1), StageCommand("trainer:1"))["spec"]["activeDeadlineSeconds"] == default
    own = spec.model_copy(update={"limits": spec.limits.model_copy(update={"deadlines": spec.limits.deadlines.model_copy(
        update={stage.lower(): "90m"})})})
    job = stage_job("team", "kimi-ft", own, StageRun(stage, 1), StageCommand("trainer:1"))
    assert job["spec"]["activeDeadlineSeconds"] == 5400
    assert job["spec"]["podFailurePolicy"]["rules"][0]["onPodConditions"][0]["type"] == "DisruptionTarget"


def test_a_stage_past_its_deadline_fails_naming_the_bound_and_the_fix_and_is_not_retried():
    cluster = Cluster(training(promote=None, limits={"deadlines": {"extract": "12h"}}))
    run_through(cluster, "Generate")
    fail(cluster, "kimi-ft-extract-g1", "DeadlineExceeded", "Job was active longer than specified deadline")
    plan = cluster.decide()
    cluster.apply(plan)
    ready = cluster.condition("Ready")
    assert job_creates(plan) == [] and ready["reason"] == "DeadlineExceeded"
    assert "ran past its deadline of 12h (spec.limits.deadlines.extract)" in ready["message"]
    assert "raise spec.limits.deadlines" in ready["message"] and cluster.condition("Extracted")["reason"] == "DeadlineExceeded"


# ------------------------------------------------------------------------------------------ names someone else took
@pytest.mark.parametrize("labelled", [True, False])
def test_a_spec_config_map_someone_else_made_first_is_a_name_conflict_never_mounted(labelled):
    cluster = Cluster(training(promote=None))
    cluster.apply(cluster.decide())  # the engine
    foreign = {"kind": "ConfigMap", "metadata": {"name": "kimi-ft-spec-g1", "labels": {"drafter.dev/training": "kimi-ft"}
                                                 if labelled else {}},
               "data": {"training.json": json.dumps({"output": {"path": "/models/drafters/kimi-k25-eagle3"}})}}
    cluster.named = [foreign]
    if labelled:  # a labelled one is in the list the operator reads too, and still not its own
        cluster.config_maps.add("kimi-ft-spec-g1")
    plan = cluster.decide()
    cluster.apply(plan)
    ready = cluster.condition("Ready")
    assert creates(plan) == [] and ready["reason"] == "NameConflict" and "ConfigMap kimi-ft-spec-g1" in ready["message"]
    assert ("Warning", "NameConflict") in [e[:2] for e in plan.events]
    assert cluster.body["status"]["stage"] == "Generate"  # it waits; nothing failed
    cluster.named = [{**foreign, "metadata": {**foreign["metadata"], "ownerReferences": [OWNER]}}]  # its own now
    cluster.config_maps.discard("kimi-ft-spec-g1")
    assert job_creates(cluster.decide()) == ["kimi-ft-generate-g1"]


def test_a_rendezvous_service_someone_else_made_holds_train_only_and_an_unowned_claim_holds_every_stage():
    cluster = across_two_nodes()
    cluster.named = [{"kind": "Service", "metadata": {"name": "kimi-ft-rendezvous"}, "spec": {"clusterIP": "None"}}]
    run_through(cluster, "Generate")  # the Service matters to Train only
    cluster.finish("Extract")
    plan = cluster.decide()
    assert job_creates(plan) == [] and "Service kimi-ft-rendezvous" in ready_of(plan)["message"]
    fresh = Cluster(training(promote=None))
    fresh.claim = {"metadata": {"name": "kimi-ft-hidden-states"}, "spec": {}}  # made by hand, no owner
    fresh.apply(fresh.decide())
    plan = fresh.decide()
    assert creates(plan) == [] and "PersistentVolumeClaim kimi-ft-hidden-states" in ready_of(plan)["message"]



# ------------------------------------------------------------------------------------------ the reconciler
def reconciler_over(*objects: tuple[str, dict]):
    """The real TrainingReconciler (observe, decide, apply) over the simulation's in-memory apiserver holding
    the training and ``objects``; the events it posts."""
    import random

    from drafter_operator.controllers.training.apply import TrainingReconciler
    from drafter_testbed.simulation.apiserver import FakeApiserver
    from drafter_testbed.simulation.clock import Clock

    clock = Clock()
    api = FakeApiserver(clock, lambda: random.Random(0), lambda *_: None)
    body = training(promote=None, data={"dataset": "/models/datasets/prompts.jsonl", "chatTemplate": "kimi-k2-instruct",
                                        "numSamples": 100})
    body["metadata"] = {"name": "kimi-ft", "namespace": "team"}
    api.put("user", "/apis/drafter.dev/v1alpha1/namespaces/team/draftertrainings/kimi-ft", body)
    for key, obj in objects:
        api.put("intruder", key, obj)
    events: list[tuple[str, str, str]] = []
    reconciler = TrainingReconciler(kube=api, image="trainer:1", clock=clock.now, tenant_policy=TenantPolicy)
    return api, reconciler, lambda _body, kind, reason, message: events.append((kind, reason, message)), events


SPEC_CM = "/api/v1/namespaces/team/configmaps/kimi-ft-spec-g1"


@pytest.mark.parametrize("labels", [{}, {"drafter.dev/training": "kimi-ft"}], ids=["unlabelled", "labelled"])
def test_the_reconciler_never_mounts_a_spec_config_map_it_does_not_own_and_says_name_conflict(labels):
    foreign = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kimi-ft-spec-g1", "namespace": "team",
                                                                      "labels": labels},
               "data": {"training.json": json.dumps({"output": {"path": "/models/drafters/kimi-k25-eagle3"}})}}
    api, reconciler, post, events = reconciler_over((SPEC_CM, foreign))
    for _ in range(2):
        reconciler.reconcile("team", "kimi-ft", post)
    assert not [k for k in api.store if "/jobs/" in k]
    status = api.store["/apis/drafter.dev/v1alpha1/namespaces/team/draftertrainings/kimi-ft"]["status"]
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "NameConflict" and "ConfigMap kimi-ft-spec-g1" in ready["message"]
    assert api.store[SPEC_CM]["data"] == foreign["data"]  # untouched
    api.remove("user", SPEC_CM)  # the user deletes it: the run goes on, with its own
    reconciler.reconcile("team", "kimi-ft", post)
    assert [k.rsplit("/", 1)[1] for k in api.store if "/jobs/" in k] == ["kimi-ft-extract-g1"]
    assert api.store[SPEC_CM]["metadata"]["ownerReferences"][0]["kind"] == "DrafterTraining"


def test_a_create_that_meets_someone_elses_config_map_creates_nothing_after_it():
    api, reconciler, post, events = reconciler_over()
    plan = reconciler.decide(reconciler.observe("team", "kimi-ft"))  # decided before the intruder's create lands
    api.put("intruder", SPEC_CM, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kimi-ft-spec-g1",
                                                                                      "namespace": "team"}, "data": {}})
    reconciler.apply(api.store["/apis/drafter.dev/v1alpha1/namespaces/team/draftertrainings/kimi-ft"], plan, post)
    assert not [k for k in api.store if "/jobs/" in k]
    assert [e[:2] for e in events] == [("Warning", "NameConflict")] and "ConfigMap kimi-ft-spec-g1" in events[0][2]
