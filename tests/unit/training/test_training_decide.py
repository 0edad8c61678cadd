"""The DrafterTraining reconcile decision (pure), played against a small fake cluster."""

from __future__ import annotations

import copy
import dataclasses
import json


from drafter_operator.controllers.training.decide import decide
from drafter_operator.controllers.training.state import TrainingState
from tests.support.trainings import Cluster, DIGEST, T0, creates, sglang_serving, start, training


def test_the_stages_run_one_job_after_the_other_and_the_claim_goes_when_done():
    cluster = Cluster(training(promote=None))
    engine = cluster.decide()  # Generate regenerates answers: the target's engine first
    assert [m["kind"] for _, m in creates(engine)] == ["Deployment", "Service"]
    cluster.apply(engine)
    first = cluster.decide()
    kinds = [m["kind"] for _, m in creates(first)]
    assert kinds == ["PersistentVolumeClaim", "ConfigMap", "Job"]
    cluster.apply(first)
    job = creates(first)[2][1]
    assert job["metadata"]["name"] == "kimi-ft-generate-g1" and cluster.body["status"]["stage"] == "Generate"
    # Generate reaches the engine by its Service's cluster IP
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--generation-endpoint") + 1] == "http://10.96.0.9:30000/v1"
    assert creates(cluster.decide()) == []  # running: nothing new
    for stage in ("Generate", "Extract", "Train", "Export"):
        cluster.finish(stage)
        plan = cluster.decide()
        cluster.apply(plan)
    assert cluster.body["status"]["stage"] == "Succeeded" and cluster.condition("Exported")["status"] == "True"
    assert [e[1] for e in cluster.events].count("StageStarted") == 4
    assert cluster.engine == {}  # the engine went once Generate finished
    # every Job finished (they stay as the record): once Export is recorded, the claim goes, and the
    # finished pods that still name it
    assert cluster.claim is not None
    cluster.jobs["kimi-ft-export-g1"]["_message"] = json.dumps({"outcome": "Succeeded"})
    cluster.apply(cluster.decide())
    assert cluster.claim is None and cluster.body["status"]["hiddenStates"]["deleted"] is True
    assert "/api/v1/namespaces/team/pods/kimi-ft-export-g1-pod" in cluster.deleted
    assert set(cluster.jobs) == {f"kimi-ft-{s}-g1" for s in ("generate", "extract", "train", "export")}


def test_the_claim_stays_while_any_job_of_the_training_is_unfinished():
    cluster = Cluster(training(promote=None))
    start(cluster)
    for stage in ("Generate", "Extract", "Train"):
        cluster.finish(stage)
        cluster.apply(cluster.decide())
    # an older generation's Job still running (being deleted, its pod still writing)
    cluster.jobs["kimi-ft-extract-g0"] = {"metadata": {"name": "kimi-ft-extract-g0", "deletionTimestamp": "x",
                                                       "labels": {"drafter.dev/training-stage": "Extract"}}}
    cluster.finish("Export")
    cluster.apply(cluster.decide())
    cluster.apply(cluster.decide())
    assert cluster.body["status"]["stage"] == "Succeeded" and cluster.claim is not None
    cluster.jobs.pop("kimi-ft-extract-g0")
    cluster.apply(cluster.decide())
    assert cluster.claim is None


def test_a_failed_stage_stops_the_run_with_its_error_and_a_spec_change_starts_again():
    cluster = Cluster(training())
    start(cluster)
    cluster.finish("Generate")
    cluster.apply(cluster.decide())
    outcome = {"stage": "Extract", "outcome": "Failed", "command": ["python", "prepare_hidden_states.py"],
               "exitCode": 1, "tail": "torch.OutOfMemoryError: CUDA out of memory"}
    cluster.finish("Extract", ok=False, message=json.dumps(outcome))
    plan = cluster.decide()
    cluster.apply(plan)
    ready = cluster.condition("Ready")
    assert cluster.body["status"]["stage"] == "Failed" and ready["reason"] == "StageFailed"
    assert "python prepare_hidden_states.py exited with code 1: torch.OutOfMemoryError" in ready["message"]
    assert creates(plan) == [] and ("Warning", "StageFailed") in [(e[0], e[1]) for e in plan.events]
    assert creates(cluster.decide()) == []  # not retried by itself
    cluster.body["metadata"]["generation"] = 2
    cluster.body["spec"]["train"]["epochs"] = 3  # only Train reads it: Generate, done, carries over
    again = cluster.decide()
    assert sorted(p.rsplit("/", 1)[1] for p in again.deletes) == ["kimi-ft-extract-g1", "kimi-ft-generate-g1"]
    assert creates(again) == []  # the older generation's Jobs go first
    cluster.apply(again)
    plan = cluster.decide()
    assert [m["metadata"]["name"] for _, m in creates(plan)] == ["kimi-ft-spec-g2", "kimi-ft-extract-g2"]
    cluster.apply(plan)
    assert cluster.condition("Generated")["status"] == "True" and cluster.body["status"]["stage"] == "Extract"


