"""What one DrafterServing reconcile should do, as a pure function: `decide(ServingState) -> ServingPlan`.

Input: the DrafterServing as watched (spec and the status we wrote), its children as the operator's
kopf indexes see them (`Observed`), and the clock. Output: the writes (Deployments and the Service to
create or patch, in order), the status patch, the Deployments to delete, the Events, the swap and
rollback counts, and the next moment the clock alone would change the answer. `serving.py` applies a
plan and nothing else; the swap state machine itself is `swap.plan_swap`, also pure.

Acceptance measurements (taken by the serving loop, `acceptance_monitor.py`) are one more input:
`serving_acceptance.py` turns them into the Degraded condition, status.acceptance and the onDegraded
action, which can change what the serving runs (a Rollback or DisableSpeculation in force).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Mapping

import kopf
import pydantic

from drafter_operator import engines
from drafter_operator.engines import dynamic
from drafter_operator.api import DrafterServing, parse_duration, serving_problems
from drafter_operator.api.serving import DrafterSpec
from drafter_operator.controllers import compatibility, conditions
from drafter_operator.controllers.benchmark import operator_image
from drafter_operator.controllers.revisions import drafter_summary, measured_as, pod_settings_hash, revision_hash
from drafter_operator.controllers.serving_acceptance import (
    ACTION_BLOCKED,
    SPECULATION_DISABLED,
    AcceptanceDecision,
    decide_acceptance,
    revision_record,
    running_spec,
)
from drafter_operator.controllers.promotion_gate import promotion_swap
from drafter_operator.controllers.swap import RevisionObservation, SwapInput, SwapPlan, Verdict, draining, \
    gate_deadline, is_ready, plan_swap, start_deadline
from drafter_operator.kube import object_path
from drafter_operator.monitoring import prometheus_source as prom
from drafter_operator.resources.engine import (
    ENGINE_CONTAINER,
    PREVIOUS_REVISION_ANNOTATION,
    SWITCHED_AT_ANNOTATION,
    engine_deployment,
    engine_pod_spec,
    startup_limit_seconds,
    service_revision,
    serving_service,
)
from drafter_operator.resources.gate import GATE_LABEL, K_ANNOTATION, gate_benchmark
from drafter_operator.resources.labels import REVISION_LABEL, deployment_name
from drafter_operator.resources.pod_policy import TenantPolicy

if TYPE_CHECKING:
    from drafter_operator.controllers.acceptance_monitor import Measurement

Event = tuple[str, str, str]  # (type, reason, message), posted on the DrafterServing


def parse_time(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def iso(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Observed:
    deployments: dict[str, dict] = field(default_factory=dict)  # revision -> Deployment
    revisions: dict[str, RevisionObservation] = field(default_factory=dict)
    service: dict | None = None
    # Children with the serving's labels that another owner holds: (plural, name). Creating one of
    # these names would fail with AlreadyExists until someone deletes it.
    foreign: frozenset[tuple[str, str]] = frozenset()
    ready_pod_ips: dict[str, list[str]] = field(default_factory=dict)  # revision -> its Ready pods' IPs
    gates: dict[str, dict] = field(default_factory=dict)  # revision -> its gate DrafterBenchmark
    # revision -> every finished DrafterBenchmark of it (gates and runs by hand), newest first
    measured: dict[str, list[dict]] = field(default_factory=dict)
    # revision -> what its pods' drafter preflight init containers said, once one finished
    preflight: dict[str, compatibility.PreflightOutcome] = field(default_factory=dict)
    # revision -> requests its engines report running or waiting, for a revision that drains (read from
    # its pods' metrics by the serving loop); absent when not read or unknown
    in_flight: dict[str, int] = field(default_factory=dict)


def observed_from(deployments: Iterable[dict], pods: Iterable[dict], service: dict | None,
                  owner_uid: str | None = None, benchmarks: Iterable[dict] = ()) -> Observed:
    """Group a serving's Deployments and pods (from the operator's kopf indexes) by revision (pure).

    `owner_uid`: only children owned by this DrafterServing count. A serving deleted and re-created
    under the same name leaves children the garbage collector has not removed yet; taken for the new
    serving's, its Service would look like the active revision and its Deployments like revisions."""
    pods, deployments = list(pods), list(deployments)
    foreign = {(plural, child["metadata"]["name"]) for plural, children in (("deployments", deployments),
                                                                           ("services", [service] if service else []))
               for child in children if not owned_by(child, owner_uid)}
    observed = Observed(service=service if owned_by(service, owner_uid) else None, foreign=frozenset(foreign))
    for deployment in deployments:
        revision = deployment["metadata"]["labels"].get(REVISION_LABEL)
        if not revision or deployment["metadata"].get("deletionTimestamp") or not owned_by(deployment, owner_uid):
            continue
        own = [p for p in pods if p["metadata"].get("labels", {}).get(REVISION_LABEL) == revision]
        unschedulable = next((c.get("message") for p in own for c in p.get("status", {}).get("conditions") or []
                              if c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"), None)
        observed.deployments[revision] = deployment
        observed.ready_pod_ips[revision] = sorted(
            p["status"]["podIP"] for p in own if (p.get("status") or {}).get("podIP") and not p["metadata"].get(
                "deletionTimestamp") and any(c.get("type") == "Ready" and c.get("status") == "True"
                                             for c in p["status"].get("conditions") or []))
        preflight = compatibility.revision_preflight(own)
        if preflight is not None:
            observed.preflight[revision] = preflight
        # A failed preflight fails the start at once, in seconds: its engine never starts, and no restart helps.
        final = preflight is not None and preflight.failed
        exits = [] if final else sorted(filter(None, map(engine_exit_with_restarts, own)), key=lambda e: -e[1])
        exited, restarts = (preflight.failure(), 0) if final else (exits[0] if exits else (None, 0))
        current = [p for p in own if not p["metadata"].get("deletionTimestamp")]
        observed.revisions[revision] = RevisionObservation(
            name=revision, replicas=deployment["spec"].get("replicas", 1),
            ready=deployment.get("status", {}).get("readyReplicas", 0) if _current(deployment) else 0,
            pods=len(own), created=parse_time(deployment["metadata"]["creationTimestamp"]),
            unschedulable=unschedulable, exited=exited, exit_restarts=restarts, exit_final=final,
            scheduled=min(filter(None, map(scheduled_at, current)), default=None),
            placement_started=min((parse_time(p["metadata"]["creationTimestamp"]) for p in current
                                   if p["metadata"].get("creationTimestamp")), default=None))
    for benchmark in benchmarks:
        labels = benchmark["metadata"].get("labels") or {}
        gate = bool(labels.get(GATE_LABEL))
        if gate and owned_by(benchmark, owner_uid) and labels.get(REVISION_LABEL):
            observed.gates[labels[REVISION_LABEL]] = benchmark
        measured = benchmark_revision(benchmark)
        if measured and (owned_by(benchmark, owner_uid) or not gate):  # another serving's gate never counts
            observed.measured.setdefault(measured, []).append(benchmark)
    for revision, runs in observed.measured.items():
        observed.measured[revision] = newest_first([runs])
    return observed


def newest_first(groups: Iterable[list[dict]]) -> list[dict]:
    """Finished DrafterBenchmarks, newest completion first (the name breaks ties)."""
    return sorted((b for runs in groups for b in runs),
                  key=lambda b: ((b.get("status") or {}).get("completionTime") or "", b["metadata"]["name"]), reverse=True)


#: How much of an exited engine's last output (its termination message: the log tail) a condition quotes.
EXIT_MESSAGE_CHARS = 600


def scheduled_at(pod: dict) -> dt.datetime | None:
    """When the scheduler placed the pod (its PodScheduled=True transition), None while it waits."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "True":
            stamp = condition.get("lastTransitionTime") or pod["metadata"].get("creationTimestamp")
            return parse_time(stamp) if stamp else None
    return None


def engine_exit_with_restarts(pod: dict) -> tuple[str, int] | None:
    """`engine_exit` and how often the kubelet has restarted that engine container already."""
    exit_text = engine_exit(pod)
    if exit_text is None:
        return None
    engine = next((c for c in (pod.get("status") or {}).get("containerStatuses") or []
                   if c.get("name") == ENGINE_CONTAINER), {})
    return exit_text, int(engine.get("restartCount") or 0)


def engine_exit(pod: dict) -> str | None:
    """How the engine container of a pod that was never Ready exited: exit code and the end of its
    output (terminationMessagePolicy FallbackToLogsOnError puts the log tail there). None while it runs,
    or once it has been Ready (an engine that served and then died is restarted, not failed)."""
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        if container.get("name") != ENGINE_CONTAINER or container.get("ready") or container.get("started"):
            continue
        terminated = (container.get("state") or {}).get("terminated") or \
            (container.get("lastState") or {}).get("terminated")
        if not terminated or terminated.get("exitCode") in (None, 0):
            continue
        output = " ".join((terminated.get("message") or "").split())
        if len(output) > EXIT_MESSAGE_CHARS:
            output = "..." + output[-EXIT_MESSAGE_CHARS:]
        return f"engine exited with code {terminated['exitCode']}" + (f": {output}" if output else "")
    return None


def benchmark_revision(benchmark: dict) -> str | None:
    """The revision a finished DrafterBenchmark measured (status.revision; a gate's label for gates
    recorded before status had it), None while it runs, when it failed, or when it measured no single one."""
    status = benchmark.get("status") or {}
    if status.get("state") != "Succeeded" or not status.get("result"):
        return None
    labels = benchmark["metadata"].get("labels") or {}
    return status.get("revision") or (labels.get(REVISION_LABEL) if labels.get(GATE_LABEL) else None)


def gate_verdict(benchmark: dict | None) -> Verdict | None:
    """The gate's verdict from its DrafterBenchmark, once that finished (pure)."""
    status = (benchmark or {}).get("status") or {}
    if status.get("state") == "Succeeded":
        result = status.get("result") or {}
        passed = result.get("verdict") == "Passed"
        return Verdict("True" if passed else "False", "GateMet" if passed else "BelowGate",
                       result.get("verdictMessage") or ("passed" if passed else "no verdict"))
    if status.get("state") == "Failed":
        failed = next((c for c in status.get("conditions") or [] if c.get("type") == "Failed"), {})
        return Verdict("False", "GateBenchmarkFailed", f"its benchmark failed: {failed.get('message', 'no reason')}")
    return None


def published_port(service: dict | None, status: dict, engine_port: int) -> int:
    """The port the serving's Service publishes, fixed for the serving's life (pure): the Service's own
    port once it exists, else the one status.endpoint already announced, else the engine's default at
    the first rollout. Clients hold the URL; an engine switch (vLLM 8000, SGLang 30000) must not move
    it, and need not: the Service targets the engine container's port by name."""
    ports = ((service or {}).get("spec") or {}).get("ports") or []
    if ports and isinstance(ports[0].get("port"), int):
        return ports[0]["port"]
    announced = (status.get("endpoint") or {}).get("port")
    return announced if isinstance(announced, int) else engine_port


def owned_by(child: dict | None, owner_uid: str | None) -> bool:
    if child is None or owner_uid is None:
        return child is not None
    return any(ref.get("uid") == owner_uid for ref in child["metadata"].get("ownerReferences") or [])


def _current(deployment: dict) -> bool:
    """readyReplicas only counts once the Deployment controller has seen the latest spec."""
    return deployment.get("status", {}).get("observedGeneration", 0) >= deployment["metadata"].get("generation", 0)


@dataclass(frozen=True)
class ServingState:
    """Everything one decision reads."""

    serving: dict  # the DrafterServing body: metadata, spec, and status as last written
    observed: Observed
    now: dt.datetime
    default_images: Mapping[str, str]
    drain: dt.timedelta  # how long an old revision keeps running after traffic left it
    acceptance: Measurement | None = None  # the latest look at the active revision's acceptance
    # The image of the engine pods' drafter preflight init container: the operator's own, which carries
    # the CLI (DRAFTER_OPERATOR_IMAGE, read where the state is built, not in decide).
    operator_image: str = field(default_factory=operator_image)
    # What the administrator allows tenants (chart values tenancy.* and prometheus.endpoints), read from the
    # operator's environment where the state is built.
    tenant_policy: TenantPolicy = field(default_factory=TenantPolicy.from_env)
    prometheus_endpoints: Mapping[str, str] = field(default_factory=prom.endpoints_from_env)


@dataclass(frozen=True)
class Write:
    verb: str  # "create" | "patch" (JSON merge patch)
    plural: str  # "deployments" | "services"
    path: str
    body: dict


@dataclass
class ServingPlan:
    # A revision verdict (good or failed) recorded before any child is touched, so a restart never
    # retries a failed revision; {} when there is none.
    record_first: dict = field(default_factory=dict)
    writes: list[Write] = field(default_factory=list)  # Deployments, then the Service
    status: dict = field(default_factory=dict)  # only the fields that changed
    deletes: list[str] = field(default_factory=list)  # object paths
    events: list[Event] = field(default_factory=list)
    swapped: str | None = None  # the swap strategy, when traffic moved in this step
    rolled_back: bool = False
    engine: str | None = None  # for the swap and rollback counters
    # The next moment the clock alone changes the answer (a startup timeout, a drain ending); None: only
    # a change of the serving or its children does.
    recheck_at: dt.datetime | None = None

    def writes_anything(self) -> bool:
        return bool(self.record_first or self.writes or self.status or self.deletes or self.events)


def decide(state: ServingState) -> ServingPlan:
    body = state.serving
    status = body.get("status") or {}
    try:
        serving = DrafterServing.model_validate(body)
    except pydantic.ValidationError as exc:
        return _invalid(body, status, [f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()],
                        state.now)
    problems = serving_problems(serving.spec) + tenancy_problems(serving, state)
    if problems:
        return _invalid(body, status, problems, state.now)

    meta = body["metadata"]
    namespace, name, generation = meta["namespace"], meta["name"], meta.get("generation")
    observed, now = state.observed, state.now
    engine = engines.engine(serving.spec.engine)
    spec_image = serving.spec.image or state.default_images[serving.spec.engine]
    running = running_spec(serving.spec, spec_image, status)

    active = service_revision(observed.service) if observed.service else status.get("activeRevision")
    schedule, schedule_status = speculation_schedule(running.spec, running.image, observed.measured,
                                                     status.get("speculationSchedule"))
    describing = measured_as(active, schedule_status)
    benchmarked = last_benchmark(newest_first(observed.measured.get(r, []) for r in describing),
                                 status.get("lastBenchmark"), describing)
    measurement = state.acceptance
    if measurement is not None and measurement.serving_uid not in (None, meta.get("uid")):
        measurement = None  # of another incarnation of this name
    judged = decide_acceptance(serving.spec, running, status, active,
                               revision_hash(running.spec, running.image, schedule),
                               measurement, status.get("revisions") or [], now, benchmarked, describing,
                               routed=observed.service is not None)
    if judged.action:  # an onDegraded action taken now changes what runs, in this same decision
        running = running_spec(serving.spec, spec_image, {**status, "degradedAction": judged.action})
        schedule, schedule_status = speculation_schedule(running.spec, running.image, observed.measured,
                                                         status.get("speculationSchedule"))
    spec, image = running.spec, running.image
    desired = revision_hash(spec, image, schedule)

    matched = compatibility.matching_known_bad(spec, image)
    known_bad = compatibility.unresolved(matched, observed.preflight.get(desired))
    blocked = bool(known_bad) and not spec.drafter.allow_known_bad
    known_verdict = _compatibility_verdict(known_bad, blocked, [e.id for e in matched if e not in known_bad])
    current_compatible = next((c for c in status.get("conditions") or [] if c["type"] == "DrafterCompatible"), None)
    compatible = compatibility.drafter_compatible(known_verdict, observed.preflight.get(desired), desired,
                                                  current_compatible)

    if active is not None and active not in observed.revisions and active != desired:
        active = None  # its Deployment is gone: nothing left to protect or fall back to
    retried = retry_request(meta, status, desired)
    if retried:
        status = {**status, **retried}
    failed = frozenset(r["name"] for r in status.get("revisions") or [] if r.get("good") is False)
    good = frozenset(r["name"] for r in status.get("revisions") or [] if r.get("good"))
    # A DrafterTraining's Promote governs the swap to its drafter's revision once (its strategy and gate);
    # every other swap follows spec.swap as the user left it.
    promotion = promotion_swap(meta.get("annotations"), status.get("promotion"), spec, desired,
                               revision_hash(spec, image), good, running.action is not None)
    strategy = promotion.request.strategy if promotion.request else spec.swap.strategy
    gate = promotion.request.gate if promotion.request else spec.swap.gate
    switch_record = ((observed.service or {}).get("metadata") or {}).get("annotations") or {}
    switched_at = switch_record.get(SWITCHED_AT_ANNOTATION)

    swap_input = None
    if blocked and active is None:
        swap = SwapPlan(ready=Verdict("False", "KnownBadCombination", known_verdict.message),
                        progressing=Verdict("False", "Blocked", "spec.drafter.allowKnownBad is false"))
    else:
        swap_input = SwapInput(
            desired=active if blocked else desired, strategy=strategy, replicas=spec.replicas,
            startup_timeout=dt.timedelta(seconds=startup_limit_seconds(spec)), active=active,
            failed=failed, revisions=observed.revisions, now=now,
            previous=switch_record.get(PREVIOUS_REVISION_ANNOTATION),
            switched_at=parse_time(switched_at) if switched_at else None, drain=state.drain,
            drain_timeout=max(state.drain, dt.timedelta(seconds=parse_duration(spec.swap.drain_timeout))),
            in_flight=observed.in_flight,
            # An onDegraded action's revision is not held to the speculation gate: it is the way out of a
            # drafter that no longer pays (no speculation, or a drafter that was good), and a gate it fails
            # would leave the degraded drafter serving while status reports the action.
            gated=gate is not None and running.action is None, gate=gate_verdict(observed.gates.get(desired)),
            gate_source=promotion.gate_source,
            gate_timeout=dt.timedelta(seconds=parse_duration(spec.swap.gate_timeout)),
            gating_since=gating_since(status.get("gating"), desired),
            placement_timeout=dt.timedelta(seconds=parse_duration(spec.startup.placement_timeout)),
            engine_restarts=spec.startup.engine_restarts,
            failure_reasons={r["name"]: r["failedReason"] for r in status.get("revisions") or [] if r.get("failedReason")},
            good=good)
        swap = plan_swap(swap_input)
        swap.ready = _preflight_ready(swap.ready, observed)

    plan = ServingPlan(engine=spec.engine, recheck_at=next_deadline(swap_input, swap) if swap_input else None)
    revisions = _updated_revisions(status.get("revisions") or [], revision_record(spec, image, desired, iso(now)),
                                   swap, judged.mark_degraded)
    gate_write = _gate_write(body, spec, gate, swap.run_gate, observed, engine.DEFAULT_PORT)
    port = published_port(observed.service, status, engine.DEFAULT_PORT)
    if revisions != status.get("revisions") and (swap.mark_failed or swap.mark_good or judged.mark_degraded):
        plan.record_first = {"revisions": revisions}
    if judged.action:
        # Recorded before any child moves: a restart mid-rollback finds the action and finishes it.
        plan.record_first = {**plan.record_first, "degradedAction": judged.action,
                             "speculationDisabled": judged.action["message"]
                             if judged.action["action"] == "DisableSpeculation" else None}
    if retried:
        plan.record_first = {**retried, **plan.record_first}
        plan.events.append(("Normal", "RetryRequested", f"{RETRY_ANNOTATION}={retried['retryRequest']}: revision "
                                                        f"{desired} may start again"))
    if plan.record_first:
        status = {**status, **plan.record_first}

    argv = engine.render_command(spec, schedule=schedule) if schedule else engine.render_command(spec)
    pod_spec = engine_pod_spec(serving, image, argv, engine.DEFAULT_PORT, engine.HEALTH_PATH, engine.READINESS_PATH,
                               state.operator_image)
    for revision, replicas in swap.scale.items():
        if revision == desired:
            write = _deployment_write(body, engine_deployment(
                serving, revision, replicas, pod_spec,
                annotations={"drafter.dev/drafter": drafter_summary(spec), "drafter.dev/engine": spec.engine,
                             SERVING_GENERATION_ANNOTATION: str(generation),
                             POD_SETTINGS_ANNOTATION: pod_settings_hash(spec)}),
                observed.deployments.get(revision))
        elif revision in observed.deployments:
            write = _scale_write(namespace, observed.deployments[revision], replicas)
        else:
            write = None
        if write:
            plan.writes.append(write)

    if gate_write:
        plan.writes.append(gate_write)
    if swap.service_revision:
        record = {k: v for k, v in switch_record.items() if k in (PREVIOUS_REVISION_ANNOTATION, SWITCHED_AT_ANNOTATION)}
        if swap.switched_from:
            record = {PREVIOUS_REVISION_ANNOTATION: swap.switched_from, SWITCHED_AT_ANNOTATION: iso(now)}
        write = _service_write(body, serving_service(serving, swap.service_revision, port, record),
                               observed.service)
        if write:
            plan.writes.append(write)

    blocked_by = [w for w in plan.writes if w.verb == "create" and (w.plural, w.body["metadata"]["name"]) in observed.foreign]
    if blocked_by:
        plan.writes = [w for w in plan.writes if w not in blocked_by]
        names = ", ".join(f"{w.plural[:-1].capitalize()} {namespace}/{w.body['metadata']['name']}" for w in blocked_by)
        swap.progressing = Verdict("False", "NameConflict",
                                   f"{names} exists and is not owned by this DrafterServing (left by a deleted serving "
                                   "of the same name, or made by hand): delete it, or rename the serving")
        if running.action and (active != desired or observed.service is None):  # blocked, not "under way"
            judged.degraded = Verdict("True", ACTION_BLOCKED, f"onDegraded {running.action.get('action')} cannot take "
                                                              f"effect: {swap.progressing.message}; revision {active} "
                                                              "(degraded) keeps serving")
    new_status = {
        "observedGeneration": generation,
        "activeRevision": swap.active,
        # The Service records the revision traffic left in the same write that moves it: a restart after
        # that write but before this status landed still finds it there.
        "previousRevision": swap.switched_from or switch_record.get(PREVIOUS_REVISION_ANNOTATION)
        or status.get("previousRevision"),
        "revisions": revisions,
        "serving": serving_now(swap.active, revisions),
        "endpoint": {"host": f"{name}.{namespace}.svc.cluster.local", "port": port,
                     "url": f"http://{name}.{namespace}.svc.cluster.local:{port}/v1"},
        "conditions": conditions.merge(status.get("conditions"), [
            ("Ready", swap.ready), ("Progressing", swap.progressing), ("Degraded", judged.degraded),
            ("DrafterCompatible", compatible),
        ], generation, now),
    }
    # When the desired revision's gating began: the gate's deadline counts from there, across restarts.
    gating = None
    if swap.run_gate:
        since = gating_since(status.get("gating"), swap.run_gate)
        gating = {"revision": swap.run_gate, "since": iso(since or now), "source": promotion.gate_source}
    new_status["gating"] = gating  # None removes it (merge patch)
    new_status["promotion"] = promotion.record  # None removes it (merge patch)
    _acceptance_status(new_status, judged, benchmarked)
    new_status["speculationSchedule"] = schedule_status  # None removes it (merge patch)
    plan.status = changed_fields(status, new_status)

    plan.deletes = [object_path("apps/v1", "deployments", namespace, deployment_name(name, revision))
                    for revision in swap.delete if revision in observed.deployments]
    # The swap planner's own Event says more than the condition transition with the same reason.
    posted = {reason for _, reason, _ in swap.events}
    plan.events += [event for event in swap.events + transition_events(status.get("conditions"), new_status["conditions"])
                    if event[1] not in posted or event in swap.events]
    if compatible is not None and compatible.status != "True" and _changed(current_compatible, compatible):
        plan.events.append(("Warning", compatible.reason, compatible.message))
    plan.events += judged.events
    plan.swapped = strategy if swap.switched_from else None
    plan.rolled_back = bool(swap.mark_failed and active is not None) or judged.rolled_back
    return plan


#: Set (or change) this annotation on a DrafterServing to start its failed revision again without a spec
#: change: after the cause was fixed outside the spec (a node repaired, a file restored, a quota raised).
RETRY_ANNOTATION = "drafter.dev/retry"


def retry_request(meta: dict, status: dict, desired: str) -> dict | None:
    """A new value of the retry annotation (pure): the status fields that record it, with the failed
    verdict of ``desired`` cleared so the swap path starts it again; None when there is nothing new."""
    retry = (meta.get("annotations") or {}).get(RETRY_ANNOTATION)
    if not retry or retry == status.get("retryRequest"):
        return None
    revisions = [{k: v for k, v in r.items() if k not in ("good", "failedReason")}
                 if r.get("name") == desired and r.get("good") is False else r for r in status.get("revisions") or []]
    return {"revisions": revisions, "retryRequest": retry}


def serving_now(active: str | None, revisions: list[dict]) -> dict | None:
    """status.serving (pure): the active revision as its record says it runs (after a Rollback or
    DisableSpeculation that is not the spec's drafter), None before there is one."""
    record = next((r for r in revisions if r.get("name") == active), None)
    if record is None:
        return None
    engine, drafter = record.get("engine"), record.get("drafterSpec") or {}
    method = drafter.get("method") or ("none" if record.get("drafter") == "none" else None)
    try:
        speculates = drafter and method != "none"
        k = engines.draft_tokens_per_step(engine, DrafterSpec.model_validate(drafter)) if speculates else None
    except pydantic.ValidationError:
        k = None
    # Every key, null when unknown: a merge patch must remove what the previous revision's block had.
    return {"revision": active, "engine": engine, "drafter": record.get("drafter"), "method": method,
            "numSpeculativeTokens": k, "image": record.get("image")}


def last_benchmark(runs: list[dict], known: dict | None, describing: tuple[str, ...] = ()) -> dict | None:
    """status.lastBenchmark (pure): the newest finished DrafterBenchmark of the active revision (``runs``,
    newest first: its gate or a run by hand), with its name, throughput, speedup, mean acceptance
    length, k and revision; else what status already holds."""
    if not runs:
        # A figure of another revision would describe what no longer serves (the SPEEDUP column).
        return known if known and (not describing or known.get("revision") in describing) else None
    benchmark = runs[0]
    meta, status = benchmark["metadata"], benchmark["status"]
    result = status["result"]
    k = status.get("numSpeculativeTokens")
    if k is None:  # a gate recorded before status had it
        annotated = (meta.get("annotations") or {}).get(K_ANNOTATION, "")
        k = int(annotated) if annotated.isdigit() else None
    block = {"name": meta["name"], "tokensPerSecond": result.get("tokensPerSecond"), "speedup": result.get("speedup"),
             "acceptanceLength": result.get("acceptanceLength"), "numSpeculativeTokens": k,
             "revision": benchmark_revision(benchmark)}
    return {key: value for key, value in block.items() if value is not None}


def speculation_schedule(spec, image: str, measured: Mapping[str, list[dict]],
                         known: dict | None) -> tuple[list[tuple[int, int, int]] | None, dict | None]:
    """spec.drafter.dynamic fromBenchmark (pure): the batch-size schedule to render and status.speculationSchedule.

    The sweep is the load sweep (status.result.levels) of the newest finished DrafterBenchmark (its gate,
    or one run by hand while it served) of the static-k revision of this spec (the revision the spec runs
    before any schedule: its hash, without one). Not the active revision's: once a schedule runs, its
    own benchmarks measure the schedule, and a schedule learned from them would start yet another
    revision. Without a sweep of it the static k runs, and the status says why. When the benchmark is
    no longer observed, the schedule already recorded for that revision is kept."""
    drafter = spec.drafter
    if getattr(drafter, "dynamic", None) != "fromBenchmark" or spec.engine != "vllm" or drafter.method == "none":
        return None, None
    measured_revision = revision_hash(spec, image)
    k = drafter.num_speculative_tokens or engines.vllm.MTP_DEFAULT_SPECULATIVE_TOKENS
    runs = measured.get(measured_revision, [])
    sweep = next((b for b in runs if dynamic.measured(b["status"]["result"].get("levels"))), None)
    if sweep is not None:
        levels = sweep["status"]["result"]["levels"]
        schedule = dynamic.schedule_from_levels(levels, k)
        at, found, off = dynamic.crossover(levels), dynamic.break_even(levels), dynamic.off_from(levels)
        name = sweep["metadata"]["name"]
        if found is None:
            message = f"speculation paid at every level {name} measured: k={k} at every batch size"
        elif found.estimate is None:
            message = f"k={k} below {off} concurrent streams, none from {off} ({name}: slower from its lowest level)"
        else:
            message = (f"k={k} below {off} concurrent streams, none from {off} (break-even of {name}: "
                       f"{found.estimate:.1f} streams, between {found.above} and {found.below})")
        block = {"source": f"benchmark {name}", "revision": measured_revision,
                 "scheduledRevision": revision_hash(spec, image, schedule), "crossoverConcurrency": at,
                 "aboveConcurrency": found.above if found else None,
                 "breakEvenConcurrency": round(found.estimate, 2) if found and found.estimate is not None else None,
                 "ranges": [{"start": a, "end": b, "numSpeculativeTokens": n} for a, b, n in schedule],
                 "message": message}
        return schedule, {key: value for key, value in block.items() if value is not None}
    known = known or {}
    if known.get("revision") == measured_revision and known.get("ranges") and known.get("source", "").startswith("benchmark"):
        return [(r["start"], r["end"], r["numSpeculativeTokens"]) for r in known["ranges"]], known
    why = (f"{len(runs)} finished benchmark(s) of it, none with concurrencyLevels" if runs
           else "no finished benchmark of it: run a DrafterBenchmark with concurrencyLevels against this serving, "
                "or set spec.swap.gate.concurrencyLevels")
    return None, {"source": "static", "revision": measured_revision,
                  "message": f"static k={k}: no load sweep of revision {measured_revision} yet ({why})"}


def _acceptance_status(new_status: dict, judged: AcceptanceDecision, benchmarked: dict | None) -> None:
    new_status["lastBenchmark"] = benchmarked  # None removes one of a revision that no longer serves
    new_status["acceptanceThreshold"] = judged.threshold  # None removes it (merge patch)
    if judged.write_acceptance:
        new_status["acceptance"] = judged.acceptance  # None removes it (merge patch)
    if judged.end_action:
        new_status["degradedAction"] = None
        new_status["speculationDisabled"] = None


#: While an old revision waits for its requests to finish, how often its engines are asked again.
DRAIN_POLL = dt.timedelta(seconds=5)


def gating_since(record: dict | None, revision: str) -> dt.datetime | None:
    """status.gating's start, when it is about ``revision``."""
    if not record or record.get("revision") != revision or not record.get("since"):
        return None
    return parse_time(record["since"])


def draining_revision(observed: Observed) -> str | None:
    """The revision traffic left at the last switch while its Deployment remains (pure): the one whose
    engines the serving loop asks for their requests in flight before deciding. The Service records the
    switch with the pointer itself, so a restarted operator finds it there."""
    service = observed.service or {}
    previous = ((service.get("metadata") or {}).get("annotations") or {}).get(PREVIOUS_REVISION_ANNOTATION)
    active = service_revision(service) if service else None
    return previous if previous and previous != active and previous in observed.deployments else None


def revision_engine(serving: dict, revision: str) -> str:
    """The engine a revision runs, from its record (after an engine switch the spec names the new one)."""
    status = serving.get("status") or {}
    record = next((r for r in status.get("revisions") or [] if r.get("name") == revision), {})
    return record.get("engine") or (serving.get("spec") or {}).get("engine") or "vllm"


def next_deadline(inp: SwapInput, plan: SwapPlan) -> dt.datetime | None:
    """The earliest future moment at which `plan_swap` could answer differently with nothing else changed:
    a revision that is not Ready reaching its startup timeout, or the revision traffic left (now, or at
    the last switch) finishing its drain. One second past each, since both comparisons are strict."""
    moments = [start_deadline(r, inp) for r in inp.revisions.values() if not is_ready(r, inp.replicas)]
    if plan.run_gate:
        moments.append(gate_deadline(inp) or inp.now + inp.gate_timeout)
    if plan.switched_from:
        moments.append(inp.now + inp.drain)
    elif inp.previous in inp.revisions and draining(inp, inp.previous) and inp.switched_at is not None:
        if inp.now - inp.switched_at < inp.drain:
            moments.append(inp.switched_at + inp.drain)
        else:  # waiting for its requests to finish: look again soon, and stop waiting at the limit
            moments += [inp.now + DRAIN_POLL, inp.switched_at + inp.drain_timeout]
    future = [m + dt.timedelta(seconds=1) for m in moments if m + dt.timedelta(seconds=1) > inp.now]
    return min(future, default=None)


def tenancy_problems(serving: DrafterServing, state: ServingState) -> list[str]:
    """What the administrator's configuration refuses: an image or ServiceAccount it does not allow, a
    Prometheus endpoint it did not configure. Checked before anything is created."""
    spec = serving.spec
    image = spec.image or state.default_images[spec.engine]
    pod = spec.pod
    problems = state.tenant_policy.problems(
        serving.namespace, [("spec.image" if spec.image else f"spec.image (default for {spec.engine})", image)],
        ("spec.pod.serviceAccountName", pod.service_account_name if pod else None))
    if spec.acceptance is not None and spec.acceptance.source == "prometheus":
        problem = prom.endpoint_problem(spec.acceptance.prometheus, state.prometheus_endpoints)
        problems += [problem] if problem else []
    return problems


def _invalid(body: dict, status: dict, problems: list[str], now: dt.datetime) -> ServingPlan:
    meta = body["metadata"]
    message = "; ".join(problems)
    new_status = {"observedGeneration": meta.get("generation"), "conditions": conditions.merge(
        status.get("conditions"), [("Ready", Verdict("False", "InvalidSpec", message)),
                                   ("Progressing", Verdict("False", "InvalidSpec", "fix the spec to continue"))],
        meta.get("generation"), now)}
    changed = changed_fields(status, new_status)
    return ServingPlan(status=changed, events=[("Warning", "InvalidSpec", message)] if "conditions" in changed else [])


#: The DrafterServing generation a Deployment's pod template was last rendered for.
SERVING_GENERATION_ANNOTATION = "drafter.dev/serving-generation"
#: The hash of the pod settings (revisions.pod_settings_hash) its template was last rendered from.
POD_SETTINGS_ANNOTATION = "drafter.dev/pod-settings"


def _deployment_write(owner: dict, manifest: dict, existing: dict | None) -> Write | None:
    """Create, or bring the active revision's Deployment to the spec in place. The pod template is
    rewritten only when the pod settings themselves changed (env, pod policy, placement, resources,
    storage, startup): neither a replicas change nor an operator upgrade that renders templates
    differently may restart a running engine (a 30-minute load each); a new rendering applies with the
    next revision or settings change. A settings change rolls one pod at a time (the Deployment's
    strategy), so a serving of several replicas keeps serving. A Deployment from before the settings
    annotation falls back to the generation it was rendered for, and gets both recorded."""
    _adopt(manifest, owner)
    path = object_path("apps/v1", "deployments", manifest["metadata"]["namespace"])
    if existing is None:
        return Write("create", "deployments", path, manifest)
    current = existing["spec"]
    wanted = {key: manifest["metadata"]["annotations"][key] for key in (SERVING_GENERATION_ANNOTATION,
                                                                        POD_SETTINGS_ANNOTATION)}
    recorded = {key: (existing["metadata"].get("annotations") or {}).get(key) for key in wanted}
    if recorded[POD_SETTINGS_ANNOTATION] is not None:
        settings_changed = recorded[POD_SETTINGS_ANNOTATION] != wanted[POD_SETTINGS_ANNOTATION]
    else:
        generation = recorded[SERVING_GENERATION_ANNOTATION]
        settings_changed = generation is not None and generation != wanted[SERVING_GENERATION_ANNOTATION]
    patch: dict = {}
    if current.get("replicas") != manifest["spec"]["replicas"]:
        patch["replicas"] = manifest["spec"]["replicas"]
    if current.get("strategy") != manifest["spec"]["strategy"]:
        patch["strategy"] = manifest["spec"]["strategy"]  # restarts nothing: only the next rollout uses it
    if settings_changed and template_differs(current["template"], manifest["spec"]["template"]):
        patch["template"] = merge_overlay(removed_from_template(current["template"], manifest["spec"]["template"]),
                                          manifest["spec"]["template"])
        patch["progressDeadlineSeconds"] = manifest["spec"]["progressDeadlineSeconds"]
    if not patch and recorded == wanted:
        return None
    body = {"metadata": {"annotations": wanted}}
    return Write("patch", "deployments", f"{path}/{manifest['metadata']['name']}", {**body, **({"spec": patch} if patch else {})})


def _gate_write(owner: dict, spec, gate, revision: str | None, observed: Observed, port: int) -> Write | None:
    """The gate benchmark of a Ready new revision, once (it is a record: never re-created or changed)."""
    if revision is None or revision in observed.gates or not observed.ready_pod_ips.get(revision):
        return None
    namespace, name = owner["metadata"]["namespace"], owner["metadata"]["name"]
    manifest = gate_benchmark(namespace, name, spec, revision, observed.ready_pod_ips[revision][0], port, gate=gate)
    _adopt(manifest, owner)
    return Write("create", "drafterbenchmarks", object_path("drafter.dev/v1alpha1", "drafterbenchmarks", namespace),
                 manifest)


def _scale_write(namespace: str, deployment: dict, replicas: int) -> Write | None:
    if deployment["spec"].get("replicas") == replicas:
        return None
    return Write("patch", "deployments", object_path("apps/v1", "deployments", namespace, deployment["metadata"]["name"]),
                 {"spec": {"replicas": replicas}})


def _service_write(owner: dict, manifest: dict, existing: dict | None) -> Write | None:
    _adopt(manifest, owner)
    namespace = manifest["metadata"]["namespace"]
    if existing is None:
        return Write("create", "services", object_path("v1", "services", namespace), manifest)
    annotations = existing["metadata"].get("annotations") or {}
    if existing["spec"].get("selector") != manifest["spec"]["selector"] or \
            [p.get("port") for p in existing["spec"].get("ports", [])] != [p["port"] for p in manifest["spec"]["ports"]] \
            or any(annotations.get(k) != v for k, v in manifest["metadata"]["annotations"].items()):
        return Write("patch", "services", object_path("v1", "services", namespace, manifest["metadata"]["name"]), {
            "metadata": {"annotations": manifest["metadata"]["annotations"]},
            "spec": {"selector": manifest["spec"]["selector"], "ports": manifest["spec"]["ports"]}})
    return None


def _preflight_ready(ready: Verdict | None, observed: Observed) -> Verdict | None:
    """Ready as the swap planner judged it, with EngineExited named DrafterIncompatible when what "exited"
    was a revision's preflight: its engine never started."""
    if ready is None or ready.reason != "EngineExited":
        return ready
    failures = [o.failure() for o in observed.preflight.values() if o.failed]
    if any(ready.message.endswith(failure) for failure in failures):
        return Verdict("False", "DrafterIncompatible", ready.message)
    return ready


def _compatibility_verdict(known_bad: list[compatibility.KnownBad], blocked: bool,
                           ruled_out: list[str] = ()) -> Verdict:
    if not known_bad:
        if ruled_out:
            return Verdict("True", "NoKnownIssues", f"known-bad {', '.join(ruled_out)} matches this engine, drafter "
                                                    "method and target, but this drafter's preflight ruled out its cause")
        return Verdict("True", "NoKnownIssues", "no known-bad entry matches this engine, drafter method and target")
    entry = known_bad[0]
    action = "blocked by spec.drafter.allowKnownBad: false" if blocked else "serving anyway (warning)"
    return Verdict("False", "KnownBadCombination",
                   f"{entry.id}: {entry.reason} Observed: {entry.observed}. See {entry.link}. {action}")


def _updated_revisions(revisions: list[dict], desired: dict, plan: SwapPlan, mark_degraded: tuple[str, ...]) -> list[dict]:
    out = [dict(r) for r in revisions]
    if not any(r["name"] == desired["name"] for r in out):
        out.append(desired)
    for r in out:
        if r["name"] == plan.mark_good:
            r["good"] = True
        if r["name"] == plan.mark_failed:
            r["good"] = False
            if plan.failure_reason:
                r["failedReason"] = plan.failure_reason
        if r["name"] in mark_degraded:
            r["degraded"] = True
    return out[-10:]  # bounded history, newest last


# Transitions worth an Event (the rest are visible in the conditions alone).
_NORMAL_REASONS = {"EngineReady", "RevisionStarting", "RevisionActive"}


def transition_events(before: list[dict] | None, after: list[dict]) -> list[Event]:
    """An Event for each Ready/Progressing condition whose status or reason changed, and for each
    Degraded change a user acts on (its status; the data going missing or coming back)."""
    old = {c["type"]: c for c in before or []}
    events = []
    for cond in after:
        prior = old.get(cond["type"], {})
        if cond["type"] in ("Ready", "Progressing"):
            if (prior.get("status"), prior.get("reason")) != (cond["status"], cond["reason"]):
                kind = "Normal" if cond["reason"] in _NORMAL_REASONS else "Warning"
                events.append((kind, cond["reason"], f"{cond['type']}={cond['status']}: {cond['message']}"))
        elif cond["type"] == "Degraded" and _degraded_news(prior, cond):
            kind = "Warning" if cond["status"] == "True" or cond["reason"] in _DATA_PROBLEMS else "Normal"
            events.append((kind, cond["reason"], f"Degraded={cond['status']}: {cond['message']}"))
    return events


_DATA_PROBLEMS = {"MetricsUnavailable", "MetricsInvalid"}


def _degraded_news(prior: dict, cond: dict) -> bool:
    """Degraded changes worth an Event: its status (a first InsufficientData is not news), or the
    metrics becoming unusable or usable again. Not BelowThresholdPending <-> AcceptanceHealthy: the
    condition exists so that a wobble does not page anyone; and not the action's own reason, whose
    Event (RollingBack, SpeculationDisabled) already says it."""
    if cond["reason"] == SPECULATION_DISABLED:
        return False
    if not prior:
        return cond["status"] != "Unknown"
    if prior.get("status") != cond["status"]:
        return True
    return (prior.get("reason") in _DATA_PROBLEMS) != (cond["reason"] in _DATA_PROBLEMS) or \
        (cond["reason"] in _DATA_PROBLEMS and prior.get("reason") != cond["reason"])


def changed_fields(current: dict, desired: dict) -> dict:
    """The fields of ``desired`` a JSON merge patch must carry to make ``current`` equal it (a null deletes,
    so a null where ``current`` has nothing is no change)."""
    return {k: v for k, v in desired.items() if current.get(k) != _without_nulls(v)}


def _without_nulls(value):
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    return value


def _changed(current: dict | None, verdict: Verdict) -> bool:
    """Whether a condition's status or reason differs from what is written (a new problem is news)."""
    return current is None or (current.get("status"), current.get("reason")) != (verdict.status, verdict.reason)


# Pod template fields the spec may set and later unset (pod policy, placement): a comparison of what we
# set alone would miss their removal. The apiserver defaults none of them in a Deployment's template.
OWNED_POD_FIELDS = ("affinity", "topologySpreadConstraints", "nodeSelector", "tolerations", "serviceAccountName",
                    "imagePullSecrets", "priorityClassName", "runtimeClassName", "securityContext",
                    "initContainers")  # the preflight goes when the model claim does (not a new revision)
OWNED_CONTAINER_FIELDS = ("env", "envFrom", "securityContext", "resources")


def removed_from_template(current: dict, wanted: dict) -> dict:
    """A merge-patch overlay deleting what the current template has and the wanted one no longer does:
    pod labels and annotations, owned pod fields; a removed container field shows as {"containers": None}
    (merge patch replaces the containers list whole, so the wanted list alone removes it)."""
    overlay: dict = {}
    for key in ("labels", "annotations"):
        gone = set((current.get("metadata") or {}).get(key) or {}) - set((wanted.get("metadata") or {}).get(key) or {})
        if gone:
            overlay.setdefault("metadata", {})[key] = dict.fromkeys(sorted(gone))
    have, want = current.get("spec") or {}, wanted.get("spec") or {}
    gone_fields = [f for f in OWNED_POD_FIELDS if have.get(f) and f not in want]
    if gone_fields:
        overlay["spec"] = dict.fromkeys(gone_fields)
    wanted_containers = {c.get("name"): c for c in want.get("containers") or []}
    for container in have.get("containers") or []:
        other = wanted_containers.get(container.get("name"), {})
        if any(container.get(f) and f not in other for f in OWNED_CONTAINER_FIELDS):
            overlay.setdefault("spec", {})["containers"] = None
    return overlay


def merge_overlay(overlay: dict, wanted: dict) -> dict:
    """``wanted`` with the deletions of ``overlay`` (None values) wherever ``wanted`` does not set the key."""
    out = dict(wanted)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_overlay(value, out[key])
        elif key not in out:
            out[key] = value
    return out


def template_differs(current: dict, wanted: dict) -> bool:
    """Compare only what we set (the apiserver adds defaults: imagePullPolicy, dnsPolicy, ...), and
    whether something we set before is gone."""
    def subset(want, have) -> bool:
        if isinstance(want, dict):
            return isinstance(have, dict) and all(subset(v, have.get(k)) for k, v in want.items())
        if isinstance(want, list):
            return isinstance(have, list) and len(want) == len(have) and all(map(subset, want, have))
        return want == have or (isinstance(want, (int, str)) and str(want) == str(have))
    return not subset(wanted, current) or bool(removed_from_template(current, wanted))


def _adopt(manifest: dict, owner: dict) -> None:
    """Owner reference (garbage collection on delete) and namespace; our own labels, not the owner's."""
    kopf.append_owner_reference(manifest, owner=owner)
    kopf.adjust_namespace(manifest, namespace=owner["metadata"]["namespace"], forced=True)
