"""A fleet on the local cluster: 500 DrafterServings in 50 namespaces on kwok 8-GPU nodes (issue 13, "Scale").

Runs on its OWN local cluster (DRAFTER_STATE_DIR=/tmp/fleet-cluster, DRAFTER_PORT_BASE=18440 unless set),
started with `cluster up --audit` so the apiserver logs every request of the admin user. Every wait is
bounded by --timeout; the cluster is wiped at the end unless --keep (after a failure it is stopped and
its logs kept; a cluster that was already running there is left running).

Phases:
1. `cluster up --audit`; `cluster add-nodes --runtime kwok` until there are --servings + --samples + 2
   free 8-GPU kwok nodes (each seed serving takes a whole node); CRDs; --namespaces namespaces `fleet-NN`.
2. Cold start: the --servings servings (the seed example, kwok placement, no modelClaim; spread evenly
   over the namespaces) applied with `kubectl apply --server-side` while no operator runs; then the
   operator is started (t0 = its spawn) and every serving timed to Ready=True.
3. Steady state: after --settle-seconds, a --steady-seconds window: every request the operator sent,
   counted from the audit log (userAgent `kopf/...` for kopf's own watches, patches and Events,
   `drafter-operator/...` for its reconciler's client), reads and writes apart; CPU and RSS sampled from
   /proc every second; reconciles from its /metrics.
4. New servings while the fleet exists: --samples servings on the normal path (a drafter no known-bad row
   names, no acceptance watch on engine-less kwok pods) created one at a time (a POST from this process; t0
   just before it) in namespace fleet-new, each timed to Deployment created, Deployment Ready and serving
   Ready; the operator's writes and Events per serving from the audit log. Then all of them deleted at once:
   the operator's writes until the garbage collector has removed their Deployments.
5. Drafter swaps: --swaps servings (spread over the namespaces) get spec.drafter.numSpeculativeTokens
   changed at once (patches sent from --swaps threads); each is timed to "noticed" (status.observedGeneration
   reaches the new generation), to the new activeRevision Ready, and to its old Deployment gone.

With --shards N the operator is N processes, each `run --shards N` (controllers/sharding.py): each takes one shard's
Lease and reconciles its share. Their CPU and RSS are summed as "operator", and each one's RSS is reported too; the
checks hold each process to the RSS goal.

Times come from cluster-wide watches (DrafterServings; Deployments labelled drafter.dev/serving) opened
before each phase, stamped on receipt with this process's monotonic clock. The operator's share of a
serving's apply -> Ready is apply -> Deployment created plus Deployment Ready -> serving Ready; the
control plane's is Deployment created -> Deployment Ready (ReplicaSet, pod, scheduling, kwok).

Usage: python bench/fleet_scale.py [--servings 500] [--namespaces 50] [--samples 40] [--swaps 50]
                                   [--steady-seconds 120] [--keep] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

os.environ.setdefault("DRAFTER_STATE_DIR", "/tmp/fleet-cluster")
os.environ.setdefault("DRAFTER_PORT_BASE", "18440")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import serving_scale as base  # noqa: E402 - after the state directory defaults above
from serving_scale import GROUP, PLURAL, VERSION, BenchError, exit_with, log  # noqa: E402
from drafter_testbed import harness  # noqa: E402

from fleet_figures import NAMESPACE_PREFIX, count_audit, percentiles, read_audit, spread, swap_targets  # noqa: E402

from drafter_operator.resources.labels import SERVING_LABEL, deployment_name  # noqa: E402

BENCH_AGENT = "fleet-scale-bench"  # the watches' userAgent: never counted as the operator's


# ---------------------------------------------------------------- sampling the operator's process
class ProcessSampler(threading.Thread):
    """CPU seconds and RSS of some processes from /proc once a second."""

    def __init__(self, pids: dict[str, int | list[int]]):
        super().__init__(daemon=True)
        self.pids = {name: pid if isinstance(pid, list) else [pid] for name, pid in pids.items()}  # a group: summed
        self.samples: dict[str, list[tuple[float, float, float]]] = {n: [] for n in pids}  # (t, cpu s, rss MiB)
        self.stop_event = threading.Event()
        self.ticks = os.sysconf("SC_CLK_TCK")

    def run(self) -> None:
        while not self.stop_event.is_set():
            now = time.monotonic()
            for name, pids in self.pids.items():
                try:
                    stats = [Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split() for pid in pids]
                    rss = sum(int(fields[21]) for fields in stats) * os.sysconf("SC_PAGE_SIZE") / 2**20
                    cpu = sum(int(fields[11]) + int(fields[12]) for fields in stats) / self.ticks
                    self.samples[name].append((now, cpu, rss))
                except (OSError, IndexError, ValueError):
                    continue
            self.stop_event.wait(1.0)

    def stop(self) -> None:
        self.stop_event.set()

    def window(self, name: str, since: float, until: float) -> dict:
        """Mean and peak CPU (% of one core; peak over 5-s spans) and RSS over [since, until]."""
        points = [p for p in self.samples.get(name, []) if since <= p[0] <= until]
        if len(points) < 2:
            return {}
        mean = 100 * (points[-1][1] - points[0][1]) / (points[-1][0] - points[0][0])
        peaks = [100 * (b[1] - a[1]) / (b[0] - a[0]) for a, b in zip(points, points[5:]) if b[0] > a[0]]
        return {"cpuPercentMean": round(mean, 1), "cpuPercentPeak5s": round(max(peaks or [mean]), 1),
                "rssMiBEnd": round(points[-1][2], 1), "rssMiBMax": round(max(p[2] for p in points), 1)}


# ---------------------------------------------------------------- cluster-wide watches
class FleetWatcher:
    """Stamps, on receipt, what the phases time: per serving its first Ready=True, the first moment each
    (activeRevision, Ready=True) and each observedGeneration was seen; per Deployment (namespace, name)
    when it was first seen, first had a ready replica, and was deleted."""

    def __init__(self, kubeconfig: str):
        from kubernetes import client, config

        self.api_client = config.new_client_from_config(config_file=kubeconfig)
        self.api_client.user_agent = BENCH_AGENT  # not counted as the operator's in the audit log
        self.custom = client.CustomObjectsApi(self.api_client)
        self.changed = threading.Condition()
        self.operator_exited = lambda: None  # set by the phases: a waiting phase stops when the operator dies
        self.stop_event = threading.Event()
        self.errors: list[str] = []
        self.serving_ready: dict[tuple, float] = {}
        self.active_ready: dict[tuple, float] = {}  # (ns, name, revision) -> first seen active and Ready
        self.generation_seen: dict[tuple, float] = {}  # (ns, name, observedGeneration) -> first seen
        self.deployment_seen: dict[tuple, float] = {}
        self.deployment_ready: dict[tuple, float] = {}
        self.deployment_gone: dict[tuple, float] = {}
        self.deployment_serving: dict[tuple, str] = {}
        self.rv = {"servings": self._list_version("servings"), "deployments": self._list_version("deployments")}
        self.threads = [threading.Thread(target=self._loop, args=(kind,), daemon=True)
                        for kind in ("servings", "deployments")]
        for thread in self.threads:
            thread.start()

    def _list(self, kind: str, **kw):
        # Plain dicts for both (the typed Deployment model costs milliseconds per event to build, CPU the
        # operator under test would miss).
        if kind == "servings":
            return self.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL, **kw)
        return self.custom.list_cluster_custom_object("apps", "v1", "deployments", label_selector=SERVING_LABEL, **kw)

    def _list_version(self, kind: str) -> str:
        return self._list(kind, limit=1)["metadata"]["resourceVersion"]

    def _loop(self, kind: str) -> None:
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException

        while not self.stop_event.is_set():
            try:
                stream = watch.Watch().stream(self._list, kind, resource_version=self.rv[kind], timeout_seconds=30,
                                              allow_watch_bookmarks=True)
                for event in stream:
                    self._on_event(kind, event, time.monotonic())
                    if self.stop_event.is_set():
                        break
            except ApiException as exc:
                self.errors.append(f"{kind}: {exc.status} {exc.reason}")
                if exc.status == 410:  # too old: later events still count, the gap is reported in errors
                    self.rv[kind] = self._list_version(kind)
                time.sleep(0.2)
            except Exception as exc:  # noqa: BLE001 - a dropped watch is re-opened until stopped
                self.errors.append(f"{kind}: {exc!r}"[:300])
                time.sleep(0.5)

    def _on_event(self, kind: str, event: dict, now: float) -> None:
        obj = event["object"]
        meta = obj["metadata"]
        self.rv[kind] = meta["resourceVersion"]
        if event["type"] == "BOOKMARK" or not meta.get("namespace", "").startswith(NAMESPACE_PREFIX):
            return
        key = (meta["namespace"], meta["name"])
        status = obj.get("status") or {}
        with self.changed:
            if kind == "servings":
                ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                            for c in status.get("conditions") or [])
                if status.get("observedGeneration") is not None:
                    self.generation_seen.setdefault((*key, status["observedGeneration"]), now)
                if ready and event["type"] != "DELETED":
                    self.serving_ready.setdefault(key, now)
                    if status.get("activeRevision"):
                        self.active_ready.setdefault((*key, status["activeRevision"]), now)
            else:
                self.deployment_seen.setdefault(key, now)
                self.deployment_serving[key] = (meta.get("labels") or {}).get(SERVING_LABEL, "")
                if (status.get("readyReplicas") or 0) >= 1:
                    self.deployment_ready.setdefault(key, now)
                if event["type"] == "DELETED":
                    self.deployment_gone.setdefault(key, now)
            self.changed.notify_all()

    def wait_until(self, what: str, done, timeout: float) -> None:
        """Until `done()` (called under the lock) is true; BenchError after `timeout`."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while not done():
                if self.operator_exited():
                    raise BenchError(f"{what}: the operator exited ({self.operator_exited()}); see its log")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BenchError(f"{what}: not done within {timeout:.0f}s (watch errors: {self.errors[-3:]})")
                self.changed.wait(min(left, 1.0))

    def deployments_of(self, key: tuple) -> list[tuple]:
        return [d for d, serving in self.deployment_serving.items() if d[0] == key[0] and serving == key[1]]

    def stop(self) -> None:
        self.stop_event.set()
        for thread in self.threads:
            thread.join(40)
        self.api_client.close()


