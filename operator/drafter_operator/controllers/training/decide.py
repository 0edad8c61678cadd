"""What one DrafterTraining reconcile should do, as a pure function: `decide(TrainingState) -> Plan`.

The Job stages (Generate, Extract, Train, Export) run as one Job each, in order (stages.py);
before the first, the hidden-state claim (when the operator owns it) and the spec ConfigMap of this
generation exist, this training's own (children.py: an object of that name it does not own is a
NameConflict, never used). A stage's outcome is its container's termination message (stage_runner.py). A
failed stage stops the run with its own error, except a disrupted one (a drained node, an evicted or
preempted pod), which starts again as its next attempt (spec.limits.disruptionRetries), and every stage Job
has a deadline (spec.limits.deadlines). A spec change starts a new generation: the older generation's Jobs
are deleted, and its stages run again from the first one whose inputs changed (the stages before carry over:
training/inputs.py). A refused spec stops what runs and keeps the record (refusal.py). Once the drafter is
exported, the claim the operator created is deleted unless `hiddenStates.storage.retain` is set,
and never while a Job of the training is unfinished (its pod may still write to it; the finished Jobs
stay as the record, and their finished pods do not hold the claim).

With spec.promote, Evaluate and Promote follow (promotion.py): a DrafterBenchmark of the
serving's current drafter, then a patch of the serving that swaps the new drafter in through its gate;
their outcomes come from that benchmark and from the serving's revisions. The hidden-state claim the
operator created goes once Export succeeded (the later stages do not read it).

While a Job stage runs, status.progress comes from the last `drafter-progress` line of its pod's log
(training/progress.py), read by the reconciler; artifacts come from the finished stages' outcomes.
"""

from __future__ import annotations

import pydantic

from drafter_operator.constants import API_GROUP_VERSION, BENCHMARK_PLURAL, SERVING_PLURAL
from drafter_operator.api import DrafterTraining
from drafter_operator.controllers.conditions import Event
from drafter_operator.controllers.plan import Plan, Write
from drafter_operator.controllers.swap import Verdict
from drafter_operator.controllers.training.children import conflict_message, conflicts, owned_by
from drafter_operator.controllers.training.generate import engine_step, idle_engine_deletes
from drafter_operator.controllers.training.observe import (
    JobsSeen,
    job_finished,
    observe_jobs,
    queue_wait,
    run_estimate,
    running_progress,
    stage_artifacts,
    stage_outcome,
    stage_progress,
    stale_children,
)
from drafter_operator.controllers.training.output import output_conflicts
from drafter_operator.controllers.training.refusal import refused_plan, stop_jobs
from drafter_operator.controllers.training.promotion import (
    PromotionSeen,
    category_summary,
    evaluate_benchmark,
    observe_promotion,
    promoted_by,
    promotion_patch,
    serving_problems,
)
from drafter_operator.controllers.training.state import TrainingState
from drafter_operator.controllers.training.status import set_stage_status
from drafter_operator.controllers.training.stages import (
    JOB_STAGES,
    STAGE_CONDITIONS,
    StageDecision,
    StageJob,
    plan_stages,
    stages_for,
)
from drafter_operator.engines import DEFAULT_IMAGES
from drafter_operator.kube import object_path
from drafter_operator.resources.training import (
    evaluate_benchmark_name,
    hidden_states_claim,
    hidden_states_claim_name,
    owns_hidden_states_claim,
)
from drafter_operator.resources.training_engine import engine_name, generation_endpoint
from drafter_operator.resources.storage_sharing import SHAREABLE_FIX, sharing_problem
from drafter_operator.resources.training_job import (StageCommand, StageRun, rendezvous_args, rendezvous_service,
                                                     spec_config_map, spec_config_map_name, stage_job, stage_job_name)
from drafter_operator.training.inputs import stage_inputs
from drafter_operator.training.stages import job_stages, stage_pods

#: What a failed run's Ready condition tells the user to do, where the reason has a fix of its own.
FIXES = {"StorageNotShared": SHAREABLE_FIX,
         "DeadlineExceeded": "raise spec.limits.deadlines for the stage, or change the spec to run again (the "
                             "stages done are not run again; Train resumes from its last checkpoint)",
         "Disrupted": "raise spec.limits.disruptionRetries, or change the spec to run again (the stages done are "
                      "not run again; Train resumes from its last checkpoint)"}
