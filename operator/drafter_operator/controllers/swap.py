"""The swap state machine as a pure function: observed revisions in, the next actions out.

The Service's selector is the single pointer to the active revision: it moves only once the new
revision is Ready (both strategies), so a restarted operator reads where traffic goes from the cluster
itself and finishes any swap without a duplicate revision. Deployment names are the revision hashes,
so creating one twice is a no-op.

- Recreate: scale the active revision to zero (kept, for rollback), start the new one once the old
  pods are gone, switch when Ready, then delete the old one. No extra GPUs, downtime meanwhile.
- BlueGreen: start the new revision beside the active one, switch when Ready, then delete the old one.
- After a switch the old revision drains before it is deleted: at least `drain` (default 15 s: proxies
  and load balancers need a moment to stop sending it new connections), then until its engines report
  no request running or waiting (`in_flight`, read from their metrics), at most `drain_timeout`
  (spec.swap.drainTimeout): a 4,000-token stream in flight at the switch finishes on the old pods.
- A new revision that is not Ready within `spec.startup.timeout` is marked failed and removed; the
  active revision keeps (or, with Recreate, resumes) serving. A failed revision is not retried until
  the spec changes to another revision.
- With a gate (`spec.swap.gate`, or a promotion's one-shot gate; BlueGreen), a Ready new revision is benchmarked through its own pods
  before the Service moves (`run_gate`); traffic moves only when the gate passed. A failed gate is a
  failed revision: removed, never retried, the active revision keeps serving.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field


@dataclass(frozen=True)
class RevisionObservation:
    """One revision's Deployment as observed in the cluster."""

    name: str
    replicas: int
    ready: int
    pods: int
    created: dt.datetime
    unschedulable: str | None = None  # the scheduler's message when a pod cannot be placed
    # How an engine container of a never-Ready revision exited (code and its last output): a load that
    # fails (a bad flag, a missing file offline) fails in seconds, not at the end of spec.startup.timeout.
    exited: str | None = None
    exit_restarts: int = 0  # how often the kubelet restarted that engine already (transient exits are retried)
    exit_final: bool = False  # an exit no restart can cure (a failed drafter preflight)
    # When its first current pod was scheduled (the startup limit counts from there: a model load cannot
    # start before a node with GPUs exists), and when its first current pod was created (the placement
    # bound counts from there: node autoscaling, a scale-up from zero). None: no such pod.
    scheduled: dt.datetime | None = None
    placement_started: dt.datetime | None = None
    # Since when and why its pods cannot be created at all (the Deployment's ReplicaFailure: a quota, a policy).
    replica_failure: tuple[dt.datetime, str] | None = None
    # Whether the Deployment's status describes its latest spec (observedGeneration): right after a scale or an
    # edit (someone's `kubectl scale`) it does not, and its Ready count says nothing yet.
    settled: bool = True
    # A replica over several nodes (a LeaderWorkerSet): the pods of each group, and the groups not serving now (their
    # leader missing, going or not Ready). A pod lost takes its whole group down and LeaderWorkerSet re-creates it
    # (RecreateGroupOnPodRestart), so in a revision that was Ready these are groups restarting, not starting.
    group_size: int = 1
    groups_down: tuple[str, ...] = ()


