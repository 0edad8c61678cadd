"""The DrafterServing decision's state types: what one decision reads (`ServingState`) and what it does
(`ServingPlan`). decide.py builds the plan; apply.py builds the state and writes the plan."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping

from drafter_operator.acceptance import prometheus_source as prom
from drafter_operator.controllers.benchmark.apply import operator_image
from drafter_operator.controllers.conditions import Event
from drafter_operator.controllers.serving.observe import Observed
from drafter_operator.controllers.serving.patches import Write
from drafter_operator.resources.pod_policy import TenantPolicy

if TYPE_CHECKING:
    from drafter_operator.acceptance.measurement import Measurement


@dataclass(frozen=True)
class ServingState:
    """Everything one decision reads."""

    serving: dict  # the DrafterServing body: metadata, spec, and status as last written
    observed: Observed
    now: dt.datetime
    default_images: Mapping[str, str]
    drain: dt.timedelta  # how long an old revision keeps running after traffic left it
    acceptance: Measurement | None = None  # the latest look at the active revision's acceptance
    # The image of the engine pods' drafter preflight init container: the operator's own, which carries
    # the CLI (DRAFTER_OPERATOR_IMAGE, read where the state is built, not in decide).
    operator_image: str = field(default_factory=operator_image)
    # What the administrator allows tenants (chart values tenancy.* and prometheus.endpoints), read from the
    # operator's environment where the state is built.
    tenant_policy: TenantPolicy = field(default_factory=TenantPolicy.from_env)
    prometheus_endpoints: Mapping[str, str] = field(default_factory=prom.endpoints_from_env)




@dataclass
class ServingPlan:
    # A revision verdict (good or failed) recorded before any child is touched, so a restart never
    # retries a failed revision; {} when there is none.
    record_first: dict = field(default_factory=dict)
    writes: list[Write] = field(default_factory=list)  # Deployments, then the Service
    status: dict = field(default_factory=dict)  # only the fields that changed
    deletes: list[str] = field(default_factory=list)  # object paths
    events: list[Event] = field(default_factory=list)
    swapped: str | None = None  # the swap strategy, when traffic moved in this step
    rolled_back: bool = False
    engine: str | None = None  # for the swap and rollback counters
    # The next moment the clock alone changes the answer (a startup timeout, a drain ending); None: only
    # a change of the serving or its children does.
    recheck_at: dt.datetime | None = None
    # The decision waits on something it saw (pods to stop, a revision to start, a gate, a drain): a view that
    # is wrong about it (a ghost) would keep it waiting, so the reconciler checks that view now and then.
    waiting: bool = False
    # Nodes whose nvidia.com/gpu.product a known-bad row keyed by GPU waits for (the desired revision's pods run
    # there): the reconciler reads their labels and decides again.
    read_nodes: tuple[str, ...] = ()

    def writes_anything(self) -> bool:
        return bool(self.record_first or self.writes or self.status or self.deletes or self.events)
