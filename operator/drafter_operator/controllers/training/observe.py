"""What a DrafterTraining reconcile reads from the cluster, as pure functions: its stage Jobs (each stage's
latest attempt) and what their pods said (the stage runner's termination message, training/stage_runner.py),
which of them a disruption failed (a drained node, an eviction, a preemption) or a deadline stopped, the
children an earlier training of the same name left, the stages already recorded in status (or carried over
from an earlier generation that read the same: training/inputs.py), and the running stage's progress
(training/progress.py). decide.py turns these observations into a plan.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from drafter_operator.controllers import conditions
from drafter_operator.controllers.training.stages import JOB_STAGES, STAGE_CONDITIONS, StageJob
from drafter_operator.controllers.training.state import TrainingState
from drafter_operator.kube import object_path
from drafter_operator.resources.queueing import admission_wait
from drafter_operator.api.training.sections import STAGE_DEADLINE_DEFAULTS
from drafter_operator.resources.training_job import DEADLINE_REASON, DISRUPTION_REASON, stage_job_name
from drafter_operator.training.stages import stage_pods
from drafter_operator.constants import BENCHMARK_PLURAL, STAGE_LABEL
from drafter_operator.training.progress import LatestProgress, latest_status, rfc3339


def job_finished(job: dict) -> str | None:
    """Complete or Failed once the Job has finished (its pod no longer uses the claim), else None."""
    return (conditions.job_finished(job) or {}).get("type")


def _job_of(pod: dict) -> str | None:
    return (pod["metadata"].get("labels") or {}).get("job-name")


#: The most attempts of one stage (spec.limits.disruptionRetries is at most 10): the Job names looked for.
MAX_ATTEMPTS = 11


def pod_disruption(pod: dict) -> str | None:
    """What disrupted ``pod``, when something did: Kubernetes' DisruptionTarget condition (the Eviction API and
    so a node drain, the scheduler's preemption, the taint manager, the kubelet's node-pressure eviction, the
    pod garbage collector), or the kubelet's Evicted reason."""
    status = pod.get("status") or {}
    name = pod["metadata"]["name"]
    target = next((c for c in status.get("conditions") or []
                   if c.get("type") == "DisruptionTarget" and c.get("status") == "True"), None)
    if target is not None:
        return f"pod {name}: {target.get('reason') or 'DisruptionTarget'}" + \
            (f" ({target['message']})" if target.get("message") else "")
    if status.get("reason") == "Evicted":
        return f"pod {name} was evicted" + (f" ({status['message']})" if status.get("message") else "")
    return None


def job_disruption(job: dict, pods: tuple[dict, ...], recorded: list[dict]) -> str | None:
    """Why a failed stage Job counts as disrupted, else None: the Job controller failed it by the disruption rule
    (reason PodFailurePolicy, resources/training_job.py), a pod of it shows the disruption now, or status
    recorded one while it ran (a Train group's peers may fail first, and the disrupted pod go, before the Job
    controller counts it)."""
    name = job["metadata"]["name"]
    failed = conditions.job_finished(job) or {}
    if failed.get("reason") == DEADLINE_REASON:
        return None  # its deadline stopped it: the disruption, if any, is not why it failed
    seen = next((text for p in pods if _job_of(p) == name and (text := pod_disruption(p))), None)
    if seen:
        return seen
    entry = next((d for d in recorded if d.get("jobName") == name), None)
    if entry is not None:
        return entry.get("message") or f"a pod of Job {name} was disrupted"
    if failed.get("reason") == DISRUPTION_REASON:
        return failed.get("message") or f"a pod of Job {name} was disrupted"
    return None


def deadline_text(job: dict, stage: str, spec: dict) -> str:
    """A Job its deadline stopped, in words that name the bound and where to change it."""
    own = (((spec.get("limits") or {}).get("deadlines") or {}).get(stage.lower()))
    bound = own or STAGE_DEADLINE_DEFAULTS.get(stage, "?")
    return (f"Job {job['metadata']['name']} ran past its deadline of {bound} (spec.limits.deadlines.{stage.lower()}"
            f"{'' if own else ', the default'}) and was stopped")


def job_attempt(job: dict, training: str, stage: str, generation: int, pods: int) -> int | None:
    """Which attempt of ``stage`` the Job's name says it is (None: not one of this generation's names)."""
    name = job["metadata"]["name"]
    return next((k for k in range(MAX_ATTEMPTS) if stage_job_name(training, stage, generation, pods, k) == name), None)


