"""The DrafterTraining reconcile decision (pure), played against a small fake cluster."""

from __future__ import annotations

import copy
import datetime as dt
import json
from pathlib import Path

import yaml

from drafter_operator.controllers.training_decide import TrainingState, decide

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "training-kimi-k25-eagle3.yaml"
T0 = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.timezone.utc)


def training(**spec) -> dict:
    body = yaml.safe_load(EXAMPLE.read_text())
    body["spec"].update(spec)
    body["metadata"] = {"name": "kimi-ft", "namespace": "team", "generation": 1, "uid": "t-1"}
    return body


class Cluster:
    def __init__(self, body: dict):
        self.body, self.jobs, self.claim, self.config_maps, self.events = body, {}, None, set(), []
        self.deleted: list[str] = []

    def decide(self):
        return decide(TrainingState(training=copy.deepcopy(self.body), jobs=tuple(copy.deepcopy(list(self.jobs.values()))),
                                    job_pods=tuple(self.pods()), claim=self.claim, config_maps=frozenset(self.config_maps),
                                    now=T0, image="trainer:1"))

    def pods(self):
        return [{"metadata": {"labels": {"job-name": name}},
                 "status": {"containerStatuses": [{"state": {"terminated": {"message": job["_message"]}}}]}}
                for name, job in self.jobs.items() if job.get("_message")]

    def apply(self, plan):
        for path, manifest in plan.creates:
            kind = manifest["kind"]
            if kind == "Job":
                self.jobs[manifest["metadata"]["name"]] = copy.deepcopy(manifest)
            elif kind == "PersistentVolumeClaim":
                self.claim = manifest
            else:
                self.config_maps.add(manifest["metadata"]["name"])
        for path in plan.deletes:
            self.deleted.append(path)
            self.jobs.pop(path.rsplit("/", 1)[1], None)
            if "/persistentvolumeclaims/" in path:
                self.claim = None
        status = self.body.setdefault("status", {})
        for key, value in plan.status.items():
            if value is None:
                status.pop(key, None)
            else:
                status[key] = value
        self.events += plan.events

    def finish(self, stage: str, ok: bool = True, message: str = ""):
        job = next(j for j in self.jobs.values() if j["metadata"]["labels"]["drafter.dev/training-stage"] == stage)
        job["status"] = {"conditions": [{"type": "Complete" if ok else "Failed", "status": "True"}]}
        job["_message"] = message

    def condition(self, kind: str) -> dict:
        return next(c for c in self.body["status"]["conditions"] if c["type"] == kind)


def test_the_stages_run_one_job_after_the_other_and_the_claim_goes_when_done():
    cluster = Cluster(training())
    first = cluster.decide()
    kinds = [m["kind"] for _, m in first.creates]
    assert kinds == ["PersistentVolumeClaim", "ConfigMap", "Job"]
    assert first.creates[2][1]["metadata"]["name"] == "kimi-ft-generate-g1" and first.status["stage"] == "Generate"
    cluster.apply(first)
    assert cluster.decide().creates == []  # running: nothing new
    for stage in ("Generate", "Extract", "Train", "Export"):
        cluster.finish(stage)
        plan = cluster.decide()
        cluster.apply(plan)
    assert cluster.body["status"]["stage"] == "Succeeded" and cluster.condition("Exported")["status"] == "True"
    assert [e[1] for e in cluster.events].count("StageStarted") == 4
    # every Job finished (they stay as the record): the claim goes
    assert cluster.claim is None and cluster.body["status"]["hiddenStates"]["deleted"] is True


def test_the_claim_stays_while_any_job_of_the_training_is_unfinished():
    cluster = Cluster(training())
    cluster.apply(cluster.decide())
    for stage in ("Generate", "Extract", "Train"):
        cluster.finish(stage)
        cluster.apply(cluster.decide())
    # an older generation's Job still running (being deleted, its pod still writing)
    cluster.jobs["kimi-ft-extract-g0"] = {"metadata": {"name": "kimi-ft-extract-g0", "deletionTimestamp": "x",
                                                       "labels": {"drafter.dev/training-stage": "Extract"}}}
    cluster.finish("Export")
    cluster.apply(cluster.decide())
    assert cluster.body["status"]["stage"] == "Succeeded" and cluster.claim is not None
    cluster.jobs.pop("kimi-ft-extract-g0")
    cluster.apply(cluster.decide())
    assert cluster.claim is None


def test_a_failed_stage_stops_the_run_with_its_error_and_a_spec_change_starts_again():
    cluster = Cluster(training())
    cluster.apply(cluster.decide())
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
    assert plan.creates == [] and ("Warning", "StageFailed") in [(e[0], e[1]) for e in plan.events]
    assert cluster.decide().creates == []  # not retried by itself
    cluster.body["metadata"]["generation"] = 2
    cluster.body["spec"]["train"]["epochs"] = 3
    again = cluster.decide()
    assert [m["metadata"]["name"] for _, m in again.creates if m["kind"] == "Job"] == ["kimi-ft-generate-g2"]
    assert sorted(p.rsplit("/", 1)[1] for p in again.deletes) == ["kimi-ft-extract-g1", "kimi-ft-generate-g1"]


def test_a_restarted_operator_resumes_and_never_repeats_a_finished_stage_even_without_its_job():
    cluster = Cluster(training())
    cluster.apply(cluster.decide())
    cluster.finish("Generate")
    cluster.apply(cluster.decide())  # Extract starts; Generated recorded
    cluster.jobs.pop("kimi-ft-generate-g1")  # a TTL controller removed the finished Job
    plan = cluster.decide()
    assert plan.creates == [] and cluster.body["status"]["stage"] == "Extract"
    assert cluster.condition("Generated")["status"] == "True"


def test_a_claim_named_in_the_spec_is_used_and_never_deleted():
    cluster = Cluster(training(hiddenStates={"layers": [2, 30, 58], "storage": {"claimName": "scratch"}}))
    first = cluster.decide()
    assert [m["kind"] for _, m in first.creates] == ["ConfigMap", "Job"]
    cluster.apply(first)
    for stage in ("Generate", "Extract", "Train", "Export"):
        cluster.finish(stage)
        cluster.apply(cluster.decide())
    cluster.jobs.clear()
    assert not [p for p in cluster.decide().deletes if "persistentvolumeclaims" in p]
