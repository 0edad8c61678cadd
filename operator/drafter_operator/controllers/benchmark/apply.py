"""Reconcile one DrafterBenchmark: observe (the benchmark, its serving(s), its Jobs), decide
(decide.py, pure), apply the plan. Idempotent: the Job name carries the spec generation,
so a repeated reconcile or a restarted operator never starts a second run of the same spec.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import logging
from dataclasses import dataclass, field
from typing import Callable, ClassVar

from drafter_operator import settings
from drafter_operator.constants import (
    API_GROUP_VERSION,
    BENCHMARK_LABEL,
    BENCHMARK_PLURAL,
    COMPARISON_LABEL,
    SERVING_LABEL,
    SERVING_PLURAL,
)
from drafter_operator.controllers.benchmark.comparison import candidate_run_name
from drafter_operator.controllers.workloads import queue_workloads
from drafter_operator.controllers.benchmark.decide import decide
from drafter_operator.controllers.benchmark.state import BenchmarkState, ObservedServing
from drafter_operator.controllers.benchmark.observe import MAX_LOG_BYTES, controlled_by, parse_detail, result_pod
from drafter_operator.controllers.apply_plan import Rules, apply_plan
from drafter_operator.controllers.plan import Plan
from drafter_operator.controllers.one_at_a_time import EventSink, ObjectLocks, OneAtATime
from drafter_operator.kube import ApiError, Kube, object_path
from drafter_operator.monitoring import operator_metrics as metrics
from drafter_operator.resources.benchmark_job import CONTAINER, job_name

log = logging.getLogger("drafter.benchmark")



def operator_image() -> str:
    """The image the benchmark Job runs: the operator's own (it carries `drafter-operator bench`)."""
    return settings.OPERATOR_IMAGE.read()