def stage_job_state(job: dict, pods: tuple[dict, ...], attempt: int = 0, recorded: list[dict] | None = None,
                    spec: dict | None = None) -> StageJob | None:
    """A stage Job as the stage machine sees it (None for a Job without a stage label): a failure says whether a
    disruption caused it (``recorded``: status.disruptions) or its deadline stopped it."""
    stage = (job["metadata"].get("labels") or {}).get(STAGE_LABEL)
    if not stage:
        return None
    finished = job_finished(job)
    if finished is None:
        return StageJob(stage, "Running", attempt=attempt)
    if finished == "Complete":
        return StageJob(stage, "Succeeded", attempt=attempt)
    name = job["metadata"]["name"]
    if ((conditions.job_finished(job) or {}).get("reason")) == DEADLINE_REASON:
        return StageJob(stage, "Failed", deadline_text(job, stage, spec or {}), "DeadlineExceeded", attempt=attempt)
    disrupted = job_disruption(job, pods, recorded or [])
    if disrupted is not None:
        return StageJob(stage, "Failed", f"disrupted: {disrupted}", "Disrupted", attempt=attempt, disrupted=disrupted)
    message = next((failure_text(p) for p in pods if _job_of(p) == name), "")
    return StageJob(stage, "Failed", message or f"Job {name} failed", attempt=attempt)


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
    """The names this generation's stage Jobs have (or will have), every attempt."""
    meta = state.training["metadata"]
    spec = state.training.get("spec") or {}
    framework, nodes = spec.get("framework") or "specforge", (spec.get("resources") or {}).get("nodes") or 1
    return {stage_job_name(meta["name"], stage, meta.get("generation") or 1, stage_pods(framework, nodes, stage), k)
            for stage in JOB_STAGES for k in range(MAX_ATTEMPTS)}


def _latest_attempts(state: TrainingState, jobs: list[dict]) -> dict[str, tuple[int, dict]]:
    """Stage -> (attempt, Job) of its latest attempt among ``jobs`` (this generation's, this training's)."""
    meta = state.training["metadata"]
    spec = state.training.get("spec") or {}
    framework, nodes = spec.get("framework") or "specforge", (spec.get("resources") or {}).get("nodes") or 1
    latest: dict[str, tuple[int, dict]] = {}
    for job in jobs:
        stage = (job["metadata"].get("labels") or {}).get(STAGE_LABEL)
        if stage not in JOB_STAGES:
            continue
        attempt = job_attempt(job, meta["name"], stage, meta.get("generation") or 1, stage_pods(framework, nodes, stage))
        if attempt is not None and attempt >= latest.get(stage, (-1, None))[0]:
            latest[stage] = (attempt, job)
    return latest


@dataclass(frozen=True)
class JobsSeen:
    """This generation's stage Jobs, what they and status say of each stage, and what must go first."""

    current_jobs: list[dict]  # this generation's Jobs, created by this training
    leftovers: list[str]  # what a new stage Job waits for to go (an earlier training's, an older pod)
    observed: dict[str, StageJob]  # stage -> its latest attempt's state (or a failure its condition keeps)
    recorded: frozenset[str]  # stages whose success status records for this generation (or carries over)
    stage_jobs: dict[str, dict] = field(default_factory=dict)  # stage -> its latest attempt's Job
    disruptions: list[dict] = field(default_factory=list)  # status.disruptions with what was seen now


def carried_stages(status: dict, inputs: dict[str, str]) -> frozenset[str]:
    """Stages status.completedStages records as done with the same inputs as this spec's (``inputs``: stage ->
    training.inputs.stage_inputs): a new generation that changed only how the stages run carries them over."""
    return frozenset(c.get("stage") for c in status.get("completedStages") or []
                     if c.get("stage") in inputs and c.get("inputs") == inputs[c.get("stage")])


