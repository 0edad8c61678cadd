"""The DrafterBenchmark decision's inputs (pure): a benchmark, the serving it measures, its Job and pod, the state."""
from __future__ import annotations

import copy
import datetime as dt
from pathlib import Path

import yaml
from hypothesis import HealthCheck, settings

from drafter_operator.controllers.benchmark.state import BenchmarkState, ObservedServing

REPO = Path(__file__).resolve().parents[2]
SERVING = yaml.safe_load((REPO / "examples" / "serving-vllm-kimi-k25-eagle3.yaml").read_text())
T0 = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.timezone.utc)
IMAGE = "ghcr.io/drafter-dev/drafter-operator:0.1.0"
FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SEED_RESULT = {"totalTokens": 2560, "totalSeconds": 47.0, "tokensPerSecond": 54.4, "msPerToken": 18.4,
               "acceptanceRate": 0.15, "baselineTokensPerSecond": 82.5, "speedup": 0.66}


def benchmark(generation: int = 1, **spec) -> dict:
    return {"apiVersion": "drafter.dev/v1alpha1", "kind": "DrafterBenchmark",
            "metadata": {"name": "seed", "namespace": "team", "uid": "b-1", "generation": generation,
                         "creationTimestamp": "2026-11-30T12:00:00Z"},
            "spec": {"servingRef": {"name": "kimi"}, "numPrompts": 5, "maxTokens": 512,
                     "baseline": {"tokensPerSecond": "82.5"}, "timeout": "10m", **spec}}


def serving(ready: bool = True) -> ObservedServing:
    body = copy.deepcopy(SERVING)
    body["metadata"] = {"name": "kimi", "namespace": "team"}
    body["status"] = {"activeRevision": "r1", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    service = {"metadata": {"name": "kimi"}, "spec": {"clusterIP": "10.0.0.7", "ports": [{"port": 8000}]}}

    def pod(name: str, revision: str, ip: str, is_ready: bool = True) -> dict:
        return {"metadata": {"name": name, "labels": {"drafter.dev/revision": revision}},
                "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": str(is_ready)}]}}
    pods = (pod("a", "r1", "10.1.0.1"), pod("b", "r1", "10.1.0.2"), pod("c", "r0", "10.1.0.3"),
            pod("d", "r1", "10.1.0.4", is_ready=False))
    return ObservedServing(serving=body, service=service, pods=pods)


def state(body: dict, target: ObservedServing | None = None, jobs=(), job_pods=(), now: dt.datetime = T0) -> BenchmarkState:
    return BenchmarkState(benchmark=body, target=target, baseline=None, jobs=tuple(jobs), job_pods=tuple(job_pods),
                          now=now, image=IMAGE)


def owner(uid: str) -> list[dict]:
    return [{"apiVersion": "v1", "kind": "Owner", "name": "o", "uid": uid, "controller": True}]


def job_pod(exit_code: int | None, message: str | None = None, job_uid: str = "j-1", name: str = "seed-bench-g1-x") -> dict:
    """A pod of the Job (the Job controller's owner reference), or, with another job_uid, one that only looks like it."""
    terminated = {"exitCode": exit_code, "message": message} if exit_code is not None else None
    return {"metadata": {"name": name, "labels": {"job-name": "seed-bench-g1", "drafter.dev/benchmark": "seed"},
                         "ownerReferences": owner(job_uid)},
            "status": {"containerStatuses": [{"name": "bench", "state": {"terminated": terminated} if terminated
                                              else {"running": {}}}]}}


def job(finished: str | None = None, message: str = "", name: str = "seed-bench-g1", owner_uid: str = "b-1") -> dict:
    conds = [{"type": finished, "status": "True", "reason": "BackoffLimitExceeded" if finished == "Failed" else None,
              "message": message}] if finished else []
    return {"metadata": {"name": name, "uid": "j-1", "ownerReferences": owner(owner_uid)}, "status": {"conditions": conds}}


def condition(plan, kind: str) -> dict:
    return next(c for c in plan.status["conditions"] if c["type"] == kind)


def created_job(plan) -> dict | None:
    """The run's Job a benchmark plan creates (a plan creates one at most), None when it creates none."""
    (job, *more) = plan.created("jobs") or [None]
    assert not more, "a benchmark plan creates one Job at most"
    return job


def created_runs(plan) -> list[dict]:
    """The candidates' own DrafterBenchmarks a comparison's plan creates."""
    return plan.created("drafterbenchmarks")


def created_result(plan) -> dict | None:
    """The full result's ConfigMap a benchmark plan creates, None when it creates none."""
    (config_map, *more) = plan.created("configmaps") or [None]
    assert not more, "a benchmark plan creates one result ConfigMap at most"
    return config_map
