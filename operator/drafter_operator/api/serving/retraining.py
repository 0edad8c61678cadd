"""spec.retraining: the serving starts DrafterTrainings from a template of its own, when its drafter drifts, every
interval or at the times of a cron schedule, or when a person asks (the drafter.dev/retrain annotation), one at a time, with a cooldown between
automatic starts and, if asked, a minimum of newly captured prompts, and keeps a bounded history of them (as a
CronJob keeps its Jobs).

Each training is the template with two things set by the serving: its output, a directory of its own beside the
template's (``<output.path>-r<N>``: Export never overwrites what serves), and its promotion into this serving
through the template's gate (controllers/retraining/decide.py renders it).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, field_validator

from drafter_operator import schedules
from drafter_operator.api.benchmark_gate import BenchmarkGate
from drafter_operator.api.common import ApiModel, Duration, duration_range_rule, needs_rule, not_both_rule
from drafter_operator.api.training.spec import DrafterTrainingSpec

#: The least time between two automatic starts when spec.retraining.cooldown is unset.
DEFAULT_COOLDOWN = "24h"
#: Bounds of the cooldown and the interval: a training of a 1T target takes hours; a year is no longer a policy.
MIN_COOLDOWN, MAX_PERIOD = "1m", "8760h"
#: The finished trainings kept when spec.retraining.historyLimit is unset.
DEFAULT_HISTORY_LIMIT = 3


class RetrainingTemplate(ApiModel):
    """The DrafterTraining a retraining starts: its spec, less what the serving sets (output path and promotion).

    The CRD keeps the template's spec without a schema of its own (x-kubernetes-preserve-unknown-fields): the whole
    DrafterTraining schema embedded here would double the DrafterServing CRD, past the 256 KiB that `kubectl apply`
    keeps in its last-applied annotation. The model checks it as a DrafterTraining spec, so the operator refuses a
    bad template (InvalidSpec, naming spec.retraining.template.spec's field), and every training it creates is held
    to the DrafterTraining CRD by the apiserver."""

    spec: Annotated[dict[str, Any], Field(json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})]
    """The training's spec, as a DrafterTraining's (checked by the operator, not by the CRD). Its output.path is the prefix of each run's (<path>-r<N>); it has no promote: each run is promoted into this serving through spec.retraining.gate."""

    @field_validator("spec")
    @classmethod
    def _a_training_spec(cls, value: dict[str, Any]) -> dict[str, Any]:
        spec = DrafterTrainingSpec.model_validate(value)
        if spec.promote is not None:
            raise ValueError("spec.retraining.template.spec.promote: a retraining always promotes into this serving; "
                             "remove promote and set spec.retraining.gate for the benchmark it must pass")
        return value

    def training_spec(self) -> DrafterTrainingSpec:
        return DrafterTrainingSpec.model_validate(self.spec)


class RetrainingSpec(ApiModel):
    """When and how the serving retrains its drafter."""

    rules = (
        duration_range_rule(
            "cooldown", MIN_COOLDOWN, MAX_PERIOD,
            f'spec.retraining.cooldown must be between {MIN_COOLDOWN} and {MAX_PERIOD}, e.g. "{DEFAULT_COOLDOWN}"',
        ),
        duration_range_rule(
            "interval", MIN_COOLDOWN, MAX_PERIOD,
            f'spec.retraining.interval must be between {MIN_COOLDOWN} and {MAX_PERIOD}, e.g. "168h" (weekly)',
        ),
        not_both_rule("interval", "schedule", "spec.retraining: set interval (this long after the last start) or "
                      "schedule (at the times a cron schedule names), not both", field_path=".schedule"),
        needs_rule("timeZone", "schedule", "spec.retraining.timeZone is the zone of spec.retraining.schedule: set a "
                   "schedule, or remove it", field_path=".timeZone"),
    )

    template: RetrainingTemplate
    """The training each retraining runs (see RetrainingTemplate)."""
    on_drift: bool = True
    """Start one when the DriftDetected condition turns True (the live acceptance fell below what the drafter's gate measured at its promotion)."""
    interval: Duration | None = None
    """Start one this long after the last start, e.g. "168h"; unset: no schedule."""
    schedule: Annotated[str, Field(pattern=schedules.PATTERN, max_length=128)] | None = None
    """Start one at the times this cron schedule names, as a CronJob's schedule: five fields (minute, hour, day of month, month, day of week) or @hourly, @daily, @weekly, @monthly, @yearly, e.g. "0 3 * * 0" (Sundays at 03:00). A time missed (the operator down, a training running, the cooldown) starts one once, as soon as it may. Not with interval."""
    time_zone: Annotated[str, Field(pattern=r"^[A-Za-z0-9_+\-]+(/[A-Za-z0-9_+\-]+)*$", max_length=64)] | None = None
    """The IANA time zone the schedule is read in, e.g. "Europe/Paris"; unset: UTC."""
    cooldown: Duration = DEFAULT_COOLDOWN
    """The least time after a start before drift or the interval starts another; a request by annotation does not wait for it."""
    min_new_samples: Annotated[int, Field(ge=1, le=1_000_000_000)] | None = None
    """Drift and the interval start one only once the capture holds at least this many prompts captured since the last start (or since the serving was created), as its capture sidecar counts them; needs spec.capture. A request by annotation does not wait for them. Unset: no minimum."""
    gate: BenchmarkGate | None = None
    """The benchmark the new drafter must pass on this serving, besides beating the drafter serving now, before it is swapped in (the training's promote.gate)."""
    history_limit: Annotated[int, Field(ge=1, le=20)] = DEFAULT_HISTORY_LIMIT
    """The finished trainings kept; older ones are deleted (their exported drafters stay on the volume)."""

    @field_validator("schedule")
    @classmethod
    def _a_cron_schedule(cls, value: str | None) -> str | None:
        if value is not None:
            schedules.fields_of(value)  # ValueError naming what is wrong, reported on spec.retraining.schedule
        return value

    @field_validator("time_zone")
    @classmethod
    def _an_iana_zone(cls, value: str | None) -> str | None:
        if value is not None:
            schedules.zone(value)
        return value