def seen_disruptions(state: TrainingState, stage_jobs: dict[str, dict]) -> list[dict]:
    """status.disruptions plus any disruption seen now on a pod of this generation's latest stage Jobs (one entry
    per disrupted Job, the oldest dropped beyond 64): written while the pod can still be seen, so a group whose
    peers fail first, or whose disrupted pod is gone by then, is still known as disrupted."""
    meta = state.training["metadata"]
    generation = meta.get("generation") or 1
    entries = [d for d in (state.training.get("status") or {}).get("disruptions") or [] if isinstance(d, dict)]
    known = {d.get("jobName") for d in entries}
    for stage, job in stage_jobs.items():
        name = job["metadata"]["name"]
        if name in known:
            continue
        finished = conditions.job_finished(job) or {}
        if finished.get("type") == "Complete" or finished.get("reason") == DEADLINE_REASON:
            continue
        seen = next((text for p in state.job_pods if _job_of(p) == name and (text := pod_disruption(p))), None)
        if seen is None and finished.get("reason") == DISRUPTION_REASON:
            seen = finished.get("message") or f"a pod of Job {name} was disrupted"
        if seen is not None:
            entries.append({"stage": stage, "generation": generation, "jobName": name, "message": seen[:500],
                            "time": rfc3339(state.now)})
    return entries[-64:]


def observe_jobs(state: TrainingState, inputs: dict[str, str] | None = None) -> JobsSeen:
    """Read this generation's stage Jobs (each stage's latest attempt), the leftovers in their way and the stages
    status records (``inputs``: what this spec's stages read, for the stages carried over)."""
    meta = state.training["metadata"]
    generation, uid = meta.get("generation") or 1, meta.get("uid")
    status = state.training.get("status") or {}
    current = current_job_names(state)
    # A training deleted and created again under its name finds the earlier one's children until the garbage
    # collector takes them: their Jobs are no record of this run (the simulation's seed 59 recorded Extracted
    # from one), and a stage Job would mount their claim and spec ConfigMap (seed 2): it waits for them to go.
    current_jobs = [j for j in state.jobs if j["metadata"]["name"] in current and not left_by_earlier(j, uid)]
    latest = _latest_attempts(state, current_jobs)
    stage_jobs = {stage: job for stage, (_, job) in latest.items()}
    disruptions = seen_disruptions(state, stage_jobs)
    spec = state.training.get("spec") or {}
    observed = {s.stage: s for s in (stage_job_state(job, state.job_pods, attempt, disruptions, spec)
                                     for attempt, job in latest.values()) if s is not None}
    recorded = frozenset(stage for stage, kind in STAGE_CONDITIONS.items() if any(
        c["type"] == kind and c.get("status") == "True" and c.get("observedGeneration") == generation
        for c in status.get("conditions") or [])) | carried_stages(status, inputs or {})
    # A stage that failed without a Job of its own to show it (Generate's engine never served, a serving
    # unfit for Evaluate) stays failed by its condition: nothing retries it until the spec changes.
    for stage, kind in STAGE_CONDITIONS.items():
        failed = next((c for c in status.get("conditions") or [] if c["type"] == kind and c.get("status") == "False"
                       and c.get("observedGeneration") == generation), None)
        if failed and stage not in observed:
            observed[stage] = StageJob(stage, "Failed", (failed.get("message") or "").removeprefix(f"{stage} failed: "),
                                       failed.get("reason") or "StageFailed")
    return JobsSeen(current_jobs, leftovers(state, current), observed, recorded, stage_jobs, disruptions)


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
    # A spec change, a refused spec or a disruption stops the running stage's Job, but its pods write on to the
    # hidden-state claim until their grace period ends: a new stage Job (the new generation's, the next attempt,
    # the same generation once the spec is allowed again) waits for every stage pod of the training to stop
    # (the simulation saw both run on the claim). A stage starts only when no stage Job runs, so any stage pod
    # still running then is one of these.
    found += sorted(p["metadata"]["name"] for p in state.job_pods
                    if _job_of(p) is not None and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"))
    return found


def stage_artifacts(jobs: list[dict], pods: tuple[dict, ...], recorded: list[dict] | None,
                    kept: frozenset[str] = frozenset()) -> list[dict] | None:
    """What the finished stages wrote (their runner's outputs with sizes), in stage order; what status
    already records stays for the stages of ``jobs`` and the ``kept`` ones (carried over from an earlier
    generation: the pods that said it may be gone)."""
    found = [a for a in recorded or [] if a.get("stage") in {(j["metadata"].get("labels") or {}).get(STAGE_LABEL)
                                                              for j in jobs} | kept]
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


def queue_wait(state: TrainingState, name: str) -> str | None:
    """Why the stage Job ``name`` still waits in its Kueue queue (None: not queued, or admitted)."""
    job = next((j for j in state.jobs if j["metadata"]["name"] == name), None)
    return None if job is None else admission_wait(job, state.workloads)
