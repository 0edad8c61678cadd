"""What one DrafterServing decision reads (`ServingState`); what it does is a `Plan` (controllers/plan.py).
decide.py builds the plan from it; apply.py builds the state and writes the plan."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping

from drafter_operator.acceptance import prometheus_source as prom
from drafter_operator.controllers.benchmark.apply import operator_image
from drafter_operator.controllers.serving.observe import Observed
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