def test_a_restarted_operator_resumes_and_never_repeats_a_finished_stage_even_without_its_job():
    cluster = Cluster(training())
    start(cluster)
    cluster.finish("Generate")
    cluster.apply(cluster.decide())  # Extract starts; Generated recorded
    cluster.jobs.pop("kimi-ft-generate-g1")  # a TTL controller removed the finished Job
    plan = cluster.decide()
    assert creates(plan) == [] and cluster.body["status"]["stage"] == "Extract"
    assert cluster.condition("Generated")["status"] == "True"


def test_a_claim_named_in_the_spec_is_used_and_never_deleted():
    cluster = Cluster(training(hiddenStates={"layers": [2, 30, 58], "storage": {"claimName": "scratch"}}))
    cluster.apply(cluster.decide())  # the engine
    first = cluster.decide()
    assert [m["kind"] for _, m in creates(first)] == ["ConfigMap", "Job"]
    cluster.apply(first)
    for stage in ("Generate", "Extract", "Train", "Export"):
        cluster.finish(stage)
        cluster.apply(cluster.decide())
    cluster.jobs.clear()
    assert not [p for p in cluster.decide().deletes if "persistentvolumeclaims" in p]


def through_export(cluster: Cluster, digest: str = DIGEST) -> None:
    """Every Job stage done; Export reports the drafter it wrote with its content digest."""
    start(cluster)
    for stage in ("Generate", "Extract", "Train", "Export"):
        cluster.finish(stage, message="" if stage != "Export" else json.dumps({
            "stage": "Export", "outcome": "Succeeded", "outputs": {"drafter": {
                "path": cluster.body["spec"]["output"]["path"], "sizeBytes": 2048, "contentDigest": digest}}}))
        cluster.apply(cluster.decide())


def finish_benchmark(cluster: Cluster, state: str = "Succeeded", **result) -> None:
    (benchmark,) = cluster.benchmarks.values()
    benchmark["status"] = {"state": state, "result": result,
                           "conditions": [{"type": "Failed", "status": "True", "message": "the serving is gone"}]
                           if state == "Failed" else []}


