"""The cluster's own controllers: Deployments -> pods (Recreate inside a Deployment), LeaderWorkerSets -> groups of
pods (groups.py), a GPU scheduler over a finite set of 8-GPU nodes, the kubelet (slow starts, Ready, engine exits, never-ready starts),
node loss, the garbage collector's timing, and the benchmark controller finishing gate DrafterBenchmarks.

Every write goes through the fake apiserver (`put`, `patch_as`, `remove`), so the operator's view and
the invariants see the same history. What a revision does (start time, crash, gate verdict) is drawn
once per revision from the scenario seed: a broken config crashes every time, as a real one does.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

from drafter_operator.constants import K_ANNOTATION
from drafter_operator.resources.engine import ENGINE_CONTAINER
from drafter_operator.resources.gate import GATE_LABEL
from drafter_operator.resources.labels import REVISION_LABEL, SERVING_LABEL

from drafter_testbed.simulation.groups import GroupController, is_leader, is_worker
from drafter_testbed.simulation.objects import (  # noqa: F401 - NS, owner_uid, ready: the world's modules read them here
    GPUS_PER_NODE,
    NS,
    POD_COLLECTION,
    owner_uid,
    pod_gpus,
    ready,
    template_hash,
    workloads_of,
)

TERMINATION_GRACE = 10.0  # seconds a deleted pod keeps its GPUs
FAST_STARTUP = 40.0  # seconds to Ready of a revision in `fast_start`
WORKER_START = 5.0  # seconds from a group worker's scheduling to its container running
DEAD_ENDPOINT = "DeadEndpoint"  # a gate's verdict when it was aimed at no live pod (the operator's mistake)


@dataclass(frozen=True)
class Fate:
    """What one revision does in this scenario."""

    startup: float  # mean seconds to Ready
    broken: bool  # its engine exits before Ready, every time
    never_ready: bool  # loads forever (past any startup timeout)
    gate: str  # "Passed" | "Failed" | "BenchmarkFailed" | "Never"
    gate_seconds: float
    acceptance: float  # its base acceptance rate


def fate_of(seed: int, revision: str) -> Fate:
    rng = random.Random(f"{seed}/{revision}")
    roll = rng.random()
    return Fate(startup=rng.uniform(60, 1500), broken=roll < 0.07, never_ready=0.07 <= roll < 0.11,
                gate=rng.choices(["Passed", "Failed", "BenchmarkFailed", "Never"], [70, 15, 7, 8])[0],
                gate_seconds=rng.uniform(120, 1200), acceptance=rng.uniform(0.45, 0.85))


class Cluster:
    def __init__(self, world, nodes: int):
        self.world = world
        self.api = world.api
        self.clock = world.clock
        self.nodes: dict[str, int] = {f"node-{i}": GPUS_PER_NODE for i in range(nodes)}  # node -> GPUs
        self.used: dict[str, int] = {n: 0 for n in self.nodes}
        self.pending: list[str] = []  # unschedulable pod keys, oldest first
        self.pod_seq = 0
        self.ip_seq = 0
        self.sync_due: set[str] = set()
        self.template_hashes: dict[tuple[str, str], str] = {}  # (key, resourceVersion) -> hash
        self.removal_cause: dict[str, str] = {}  # pod key -> why it is going
        self.deleted_by: dict[str, str] = {}  # Deployment uid -> who deleted it (actor)
        self.fast_start: set[str] = set()  # revisions that load quickly (a second swap within the first's drain)
        self.groups = GroupController(self)

    def workload_changed(self, key: str) -> None:
        """A pod of this workload changed: its controller looks again."""
        if "/leaderworkersets/" in key:
            self.groups.changed(key)
        else:
            self.deployment_changed(key)

    # ------------------------------------------------------------------ Deployment controller
    def deployment_changed(self, key: str) -> None:
        if key not in self.sync_due:
            self.sync_due.add(key)
            self.clock.after(0.5, self.sync, key)

    def pods_of(self, uid: str) -> list[tuple[str, dict]]:
        return [(k, p) for k, p in self.api.store.items() if k.startswith(POD_COLLECTION + "/") and owner_uid(p) == uid]

    def _hash(self, key: str, d: dict) -> str:
        cache_key = (key, d["metadata"]["resourceVersion"])
        h = self.template_hashes.get(cache_key)
        if h is None:
            h = self.template_hashes[cache_key] = template_hash(d["spec"]["template"])
        return h

    def sync(self, key: str) -> None:
        self.sync_due.discard(key)
        d = self.api.store.get(key)
        if d is None or d["metadata"].get("deletionTimestamp"):
            return
        uid = d["metadata"]["uid"]
        h = self._hash(key, d)
        pods = self.pods_of(uid)
        live = [(k, p) for k, p in pods if not p["metadata"].get("deletionTimestamp")]
        old = [(k, p) for k, p in pods if p["metadata"]["labels"].get("pod-template-hash") != h]
        replicas = d["spec"].get("replicas", 1)
        if old:  # Recreate: every pod of the old template goes before any of the new one starts
            for k, p in old:
                if not p["metadata"].get("deletionTimestamp"):
                    self.delete_pod(k, "template-change")
        elif len(live) < replicas:
            for _ in range(replicas - len(live)):
                self.create_pod(d, h)
        elif len(live) > replicas:
            extra = sorted(live, key=lambda kp: (ready(kp[1]), kp[1]["metadata"]["creationTimestamp"], kp[0]))
            for k, _ in extra[:len(live) - replicas]:
                self.delete_pod(k, "scale-down")
        self.write_status(key)

    def write_status(self, key: str) -> None:
        d = self.api.store.get(key)
        if d is None:
            return
        h = self._hash(key, d)
        pods = [p for _, p in self.pods_of(d["metadata"]["uid"]) if not p["metadata"].get("deletionTimestamp")]
        current = [p for p in pods if p["metadata"]["labels"].get("pod-template-hash") == h]
        status = {"observedGeneration": d["metadata"]["generation"], "replicas": len(pods),
                  "updatedReplicas": len(current), "readyReplicas": sum(map(ready, current))}
        if d.get("status") != status:
            self.api.put("deployment-controller", key, {**d, "status": status})

    def create_pod(self, d: dict, h: str) -> None:
        self.pod_seq += 1
        template = d["spec"]["template"]
        name = f"{d['metadata']['name'][:50]}-{h[:5]}-{self.pod_seq:05d}"
        labels = {**(template.get("metadata") or {}).get("labels", {}), "pod-template-hash": h}
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": NS, "labels": labels,
                            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                                 "name": d["metadata"]["name"], "uid": d["metadata"]["uid"],
                                                 "controller": True}]},
               "spec": {**template.get("spec", {})},
               "status": {"phase": "Pending"}}
        self.add_pod("deployment-controller", f"{POD_COLLECTION}/{name}", pod)

    def add_pod(self, actor: str, key: str, pod: dict) -> None:
        """A controller's new pod, for the scheduler to place."""
        assert key not in self.api.store, f"{actor} would replace {key}, which is still there"
        self.api.put(actor, key, pod)
        self.pending.append(key)
        self.clock.after(0.2, self.schedule)

    def delete_pod(self, key: str, cause: str) -> None:
        pod = self.api.store.get(key)
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            return
        self.removal_cause[key] = cause
        self.groups.pod_leaving(pod, cause)
        self.api.put("deployment-controller", key, {
            **pod, "metadata": {**pod["metadata"], "deletionTimestamp": self.clock.iso()},
            "status": {**pod["status"], "conditions": [c for c in pod["status"].get("conditions") or []
                                                       if c["type"] != "Ready"] + [{"type": "Ready", "status": "False"}]}})
        self.clock.after(TERMINATION_GRACE, self.pod_gone, key, pod["metadata"]["uid"])

    def pod_gone(self, key: str, uid: str | None = None) -> None:
        pod = self.api.store.get(key)
        if pod is None or (uid is not None and pod["metadata"]["uid"] != uid):
            return  # gone already (its node was lost), and a group's pod of the same name may be there now
        node = pod["spec"].get("nodeName")
        self.api.store.get(key) and self.api._drop("kubelet", "pods", key)
        if node in self.used:
            self.used[node] -= pod_gpus(pod)
            self.clock.after(0.2, self.schedule)
        if key in self.pending:
            self.pending.remove(key)
        self.removal_cause.pop(key, None)
        self._owner_changed(pod)

    def collect_pods_of_gone_workloads(self) -> None:
        """The garbage collector's part for pods: a pod whose Deployment or LeaderWorkerSet is gone terminates."""
        for key, pod in list(self.api.store.items()):
            if key.startswith(POD_COLLECTION + "/") and owner_uid(pod) and owner_uid(pod) not in self.api.by_uid:
                actor = self.deleted_by.get(owner_uid(pod), "garbage-collector")
                self.delete_pod(key, "serving-deleted" if actor == "garbage-collector" else f"workload-deleted:{actor}")

    # ------------------------------------------------------------------ scheduler and kubelet
    def schedule(self) -> None:
        for key in list(self.pending):
            pod = self.api.store.get(key)
            if pod is None or pod["metadata"].get("deletionTimestamp"):
                self.pending.remove(key)
                continue
            need = pod_gpus(pod)
            node = next((n for n, gpus in self.nodes.items() if gpus - self.used[n] >= need), None)
            if node is None:
                message = (f"0/{len(self.nodes)} nodes are available: {len(self.nodes)} Insufficient nvidia.com/gpu. "
                           "preemption: 0/0 nodes are available")
                cond = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}]
                if pod["status"].get("conditions") != cond:
                    self.api.put("scheduler", key, {**pod, "status": {"phase": "Pending", "conditions": cond}})
                    self.world.track.pod_unschedulable(pod)
                continue
            self.pending.remove(key)
            self.used[node] += need
            self.api.put("scheduler", key, {**pod, "spec": {**pod["spec"], "nodeName": node},
                                            "status": {"phase": "Pending", "conditions": [
                                                {"type": "PodScheduled", "status": "True",
                                                 "lastTransitionTime": self.clock.iso()}]}})
            worker = is_worker(pod)
            if not worker:  # a group's worker serves nothing: its leader's times are the revision's
                self.world.track.pod_scheduled(pod)
            revision = pod["metadata"]["labels"].get(REVISION_LABEL, "")
            fate = fate_of(self.world.seed, revision)
            rng = self.world.rng
            uid = pod["metadata"]["uid"]
            if fate.broken:
                self.clock.after(rng.uniform(20, 180), self.engine_exits, key, uid)
            elif worker:  # no probe: Ready once its container runs (its rank joins the leader's engine)
                self.clock.after(WORKER_START, self.engine_ready, key, uid)
            elif not fate.never_ready:
                startup = FAST_STARTUP if revision in self.fast_start else fate.startup
                self.clock.after(startup * rng.uniform(0.8, 1.25), self.engine_ready, key, uid)

    def engine_ready(self, key: str, uid: str | None = None) -> None:
        pod = self.api.store.get(key)
        if pod is None or pod["metadata"].get("deletionTimestamp") or not pod["spec"].get("nodeName") \
                or (uid is not None and pod["metadata"]["uid"] != uid):
            return
        if is_leader(pod) and not self.groups.engine_loaded(key, pod):
            return  # the leader's engine waits for every rank of its group
        self.ip_seq += 1
        status = {"phase": "Running", "podIP": f"10.{self.ip_seq // 65536 % 256}.{self.ip_seq // 256 % 256}.{self.ip_seq % 256}",
                  "conditions": [c for c in pod["status"].get("conditions") or [] if c["type"] == "PodScheduled"]
                  + [{"type": "Ready", "status": "True"}],
                  "containerStatuses": [{"name": ENGINE_CONTAINER, "ready": True, "started": True,
                                         "state": {"running": {}}, "restartCount": 0}]}
        self.api.put("kubelet", key, {**pod, "status": status})
        if not is_worker(pod):
            self.world.track.pod_ready(pod)
        self._owner_changed(pod)

    def engine_exits(self, key: str, uid: str | None = None) -> None:
        pod = self.api.store.get(key)
        if pod is None or pod["metadata"].get("deletionTimestamp") or not pod["spec"].get("nodeName") \
                or (uid is not None and pod["metadata"]["uid"] != uid):
            return
        self.world.track.engine_exited(pod)
        status = {"phase": "Running", "conditions": [c for c in pod["status"].get("conditions") or []
                                                     if c["type"] == "PodScheduled"]
                  + [{"type": "Ready", "status": "False"}],
                  "containerStatuses": [{"name": ENGINE_CONTAINER, "ready": False, "started": False,
                                         "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                                         "lastState": {"terminated": {"exitCode": 1, "message":
                                                                      "ValueError: unrecognized arguments"}},
                                         "restartCount": 1}]}
        self.api.put("kubelet", key, {**pod, "status": status})
        self._owner_changed(pod)

    def _owner_changed(self, pod: dict) -> None:
        owner_key = self.api.by_uid.get(owner_uid(pod) or "")
        if owner_key:
            self.workload_changed(owner_key)

    # ------------------------------------------------------------------ node loss
    def lose_node(self, node: str, back_after: float) -> None:
        if node not in self.nodes:
            return
        del self.nodes[node]
        self.world.track.node_lost_at = self.clock.t
        for key, pod in list(self.api.store.items()):
            if key.startswith(POD_COLLECTION + "/") and pod["spec"].get("nodeName") == node:
                self.removal_cause[key] = "node-loss"
                self.groups.pod_leaving(pod, "node-loss")
                self.api._drop("node-lifecycle", "pods", key)
                self._owner_changed(pod)
        self.used.pop(node, None)
        self.clock.after(back_after, self.node_back, node)

    def node_back(self, node: str) -> None:
        self.nodes[node] = GPUS_PER_NODE
        self.used[node] = 0
        self.schedule()

    def revisions_holding_gpus(self, uid: str) -> set[str]:
        """Revisions of a serving (by the serving's uid) whose pods hold GPUs (bound to a node)."""
        owned = set(workloads_of(self.api.store, uid))
        out = set()
        for k, pod in self.api.store.items():
            if k.startswith(POD_COLLECTION + "/") and pod["spec"].get("nodeName") and \
                    self.api.by_uid.get(owner_uid(pod) or "") in owned:
                out.add(pod["metadata"]["labels"].get(REVISION_LABEL))
        return out

    # ------------------------------------------------------------------ gate benchmarks
    def benchmark_created(self, key: str, body: dict) -> None:
        labels = body["metadata"].get("labels") or {}
        if not labels.get(GATE_LABEL):
            return
        fate = fate_of(self.world.seed, labels.get(REVISION_LABEL, ""))
        if not self.endpoint_alive(body):
            # A gate aimed at a pod that is gone (an IP a ghost in the operator's view still carried): the bench
            # client's connections are refused at once, whatever the revision would have measured.
            self.clock.after(30.0, self.finish_benchmark, key, body["metadata"]["uid"], DEAD_ENDPOINT)
        elif fate.gate != "Never":
            self.clock.after(fate.gate_seconds, self.finish_benchmark, key, body["metadata"]["uid"], fate.gate)

    def endpoint_alive(self, benchmark: dict) -> bool:
        """Whether the pod at the benchmark's spec.endpoint is live and Ready now."""
        endpoint = (benchmark.get("spec") or {}).get("endpoint") or ""
        ip = endpoint.split("://", 1)[-1].rsplit(":", 1)[0]
        return any(k.startswith(POD_COLLECTION + "/") and (p.get("status") or {}).get("podIP") == ip
                   and not p["metadata"].get("deletionTimestamp") and ready(p) for k, p in self.api.store.items())

    def finish_benchmark(self, key: str, uid: str, verdict: str) -> None:
        b = self.api.store.get(key)
        if b is None or b["metadata"]["uid"] != uid:
            return
        revision = b["metadata"]["labels"].get(REVISION_LABEL)
        if verdict in ("BenchmarkFailed", DEAD_ENDPOINT):
            message = "the benchmark pod was evicted" if verdict == "BenchmarkFailed" else \
                "connection refused: no engine answers at the endpoint"
            status = {"state": "Failed", "conditions": [{"type": "Failed", "status": "True", "message": message}]}
        else:
            status = {"state": "Succeeded", "completionTime": self.clock.iso(), "revision": revision,
                      "result": {"verdict": verdict, "verdictMessage": f"gate {verdict.lower()}",
                                 "tokensPerSecond": 90.0, "speedup": 1.3 if verdict == "Passed" else 0.9,
                                 "acceptanceLength": self.gate_length(b, revision)}}
        self.api.patch_as("benchmark-controller", key + "/status", {"status": status})
        self.world.track.gate_finished(b, verdict)

    def gate_length(self, benchmark: dict, revision: str | None) -> float:
        """The mean acceptance length a gate measures: the revision's own (1 + k x its base rate), or for about one
        revision in three a run easier than the traffic (1.6 times the accepted tokens), so its live length stays
        below the figure at promotion by more than the default tolerance and DriftDetected has something to find.
        Drawn from a hash, not the scenario's random stream, so every other draw stays as it was."""
        k = int((benchmark["metadata"].get("annotations") or {}).get(K_ANNOTATION) or 1)
        easier = int(hashlib.sha1(f"{self.world.seed}/{revision}/gate".encode()).hexdigest(), 16) % 3 == 0
        return round(1 + k * fate_of(self.world.seed, revision or "").acceptance * (1.6 if easier else 1.0), 3)

    def finish_tenant_benchmark(self, key: str, revision: str, speedup: float) -> None:
        """A tenant's run ends with a result: a load sweep, a speedup and acceptance figures (an endpoint run's
        revision is its label; a run against a serving measured that serving's active revision)."""
        b = self.api.store.get(key)
        if b is None:
            return
        levels = [{"concurrency": c, "speedup": round(speedup * f, 2), "tokensPerSecond": 50.0}
                  for c, f in ((1, 1.2), (8, 1.0), (32, 0.6))]
        status = {"state": "Succeeded", "completionTime": self.clock.iso(), "revision": revision,
                  "result": {"tokensPerSecond": 50.0, "speedup": speedup, "acceptanceLength": 1.2, "levels": levels}}
        self.api.patch_as("benchmark-controller", key + "/status", {"status": status})