#: What a failed run's Ready condition tells the user to do.
RUN_AGAIN = "change the spec to run again (the stages done whose inputs it keeps are not run again)"


def decide(state: TrainingState) -> Plan:
    """Validate, observe, choose the stage, record the run, then end it or start (or wait for) the next stage."""
    meta = state.training["metadata"]
    name, generation = meta["name"], meta.get("generation") or 1
    spec, invalid = validated_spec(state)
    if invalid is not None:
        return refused_plan(state, invalid)
    plan = Plan(deletes=stale_children(state, evaluate_benchmark_name(name, generation), API_GROUP_VERSION))
    inputs = {stage: stage_inputs(spec.to_json(), stage) for stage in JOB_STAGES}
    seen = observe_jobs(state, inputs)
    promotion = observe_promotion(state, spec)
    observed = {**seen.observed, **promotion.stages}
    stages, decision = choose_stage(spec, observed, seen.recorded)
    # Generate's engine holds GPUs: it runs only while Generate does (a finished, failed or newer run
    # deletes it).
    generating = spec.data.generation is not None and decision.stage == "Generate"
    plan.deletes += idle_engine_deletes(state.engine, meta["namespace"],
                                        engine_name(name, generation) if generating else None)
    verdicts = stage_verdicts(stages, decision, observed, generation)
    plan.events += completion_events(decision, seen.recorded, observed)
    extra = run_record(state, spec, seen, decision, promotion.evaluation, inputs)
    hidden, claim_deletes = hidden_states(state, spec, seen.recorded, extra["artifacts"], seen.stage_jobs.get("Extract"))
    plan.deletes += claim_deletes
    extra["hiddenStates"] = hidden
    own_claim = state.claim if state.claim is not None and (owned_by(state.claim, meta.get("uid")) or
                                                            not owns_hidden_states_claim(spec)) else None
    unshareable = sharing_problem(spec.resources.nodes, own_claim, owns_hidden_states_claim(spec)) \
        if decision.failed is None and decision.stage in JOB_STAGES else None
    if unshareable is not None:
        return _unshareable_claim(plan, state, spec, seen, verdicts, extra, decision.stage, unshareable)
    if decision.failed is not None:
        failed = decision.failed
        message = f"{failed.stage} failed: {failed.message}"
        if failed.disrupted is not None:
            message += (f" (attempt {failed.attempt + 1}: spec.limits.disruptionRetries "
                        f"{spec.limits.disruption_retries} spent)")
        return _stage_failed(plan, state, verdicts, extra, failed.stage, failed.reason, message,
                             FIXES.get(failed.reason, RUN_AGAIN),
                             announce=(state.training.get("status") or {}).get("stage") != "Failed")
    if decision.stage == "Succeeded":
        verdicts.append(("Ready", Verdict("True", "Succeeded", _served_where(spec, promotion.evaluation))))
        extra["progress"] = None
        return set_stage_status(plan, state, "Succeeded", verdicts, extra)
    return _next_stage(plan, state, spec, decision, seen, promotion, verdicts, extra, generating)


def _unshareable_claim(plan: Plan, state: TrainingState, spec, seen: JobsSeen, verdicts: list, extra: dict,
                       stage: str, problem: str) -> Plan:
    """The run fails where it stands: no stage pod could ever start. Its waiting stage Job goes, and so does a claim
    the operator made (a new generation with a shareable class makes a fresh one, rather than reuse this)."""
    namespace = state.training["metadata"]["namespace"]
    stop_jobs(plan, seen.current_jobs, namespace)
    if owns_hidden_states_claim(spec) and owned_by(state.claim, state.training["metadata"].get("uid")) \
            and not state.claim["metadata"].get("deletionTimestamp"):
        plan.deletes.append(object_path("v1", "persistentvolumeclaims", namespace, state.claim["metadata"]["name"]))
    return _stage_failed(plan, state, verdicts, extra, stage, "StorageNotShared", f"{stage} failed: {problem}",
                         SHAREABLE_FIX)


def validated_spec(state: TrainingState):  # noqa: D401 - the refusal's plan: refusal.py
    """(the spec, None), or (None, why it is refused): the API's validation, then the tenancy policy."""
    body = state.training
    try:
        spec = DrafterTraining.model_validate(body).spec
    except pydantic.ValidationError as exc:
        return None, "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
    refused = training_tenancy_problems(spec, body["metadata"]["namespace"], state)
    # Refused before any Job, claim or engine exists.
    return (spec, None) if not refused else (None, "; ".join(refused))


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