def shares(watcher: FleetWatcher, keys: list[tuple], t0: dict[tuple, float] | float) -> dict:
    """apply -> Ready and its parts, per serving, from each serving's first Deployment."""
    start = (lambda k: t0[k]) if isinstance(t0, dict) else (lambda k: t0)
    total, created, control_plane, noticed = [], [], [], []
    for key in keys:
        deployment = min(watcher.deployments_of(key), key=lambda d: watcher.deployment_seen[d], default=None)
        total.append(watcher.serving_ready[key] - start(key))
        if deployment is None or deployment not in watcher.deployment_ready:
            continue
        created.append(watcher.deployment_seen[deployment] - start(key))
        control_plane.append(watcher.deployment_ready[deployment] - watcher.deployment_seen[deployment])
        noticed.append(watcher.serving_ready[key] - watcher.deployment_ready[deployment])
    return {"applyToReady": percentiles(total), "operatorApplyToDeploymentCreated": percentiles(created),
            "controlPlaneDeploymentCreatedToReady": percentiles(control_plane),
            "operatorDeploymentReadyToServingReady": percentiles(noticed)}


# ---------------------------------------------------------------- the bench
def serving_manifest(namespace: str, name: str, gpus_per_replica: int) -> dict:
    manifest = base.serving_manifest(name)
    manifest["metadata"]["namespace"] = namespace
    if gpus_per_replica != 8:
        manifest["spec"]["resources"]["gpusPerReplica"] = gpus_per_replica
        manifest["spec"]["target"]["tensorParallelSize"] = gpus_per_replica
    return manifest


