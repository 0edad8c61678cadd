"""The named steps of the DrafterTraining decision, each on its own: observing the Jobs and leftovers
(controllers/training/observe.py), Generate's engine (controllers/training/generate.py), Evaluate and Promote's observation
(controllers/training/promotion.py), and the verdicts, the record, the claim and the stage start (controllers/training/decide.py)."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from drafter_operator.api import DrafterTraining
from drafter_operator.controllers.training.decide import (
    choose_stage,
    completion_events,
    hidden_states,
    job_stage_creates,
    start_refusal,
    stage_verdicts,
    validated_spec,
)
from drafter_operator.controllers.training.generate import engine_step, idle_engine_deletes
from drafter_operator.controllers.training.observe import (
    failure_text,
    left_by_earlier,
    observe_jobs,
    stage_job_state,
    stale_children,
)
from drafter_operator.controllers.training.promotion import observe_promotion
from drafter_operator.controllers.training.stages import StageDecision, StageJob
from drafter_operator.controllers.training.state import TrainingState
from drafter_operator.resources.pod_policy import TenantPolicy
from drafter_operator.resources.training_job import STAGE_LABEL
from tests.support.trainings import DIGEST, T0, creates, sglang_serving, training


def state(body: dict | None = None, **fields) -> TrainingState:
    return TrainingState(**{"training": body or training(promote=None), "jobs": (), "job_pods": (), "claim": None,
                            "config_maps": frozenset(), "now": T0, "image": "trainer:1",
                            "tenant_policy": TenantPolicy(), **fields})


def spec_of(body: dict):
    return DrafterTraining.model_validate(body).spec


def job(name: str, stage: str | None, finished: str | None = None, owner: str = "t-1") -> dict:
    labels = {STAGE_LABEL: stage} if stage else {}
    conditions = [{"type": finished, "status": "True"}] if finished else []
    return {"metadata": {"name": name, "labels": labels, "ownerReferences": [{"uid": owner}]},
            "status": {"conditions": conditions}}


def pod(name: str, job_name: str, message: str = "", phase: str = "Running") -> dict:
    return {"metadata": {"name": name, "labels": {"job-name": job_name}},
            "status": {"phase": phase, "containerStatuses": [{"state": {"terminated": {"message": message}}}]}}


@given(st.lists(st.sampled_from(["t-1", "t-0", "other"]), max_size=3), st.sampled_from(["t-1", None]))
def test_only_an_object_owned_by_someone_else_counts_as_left_by_an_earlier_training(owners, uid):
    obj = {"metadata": {"ownerReferences": [{"uid": o} for o in owners]}}
    assert left_by_earlier(obj, uid) == (bool(owners) and uid is not None and uid not in owners)


def test_a_failed_stage_job_reads_its_runners_outcome_and_a_running_one_has_no_message():
    outcome = json.dumps({"outcome": "Failed", "command": ["specforge", "train"], "exitCode": 3, "tail": "OOM"})
    failed = stage_job_state(job("j", "Train", "Failed"), (pod("p", "j", outcome),))
    assert failed == StageJob("Train", "Failed", "specforge train exited with code 3: OOM")
    assert stage_job_state(job("j", "Train"), ()) == StageJob("Train", "Running")
    assert stage_job_state(job("j", "Train", "Complete"), ()) == StageJob("Train", "Succeeded")
    assert stage_job_state(job("j", None, "Complete"), ()) is None
    assert stage_job_state(job("j", "Train", "Failed"), ()).message == "Job j failed"
    assert failure_text(pod("p", "j", "plain text\n")) == "plain text"


def test_older_generations_jobs_and_other_benchmarks_are_stale_but_never_one_being_deleted():
    body = training(promote=None)
    body["metadata"]["generation"] = 2
    gone = job("kimi-ft-train-g1", "Train")
    gone["metadata"]["deletionTimestamp"] = "now"
    benchmarks = ({"metadata": {"name": "kimi-ft-evaluate-g2"}}, {"metadata": {"name": "kimi-ft-evaluate-g1"}})
    deletes = stale_children(state(body, jobs=(job("kimi-ft-generate-g1", "Generate"), job("kimi-ft-generate-g2", "Generate"),
                                               gone), benchmarks=benchmarks), "kimi-ft-evaluate-g2", "drafter.dev/v1alpha1")
    assert deletes == ["/apis/batch/v1/namespaces/team/jobs/kimi-ft-generate-g1",
                       "/apis/drafter.dev/v1alpha1/namespaces/team/drafterbenchmarks/kimi-ft-evaluate-g1"]


def test_observe_jobs_reads_recorded_stages_kept_failures_and_the_leftovers_in_the_way():
    body = training(promote=None)
    body["status"] = {"conditions": [
        {"type": "Generated", "status": "True", "observedGeneration": 1},
        {"type": "Extracted", "status": "True", "observedGeneration": 0},  # an older generation's: not recorded
        {"type": "Trained", "status": "False", "observedGeneration": 1, "message": "Train failed: no GPUs"}]}
    earlier = job("kimi-ft-extract-g1", "Extract", owner="t-0")
    seen = observe_jobs(state(body, jobs=(job("kimi-ft-generate-g1", "Generate", "Complete"), earlier),
                              job_pods=(pod("old-pod", "kimi-ft-train-g0"), pod("done", "kimi-ft-train-g0", phase="Failed")),
                              earlier=("kimi-ft-spec-g1",)))
    assert [j["metadata"]["name"] for j in seen.current_jobs] == ["kimi-ft-generate-g1"]
    assert seen.recorded == frozenset({"Generate"})
    assert seen.observed == {"Generate": StageJob("Generate", "Succeeded"), "Train": StageJob("Train", "Failed", "no GPUs")}
    assert seen.leftovers == ["kimi-ft-extract-g1", "kimi-ft-spec-g1", "old-pod"]


def test_generates_engine_is_created_then_waited_for_then_served_or_failed():
    spec = spec_of(training(promote=None))
    created = engine_step((), "team", "kimi-ft", spec, 1)
    assert [m["kind"] for _, m in creates(created)] == ["Deployment", "Service"]
    assert [p for p, _ in creates(created)] == ["/apis/apps/v1/namespaces/team/deployments",
                                               "/api/v1/namespaces/team/services"]
    assert created.waiting == "waiting for the target's engine to start" and created.events[0][1] == "EngineStarting"
    deployment = {"kind": "Deployment", "metadata": {"name": "kimi-ft-gen-g1"}, "status": {}}
    service = {"kind": "Service", "metadata": {"name": "kimi-ft-gen-g1"},
               "spec": {"clusterIP": "10.96.0.9", "ports": [{"port": 30000}]}}
    assert engine_step((deployment, service), "team", "kimi-ft", spec, 1).waiting == \
        "waiting for the target's engine to be Ready"
    ready = {**deployment, "status": {"readyReplicas": 1}}
    assert engine_step((ready, service), "team", "kimi-ft", spec, 1).endpoint == "http://10.96.0.9:30000/v1"
    stalled = {**deployment, "status": {"conditions": [{"type": "Progressing", "reason": "ProgressDeadlineExceeded",
                                                         "message": "timed out"}]}}
    assert engine_step((stalled, service), "team", "kimi-ft", spec, 1).failed == "did not become Ready: timed out"


def test_every_engine_object_but_the_running_generations_goes():
    engine = ({"kind": "Deployment", "metadata": {"name": "kimi-ft-gen-g1"}},
              {"kind": "Service", "metadata": {"name": "kimi-ft-gen-g1"}},
              {"kind": "Service", "metadata": {"name": "kimi-ft-gen-g2"}},
              {"kind": "Deployment", "metadata": {"name": "kimi-ft-gen-g0", "deletionTimestamp": "now"}})
    assert idle_engine_deletes(engine, "team", "kimi-ft-gen-g2") == [
        "/apis/apps/v1/namespaces/team/deployments/kimi-ft-gen-g1", "/api/v1/namespaces/team/services/kimi-ft-gen-g1"]
    assert len(idle_engine_deletes(engine, "team", None)) == 3


def test_observe_promotion_reads_evaluate_from_its_benchmark_and_promote_from_the_serving():
    body = training()
    body["metadata"]["name"] = "kimi-ft"
    output = body["spec"]["output"]["path"]
    body["status"] = {"observedGeneration": 1, "artifacts": [{"stage": "Export", "path": output, "contentDigest": DIGEST}]}
    serving = sglang_serving()
    benchmark = {"metadata": {"name": "kimi-ft-evaluate-g1"},
                 "status": {"state": "Succeeded", "result": {"tokensPerSecond": 80.0}}}
    seen = observe_promotion(state(body, serving=serving, benchmarks=(benchmark,)), spec_of(body))
    assert seen.digest == DIGEST and list(seen.stages) == ["Evaluate"]  # the serving does not run it yet
    assert seen.evaluation == {"currentTokensPerSecond": 80.0, "benchmark": "kimi-ft-evaluate-g1"}
    serving["spec"]["drafter"] = {"method": "eagle3", "model": output, "contentDigest": DIGEST}
    assert observe_promotion(state(body, serving=serving), spec_of(body)).stages["Promote"].state == "Running"
    without = training(promote=None)
    assert observe_promotion(state(without, serving=serving), spec_of(without)).stages == {}


def test_stage_verdicts_say_succeeded_or_pending_and_leave_the_failed_stage_to_its_failure():
    decision = StageDecision(stage="Failed", done=("Extract",), failed=StageJob("Train", "Failed", "x"))
    verdicts = dict(stage_verdicts(("Extract", "Train", "Export"), decision, {}, 4))
    assert set(verdicts) == {"Extracted", "Exported"}
    assert (verdicts["Extracted"].status, verdicts["Exported"].reason) == ("True", "Pending")
    assert verdicts["Exported"].message == "Export has not run for generation 4"


def test_the_claim_goes_once_export_is_recorded_and_no_job_runs_unless_retained():
    body = training(promote=None)
    claim = {"metadata": {"name": "kimi-ft-hidden-states", "ownerReferences": [{"uid": "t-1"}]}}
    pods = (pod("p", "kimi-ft-export-g1", phase="Succeeded"),)
    artifacts = [{"stage": "Extract", "path": "/h", "sizeBytes": 7}]
    hidden, deletes = hidden_states(state(body, claim=claim, job_pods=pods), spec_of(body), frozenset({"Export"}), artifacts)
    assert deletes == ["/api/v1/namespaces/team/pods/p", "/api/v1/namespaces/team/persistentvolumeclaims/kimi-ft-hidden-states"]
    assert hidden == {"claimName": "kimi-ft-hidden-states", "deleted": True, "bytesWritten": 7}
    running = state(body, claim=claim, jobs=(job("kimi-ft-export-g1", "Export"),))
    assert hidden_states(running, spec_of(body), frozenset({"Export"}), None)[1] == []
    assert hidden_states(state(body, claim=claim), spec_of(body), frozenset({"Train"}), None)[1] == []
    body["spec"]["hiddenStates"]["storage"]["retain"] = True
    assert hidden_states(state(body, claim=claim), spec_of(body), frozenset({"Export"}), None)[1] == []


def test_a_stage_is_refused_before_it_starts_when_its_serving_is_unfit_or_its_output_in_use():
    body = training()
    assert start_refusal(spec_of(body), state(body), "Evaluate")[1] == "ServingUnsuitable"
    serving = sglang_serving()
    serving["spec"]["drafter"]["model"] = body["spec"]["output"]["path"]
    problems, reason, fix = start_refusal(spec_of(body), state(body, servings=(serving,)), "Export")
    assert reason == "OutputInUse" and "overlaps" in problems[0] and fix.startswith("change the spec to run again")
    assert start_refusal(spec_of(body), state(body), "Train") is None
    assert start_refusal(spec_of(body), state(body), None) is None


def test_a_job_stage_creates_what_is_missing_then_its_job():
    body = training(promote=None)
    spec = spec_of(body)
    kinds = [w.body["kind"] for w in job_stage_creates(state(body), spec, "Extract", None)]
    assert kinds == ["PersistentVolumeClaim", "ConfigMap", "Job"]
    present = state(body, claim={"metadata": {"name": "c"}}, config_maps=frozenset({"kimi-ft-spec-g1"}))
    (made,) = job_stage_creates(present, spec, "Generate", "http://10.0.0.1:30000/v1")
    command = made.body["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--generation-endpoint") + 1] == "http://10.0.0.1:30000/v1"


def test_a_spec_is_refused_by_the_api_or_the_tenancy_policy():
    assert validated_spec(state())[1] is None
    broken = training(promote=None)
    broken["spec"]["train"]["epochs"] = "many"
    assert "train.epochs" in validated_spec(state(broken))[1]
    narrow = TenantPolicy(image_prefixes=("registry.example/",))
    assert "spec.image" in validated_spec(state(tenant_policy=narrow))[1]


def test_the_stages_chosen_follow_the_spec_and_only_new_successes_are_announced():
    with_promote, without = spec_of(training()), spec_of(training(promote=None))
    stages, decision = choose_stage(without, {"Generate": StageJob("Generate", "Succeeded")}, frozenset())
    assert stages == ("Generate", "Extract", "Train", "Export") and decision.start == "Extract"
    assert choose_stage(with_promote, {}, frozenset({"Generate", "Extract", "Train", "Export"}))[1].start == "Evaluate"
    done = StageDecision(stage="Export", done=("Generate", "Extract"))
    observed = {"Extract": StageJob("Extract", "Succeeded")}
    assert completion_events(done, frozenset({"Generate"}), observed) == [("Normal", "Extracted", "Extract succeeded")]