def _stage_failed(plan: Plan, state: TrainingState, verdicts: list, extra: dict, stage: str, reason: str,
                  message: str, fix: str, announce: bool = True) -> Plan:
    """The run ends Failed at ``stage``: a Warning (when ``announce``), its condition and Ready say why."""
    if announce:
        plan.events.append(("Warning", "StageFailed", message))
    verdicts += [(STAGE_CONDITIONS[stage], Verdict("False", reason, message)),
                 ("Ready", Verdict("False", reason, f"{message}; {fix}"))]
    extra["progress"] = None
    return set_stage_status(plan, state, "Failed", verdicts, extra)


def choose_stage(spec, observed: dict[str, StageJob], recorded: frozenset[str]):
    """The stages the spec asks for, and the stage machine's next step over them (stages.py)."""
    promote = spec.promote is not None
    stages = stages_for(generate="Generate" in job_stages(spec), evaluate=promote, promote=promote)
    return stages, plan_stages(stages, observed, recorded, spec.limits.disruption_retries)


def completion_events(decision: StageDecision, recorded: frozenset[str],
                      observed: dict[str, StageJob]) -> list[Event]:
    """A Normal Event for each stage done that status does not record yet (once per stage and generation)."""
    return [("Normal", STAGE_CONDITIONS[s], _success(s, observed)) for s in decision.done if s not in recorded]


def stage_verdicts(stages, decision: StageDecision, observed: dict[str, StageJob],
                   generation: int) -> list[tuple[str, Verdict]]:
    """Each stage's condition: Succeeded once done, else Pending (the failed stage's is set by its failure)."""
    return [(STAGE_CONDITIONS[s], Verdict("True", "Succeeded", _success(s, observed))) if s in decision.done
            else (STAGE_CONDITIONS[s], Verdict("Unknown", "Pending", f"{s} has not run for generation {generation}"))
            for s in stages if decision.failed is None or s != decision.failed.stage]


def _success(stage: str, observed: dict[str, StageJob]) -> str:
    job = observed.get(stage)
    return job.message if job is not None and job.message and stage in ("Evaluate", "Promote") else f"{stage} succeeded"


def _served_where(spec, evaluation: dict) -> str:
    where = f"the drafter is at {spec.output.path}"
    if spec.promote is not None:
        where += f" and serves in {spec.promote.serving_ref.name} (revision {evaluation.get('revision')})"
        compared = category_summary(evaluation.get("byCategory") or ())
        if compared:
            where += f"; acceptance length by category, current -> new: {compared}"
    return where


def run_record(state: TrainingState, spec, seen: JobsSeen, decision: StageDecision, evaluation: dict,
               inputs: dict[str, str] | None = None) -> dict:
    """status fields that record the run: what the finished stages wrote (and the stages done with what they
    read, for a later generation to carry over), the disruptions seen and, with spec.promote, the evaluation
    and whether (and as which revision) the drafter was promoted."""
    status = state.training.get("status") or {}
    extra: dict = {"jobName": None, "artifacts": stage_artifacts(seen.current_jobs, state.job_pods,
                                                                 status.get("artifacts"), seen.recorded),
                   "completedStages": completed_stages(state, decision, seen.stage_jobs, inputs or {}),
                   "disruptions": seen.disruptions or None}
    if spec.promote is not None:
        extra["evaluation"] = evaluation or None
        extra["promoted"] = "Promote" in decision.done
        if "revision" in evaluation and "Promote" in decision.done:
            extra["promotedRevision"] = evaluation["revision"]
    return extra


def completed_stages(state: TrainingState, decision: StageDecision, stage_jobs: dict[str, dict],
                     inputs: dict[str, str]) -> list[dict] | None:
    """status.completedStages: each Job stage done, in order, with the generation that did it and the digest of
    what it read. A stage done under other inputs stays recorded (a spec changed back carries it over again)
    until this generation starts it or a stage before it: a stage that runs rewrites its outputs on the claim,
    and those of the stages after it no longer follow from what is there."""
    meta = state.training["metadata"]
    generation = meta.get("generation") or 1
    before = {c.get("stage"): c for c in (state.training.get("status") or {}).get("completedStages") or []}
    record, rewritten = [], False
    for stage in JOB_STAGES:
        kept = before.get(stage)
        if stage in decision.done and stage in inputs:
            record.append(kept if kept and kept.get("inputs") == inputs[stage] else
                          {"stage": stage, "generation": generation, "inputs": inputs[stage]})
            continue
        rewritten = rewritten or stage in stage_jobs or decision.start == stage
        if kept and not rewritten:
            record.append(kept)
    return record or None