def normal_path_manifest(namespace: str, name: str, gpus_per_replica: int) -> dict:
    """A new serving on the normal path: a drafter no known-bad row names (the seed's EAGLE-3 on Kimi-K2.5 is the
    story's known-bad combination, a Warning Event by design), and no acceptance watch (a kwok pod runs no engine,
    so every scrape would fail, a MetricsUnavailable Warning by design)."""
    manifest = serving_manifest(namespace, name, gpus_per_replica)
    manifest["spec"]["drafter"] = {"method": "ngram", "numSpeculativeTokens": 4}
    manifest["spec"].pop("acceptance", None)
    return manifest


def per_object(audit: dict, count: int) -> dict:
    """The operator's writes and Event POSTs for each object of a phase (its ``count`` servings)."""
    events = sum(n for key, n in audit["byAgentVerbResource"].items() if key.endswith("create events"))
    return {"writes": round(audit["writes"] / count, 2), "events": round(events / count, 2),
            "writesButEvents": round((audit["writes"] - events) / count, 2)} if count else {}


def prepare(args: argparse.Namespace, cluster: base.Cluster, result: dict) -> None:
    t = time.monotonic()
    cluster.up(audit=True)
    result["clusterUpSeconds"] = round(time.monotonic() - t, 1)
    status = cluster.status()
    if not status.get("audit_log"):
        raise BenchError("the cluster there runs without an audit log: `cluster down` it (or use another "
                         "DRAFTER_STATE_DIR) so this bench can start it with --audit")
    cluster.audit_log = Path(status["audit_log"])

    per_node = max(1, 8 // args.gpus_per_replica)
    wanted = -(-(args.servings + args.samples) // per_node) + 2
    free = cluster.free_kwok_gpu_nodes()
    if free < wanted:
        log(f"{free} free 8-GPU kwok nodes; adding {wanted - free}")
        t = time.monotonic()
        base.drafter_operator("cluster", "add-nodes", "--count", str(wanted - free), "--runtime", "kwok",
                              timeout=args.timeout)
        result["addNodesSeconds"] = round(time.monotonic() - t, 1)
    result["kwokNodes"] = len(cluster.get_json("nodes", "-l", base.KWOK_SELECTOR)["items"])
    harness.install_crds(cluster.kubectl)
    namespaces = [f"{NAMESPACE_PREFIX}{i:02d}" for i in range(args.namespaces)] + [f"{NAMESPACE_PREFIX}new"]
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(
        [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}} for n in namespaces]))


