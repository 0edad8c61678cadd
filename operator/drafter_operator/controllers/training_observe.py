"""What a DrafterTraining reconcile reads from the cluster, as pure functions: its stage Jobs and what
their pods said (the stage runner's termination message, training/stage_runner.py), the children an
earlier training of the same name left, the stages already recorded in status, and the running stage's
progress (training/progress.py). training_decide.py turns these observations into a plan.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from drafter_operator.controllers import conditions
from drafter_operator.controllers.training_stages import JOB_STAGES, STAGE_CONDITIONS, StageJob
from drafter_operator.kube import object_path
from drafter_operator.resources.queueing import admission_wait
from drafter_operator.resources.training_job import stage_job_name
from drafter_operator.training.stages import stage_pods
from drafter_operator.constants import BENCHMARK_PLURAL, STAGE_LABEL
from drafter_operator.training.progress import LatestProgress, latest_status, rfc3339

if TYPE_CHECKING:
    from drafter_operator.controllers.training_decide import TrainingState


def job_finished(job: dict) -> str | None:
    """Complete or Failed once the Job has finished (its pod no longer uses the claim), else None."""
    return (conditions.job_finished(job) or {}).get("type")


def _job_of(pod: dict) -> str | None:
    return (pod["metadata"].get("labels") or {}).get("job-name")


def stage_job_state(job: dict, pods: tuple[dict, ...]) -> StageJob | None:
    """A stage Job as the stage machine sees it (None for a Job without a stage label)."""
    stage = (job["metadata"].get("labels") or {}).get(STAGE_LABEL)
    if not stage:
        return None
    finished = job_finished(job)
    if finished is None:
        return StageJob(stage, "Running")
    if finished == "Complete":
        return StageJob(stage, "Succeeded")
    name = job["metadata"]["name"]
    message = next((failure_text(p) for p in pods if _job_of(p) == name), "")
    return StageJob(stage, "Failed", message or f"Job {name} failed")


def stage_outcome(pod: dict) -> dict | None:
    """The stage runner's outcome: the JSON of its container's termination message, when it is one."""
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        raw = ((container.get("state") or {}).get("terminated") or {}).get("message") or ""
        try:
            outcome = json.loads(raw)
        except ValueError:
            continue
        if isinstance(outcome, dict):
            return outcome
    return None


def failure_text(pod: dict) -> str:
    """The stage runner's outcome (its termination message) as one sentence."""
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (container.get("state") or {}).get("terminated") or {}
        raw = terminated.get("message") or ""
        try:
            outcome = json.loads(raw)
        except ValueError:
            return raw.strip()[-1000:]
        if isinstance(outcome, dict) and outcome.get("outcome") == "Failed":
            what = " ".join(outcome.get("command") or []) or outcome.get("reason", "")
            code = f" exited with code {outcome['exitCode']}" if "exitCode" in outcome else ""
            return f"{what}{code}: {outcome.get('tail', '')}"[-1000:]
    return ""


def left_by_earlier(obj: dict, uid: str | None) -> bool:
    """Owned, but not by this training: an earlier one of the same name left it (the garbage collector's)."""
    refs = obj["metadata"].get("ownerReferences") or []
    return bool(refs) and uid is not None and not any(r.get("uid") == uid for r in refs)


def stale_children(state: TrainingState, evaluate_name: str, group_version: str) -> list[str]:
    """Older generations' stage Jobs and benchmarks other than this generation's Evaluate: deleted."""
    meta = state.training["metadata"]
    namespace, current = meta["namespace"], current_job_names(state)
    deletes = [object_path("batch/v1", "jobs", namespace, j["metadata"]["name"]) for j in state.jobs
               if j["metadata"]["name"] not in current and not j["metadata"].get("deletionTimestamp")]
    deletes += [object_path(group_version, BENCHMARK_PLURAL, namespace, b["metadata"]["name"])
                for b in state.benchmarks
                if b["metadata"]["name"] != evaluate_name and not b["metadata"].get("deletionTimestamp")]
    return deletes


