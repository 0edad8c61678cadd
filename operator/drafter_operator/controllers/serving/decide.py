"""What one DrafterServing reconcile should do, as a pure function: `decide(ServingState) -> Plan`.

Input: the DrafterServing as watched (spec and the status we wrote), its children as the operator's
kopf indexes see them (`Observed`, observe.py), and the clock. Output: the writes (Deployments and
the Service to create or patch, in order), the status patch, the Deployments to delete, the Events, the
swap and rollback counts, and the next moment the clock alone would change the answer. `serving.py`
applies a plan and nothing else; the swap state machine itself is `swap.plan_swap`, also pure.

`decide` is a short sequence of named steps, each pure and tested on its own: validate the spec, choose
the revision to run (`choose_revision`), judge acceptance (`judge_acceptance`: measurements from the
serving loop become the Degraded condition and the onDegraded action, which can change what runs),
check compatibility, plan the swap (`swap_step`), build the writes (patches.py, and the Service
pointer in pointer.py), record what the serving revision's gate measured and judge drift from it
(`drift_step`, drift.py), hold the context length to the trained one (length.py), the status
(status.py) and the Events.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

import pydantic

from drafter_operator import engines, timestamps
from drafter_operator.api import DrafterServing, parse_duration, serving_problems
from drafter_operator.api.serving import SwapSpec
from drafter_operator.controllers import conditions
from drafter_operator.controllers.conditions import Event
from drafter_operator.controllers.promotion_gate import Desired, PromotionSwap, promotion_swap
from drafter_operator.controllers.serving.revisions import measured_as, pod_settings_hash, revision_hash
from drafter_operator.controllers.serving.compatibility import Compatibility, check_compatibility, \
    compatibility_events, preflight_ready, refused_revisions, stop_refused
from drafter_operator.controllers.serving.acceptance import AcceptanceDecision, RunningSpec, action_blocked, \
    decide_acceptance, restored_spec, revision_record, running_spec
from drafter_operator.controllers.serving.observe import Observed, newest_first
from drafter_operator.controllers.serving.patches import (
    Write,
    changed_fields,
    deployment_write,
    gate_write,
    name_conflicts,
    scale_write,
)
from drafter_operator.constants import API_GROUP_VERSION, BENCHMARK_PLURAL, GATE_ATTEMPT_ANNOTATION
from drafter_operator.constants import DRAFTER_ANNOTATION, ENGINE_ANNOTATION, POD_SETTINGS_ANNOTATION, \
    PREVIOUS_REVISION_ANNOTATION, RETRY_ANNOTATION, SERVING_GENERATION_ANNOTATION, SWITCHED_AT_ANNOTATION
from drafter_operator.controllers.serving.pointer import pointer_write, published_port, recorded_drains, switch_record
from drafter_operator.controllers.serving.drift import at_promotion, drift_events, drift_verdict
from drafter_operator.controllers.serving.schedule_obeyed import CONDITION as SCHEDULE_CONDITION
from drafter_operator.controllers.serving.schedule_obeyed import schedule_events, schedule_verdict
from drafter_operator.controllers.serving.length import CONDITION as LENGTH_CONDITION, length_events, length_verdict
from drafter_operator.controllers.serving.schedule import speculation_schedule
from drafter_operator.controllers.plan import Count, Plan
from drafter_operator.controllers.serving.state import ServingState
from drafter_operator.controllers.serving.status import acceptance_status, gating_since, last_benchmark, \
    retry_request, serving_now, transition_events, updated_revisions
from drafter_operator.controllers.swap import SwapInput, SwapPlan, Verdict, draining_revisions, gate_deadline, \
    hold, is_ready, left_at, plan_swap, start_deadline, unseen_draining
from drafter_operator.kube import object_path
from drafter_operator.acceptance import drift as d
from drafter_operator.acceptance import prometheus_source as prom
from drafter_operator.acceptance.message import ACTION_IN_PROGRESS, SPECULATION_DISABLED
from drafter_operator.resources.engine import EngineHttp, EnginePod, engine_deployment, engine_pod_spec, service_revision, \
    startup_limit_seconds
from drafter_operator.resources import capture
from drafter_operator.resources.labels import drafter_summary
from drafter_operator.resources.group import engine_group
from drafter_operator.resources.workloads import kind_of, workload_path

if TYPE_CHECKING:
    from drafter_operator.acceptance.measurement import Measurement


@dataclass(frozen=True)
class DesiredRevision:
    """What this cycle serves toward: the running spec (the spec, or an onDegraded action's drafter in
    force), the batch-size schedule it renders, and the revision they hash to."""

    running: RunningSpec
    schedule: list[tuple[int, int, int]] | None
    schedule_status: dict | None  # status.speculationSchedule
    revision: str


def decide(state: ServingState) -> Plan:
    body = state.serving
    status = body.get("status") or {}
    serving = validated(state)
    if not isinstance(serving, DrafterServing):
        return refused(state, serving)
    observed, meta = state.observed, body["metadata"]
    spec_image = serving.spec.image or state.default_images[serving.spec.engine]
    active = service_revision(observed.service) if observed.service else status.get("activeRevision")
    target = choose_revision(serving.spec, spec_image, status, observed.measured)
    judged, benchmarked = judge_acceptance(state, serving, status, target, active)
    if judged.action:  # an onDegraded action taken now changes what runs, in this same decision
        target = choose_revision(serving.spec, spec_image, status, observed.measured, judged.action)
    spec, image, desired = target.running.spec, target.running.image, target.revision
    retried = retry_request(meta, status, desired)
    status = {**status, **(retried or {})}
    compatible = check_compatibility(spec, image, desired, observed, status, takes_traffic(desired, active, status))
    # An active revision whose Deployment someone deleted (`kubectl delete deploy` to restart it, a GitOps
    # prune) is still what the Service points at: the swap goes on through its gate, never to the pending
    # revision at once, and the active one is rebuilt from its record where it can be (child_writes).
    # A DrafterTraining's Promote governs the swap to its drafter's revision once (its strategy and gate);
    # every other swap follows spec.swap as the user left it.
    promotion = promotion_swap(meta.get("annotations"), status.get("promotion"), spec,
                               Desired(desired, revision_hash(spec, image)), _good(status),
                               target.running.action is not None)
    swap, swap_input = swap_step(state, status, target, active, compatible, promotion)
    revisions = updated_revisions(status.get("revisions") or [],
                                  revision_record(spec, image, desired, timestamps.format_seconds(state.now)),
                                  swap, judged.mark_degraded)
    plan = Plan(recheck_at=next_deadline(swap_input, swap) if swap_input else None,
                       waiting=waits(swap, swap_input), read_nodes=compatible.read_nodes)
    plan.record_first = records_first(status, revisions, swap, judged, retried)
    status = {**status, **plan.record_first}
    gate = promotion.request.gate if promotion.request else spec.swap.gate
    port = published_port(observed.service, status, engines.engine(spec.engine).DEFAULT_PORT)
    plan.writes, conflict = name_conflicts(child_writes(state, serving, target, swap, gate, port), observed)
    if conflict:
        swap.progressing = conflict
        if ("services", meta["name"]) in observed.foreign:
            swap.ready = conflict  # the endpoint's name routes to someone else's pods: nothing of ours serves
        if target.running.action and (active != desired or observed.service is None):  # blocked, not "under way"
            judged.degraded = action_blocked(target.running.action, conflict.message, active)
    promoted, drifted = drift_step(state, serving, status, swap, target, judged)
    covered = length_verdict(spec, meta.get("annotations"), _condition(status, LENGTH_CONDITION))
    obeyed = schedule_verdict(swap.active, target.schedule_status, current_measurement(state),
                              swap.progressing is not None and swap.progressing.status == "True",
                              _condition(status, SCHEDULE_CONDITION))
    new_status = status_fields(state, status, swap, revisions, port, judged, compatible.condition,
                               ((d.CONDITION, drifted), (LENGTH_CONDITION, covered), (SCHEDULE_CONDITION, obeyed)))
    new_status.update(gating=gating_record(status, swap, promotion, state.now), promotion=promotion.record)
    acceptance_status(new_status, status, judged, benchmarked, promoted)
    new_status["speculationSchedule"] = target.schedule_status  # None removes it, as gating and promotion
    plan.status = changed_fields(status, new_status)
    plan.deletes = revision_deletes(meta, swap.delete, observed) + stale_gate_deletes(meta, observed.gates.get(desired),
                                                                                     status)
    plan.events = decision_events(status, new_status, swap, compatible, judged, desired if retried else None)
    swapped = (promotion.request.strategy if promotion.request else spec.swap.strategy) if swap.switched_from else None
    plan.counts = traffic_counts(spec.engine, swapped, bool(swap.mark_failed and active is not None) or judged.rolled_back)
    return plan


def traffic_counts(engine: str, swapped: str | None, rolled_back: bool) -> list[Count]:
    """The counters of traffic this decision moves: a swap by its strategy, a rollback."""
    return ([Count("swap", (engine, swapped))] if swapped else []) + \
        ([Count("rollback", (engine,))] if rolled_back else [])


def validated(state: ServingState) -> DrafterServing | list[str]:
    """The DrafterServing, or what is wrong with its spec (schema, cross-field rules, the tenancy policy)."""
    try:
        serving = DrafterServing.model_validate(state.serving)
    except pydantic.ValidationError as exc:
        return [f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]
    return serving_problems(serving.spec) + tenancy_problems(serving, state) or serving


def choose_revision(spec, spec_image: str, status: dict, measured: Mapping[str, list[dict]],
                    action: dict | None = None) -> DesiredRevision:
    """The revision to run: the spec's, or the drafter of the onDegraded action in force (``action``: one
    taken in this decision, else status.degradedAction), with its learned schedule."""
    running = running_spec(spec, spec_image, status if action is None else {**status, "degradedAction": action})
    schedule, schedule_status = speculation_schedule(running.spec, running.image, measured,
                                                     status.get("speculationSchedule"))
    return DesiredRevision(running, schedule, schedule_status, revision_hash(running.spec, running.image, schedule))


def current_measurement(state: ServingState) -> Measurement | None:
    """The latest acceptance measurement, unless it measured another incarnation of this serving's name."""
    measurement = state.acceptance
    if measurement is not None and measurement.serving_uid not in (None, state.serving["metadata"].get("uid")):
        return None
    return measurement