def cold_start(args, cluster, operator: "Operators", sampler_holder: list, result: dict) -> list[tuple]:
    keys = spread(args.servings, args.namespaces)
    manifests = yaml.safe_dump_all([serving_manifest(ns, name, args.gpus_per_replica) for ns, name in keys])
    t = time.monotonic()
    cluster.kubectl("apply", "--server-side", "-f", "-", input=manifests, timeout=args.timeout)
    result["applyWithoutOperatorSeconds"] = round(time.monotonic() - t, 1)
    log(f"{len(keys)} servings applied in {result['applyWithoutOperatorSeconds']} s with no operator running")
    watcher = FleetWatcher(cluster.kubeconfig)
    watcher.operator_exited = lambda: operator.exited()
    try:
        t0 = time.monotonic()
        operator.start()
        sampler = ProcessSampler({"operator": operator.pids(), **component_pids(cluster)})
        sampler.start()
        sampler_holder.append(sampler)
        watcher.wait_until(f"{len(keys)} servings Ready after a cold start",
                           lambda: all(k in watcher.serving_ready for k in keys), args.timeout)
        t_all = time.monotonic()
        result["coldStart"] = {
            "allReadySeconds": round(t_all - t0, 2),
            "firstDeploymentSeconds": round(min(watcher.deployment_seen.values()) - t0, 2),
            "lastDeploymentCreatedSeconds": round(max(watcher.deployment_seen.values()) - t0, 2),
            **shares(watcher, keys, t0),
            "operator": sampler.window("operator", t0, t_all),
            "controlPlane": {n: sampler.window(n, t0, t_all) for n in sampler.pids if n != "operator"},
            "watchErrors": watcher.errors[:5],
        }
        log(f"cold start: all {len(keys)} Ready after {result['coldStart']['allReadySeconds']} s")
    finally:
        watcher.stop()
    return keys


def component_pids(cluster) -> dict[str, int]:
    return {n: c["pid"] for n, c in (cluster.status().get("components") or {}).items()
            if c.get("pid") and n in ("kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler", "kwok")}


def steady(args, cluster, operator, sampler: ProcessSampler, result: dict, label: str) -> None:
    time.sleep(args.settle_seconds)
    before, wall0, t0 = operator.metrics(), time.time(), time.monotonic()
    time.sleep(args.steady_seconds)
    after, wall1, t1 = operator.metrics(), time.time(), time.monotonic()
    time.sleep(2)  # the apiserver writes a request's audit event when it completes
    counted = count_audit(read_audit(cluster.audit_log), wall0, wall1)
    window = base.per_reconcile(base.delta(before, after))
    result[label] = {
        "audit": counted, "reconciles": window["reconciles"], "reconcileErrors": window["errors"],
        "reconcilerRequests": window["requests"], "meanReconcileMs": window["meanReconcileMs"],
        "operator": sampler.window("operator", t0, t1), **operator.rss_mib(),
        "controlPlane": {n: sampler.window(n, t0, t1) for n in sampler.pids if n != "operator"},
    }
    log(f"{label}: {counted['reads']} reads, {counted['writes']} writes in {counted['seconds']} s; "
        f"{result[label]['operator']}")


def new_servings(args, cluster, result: dict) -> None:
    from kubernetes import client

    watcher = FleetWatcher(cluster.kubeconfig)
    custom = client.CustomObjectsApi(watcher.api_client)
    t0: dict[tuple, float] = {}
    wall0 = time.time()
    try:
        for i in range(args.samples):
            key = (f"{NAMESPACE_PREFIX}new", f"new-{i:03d}")
            body = normal_path_manifest(*key, args.gpus_per_replica)
            t0[key] = time.monotonic()
            custom.create_namespaced_custom_object(GROUP, VERSION, key[0], PLURAL, body)
            watcher.wait_until(f"new serving {key} Ready", lambda: key in watcher.serving_ready, 60)
            time.sleep(args.sample_gap_seconds)
        result["newServing"] = {**shares(watcher, list(t0), t0), "watchErrors": watcher.errors[:5]}
    finally:
        watcher.stop()
    time.sleep(2)  # the apiserver writes a request's audit event when it completes
    result["newServing"]["audit"] = count_audit(read_audit(cluster.audit_log), wall0, time.time())
    result["newServing"]["perServing"] = per_object(result["newServing"]["audit"], args.samples)
    log(f"new servings: {result['newServing']['applyToReady']}; each {result['newServing']['perServing']}")


