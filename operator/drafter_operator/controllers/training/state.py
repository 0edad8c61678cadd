"""What one DrafterTraining decision reads (`TrainingState`); what it does is a `Plan` (controllers/plan.py).
decide.py and its steps (observe.py, promotion.py, refusal.py, status.py) read the state and fill the plan;
apply.py builds the state and writes the plan."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from drafter_operator.resources.pod_policy import TenantPolicy

@dataclass(frozen=True)
class TrainingState:
    training: dict
    jobs: tuple[dict, ...]  # Jobs labelled with this training
    job_pods: tuple[dict, ...]  # their pods
    claim: dict | None  # the hidden-state claim, when it exists
    config_maps: frozenset[str]  # names of this training's spec ConfigMaps that exist
    now: dt.datetime
    image: str  # the trainer image when spec.image is unset
    render_args: tuple[str, ...] = ()  # extra run-stage options (--cpu on the local cluster)
    serving: dict | None = None  # spec.promote.servingRef, when set and found
    benchmarks: tuple[dict, ...] = ()  # DrafterBenchmarks labelled with this training (Evaluate)
    gate_benchmarks: tuple[dict, ...] = ()  # the gate DrafterBenchmarks of spec.promote.servingRef's revisions
    progress_log: str | None = None  # the log tail of the running stage pod
    engine: tuple[dict, ...] = ()  # the Deployments and Services of Generate's engine (any generation)
    servings: tuple[dict, ...] = ()  # every DrafterServing of the namespace (what they load: output.py)
    earlier: tuple[str, ...] = ()  # spec ConfigMaps left by an earlier training of this name (not yet collected)
    tenant_policy: TenantPolicy = field(default_factory=TenantPolicy.from_env)  # images and ServiceAccounts allowed
    workloads: tuple[dict, ...] = ()  # Kueue's Workloads of the namespace, when spec.queueName is set
    #: The objects found under this generation's spec ConfigMap name and (across nodes) the rendezvous Service
    #: name, read by name whatever their labels (children.py: only its own are used).
    named: tuple[dict, ...] = ()