def hidden_states(state: TrainingState, spec, recorded: frozenset[str],
                  artifacts: list[dict] | None, extract_job: dict | None = None) -> tuple[dict, list[str]]:
    """status.hiddenStates, and the deletes that free the claim once its hidden states are spent."""
    meta = state.training["metadata"]
    namespace, uid = meta["namespace"], meta.get("uid")
    claim_name = hidden_states_claim_name(meta["name"], spec)
    hidden = {**((state.training.get("status") or {}).get("hiddenStates") or {}), "claimName": claim_name}
    deletes = []
    # The hidden states are spent once the drafter is exported: the claim the operator made goes then
    # (unless retained), never while a Job of the training is unfinished. The finished stage pods go
    # with it (Kubernetes keeps a claim while any pod names it, finished or not); their Jobs stay as the
    # record, and what the pods said is already in status (Export recorded in an earlier reconcile).
    if "Export" in recorded and owns_hidden_states_claim(spec) and not spec.hidden_states.storage.retain \
            and state.claim is not None and owned_by(state.claim, uid) \
            and not [j for j in state.jobs if job_finished(j) is None]:
        deletes += [object_path("v1", "pods", namespace, p["metadata"]["name"]) for p in state.job_pods
                    if (p["metadata"].get("labels") or {}).get("job-name")
                    and not p["metadata"].get("deletionTimestamp")]
        deletes.append(object_path("v1", "persistentvolumeclaims", namespace, claim_name))
        hidden["deleted"] = True
    # A short extraction can end between two progress reads: its outcome's size is the final figure.
    extracted = next((a.get("sizeBytes") for a in artifacts or [] if a["stage"] == "Extract"), None)
    if extracted is not None:
        hidden["bytesWritten"] = extracted
    if stage_pods(spec.framework, spec.resources.nodes, "Extract") > 1:
        hidden.update(shards_status(state, spec, "Extract" in recorded, extract_job))
    return hidden, deletes


def shards_status(state: TrainingState, spec, extracted: bool, job: dict | None = None) -> dict:
    """A data-parallel Extract's shares and how many have finished: its Indexed Job's (the latest attempt's)
    succeeded pods (each share succeeds once), all of them once the Job is complete or Extract recorded (its Job
    may be gone)."""
    meta = state.training["metadata"]
    name = job["metadata"]["name"] if job is not None else \
        stage_job_name(meta["name"], "Extract", meta.get("generation") or 1, spec.resources.nodes)  # Extract spans them all
    complete = extracted or (job is not None and job_finished(job) == "Complete")
    done = spec.resources.nodes if complete else int(((job or {}).get("status") or {}).get("succeeded") or 0)
    return {"shards": spec.resources.nodes, "shardsDone": min(done, spec.resources.nodes),
            **shard_sizes(state, name)}


def shard_sizes(state: TrainingState, job_name: str) -> dict:
    """status.hiddenStates.shardSizes: what each finished share's outcome said it wrote (the pods go with the
    claim; what status recorded stays)."""
    recorded = {s["index"]: s for s in ((state.training.get("status") or {}).get("hiddenStates") or {}).get("shardSizes") or []}
    for pod in state.job_pods:
        share = (stage_outcome(pod) or {}).get("shard") if (pod["metadata"].get("labels") or {}).get("job-name") == job_name else None
        if isinstance(share, dict) and isinstance(share.get("index"), int):
            recorded[share["index"]] = {"index": share["index"], **{k: share[k] for k in ("bytesWritten", "estimatedBytes")
                                                                    if isinstance(share.get(k), int)}}
    return {"shardSizes": [recorded[i] for i in sorted(recorded)]} if recorded else {}