def deletes(args, cluster, result: dict) -> None:
    """The new servings deleted at once: the operator's writes until their Deployments are gone (the garbage
    collector deletes the children; the operator only forgets the servings)."""
    from kubernetes import client, config

    api_client = config.new_client_from_config(config_file=cluster.kubeconfig)
    api_client.user_agent = BENCH_AGENT  # not counted as the operator's in the audit log
    custom, apps = client.CustomObjectsApi(api_client), client.AppsV1Api(api_client)
    namespace = f"{NAMESPACE_PREFIX}new"
    names = [f"new-{i:03d}" for i in range(args.samples)]
    wall0, t0 = time.time(), time.monotonic()
    for name in names:
        custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)

    def left() -> int:
        items = apps.list_namespaced_deployment(namespace, label_selector=SERVING_LABEL).items
        return sum(1 for d in items if d.metadata.labels.get(SERVING_LABEL) in names)
    deadline = time.monotonic() + args.timeout
    while left() and time.monotonic() < deadline:
        time.sleep(0.5)
    if left():
        raise BenchError(f"the deleted servings' Deployments are still there after {args.timeout} s")
    gone = time.monotonic() - t0
    time.sleep(5)  # anything the operator still does about them, and the audit events of the last requests
    audit = count_audit(read_audit(cluster.audit_log), wall0, time.time())
    result["deletes"] = {"count": len(names), "childrenGoneSeconds": round(gone, 2), "audit": audit,
                         "perServing": per_object(audit, len(names))}
    log(f"deletes: {len(names)} servings' children gone after {gone:.1f} s; each {result['deletes']['perServing']}")


def swaps(args, cluster, keys: list[tuple], result: dict) -> None:
    from kubernetes import client

    targets = swap_targets(keys, args.swaps)
    watcher = FleetWatcher(cluster.kubeconfig)
    custom = client.CustomObjectsApi(watcher.api_client)
    try:
        current = {k: custom.get_namespaced_custom_object(GROUP, VERSION, k[0], PLURAL, k[1]) for k in targets}
        old = {k: (k[0], deployment_name(k[1], body["status"]["activeRevision"])) for k, body in current.items()}
        generation = {k: body["metadata"]["generation"] + 1 for k, body in current.items()}
        tokens = {k: 3 if body["spec"]["drafter"].get("numSpeculativeTokens") != 3 else 4 for k, body in current.items()}
        sent: dict[tuple, float] = {}

        def patch(key):
            sent[key] = time.monotonic()
            custom.patch_namespaced_custom_object(GROUP, VERSION, key[0], PLURAL, key[1],
                                                  {"spec": {"drafter": {"numSpeculativeTokens": tokens[key]}}})
        t0, wall0 = time.monotonic(), time.time()
        with ThreadPoolExecutor(len(targets)) as pool:
            list(pool.map(patch, targets))
        patched = time.monotonic() - t0

        def finished(key) -> bool:
            new = [t for (ns, n, rev), t in watcher.active_ready.items()
                   if (ns, n) == key and deployment_name(n, rev) != old[key][1] and t >= sent[key]]
            return bool(new) and old[key] in watcher.deployment_gone

        watcher.wait_until(f"{len(targets)} drafter swaps", lambda: all(finished(k) for k in targets), args.timeout)
        t_all = time.monotonic()
        noticed = [watcher.generation_seen[(*k, generation[k])] - sent[k] for k in targets
                   if (*k, generation[k]) in watcher.generation_seen]
        active = [min(t for (ns, n, rev), t in watcher.active_ready.items()
                      if (ns, n) == k and deployment_name(n, rev) != old[k][1] and t >= sent[k]) - sent[k]
                  for k in targets]
        gone = [watcher.deployment_gone[old[k]] - sent[k] for k in targets]
        done = [max(a, g) for a, g in zip(active, gone)]
        result["swaps"] = {
            "count": len(targets), "strategy": "Recreate (the seed's default)", "patchesSentSeconds": round(patched, 2),
            "allDoneSeconds": round(t_all - t0, 2), "noticed": percentiles(noticed),
            "newRevisionActiveAndReady": percentiles(active), "oldDeploymentGone": percentiles(gone),
            "done": percentiles(done), "watchErrors": watcher.errors[:5],
        }
    finally:
        watcher.stop()
    time.sleep(2)  # the apiserver writes a request's audit event when it completes
    result["swaps"]["audit"] = count_audit(read_audit(cluster.audit_log), wall0, time.time())
    result["swaps"]["perSwap"] = per_object(result["swaps"]["audit"], len(targets))
    log(f"swaps: all {len(targets)} done after {result['swaps']['allDoneSeconds']} s; each {result['swaps']['perSwap']}")