def judge_acceptance(state: ServingState, serving: DrafterServing, status: dict, target: DesiredRevision,
                     active: str | None) -> tuple[AcceptanceDecision, dict | None]:
    """The acceptance verdict and action on the active revision, and status.lastBenchmark (where an
    ``auto`` threshold learns from: the benchmarks that describe the active drafter)."""
    observed = state.observed
    describing = measured_as(active, target.schedule_status)
    benchmarked = last_benchmark(newest_first(observed.measured.get(r, []) for r in describing),
                                 status.get("lastBenchmark"), describing)
    judged = decide_acceptance(serving.spec, target.running, status, active, target.revision,
                               current_measurement(state), status.get("revisions") or [], state.now, benchmarked,
                               describing, routed=observed.service is not None)
    return judged, benchmarked


def drift_step(state: ServingState, serving: DrafterServing, status: dict, swap: SwapPlan, target: DesiredRevision,
               judged: AcceptanceDecision) -> tuple[dict | None, Verdict | None]:
    """status.acceptance.atPromotion for the revision that serves after this step (what its gate measured), and
    DriftDetected: the acceptance watch's drift verdict against it, where the figures compare."""
    describing = measured_as(swap.active, target.schedule_status)
    recorded = (status.get("acceptance") or {}).get("atPromotion")
    promoted = at_promotion(recorded, state.observed.gates, describing)
    acceptance = serving.spec.acceptance
    baseline = d.baseline(promoted, acceptance.drift_tolerance, describing) if acceptance else None
    swapping = swap.progressing is not None and swap.progressing.status == "True"
    anew = promoted is not None and promoted != recorded  # a new revision took traffic through its gate
    drifted = drift_verdict(acceptance, baseline, current_measurement(state), swap.active, swapping,
                            _condition(status, d.CONDITION), promoted_anew=anew, refresh=judged.write_acceptance)
    return promoted, drifted