def start_refusal(spec, state: TrainingState, stage: str | None) -> tuple[list[str], str, str] | None:
    """Why ``stage`` must fail before it starts (problems, reason, fix), else None."""
    if stage in ("Evaluate", "Promote"):
        problems = serving_problems(spec, state.serving)
        if problems:
            return problems, "ServingUnsuitable", "fix it or change spec.promote"
    if stage in JOB_STAGES:
        # Before every Job stage (so a run fails before hours of work, and again right before Export, when a
        # serving may have started loading the path since): Export never replaces what a serving loads.
        conflicts = output_conflicts(spec, state.servings)
        if conflicts:
            return conflicts, "OutputInUse", RUN_AGAIN
    return None


def _next_stage(plan: Plan, state: TrainingState, spec, decision: StageDecision, seen: JobsSeen,
                promotion: PromotionSeen, verdicts: list, extra: dict, generating: bool) -> Plan:
    """The run goes on: refuse the next stage, wait for Generate's engine, or start the stage and report it."""
    meta = state.training["metadata"]
    namespace, name, generation = meta["namespace"], meta["name"], meta.get("generation") or 1
    refusal = start_refusal(spec, state, decision.start)
    if refusal is not None:
        problems, reason, fix = refusal
        return _stage_failed(plan, state, verdicts, extra, decision.start, reason,
                             f"{decision.start} failed: {'; '.join(problems)}", fix)
    endpoint = None
    if generating:
        engine = engine_step(state.engine, namespace, name, spec, generation)
        plan.writes += engine.writes
        plan.events += engine.events
        if engine.failed is not None:
            return _stage_failed(plan, state, verdicts, extra, "Generate", "StageFailed",
                                 f"Generate failed: the target's engine {engine_name(name, generation)} {engine.failed}",
                                 RUN_AGAIN)
        if engine.waiting is not None:
            extra["progress"] = {"summary": engine.waiting}
            verdicts.append(("Ready", Verdict("False", "Running", f"stage Generate: {engine.waiting}")))
            return set_stage_status(plan, state, "Generate", verdicts, extra)
        endpoint = engine.endpoint
    found = name_conflicts(state, spec, decision.start)
    if found:  # someone else's object holds a name the stage would use: never used; the stage waits for it to go
        message = conflict_message(found, decision.start)
        extra["progress"] = {"summary": f"{decision.start} waits: name conflict"}
        if (state.training.get("status") or {}).get("progress") != extra["progress"]:
            plan.events.append(("Warning", "NameConflict", message))
        verdicts.append(("Ready", Verdict("False", "NameConflict", message)))
        return set_stage_status(plan, state, decision.start, verdicts, extra)
    _start(plan, state, spec, decision, seen.leftovers, promotion, endpoint, extra)
    pods = stage_pods(spec.framework, spec.resources.nodes, decision.stage)
    job_name = stage_job_name(name, decision.stage, generation, pods, decision.attempt)
    if decision.stage in JOB_STAGES:
        extra["jobName"] = job_name
    if not (decision.start in JOB_STAGES and seen.leftovers):
        status, latest = state.training.get("status") or {}, running_progress(state)
        extra["progress"] = stage_progress(decision.stage, latest, status, extra["hiddenStates"])
        estimate = run_estimate(decision.stage, latest, state.now, status, spec.resources.gpus)
        if estimate:
            extra["estimate"] = estimate
    waiting = queue_wait(state, job_name)
    if waiting is not None:  # Kueue holds the stage's Job: say why, in Kueue's words
        extra["progress"] = {"summary": f"{decision.stage} {waiting}"}
        verdicts.append(("Ready", Verdict("False", "Queued", f"stage {decision.stage} {waiting}")))
    else:
        verdicts.append(("Ready", Verdict("False", "Running", f"stage {decision.stage}")))
    return set_stage_status(plan, state, decision.stage, verdicts, extra)


def name_conflicts(state: TrainingState, spec, stage: str | None) -> list[str]:
    """The objects under the names a starting Job stage would use (this generation's spec ConfigMap, the claim
    the operator makes, Train's rendezvous Service) that this training does not own."""
    if stage not in JOB_STAGES:
        return []
    meta = state.training["metadata"]
    named = [obj for obj in state.named if obj.get("kind") != "Service" or stage == "Train"]
    if owns_hidden_states_claim(spec) and state.claim is not None:
        named.append({"kind": "PersistentVolumeClaim", **state.claim})
    return conflicts(tuple(named), meta["name"], meta.get("uid"))