def bench(args: argparse.Namespace, cluster: base.Cluster, holder: list, result: dict) -> None:
    result.update({"machine": {"cpus": os.cpu_count(), "loadavgAtStart": os.getloadavg()},
                   "settings": {k: v for k, v in vars(args).items() if k not in ("json",)},
                   "stateDir": os.environ["DRAFTER_STATE_DIR"]})
    prepare(args, cluster, result)
    log_path = Path(args.operator_log or f"{os.environ['DRAFTER_STATE_DIR']}-operator.log")
    os.environ["DRAFTER_DRAIN_SECONDS"] = str(args.drain_seconds)  # read by the operator subprocess only
    processes = [base.Operator(cluster, log_path.with_name(f"{log_path.stem}-shard{i}{log_path.suffix}")
                               if args.shards > 1 else log_path, args.recheck_seconds) for i in range(args.shards)]
    for process in processes:
        if not args.leader_election:
            process.extra_args = ["--no-leader-election"]
        elif args.shards > 1:
            process.extra_args = ["--shards", str(args.shards)]
    if args.heap_snapshots:
        processes[0].command = [sys.executable, str(Path(__file__).resolve().parent / "operator_heap.py"), "run",
                                str(args.heap_snapshots), *(["--figures-only"] if args.heap_figures_only else [])]
        result["heapSnapshots"] = str(args.heap_snapshots)
    operator = Operators(processes)
    holder.append(operator)
    result["operatorLog"] = str(log_path)
    samplers: list[ProcessSampler] = []
    try:
        keys = cold_start(args, cluster, operator, samplers, result)
        result["machine"]["loadavgAfterColdStart"] = os.getloadavg()
        heap_snapshot(args, operator, "after the cold start")
        steady(args, cluster, operator, samplers[0], result, "steady")
        heap_snapshot(args, operator, "after the steady window")
        if args.heap_trim:
            heap_snapshot(args, operator, "malloc_trim(0) after the steady window", signal.SIGUSR2)
            time.sleep(args.settle_seconds)
            heap_snapshot(args, operator, f"{args.settle_seconds:g} s after the trim")
        result["machine"]["loadavgSteady"] = os.getloadavg()
        if args.samples:
            new_servings(args, cluster, result)
            result["machine"]["loadavgAfterSamples"] = os.getloadavg()
        if args.samples:
            deletes(args, cluster, result)
        if args.swaps:
            swaps(args, cluster, keys, result)
            result["machine"]["loadavgAfterSwaps"] = os.getloadavg()
            if args.after_swaps_steady_seconds:
                args.steady_seconds = args.after_swaps_steady_seconds
                steady(args, cluster, operator, samplers[0], result, "steadyAfterSwaps")
        result["operatorWholeRun"] = {"peakRssMiB": operator.rss_mib()["peakRssMiB"],
                                      **samplers[0].window("operator", 0, time.monotonic())}
        result["controlPlaneRssMiB"] = base.component_rss(cluster)
    finally:
        for sampler in samplers:
            sampler.stop()
    result["checks"] = checks(args, result)


class Operators:
    """The operator as the phases see it: one process, or with --shards N, N of them (one per shard), their
    reconcile figures summed and their RSS reported each and at most."""

    def __init__(self, processes: list[base.Operator]):
        self.processes = processes

    @property
    def proc(self):
        return self.processes[0].proc

    def start(self) -> None:
        for process in self.processes:
            process.start()

    def stop(self) -> None:
        for process in self.processes:
            process.stop()

    def exited(self):
        return next((code for p in self.processes if p.proc and (code := p.proc.poll()) is not None), None)

    def pids(self) -> list[int]:
        return [p.proc.pid for p in self.processes]

    def metrics(self) -> dict[str, float]:
        total: dict[str, float] = {}
        for process in self.processes:
            for key, value in process.metrics().items():
                total[key] = total.get(key, 0) + value
        return total

    def rss_mib(self) -> dict:
        each = [p.rss_mib() for p in self.processes]
        out = {key: max(e[key] for e in each) for key in each[0]}  # the largest process: what the goal is about
        if len(each) > 1:
            out["each"] = each
        return out