def _condition(status: dict, kind: str) -> dict | None:
    return next((c for c in status.get("conditions") or [] if c.get("type") == kind), None)


def _good(status: dict) -> frozenset[str]:
    return frozenset(r["name"] for r in status.get("revisions") or [] if r.get("good"))


def takes_traffic(revision: str, active: str | None, status: dict) -> bool:
    """Whether the revision takes traffic and has been Ready: what a known-bad row found late never tears down."""
    return revision == active and revision in _good(status)


def swap_step(state: ServingState, status: dict, target: DesiredRevision, active: str | None, compatible: Compatibility,
              promotion: PromotionSwap) -> tuple[SwapPlan, SwapInput | None]:
    """The swap planner's next step toward the target (none while a known-bad combination blocks the first
    revision), and its input (None then)."""
    if compatible.blocked and active is None:
        return SwapPlan(ready=Verdict("False", "KnownBadCombination", compatible.known.message),
                        progressing=Verdict("False", "Blocked", "spec.drafter.allowKnownBad is false")), None
    spec, desired, observed = target.running.spec, target.revision, state.observed
    gate = promotion.request.gate if promotion.request else spec.swap.gate
    switched = switch_record(observed.service)
    revisions = status.get("revisions") or []
    swap_input = SwapInput(
        desired=active if compatible.blocked else desired,
        strategy=promotion.request.strategy if promotion.request else spec.swap.strategy, replicas=spec.replicas,
        startup_timeout=dt.timedelta(seconds=startup_limit_seconds(spec)), active=active,
        failed=frozenset(r["name"] for r in revisions if r.get("good") is False),
        # A revision a known-bad row refuses on its GPU fails as one whose engine cannot start.
        revisions=refused_revisions(observed.revisions, compatible, desired, takes_traffic(desired, active, status)),
        now=state.now, previous=switched.get(PREVIOUS_REVISION_ANNOTATION),
        switched_at=timestamps.parse(switched[SWITCHED_AT_ANNOTATION]) if switched.get(SWITCHED_AT_ANNOTATION) else None,
        drains=recorded_drains(observed.service),
        drain=state.drain,
        drain_timeout=max(state.drain, dt.timedelta(seconds=parse_duration(spec.swap.drain_timeout))),
        in_flight=observed.in_flight,
        # An onDegraded action's revision is not held to the speculation gate: it is the way out of a
        # drafter that no longer pays (no speculation, or a drafter that was good), and a gate it fails
        # would leave the degraded drafter serving while status reports the action.
        gated=gate is not None and target.running.action is None,
        gate=gate_verdict(None if stale_gate(observed.gates.get(desired), status) else observed.gates.get(desired)),
        gate_source=promotion.gate_source,
        gate_timeout=dt.timedelta(seconds=parse_duration(spec.swap.gate_timeout)),
        gating_since=gating_since(status.get("gating"), desired),
        placement_timeout=dt.timedelta(seconds=parse_duration(spec.startup.placement_timeout)),
        engine_restarts=spec.startup.engine_restarts,
        failure_reasons={r["name"]: r["failedReason"] for r in revisions if r.get("failedReason")},
        good=_good(status))
    swap = plan_swap(swap_input)
    swap.ready = preflight_ready(swap.ready, observed)
    stop_refused(swap, desired, compatible)
    return swap, swap_input