def _start(plan: Plan, state: TrainingState, spec, decision: StageDecision, leftovers: list[str],
           promotion: PromotionSeen, endpoint: str | None, extra: dict) -> None:
    """Start ``decision.start``: Evaluate's benchmark, Promote's serving patch, or a Job stage (its next attempt
    after a disruption; once nothing is left in its way: until then status.progress says what it waits for)."""
    meta = state.training["metadata"]
    namespace, name, generation = meta["namespace"], meta["name"], meta.get("generation") or 1
    start = decision.start
    if start == "Evaluate":
        plan.writes.append(Write("create", BENCHMARK_PLURAL, object_path(API_GROUP_VERSION, BENCHMARK_PLURAL, namespace),
                                 evaluate_benchmark(namespace, name, spec, generation, state.now)))
        plan.events.append(("Normal", "StageStarted", f"Evaluate started: benchmarking the current drafter of "
                                                      f"{spec.promote.serving_ref.name}"))
    elif start == "Promote":
        patch = promotion_patch(state.serving, spec, promoted_by(name, generation),
                                promotion.evaluation.get("currentTokensPerSecond"), promotion.digest, promotion.measured)
        if patch is not None:
            plan.writes.append(Write("patch", SERVING_PLURAL, object_path(API_GROUP_VERSION, SERVING_PLURAL, namespace,
                                                                          spec.promote.serving_ref.name), patch))
        plan.events.append(("Normal", "StageStarted", f"Promote started: {spec.promote.serving_ref.name} swaps to "
                                                      f"{spec.output.path} through its gate"))
    elif start is not None and leftovers:
        extra["progress"] = {"summary": f"{start} waits for {', '.join(leftovers)} to go (an earlier "
                                        "training of this name, a stopped stage's pod, or a claim being deleted)"}
    elif start is not None and decision.retried is not None:
        plan.writes += job_stage_creates(state, spec, start, endpoint, decision.attempt)
        resumes = ", Train from its last checkpoint" if start == "Train" else ""
        plan.events.append(("Warning", "StageDisrupted",
                            f"{start} was disrupted ({decision.retried.disrupted}): attempt {decision.attempt + 1} of "
                            f"{spec.limits.disruption_retries + 1} starts{resumes}"))
    elif start is not None:
        plan.writes += job_stage_creates(state, spec, start, endpoint)
        plan.events.append(("Normal", "StageStarted", f"{start} started"))


def job_stage_creates(state: TrainingState, spec, stage: str, endpoint: str | None,
                      attempt: int = 0) -> list[Write]:
    """What a Job stage needs created, in order: the hidden-state claim (when the operator owns it and it is
    missing), this generation's spec ConfigMap (when missing), Train's rendezvous Service across nodes (when
    missing: kept for the training's life), then the stage's Job (its ``attempt``)."""
    meta = state.training["metadata"]
    namespace, name, generation = meta["namespace"], meta["name"], meta.get("generation") or 1
    creates = []
    if owns_hidden_states_claim(spec) and state.claim is None:
        creates.append(Write("create", "persistentvolumeclaims", object_path("v1", "persistentvolumeclaims", namespace),
                             hidden_states_claim(namespace, name, spec)))
    if spec_config_map_name(name, generation) not in state.config_maps:
        creates.append(Write("create", "configmaps", object_path("v1", "configmaps", namespace),
                             spec_config_map(namespace, name, spec, generation)))
    if stage == "Train" and spec.resources.nodes > 1 and not any(o.get("kind") == "Service" for o in state.named):
        creates.append(Write("create", "services", object_path("v1", "services", namespace),
                             rendezvous_service(namespace, name)))
    train_attempt = attempt if stage == "Train" else 0  # every stage renders Train; only Train's Job runs it
    render_args = state.render_args + rendezvous_args(name, spec, generation, train_attempt) + \
        ("--training-uid", meta["uid"])
    if spec.data.generation is not None:
        # Generate reaches the engine by its Service's cluster IP; the other stages render Generate
        # too (run-stage renders the whole pipeline) but never call it: its stable name will do.
        render_args += ("--generation-endpoint", endpoint or generation_endpoint(namespace, name, spec, generation))
    creates.append(Write("create", "jobs", object_path("batch/v1", "jobs", namespace),
                         stage_job(namespace, name, spec, StageRun(stage, generation, attempt),
                                   StageCommand(spec.image or state.image, render_args=render_args))))
    return creates
