"""What one DrafterTraining reconcile should do, as a pure function: `decide(TrainingState) -> TrainingPlan`.

The Job stages (Generate, Extract, Train, Export) run as one Job each, in order (training_stages.py);
before the first, the hidden-state claim (when the operator owns it) and the spec ConfigMap of this
generation exist. A stage's outcome is its container's termination message (stage_runner.py). A
failed stage stops the run with its own error; a spec change starts a new generation whose Jobs
start again from the first stage, and the older generation's Jobs are deleted. Once the drafter is
exported, the claim the operator created is deleted unless `hiddenStates.storage.retain` is set,
and never while a Job of the training is unfinished (its pod may still write to it; the finished Jobs
stay as the record, and their finished pods do not hold the claim).

With spec.promote, Evaluate and Promote follow (training_promotion.py): a DrafterBenchmark of the
serving's current drafter, then a patch of the serving that swaps the new drafter in through its gate;
their outcomes come from that benchmark and from the serving's revisions. The hidden-state claim the
operator created goes once Export succeeded (the later stages do not read it).

While a Job stage runs, status.progress comes from the last `drafter-progress` line of its pod's log
(training/progress.py), read by the reconciler; artifacts come from the finished stages' outcomes.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field

import pydantic

from drafter_operator.api import DrafterTraining
from drafter_operator.controllers import conditions
from drafter_operator.controllers.swap import Verdict
from drafter_operator.controllers.training_promotion import (
    evaluate_benchmark,
    evaluation_outcome,
    exported_digest,
    points_at,
    promotion_outcome,
    promotion_patch,
    serving_problems,
)
from drafter_operator.controllers.training_output import output_conflicts
from drafter_operator.controllers.training_stages import STAGE_CONDITIONS, StageJob, plan_stages, stages_for
from drafter_operator import API_GROUP, API_VERSION
from drafter_operator.kube import object_path
from drafter_operator.engines import DEFAULT_IMAGES
from drafter_operator.resources.engine import service_url
from drafter_operator.resources.pod_policy import TenantPolicy
from drafter_operator.resources.training_engine import (
    engine_name,
    generation_endpoint,
    generation_engine,
    generation_engine_ready,
)
from drafter_operator.resources.training import (
    evaluate_benchmark_name,
    hidden_states_claim,
    hidden_states_claim_name,
    owns_hidden_states_claim,
)
from drafter_operator.training.progress import latest_status
from drafter_operator.training.stages import job_stages
from drafter_operator.resources.training_job import (
    STAGE_LABEL,
    spec_config_map,
    spec_config_map_name,
    stage_job,
    stage_job_name,
)

Event = tuple[str, str, str]
GROUP_VERSION = f"{API_GROUP}/{API_VERSION}"
#: The stages that run as Jobs (Evaluate and Promote are a benchmark and a serving patch).
JOB_STAGES = ("Generate", "Extract", "Train", "Export")
ENGINE_FAILED = "failed: "


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
    progress_log: str | None = None  # the log tail of the running stage pod
    engine: tuple[dict, ...] = ()  # the Deployments and Services of Generate's engine (any generation)
    servings: tuple[dict, ...] = ()  # every DrafterServing of the namespace (what they load: training_output.py)
    earlier: tuple[str, ...] = ()  # spec ConfigMaps left by an earlier training of this name (not yet collected)
    tenant_policy: TenantPolicy = field(default_factory=TenantPolicy.from_env)  # images and ServiceAccounts allowed


@dataclass
class TrainingPlan:
    creates: list[tuple[str, dict]] = field(default_factory=list)  # (collection path, manifest), in order
    deletes: list[str] = field(default_factory=list)
    patches: list[tuple[str, dict]] = field(default_factory=list)  # (object path, merge patch)
    status: dict = field(default_factory=dict)  # only the fields that changed
    events: list[Event] = field(default_factory=list)


def _job_finished(job: dict) -> str | None:
    """Complete or Failed once the Job has finished (its pod no longer uses the claim), else None."""
    return (conditions.job_finished(job) or {}).get("type")


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


def _outcome(pod: dict) -> dict | None:
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


def _failure_text(pod: dict) -> str:
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


def training_tenancy_problems(spec, namespace: str, state: TrainingState) -> list[str]:
    """Images and the ServiceAccount the administrator's configuration refuses (resources/pod_policy.py)."""
    images = [("spec.image" if spec.image else "spec.image (the operator's trainer image)", spec.image or state.image)]
    generation = spec.data.generation
    if generation is not None:
        images.append(("spec.data.generation.image" if generation.image else
                       f"spec.data.generation.image (default for {generation.engine})",
                       generation.image or DEFAULT_IMAGES[generation.engine]))
    return state.tenant_policy.problems(namespace, images, ("spec.pod.serviceAccountName",
                                                            spec.pod.service_account_name if spec.pod else None))


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
    refused = training_tenancy_problems(spec, namespace, state)
    if refused:  # before any Job, claim or engine exists
        message = "; ".join(refused)
        plan.events.append(("Warning", "InvalidSpec", message))
        return finish("Failed", [("Ready", Verdict("False", "InvalidSpec", message))])

    current = {stage_job_name(name, stage, generation) for stage in JOB_STAGES}
    plan.deletes = [object_path("batch/v1", "jobs", namespace, j["metadata"]["name"]) for j in state.jobs
                    if j["metadata"]["name"] not in current and not j["metadata"].get("deletionTimestamp")]
    evaluate_name = evaluate_benchmark_name(name, generation)
    plan.deletes += [object_path(GROUP_VERSION, "drafterbenchmarks", namespace, b["metadata"]["name"])
                     for b in state.benchmarks
                     if b["metadata"]["name"] != evaluate_name and not b["metadata"].get("deletionTimestamp")]
    # A training deleted and created again under its name finds the earlier one's children until the garbage
    # collector takes them: their Jobs are no record of this run (the simulation's seed 59 recorded Extracted
    # from one), and a stage Job would mount their claim and spec ConfigMap (seed 2): it waits for them to go.
    uid = meta.get("uid")
    current_jobs = [j for j in state.jobs if j["metadata"]["name"] in current and not left_by_earlier(j, uid)]
    leftovers = sorted({j["metadata"]["name"] for j in state.jobs
                        if j["metadata"]["name"] in current and left_by_earlier(j, uid)} | set(state.earlier))
    if state.claim is not None and (left_by_earlier(state.claim, uid) or state.claim["metadata"].get("deletionTimestamp")):
        leftovers.append(state.claim["metadata"]["name"])
    # A spec change deletes the running stage's Job, but its pod writes on to the hidden-state claim until its
    # grace period ends: the new generation's stage waits for it (the simulation saw both run on the claim).
    leftovers += sorted(p["metadata"]["name"] for p in state.job_pods
                        if (p["metadata"].get("labels") or {}).get("job-name") not in (None, *current)
                        and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"))
    observed = {s.stage: s for s in (_job_state(j, state.job_pods) for j in current_jobs) if s is not None}
    recorded = frozenset(stage for stage, kind in STAGE_CONDITIONS.items() if any(
        c["type"] == kind and c.get("status") == "True" and c.get("observedGeneration") == generation
        for c in status.get("conditions") or []))
    # A stage that failed without a Job of its own to show it (Generate's engine never served, a serving
    # unfit for Evaluate) stays failed by its condition: nothing retries it until the spec changes.
    for stage, kind in STAGE_CONDITIONS.items():
        failed = next((c for c in status.get("conditions") or [] if c["type"] == kind and c.get("status") == "False"
                       and c.get("observedGeneration") == generation), None)
        if failed and stage not in observed:
            observed[stage] = StageJob(stage, "Failed", (failed.get("message") or "").removeprefix(f"{stage} failed: "))
    promote = spec.promote is not None
    stages = stages_for(generate="Generate" in job_stages(spec), evaluate=promote, promote=promote)
    evaluation = dict(status.get("evaluation") or {}) if status.get("observedGeneration") == generation else {}
    benchmark = next((b for b in state.benchmarks if b["metadata"]["name"] == evaluate_name), None)
    if promote and benchmark is not None:
        outcome = evaluation_outcome(benchmark)
        observed["Evaluate"] = StageJob("Evaluate", outcome.state, outcome.message)
        evaluation.update(outcome.figures or {}, benchmark=evaluate_name)
    # What Export wrote (its content digest): the serving runs the new drafter only with model *and* digest.
    digest = exported_digest(status.get("artifacts") if status.get("observedGeneration") == generation else None,
                             spec.output.path)
    if promote and state.serving is not None and points_at(state.serving, spec.output.path, digest):
        outcome = promotion_outcome(state.serving, spec.output.path, digest)
        observed["Promote"] = StageJob("Promote", outcome.state, outcome.message)
        evaluation.update(outcome.figures or {})
    decision = plan_stages(stages, observed, recorded)
    # Generate's engine holds GPUs: it runs only while Generate does (a finished, failed or newer run
    # deletes it).
    generating = spec.data.generation is not None and decision.stage == "Generate"
    plan.deletes += [_engine_path(namespace, obj) for obj in state.engine if not obj["metadata"].get("deletionTimestamp")
                     and (not generating or obj["metadata"]["name"] != engine_name(name, generation))]

    verdicts = [(STAGE_CONDITIONS[s], Verdict("True", "Succeeded", _success(s, observed))) if s in decision.done
                else (STAGE_CONDITIONS[s], Verdict("Unknown", "Pending", f"{s} has not run for generation {generation}"))
                for s in stages if decision.failed is None or s != decision.failed.stage]
    newly_done = [s for s in decision.done if s not in recorded]
    plan.events += [("Normal", STAGE_CONDITIONS[s], _success(s, observed)) for s in newly_done]
    claim_name = hidden_states_claim_name(name, spec)
    extra: dict = {"jobName": None, "artifacts": _artifacts(current_jobs, state.job_pods, status.get("artifacts"))}
    if promote:
        extra["evaluation"] = evaluation or None
        extra["promoted"] = "Promote" in decision.done
        if "revision" in evaluation and "Promote" in decision.done:
            extra["promotedRevision"] = evaluation["revision"]
    hidden = {**(status.get("hiddenStates") or {}), "claimName": claim_name}
    # The hidden states are spent once the drafter is exported: the claim the operator made goes then
    # (unless retained), never while a Job of the training is unfinished. The finished stage pods go
    # with it (Kubernetes keeps a claim while any pod names it, finished or not); their Jobs stay as the
    # record, and what the pods said is already in status (Export recorded in an earlier reconcile).
    if "Export" in recorded and owns_hidden_states_claim(spec) and not spec.hidden_states.storage.retain \
            and state.claim is not None and not left_by_earlier(state.claim, uid) \
            and not [j for j in state.jobs if _job_finished(j) is None]:
        plan.deletes += [object_path("v1", "pods", namespace, p["metadata"]["name"]) for p in state.job_pods
                         if (p["metadata"].get("labels") or {}).get("job-name")
                         and not p["metadata"].get("deletionTimestamp")]
        plan.deletes.append(object_path("v1", "persistentvolumeclaims", namespace, claim_name))
        hidden["deleted"] = True
    # A short extraction can end between two progress reads: its outcome's size is the final figure.
    extracted = next((a.get("sizeBytes") for a in extra["artifacts"] or [] if a["stage"] == "Extract"), None)
    if extracted is not None:
        hidden["bytesWritten"] = extracted
    extra["hiddenStates"] = hidden

    if decision.failed is not None:
        failed = decision.failed
        message = f"{failed.stage} failed: {failed.message}"
        if status.get("stage") != "Failed":
            plan.events.append(("Warning", "StageFailed", message))
        verdicts += [(STAGE_CONDITIONS[failed.stage], Verdict("False", "StageFailed", message)),
                     ("Ready", Verdict("False", "StageFailed", message + "; change the spec to run again"))]
        extra["progress"] = None
        return finish("Failed", verdicts, extra)

    if decision.stage == "Succeeded":
        where = f"the drafter is at {spec.output.path}"
        if promote:
            where += f" and serves in {spec.promote.serving_ref.name} (revision {evaluation.get('revision')})"
        verdicts.append(("Ready", Verdict("True", "Succeeded", where)))
        extra["progress"] = None
        return finish("Succeeded", verdicts, extra)

    def stage_refused(problems: list[str], reason: str, fix: str) -> TrainingPlan:
        """The stage about to start fails before it starts: a Warning, its condition and Ready say why."""
        message = f"{decision.start} failed: {'; '.join(problems)}"
        plan.events.append(("Warning", "StageFailed", message))
        verdicts.extend([(STAGE_CONDITIONS[decision.start], Verdict("False", reason, message)),
                         ("Ready", Verdict("False", reason, f"{message}; {fix}"))])
        extra["progress"] = None
        return finish("Failed", verdicts, extra)

    if decision.start in ("Evaluate", "Promote"):
        problems = serving_problems(spec, state.serving)
        if problems:
            return stage_refused(problems, "ServingUnsuitable", "fix it or change spec.promote")
    if decision.start in JOB_STAGES:
        # Before every Job stage (so a run fails before hours of work, and again right before Export, when a
        # serving may have started loading the path since): Export never replaces what a serving loads.
        conflicts = output_conflicts(spec, state.servings)
        if conflicts:
            return stage_refused(conflicts, "OutputInUse", "change the spec to run again")
    endpoint = None
    if generating:
        endpoint, waiting = _generation_engine(plan, state, namespace, name, spec, generation)
        if waiting:
            if waiting.startswith(ENGINE_FAILED):
                message = f"Generate failed: the target's engine {engine_name(name, generation)} {waiting.removeprefix(ENGINE_FAILED)}"
                plan.events.append(("Warning", "StageFailed", message))
                verdicts += [(STAGE_CONDITIONS["Generate"], Verdict("False", "StageFailed", message)),
                             ("Ready", Verdict("False", "StageFailed", message + "; change the spec to run again"))]
                extra["progress"] = None
                return finish("Failed", verdicts, extra)
            extra["progress"] = {"summary": waiting}
            verdicts.append(("Ready", Verdict("False", "Running", f"stage Generate: {waiting}")))
            return finish("Generate", verdicts, extra)
    if decision.start == "Evaluate":
        plan.creates.append((object_path(GROUP_VERSION, "drafterbenchmarks", namespace),
                             evaluate_benchmark(namespace, name, spec, generation)))
        plan.events.append(("Normal", "StageStarted", f"Evaluate started: benchmarking the current drafter of "
                                                      f"{spec.promote.serving_ref.name}"))
    elif decision.start == "Promote":
        patch = promotion_patch(state.serving, spec, name, generation, evaluation.get("currentTokensPerSecond"),
                                digest)
        if patch is not None:
            plan.patches.append((object_path(GROUP_VERSION, "drafterservings", namespace,
                                             spec.promote.serving_ref.name), patch))
        plan.events.append(("Normal", "StageStarted", f"Promote started: {spec.promote.serving_ref.name} swaps to "
                                                      f"{spec.output.path} through its gate"))
    elif decision.start is not None and leftovers:
        extra["progress"] = {"summary": f"{decision.start} waits for {', '.join(leftovers)} to go (an earlier "
                                        "training of this name, an older generation's pod, or a claim being deleted)"}
    elif decision.start is not None:
        if owns_hidden_states_claim(spec) and state.claim is None:
            plan.creates.append((object_path("v1", "persistentvolumeclaims", namespace),
                                 hidden_states_claim(namespace, name, spec)))
        if spec_config_map_name(name, generation) not in state.config_maps:
            plan.creates.append((object_path("v1", "configmaps", namespace),
                                 spec_config_map(namespace, name, spec, generation)))
        render_args = state.render_args
        if spec.data.generation is not None:
            # Generate reaches the engine by its Service's cluster IP; the other stages render Generate
            # too (run-stage renders the whole pipeline) but never call it: its stable name will do.
            render_args += ("--generation-endpoint",
                            endpoint or generation_endpoint(namespace, name, spec, generation))
        plan.creates.append((object_path("batch/v1", "jobs", namespace),
                             stage_job(namespace, name, spec, decision.start, generation, spec.image or state.image,
                                       render_args=render_args)))
        plan.events.append(("Normal", "StageStarted", f"{decision.start} started"))
    if decision.stage in JOB_STAGES:
        extra["jobName"] = stage_job_name(name, decision.stage, generation)
    if not (decision.start in JOB_STAGES and leftovers):
        extra["progress"] = _progress(decision.stage, state, status, hidden)
    verdicts.append(("Ready", Verdict("False", "Running", f"stage {decision.stage}")))
    return finish(decision.stage, verdicts, extra)


def left_by_earlier(obj: dict, uid: str | None) -> bool:
    """Owned, but not by this training: an earlier one of the same name left it (the garbage collector's)."""
    refs = obj["metadata"].get("ownerReferences") or []
    return bool(refs) and uid is not None and not any(r.get("uid") == uid for r in refs)


def _engine_path(namespace: str, obj: dict) -> str:
    kind = "deployments" if obj.get("kind") == "Deployment" else "services"
    return object_path("apps/v1" if kind == "deployments" else "v1", kind, namespace, obj["metadata"]["name"])


def _generation_engine(plan: TrainingPlan, state: TrainingState, namespace: str, name: str, spec,
                       generation: int) -> tuple[str | None, str | None]:
    """Generate's engine: created when missing; (its endpoint, None) once it serves, else (None, what it
    waits for) or (None, ENGINE_FAILED + why) when its Deployment gave up."""
    mine = {obj.get("kind"): obj for obj in state.engine if obj["metadata"]["name"] == engine_name(name, generation)}
    if not mine:
        image = spec.data.generation.image or DEFAULT_IMAGES[spec.data.generation.engine]
        for manifest in generation_engine(namespace, name, spec, generation, image):
            kind = "deployments" if manifest["kind"] == "Deployment" else "services"
            plan.creates.append((object_path("apps/v1" if kind == "deployments" else "v1", kind, namespace), manifest))
        plan.events.append(("Normal", "EngineStarting", f"{spec.data.generation.engine} serves the target for "
                                                        f"Generate as {engine_name(name, generation)}"))
        return None, "waiting for the target's engine to start"
    deployment, service = mine.get("Deployment"), mine.get("Service")
    stalled = next((c for c in ((deployment or {}).get("status") or {}).get("conditions") or []
                    if c.get("type") == "Progressing" and c.get("reason") == "ProgressDeadlineExceeded"), None)
    if stalled:
        return None, f"{ENGINE_FAILED}did not become Ready: {stalled.get('message', '')}"
    url = service_url(service)
    endpoint = f"{url}/v1" if url else None
    if not generation_engine_ready(deployment) or endpoint is None:
        return None, "waiting for the target's engine to be Ready"
    return endpoint, None


def _success(stage: str, observed: dict[str, StageJob]) -> str:
    job = observed.get(stage)
    return job.message if job is not None and job.message and stage in ("Evaluate", "Promote") else f"{stage} succeeded"


def _progress(stage: str, state: TrainingState, status: dict, hidden: dict) -> dict:
    """status.progress of the running stage from its pod's log tail (training/progress.py); the hidden
    states' bytes go into ``hidden`` during Extract. Another stage's progress is never carried over."""
    latest = latest_status(state.progress_log, state.now) if state.progress_log else None
    if latest is None or latest.stage != stage:
        previous = status.get("progress")
        return previous if previous and status.get("stage") == stage else {"summary": f"{stage} starting"}
    if stage == "Extract":
        if latest.bytes_written is not None:
            hidden["bytesWritten"] = latest.bytes_written
        if latest.estimated_bytes is not None:
            hidden["estimatedBytes"] = latest.estimated_bytes
    return latest.progress


def _artifacts(jobs: list[dict], pods: tuple[dict, ...], recorded: list[dict] | None) -> list[dict] | None:
    """What the finished stages wrote (their runner's outputs with sizes), in stage order; what status
    already records stays (the pods that said it may be gone)."""
    found = [a for a in recorded or [] if a.get("stage") in {(j["metadata"].get("labels") or {}).get(STAGE_LABEL)
                                                              for j in jobs}]
    for job in jobs:
        stage = (job["metadata"].get("labels") or {}).get(STAGE_LABEL)
        if _job_finished(job) != "Complete" or not stage:
            continue
        for pod in pods:
            if (pod["metadata"].get("labels") or {}).get("job-name") != job["metadata"]["name"]:
                continue
            outcome = _outcome(pod) or {}
            for output in (outcome.get("outputs") or {}).values():
                if isinstance(output, dict) and output.get("path"):
                    artifact = {"stage": stage, "path": output["path"], "sizeBytes": output.get("sizeBytes")}
                    if output.get("contentDigest"):  # Export's drafter (training/export.py): Promote reads it here
                        artifact["contentDigest"] = output["contentDigest"]
                    found = [a for a in found if (a["stage"], a["path"]) != (stage, output["path"])] + [artifact]
    order = {s: i for i, s in enumerate(JOB_STAGES)}
    return sorted(found, key=lambda a: (order.get(a["stage"], 9), a["path"])) or None