def test_evaluate_benchmarks_the_current_drafter_then_promote_swaps_through_the_gate_and_records_the_revision():
    serving = sglang_serving()
    assert serving["metadata"]["name"] == "kimi-k25-sglang-eagle3"
    cluster = Cluster(training(), serving)
    through_export(cluster)
    cluster.apply(cluster.decide())
    # the hidden states are spent once the drafter is exported
    assert cluster.claim is None and cluster.body["status"]["stage"] == "Evaluate"
    (benchmark,) = cluster.benchmarks.values()
    assert benchmark["spec"]["servingRef"] == {"name": "kimi-k25-sglang-eagle3"}
    assert benchmark["spec"]["baseline"] == {"servingRef": {"name": "kimi-k25-baseline"}}
    assert benchmark["metadata"]["labels"]["drafter.dev/training"] == "kimi-ft"
    cluster.apply(cluster.decide())
    assert cluster.patches == []  # nothing is promoted before the current drafter is measured
    finish_benchmark(cluster, tokensPerSecond=41.26, baselineTokensPerSecond=62.0, speedup=0.66)
    cluster.apply(cluster.decide())
    assert cluster.body["status"]["stage"] == "Promote"
    assert cluster.body["status"]["evaluation"]["currentTokensPerSecond"] == 41.26
    (path, patch), = cluster.patches
    assert path.endswith("/drafterservings/kimi-k25-sglang-eagle3")
    assert patch["spec"]["drafter"]["model"] == "/models/drafters/kimi-k25-eagle3-ft"
    assert patch["spec"]["drafter"]["method"] == "eagle3"
    assert patch["spec"]["drafter"]["contentDigest"] == DIGEST  # what Export wrote, part of the revision
    # spec.swap is the user's: the gate comes with this promotion only (the one-shot annotation): promote.gate's
    # thresholds, and beat the current drafter's measured throughput
    assert "swap" not in patch["spec"]
    assert json.loads(patch["metadata"]["annotations"]["drafter.dev/promotion"]) == {
        "by": "kimi-ft (generation 1)", "model": "/models/drafters/kimi-k25-eagle3-ft", "contentDigest": DIGEST,
        "strategy": "BlueGreen", "gate": {
            "minSpeedup": "1.5", "baseline": {"servingRef": {"name": "kimi-k25-baseline"}},
            "minTokensPerSecond": "41.26", "numPrompts": 5, "maxTokens": 512}}
    assert patch["metadata"]["annotations"]["drafter.dev/promoted-by"] == "kimi-ft (generation 1)"
    cluster.apply(cluster.decide())
    assert len(cluster.patches) == 1  # patched once; now waiting for the serving
    revisions = cluster.serving["status"]["revisions"]
    revisions.append({"name": "new", "drafterSpec": dict(cluster.serving["spec"]["drafter"])})
    cluster.apply(cluster.decide())
    assert cluster.body["status"]["stage"] == "Promote"
    revisions[-1]["good"] = True
    cluster.serving["status"].update(activeRevision="new", lastBenchmark={
        "name": "kimi-k25-sglang-eagle3-gate-new", "revision": "new", "tokensPerSecond": 118.0, "speedup": 1.9})
    cluster.apply(cluster.decide())
    status = cluster.body["status"]
    assert status["stage"] == "Succeeded" and status["promoted"] is True and status["promotedRevision"] == "new"
    assert status["evaluation"]["tokensPerSecond"] == 118.0 and status["evaluation"]["speedup"] == 1.9
    assert cluster.condition("Promoted")["status"] == "True"
    assert "revision new" in cluster.condition("Ready")["message"]


def test_a_drafter_the_gate_refuses_fails_promote_and_the_old_revision_keeps_serving():
    cluster = Cluster(training(), sglang_serving())
    through_export(cluster)
    finish_benchmark(cluster, tokensPerSecond=80.0)
    cluster.apply(cluster.decide())
    cluster.serving["status"]["revisions"].append({
        "name": "new", "good": False, "failedReason": "failed spec.swap.gate (61.0 tok/s is below 80.00)",
        "drafterSpec": dict(cluster.serving["spec"]["drafter"])})
    cluster.apply(cluster.decide())
    status = cluster.body["status"]
    assert status["stage"] == "Failed" and status["promoted"] is False
    assert "61.0 tok/s is below 80.00" in cluster.condition("Promoted")["message"]
    assert "revision old keeps serving" in cluster.condition("Promoted")["message"]
    assert ("Warning", "StageFailed") in [(k, r) for k, r, _ in cluster.events]


def test_evaluate_fails_at_once_when_the_serving_is_missing_or_serves_another_target():
    cluster = Cluster(training())
    through_export(cluster)
    assert cluster.body["status"]["stage"] == "Failed" and not cluster.benchmarks
    assert "not found in this namespace" in cluster.condition("Evaluated")["message"]
    other = sglang_serving()
    other["spec"]["target"]["model"] = "/models/DeepSeek-V3"
    cluster = Cluster(training(), other)
    through_export(cluster)
    assert "a drafter only fits the target it was trained for" in cluster.condition("Evaluated")["message"]


def test_a_failed_evaluation_benchmark_stops_the_run_with_its_reason():
    cluster = Cluster(training(), sglang_serving())
    through_export(cluster)
    finish_benchmark(cluster, state="Failed")
    cluster.apply(cluster.decide())
    assert cluster.body["status"]["stage"] == "Failed" and not cluster.patches
    assert "the serving is gone" in cluster.condition("Evaluated")["message"]


