"""The named steps of the DrafterBenchmark decision, each on its own: what it reads (controllers/benchmark/observe.py),
the run's outcome (controllers/benchmark/outcome.py), and the checks and the start (controllers/benchmark/decide.py)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json

from hypothesis import given
from hypothesis import strategies as st

from drafter_operator.api import DrafterBenchmark
from drafter_operator.api.benchmark import BenchmarkResult
from drafter_operator.controllers.benchmark.decide import (
    finish_status,
    foreign_job,
    reference_problems,
    run_finished,
    serving_wait,
    stale_jobs,
    start_run,
    validated_spec,
)
from drafter_operator.controllers.benchmark.observe import (
    controlled_by,
    metrics_urls,
    own_pods,
    serving_ready,
    swapped_during_run,
)
from drafter_operator.controllers.benchmark.outcome import observe_job, result_summary, succeeded
from drafter_operator.controllers.benchmark.state import ObservedServing
from drafter_operator.controllers.plan import Plan
from drafter_operator.controllers.swap import Verdict
from drafter_operator.resources.pod_policy import TenantPolicy
from tests.support.benchmarks import SEED_RESULT, T0, benchmark, created_job, job, job_pod, serving, state


def spec_of(body: dict):
    return DrafterBenchmark.model_validate(body).spec


def finisher(body: dict, now: dt.datetime = T0):
    plan, observed = Plan(), state(body, serving(), now=now)
    return plan, lambda *args, **kwargs: finish_status(plan, observed, *args, **kwargs)


@given(st.sampled_from(["b-1", "b-2", None]), st.booleans())
def test_only_a_controller_owner_reference_with_the_uid_controls(uid, controller):
    obj = {"metadata": {"ownerReferences": [{"uid": "b-1", "controller": controller}]}}
    assert controlled_by(obj, uid) == (uid == "b-1" and controller)


def test_stale_jobs_are_the_older_generations_own_ones_not_being_deleted():
    gone = job(name="seed-bench-g0")
    gone["metadata"]["deletionTimestamp"] = "now"
    jobs = (job(name="seed-bench-g1"), job(name="seed-bench-g2"), job(name="seed-bench-g3", owner_uid="other"), gone)
    assert stale_jobs(state(benchmark(generation=2), jobs=jobs)) == ["/apis/batch/v1/namespaces/team/jobs/seed-bench-g1"]


def test_finish_status_writes_only_changes_and_sends_events_only_with_them():
    plan, finish = finisher(benchmark())
    finish({"state": "Failed"}, Verdict("False", "Broken", "why"), events=[("Warning", "Broken", "why")])
    failed = next(c for c in plan.status["conditions"] if c["type"] == "Failed")
    assert (plan.status["state"], failed["status"], failed["reason"]) == ("Failed", "True", "Broken")
    assert plan.events == [("Warning", "Broken", "why")]
    body = benchmark()
    body["status"] = dict(plan.status)
    again, finish_again = finisher(body)
    finish_again({"state": "Failed"}, Verdict("False", "Broken", "why"), events=[("Warning", "Broken", "why")])
    assert again.status == {} and again.events == []


def test_validation_run_finished_and_a_foreign_job():
    assert validated_spec(benchmark())[1] is None
    assert "numPrompts" in validated_spec(benchmark(numPrompts="many"))[1]
    done = benchmark()
    done["status"] = {"observedGeneration": 1, "state": "Succeeded"}
    assert run_finished(state(done)) and not run_finished(state(benchmark(generation=2) | {"status": done["status"]}))
    verdict = foreign_job(job(owner_uid="other"))
    assert verdict.reason == "JobNotOwned" and "Job seed-bench-g1 exists" in verdict.message


def test_reference_problems_name_a_missing_serving_or_a_refused_service_account():
    body = benchmark()
    assert reference_problems(state(body, ObservedServing(serving=None)), spec_of(body)).reason == "ServingNotFound"
    assert reference_problems(state(body, serving()), spec_of(body)) is None
    with_account = benchmark(pod={"serviceAccountName": "bench"})
    narrow = dataclasses.replace(state(with_account, serving()), tenant_policy=TenantPolicy(service_accounts={"*": ("x",)}))
    refused = reference_problems(narrow, spec_of(with_account))
    assert refused.reason == "InvalidSpec" and "spec.pod.serviceAccountName" in refused.message


def test_a_serving_not_ready_is_waited_for_until_the_timeout():
    body = benchmark()
    assert serving_wait(state(body, serving()), spec_of(body)) is None
    assert serving_wait(state(body, serving(ready=False)), spec_of(body)).reason == "WaitingForServing"
    late = serving_wait(state(body, serving(ready=False), now=T0 + dt.timedelta(minutes=10)), spec_of(body))
    assert late.reason == "ServingNotReady" and late.message.endswith("within spec.timeout 10m")
    assert serving_ready({"status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    assert not serving_ready(None)


def test_start_run_creates_the_job_against_the_recorded_baseline():
    body = benchmark()
    plan, finish = finisher(body)
    start_run(plan, state(body, serving()), spec_of(body), 60.0, finish)
    argv = created_job(plan)["spec"]["template"]["spec"]["containers"][0]["command"]
    assert argv[-2:] == ["--baseline-tps", "60"] and plan.status["jobName"] == "seed-bench-g1"
    assert metrics_urls(serving()) == ["http://10.1.0.1:8000", "http://10.1.0.2:8000"]


def test_only_the_jobs_own_pods_are_read():
    observed = state(benchmark(), jobs=(job(),), job_pods=(job_pod(0, "{}"), job_pod(0, "{}", job_uid="j-2", name="x")))
    assert [p["metadata"]["name"] for p in own_pods(observed, job())] == ["seed-bench-g1-x"]
    assert own_pods(observed, job(owner_uid="other")) == []


def test_observe_job_reports_running_then_the_failure_with_the_containers_error():
    body = benchmark()
    plan, finish = finisher(body)
    observe_job(state(body, jobs=(job(),)), spec_of(body), job(), {}, finish, T0)
    assert plan.status["state"] == "Running"
    failed = job("Failed", "limit")
    plan, finish = finisher(body)
    observe_job(state(body, jobs=(failed,), job_pods=(job_pod(1, "no route"),)), spec_of(body), failed, {}, finish, T0)
    assert plan.status["state"] == "Failed" and plan.events == [("Warning", "BackoffLimitExceeded", "no route")]


def test_succeeded_judges_the_gate_and_a_result_from_a_swapped_serving_is_taught_to_no_revision():
    body = benchmark(gate={"minSpeedup": "1.2"})
    body["status"] = {"revision": "r0", "numSpeculativeTokens": 3}
    plan, finish = finisher(body)
    succeeded(spec_of(body), json.dumps(SEED_RESULT), finish, T0, swapped="moved")
    assert plan.status["result"]["verdict"] == "Failed" and plan.status["revision"] is None
    assert [e[1] for e in plan.events] == ["Completed", "BelowGate"] and plan.events[0][2].endswith("; moved")
    plan, finish = finisher(body)
    succeeded(spec_of(body), "not json", finish, T0)
    assert plan.status["state"] == "Failed" and plan.events[0][1] == "InvalidResult"


def test_a_run_that_started_on_another_revision_says_so():
    assert swapped_during_run(state(benchmark(), serving()), {"revision": "r1"}) is None
    assert "from revision r0 to r1" in swapped_during_run(state(benchmark(), serving()), {"revision": "r0"})
    assert swapped_during_run(state(benchmark()), {"revision": "r0"}) is None


def test_the_summary_names_throughput_speedup_and_acceptance():
    result = BenchmarkResult.model_validate(SEED_RESULT)
    assert result_summary(result) == "54.4 tok/s, 0.66x against 82.5 tok/s, acceptance 15.0%"