@dataclass(frozen=True)
class SwapInput:
    desired: str
    strategy: str  # "Recreate" | "BlueGreen"
    replicas: int
    startup_timeout: dt.timedelta
    active: str | None  # where the Service points (or status.activeRevision before a Service exists)
    failed: frozenset[str]
    revisions: dict[str, RevisionObservation]
    now: dt.datetime
    previous: str | None = None  # the revision traffic left at the last switch
    switched_at: dt.datetime | None = None
    # Revisions traffic left at earlier switches, still draining then -> when traffic left each.
    drains: dict[str, dt.datetime] = field(default_factory=dict)
    drain: dt.timedelta = dt.timedelta(seconds=15)  # the least a revision drains after traffic left it
    drain_timeout: dt.timedelta = dt.timedelta(minutes=5)  # the most, when its engines still report requests
    # revision -> requests its engines report running or waiting (summed over its Ready pods); absent when
    # unknown (not read, or a pod did not answer): then only drain_timeout ends the drain.
    in_flight: dict[str, int] = field(default_factory=dict)
    gated: bool = False  # a new revision must pass its gate before traffic moves
    gate_source: str = "spec.swap.gate"  # whose gate (a promotion's one-shot gate is not spec.swap's)
    gate: Verdict | None = None  # the desired revision's gate verdict, once its benchmark finished
    # With a gate: how long a Ready new revision may wait for its gate's verdict, from when its gating began
    # (`gating_since`, recorded in status by the first decision that gated it; None: not begun yet).
    gate_timeout: dt.timedelta = dt.timedelta(minutes=30)
    gating_since: dt.datetime | None = None
    placement_timeout: dt.timedelta = dt.timedelta(minutes=30)  # pods created -> scheduled
    engine_restarts: int = 2  # engine exits retried before a never-Ready revision fails
    failure_reasons: dict[str, str] = field(default_factory=dict)  # failed revision -> why, when recorded
    good: frozenset[str] = frozenset()  # revisions that have been Ready (an engine exit then is a restart)


@dataclass(frozen=True)
class Verdict:
    status: str  # "True" | "False"
    reason: str
    message: str


@dataclass
class SwapPlan:
    scale: dict[str, int] = field(default_factory=dict)  # ensure these Deployments exist with these replicas
    delete: list[str] = field(default_factory=list)
    service_revision: str | None = None
    active: str | None = None
    switched_from: str | None = None  # set when traffic moved in this step
    mark_good: str | None = None
    mark_failed: str | None = None
    run_gate: str | None = None  # benchmark this revision (Ready, not yet taking traffic)
    # At a switch: the revisions traffic left before that still drain (-> when traffic left them), recorded
    # on the Service with the switch, beside the revision left now.
    still_draining: dict[str, dt.datetime] = field(default_factory=dict)
    failure_reason: str | None = None  # why mark_failed, when not the startup timeout
    ready: Verdict | None = None
    progressing: Verdict | None = None
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)


def is_ready(observed: RevisionObservation | None, replicas: int) -> bool:
    if observed is None:
        return False
    return observed.ready >= replicas and (replicas == 0 or observed.ready >= 1)


def start_failure(observed: RevisionObservation | None, replicas: int, inp: SwapInput) -> str | None:
    """Why a revision that never became Ready failed (its engine exited more often than restarts may
    cure, it could not be placed, or its startup timed out), else None."""
    if observed is None or is_ready(observed, replicas):
        return None
    if observed.pods == 0:
        return _creation_failure(observed, inp)
    if not observed.settled:
        return None  # its Ready count is from before the latest change: judged once the controller caught up
    if observed.exited and (observed.exit_final or observed.exit_restarts >= inp.engine_restarts):
        restarted = f" (after {observed.exit_restarts} restarts)" if observed.exit_restarts else ""
        return f"failed to start: {observed.exited}{restarted}"
    if observed.scheduled is not None:
        if inp.now - observed.scheduled > inp.startup_timeout:
            return (f"did not become Ready within spec.startup.timeout {_format(inp.startup_timeout)} "
                    "(counted from its first pod's scheduling)")
        return None
    if observed.placement_started is None:  # only pods on their way out (a template change): none waits to be placed
        return _creation_failure(observed, inp)
    if inp.now - placement_clock(observed) > inp.placement_timeout:
        why = f": {observed.unschedulable}" if observed.unschedulable else ""
        return f"could not be placed within spec.startup.placementTimeout {_format(inp.placement_timeout)}{why}"
    return None