def test_progress_comes_from_the_running_stage_pods_log_and_never_from_another_stage():
    cluster = Cluster(training(promote=None))
    start(cluster)
    cluster.finish("Generate")
    cluster.apply(cluster.decide())
    assert cluster.body["status"]["progress"] == {"summary": "Extract starting"}
    cluster.log = ('noise\ndrafter-progress {"stage":"Generate","samplesDone":5,"samplesTotal":5}\n')
    cluster.apply(cluster.decide())
    assert cluster.body["status"]["progress"] == {"summary": "Extract starting"}
    cluster.log += ('drafter-progress {"stage":"Extract","samplesDone":12,"samplesTotal":24,"summary":"12/24 samples",'
                    '"bytesWritten":1000,"estimatedBytes":5000,"updated":"2026-12-01T11:59:50Z","etaSeconds":30}\n')
    cluster.apply(cluster.decide())
    status = cluster.body["status"]
    assert status["progress"]["summary"] == "12/24 samples" and status["progress"]["etaSeconds"] == 20
    assert status["hiddenStates"]["bytesWritten"] == 1000 and status["hiddenStates"]["estimatedBytes"] == 5000
    cluster.log = None  # the log cannot be read for a moment: the last progress stays
    cluster.apply(cluster.decide())
    assert status["progress"]["summary"] == "12/24 samples"


def test_artifacts_come_from_the_finished_stages_outcomes():
    cluster = Cluster(training(promote=None))
    start(cluster)
    cluster.finish("Generate")
    job = cluster.jobs["kimi-ft-generate-g1"]
    job["_message"] = json.dumps({"stage": "Generate", "outcome": "Succeeded",
                                  "outputs": {"data": {"path": "/work/data/regenerated.jsonl", "sizeBytes": 4096}}})
    cluster.apply(cluster.decide())
    assert cluster.body["status"]["artifacts"] == [
        {"stage": "Generate", "path": "/work/data/regenerated.jsonl", "sizeBytes": 4096}]
    cluster.finish("Extract", message=json.dumps({"stage": "Extract", "outcome": "Succeeded", "outputs": {
        "hidden_states": {"path": "/work/hidden_states", "sizeBytes": 1_370_000}}}))
    cluster.apply(cluster.decide())
    # the extraction's final size, even when it ended between two progress reads
    assert cluster.body["status"]["hiddenStates"]["bytesWritten"] == 1_370_000
    assert [a["stage"] for a in cluster.body["status"]["artifacts"]] == ["Generate", "Extract"]


def test_generate_waits_for_its_engine_and_fails_with_the_reason_when_the_engine_never_becomes_ready():
    cluster = Cluster(training(promote=None))
    cluster.engine_starts_ready = False
    cluster.apply(cluster.decide())
    plan = cluster.decide()
    cluster.apply(plan)
    assert not [m for _, m in creates(plan) if m["kind"] == "Job"]
    assert cluster.body["status"]["progress"] == {"summary": "waiting for the target's engine to be Ready"}
    cluster.engine[("Deployment", "kimi-ft-gen-g1")]["status"] = {"conditions": [
        {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
         "message": "ReplicaSet has timed out progressing."}]}
    cluster.apply(cluster.decide())
    assert cluster.body["status"]["stage"] == "Failed"
    assert "kimi-ft-gen-g1 did not become Ready: ReplicaSet has timed out" in cluster.condition("Generated")["message"]
    cluster.apply(cluster.decide())
    assert cluster.engine == {}  # a failed run frees the GPUs


def serving_loading_export(digest: str) -> dict:
    """An SGLang serving whose drafter, and its one good revision, is the training's output path with `digest`."""
    serving = sglang_serving()
    drafter = {**serving["spec"]["drafter"], "model": "/models/drafters/kimi-k25-eagle3-ft", "contentDigest": digest}
    serving["spec"]["drafter"] = drafter
    serving["status"]["revisions"] = [{"name": "old", "good": True, "drafterSpec": dict(drafter)}]
    return serving


def promoted_into(serving: dict) -> Cluster:
    """The training run through export and a good benchmark, then one decide of its Promote stage."""
    cluster = Cluster(training(), serving)
    through_export(cluster)
    finish_benchmark(cluster, tokensPerSecond=41.0)
    cluster.apply(cluster.decide())
    return cluster