def records_first(status: dict, revisions: list[dict], swap: SwapPlan, judged: AcceptanceDecision,
                  retried: dict | None) -> dict:
    """The status fields written before any child is touched: a revision's verdict (so a restart never
    retries a failed one), an onDegraded action (a restart mid-rollback finds it and finishes it), a retry."""
    first: dict = {}
    if revisions != status.get("revisions") and (swap.mark_failed or swap.mark_good or judged.mark_degraded):
        first = {"revisions": revisions}
    if judged.action:
        first = {**first, "degradedAction": judged.action,
                 "speculationDisabled": judged.action["message"]
                 if judged.action["action"] == "DisableSpeculation" else None}
    if retried:
        first = {**retried, **first}
    return first


def child_writes(state: ServingState, serving: DrafterServing, target: DesiredRevision, swap: SwapPlan, gate,
                 port: int) -> list[Write]:
    """The writes of the swap's step, in order: each revision's Deployment, the gate benchmark, the Service."""
    body, observed = state.serving, state.observed
    spec, image, desired = target.running.spec, target.running.image, target.revision
    engine = engines.engine(spec.engine)
    argv = engine.render_command(spec, schedule=target.schedule) if target.schedule else engine.render_command(spec)
    files = {**(engine.schedule_files(target.schedule) if target.schedule else {}), **capture.engine_files(spec)}
    pod = EnginePod(engine_pod_spec(serving, image, argv, EngineHttp.of(engine), state.operator_image, files), files,
                    worker_argv(spec, target.schedule))
    writes: list[Write | None] = []
    for revision, replicas in swap.scale.items():
        if revision == desired:
            writes.append(revision_write(state, serving, revision, replicas, spec, pod))
        elif revision in observed.deployments:
            writes.append(scale_write(body["metadata"]["namespace"], observed.deployments[revision], replicas))
        elif replicas > 0:
            writes.append(restore_write(state, serving, revision, replicas))
    writes.append(gate_write(body, spec, gate, swap.run_gate, observed, engine.DEFAULT_PORT))
    writes.append(pointer_write(serving, body, observed, swap.service_revision, swap.switched_from, port, state.now,
                                swap.still_draining))
    return [w for w in writes if w]


