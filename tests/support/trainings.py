"""The DrafterTraining decision played against a small fake cluster (pure)."""
from __future__ import annotations

import copy
import datetime as dt
from pathlib import Path

import yaml

from drafter_operator.controllers.training.decide import decide
from drafter_operator.controllers.training.state import TrainingState
from drafter_operator.resources.pod_policy import TenantPolicy

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EXAMPLE = EXAMPLES / "training-kimi-k25-eagle3.yaml"
T0 = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.timezone.utc)


def training(**spec) -> dict:
    body = yaml.safe_load(EXAMPLE.read_text())
    body["spec"].update(spec)
    body["metadata"] = {"name": "kimi-ft", "namespace": "team", "generation": 1, "uid": "t-1"}
    return body


class Cluster:
    def __init__(self, body: dict, serving: dict | None = None):
        self.body, self.jobs, self.claim, self.config_maps, self.events = body, {}, None, set(), []
        self.deleted: list[str] = []
        self.serving, self.benchmarks, self.patches = serving, {}, []
        self.gate_benchmarks: list[dict] = []  # the serving's gate DrafterBenchmarks (one per revision gated)
        self.log: str | None = None
        self.engine: dict[tuple[str, str], dict] = {}  # (kind, name) -> Generate's engine objects
        self.engine_starts_ready = True
        self.workloads: tuple[dict, ...] = ()  # Kueue's, when the training names a queue
        self.policy = TenantPolicy()  # the administrator's tenancy settings (none: anything)
        self.named: list[dict] = []  # objects under the children's names that someone else made
        self.running_pods: list[dict] = []  # stage pods still running (a stopped Job's, in their grace period)

    def decide(self):
        return decide(TrainingState(training=copy.deepcopy(self.body), jobs=tuple(copy.deepcopy(list(self.jobs.values()))),
                                    job_pods=tuple(self.pods()), claim=self.claim, config_maps=frozenset(self.config_maps),
                                    now=T0, image="trainer:1", serving=copy.deepcopy(self.serving),
                                    benchmarks=tuple(copy.deepcopy(list(self.benchmarks.values()))),
                                    gate_benchmarks=tuple(copy.deepcopy(self.gate_benchmarks)),
                                    progress_log=self.log, engine=tuple(copy.deepcopy(list(self.engine.values()))),
                                    workloads=copy.deepcopy(self.workloads), tenant_policy=self.policy,
                                    named=tuple(copy.deepcopy(self.named))))

    def pods(self):
        return [{"metadata": {"name": f"{name}-pod", "labels": {"job-name": name}},
                 "status": {"phase": "Succeeded" if job["status"]["conditions"][0]["type"] == "Complete" else "Failed",
                            "containerStatuses": [{"state": {"terminated": {"message": job["_message"]}}}]}}
                for name, job in self.jobs.items() if job.get("_message")] + copy.deepcopy(self.running_pods)

    def apply(self, plan):
        for path, manifest in creates(plan):
            kind = manifest["kind"]
            # As the reconciler's apply: every child it creates is owned by the training.
            manifest = {**manifest, "metadata": {**manifest["metadata"], "ownerReferences": [
                {"apiVersion": "drafter.dev/v1alpha1", "kind": "DrafterTraining", "name": self.body["metadata"]["name"],
                 "uid": self.body["metadata"]["uid"], "controller": True}]}}
            if kind == "Job":
                self.jobs[manifest["metadata"]["name"]] = copy.deepcopy(manifest)
            elif kind == "PersistentVolumeClaim":
                self.claim = manifest
            elif kind in ("Deployment", "Service"):
                obj = copy.deepcopy(manifest)
                if kind == "Service":
                    obj["spec"]["clusterIP"] = "10.96.0.9"
                elif self.engine_starts_ready:
                    obj["status"] = {"readyReplicas": 1}
                self.engine[(kind, manifest["metadata"]["name"])] = obj
            elif kind == "DrafterBenchmark":
                self.benchmarks[manifest["metadata"]["name"]] = copy.deepcopy(manifest)
            else:
                self.config_maps.add(manifest["metadata"]["name"])
        for path in plan.deletes:
            self.deleted.append(path)
            for key in [k for k in self.engine if path.endswith(f"/{'deployments' if k[0] == 'Deployment' else 'services'}/{k[1]}")]:
                self.engine.pop(key)
            self.jobs.pop(path.rsplit("/", 1)[1], None)
            if "/persistentvolumeclaims/" in path:
                self.claim = None
        for path, patch in patches(plan):
            self.patches.append((path, patch))
            self.serving["metadata"].setdefault("annotations", {}).update(patch["metadata"]["annotations"])
            self.serving["spec"]["drafter"] = {k: v for k, v in patch["spec"]["drafter"].items() if v is not None}
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


def start(cluster: Cluster) -> None:
    """Reconcile until the first stage Job exists (Generate's engine comes first, Ready at once here)."""
    for _ in range(3):
        cluster.apply(cluster.decide())
        if cluster.jobs:
            return
    raise AssertionError("no stage Job started")


def sglang_serving() -> dict:
    body = yaml.safe_load((EXAMPLES / "serving-sglang-kimi-k25-eagle3.yaml").read_text())
    body["metadata"].update(namespace="team", generation=3, uid="s-1")
    body["status"] = {"activeRevision": "old", "revisions": [
        {"name": "old", "good": True, "drafterSpec": dict(body["spec"]["drafter"])}]}
    return body


DIGEST = "sha256:" + "ab" * 32


def creates(plan) -> list[tuple[str, dict]]:
    """A training plan's (or Generate's engine step's) creates as (collection path, manifest), in order."""
    return [(w.path, w.body) for w in plan.writes if w.verb == "create"]


def patches(plan) -> list[tuple[str, dict]]:
    """A training plan's merge patches as (object path, patch), in order."""
    return [(w.path, w.body) for w in plan.writes if w.verb == "patch"]
