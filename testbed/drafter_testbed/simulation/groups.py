"""The simulated LeaderWorkerSet controller (LWS v0.9.0, as far as the operator can see it): a set of `spec.replicas`
groups of `spec.leaderWorkerTemplate.size` pods each, one whole node per pod.

Group i is the leader pod `<set>-<i>` (from the leaderTemplate) and the workers `<set>-<i>-<j>`, j = 1..size-1 (from
the workerTemplate), every pod labelled with the set's name, its group index, its worker index (0: the leader) and
the hash of the templates it was made from. The real controller owns the leaders by a leader StatefulSet and each
group's workers by a StatefulSet of their own; here every pod is owned by the set itself, which is all the world's
bookkeeping needs (the operator reads pods by their labels only).

With `restartPolicy: RecreateGroupOnPodRestart` (what the operator's builder sets) a pod of a group that is deleted,
vanishes with its node, or whose container restarted takes its whole group down: every pod of the group goes, and the
group is made again once none is left (the leader's name comes back with it, as a StatefulSet's does). A leader is
Ready only when its engine is and every worker of its group runs (the engines' leader waits for every rank); a worker
has no probe, so it is Ready once it runs. A template change rolls one group at a time (`maxUnavailable: 1`): an
outdated group that is not Ready goes at once, a Ready one only while every other group is Ready. The status is the
real controller's: `observedGeneration`, `replicas` (groups made), `readyReplicas` (groups whose leader and workers
are all Ready, of the current templates or not) and `updatedReplicas`.
"""

from __future__ import annotations

from drafter_operator.resources.group import SET_LABEL, WORKER_INDEX_LABEL

from drafter_testbed.simulation.objects import NS, POD_COLLECTION, owner_uid, ready, template_hash

GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
TEMPLATE_HASH_LABEL = "leaderworkerset.sigs.k8s.io/template-revision-hash"
#: Why a group went down when no pod of it says (its container restarted: the engine exited).
ENGINE_RESTART = "group-restart"
CONTROLLER = "lws-controller"
RETRY_SECONDS = 5.0  # how soon the controller looks again at a group it cannot make yet


def is_leader(pod: dict) -> bool:
    return (pod["metadata"].get("labels") or {}).get(WORKER_INDEX_LABEL) == "0"


def pod_names(lws: str, index: int, size: int) -> list[str]:
    """Group ``index``'s pods: its leader, then its workers."""
    return [f"{lws}-{index}"] + [f"{lws}-{index}-{worker}" for worker in range(1, size)]


def is_worker(pod: dict) -> bool:
    """A group's pod other than its leader (no API, no probes, not the operator's to see)."""
    index = (pod["metadata"].get("labels") or {}).get(WORKER_INDEX_LABEL)
    return index is not None and index != "0"


def group_index(pod: dict) -> int | None:
    index = (pod["metadata"].get("labels") or {}).get(GROUP_INDEX_LABEL)
    return int(index) if index is not None else None


def restarted(pod: dict) -> bool:
    """LWS's ContainerRestarted: a container of a pod still Pending or Running was restarted."""
    status = pod.get("status") or {}
    return status.get("phase") in ("Pending", "Running") and any(
        (c.get("restartCount") or 0) > 0 for c in status.get("containerStatuses") or [])


def running(pod: dict) -> bool:
    return not pod["metadata"].get("deletionTimestamp") and ready(pod)