def worker_argv(spec, schedule) -> list[str] | None:
    """A worker pod's command of a replica that spans nodes (engines/group.py), None for a replica on one node."""
    if (spec.resources.nodes_per_replica or 1) <= 1:
        return None
    engine = engines.engine(spec.engine)
    return engine.render_command(spec, schedule=schedule, worker=True) if schedule else \
        engine.render_command(spec, worker=True)


def revision_write(state: ServingState, serving: DrafterServing, revision: str, replicas: int, spec,
                   pod: EnginePod) -> Write | None:
    """Create a revision's Deployment (a LeaderWorkerSet where a replica spans nodes), or bring it to ``replicas``
    and the spec's pod settings."""
    body = state.serving
    annotations = {DRAFTER_ANNOTATION: drafter_summary(spec), ENGINE_ANNOTATION: spec.engine,
                   SERVING_GENERATION_ANNOTATION: str(body["metadata"].get("generation")),
                   POD_SETTINGS_ANNOTATION: pod_settings_hash(spec)}
    manifest = engine_group(serving, revision, replicas, pod, pod.worker_argv, annotations) \
        if pod.worker_argv is not None else \
        engine_deployment(serving, revision, replicas, pod.spec, files=pod.files, annotations=annotations)
    return deployment_write(body, manifest, state.observed.deployments.get(revision))


def restore_write(state: ServingState, serving: DrafterServing, revision: str, replicas: int) -> Write | None:
    """Re-create the Deployment of a revision the swap keeps (the active one) after someone deleted it, from its
    status record, when the current spec with the record's drafter and image rebuilds exactly that revision;
    None when it cannot (the target, engine or GPUs changed since): then only the swap's own path goes on."""
    record = next((r for r in (state.serving.get("status") or {}).get("revisions") or [] if r.get("name") == revision),
                  None)
    rebuilt = restored_spec(serving.spec, record) if record else None
    if rebuilt is None:
        return None
    spec, image = rebuilt
    engine = engines.engine(spec.engine)
    files = capture.engine_files(spec)
    pod_spec = engine_pod_spec(serving.model_copy(update={"spec": spec}), image, engine.render_command(spec),
                               EngineHttp.of(engine), state.operator_image, files)
    return revision_write(state, serving.model_copy(update={"spec": spec}), revision, replicas, spec,
                          EnginePod(pod_spec, files, worker_argv=worker_argv(spec, None)))


