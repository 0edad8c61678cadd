"""What a DrafterServing's children say, grouped by revision (pure): `observed_from` turns the operator's kopf
indexes (Deployments, pods, the Service, DrafterBenchmarks) into `Observed`, the input of `decide.decide`.

Each fact about a pod is read here once per reconcile: a revision's Ready pods' IPs (the gate's target),
how its engine exited, when it was scheduled, and the benchmarks that measured it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from drafter_operator import timestamps
from drafter_operator.acceptance.measurement import ready_with_ip
from drafter_operator.controllers.serving import drafter_compatible
from drafter_operator.controllers.swap import RevisionObservation
from drafter_operator.resources.engine import ENGINE_CONTAINER
from drafter_operator.resources.workloads import GROUP, kind_of
from drafter_operator.constants import GATE_LABEL, REVISION_LABEL, SERVING_LABEL


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
    preflight: dict[str, drafter_compatible.PreflightOutcome] = field(default_factory=dict)
    # revision -> requests its engines report running or waiting, for a revision that drains (read from
    # its pods' metrics by the serving loop); absent when not read or unknown
    in_flight: dict[str, int] = field(default_factory=dict)
    # Names of this serving's own Deployments that lost the labels the watches select (fresh.py reads
    # them), so the reconciler puts the labels back: else a revision is out of the operator's sight for ever.
    unlabelled: tuple[tuple[str, str], ...] = ()  # (plural, name)
    # revision -> the nodes its current pods are placed on (spec.nodeName), sorted
    nodes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # node -> its nvidia.com/gpu.product label ("" when it has none), as the reconciler read it (serving.py
    # NodeProducts): what a known-bad row keyed by GPU product waits for
    node_products: dict[str, str] = field(default_factory=dict)
    # Why the nodes' labels cannot be read (the operator may not get nodes: namespaced mode), None when they can
    nodes_unreadable: str | None = None

    def gpu_products(self, revision: str) -> frozenset[str] | None:
        """The GPU products of the nodes the revision's pods are placed on, once each node's label is read; None
        while none is placed or a node is not read yet."""
        nodes = self.nodes.get(revision)
        if not nodes or any(node not in self.node_products for node in nodes):
            return None
        return frozenset(self.node_products[node] for node in nodes)



def observed_from(deployments: Iterable[dict], pods: Iterable[dict], service: dict | None,
                  owner_uid: str | None = None, benchmarks: Iterable[dict] = ()) -> Observed:
    """Group a serving's Deployments and pods (from the operator's kopf indexes) by revision (pure).

    `owner_uid`: only children owned by this DrafterServing count. A serving deleted and re-created
    under the same name leaves children the garbage collector has not removed yet; taken for the new
    serving's, its Service would look like the active revision and its Deployments like revisions."""
    pods, deployments = list(pods), list(deployments)
    foreign = {(kind_of(child).plural, child["metadata"]["name"]) for child in deployments
               if not owned_by(child, owner_uid)}
    foreign |= {("services", service["metadata"]["name"])} if service and not owned_by(service, owner_uid) else set()
    observed = Observed(service=service if owned_by(service, owner_uid) else None, foreign=frozenset(foreign))
    for deployment in deployments:
        revision = deployment["metadata"]["labels"].get(REVISION_LABEL)
        if not revision or deployment["metadata"].get("deletionTimestamp") or not owned_by(deployment, owner_uid):
            continue
        own = revision_pods(revision, deployment, pods)
        observed.deployments[revision] = deployment
        observed.ready_pod_ips[revision] = ready_pod_ips(own)
        preflight = drafter_compatible.revision_preflight(own)
        if preflight is not None:
            observed.preflight[revision] = preflight
        observed.revisions[revision] = revision_observation(revision, deployment, own, preflight)
        placed = placed_nodes(own)
        if placed:
            observed.nodes[revision] = placed
    _observe_benchmarks(observed, benchmarks, owner_uid)
    return observed


def revision_pods(revision: str, deployment: dict, pods: list[dict]) -> list[dict]:
    """The pods of a revision's Deployment: its revision label, and created no earlier than the Deployment. Pods
    belong to a ReplicaSet, not to the Deployment the index holds, so the label alone cannot tell them from the
    pods of a same-named Deployment deleted a moment ago (a serving deleted and created again: the same spec
    hashes to the same revision) that the garbage collector has not removed yet; taken for the new one's, their
    scheduling would start its startup clock long before its own pods exist."""
    created = timestamps.parse_aware(deployment["metadata"].get("creationTimestamp"))
    return [p for p in pods if (p["metadata"].get("labels") or {}).get(REVISION_LABEL) == revision
            and not (created and (timestamps.parse_aware(p["metadata"].get("creationTimestamp")) or created) < created)]


def placed_nodes(pods: list[dict]) -> tuple[str, ...]:
    """The nodes the pods not being deleted are placed on, sorted."""
    return tuple(sorted({p["spec"]["nodeName"] for p in pods if (p.get("spec") or {}).get("nodeName")
                         and not p["metadata"].get("deletionTimestamp")}))


def ready_pod_ips(pods: list[dict]) -> list[str]:
    """The IPs of the pods that are Ready and not being deleted, sorted."""
    return sorted(p["status"]["podIP"] for p in pods if ready_with_ip(p))


