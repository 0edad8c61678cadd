"""Kueue queueing (pure): a stage Job joins its queue suspended, and status says why it still waits."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from drafter_operator.resources.queueing import QUEUE_LABEL, admission_wait, queued
from drafter_operator.resources.training_job import StageCommand, StageRun, stage_job
from tests.support.trainings import Cluster, start, training
from tests.support.training_families import with_nodes

# What Kueue writes on a Workload that does not fit (its QuotaReserved condition).
PENDING = {"type": "QuotaReserved", "status": "False", "reason": "Pending",
           "message": "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in "
                      "flavor gpu, 1 more needed"}


def workload(job: dict, *conditions: dict) -> dict:
    return {"metadata": {"name": f"job-{job['metadata']['name']}-abcde",
                         "ownerReferences": [{"kind": "Job", "uid": job["metadata"]["uid"], "controller": True}]},
            "status": {"conditions": list(conditions)}}


def job_in(queue: str | None, suspend: bool = True) -> dict:
    job = queued({"metadata": {"name": "kimi-extract-g1", "uid": "j-1", "labels": {"a": "b"}}, "spec": {"parallelism": 2}},
                 queue)
    if queue:
        job["spec"]["suspend"] = suspend
    return job


def test_a_queued_job_carries_the_queue_label_and_is_created_suspended_the_others_are_untouched():
    job = job_in("gpus")
    assert job["metadata"]["labels"] == {"a": "b", QUEUE_LABEL: "gpus"} and job["spec"]["suspend"] is True
    assert job["spec"]["parallelism"] == 2  # the whole pod set is admitted at once
    plain = job_in(None)
    assert QUEUE_LABEL not in plain["metadata"]["labels"] and "suspend" not in plain["spec"]


def test_every_stage_job_of_a_queued_training_joins_its_queue():
    spec = with_nodes(2).model_copy(update={"queue_name": "team-gpus"})
    for stage in ("Generate", "Extract", "Train", "Export"):
        job = stage_job("team", "kimi", spec, StageRun(stage, 1), StageCommand("trainer:1"))
        assert job["metadata"]["labels"][QUEUE_LABEL] == "team-gpus" and job["spec"]["suspend"] is True


def test_why_a_job_waits_is_kueues_own_words_and_nothing_once_admitted():
    job = job_in("gpus")
    assert "no Workload yet" in admission_wait(job, ())
    assert admission_wait(job, (workload(job, PENDING),)) == f"waits in queue gpus: {PENDING['message']}"
    other = workload({"metadata": {"name": "other", "uid": "j-2"}}, PENDING)
    assert "no Workload yet" in admission_wait(job, (other,))  # another Job's Workload says nothing of this one
    assert admission_wait(job_in("gpus", suspend=False), (workload(job, PENDING),)) is None
    assert admission_wait(job_in(None), ()) is None


@pytest.mark.parametrize("name", ["", "Team", "a" * 64, "gpus_1"])
def test_a_queue_name_that_cannot_be_a_label_value_is_refused_naming_the_field(name):
    with pytest.raises(ValidationError, match="queueName"):
        with_nodes(1).model_validate({**with_nodes(1).to_json(), "queueName": name})


def test_a_queued_stage_reports_queued_with_kueues_reason_then_running_once_admitted():
    cluster = Cluster(training(promote=None, queueName="team-gpus", data={
        **training()["spec"]["data"], "generation": None}))
    start(cluster)
    job = cluster.jobs["kimi-ft-extract-g1"]  # a prepared dataset: Extract comes first
    assert job["spec"]["suspend"] is True and job["metadata"]["labels"][QUEUE_LABEL] == "team-gpus"
    job["metadata"]["uid"] = "j-gen"
    cluster.workloads = (workload(job, PENDING),)
    cluster.apply(cluster.decide())
    ready = cluster.condition("Ready")
    assert ready["reason"] == "Queued" and PENDING["message"] in ready["message"]
    assert cluster.body["status"]["stage"] == "Extract"
    assert PENDING["message"] in cluster.body["status"]["progress"]["summary"]
    job["spec"]["suspend"] = False  # Kueue admitted it
    cluster.apply(cluster.decide())
    assert cluster.condition("Ready")["reason"] == "Running"


def test_a_queued_benchmark_job_joins_its_queue_and_says_queued_until_kueue_admits_it():
    import dataclasses

    from drafter_operator.controllers.benchmark.decide import decide as decide_benchmark
    from tests.support.benchmarks import benchmark, condition, created_job, job, serving, state

    body = benchmark(queueName="bench-cpu")
    created = created_job(decide_benchmark(state(body, serving())))
    assert created["metadata"]["labels"][QUEUE_LABEL] == "bench-cpu" and created["spec"]["suspend"] is True
    waiting = job()
    waiting["metadata"]["labels"], waiting["spec"] = {QUEUE_LABEL: "bench-cpu"}, {"suspend": True}
    plan = decide_benchmark(dataclasses.replace(state(body, serving(), jobs=[waiting]),
                                                workloads=(workload(waiting, PENDING),)))
    complete = condition(plan, "Complete")
    assert complete["reason"] == "Queued" and PENDING["message"] in complete["message"]
    waiting["spec"]["suspend"] = False
    assert condition(decide_benchmark(state(body, serving(), jobs=[waiting])), "Complete")["reason"] == "Running"