def status_fields(state: ServingState, status: dict, swap: SwapPlan, revisions: list[dict], port: int,
                  judged: AcceptanceDecision, compatible: Verdict | None, more: tuple = ()) -> dict:
    """The status the decision leads to: revisions, pointer, endpoint and conditions (``more``: further
    (type, verdict) conditions, DriftDetected and LengthCovered)."""
    meta = state.serving["metadata"]
    namespace, name, generation = meta["namespace"], meta["name"], meta.get("generation")
    switched = switch_record(state.observed.service)
    host = f"{name}.{namespace}.svc.cluster.local"
    return {
        "observedGeneration": generation,
        "activeRevision": swap.active,
        # The Service records the revision traffic left in the same write that moves it: a restart after
        # that write but before this status landed still finds it there.
        "previousRevision": swap.switched_from or switched.get(PREVIOUS_REVISION_ANNOTATION)
        or status.get("previousRevision"),
        "revisions": revisions,
        "serving": serving_now(swap.active, revisions),
        "endpoint": {"host": host, "port": port, "url": f"http://{host}:{port}/v1"},
        "conditions": conditions.merge(status.get("conditions"), [
            ("Ready", swap.ready), ("Progressing", swap.progressing), ("Degraded", judged.degraded),
            ("DrafterCompatible", compatible), *more,
        ], generation, state.now),
    }


def gating_record(status: dict, swap: SwapPlan, promotion: PromotionSwap, now: dt.datetime) -> dict | None:
    """status.gating: when the desired revision's gating began (its deadline counts from there, across restarts)."""
    if not swap.run_gate:
        return None
    since = gating_since(status.get("gating"), swap.run_gate)
    return {"revision": swap.run_gate, "since": timestamps.format_seconds(since or now),
            "source": promotion.gate_source}


def decision_events(status: dict, new_status: dict, swap: SwapPlan, compatible: Compatibility,
                    judged: AcceptanceDecision, retried: str | None) -> list[Event]:
    """The Events of a decision: a retry of revision ``retried``, the swap planner's, the condition
    transitions, a DrafterCompatible problem, the acceptance decision's, drift starting or clearing, a
    context length past the trained one, and an engine that stops or starts obeying its schedule."""
    events: list[Event] = []
    if retried:
        events.append(("Normal", "RetryRequested", f"{RETRY_ANNOTATION}={status['retryRequest']}: revision "
                                                   f"{retried} may start again"))
    # The swap planner's own Event says more than the condition transition with the same reason.
    posted = {reason for _, reason, _ in swap.events}
    events += [event for event in swap.events + transition_events(status.get("conditions"), new_status["conditions"])
               if event[1] not in posted or event in swap.events]
    return events + compatibility_events(compatible) + judged.events + \
        drift_events(status.get("conditions"), new_status["conditions"]) + \
        length_events(status.get("conditions"), new_status["conditions"]) + \
        schedule_events(status.get("conditions"), new_status["conditions"])



def waits(swap: SwapPlan, swap_input: SwapInput | None) -> bool:
    """Whether the step waits on what the view shows: a change under way (pods to stop or start, a gate) or a drain
    (one the view may no longer show included)."""
    return (swap.progressing is not None and swap.progressing.status == "True") or bool(
        swap_input and (draining_revisions(swap_input) or unseen_draining(swap_input)))


def revision_deletes(meta: dict, revisions: list[str], observed: Observed) -> list[str]:
    """The paths of the revisions' Deployments or LeaderWorkerSets to delete (those that exist)."""
    return [workload_path(meta["namespace"], kind_of(observed.deployments[revision]),
                          observed.deployments[revision]["metadata"]["name"])
            for revision in revisions if revision in observed.deployments]


def stale_gate_deletes(meta: dict, gate: dict | None, status: dict) -> list[str]:
    """A stale gate (`stale_gate`) is deleted, so that the retried revision's gate runs again under its name."""
    if not stale_gate(gate, status):
        return []
    return [object_path(API_GROUP_VERSION, BENCHMARK_PLURAL, meta["namespace"], gate["metadata"]["name"])]