def _creation_failure(observed: RevisionObservation, inp: SwapInput) -> str | None:
    """A revision with no live pod: scaled to zero, just scaled up or created, its pods lost with a node and
    not replaced yet, or its only pods being deleted for a new template. None of these is a placement that failed (no pod waited to be placed: a revision scaled to
    zero for days must not fail the moment it is asked for again, nor one whose node just went), unless its pods
    cannot be created at all (the Deployment's ReplicaFailure) for longer than the placement bound."""
    if observed.replica_failure is None:
        return None
    since, why = observed.replica_failure
    if inp.now - since > inp.placement_timeout:
        return f"could not create its pods within spec.startup.placementTimeout {_format(inp.placement_timeout)}: {why}"
    return None


def placement_clock(observed: RevisionObservation) -> dt.datetime:
    """Where the placement bound counts from: its first live pod's creation (else the Deployment's, which
    `start_failure` never reads: a revision with no live pod is judged by `_creation_failure`)."""
    return observed.placement_started or observed.created


def start_deadline(observed: RevisionObservation, inp: SwapInput) -> dt.datetime:
    """When `start_failure` gives up on a revision that is not Ready, the clock alone changing."""
    if observed.scheduled is not None:
        return observed.scheduled + inp.startup_timeout
    if observed.placement_started is None and observed.replica_failure is not None:
        return observed.replica_failure[0] + inp.placement_timeout
    return placement_clock(observed) + inp.placement_timeout


def _ready_verdict(name: str, observed: RevisionObservation | None, replicas: int,
                   good: frozenset[str] = frozenset()) -> Verdict:
    if replicas == 0:
        return Verdict("False", "ScaledToZero", f"spec.replicas is 0: revision {name} runs no engine pods")
    grouped = observed is not None and observed.group_size > 1
    units = f"groups of {observed.group_size} pods" if grouped else "engine pods"
    if is_ready(observed, replicas):
        return Verdict("True", "EngineReady", f"revision {name}: {observed.ready}/{replicas} {units} Ready")
    ready = observed.ready if observed else 0
    if grouped and name in good and observed.groups_down:
        return Verdict("False", "GroupRestarting", (
            f"revision {name}: {ready}/{replicas} {units} Ready; {', '.join(observed.groups_down)} "
            "restarting: a pod of the group was lost, and LeaderWorkerSet re-creates the whole group "
            "(RecreateGroupOnPodRestart), its engine loading again on every node"))
    if observed and observed.unschedulable:
        return Verdict("False", "Unschedulable", f"revision {name}: {ready}/{replicas} Ready; "
                                                   f"scheduler: {observed.unschedulable}")
    if observed and observed.exited:
        return Verdict("False", "EngineExited", f"revision {name}: {ready}/{replicas} Ready; {observed.exited}")
    return Verdict("False", "EngineStarting", f"revision {name}: {ready}/{replicas} engine pods Ready")


def gate_deadline(inp: SwapInput) -> dt.datetime | None:
    """When a gated revision still without a gate verdict fails: gateTimeout after its gating began (not
    after its creation: a revision can be Ready long before it is gated, e.g. one that served before and
    is asked for again while it drains)."""
    return inp.gating_since + inp.gate_timeout if inp.gating_since is not None else None


def left_at(inp: SwapInput, name: str) -> dt.datetime | None:
    """When traffic left revision ``name`` (at the last switch or an earlier one still recorded), else None."""
    if name == inp.previous and inp.switched_at is not None:
        return inp.switched_at
    return inp.drains.get(name)


def draining(inp: SwapInput, name: str) -> bool:
    """Whether a revision traffic left (at the last switch, or an earlier one within its drain) still finishes
    requests: never deleted then."""
    since = left_at(inp, name)
    if since is None:
        return False
    elapsed = inp.now - since
    if elapsed < inp.drain:
        return True
    return elapsed < inp.drain_timeout and inp.in_flight.get(name) != 0


def draining_revisions(inp: SwapInput) -> list[str]:
    """Every revision with a Deployment that still drains (pure)."""
    return sorted(name for name in inp.revisions if draining(inp, name))


