"""What one DrafterTraining reconcile should do, as a pure function: `decide(TrainingState) -> TrainingPlan`.

The Job stages (Generate, Extract, Train, Export) run as one Job each, in order (training_stages.py);
before the first, the hidden-state claim (when the operator owns it) and the spec ConfigMap of this
generation exist. A stage's outcome is its container's termination message (stage_runner.py). A
failed stage stops the run with its own error; a spec change starts a new generation whose Jobs
start again from the first stage, and the older generation's Jobs are deleted. Once every stage
succeeded, the claim the operator created is deleted unless `hiddenStates.storage.retain` is set,
and never while a Job of the training is unfinished (its pod may still write to it; the finished Jobs
stay as the record, and their finished pods do not hold the claim).

Evaluate and Promote (a DrafterBenchmark of the new drafter, then the serving's gated swap) are not
decided here yet.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field

import pydantic

from drafter_operator.api import DrafterTraining
from drafter_operator.controllers import conditions
from drafter_operator.controllers.swap import Verdict
from drafter_operator.controllers.training_stages import STAGE_CONDITIONS, StageJob, plan_stages, stages_for
from drafter_operator.kube import object_path
from drafter_operator.resources.training import hidden_states_claim, hidden_states_claim_name, owns_hidden_states_claim
from drafter_operator.resources.training_job import (
    STAGE_LABEL,
    spec_config_map,
    spec_config_map_name,
    stage_job,
    stage_job_name,
)

Event = tuple[str, str, str]


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


@dataclass
class TrainingPlan:
    creates: list[tuple[str, dict]] = field(default_factory=list)  # (collection path, manifest), in order
    deletes: list[str] = field(default_factory=list)
    status: dict = field(default_factory=dict)  # only the fields that changed
    events: list[Event] = field(default_factory=list)


def _job_finished(job: dict) -> str | None:
    """Complete or Failed once the Job has finished (its pod no longer uses the claim), else None."""
    return next((c["type"] for c in (job.get("status") or {}).get("conditions") or []
                 if c.get("type") in ("Complete", "Failed") and c.get("status") == "True"), None)


def _job_state(job: dict, pods: tuple[dict, ...]) -> StageJob | None:
    stage = (job["metadata"].get("labels") or {}).get(STAGE_LABEL)
    if not stage:
        return None
    finished = _job_finished(job)
    if finished is None:
        return StageJob(stage, "Running")
    if finished == "Complete":
        return StageJob(stage, "Succeeded")
    name = job["metadata"]["name"]
    message = next((_failure_text(p) for p in pods if (p["metadata"].get("labels") or {}).get("job-name") == name), "")
    return StageJob(stage, "Failed", message or f"Job {name} failed")


def _failure_text(pod: dict) -> str:
    """The stage runner's outcome (its termination message) as one sentence."""
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (container.get("state") or {}).get("terminated") or {}
        raw = terminated.get("message") or ""
        try:
            outcome = json.loads(raw)
        except ValueError:
            return raw.strip()[-1000:]
        if outcome.get("outcome") == "Failed":
            what = " ".join(outcome.get("command") or []) or outcome.get("reason", "")
            code = f" exited with code {outcome['exitCode']}" if "exitCode" in outcome else ""
            return f"{what}{code}: {outcome.get('tail', '')}"[-1000:]
    return ""