def stale_gate(benchmark: dict | None, status: dict) -> bool:
    """A failed gate run before the last retry request (``drafter.dev/retry``): no verdict on the retried
    revision, which is gated again (pure). A passed gate stays a verdict whatever was retried since."""
    if benchmark is None or (gate_verdict(benchmark) or Verdict("True", "", "")).status == "True":
        return False
    attempt = (benchmark["metadata"].get("annotations") or {}).get(GATE_ATTEMPT_ANNOTATION)
    return attempt != status.get("retryRequest")


def gate_verdict(benchmark: dict | None) -> Verdict | None:
    """The gate's verdict from its DrafterBenchmark, once that finished (pure)."""
    status = (benchmark or {}).get("status") or {}
    if status.get("state") == "Succeeded":
        result = status.get("result") or {}
        passed = result.get("verdict") == "Passed"
        diverged = ((result.get("equivalence") or {}).get("defects") or 0) > 0
        return Verdict("True" if passed else "False",
                       "GateMet" if passed else "OutputDiverged" if diverged else "BelowGate",
                       result.get("verdictMessage") or ("passed" if passed else "no verdict"))
    if status.get("state") == "Failed":
        failed = next((c for c in status.get("conditions") or [] if c.get("type") == "Failed"), {})
        return Verdict("False", "GateBenchmarkFailed", f"its benchmark failed: {failed.get('message', 'no reason')}")
    return None


def tenancy_problems(serving: DrafterServing, state: ServingState) -> list[str]:
    """What the administrator's configuration refuses: an image or ServiceAccount it does not allow, a
    Prometheus endpoint it did not configure. Checked before anything is created."""
    spec = serving.spec
    image = spec.image or state.default_images[spec.engine]
    pod = spec.pod
    images = [("spec.image" if spec.image else f"spec.image (default for {spec.engine})", image)]
    if spec.capture is not None and spec.capture.redaction is not None:
        images.append(("spec.capture.redaction.image", spec.capture.redaction.image))
    problems = state.tenant_policy.problems(
        serving.namespace, images, ("spec.pod.serviceAccountName", pod.service_account_name if pod else None))
    if spec.acceptance is not None and spec.acceptance.source == "prometheus":
        problem = prom.endpoint_problem(spec.acceptance.prometheus, state.prometheus_endpoints)
        problems += [problem] if problem else []
    return problems


def refused(state: ServingState, problems: list[str]) -> Plan:
    """A spec the operator refuses (schema, cross-field rules, the administrator's tenancy policy, an upgraded
    operator's rules): what the SRE paged at night wants. What serves keeps serving as it runs, and Ready says
    so; nothing new starts; a swap's pending revision stops (after its drain, if traffic had left it), so no
    second revision holds GPUs for a spec that cannot go on; Progressing says InvalidSpec with what to fix."""
    body, observed, now = state.serving, state.observed, state.now
    status, meta = body.get("status") or {}, body["metadata"]
    message = "; ".join(problems)
    active = service_revision(observed.service) if observed.service else status.get("activeRevision")
    switched = switch_record(observed.service)
    inp = SwapInput(
        desired=active or "", strategy="BlueGreen", replicas=0, startup_timeout=dt.timedelta(0), active=active,
        failed=frozenset(), revisions=observed.revisions, now=now, previous=switched.get(PREVIOUS_REVISION_ANNOTATION),
        switched_at=timestamps.parse_aware(switched.get(SWITCHED_AT_ANNOTATION)),
        drains=recorded_drains(observed.service), drain=state.drain,
        drain_timeout=max(state.drain, dt.timedelta(seconds=parse_duration(refused_drain_timeout(body)))),
        in_flight=observed.in_flight)
    held = hold(inp)
    pointer = restored_pointer(state, active)
    routed = observed.service is not None or pointer is not None
    ready = held.ready if held.ready and routed else Verdict("False", "InvalidSpec", message)
    updates = [("Ready", ready), ("Progressing", Verdict("False", "InvalidSpec", f"{message}. Fix the spec to continue"
                                                         + (f"; revision {active} keeps serving" if routed and held.ready
                                                            else "")))]
    degraded = next((c for c in status.get("conditions") or [] if c.get("type") == "Degraded"), {})
    if not routed and degraded.get("reason") == SPECULATION_DISABLED and status.get("degradedAction"):
        # No Service routes to the action's revision (deleted, and a refused spec cannot render it again).
        updates.append(("Degraded", action_blocked(status["degradedAction"], "the Service is gone and the spec is "
                                                   "refused", active)))
    elif degraded.get("reason") == ACTION_IN_PROGRESS and status.get("degradedAction"):
        # The action's revision stopped with the refusal: it is not under way until the spec is fixed.
        updates.append(("Degraded", action_blocked(status["degradedAction"], f"the spec is refused ({message})",
                                                   active)))
    new_status = {"observedGeneration": meta.get("generation"), "gating": None, "conditions": conditions.merge(
        status.get("conditions"), updates, meta.get("generation"), now)}
    changed = changed_fields(status, new_status)
    plan = Plan(status=changed, events=[("Warning", "InvalidSpec", message)] if "conditions" in changed else [])
    plan.writes = [pointer] if pointer else []
    plan.deletes = revision_deletes(meta, held.delete, observed)
    future = [m + dt.timedelta(seconds=1) for m in drain_moments(inp)]
    plan.recheck_at = min((m for m in future if m > now), default=None)
    # The active revision missing from the view may be a Deployment out of the watches' sight (a label removed):
    # a fresh read finds it and puts the labels back, where a refused spec cannot create it again.
    plan.waiting = bool(draining_revisions(inp)) or bool(active and active not in observed.revisions)
    return plan