def heap_snapshot(args, operator: Operators, moment: str, signum: int = signal.SIGUSR1) -> None:
    """With --heap-snapshots: the operator (under bench/operator_heap.py) writes its heap figures and a
    tracemalloc snapshot (SIGUSR1), or trims the C heap and writes the figures before and after (SIGUSR2)."""
    if not args.heap_snapshots:
        return
    lines = args.heap_snapshots / "heap.jsonl"
    before = len(lines.read_text().splitlines()) if lines.exists() else 0
    os.kill(operator.proc.pid, signum)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if lines.exists() and len(written := lines.read_text().splitlines()) > before:
            log(f"heap snapshot {moment}: {written[-1]}")
            return
        time.sleep(1)
    raise BenchError(f"no heap snapshot {moment} within 120 s (see the operator log)")


def checks(args, r: dict) -> dict[str, bool]:
    out = {"every serving Ready after the cold start": "coldStart" in r,
           "zero operator writes in the steady window": r.get("steady", {}).get("audit", {}).get("writes") == 0,
           "operator RSS < 150 MiB": r.get("operatorWholeRun", {}).get("peakRssMiB", 1e9) < 150}
    if args.samples:
        q = r.get("newServing", {}).get("applyToReady", {})
        out["new serving apply->Ready p50 < 0.5 s"] = q.get("p50", 1e9) < 0.5
        out["new serving apply->Ready p99 < 2 s"] = q.get("p99", 1e9) < 2
        out["at most 4 operator writes per new serving"] = r.get("newServing", {}).get("perServing", {}).get("writes", 1e9) <= 4
    if args.swaps:
        out[f"{args.swaps} swaps finished"] = "swaps" in r
    if args.after_swaps_steady_seconds and args.swaps:
        out["zero operator writes after the swaps"] = r.get("steadyAfterSwaps", {}).get("audit", {}).get("writes") == 0
    return out


def fmt(q: dict) -> str:
    return (f"p50 {q['p50']:.2f} s, p90 {q['p90']:.2f} s, p99 {q['p99']:.2f} s, max {q['max']:.2f} s (n={q['n']})"
            if q else "-")