def decide(state: TrainingState) -> TrainingPlan:
    body = state.training
    meta = body["metadata"]
    namespace, name, generation = meta["namespace"], meta["name"], meta.get("generation") or 1
    status = body.get("status") or {}
    plan = TrainingPlan()

    def finish(stage: str, verdicts: list[tuple[str, Verdict]], extra: dict | None = None) -> TrainingPlan:
        merged = conditions.merge(status.get("conditions"), verdicts, generation, state.now)
        desired = {"stage": stage, "observedGeneration": generation, "conditions": merged, **(extra or {})}
        plan.status = {k: v for k, v in desired.items() if status.get(k) != v}
        return plan

    try:
        spec = DrafterTraining.model_validate(body).spec
    except pydantic.ValidationError as exc:
        message = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        plan.events.append(("Warning", "InvalidSpec", message))
        return finish("Failed", [("Ready", Verdict("False", "InvalidSpec", message))])

    current = {stage_job_name(name, stage, generation) for stage in ("Generate", "Extract", "Train", "Export")}
    plan.deletes = [object_path("batch/v1", "jobs", namespace, j["metadata"]["name"]) for j in state.jobs
                    if j["metadata"]["name"] not in current and not j["metadata"].get("deletionTimestamp")]
    observed = {s.stage: s for s in (_job_state(j, state.job_pods) for j in state.jobs
                                     if j["metadata"]["name"] in current) if s is not None}
    recorded = frozenset(stage for stage, kind in STAGE_CONDITIONS.items() if any(
        c["type"] == kind and c.get("status") == "True" and c.get("observedGeneration") == generation
        for c in status.get("conditions") or []))
    stages = stages_for(generate=spec.data.generation is not None, evaluate=False, promote=False)
    decision = plan_stages(stages, observed, recorded)

    verdicts = [(STAGE_CONDITIONS[s], Verdict("True", "Succeeded", f"{s} succeeded")) if s in decision.done
                else (STAGE_CONDITIONS[s], Verdict("Unknown", "Pending", f"{s} has not run for generation {generation}"))
                for s in stages if decision.failed is None or s != decision.failed.stage]
    newly_done = [s for s in decision.done if s not in recorded]
    plan.events += [("Normal", STAGE_CONDITIONS[s], f"{s} succeeded") for s in newly_done]
    claim_name = hidden_states_claim_name(name, spec)
    extra: dict = {"jobName": None}

    if decision.failed is not None:
        failed = decision.failed
        message = f"{failed.stage} failed: {failed.message}"
        if status.get("stage") != "Failed":
            plan.events.append(("Warning", "StageFailed", message))
        verdicts += [(STAGE_CONDITIONS[failed.stage], Verdict("False", "StageFailed", message)),
                     ("Ready", Verdict("False", "StageFailed", message + "; change the spec to run again"))]
        return finish("Failed", verdicts, extra)

    if decision.stage == "Succeeded":
        if owns_hidden_states_claim(spec) and not spec.hidden_states.storage.retain and state.claim is not None \
                and not [j for j in state.jobs if _job_finished(j) is None]:
            plan.deletes.append(object_path("v1", "persistentvolumeclaims", namespace, claim_name))
            extra["hiddenStates"] = {**(status.get("hiddenStates") or {}), "claimName": claim_name, "deleted": True}
        verdicts.append(("Ready", Verdict("True", "Succeeded", f"the drafter is at {spec.output.path}")))
        return finish("Succeeded", verdicts, extra)

    if decision.start is not None:
        if owns_hidden_states_claim(spec) and state.claim is None:
            plan.creates.append((object_path("v1", "persistentvolumeclaims", namespace),
                                 hidden_states_claim(namespace, name, spec)))
        if spec_config_map_name(name, generation) not in state.config_maps:
            plan.creates.append((object_path("v1", "configmaps", namespace),
                                 spec_config_map(namespace, name, spec, generation)))
        plan.creates.append((object_path("batch/v1", "jobs", namespace),
                             stage_job(namespace, name, spec, decision.start, generation, spec.image or state.image,
                                       render_args=state.render_args)))
        plan.events.append(("Normal", "StageStarted", f"{decision.start} started"))
    extra["jobName"] = stage_job_name(name, decision.stage, generation)
    extra["hiddenStates"] = {**(status.get("hiddenStates") or {}), "claimName": claim_name}
    verdicts.append(("Ready", Verdict("False", "Running", f"stage {decision.stage}")))
    return finish(decision.stage, verdicts, extra)