def restored_pointer(state: ServingState, active: str | None) -> Write | None:
    """The Service, pointing at the revision that serves, when someone deleted it while the spec is refused: what
    serves keeps serving, and the Service is how. None when it exists, nothing serves, or the spec cannot be read
    (only the administrator's policy refuses it) to render one."""
    observed = state.observed
    if observed.service is not None or active not in observed.revisions or (
            "services", state.serving["metadata"]["name"]) in observed.foreign:
        return None
    try:
        serving = DrafterServing.model_validate(state.serving)
    except pydantic.ValidationError:
        return None
    port = published_port(None, state.serving.get("status") or {}, engines.engine(serving.spec.engine).DEFAULT_PORT)
    return pointer_write(serving, state.serving, observed, active, None, port, state.now)


def refused_drain_timeout(body: dict) -> str:
    """spec.swap.drainTimeout of a spec the models refuse, when it still reads as a duration, else the default."""
    value = ((body.get("spec") or {}).get("swap") or {}).get("drainTimeout")
    try:
        parse_duration(value)
        return value
    except (TypeError, ValueError):
        return SwapSpec.model_fields["drain_timeout"].default


#: While an old revision waits for its requests to finish, how often its engines are asked again.
DRAIN_POLL = dt.timedelta(seconds=5)


def drain_moments(inp: SwapInput, skip: str | None = None) -> list[dt.datetime]:
    """When each revision that drains (but ``skip``) could stop draining: its least drain's end, or, while its
    engines still report requests, the next look at them and its drain timeout."""
    moments = []
    for name in draining_revisions(inp):
        since = left_at(inp, name)
        if name == skip or since is None:
            continue
        if inp.now - since < inp.drain:
            moments.append(since + inp.drain)
        else:  # waiting for its requests to finish: look again soon, and stop waiting at the limit
            moments += [inp.now + DRAIN_POLL, since + inp.drain_timeout]
    return moments


def next_deadline(inp: SwapInput, plan: SwapPlan) -> dt.datetime | None:
    """The earliest future moment at which `plan_swap` could answer differently with nothing else changed:
    a revision that is not Ready reaching its startup timeout, or a revision traffic left (now, or at
    an earlier switch) finishing its drain. One second past each, since both comparisons are strict."""
    moments = [start_deadline(r, inp) for r in inp.revisions.values() if not is_ready(r, inp.replicas)]
    if plan.run_gate:
        moments.append(gate_deadline(inp) or inp.now + inp.gate_timeout)
    if plan.switched_from:
        moments.append(inp.now + inp.drain)
    moments += drain_moments(inp, skip=plan.switched_from)
    future = [m + dt.timedelta(seconds=1) for m in moments if m + dt.timedelta(seconds=1) > inp.now]
    return min(future, default=None)