@dataclass
class BenchmarkReconciler(OneAtATime):
    kube: Kube
    image: str = field(default_factory=operator_image)
    clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.timezone.utc)
    locks: ObjectLocks = field(default_factory=ObjectLocks)
    kind: ClassVar[str] = "DrafterBenchmark"
    decide = staticmethod(decide)  # the pure decision of this kind (the mixin calls it)
    body_field: ClassVar[str] = "benchmark"  # where the state holds the resource's body

    def _target(self, namespace: str, serving: str | None) -> ObservedServing | None:
        if not serving:
            return None
        body = self.kube.get(object_path(API_GROUP_VERSION, SERVING_PLURAL, namespace, serving))
        if body is None:
            return ObservedServing(serving=None)
        service = self.kube.get(object_path("v1", "services", namespace, serving))
        pods = self.kube.list(object_path("v1", "pods", namespace), label_selector=f"{SERVING_LABEL}={serving}")
        return ObservedServing(serving=body, service=service, pods=tuple(pods))

    def observe(self, namespace: str, name: str) -> BenchmarkState | None:
        body = self.kube.get(object_path(API_GROUP_VERSION, BENCHMARK_PLURAL, namespace, name))
        if body is None or body["metadata"].get("deletionTimestamp"):
            metrics.forget_benchmark(namespace, name)  # a deleted run's failure must not page anyone
            return None
        spec = body.get("spec") or {}
        selector = f"{BENCHMARK_LABEL}={name}"
        jobs = self.kube.list(object_path("batch/v1", "jobs", namespace), label_selector=selector)
        current = job_name(name, body["metadata"].get("generation") or 1)
        if (body.get("status") or {}).get("jobName") == current and not any(j["metadata"]["name"] == current for j in jobs):
            # Created (status.jobName says so) but not listed: a Job of that name without the label, made by
            # someone else, turned the create into a silent 409. decide sees it and says whose it is not.
            squatter = self.kube.get(object_path("batch/v1", "jobs", namespace, current))
            jobs += [squatter] if squatter is not None else []
        state = BenchmarkState(
            benchmark=body,
            target=self._target(namespace, (spec.get("servingRef") or {}).get("name")),
            baseline=self._target(namespace, ((spec.get("baseline") or {}).get("servingRef") or {}).get("name")),
            jobs=tuple(jobs),
            job_pods=tuple(self.kube.list(object_path("v1", "pods", namespace), label_selector=selector)),
            now=self.clock(), image=self.image,
            baseline_benchmark=self._baseline_benchmark(namespace, spec),
            workloads=queue_workloads(self.kube, namespace, body),
            **self._candidates(namespace, body, spec))
        if (body.get("status") or {}).get("resultConfigMap"):
            return state
        detail = self._detail(namespace, result_pod(state))
        if isinstance(detail, str):
            return dataclasses.replace(state, detail_problem=detail)
        return dataclasses.replace(state, detail=detail)

    def _candidates(self, namespace: str, body: dict, spec: dict) -> dict:
        """spec.candidates: the runs labelled as this comparison's and, until one of its own exists, each
        candidate's DrafterServing (decide checks them only before the first run: not a GET per candidate on
        every tick of a comparison that runs for an hour)."""
        candidates = spec.get("candidates") or []
        if not candidates:
            return {}
        meta = body["metadata"]
        runs = tuple(self.kube.list(object_path(API_GROUP_VERSION, BENCHMARK_PLURAL, namespace),
                                    label_selector=f"{COMPARISON_LABEL}={meta['name']}"))
        first = candidate_run_name(meta["name"], meta.get("generation") or 1, 0)
        if any(run["metadata"]["name"] == first and controlled_by(run, meta.get("uid")) for run in runs):
            return {"candidate_runs": runs}
        servings = tuple(self.kube.get(object_path(API_GROUP_VERSION, SERVING_PLURAL, namespace, c.get("name", "")))
                         for c in candidates)
        return {"candidate_servings": servings, "candidate_runs": runs}

    def _baseline_benchmark(self, namespace: str, spec: dict) -> dict | None:
        name = (((spec.get("baseline") or {}).get("benchmarkRef")) or {}).get("name")
        return self.kube.get(object_path(API_GROUP_VERSION, BENCHMARK_PLURAL, namespace, name)) if name else None

    def _detail(self, namespace: str, pod: dict | None) -> dict | str | None:
        """The full result the own Job's succeeded bench container printed on stdout (its log), or why it is
        none (parse_detail); None when there is no such pod or the log could not be read (tried again)."""
        if pod is None:
            return None
        try:
            # One byte over the bound: parse_detail tells a log that fits from one the apiserver cut short.
            text = self.kube.read_text(object_path("v1", "pods", namespace, pod["metadata"]["name"], "log"),
                                       query={"container": CONTAINER, "limitBytes": str(MAX_LOG_BYTES + 1)})
        except ApiError as exc:
            log.warning("%s: no full result from the bench log: %s", pod["metadata"]["name"], exc)
            return None
        return parse_detail(text)

    def apply(self, body: dict, plan: Plan, post_event: EventSink) -> None:
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        # What it creates is its own (the Job, a candidate's run, the result): deleted with it, read only by it.
        apply_plan(self.kube, RULES, body, plan, functools.partial(post_event, body), self.clock)
        serving = ((body["metadata"].get("labels") or {}).get(SERVING_LABEL)
                   or ((body.get("spec") or {}).get("servingRef") or {}).get("name") or "")
        metrics.set_benchmark_state(namespace, name, serving, {**(body.get("status") or {}), **plan.status})


def status_path(namespace: str, name: str) -> str:
    return object_path(API_GROUP_VERSION, BENCHMARK_PLURAL, namespace, name, "status")


#: A benchmark reads no holder of a name its create found taken: its observe reads a same-named Job and the
#: decision says whose it is not (decide.foreign_job), and its result and candidates' runs are named for it.
RULES = Rules(kind="DrafterBenchmark", plural=BENCHMARK_PLURAL, status_path=status_path, log=log)
