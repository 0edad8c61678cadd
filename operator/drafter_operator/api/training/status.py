"""DrafterTrainingStatus: the stage, its progress, the artifacts, the evaluation and the hidden-state volume."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from drafter_operator.api.common import CONDITIONS_SCHEMA_EXTRA, Condition, StatusModel
from drafter_operator.traffic_categories import TrafficCategory


class TrainingProgress(StatusModel):
    """How far the current stage is."""

    samples_done: int | None = None
    """Samples generated or extracted so far."""
    samples_total: int | None = None
    """Samples to generate or extract."""
    epoch: int | None = None
    """Current training epoch (1-based)."""
    epochs: int | None = None
    """Training epochs in total."""
    step: int | None = None
    """Optimizer steps done in training."""
    steps: int | None = None
    """Optimizer steps in the whole training, when the framework says."""
    loss: float | None = None
    """The latest training loss the framework reported."""
    eta_seconds: int | None = None
    """Estimated seconds until the current stage ends, from its rate so far."""
    percent: float | None = None
    """Overall progress of the current stage, 0-100."""
    updated: str | None = None
    """When the stage last reported progress (RFC 3339)."""
    resumed_from_step: int | None = None
    """Train started again (after a disruption, Kueue's preemption or a spec change that kept its inputs) from its last checkpoint, written at this optimizer step."""
    summary: str | None = None
    """Short text for kubectl get, e.g. "6200/10000 samples" or "epoch 3/5"."""


class Artifact(StatusModel):
    """Something a stage produced."""

    stage: str
    """The stage that produced it."""
    path: str
    """Where it is."""
    size_bytes: int | None = None
    """Its size."""
    content_digest: str | None = None
    """Export's drafter: "sha256:<hex>" over its files' relative paths and bytes (also in drafter-digest.json inside it), so a new export at the same path is told from the old one."""


class CategoryComparison(StatusModel):
    """One traffic category as both drafters served it, on the same prompts: the serving's current drafter (the
    Evaluate benchmark) and the new one (the gate benchmark of its revision)."""

    category: TrafficCategory
    """The traffic category."""
    prompts: int | None = None
    """Prompts of the measured set in this category (with a capture: held-out captured prompts)."""
    current_acceptance_length: float | None = None
    """The current drafter's mean acceptance length on them."""
    new_acceptance_length: float | None = None
    """The new drafter's mean acceptance length on them (once its gate measured it)."""
    current_speedup: float | None = None
    """The current drafter's speedup on them, with a baseline."""
    new_speedup: float | None = None
    """The new drafter's speedup on them, with a baseline."""
    current_tokens_per_second: float | None = None
    """The current drafter's single-stream throughput on them."""
    new_tokens_per_second: float | None = None
    """The new drafter's single-stream throughput on them."""


class EvaluationResult(StatusModel):
    """The new drafter's benchmark."""

    benchmark: str | None = None
    """Name of the DrafterBenchmark."""
    tokens_per_second: float | None = None
    """Throughput with the new drafter."""
    speedup: float | None = None
    """Speedup against the baseline."""
    acceptance_rate: float | None = None
    """Accepted / drafted tokens."""
    acceptance_length: float | None = None
    """Mean acceptance length."""
    current_tokens_per_second: float | None = None
    """Throughput of the serving's current drafter under the same settings (the Evaluate benchmark)."""
    baseline_tokens_per_second: float | None = None
    """No-speculation throughput the speedups are measured against, when the promote gate has a baseline."""
    current_speedup: float | None = None
    """The current drafter's speedup against that baseline."""
    revision: str | None = None
    """The serving revision the new drafter's figures come from (its gate benchmark)."""
    by_category: list[CategoryComparison] | None = None
    """Both drafters by traffic category, when their benchmarks measured by category (a training on a serving's capture does, on the captured prompts it held out)."""


class ShardSize(StatusModel):
    """What one finished share of a data-parallel Extract wrote, against its part of the estimate."""

    index: int
    """The share (the Indexed Job's completion index)."""
    bytes_written: int | None = None
    """Bytes of its hidden-state files."""
    estimated_bytes: int | None = None
    """Its samples' part of hiddenStates.estimatedBytes."""


class HiddenStatesStatus(StatusModel):
    """The hidden-state volume: how much the extraction wrote against what it will need."""

    claim_name: str | None = None
    """The PersistentVolumeClaim holding them."""
    bytes_written: int | None = None
    """Bytes the extraction has written so far."""
    estimated_bytes: int | None = None
    """What the whole extraction will write: samples x tokens x (layers + 1) x hidden size x 2 bytes."""
    deleted: bool | None = None
    """The operator deleted its claim after the training succeeded (storage.retain unset)."""
    shards: int | None = None
    """Shares of a data-parallel Extract (spec.resources.nodes above 1): one per pod of its Indexed Job."""
    shards_done: int | None = None
    """Shares that finished (each records shards/shard-<i>-of-<n>-<training uid>-g<generation>.json beside the hidden states and is never captured again in that run)."""
    shard_sizes: Annotated[list[ShardSize], Field(max_length=64)] | None = None
    """Per finished share, the bytes it wrote against its part of the estimate (a share far above it is a sign of longer samples than the spec's numbers)."""


class TrainingEstimate(StatusModel):
    """What the run costs and when it ends, before and while it runs (the stage runner's estimate from rates
    measured on an H200; the running stage's own rate once it reports one)."""

    gpu_hours: float | None = None
    """GPU-hours of Extract and Train together, at most (every sample at train.maxLength)."""
    finish_time: str | None = None
    """When Extract and Train are estimated to end (RFC 3339): the running stage's ETA from its own rate once it reports one, else its estimate, plus the later stages' estimates at spec.resources.gpus."""
    basis: str | None = None
    """What the estimate counted: tokens, rates per GPU, epochs."""


class StageDisruption(StatusModel):
    """A stage Job whose pod was disrupted (node drained, pod evicted or preempted)."""

    stage: str
    """The stage disrupted."""
    generation: int
    """The spec generation it ran for."""
    job_name: str
    """The disrupted attempt's Job."""
    message: str | None = None
    """What happened, from the pod's DisruptionTarget condition or the Job's failure."""
    time: str | None = None
    """When the operator saw it (RFC 3339)."""


class CompletedStage(StatusModel):
    """A stage that succeeded, and the digest of the spec fields it read: a later generation with the same
    digest (a corrected image, a new queue) carries it over rather than run it again."""

    stage: str
    """The stage."""
    generation: int
    """The spec generation whose Job did it."""
    inputs: str
    """sha256 of the spec fields the stage and those before it read (training/inputs.py)."""


class DrafterTrainingStatus(StatusModel):
    """Observed state of a DrafterTraining."""

    observed_generation: int | None = None
    """The metadata.generation the status reflects."""
    conditions: Annotated[list[Condition], Field(json_schema_extra=CONDITIONS_SCHEMA_EXTRA)] | None = None
    """One per stage (Generated, Extracted, Trained, Exported, Evaluated, Promoted), plus Ready."""
    stage: Literal["Pending", "Generate", "Extract", "Train", "Export", "Evaluate", "Promote", "Succeeded", "Failed"] | None = None
    """The stage running now (or the final outcome)."""
    job_name: str | None = None
    """The Job of the current stage."""
    progress: TrainingProgress | None = None
    """Progress of the current stage."""
    artifacts: list[Artifact] | None = None
    """What the stages produced."""
    evaluation: EvaluationResult | None = None
    """The new drafter's benchmark."""
    hidden_states: HiddenStatesStatus | None = None
    """The hidden-state volume: claim, bytes written, estimate."""
    estimate: TrainingEstimate | None = None
    """Estimated GPU-hours and finish time of the run's Extract and Train."""
    promoted: bool | None = None
    """Whether the drafter was swapped into promote.servingRef."""
    disruptions: Annotated[list[StageDisruption], Field(max_length=64)] | None = None
    """Stage attempts disrupted in the current run, oldest first; each started the stage again (up to spec.limits.disruptionRetries per stage)."""
    completed_stages: Annotated[list[CompletedStage], Field(max_length=8)] | None = None
    """The stages done and what they read: kept while the spec is refused, so a corrected spec resumes after them."""
    promoted_revision: str | None = None
    """The revision of promote.servingRef that serves this training's drafter (also in that serving's annotation drafter.dev/promoted-by)."""
