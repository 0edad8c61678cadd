"""DrafterServingStatus: revisions, acceptance, the schedule and thresholds in force, what serves now."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from drafter_operator.api.common import CONDITIONS_SCHEMA_EXTRA, Condition, StatusModel
from drafter_operator.api.serving.drafter import DrafterSpec


class RevisionStatus(StatusModel):
    """One immutable configuration (engine + target + drafter) the serving has run."""

    name: str
    """Revision name: a hash of the engine, target and drafter configuration."""
    drafter: str | None = None
    """The drafter of this revision, e.g. "eagle3:/models/drafters/kimi-eagle3" or "none"."""
    engine: str | None = None
    """The engine of this revision."""
    since: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    """When this revision was created."""
    good: bool | None = None
    """Whether this revision became Ready and was not Degraded: a Rollback target."""
    degraded: bool | None = None
    """This revision went Degraded: it is never chosen again automatically (no rollback ping-pong)."""
    failed_reason: str | None = None
    """Why the revision failed, when not the startup timeout (e.g. the gate's figures)."""
    image: str | None = None
    """The engine image this revision runs."""
    drafter_spec: DrafterSpec | None = None
    """The drafter exactly as this revision runs it: what a Rollback to this revision restores."""


class ReplicaAcceptanceStatus(StatusModel):
    """One replica's acceptance over the window (listed when the replicas differ)."""

    pod: str
    """The engine pod."""
    rate: float | None = None
    """Accepted / drafted tokens of this replica."""
    mean_length: float | None = None
    """Tokens per verification step of this replica."""
    draft_tokens: int | None = None
    """Tokens this replica drafted in the window."""


class AtPromotionStatus(StatusModel):
    """What the swap gate (a DrafterBenchmark) measured for the revision that serves, before it took traffic."""

    revision: str | None = None
    """The revision the gate measured (the serving one, or the static-k revision its learned schedule was swept on)."""
    benchmark: str | None = None
    """The gate DrafterBenchmark."""
    acceptance_rate: float | None = None
    """Accepted / drafted tokens over the gate's run."""
    acceptance_length: float | None = None
    """Mean acceptance length over the gate's run: tokens per verification step, bonus token included (the unit of meanLength); what spec.acceptance.driftTolerance is a fraction of."""
    measured_at: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    """When the gate's run finished."""


class AcceptanceStatus(StatusModel):
    """Acceptance over the last complete window, and what the gate measured at promotion."""

    rate: float | None = None
    """Accepted / drafted tokens."""
    mean_length: float | None = None
    """Mean acceptance length: tokens per verification step, bonus token included."""
    draft_tokens: int | None = None
    """Tokens drafted in the window (SGLang: verify calls x draft steps, an estimate)."""
    drafts: int | None = None
    """Verification steps in the window."""
    window_seconds: int | None = None
    """Length of the window the figures cover."""
    window_end: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    """End of the window."""
    source: Literal["engine", "prometheus"] | None = None
    """Where the figures came from: the engine pods' /metrics or a Prometheus query."""
    replicas: list[ReplicaAcceptanceStatus] | None = None
    """Per-replica figures, when the replicas' rates differ by more than a percentage point."""
    revision: str | None = None
    """The revision the figures were measured on."""
    at_promotion: AtPromotionStatus | None = None
    """What the swap gate measured for the serving revision before it took traffic, beside the live window: DriftDetected compares the two. Unset when no gate measured an acceptance length for it (a first revision, a swap without spec.swap.gate, an onDegraded action's revision); it follows the serving revision."""


class DegradedActionStatus(StatusModel):
    """What onDegraded did about a Degraded revision; in force while the spec asks for that same revision."""

    action: Literal["Rollback", "DisableSpeculation"]
    """Rollback (serving an earlier drafter) or DisableSpeculation (serving the target with method none)."""
    degraded_revision: str
    """The revision that went Degraded."""
    revision: str
    """The revision served instead."""
    spec_revision: str
    """The revision the spec asked for when the action was taken. A spec change to any other revision ends the action."""
    drafter_spec: DrafterSpec
    """The drafter served instead."""
    image: str
    """The engine image served instead."""
    message: str
    """Why, with the figures that made the revision Degraded."""
    since: str = Field(json_schema_extra={"format": "date-time"})
    """When the action was taken."""


class LastBenchmarkStatus(StatusModel):
    """The latest DrafterBenchmark of this serving."""

    name: str | None = None
    """Name of the DrafterBenchmark."""
    tokens_per_second: float | None = None
    """Single-stream decode throughput it measured."""
    speedup: float | None = None
    """Speedup against its baseline."""
    acceptance_length: float | None = None
    """Mean acceptance length it measured (tokens per verification step, bonus token included)."""
    num_speculative_tokens: int | None = None
    """Draft tokens per verification step (k) of the revision it measured."""
    mean_draft_tokens: float | None = None
    """Tokens actually drafted per verification step over its run (below k where a family drafts fewer: suffix, n-gram, a DSpark block cut short); what minAcceptanceRate auto learns from for those families."""
    revision: str | None = None
    """The revision it measured (the gate benchmark of the active revision)."""


class ServingDisplayStatus(StatusModel):
    """The figures of kubectl get's columns as a person reads them (a printer column cannot format a number);
    written with the numbers they show."""

    speedup: str | None = None
    """lastBenchmark.speedup, e.g. "1.68x"."""
    acceptance: str | None = None
    """acceptance.rate as a percentage, e.g. "15.0%"."""


class ScheduleRangeStatus(StatusModel):
    """One inclusive batch-size range of a speculation schedule and the tokens drafted in it."""

    start: int
    """First batch size of the range."""
    end: int
    """Last batch size of the range (the last range ends at 65536: vLLM clamps it to --max-num-seqs)."""
    num_speculative_tokens: int
    """Tokens drafted per step at these batch sizes: from 0 (no speculation) up to the spec's k."""
    predicted_speedup: float | None = None
    """With basis kPerBand: the speedup over no speculation the sweep predicts at the range's first batch size."""


class SpeculationScheduleStatus(StatusModel):
    """spec.drafter.dynamic: the draft length per batch size the engine runs, and where it came from."""

    source: str | None = None
    """"benchmark <name>" (the schedule comes from that benchmark's load sweep: a gate's or one run by hand) or "static" (no sweep yet: the static k)."""
    revision: str | None = None
    """The revision the sweep measured (the static-k revision of the current spec)."""
    scheduled_revision: str | None = None
    """The revision that runs the schedule (a new engine process, so a new name); its auto thresholds learn from the sweep's revision too."""
    crossover_concurrency: int | None = None
    """The first measured concurrency whose speedup is below 1.0; unset when speculation paid at every level."""
    above_concurrency: int | None = None
    """The highest measured concurrency under crossoverConcurrency (speedup 1.0 or more): the break-even lies between the two."""
    break_even_concurrency: float | None = None
    """Streams where the speedup crosses 1.0, interpolated between aboveConcurrency and crossoverConcurrency; with basis onOff, speculation is off from the first batch size at or above it."""
    basis: Literal["kPerBand", "onOff"] | None = None
    """How the ranges were chosen: kPerBand (every k from 0 to the spec's predicted at each load from the sweep's step costs and acceptance, the best chosen per band) or onOff (the sweep had no acceptance to predict from: the spec's k below the break-even, none from it)."""
    refined_with: str | None = None
    """With basis kPerBand: the benchmark that swept the revision running the predicted schedule, when its levels were more than 5% off the prediction and the bands were fitted again with them (a refined schedule is not refined again)."""
    predicted_revision: str | None = None
    """The revision that ran the predicted schedule refinedWith swept."""
    ranges: Annotated[list[ScheduleRangeStatus], Field(max_length=17)] | None = None
    """The schedule rendered into --speculative-config (num_speculative_tokens_per_batch_size); unset with source static."""
    message: str | None = None
    """Why this schedule (e.g. why the static k is served)."""


class AcceptanceThresholdStatus(StatusModel):
    """The acceptance thresholds in force; with "auto", the break-even threshold learned from status.lastBenchmark."""

    source: str | None = None
    """"spec" (numbers from spec.acceptance) or "benchmark <name>" (a threshold is auto, learned from that benchmark)."""
    min_acceptance_rate: float | None = None
    """The acceptance-rate threshold applied; for auto, (minAcceptanceLength - 1) / k."""
    min_acceptance_length: float | None = None
    """The mean-acceptance-length threshold applied; for auto, breakEvenLength x (1 + margin)."""
    draft_cost: float | None = None
    """auto: cost of one draft token in target steps the benchmark implies, (length / speedup - 1) / k (at least 0)."""
    break_even_length: float | None = None
    """auto: the mean acceptance length at which speculation is as fast as none, 1 + k x draftCost."""
    margin: float | None = None
    """auto: how far above break-even the threshold sits (relative; 0.05 is 5%)."""
    revision: str | None = None
    """auto: the revision the benchmark measured (a threshold is learned only from the active revision's)."""


class GatingStatus(StatusModel):
    """A gated revision waiting for its gate's verdict (spec.swap.gateTimeout counts from since)."""

    revision: str | None = None
    """The revision being gated."""
    since: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    """When its gating began."""
    source: str | None = None
    """Whose gate it is: "spec.swap.gate", or "the gate of drafter.dev/promotion by <training> (generation <n>)" for the one-shot gate of a DrafterTraining's Promote."""


class PromotionStatus(StatusModel):
    """The drafter.dev/promotion annotation acted on: a one-shot BlueGreen swap with its own gate, for one revision."""

    request: str | None = None
    """A short hash of the annotation's value: a new value is a new promotion."""
    by: str | None = None
    """Who asked, e.g. "train-kimi (generation 2)"."""
    revision: str | None = None
    """The revision it applies to (without a learned schedule; the scheduled revision of the same drafter too). Every other swap follows spec.swap."""


class RetrainingRunStatus(StatusModel):
    """One DrafterTraining spec.retraining started."""

    name: str | None = None
    """The DrafterTraining, e.g. "kimi-r3"."""
    trigger: str | None = None
    """What started it: Requested (the drafter.dev/retrain annotation), DriftDetected, Interval or Schedule."""
    started_at: str | None = None
    """When the serving created it (RFC 3339)."""
    stage: str | None = None
    """Its stage as it last reported it, e.g. "Train", "Succeeded" or "Failed"; "Deleted" once gone while unfinished."""


class RetrainingStatus(StatusModel):
    """What spec.retraining started, and what it waits for."""

    runs: int | None = None
    """Trainings started so far (the next is r<runs+1>)."""
    last_start: str | None = None
    """When the last one was started (RFC 3339): the cooldown and the interval count from it."""
    request: str | None = None
    """The last value of the drafter.dev/retrain annotation acted on."""
    waiting: str | None = None
    """Why a trigger has not started a training yet (one is running, the cooldown), e.g. "DriftDetected: cooldown until 2026-12-07T03:00:00Z"."""
    history: Annotated[list[RetrainingRunStatus], Field(max_length=21)] | None = None
    """The trainings it started that still exist, newest first (spec.retraining.historyLimit finished ones, and the one running)."""


class ServingNowStatus(StatusModel):
    """What receives traffic now: the active revision as it runs (after an onDegraded action, not the spec's drafter)."""

    revision: str | None = None
    """The revision the Service selects."""
    engine: str | None = None
    """Its engine."""
    drafter: str | None = None
    """Its drafter, e.g. "eagle3:/models/drafters/kimi-eagle3 k=5", or "none" (no speculation)."""
    method: str | None = None
    """Its drafter method (the DRAFTER column), "none" without speculation."""
    num_speculative_tokens: int | None = None
    """Tokens it drafts per step (k), when it speculates."""
    image: str | None = None
    """Its engine image."""


class EndpointStatus(StatusModel):
    """Where clients reach the serving."""

    host: str | None = None
    """Service DNS name."""
    port: int | None = None
    """Service port."""
    url: str | None = None
    """OpenAI-compatible base URL, e.g. http://kimi.default.svc:8000/v1."""


class DrafterServingStatus(StatusModel):
    """Observed state of a DrafterServing."""

    observed_generation: int | None = None
    """The metadata.generation the status reflects."""
    conditions: Annotated[list[Condition], Field(json_schema_extra=CONDITIONS_SCHEMA_EXTRA)] | None = None
    """Ready, Progressing, Degraded, DrafterCompatible, DriftDetected (the live acceptance length against status.acceptance.atPromotion), LengthCovered (spec.target.maxModelLen against the length a DrafterTraining trained the drafter at), ScheduleIgnored (for a revision that runs a batch-size schedule: True when a replica drafts more tokens per step than the schedule allows at the batch sizes its metrics showed)."""
    active_revision: str | None = None
    """Revision the Service points at."""
    previous_revision: str | None = None
    """Revision that served before the active one."""
    revisions: Annotated[list[RevisionStatus], Field(max_length=10)] | None = None
    """Revisions known to the serving, newest last."""
    acceptance: AcceptanceStatus | None = None
    """Acceptance over the last window, and at promotion."""
    speculation_disabled: str | None = None
    """Set while onDegraded DisableSpeculation serves without speculation: why. A spec change to another revision (the drafter, target, engine or image) re-enables speculation."""
    degraded_action: DegradedActionStatus | None = None
    """The Rollback or DisableSpeculation in force, if any."""
    last_benchmark: LastBenchmarkStatus | None = None
    """The newest finished DrafterBenchmark of the active revision (its gate or one run by hand): where auto thresholds learn."""
    display: ServingDisplayStatus | None = None
    """The SPEEDUP and ACCEPTANCE columns as text: lastBenchmark.speedup and acceptance.rate, formatted."""
    speculation_schedule: SpeculationScheduleStatus | None = None
    """With spec.drafter.dynamic: the draft length per batch size in force, and its source."""
    acceptance_threshold: AcceptanceThresholdStatus | None = None
    """The acceptance thresholds in force (with "auto": learned from lastBenchmark, and how)."""
    gating: GatingStatus | None = None
    """While a Ready new revision is benchmarked by its gate: which, and since when."""
    retry_request: str | None = None
    """The last value of the drafter.dev/retry annotation acted on: a new value starts a failed revision again."""
    retraining: RetrainingStatus | None = None
    """With spec.retraining: the trainings it started and what a trigger waits for."""
    promotion: PromotionStatus | None = None
    """The DrafterTraining promotion (drafter.dev/promotion annotation) in force, and the revision it applies to."""
    serving: ServingNowStatus | None = None
    """What receives traffic now (the active revision): the printer columns describe it, not the spec."""
    endpoint: EndpointStatus | None = None
    """Where clients reach the serving."""