def unseen_draining(inp: SwapInput) -> list[str]:
    """Revisions traffic left within the drain timeout that the view has no Deployment of: deleted, or out of the
    watches' sight (a label someone removed), in which case only a read of the apiserver finds it to delete."""
    names = {*inp.drains, *([inp.previous] if inp.previous else [])} - set(inp.revisions) - {inp.active, inp.desired}
    return sorted(name for name in names if (since := left_at(inp, name)) is not None
                  and inp.now - since < inp.drain_timeout)


def _steady(inp: SwapInput, plan: SwapPlan, active: str) -> SwapPlan:
    observed = inp.revisions.get(active)
    plan.scale[active] = inp.replicas
    plan.service_revision = plan.active = active
    plan.delete += [name for name in inp.revisions if name != active and not draining(inp, name)]
    plan.ready = _ready_verdict(active, observed, inp.replicas, inp.good)
    if is_ready(observed, inp.replicas) and inp.replicas > 0:
        plan.mark_good = active
    return plan


def hold(inp: SwapInput) -> SwapPlan:
    """The operator refuses the spec (invalid, outside the administrator's policy, or refused by an upgraded
    operator): nothing new starts and traffic does not move; the active revision keeps serving as it runs (its
    replicas untouched), and every other revision (a swap's pending one, a failed one) stops once its drain
    ends, so a refused spec never holds a second revision's GPUs."""
    plan = SwapPlan()
    active = inp.active if inp.active in inp.revisions else None
    plan.active = inp.active
    plan.delete = [name for name in inp.revisions if name != active and not draining(inp, name)]
    if active is not None:
        observed = inp.revisions[active]
        plan.ready = _ready_verdict(active, observed, observed.replicas, inp.good)
    return plan


def plan_swap(inp: SwapInput) -> SwapPlan:
    """The next step: a first revision starts (or fails) in place; the active one keeps serving; a failed
    desired revision stays failed; else the swap moves on (roll back, gate, switch, or start the new one).
    A failed revision whose Deployment someone deleted is never started again unasked, whichever role it has."""
    plan = _next_step(inp)
    for name in [name for name in plan.scale if name in inp.failed and name not in inp.revisions]:
        del plan.scale[name]
    return plan


def _next_step(inp: SwapInput) -> SwapPlan:
    plan = SwapPlan()
    if inp.active is None or (inp.desired == inp.active and inp.active not in inp.good):
        return _first_revision(inp, plan)
    if inp.desired == inp.active:
        _steady(inp, plan, inp.active)
        plan.progressing = Verdict("False", "RevisionActive", f"revision {inp.active} is serving")
        return plan
    if inp.desired in inp.failed:
        return _failed_earlier(inp, plan)
    return _swap_step(inp, plan)


def _first_revision(inp: SwapInput, plan: SwapPlan) -> SwapPlan:
    """First revision: nothing to protect, traffic points at it from the start (the Service points at it
    before it is Ready, so until it has been Ready it is judged as a start, not as serving)."""
    desired = inp.desired
    observed = inp.revisions.get(desired)
    _steady(inp, plan, desired)
    failure = start_failure(observed, inp.replicas, inp)
    if desired in inp.failed or failure:
        why = inp.failure_reasons.get(desired) or failure or f"did not become Ready within {_format(inp.startup_timeout)}"
        if desired not in inp.failed:
            plan.mark_failed = desired
            plan.failure_reason = failure
            plan.events.append(("Warning", "RevisionFailed", f"revision {desired} {failure}"))
        plan.progressing = Verdict("False", "RevisionFailed",
                                   f"revision {desired} {why}; there is no earlier revision to fall back to")
        plan.mark_good = None
    elif is_ready(observed, inp.replicas):
        plan.progressing = Verdict("False", "RevisionActive", f"revision {desired} is serving")
    else:
        plan.progressing = Verdict("True", "RevisionStarting", f"starting revision {desired}")
    return plan