def current_job_names(state: TrainingState) -> set[str]:
    """The names this generation's stage Jobs have (or will have)."""
    meta = state.training["metadata"]
    spec = state.training.get("spec") or {}
    framework, nodes = spec.get("framework") or "specforge", (spec.get("resources") or {}).get("nodes") or 1
    return {stage_job_name(meta["name"], stage, meta.get("generation") or 1, stage_pods(framework, nodes, stage))
            for stage in JOB_STAGES}


@dataclass(frozen=True)
class JobsSeen:
    """This generation's stage Jobs, what they and status say of each stage, and what must go first."""

    current_jobs: list[dict]  # this generation's Jobs, created by this training
    leftovers: list[str]  # what a new stage Job waits for to go (an earlier training's, an older pod)
    observed: dict[str, StageJob]  # stage -> its Job's state (or a failure its condition keeps)
    recorded: frozenset[str]  # stages whose success status records for this generation


def observe_jobs(state: TrainingState) -> JobsSeen:
    """Read this generation's stage Jobs, the leftovers in their way and the stages status records."""
    meta = state.training["metadata"]
    generation, uid = meta.get("generation") or 1, meta.get("uid")
    status = state.training.get("status") or {}
    current = current_job_names(state)
    # A training deleted and created again under its name finds the earlier one's children until the garbage
    # collector takes them: their Jobs are no record of this run (the simulation's seed 59 recorded Extracted
    # from one), and a stage Job would mount their claim and spec ConfigMap (seed 2): it waits for them to go.
    current_jobs = [j for j in state.jobs if j["metadata"]["name"] in current and not left_by_earlier(j, uid)]
    observed = {s.stage: s for s in (stage_job_state(j, state.job_pods) for j in current_jobs) if s is not None}
    recorded = frozenset(stage for stage, kind in STAGE_CONDITIONS.items() if any(
        c["type"] == kind and c.get("status") == "True" and c.get("observedGeneration") == generation
        for c in status.get("conditions") or []))
    # A stage that failed without a Job of its own to show it (Generate's engine never served, a serving
    # unfit for Evaluate) stays failed by its condition: nothing retries it until the spec changes.
    for stage, kind in STAGE_CONDITIONS.items():
        failed = next((c for c in status.get("conditions") or [] if c["type"] == kind and c.get("status") == "False"
                       and c.get("observedGeneration") == generation), None)
        if failed and stage not in observed:
            observed[stage] = StageJob(stage, "Failed", (failed.get("message") or "").removeprefix(f"{stage} failed: "),
                                       failed.get("reason") or "StageFailed")
    return JobsSeen(current_jobs, leftovers(state, current), observed, recorded)