def test_a_new_export_at_the_path_the_serving_loads_is_promoted_and_the_old_revision_never_counts():
    """Retrained into the same output.path: the serving's drafter already names that path (the previous
    export), so only the content digest tells the new drafter from the old one."""
    cluster = promoted_into(serving_loading_export("sha256:" + "01" * 32))
    old = cluster.serving["status"]["revisions"][0]["drafterSpec"]
    # the old export at the same path is active and good: not the promotion's success
    assert cluster.body["status"]["stage"] == "Promote"
    (_, patch), = cluster.patches
    assert patch["spec"]["drafter"]["model"] == old["model"] and patch["spec"]["drafter"]["contentDigest"] == DIGEST
    for _ in range(2):  # the serving has not started the new revision yet: waiting, patching nothing more
        cluster.apply(cluster.decide())
        assert cluster.body["status"]["stage"] == "Promote" and len(cluster.patches) == 1
    cluster.serving["status"]["revisions"].append({"name": "new", "drafterSpec": dict(cluster.serving["spec"]["drafter"])})
    cluster.apply(cluster.decide())
    assert cluster.body["status"]["stage"] == "Promote"  # started, not yet active
    cluster.serving["status"]["revisions"][-1]["good"] = True
    cluster.serving["status"]["activeRevision"] = "new"
    cluster.apply(cluster.decide())
    assert cluster.body["status"]["stage"] == "Succeeded" and cluster.body["status"]["promotedRevision"] == "new"


def test_a_serving_that_already_loads_this_very_export_is_not_patched():
    """Same model and same digest: the serving already runs it (a restarted operator, a repeated reconcile)."""
    cluster = promoted_into(serving_loading_export(DIGEST))
    assert cluster.patches == [] and cluster.body["status"]["stage"] == "Succeeded"


def test_a_training_created_again_under_its_name_never_takes_the_earlier_ones_jobs_claim_or_spec():
    """The simulation's seeds 59 and 2: the earlier training's Complete Extract Job was recorded as this one's,
    and this one's Extract mounted the earlier one's claim while the garbage collector deleted it."""
    earlier = [{"apiVersion": "drafter.dev/v1alpha1", "kind": "DrafterTraining", "name": "kimi-ft", "uid": "t-0"}]
    cluster = Cluster(training(promote=None, data={**training()["spec"]["data"], "generation": None}))
    cluster.jobs["kimi-ft-extract-g1"] = {"metadata": {"name": "kimi-ft-extract-g1", "ownerReferences": earlier,
                                                       "labels": {"drafter.dev/training-stage": "Extract"}},
                                          "status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    cluster.claim = {"metadata": {"name": "kimi-ft-hidden-states", "ownerReferences": earlier,
                                  "deletionTimestamp": "2026-11-29T12:00:00Z"}}
    waiting = cluster.decide()
    assert creates(waiting) == [] and not [p for p in waiting.deletes if "persistentvolumeclaims" in p]
    assert "kimi-ft-extract-g1" in waiting.status["progress"]["summary"]
    cluster.apply(waiting)
    assert not any(c["type"] == "Extracted" and c["status"] == "True" for c in cluster.body["status"]["conditions"])
    cluster.claim = None  # collected; the earlier Job is too, but its spec ConfigMap is not yet
    cluster.jobs.clear()
    still = decide(TrainingState(training=copy.deepcopy(cluster.body), jobs=(), job_pods=(), claim=None,
                                 config_maps=frozenset(), earlier=("kimi-ft-spec-g1",), now=T0, image="trainer:1"))
    assert creates(still) == []
    started = cluster.decide()
    assert [m["kind"] for _, m in creates(started)] == ["PersistentVolumeClaim", "ConfigMap", "Job"]
    assert creates(started)[2][1]["metadata"]["name"] == "kimi-ft-extract-g1"


def test_a_spec_change_starts_the_new_generation_only_once_the_old_stage_pod_has_stopped():
    """The simulation: the old generation's Extract pod (its Job deleted) wrote on to the claim while the new
    generation's Extract started on it."""
    cluster = Cluster(training(promote=None, data={**training()["spec"]["data"], "generation": None}))
    start(cluster)
    cluster.body["metadata"]["generation"] = 2
    cluster.body["spec"]["train"]["epochs"] = 3
    terminating = {"metadata": {"name": "kimi-ft-extract-g1-abcde", "deletionTimestamp": "2026-11-29T12:00:00Z",
                                "labels": {"job-name": "kimi-ft-extract-g1"}}, "status": {"phase": "Running"}}
    state = TrainingState(training=copy.deepcopy(cluster.body), jobs=(), job_pods=(terminating,), claim=cluster.claim,
                          config_maps=frozenset(cluster.config_maps), now=T0, image="trainer:1")
    waiting = decide(state)
    assert creates(waiting) == [] and "kimi-ft-extract-g1-abcde" in waiting.status["progress"]["summary"]
    gone = decide(dataclasses.replace(state, job_pods=({**terminating, "status": {"phase": "Failed"}},)))
    assert [m["metadata"]["name"] for _, m in creates(gone) if m["kind"] == "Job"] == ["kimi-ft-extract-g2"]