def _failed_earlier(inp: SwapInput, plan: SwapPlan) -> SwapPlan:
    """The desired revision failed before: the active one keeps serving until the spec changes."""
    _steady(inp, plan, inp.active)
    why = inp.failure_reasons.get(inp.desired) or f"did not become Ready within {_format(inp.startup_timeout)}"
    plan.progressing = Verdict("False", "RevisionFailed",
                               f"revision {inp.desired} {why}; revision {inp.active} keeps serving. Change the spec to "
                               "try another revision.")
    return plan


def _swap_step(inp: SwapInput, plan: SwapPlan) -> SwapPlan:
    """A swap from the active revision to the desired one, one step: fail it, gate it, switch, or start it."""
    desired, active = inp.desired, inp.active
    new = inp.revisions.get(desired)
    plan.service_revision = plan.active = active
    # A revision still draining from the last switch keeps its streams even when a new swap starts.
    plan.delete += [name for name in inp.revisions if name not in (active, desired) and not draining(inp, name)]
    failure = start_failure(new, inp.replicas, inp)
    if failure:
        _keep_active(inp, plan, failure)
        plan.progressing = Verdict("False", "RevisionFailed", f"revision {desired} {failure}; rolled back "
                                                              f"to revision {active}")
        plan.events.append(("Warning", "RevisionFailed", f"revision {desired} {failure}; "
                                                         f"revision {active} keeps serving"))
        return plan
    if inp.gated and inp.replicas == 0:
        return _gate_waits_for_replicas(inp, plan)
    if is_ready(new, inp.replicas) and inp.gated:
        gated = _gate_step(inp, plan)
        if gated is not None:
            return gated
    if is_ready(new, inp.replicas):
        return _switch(inp, plan)
    if inp.strategy == "BlueGreen":
        return _start_beside(inp, plan)
    return _recreate(inp, plan)


def _gate_waits_for_replicas(inp: SwapInput, plan: SwapPlan) -> SwapPlan:
    """A gated swap while spec.replicas is 0: a gate measures the new revision's own pods and there are none, so
    the Service stays where it is (nothing serves now) and the new revision waits at zero; scaled up, it starts
    beside the active one and passes its gate before traffic moves. Switching now would let it serve ungated
    the moment the serving is scaled up."""
    plan.scale[inp.active] = plan.scale[inp.desired] = 0
    plan.ready = _ready_verdict(inp.active, inp.revisions.get(inp.active), 0, inp.good)
    plan.progressing = Verdict("False", "ScaledToZero", f"spec.replicas is 0: revision {inp.desired} takes traffic "
                                                        f"once scaled up and through its gate ({inp.gate_source})")
    return plan


def _keep_active(inp: SwapInput, plan: SwapPlan, failure_reason: str) -> None:
    """The desired revision failed: it is marked failed and deleted; the active revision keeps serving."""
    plan.mark_failed = inp.desired
    plan.failure_reason = failure_reason
    plan.delete.append(inp.desired)
    plan.scale[inp.active] = inp.replicas
    plan.ready = _ready_verdict(inp.active, inp.revisions.get(inp.active), inp.replicas, inp.good)