def leftovers(state: TrainingState, current: set[str]) -> list[str]:
    """What a new stage Job must wait for: an earlier training's Jobs, spec ConfigMaps and claim, a claim
    being deleted, and an older generation's pods still running."""
    uid = state.training["metadata"].get("uid")
    found = sorted({j["metadata"]["name"] for j in state.jobs
                    if j["metadata"]["name"] in current and left_by_earlier(j, uid)} | set(state.earlier))
    if state.claim is not None and (left_by_earlier(state.claim, uid) or state.claim["metadata"].get("deletionTimestamp")):
        found.append(state.claim["metadata"]["name"])
    # An older generation's Job goes in the reconcile that sees it (stale_children), but it can start pods after
    # this read and before its deletion lands (Kueue admits it, its controller acts): the new generation's stage
    # waits until the Job is gone, then for any pod it made (the simulation saw a queued Train's pods appear so).
    found += sorted(j["metadata"]["name"] for j in state.jobs
                    if j["metadata"]["name"] not in current and not left_by_earlier(j, uid))
    # A spec change deletes the running stage's Job, but its pod writes on to the hidden-state claim until its
    # grace period ends: the new generation's stage waits for it (the simulation saw both run on the claim).
    found += sorted(p["metadata"]["name"] for p in state.job_pods
                    if _job_of(p) not in (None, *current)
                    and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"))
    return found


def stage_artifacts(jobs: list[dict], pods: tuple[dict, ...], recorded: list[dict] | None) -> list[dict] | None:
    """What the finished stages wrote (their runner's outputs with sizes), in stage order; what status
    already records stays (the pods that said it may be gone)."""
    found = [a for a in recorded or [] if a.get("stage") in {(j["metadata"].get("labels") or {}).get(STAGE_LABEL)
                                                              for j in jobs}]
    for job in jobs:
        stage = (job["metadata"].get("labels") or {}).get(STAGE_LABEL)
        if job_finished(job) != "Complete" or not stage:
            continue
        for pod in pods:
            if _job_of(pod) != job["metadata"]["name"]:
                continue
            outcome = stage_outcome(pod) or {}
            for output in (outcome.get("outputs") or {}).values():
                if isinstance(output, dict) and output.get("path"):
                    artifact = {"stage": stage, "path": output["path"], "sizeBytes": output.get("sizeBytes")}
                    if output.get("contentDigest"):  # Export's drafter (training/export.py): Promote reads it here
                        artifact["contentDigest"] = output["contentDigest"]
                    found = [a for a in found if (a["stage"], a["path"]) != (stage, output["path"])] + [artifact]
    order = {s: i for i, s in enumerate(JOB_STAGES)}
    return sorted(found, key=lambda a: (order.get(a["stage"], 9), a["path"])) or None


def running_progress(state: TrainingState) -> LatestProgress | None:
    """The last progress line of the running stage pod's log tail, parsed once per reconcile."""
    return latest_status(state.progress_log, state.now) if state.progress_log else None


def stage_progress(stage: str, latest: LatestProgress | None, status: dict, hidden: dict) -> dict:
    """status.progress of the running stage from its pod's last progress line (``running_progress``); the hidden
    states' bytes go into ``hidden`` during Extract. Another stage's progress is never carried over."""
    if latest is None or latest.stage != stage:
        previous = status.get("progress")
        return previous if previous and status.get("stage") == stage else {"summary": f"{stage} starting"}
    if stage == "Extract":
        if latest.bytes_written is not None:
            hidden["bytesWritten"] = latest.bytes_written
        if latest.estimated_bytes is not None:
            hidden["estimatedBytes"] = latest.estimated_bytes
    return latest.progress


#: The stages the cost estimate counts, in run order (training/cost.py).
COSTED_STAGES = ("Extract", "Train")


def run_estimate(stage: str, latest: LatestProgress | None, now: datetime, status: dict, gpus: int) -> dict | None:
    """status.estimate from the running stage's latest progress line: the run's GPU-hours, and its finish time as
    the stage's own ETA (its estimate until it reports one) plus the later costed stages' estimates on ``gpus`` GPUs.
    Without a new line (or after Train) the recorded estimate stays."""
    if latest is None or latest.stage != stage or latest.cost is None:
        return status.get("estimate")
    seconds = latest.cost["gpuSeconds"]
    later = COSTED_STAGES[COSTED_STAGES.index(stage) + 1:] if stage in COSTED_STAGES else (
        COSTED_STAGES if stage == "Generate" else ())
    remaining = sum(seconds.get(s, 0.0) for s in later) / gpus
    if stage in COSTED_STAGES:
        eta = latest.progress.get("etaSeconds")
        remaining += eta if eta is not None else seconds.get(stage, 0.0) / gpus
    total = sum(seconds.get(s, 0.0) for s in COSTED_STAGES)
    return {"gpuHours": float(f"{total / 3600:.3g}"), "basis": latest.cost["basis"],
            "finishTime": rfc3339(now + timedelta(seconds=round(remaining)))}


def queue_wait(state: TrainingState, stage: str, pods: int) -> str | None:
    """Why ``stage``'s Job of this generation still waits in its Kueue queue (None: not queued, or admitted)."""
    meta = state.training["metadata"]
    name = stage_job_name(meta["name"], stage, meta.get("generation") or 1, pods)
    job = next((j for j in state.jobs if j["metadata"]["name"] == name), None)
    return None if job is None else admission_wait(job, state.workloads)