class GroupController:
    """The LeaderWorkerSets' controller over the world's cluster (its scheduler and kubelet place and start the pods)."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.api = cluster.api
        self.clock = cluster.clock
        self.sync_due: set[str] = set()
        self.down: dict[tuple[str, int], str] = {}  # (set uid, group index) -> why the group is going down
        self.loaded: set[tuple[str, str]] = set()  # (leader key, uid): engines loaded, waiting for their workers

    def changed(self, key: str) -> None:
        if key not in self.sync_due:
            self.sync_due.add(key)
            self.clock.after(0.5, self.sync, key)

    def groups_of(self, uid: str) -> dict[int, list[tuple[str, dict]]]:
        groups: dict[int, list[tuple[str, dict]]] = {}
        for key, pod in self.cluster.pods_of(uid):
            index = group_index(pod)
            if index is not None:
                groups.setdefault(index, []).append((key, pod))
        return groups

    def pod_leaving(self, pod: dict, cause: str) -> None:
        """A pod of a set is deleted or lost its node: its group goes down, for that reason."""
        uid, index = owner_uid(pod), group_index(pod)
        if uid is not None and index is not None:
            self.down.setdefault((uid, index), cause)

    def sync(self, key: str) -> None:
        self.sync_due.discard(key)
        lws = self.api.store.get(key)
        if lws is None or lws["metadata"].get("deletionTimestamp"):
            return
        uid, spec = lws["metadata"]["uid"], lws["spec"]
        template = spec.get("leaderWorkerTemplate") or {}
        size, wanted = int(template.get("size", 1)), int(spec.get("replicas", 1))
        current = template_hash(template)
        groups = self.groups_of(uid)
        for index, pods in groups.items():
            if index >= wanted:
                self.take_down(uid, index, pods, "scale-down")
            elif (uid, index) in self.down or len(pods) < size or any(restarted(p) for _, p in pods) \
                    or any(p["metadata"].get("deletionTimestamp") for _, p in pods):
                self.take_down(uid, index, pods, ENGINE_RESTART)
        # One outdated group at a time (maxUnavailable 1): an unavailable one goes at once, a Ready one only while all
        # the others are Ready; the highest index first, as a StatefulSet rolls.
        outdated = sorted((i for i, pods in groups.items() if i < wanted and (uid, i) not in self.down
                           and any(p["metadata"]["labels"].get(TEMPLATE_HASH_LABEL) != current for _, p in pods)),
                          reverse=True)
        unavailable = [i for i in range(wanted) if not self.group_ready(groups.get(i, []), size)]
        for index in outdated:
            if index in unavailable:
                self.take_down(uid, index, groups[index], "template-change")
            elif not unavailable:
                self.take_down(uid, index, groups[index], "template-change")
                unavailable.append(index)
        for index in range(wanted):
            if index in groups:
                continue
            names = pod_names(lws["metadata"]["name"], index, size)
            if any(f"{POD_COLLECTION}/{name}" in self.api.store for name in names):
                # A StatefulSet makes a pod only once the pod of that name is gone: the pods of a set deleted a moment
                # ago under the same name (a set re-created) still terminate.
                self.clock.after(RETRY_SECONDS, self.changed, key)
                continue
            self.down.pop((uid, index), None)
            self.create_group(lws, index, names, current)
        for leader_key, leader_uid in sorted(self.loaded):
            self.leader_may_serve(leader_key, leader_uid)
        self.write_status(key)

    def take_down(self, uid: str, index: int, pods: list[tuple[str, dict]], cause: str) -> None:
        cause = self.down.setdefault((uid, index), cause)
        for key, pod in pods:
            if not pod["metadata"].get("deletionTimestamp"):
                self.cluster.delete_pod(key, cause)

    @staticmethod
    def group_ready(pods: list[tuple[str, dict]], size: int) -> bool:
        return len(pods) == size and all(running(p) for _, p in pods)

    def create_group(self, lws: dict, index: int, names: list[str], current: str) -> None:
        name = lws["metadata"]["name"]
        templates = lws["spec"]["leaderWorkerTemplate"]
        for worker, pod_name in enumerate(names):
            template = templates.get("leaderTemplate") if worker == 0 else None
            template = template or templates.get("workerTemplate") or {}
            labels = {**((template.get("metadata") or {}).get("labels") or {}), SET_LABEL: name,
                      GROUP_INDEX_LABEL: str(index), WORKER_INDEX_LABEL: str(worker), TEMPLATE_HASH_LABEL: current}
            pod = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": pod_name, "namespace": NS, "labels": labels,
                                "annotations": dict((template.get("metadata") or {}).get("annotations") or {}),
                                "ownerReferences": [{"apiVersion": lws["apiVersion"], "kind": lws["kind"],
                                                     "name": name, "uid": lws["metadata"]["uid"], "controller": True}]},
                   "spec": {**(template.get("spec") or {})},
                   "status": {"phase": "Pending"}}
            self.cluster.add_pod(CONTROLLER, f"{POD_COLLECTION}/{pod_name}", pod)

    def write_status(self, key: str) -> None:
        lws = self.api.store.get(key)
        if lws is None:
            return
        template = lws["spec"].get("leaderWorkerTemplate") or {}
        size, current = int(template.get("size", 1)), template_hash(template)
        groups = self.groups_of(lws["metadata"]["uid"])
        made = {i: pods for i, pods in groups.items() if any(is_leader(p) for _, p in pods)}
        status = {"observedGeneration": lws["metadata"]["generation"], "replicas": len(made),
                  "readyReplicas": sum(self.group_ready(pods, size) for pods in made.values()),
                  "updatedReplicas": sum(all(p["metadata"]["labels"].get(TEMPLATE_HASH_LABEL) == current
                                             for _, p in pods) for pods in made.values())}
        if lws.get("status") != status:
            self.api.put(CONTROLLER, key, {**lws, "status": status})

    # ------------------------------------------------------------------ the leader waits for its workers
    def engine_loaded(self, key: str, pod: dict) -> bool:
        """A leader's engine loaded: whether it may be Ready now (every worker of its group runs); if not, it is
        Ready when they do."""
        if self.workers_run(pod):
            return True
        self.loaded.add((key, pod["metadata"]["uid"]))
        return False

    def workers_run(self, leader: dict) -> bool:
        uid, index = owner_uid(leader), group_index(leader)
        lws = self.api.store.get(self.api.by_uid.get(uid or "", ""))
        if lws is None:
            return False
        size = int((lws["spec"].get("leaderWorkerTemplate") or {}).get("size", 1))
        workers = [p for _, p in self.groups_of(uid).get(index, []) if not is_leader(p)]
        return len(workers) == size - 1 and all(running(p) for p in workers)

    def leader_may_serve(self, key: str, uid: str) -> None:
        pod = self.api.store.get(key)
        if pod is None or pod["metadata"]["uid"] != uid or pod["metadata"].get("deletionTimestamp"):
            self.loaded.discard((key, uid))
        elif self.workers_run(pod):
            self.loaded.discard((key, uid))
            self.cluster.engine_ready(key, uid)
