"""The DrafterTraining stage machine, as a pure function: which stage runs, which starts next, and when
the run has finished or failed, from the stages the spec asks for and the Jobs the cluster holds.

Generate -> Extract -> Train -> Export -> Evaluate -> Promote, each one Job, each started only when the
one before it succeeded. The Jobs, the per-stage conditions and status.completedStages are the record: a restarted
operator reads the stage from them and never repeats a finished one, even once a finished stage's Job is gone (a
Job's name carries the spec generation, so a retry after a spec change is a new set of Jobs; a stage a newer
generation reads the same way is carried over, training/inputs.py). A failed stage stops the run with that
stage's own error, except a disrupted one (its pod drained, evicted or preempted): that stage starts again as its
next attempt while attempts remain (spec.limits.disruptionRetries), never a stage before it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

Stage = Literal["Generate", "Extract", "Train", "Export", "Evaluate", "Promote"]
STAGES: tuple[Stage, ...] = ("Generate", "Extract", "Train", "Export", "Evaluate", "Promote")
#: The stages that run as Jobs (Evaluate and Promote are a benchmark and a serving patch).
JOB_STAGES: tuple[Stage, ...] = ("Generate", "Extract", "Train", "Export")
#: The condition each stage sets when it succeeded (status.conditions: one per stage).
STAGE_CONDITIONS: dict[Stage, str] = {"Generate": "Generated", "Extract": "Extracted", "Train": "Trained",
                                      "Export": "Exported", "Evaluate": "Evaluated", "Promote": "Promoted"}

JobState = Literal["Running", "Succeeded", "Failed"]


@dataclass(frozen=True)
class StageJob:
    """A stage's Job as observed: its state and, once it failed, why (the container's termination message)."""

    stage: Stage
    state: JobState
    message: str = ""
    #: Why it failed, as its condition's reason (a refusal such as StorageNotShared keeps its own on every
    #: later reconcile); a Job's own failure is StageFailed.
    reason: str = "StageFailed"
    #: Which attempt of the stage the Job is (0, then 1, 2, ... after disruptions: stage_job_name's -r<n>).
    attempt: int = 0
    #: Failed because a pod of it was disrupted (drained, evicted, preempted): what happened. A disrupted
    #: stage starts again while attempts remain.
    disrupted: str | None = None


@dataclass(frozen=True)
class StageDecision:
    stage: str  # status.stage: the stage running or to start, or Succeeded / Failed
    start: Stage | None = None  # the stage whose Job to create now
    done: tuple[Stage, ...] = ()  # stages that succeeded, in order
    failed: StageJob | None = None  # the stage that stopped the run
    attempt: int = 0  # the attempt of ``stage`` that runs, or of ``start`` to create
    retried: StageJob | None = None  # the disrupted attempt ``start`` follows


def stages_for(generate: bool, evaluate: bool, promote: bool) -> tuple[Stage, ...]:
    """The stages a spec asks for: Generate only with data.generation, Evaluate/Promote only with promote."""
    wanted = {"Generate": generate, "Extract": True, "Train": True, "Export": True, "Evaluate": evaluate,
              "Promote": promote}
    return tuple(stage for stage in STAGES if wanted[stage])


def plan_stages(stages: Sequence[Stage], jobs: Mapping[Stage, StageJob],
                recorded: frozenset[Stage] = frozenset(), disruption_retries: int = 0) -> StageDecision:
    """The next step of the run (pure). ``jobs``: this generation's stage Jobs by stage (each stage's latest
    attempt); ``recorded``: stages whose success status already holds for this generation (their Jobs may be
    gone); ``disruption_retries``: how many more attempts a disrupted stage gets."""
    done: list[Stage] = []
    for stage in stages:
        job = jobs.get(stage)
        if job is None and stage in recorded:
            done.append(stage)
            continue
        if job is None:
            return StageDecision(stage=stage, start=stage, done=tuple(done))
        if job.state == "Failed" and job.disrupted is not None and job.attempt < disruption_retries:
            return StageDecision(stage=stage, start=stage, done=tuple(done), attempt=job.attempt + 1, retried=job)
        if job.state == "Failed":
            return StageDecision(stage="Failed", done=tuple(done), failed=job)
        if job.state == "Running":
            return StageDecision(stage=stage, done=tuple(done), attempt=job.attempt)
        done.append(stage)
    return StageDecision(stage="Succeeded", done=tuple(done))