def across_two_nodes(**spec) -> Cluster:
    """A speculators training across two nodes (no promote, from scratch), its first stage Job started."""
    body = training(promote=None, framework="speculators", baseDrafter=None, **spec)
    body["spec"]["resources"]["nodes"] = 2
    cluster = Cluster(body)
    start(cluster)
    return cluster


def test_a_data_parallel_extract_counts_its_finished_shares():
    cluster = across_two_nodes()
    cluster.finish("Generate")
    cluster.apply(cluster.decide())
    extract = cluster.jobs["kimi-ft-extract-g1"]
    assert extract["spec"]["completionMode"] == "Indexed" and extract["spec"]["completions"] == 2
    assert cluster.body["status"]["hiddenStates"]["shards"] == 2
    assert cluster.body["status"]["hiddenStates"]["shardsDone"] == 0
    extract["status"] = {"succeeded": 1}  # one share done, the other still running
    cluster.apply(cluster.decide())
    assert cluster.body["status"]["stage"] == "Extract" and cluster.body["status"]["hiddenStates"]["shardsDone"] == 1
    cluster.finish("Extract")
    cluster.apply(cluster.decide())
    assert cluster.body["status"]["stage"] == "Train" and cluster.body["status"]["hiddenStates"]["shardsDone"] == 2
    cluster.jobs.pop("kimi-ft-extract-g1")  # the record outlives the Job
    cluster.apply(cluster.decide())
    assert cluster.body["status"]["hiddenStates"]["shardsDone"] == 2


def test_train_across_nodes_starts_its_rendezvous_service_and_every_stage_knows_where_the_pods_meet():
    cluster = across_two_nodes()
    cluster.finish("Generate")
    extract = cluster.decide()
    assert [m["kind"] for _, m in creates(extract)] == ["Job"]  # Extract's shares need no rendezvous
    cluster.apply(extract)
    cluster.finish("Extract")
    plan = cluster.decide()
    cluster.apply(plan)
    starts = [m for _, m in creates(plan)]
    assert [m["kind"] for m in starts] == ["Service", "Job"]
    service, train = starts
    assert service["metadata"]["name"] == "kimi-ft-rendezvous" and service["spec"]["clusterIP"] == "None"
    pod = train["spec"]["template"]
    assert pod["spec"]["subdomain"] == "kimi-ft-rendezvous"
    assert all(pod["metadata"]["labels"][k] == v for k, v in service["spec"]["selector"].items())
    assert train["spec"]["completionMode"] == "Indexed" and train["spec"]["backoffLimit"] == 0
    for job in cluster.jobs.values():  # each renders the whole pipeline, Train included: all carry the rendezvous
        command = job["spec"]["template"]["spec"]["containers"][0]["command"]
        assert command[command.index("--rendezvous-endpoint") + 1] == \
            "kimi-ft-train-g1-0.kimi-ft-rendezvous:29400"
        assert command[command.index("--rendezvous-id") + 1] == "kimi-ft-train-g1"


def test_a_claim_that_cannot_be_shared_across_nodes_fails_the_run_and_leaves_no_pending_job_or_claim():
    hidden_states = training()["spec"]["hiddenStates"]
    cluster = across_two_nodes(hiddenStates={**hidden_states, "storage": {**hidden_states["storage"],
                                                                         "storageClassName": "gp3"}})
    assert cluster.claim["spec"]["accessModes"] == ["ReadWriteMany"]
    # The PV controller names the class's provisioner on the Pending claim: EBS volumes attach to one node.
    cluster.claim = {**cluster.claim, "metadata": {**cluster.claim["metadata"], "annotations": {
        "volume.kubernetes.io/storage-provisioner": "ebs.csi.aws.com"}}, "status": {"phase": "Pending"}}
    pending = next(iter(cluster.jobs))
    plan = cluster.decide()
    cluster.apply(plan)
    assert cluster.body["status"]["stage"] == "Failed"
    ready = cluster.condition("Ready")
    assert ready["reason"] == "StorageNotShared" and "ebs.csi.aws.com" in ready["message"]
    assert "storageClassName" in ready["message"] and "ReadWriteMany" in ready["message"]
    assert f"/apis/batch/v1/namespaces/team/jobs/{pending}" in plan.deletes and cluster.claim is None
    again = cluster.decide()  # the failure stands, and nothing more is deleted or created
    assert creates(again) == [] and cluster.body["status"]["stage"] == "Failed"