def revision_observation(revision: str, deployment: dict, own: list[dict],
                         preflight: drafter_compatible.PreflightOutcome | None) -> RevisionObservation:
    """What the swap planner reads of one revision: its Deployment's replicas and the state of its pods."""
    unschedulable = next((c.get("message") for p in own for c in p.get("status", {}).get("conditions") or []
                          if c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"), None)
    # A failed preflight fails the start at once, in seconds: its engine never starts, and no restart helps.
    final = preflight is not None and preflight.failed
    current = [p for p in own if not p["metadata"].get("deletionTimestamp")]
    # A pod being deleted was stopped (a kubelet reports its engine terminated, 143 after SIGTERM): no exit of its own.
    exits = [] if final else sorted(filter(None, map(engine_exit_with_restarts, current)), key=lambda e: -e[1])
    exited, restarts = (preflight.failure(), 0) if final else (exits[0] if exits else (None, 0))
    # LWS answers a container's restart by re-creating the whole group (RecreateGroupOnPodRestart): its new pods count
    # restarts from zero and start the startup clock afresh, so neither spec.startup.engineRestarts nor the timeout
    # would ever come for an engine that exits every time. A group's exit is final.
    final = final or (exited is not None and kind_of(deployment) is GROUP)
    return RevisionObservation(
        name=revision, replicas=deployment["spec"].get("replicas", 1),
        ready=deployment.get("status", {}).get("readyReplicas", 0) if _current(deployment) else 0,
        settled=not deployment.get("status") or _current(deployment),  # no status yet: nothing stale to read
        pods=len(own), created=timestamps.parse(deployment["metadata"]["creationTimestamp"]),
        unschedulable=unschedulable, exited=exited, exit_restarts=restarts, exit_final=final,
        scheduled=min(filter(None, map(scheduled_at, current)), default=None),
        placement_started=min((timestamps.parse(p["metadata"]["creationTimestamp"]) for p in current
                               if p["metadata"].get("creationTimestamp")), default=None),
        replica_failure=replica_failure(deployment), **group_state(deployment, current))


def group_state(workload: dict, current: list[dict]) -> dict:
    """A LeaderWorkerSet's group size and the groups not serving now, by their leader pods (the only pods of a
    group the serving's watch sees: the leaders carry its label). LeaderWorkerSet names group i's leader
    ``<set>-<i>``; a group whose leader is missing, going or not Ready is down. Nothing for a Deployment."""
    if kind_of(workload) is not GROUP:
        return {}
    name, spec = workload["metadata"]["name"], workload.get("spec") or {}
    serving = {p["metadata"]["name"] for p in current if ready_with_ip(p)}
    down = tuple(f"group {index} (leader {name}-{index})" for index in range(spec.get("replicas", 1))
                 if f"{name}-{index}" not in serving)
    return {"group_size": (spec.get("leaderWorkerTemplate") or {}).get("size", 1), "groups_down": down}


def replica_failure(deployment: dict) -> tuple[dt.datetime, str] | None:
    """Since when, and why, the Deployment's pods cannot be created (its ReplicaFailure condition: a quota, an
    admission policy), None while they can."""
    condition = next((c for c in (deployment.get("status") or {}).get("conditions") or []
                      if c.get("type") == "ReplicaFailure" and c.get("status") == "True"), None)
    since = timestamps.parse_aware((condition or {}).get("lastTransitionTime"))
    return (since, condition.get("message") or condition.get("reason") or "") if condition and since else None


def _observe_benchmarks(observed: Observed, benchmarks: Iterable[dict], owner_uid: str | None) -> None:
    """Each revision's gate DrafterBenchmark, and every finished benchmark that measured it, newest first.
    `benchmarks`: the serving's, as `benchmarked_serving` selects them (its label, else spec.servingRef)."""
    for benchmark in benchmarks:
        labels = benchmark["metadata"].get("labels") or {}
        gate = bool(labels.get(GATE_LABEL))
        if gate and owned_by(benchmark, owner_uid) and labels.get(REVISION_LABEL):
            observed.gates[labels[REVISION_LABEL]] = benchmark
        measured = benchmark_revision(benchmark)
        if measured and measured_the_serving(benchmark, owner_uid):
            observed.measured.setdefault(measured, []).append(benchmark)
    for revision, runs in observed.measured.items():
        observed.measured[revision] = newest_first([runs])


def measured_the_serving(benchmark: dict, owner_uid: str | None) -> bool:
    """Whether a benchmark of the serving (selected by `benchmarked_serving`) really measured it, so that its
    result may set the load schedule, status.lastBenchmark and the `auto` thresholds: the operator's own gate
    (owned by the serving), or a run whose target is the serving itself (spec.servingRef, which names a serving
    of the benchmark's namespace; its status.revision is the one the benchmark controller found active when
    the run started). An endpoint run measured a URL, whatever it is labelled with: anyone who may create a
    DrafterBenchmark may set its labels, and another serving's gate is that serving's. Such runs are not
    errors, only not this serving's evidence."""
    labels = benchmark["metadata"].get("labels") or {}
    if labels.get(GATE_LABEL):
        return owned_by(benchmark, owner_uid)
    target = ((benchmark.get("spec") or {}).get("servingRef") or {}).get("name")
    return target is not None and target == benchmarked_serving(labels, benchmark.get("spec") or {})


def benchmarked_serving(labels: Mapping, spec: Mapping) -> str | None:
    """The serving a DrafterBenchmark measures: a gate's by its label, anyone's by spec.servingRef."""
    return labels.get(SERVING_LABEL) or (spec.get("servingRef") or {}).get("name")


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
            return timestamps.parse(stamp) if stamp else None
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


def owned_by(child: dict | None, owner_uid: str | None) -> bool:
    if child is None or owner_uid is None:
        return child is not None
    return any(ref.get("uid") == owner_uid for ref in child["metadata"].get("ownerReferences") or [])


def _current(deployment: dict) -> bool:
    """readyReplicas only counts once the Deployment controller has seen the latest spec."""
    return deployment.get("status", {}).get("observedGeneration", 0) >= deployment["metadata"].get("generation", 0)