def report(r: dict) -> None:
    m = r.get("machine", {})
    print(f"machine: {m.get('cpus')} CPUs; load average at start {m.get('loadavgAtStart')}, after the cold start "
          f"{m.get('loadavgAfterColdStart')}, steady {m.get('loadavgSteady')}, after samples "
          f"{m.get('loadavgAfterSamples')}, after swaps {m.get('loadavgAfterSwaps')}")
    print(f"cluster up {r.get('clusterUpSeconds')} s; {r.get('kwokNodes')} kwok 8-GPU nodes "
          f"(added in {r.get('addNodesSeconds')} s)")
    if "coldStart" in r:
        c = r["coldStart"]
        print(f"cold start ({r['settings']['servings']} servings in {r['settings']['namespaces']} namespaces, applied in "
              f"{r['applyWithoutOperatorSeconds']} s before the operator started): all Ready after "
              f"{c['allReadySeconds']} s; Deployments created from {c['firstDeploymentSeconds']} s to "
              f"{c['lastDeploymentCreatedSeconds']} s")
        for part in ("applyToReady", "operatorApplyToDeploymentCreated", "controlPlaneDeploymentCreatedToReady",
                     "operatorDeploymentReadyToServingReady"):
            print(f"  {part}: {fmt(c[part])}")
        print(f"  operator: {c['operator']}; control plane: {c['controlPlane']}")
    for label in ("steady", "steadyAfterSwaps"):
        if label in r:
            s = r[label]
            a = s["audit"]
            print(f"{label} ({a['seconds']} s): operator requests {a['readsPerMinute']} reads/min, "
                  f"{a['writesPerMinute']} writes/min ({a['reads']} reads, {a['writes']} writes): "
                  f"{a['byAgentVerbResource']}")
            print(f"  {s['reconciles']} reconciles ({s['reconcileErrors']} errors), reconciler requests "
                  f"{s['reconcilerRequests']}, mean reconcile {s['meanReconcileMs']} ms; operator {s['operator']}, "
                  f"RSS {s['rssMiB']} MiB, {s['threads']} threads")
            print(f"  control plane: {s['controlPlane']}")
    if "newServing" in r:
        n = r["newServing"]
        print(f"new serving while the fleet exists, one at a time:")
        for part in ("applyToReady", "operatorApplyToDeploymentCreated", "controlPlaneDeploymentCreatedToReady",
                     "operatorDeploymentReadyToServingReady"):
            print(f"  {part}: {fmt(n[part])}")
        print(f"  operator requests meanwhile: {n['audit']['byAgentVerbResource']}")
        print(f"  operator writes per new serving: {n['perServing']['writes']} ({n['perServing']['events']} Events)")
    if "deletes" in r:
        d = r["deletes"]
        print(f"{d['count']} servings deleted at once: children gone after {d['childrenGoneSeconds']} s; operator writes "
              f"per delete {d['perServing']['writes']} ({d['perServing']['events']} Events): "
              f"{d['audit']['byAgentVerbResource']}")
    if "swaps" in r:
        s = r["swaps"]
        print(f"{s['count']} simultaneous drafter swaps ({s['strategy']}; patches sent in {s['patchesSentSeconds']} s): "
              f"all done after {s['allDoneSeconds']} s")
        for part in ("noticed", "newRevisionActiveAndReady", "oldDeploymentGone", "done"):
            print(f"  {part}: {fmt(s[part])}")
        print(f"  operator requests meanwhile: {s['audit']['reads']} reads, {s['audit']['writes']} writes; per swap "
              f"{s['perSwap']['writes']} writes ({s['perSwap']['events']} Events): {s['audit']['byAgentVerbResource']}")
    if "operatorWholeRun" in r:
        print(f"operator over the whole run: {r['operatorWholeRun']}; control plane RSS MiB {r.get('controlPlaneRssMiB')}")
    for check, ok in (r.get("checks") or {}).items():
        print(f"check {'PASS' if ok else 'FAIL'}: {check}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--servings", type=int, default=500)
    parser.add_argument("--namespaces", type=int, default=50)
    parser.add_argument("--samples", type=int, default=40, help="new servings timed one at a time (0: skip)")
    parser.add_argument("--sample-gap-seconds", type=float, default=0.5)
    parser.add_argument("--swaps", type=int, default=50, help="simultaneous drafter swaps (0: skip)")
    parser.add_argument("--steady-seconds", type=float, default=120)
    parser.add_argument("--after-swaps-steady-seconds", type=float, default=0,
                        help="a second steady window after the swaps (0: none)")
    parser.add_argument("--settle-seconds", type=float, default=20,
                        help="pause before the steady window (the first acceptance measurements land)")
    parser.add_argument("--gpus-per-replica", type=int, default=8, choices=(1, 2, 4, 8),
                        help="below 8, several servings share a kwok node (fewer nodes; say so with the figures)")
    parser.add_argument("--drain-seconds", type=float, default=15, help="DRAFTER_DRAIN_SECONDS for the operator")
    parser.add_argument("--recheck-seconds", default=None, help="DRAFTER_RECHECK_SECONDS for the operator")
    parser.add_argument("--leader-election", action=argparse.BooleanOptionalAction, default=True,
                        help="run the operator with its Lease (default); on this 2-core machine under other work the "
                             "500-serving cold start starved the Lease renewal past its 10-s deadline")
    parser.add_argument("--shards", type=int, default=1, help="operator processes, each `run --shards N` (one per "
                        "shard, each with its own Lease); needs leader election")
    parser.add_argument("--timeout", type=float, default=900, help="bound of every single wait")
    parser.add_argument("--operator-log", default=None)
    parser.add_argument("--heap-snapshots", type=Path, default=None, metavar="DIR",
                        help="run the operator under tracemalloc (bench/operator_heap.py) and write heap snapshots "
                             "to DIR after the cold start and the steady window (slows the operator: not for timings)")
    parser.add_argument("--heap-figures-only", action="store_true",
                        help="with --heap-snapshots: no tracemalloc, only RSS and glibc's arena figures (normal speed)")
    parser.add_argument("--heap-trim", action="store_true",
                        help="with --heap-snapshots: malloc_trim(0) in the operator after the steady window, "
                             "and the figures again --settle-seconds later")
    parser.add_argument("--keep", action="store_true", help="leave the cluster running (default: down --wipe)")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    if args.shards < 1 or (args.shards > 1 and (not args.leader_election or args.heap_snapshots)):
        parser.error("--shards: 1 or more; above 1 it needs leader election (a Lease per shard) and no --heap-snapshots")
    outcome: dict = {}

    def report_and_keep(result: dict) -> None:
        outcome.update(result)
        report(result)
    base.run_on_own_cluster(args, lambda cluster, holder, result: bench(args, cluster, holder, result),
                            report_and_keep)
    return 0 if outcome.get("checks") and all(outcome["checks"].values()) else 2


if __name__ == "__main__":
    exit_with(main)