def _gate_step(inp: SwapInput, plan: SwapPlan) -> SwapPlan | None:
    """A Ready, gated new revision: fail it past its gate deadline or on a failed gate, run its gate while
    there is no verdict; None once the gate passed (traffic may move)."""
    desired, active = inp.desired, inp.active
    deadline = gate_deadline(inp)
    if inp.gate is None and deadline is not None and inp.now > deadline:
        # Nothing may hold a second revision's GPUs without a deadline: a gate that cannot be created
        # (refused), never scheduled or never finishes fails the revision like a start that never ends.
        _keep_active(inp, plan, f"had no gate verdict within spec.swap.gateTimeout {_format(inp.gate_timeout)} of "
                                "its gating")
        message = f"revision {desired} {plan.failure_reason}; revision {active} keeps serving"
        plan.progressing = Verdict("False", "GateTimedOut", message)
        plan.events.append(("Warning", "GateTimedOut", message))
        return plan
    if inp.gate is None:
        plan.scale[active] = plan.scale[desired] = inp.replicas
        plan.ready = _ready_verdict(active, inp.revisions.get(active), inp.replicas, inp.good)
        plan.run_gate = desired
        plan.progressing = Verdict("True", "Gating", f"revision {desired} is Ready; benchmarking it through its "
                                                     f"own pods before traffic moves ({inp.gate_source})")
        return plan
    if inp.gate.status != "True":
        _keep_active(inp, plan, f"failed {inp.gate_source} ({inp.gate.message})")
        message = f"revision {desired} {plan.failure_reason}; revision {active} keeps serving"
        plan.progressing = Verdict("False", "GateFailed", message)
        plan.events.append(("Warning", "GateFailed", message))
        return plan
    return None


def _switch(inp: SwapInput, plan: SwapPlan) -> SwapPlan:
    """The new revision is Ready (and passed any gate): the Service moves to it; the old one drains."""
    desired, active = inp.desired, inp.active
    plan.scale[desired] = inp.replicas
    plan.service_revision = plan.active = desired
    plan.switched_from = active  # deleted once drained (see _steady)
    plan.still_draining = {name: left_at(inp, name) for name in draining_revisions(inp) if name not in (active, desired)}
    plan.mark_good = desired if inp.replicas > 0 else None
    plan.ready = _ready_verdict(desired, inp.revisions.get(desired), inp.replicas, inp.good)
    plan.progressing = Verdict("False", "RevisionActive", f"switched traffic from revision {active} to {desired}")
    plan.events.append(("Normal", "Switched", f"traffic moved from revision {active} to {desired} ({inp.strategy})"))
    return plan


def _start_beside(inp: SwapInput, plan: SwapPlan) -> SwapPlan:
    """BlueGreen: the new revision starts beside the active one, which keeps serving."""
    desired, active, new = inp.desired, inp.active, inp.revisions.get(inp.desired)
    plan.scale[active] = inp.replicas
    plan.scale[desired] = inp.replicas
    plan.ready = _ready_verdict(active, inp.revisions.get(active), inp.replicas, inp.good)
    if new is not None and new.unschedulable:
        plan.progressing = Verdict(
            "True", "InsufficientCapacity",
            f"BlueGreen needs {inp.replicas} more engine pod(s) beside revision {active} but the scheduler "
            f"cannot place revision {desired}: {new.unschedulable}. Free GPUs, or use swap.strategy Recreate; "
            f"the swap is abandoned after {_format(inp.startup_timeout)}.")
    else:
        plan.progressing = Verdict("True", "RevisionStarting",
                                   f"starting revision {desired} beside revision {active} (BlueGreen)")
    return plan


def _recreate(inp: SwapInput, plan: SwapPlan) -> SwapPlan:
    """Recreate: the old revision stops first; its Deployment stays at zero until the new one is Ready."""
    desired, active = inp.desired, inp.active
    new, old = inp.revisions.get(desired), inp.revisions.get(active)
    plan.scale[active] = 0
    plan.ready = Verdict("False", "Recreating", f"revision {active} stopped to make room for revision {desired}")
    if new is None and old is not None and old.pods > 0:
        plan.progressing = Verdict("True", "StoppingOldRevision",
                                   f"waiting for the {old.pods} pod(s) of revision {active} to stop (Recreate)")
        return plan
    plan.scale[desired] = inp.replicas
    if new is not None and new.unschedulable:
        plan.progressing = Verdict("True", "Unschedulable",
                                   f"revision {desired} cannot be scheduled: {new.unschedulable}")
    else:
        plan.progressing = Verdict("True", "RevisionStarting", f"starting revision {desired} (Recreate)")
    return plan


def _format(delta: dt.timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    if seconds % 60 == 0:
        return f"{seconds // 60}m"
    return f"{seconds}s"