def test_a_shareable_or_bound_claim_and_a_single_node_run_are_never_refused():
    from drafter_operator.resources.storage_sharing import sharing_problem

    claim = {"metadata": {"name": "hs", "annotations": {"volume.kubernetes.io/storage-provisioner": "efs.csi.aws.com"}},
             "spec": {"accessModes": ["ReadWriteMany"]}, "status": {"phase": "Pending"}}
    assert sharing_problem(2, claim, owned=True) is None  # EFS is a shared filesystem
    ebs = {**claim, "metadata": {**claim["metadata"], "annotations": {
        "volume.kubernetes.io/storage-provisioner": "ebs.csi.aws.com"}}}
    assert sharing_problem(1, ebs, owned=True) is None
    assert sharing_problem(2, {**ebs, "status": {"phase": "Bound"}}, owned=True) is None  # it bound after all
    assert "ebs.csi.aws.com" in sharing_problem(2, ebs, owned=True)
    mine = {"metadata": {"name": "mine"}, "spec": {"accessModes": ["ReadWriteOnce"]}, "status": {"phase": "Bound"}}
    assert "claimName 'mine' is ReadWriteOnce" in sharing_problem(2, mine, owned=False)


def test_each_finished_share_reports_its_bytes_against_its_estimate_and_the_record_outlives_the_pods():
    cluster = across_two_nodes()
    cluster.finish("Generate")
    cluster.apply(cluster.decide())
    share = {"index": 1, "count": 2, "samples": [5000, 10000], "bytesWritten": 420, "estimatedBytes": 400}
    pods = [{"metadata": {"name": "kimi-ft-extract-g1-1-x", "labels": {"job-name": "kimi-ft-extract-g1"}},
             "status": {"containerStatuses": [{"state": {"terminated": {"message": json.dumps(
                 {"stage": "Extract", "outcome": "Succeeded", "shard": share})}}}]}}]
    original = cluster.pods
    cluster.pods = lambda: original() + pods
    cluster.apply(cluster.decide())
    assert cluster.body["status"]["hiddenStates"]["shardSizes"] == [{"index": 1, "bytesWritten": 420, "estimatedBytes": 400}]
    cluster.pods = original  # the pod went: status keeps what it said
    cluster.apply(cluster.decide())
    assert cluster.body["status"]["hiddenStates"]["shardSizes"] == [{"index": 1, "bytesWritten": 420, "estimatedBytes": 400}]


def test_a_refusal_keeps_its_reason_and_fix_on_every_later_reconcile():
    cluster = across_two_nodes()
    cluster.claim = {**cluster.claim, "metadata": {**cluster.claim["metadata"], "annotations": {
        "volume.kubernetes.io/storage-provisioner": "pd.csi.storage.gke.io"}}, "status": {"phase": "Pending"}}
    cluster.apply(cluster.decide())
    first = dict(cluster.condition("Ready"))
    for _ in range(2):  # the claim and Job are gone; the failure is now read back from its condition
        cluster.apply(cluster.decide())
    again = cluster.condition("Ready")
    assert again["reason"] == first["reason"] == "StorageNotShared" and again["message"] == first["message"]


def captured_training(**gate) -> dict:
    """The example training fed from a serving's capture, with promote.gate extended by ``gate``."""
    body = training()
    body["spec"]["data"] = {**body["spec"]["data"], "capture": {"claimName": "kimi-capture", "heldOutFraction": "0.2"}}
    body["spec"]["data"].pop("dataset")
    body["spec"]["promote"]["gate"].update(gate)
    return body


def category_rows(**lengths: float) -> list[dict]:
    return [{"category": c, "prompts": 4, "acceptanceLength": length, "tokensPerSecond": 20 * length}
            for c, length in lengths.items()]


