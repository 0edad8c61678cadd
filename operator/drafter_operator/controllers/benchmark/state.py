"""The DrafterBenchmark decision's state types: what one decision reads (`BenchmarkState`, with each
DrafterServing it names as `ObservedServing`); what it does is a `Plan` (controllers/plan.py). decide.py and
its steps (observe.py, outcome.py, comparison.py) read the state and fill the plan; apply.py builds the state
and writes the plan."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from drafter_operator.resources.pod_policy import TenantPolicy

@dataclass(frozen=True)
class ObservedServing:
    """A DrafterServing as the benchmark needs it: its object, Service and pods."""

    serving: dict | None
    service: dict | None = None
    pods: tuple[dict, ...] = ()


@dataclass(frozen=True)
class BenchmarkState:
    benchmark: dict
    target: ObservedServing | None  # spec.servingRef (None with spec.endpoint)
    baseline: ObservedServing | None  # spec.baseline.servingRef
    jobs: tuple[dict, ...]  # Jobs labelled with this benchmark, and the current generation's Job by name
    job_pods: tuple[dict, ...]  # pods labelled with this benchmark (only the Job's own are read: own_pods)
    now: dt.datetime
    image: str  # the operator's image, which the Job runs
    detail: dict | None = None  # the full result the bench container printed (its log), once it succeeded
    detail_problem: str | None = None  # why that log is no full result (parse_detail), when it is not
    # spec.baseline.benchmarkRef: the DrafterBenchmark named (None when absent); unset without a benchmarkRef
    baseline_benchmark: dict | None = None
    tenant_policy: TenantPolicy = field(default_factory=TenantPolicy.from_env)  # ServiceAccounts allowed
    # spec.candidates: each candidate's DrafterServing (None when not found; observed only until a run of its own
    # exists), and the DrafterBenchmarks labelled as this comparison's candidate runs (only those it controls
    # are read or deleted)
    candidate_servings: tuple[dict | None, ...] = ()
    candidate_runs: tuple[dict, ...] = ()
    workloads: tuple[dict, ...] = ()  # Kueue's Workloads of the namespace, when spec.queueName is set
