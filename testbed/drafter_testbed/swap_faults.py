"""What must hold after a fault during a DrafterServing swap, and which phase of the swap a moment is in.

Shared by the fault benchmark (bench/swap_faults.py) and its smoke version in the test suite
(tests/e2e/test_swap_faults_smoke.py). Both work on a *snapshot*: every object of one namespace the
swap touches, read in one `kubectl get` (so one moment, not a mix of moments), which keeps the checks
and the phase pure functions of their input.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

SERVING_LABEL = "drafter.dev/serving"
REVISION_LABEL = "drafter.dev/revision"
GATE_LABEL = "drafter.dev/gate"
BENCHMARK_LABEL = "drafter.dev/benchmark"
#: Kinds a snapshot holds (kubectl resource names, one request).
SNAPSHOT_KINDS = "drafterservings,drafterbenchmarks,deployments,replicasets,pods,services,jobs"

# Phases of a swap, in the order a swap passes them (the harness aims its faults at these).
CREATED = "new revision created"
LOADING = "pods loading"
STOPPING = "old revision stopping (Recreate)"
GATING = "gate benchmark running"
SWITCH = "traffic switch"
DELETION = "old revision deletion"
SETTLED = "settled"
DEGRADING = "acceptance lowered, not yet acted on"
IN_FLIGHT = "degraded action in flight"

Snapshot = dict[str, list[dict]]  # kind (e.g. "Deployment") -> live objects, deleting ones left out
GetJson = Callable[..., dict]  # get_json(*kubectl_get_args) -> the parsed `kubectl get ... -o json`


def take_snapshot(get_json: GetJson, namespace: str) -> Snapshot:
    items = get_json("-n", namespace, SNAPSHOT_KINDS)["items"]
    out: Snapshot = {}
    for item in items:
        if not item["metadata"].get("deletionTimestamp"):
            out.setdefault(item["kind"], []).append(item)
    return out


@dataclass(frozen=True)
class Check:
    name: str
    held: bool
    detail: str


def _labelled(items: list[dict], serving: str) -> list[dict]:
    return [i for i in items if (i["metadata"].get("labels") or {}).get(SERVING_LABEL) == serving]


def _revision(obj: dict) -> str | None:
    return (obj["metadata"].get("labels") or {}).get(REVISION_LABEL)


def _ready_pod(pod: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in (pod.get("status") or {}).get("conditions") or [])


def _owner_uids(obj: dict) -> set[str]:
    return {o["uid"] for o in obj["metadata"].get("ownerReferences") or []}


def condition(status: dict, kind: str) -> dict:
    return next((c for c in status.get("conditions") or [] if c["type"] == kind), {})


def serving_of(snapshot: Snapshot, name: str) -> dict | None:
    return next((s for s in snapshot.get("DrafterServing", []) if s["metadata"]["name"] == name), None)


def service_revision(snapshot: Snapshot, name: str) -> str | None:
    service = next((s for s in snapshot.get("Service", []) if s["metadata"]["name"] == name), None)
    return ((service or {}).get("spec", {}).get("selector") or {}).get(REVISION_LABEL)


def swap_invariants(snapshot: Snapshot, name: str, history_before: list[str] = (),
                    expected_active: str | None = None, expected_previous: str | None = None) -> list[Check]:
    """The invariants of a finished swap of DrafterServing `name`: one active revision, the Service on a
    Ready revision, no duplicated or orphaned child, and a revisions history that only grew."""
    serving = serving_of(snapshot, name)
    if serving is None:
        return [Check("serving exists", False, f"DrafterServing {name} not found")]
    status, uid = serving.get("status") or {}, serving["metadata"]["uid"]
    active, selected = status.get("activeRevision"), service_revision(snapshot, name)
    deployments = _labelled(snapshot.get("Deployment", []), name)
    services = _labelled(snapshot.get("Service", []), name)
    gates = [b for b in _labelled(snapshot.get("DrafterBenchmark", []), name)
             if (b["metadata"].get("labels") or {}).get(GATE_LABEL) == "true"]
    checks = []

    def check(what: str, held: bool, detail: str) -> None:
        checks.append(Check(what, bool(held), detail))

    check("exactly one active revision",
          active is not None and active == selected and (expected_active is None or active == expected_active),
          f"status.activeRevision {active}, Service selector {selected}, expected {expected_active or 'any'}")
    by_revision = {_revision(d): d for d in deployments}
    serving_deployment = by_revision.get(selected) or {}
    wanted = (serving_deployment.get("spec") or {}).get("replicas", 0)
    ready_pods = [p for p in _labelled(snapshot.get("Pod", []), name) if _revision(p) == selected and _ready_pod(p)]
    check("Service points at a Ready revision",
          bool(serving_deployment) and wanted >= 1 and len(ready_pods) >= wanted
          and condition(status, "Ready").get("status") == "True",
          f"revision {selected}: {len(ready_pods)}/{wanted} pods Ready, Ready={condition(status, 'Ready').get('status')}")
    revisions = [_revision(d) for d in deployments]
    check("no duplicated Deployment", len(revisions) == len(set(revisions)) and revisions == [selected],
          f"Deployments by revision: {sorted(map(str, revisions))}")
    check("no duplicated Service", [s["metadata"]["name"] for s in services] == [name],
          f"Services: {sorted(s['metadata']['name'] for s in services)}")
    gate_revisions = [_revision(g) for g in gates]
    check("no duplicated gate benchmark", len(gate_revisions) == len(set(gate_revisions)),
          f"gate DrafterBenchmarks by revision: {sorted(map(str, gate_revisions))}")
    jobs = snapshot.get("Job", [])
    benchmark_uids = {b["metadata"]["uid"]: b for b in snapshot.get("DrafterBenchmark", [])}
    jobs_per_benchmark: dict[str, int] = {}
    for job in jobs:
        for owner in _owner_uids(job) & set(benchmark_uids):
            jobs_per_benchmark[owner] = jobs_per_benchmark.get(owner, 0) + 1
    running_jobs = [j for j in jobs if not (j.get("status") or {}).get("completionTime")
                    and not any(c["type"] in ("Complete", "Failed") and c["status"] == "True"
                                for c in (j.get("status") or {}).get("conditions") or [])]
    check("no duplicated Job", all(n == 1 for n in jobs_per_benchmark.values()) and not running_jobs,
          f"{len(jobs)} Job(s), per benchmark {sorted(jobs_per_benchmark.values())}, still running "
          f"{[j['metadata']['name'] for j in running_jobs]}")
    deployment_uids = {d["metadata"]["uid"] for d in snapshot.get("Deployment", [])}
    replicaset_uids = {r["metadata"]["uid"] for r in snapshot.get("ReplicaSet", [])}
    orphans = [f"{o['kind']} {o['metadata']['name']}" for o in deployments + services + gates if uid not in _owner_uids(o)]
    orphans += [f"Job {j['metadata']['name']}" for j in jobs if not _owner_uids(j) & set(benchmark_uids)]
    orphans += [f"ReplicaSet {r['metadata']['name']}" for r in _labelled(snapshot.get("ReplicaSet", []), name)
                if not _owner_uids(r) & deployment_uids]
    orphans += [f"Pod {p['metadata']['name']}" for p in _labelled(snapshot.get("Pod", []), name)
                if not _owner_uids(p) & replicaset_uids or _revision(p) != selected]
    check("no orphaned Deployment, ReplicaSet, pod, Job or Service", not orphans,
          f"orphans: {orphans}" if orphans else "every child owned by a live parent")
    history = [r["name"] for r in status.get("revisions") or []]
    entry = next((r for r in status.get("revisions") or [] if r["name"] == active), {})
    previous = status.get("previousRevision")
    problems = []
    if len(history) != len(set(history)):
        problems.append(f"repeated names {history}")
    if history[:len(history_before)] != list(history_before):
        problems.append(f"{history_before} before the fault is not a prefix of {history}")
    if entry.get("good") is not True:
        problems.append(f"active revision {active} not recorded as good ({entry})")
    if expected_previous is not None and previous != expected_previous:
        problems.append(f"previousRevision {previous}, expected {expected_previous}")
    if previous is not None and previous not in history:
        problems.append(f"previousRevision {previous} not in the history")
    check("revisions history intact", not problems,
          "; ".join(problems) or f"{history}, active {active}, previous {previous}")
    return checks


def swap_phase(snapshot: Snapshot, name: str, old: str) -> str:
    """Which phase a swap away from revision `old` is in (SETTLED when nothing is moving)."""
    status = (serving_of(snapshot, name) or {}).get("status") or {}
    selected = service_revision(snapshot, name)
    deployments = {_revision(d): d for d in _labelled(snapshot.get("Deployment", []), name)}
    new = next((r for r in deployments if r != selected), None)
    where = ""
    if selected != old and len(deployments) > 1:
        where = DELETION
    elif new is not None:
        pods = [p for p in _labelled(snapshot.get("Pod", []), name) if _revision(p) == new]
        gates = [b for b in snapshot.get("DrafterBenchmark", []) if _revision(b) == new
                 and (b["metadata"].get("labels") or {}).get(GATE_LABEL) == "true"]
        if gates and (gates[0].get("status") or {}).get("state") not in ("Succeeded", "Failed"):
            where = GATING
        elif any(_ready_pod(p) for p in pods):
            where = SWITCH
        elif pods:
            where = LOADING
        else:
            where = CREATED
    elif ((deployments.get(selected) or {}).get("spec") or {}).get("replicas") == 0:
        where = STOPPING  # Recreate: the old revision scaled to zero, the new one not created yet
    action = status.get("degradedAction")
    if action and where and (action.get("revision") != selected or where == DELETION):
        return f"{IN_FLIGHT}: {where}"
    return where or SETTLED


def wait_for_invariants(get_json: GetJson, namespace: str, name: str, timeout: float, **expected) -> tuple[list[Check], float]:
    """Poll until every invariant holds (a swap settles: the old revision drains, then goes) or `timeout`;
    returns the last checks and the seconds it took."""
    started = time.monotonic()
    while True:
        checks = swap_invariants(take_snapshot(get_json, namespace), name, **expected)
        if all(c.held for c in checks) or time.monotonic() - started > timeout:
            return checks, time.monotonic() - started
        time.sleep(1)