def test_a_capture_fed_training_measures_both_drafters_on_the_held_out_prompts_by_category():
    cluster = Cluster(captured_training(), sglang_serving())
    through_export(cluster)
    cluster.apply(cluster.decide())
    (benchmark,) = cluster.benchmarks.values()
    # Evaluate sends the prompts the training held out, read by the benchmark from the capture itself (the
    # work claim, which held Generate's copy, is gone by now), pinned to what was captured before it started.
    assert cluster.claim is None
    assert benchmark["spec"]["prompts"] == {"capture": {"claimName": "kimi-capture", "heldOutFraction": "0.2",
                                                        "capturedBefore": "2026-12-01T12:00:00Z"}}
    assert benchmark["spec"]["acceptanceByCategory"] is True
    finish_benchmark(cluster, tokensPerSecond=41.0, acceptanceByCategory=category_rows(code=3.1, nonEnglish=1.2))
    cluster.apply(cluster.decide())
    assert cluster.body["status"]["evaluation"]["byCategory"] == [
        {"category": "code", "prompts": 4, "currentAcceptanceLength": 3.1, "currentTokensPerSecond": 62.0},
        {"category": "nonEnglish", "prompts": 4, "currentAcceptanceLength": 1.2, "currentTokensPerSecond": 24.0}]
    # The gate measures the new drafter on the very same set: Evaluate's prompt settings, copied.
    (_, patch), = cluster.patches
    gate = json.loads(patch["metadata"]["annotations"]["drafter.dev/promotion"])["gate"]
    assert gate["prompts"] == benchmark["spec"]["prompts"] and gate["acceptanceByCategory"] is True
    revisions = cluster.serving["status"]["revisions"]
    revisions.append({"name": "new", "good": True, "drafterSpec": dict(cluster.serving["spec"]["drafter"])})
    cluster.serving["status"]["activeRevision"] = "new"
    other = {"metadata": {"name": "kimi-k25-sglang-eagle3-gate-old", "labels": {"drafter.dev/revision": "old"}},
             "status": {"state": "Succeeded", "result": {"acceptanceByCategory": category_rows(code=9.0)}}}
    new = {"metadata": {"name": "kimi-k25-sglang-eagle3-gate-new", "labels": {"drafter.dev/revision": "new"}},
           "status": {"state": "Succeeded", "result": {"acceptanceByCategory": category_rows(code=3.0, nonEnglish=2.9,
                                                                                            math=2.0)}}}
    cluster.gate_benchmarks = [other, new]
    cluster.apply(cluster.decide())
    status = cluster.body["status"]
    assert status["stage"] == "Succeeded"
    # Side by side, in the vocabulary's order; the gate of another revision never counts.
    assert [(r["category"], r.get("currentAcceptanceLength"), r.get("newAcceptanceLength"))
            for r in status["evaluation"]["byCategory"]] == [
        ("code", 3.1, 3.0), ("math", None, 2.0), ("nonEnglish", 1.2, 2.9)]
    assert ("acceptance length by category, current -> new: code 3.10 -> 3.00, math ? -> 2.00, "
            "nonEnglish 1.20 -> 2.90") in cluster.condition("Ready")["message"]


def test_the_gates_own_prompts_win_and_acceptance_by_category_can_be_turned_off():
    prompts = {"configMap": {"name": "eval-prompts", "key": "prompts.json"}}
    cluster = Cluster(captured_training(prompts=prompts, acceptanceByCategory=False), sglang_serving())
    through_export(cluster)
    cluster.apply(cluster.decide())
    (benchmark,) = cluster.benchmarks.values()
    assert benchmark["spec"]["prompts"] == prompts and benchmark["spec"]["acceptanceByCategory"] is False
    finish_benchmark(cluster, tokensPerSecond=41.0)
    cluster.apply(cluster.decide())
    (_, patch), = cluster.patches
    gate = json.loads(patch["metadata"]["annotations"]["drafter.dev/promotion"])["gate"]
    assert gate["prompts"] == prompts and gate["acceptanceByCategory"] is False
    assert "byCategory" not in cluster.body["status"]["evaluation"]


def test_a_training_on_a_dataset_or_with_nothing_held_out_keeps_the_built_in_prompts():
    for body in (training(), captured_training()):
        if body["spec"]["data"].get("capture"):
            body["spec"]["data"]["capture"]["heldOutFraction"] = "0"
        cluster = Cluster(body, sglang_serving())
        through_export(cluster)
        cluster.apply(cluster.decide())
        (benchmark,) = cluster.benchmarks.values()
        assert "prompts" not in benchmark["spec"] and "acceptanceByCategory" not in benchmark["spec"]
