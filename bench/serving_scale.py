"""How fast and how cheaply does the operator bring DrafterServings to Ready on the local cluster?

Runs on its OWN local cluster (DRAFTER_STATE_DIR=/tmp/bench-cluster, DRAFTER_PORT_BASE=18440 unless
already set), so a cluster someone else uses is never touched. Engine pods land on kwok GPU nodes:
kwok marks them Running and Ready as soon as they are scheduled, so what is measured is the operator
plus the control plane (apiserver, scheduler, Deployment/ReplicaSet controllers), not engine start-up.

Steps:
1. `drafter-operator cluster up`, `cluster add-nodes --count N --runtime kwok` until there are at least
   `--count` kwok nodes with 8 free GPUs, CRDs applied from crds/;
2. the operator started as a subprocess (`python -m drafter_operator.cli run --metrics-port <free>`);
   its RSS read from /proc after `--idle-seconds` with no DrafterServing;
3. `--single-runs` times: apply 1 DrafterServing, time kubectl apply -> Ready=True, hold it
   `--single-steady-seconds` to count requests per reconcile for one serving, delete it;
4. apply `--count` DrafterServings in one `kubectl apply`, time each to Ready=True, then hold them
   `--steady-seconds` to count requests per reconcile, reconciles per serving per minute and RSS;
5. delete them, read RSS again, stop the operator, `cluster down --wipe` (unless --keep, or unless a
   cluster was already running in that state directory before: then it is left running; after a
   failure `cluster down` without --wipe, so the component logs stay).

The servings are the seed example (examples/serving-vllm-kimi-k25-eagle3.yaml) placed with
nodeSelector drafter.dev/node-runtime=kwok and WITHOUT spec.storage.modelClaim (no PersistentVolume is
needed; kwok ignores volumes anyway).

kwok nodes heartbeat through node Leases (the local cluster runs kwok with
--node-lease-duration-seconds 40; without it every node, and every pod on it, went NotReady 40 s after
start: this benchmark found that).

Times come from watches (DrafterServings and Deployments) started before the apply, stamped on receipt
with this process's monotonic clock; t0 is taken just before `kubectl apply` is spawned. API requests
per reconcile come from the operator's own /metrics: the gauge drafter_operator_api_requests{verb}
(requests made by the reconciler's Kube client; kopf's own watches, annotation patches and Events are
not included) and the counter drafter_reconcile_total{kind,result}, read before and after each window
(the rollout window ends 0.5 s after the last Ready=True was seen, so the reconcile that wrote it is
counted).

Usage: python bench/serving_scale.py [--count 50] [--steady-seconds 60] [--keep] [--json out.json]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

import yaml

from drafter_operator.constants import API_GROUP, API_VERSION, SERVING_PLURAL
from drafter_testbed import cluster as local
from drafter_testbed import harness
from drafter_testbed.build import BuildError
from drafter_testbed.harness import metric_samples  # noqa: F401 (the benches built on this one import it from here)

REPO = Path(__file__).resolve().parents[1]
SEED = REPO / "examples" / "serving-vllm-kimi-k25-eagle3.yaml"
GROUP, VERSION, PLURAL = API_GROUP, API_VERSION, SERVING_PLURAL
KWOK_SELECTOR = "drafter.dev/node-runtime=kwok,nvidia.com/gpu.product=NVIDIA-B200"

os.environ.setdefault("DRAFTER_STATE_DIR", "/tmp/bench-cluster")
os.environ.setdefault("DRAFTER_PORT_BASE", "18440")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class BenchError(RuntimeError):
    pass


# ---------------------------------------------------------------- processes and the cluster
def run(argv: list[str], timeout: float, input: str | None = None, env: dict | None = None,
        check: bool = True) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as exc:
        raise BenchError(f"{' '.join(argv[:6])} ... did not finish within {timeout:.0f}s") from exc
    if check and proc.returncode != 0:
        raise BenchError(f"{' '.join(argv[:6])} ... failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return proc


def drafter_operator(*args: str, timeout: float = 120) -> str:
    return run([sys.executable, "-m", "drafter_operator.cli", *args], timeout=timeout).stdout


class Cluster:
    """The bench's cluster: the shared harness's local one (drafter_testbed/harness.py), its kubectl
    answering the output and failing with BenchError."""

    def __init__(self) -> None:
        self.handle: harness.Cluster | None = None
        self.started = False  # False: a cluster was already running there; it is left running at the end

    def up(self, audit: bool = False) -> None:
        log(f"cluster up (state {os.environ['DRAFTER_STATE_DIR']}, port base {os.environ['DRAFTER_PORT_BASE']})"
            + (" with an audit log" if audit else ""))
        try:
            self.handle, self.started = harness.start_local(audit=audit)
        except (local.ClusterError, BuildError) as exc:
            raise BenchError(f"cluster up: {exc}") from exc

    def down(self, wipe: bool) -> None:
        log("cluster down" + (" --wipe" if wipe else ""))
        try:
            local.down(wipe=wipe)
        except local.ClusterError as exc:
            raise BenchError(f"cluster down: {exc}") from exc

    @property
    def kubeconfig(self) -> str:
        return self.handle.kubeconfig

    @property
    def env(self) -> dict[str, str]:
        return self.handle.env

    def kubectl(self, *args: str, input: str | None = None, timeout: float = 120, check: bool = True) -> str:
        try:
            return self.handle.kubectl(*args, input=input, check=check, timeout=timeout).stdout
        except subprocess.TimeoutExpired as exc:
            raise BenchError(f"kubectl {' '.join(args[:6])} ... did not finish within {timeout:.0f}s") from exc
        except harness.KubectlError as exc:
            raise BenchError(str(exc)[-2000:]) from exc

    def get_json(self, *args: str) -> dict:
        return json.loads(self.kubectl("get", *args, "-o", "json", timeout=60))

    def free_kwok_gpu_nodes(self) -> int:
        nodes = self.get_json("nodes", "-l", KWOK_SELECTOR)["items"]
        pods = self.get_json("pods", "-A", "--field-selector", "status.phase!=Succeeded,status.phase!=Failed")["items"]
        used: dict[str, int] = {}
        for pod in pods:
            node = pod.get("spec", {}).get("nodeName")
            for c in pod["spec"].get("containers", []):
                gpus = int(((c.get("resources") or {}).get("requests") or {}).get("nvidia.com/gpu", 0))
                used[node] = used.get(node, 0) + gpus
        return sum(1 for n in nodes if int(n["status"].get("allocatable", {}).get("nvidia.com/gpu", 0))
                   - used.get(n["metadata"]["name"], 0) >= 8)

    def status(self) -> dict:
        proc = run([sys.executable, "-m", "drafter_operator.cli", "cluster", "status"], timeout=60, check=False)
        try:
            return json.loads(proc.stdout)
        except ValueError:
            return {}


class Operator(harness.OperatorProcess):
    """The shared harness's operator process (every namespace; drafter_testbed/harness.py), with the figures
    the benches read and BenchError when it does not come up."""

    def __init__(self, cluster: Cluster, log_path: Path, recheck_seconds: str | None):
        super().__init__(cluster, log_path, env={"DRAFTER_RECHECK_SECONDS": recheck_seconds} if recheck_seconds else {},
                         announce=lambda message: log(f"  {message}: started again"))

    def start(self, timeout: float = 60, keep_running: bool = False) -> None:
        try:
            super().start(keep_running=keep_running, wait_seconds=timeout)
        except harness.OperatorError as exc:
            raise BenchError(str(exc)) from exc

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            log(f"stopping the operator (pid {self.proc.pid})")
        super().stop()

    def rss_mib(self) -> dict[str, float]:
        """VmRSS and VmHWM (peak RSS) of the operator process, MiB."""
        fields = {}
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "Threads"):
                fields[key] = float(value.split()[0]) / (1024 if key != "Threads" else 1)
        return {"rssMiB": round(fields["VmRSS"], 1), "peakRssMiB": round(fields["VmHWM"], 1),
                "threads": int(fields["Threads"])}

    def metrics(self) -> dict[str, float]:
        out: dict[str, float] = {"degraded.1": 0, "degraded.0": 0}  # servings by drafter_degraded value
        for s in self.samples():
            if s.name == "drafter_degraded":
                out[f"degraded.{int(s.value)}"] += 1
            elif s.name == "drafter_operator_api_requests":
                out[f"requests.{s.labels['verb']}"] = s.value
            elif s.name == "drafter_reconcile_total" and s.labels.get("kind") == "DrafterServing":
                out[f"reconciles.{s.labels['result']}"] = s.value
            elif s.name in ("drafter_reconcile_duration_seconds_sum", "drafter_reconcile_duration_seconds_count") \
                    and s.labels.get("kind") == "DrafterServing":
                out[s.name.rsplit("_", 1)[1]] = s.value
            elif s.name == "process_cpu_seconds_total":
                out["cpuSeconds"] = s.value
        return out


# ---------------------------------------------------------------- watches
class Watcher(threading.Thread):
    """Records, per DrafterServing, when this process first saw Deployment created / Ready / serving Ready."""

    def __init__(self, kubeconfig: str, namespace: str):
        super().__init__(daemon=True)
        from kubernetes import client, config

        self.api_client = config.new_client_from_config(config_file=kubeconfig)
        self.custom = client.CustomObjectsApi(self.api_client)
        self.apps = client.AppsV1Api(self.api_client)
        self.namespace = namespace
        self.stop_event = threading.Event()
        self.lock = threading.Lock()
        self.serving_ready: dict[str, float] = {}
        self.serving_ready_transition: dict[str, str] = {}
        self.deployment_seen: dict[str, float] = {}
        self.deployment_ready: dict[str, float] = {}
        self.ready_lost: dict[str, str] = {}  # Ready=True seen, then not True again: name -> reason
        self.changed = threading.Condition(self.lock)
        self.errors: list[str] = []
        # Resource versions taken now: events after this point are delivered even if a watch connects late.
        self.rv_servings = self.custom.list_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL)["metadata"]["resourceVersion"]
        self.rv_deployments = self.apps.list_namespaced_deployment(namespace).metadata.resource_version
        self.threads = [threading.Thread(target=self._loop, args=(self._watch_servings,), daemon=True),
                        threading.Thread(target=self._loop, args=(self._watch_deployments,), daemon=True)]

    def run(self) -> None:
        for t in self.threads:
            t.start()
        for t in self.threads:
            t.join()

    def _loop(self, once) -> None:
        while not self.stop_event.is_set():
            try:
                once()
            except Exception as exc:  # noqa: BLE001 - a dropped watch is re-opened until stopped
                self.errors.append(repr(exc)[:300])
                time.sleep(0.5)

    def _watch_servings(self) -> None:
        from kubernetes import watch

        w = watch.Watch()
        for event in w.stream(self.custom.list_namespaced_custom_object, GROUP, VERSION, self.namespace, PLURAL,
                              resource_version=self.rv_servings, timeout_seconds=5, allow_watch_bookmarks=False):
            now = time.monotonic()
            obj = event["object"]
            self.rv_servings = obj["metadata"]["resourceVersion"]
            name = obj["metadata"]["name"]
            ready = next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"), {})
            if ready.get("status") == "True":
                with self.changed:
                    if name not in self.serving_ready:
                        self.serving_ready[name] = now
                        self.serving_ready_transition[name] = ready.get("lastTransitionTime", "")
                        self.changed.notify_all()
            elif name in self.serving_ready and event["type"] != "DELETED":
                self.ready_lost.setdefault(name, f"{ready.get('reason')}: {ready.get('message')}")
            if self.stop_event.is_set():
                w.stop()

    def _watch_deployments(self) -> None:
        from kubernetes import watch

        w = watch.Watch()
        for event in w.stream(self.apps.list_namespaced_deployment, self.namespace,
                              resource_version=self.rv_deployments, timeout_seconds=5):
            now = time.monotonic()
            obj = event["object"]
            self.rv_deployments = obj.metadata.resource_version
            serving = (obj.metadata.labels or {}).get("drafter.dev/serving")
            if not serving:
                continue
            with self.changed:
                self.deployment_seen.setdefault(serving, now)
                if (obj.status.ready_replicas or 0) >= 1:
                    self.deployment_ready.setdefault(serving, now)
            if self.stop_event.is_set():
                w.stop()

    def wait_all_ready(self, names: list[str], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self.changed:
            while not all(n in self.serving_ready for n in names):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.changed.wait(min(left, 1.0))
        return True

    def stop(self) -> None:
        self.stop_event.set()
        self.join(15)
        self.api_client.close()


# ---------------------------------------------------------------- manifests and phases
def serving_manifest(name: str) -> dict:
    serving = copy.deepcopy(yaml.safe_load(SEED.read_text()))
    serving["metadata"] = {"name": name}
    serving["spec"]["placement"]["nodeSelector"] = {"drafter.dev/node-runtime": "kwok"}
    serving["spec"]["storage"].pop("modelClaim", None)  # no PersistentVolume needed on kwok nodes
    return serving


def delta(before: dict, after: dict) -> dict:
    return {k: after.get(k, 0) - before.get(k, 0) for k in set(before) | set(after)}


def per_reconcile(d: dict) -> dict:
    reconciles = d.get("reconciles.ok", 0) + d.get("reconciles.error", 0)
    verbs = {k.split(".", 1)[1]: v for k, v in d.items() if k.startswith("requests.") and v}
    total = sum(verbs.values())
    return {
        "reconciles": int(reconciles), "errors": int(d.get("reconciles.error", 0)),
        "requests": {k: int(v) for k, v in sorted(verbs.items())}, "requestsTotal": int(total),
        "requestsPerReconcile": round(total / reconciles, 2) if reconciles else None,
        "perVerbPerReconcile": {k: round(v / reconciles, 2) for k, v in sorted(verbs.items())} if reconciles else {},
        "meanReconcileMs": round(1000 * d.get("sum", 0) / d["count"], 1) if d.get("count") else None,
        "operatorCpuSeconds": round(d.get("cpuSeconds", 0), 2),
    }


def quantiles(values: list[float]) -> dict:
    values = sorted(values)
    if not values:
        return {}

    def q(p: float) -> float:
        return values[min(len(values) - 1, max(0, round(p * (len(values) - 1))))]
    return {"first": round(values[0], 2), "median": round(statistics.median(values), 2), "p90": round(q(0.9), 2),
            "last": round(values[-1], 2), "mean": round(statistics.fmean(values), 2)}


def rollout_and_hold(cluster: Cluster, operator: Operator, namespace: str, names: list[str], timeout: float,
                     settle: float, hold: float) -> dict:
    """Apply `names` in one kubectl apply, time each to Ready=True, then hold them `hold` seconds (steady)."""
    watcher = Watcher(cluster.kubeconfig, namespace)
    watcher.start()
    try:
        result = _rollout(cluster, operator, watcher, namespace, names, timeout)
        result["rssRightAfterRollout"] = operator.rss_mib()
        log(f"  all {len(names)} Ready after {result['applyToReadySeconds']['last']}s; holding {hold:.0f}s")
        time.sleep(settle)
        result["steady"] = steady(operator, len(names), hold)
        result["rss"] = operator.rss_mib()
        # A serving that left Ready=True after reaching it (rollout or steady window): should be none.
        result["lostReady"] = dict(list(watcher.ready_lost.items())[:5])
        result["lostReadyCount"] = len(watcher.ready_lost)
    finally:
        watcher.stop()
    return result


def _rollout(cluster: Cluster, operator: Operator, watcher: Watcher, namespace: str, names: list[str],
             timeout: float) -> dict:
    manifests = yaml.safe_dump_all([serving_manifest(n) for n in names])
    before = operator.metrics()
    t0 = time.monotonic()
    cluster.kubectl("-n", namespace, "apply", "-f", "-", input=manifests, timeout=120)
    applied = time.monotonic() - t0
    complete = watcher.wait_all_ready(names, timeout)
    t_done = time.monotonic()
    # The reconcile that wrote the last Ready=True is counted when it returns, just after its status write.
    time.sleep(0.5)
    after = operator.metrics()
    ready = {n: t - t0 for n, t in watcher.serving_ready.items()}
    if not complete:
        missing = [n for n in names if n not in ready]
        raise BenchError(f"{len(missing)} of {len(names)} DrafterServings not Ready within {timeout:.0f}s "
                         f"(e.g. {missing[:3]}); watch errors: {watcher.errors[:3]}; see {operator.log_path}")
    dep_seen = [watcher.deployment_seen[n] - t0 for n in names if n in watcher.deployment_seen]
    dep_ready = [watcher.deployment_ready[n] - t0 for n in names if n in watcher.deployment_ready]
    # Time the operator took to notice a Ready Deployment (its loop wakes on the Deployment's watch event).
    notice = [watcher.serving_ready[n] - watcher.deployment_ready[n] for n in names if n in watcher.deployment_ready]
    return {
        "servings": len(names), "kubectlApplySeconds": round(applied, 2),
        "applyToReadySeconds": quantiles(list(ready.values())),
        "applyToDeploymentCreatedSeconds": quantiles(dep_seen),
        "applyToDeploymentReadySeconds": quantiles(dep_ready),
        "deploymentReadyToServingReadySeconds": quantiles(notice),
        "window": per_reconcile(delta(before, after)), "windowSeconds": round(t_done - t0, 2),
        "watchErrors": watcher.errors[:5],
    }


def steady(operator: Operator, servings: int, seconds: float) -> dict:
    before = operator.metrics()
    t0 = time.monotonic()
    time.sleep(seconds)
    after = operator.metrics()
    elapsed = time.monotonic() - t0
    out = per_reconcile(delta(before, after))
    out["windowSeconds"] = round(elapsed, 1)
    if servings:
        out["reconcilesPerServingPerMinute"] = round(out["reconciles"] / servings / (elapsed / 60), 1)
    out["operatorCpuPercent"] = round(100 * out["operatorCpuSeconds"] / elapsed, 1)
    return out


def delete_all(cluster: Cluster, namespace: str, timeout: float) -> dict:
    """Delete every DrafterServing; seconds until they, their Deployments and their pods are gone."""
    t0 = time.monotonic()
    cluster.kubectl("-n", namespace, "delete", PLURAL, "--all", "--wait=false", timeout=60)
    out: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:  # owner references: the garbage collector removes the Deployments
        items = cluster.get_json("-n", namespace, f"{PLURAL},deployments,replicasets,pods")["items"]
        now = round(time.monotonic() - t0, 1)
        for kind in ("DrafterServing", "Deployment", "ReplicaSet", "Pod"):
            if kind not in out and not any(i["kind"] == kind for i in items):
                out[kind] = now
        if not items:
            return out
        time.sleep(0.5)
    raise BenchError(f"DrafterServings, Deployments or pods in {namespace} still there after {timeout:.0f}s: {out}")


def component_rss(cluster: Cluster) -> dict:
    return {name: c.get("rss_mib") for name, c in (cluster.status().get("components") or {}).items()}


# ---------------------------------------------------------------- main
def bench(args: argparse.Namespace, cluster: Cluster, holder: list) -> dict:
    result: dict = {"machine": {"cpus": os.cpu_count(), "loadavgAtStart": os.getloadavg(),
                                "memTotalGiB": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)},
                    "stateDir": os.environ["DRAFTER_STATE_DIR"], "portBase": os.environ["DRAFTER_PORT_BASE"],
                    "recheckSeconds": args.recheck_seconds or os.environ.get("DRAFTER_RECHECK_SECONDS", "20 (default)")}
    t_up = time.monotonic()
    cluster.up()
    result["clusterUpSeconds"] = round(time.monotonic() - t_up, 1)

    free = cluster.free_kwok_gpu_nodes()
    if free < args.count:
        log(f"{free} free 8-GPU kwok nodes; adding {args.count - free}")
        t_nodes = time.monotonic()
        drafter_operator("cluster", "add-nodes", "--count", str(args.count - free), "--runtime", "kwok",
                         timeout=args.timeout)
        result["addNodesSeconds"] = round(time.monotonic() - t_nodes, 1)
    result["freeKwokGpuNodes"] = cluster.free_kwok_gpu_nodes()
    if result["freeKwokGpuNodes"] < args.count:
        raise BenchError(f"only {result['freeKwokGpuNodes']} free 8-GPU kwok nodes after add-nodes")

    harness.install_crds(cluster.kubectl)

    log_path = Path(args.operator_log or tempfile.mkstemp(prefix="serving-scale-operator-", suffix=".log")[1])
    operator = Operator(cluster, log_path, args.recheck_seconds)
    holder.append(operator)
    log(f"starting the operator (metrics 127.0.0.1:{operator.metrics_port}, log {log_path})")
    operator.start()
    result["operatorLog"] = str(log_path)
    time.sleep(args.idle_seconds)
    result["idle"] = {**operator.rss_mib(), "steady": steady(operator, 0, min(10.0, args.idle_seconds))}
    result["controlPlaneRssMiBIdle"] = component_rss(cluster)
    log(f"idle operator: {result['idle']}")

    run_id = time.strftime("%H%M%S")
    singles = []
    for i in range(args.single_runs):
        ns = f"scale1-{run_id}-{i}"
        cluster.kubectl("create", "namespace", ns)
        log(f"1 DrafterServing in {ns}")
        r = rollout_and_hold(cluster, operator, ns, ["kimi"], args.timeout, 0, args.single_steady_seconds)
        r["deleteSeconds"] = delete_all(cluster, ns, args.timeout)
        cluster.kubectl("delete", "namespace", ns, "--wait=false")
        log(f"  apply->Ready {r['applyToReadySeconds']['last']}s; steady {r['steady']['requestsPerReconcile']} "
            f"requests/reconcile")
        singles.append(r)
    result["single"] = singles

    ns = f"scale{args.count}-{run_id}"
    cluster.kubectl("create", "namespace", ns)
    names = [f"kimi-{i:03d}" for i in range(args.count)]
    log(f"{args.count} DrafterServings in {ns}")
    result["many"] = rollout_and_hold(cluster, operator, ns, names, args.timeout, args.settle_seconds,
                                      args.steady_seconds)
    result["controlPlaneRssMiBWithMany"] = component_rss(cluster)
    log(f"  steady: {result['many']['steady']}")
    result["many"]["deleteSeconds"] = delete_all(cluster, ns, args.timeout)
    cluster.kubectl("delete", "namespace", ns, "--wait=false")
    time.sleep(min(10.0, args.idle_seconds))
    result["afterDelete"] = operator.rss_mib()
    result["machine"]["loadavgAtEnd"] = os.getloadavg()
    return result


def fmt_q(q: dict) -> str:
    return f"median {q['median']:.2f} s, p90 {q['p90']:.2f} s, first {q['first']:.2f} s, last {q['last']:.2f} s" if q else "-"


def report(r: dict) -> None:
    print(f"machine: {r['machine']['cpus']} CPUs, {r['machine']['memTotalGiB']} GiB; load average at start "
          f"{r['machine']['loadavgAtStart'][0]:.2f}, at end {r['machine'].get('loadavgAtEnd', [0])[0]:.2f}; "
          f"safety re-check interval {r['recheckSeconds']} s")
    print(f"cluster up {r['clusterUpSeconds']} s; free 8-GPU kwok nodes: {r['freeKwokGpuNodes']}")
    print(f"operator idle (0 servings): RSS {r['idle']['rssMiB']} MiB, {r['idle']['threads']} threads")
    for i, s in enumerate(r["single"]):
        st = s["steady"]
        print(f"1 serving, run {i + 1}: apply->Ready {s['applyToReadySeconds']['last']:.2f} s "
              f"(Deployment created {s['applyToDeploymentCreatedSeconds'].get('last', '-')} s, Deployment Ready "
              f"{s['applyToDeploymentReadySeconds'].get('last', '-')} s); rollout {s['window']['requestsPerReconcile']} "
              f"requests/reconcile over {s['window']['reconciles']} reconciles {s['window']['requests']}; steady "
              f"{st['requestsPerReconcile']} requests/reconcile {st['perVerbPerReconcile']}, "
              f"{st.get('reconcilesPerServingPerMinute')} reconciles/min, mean reconcile {st['meanReconcileMs']} ms; "
              f"lost Ready afterwards: {s['lostReadyCount']}")
    m = r["many"]
    print(f"{m['servings']} servings at once: kubectl apply returned after {m['kubectlApplySeconds']} s")
    print(f"  apply->Ready:            {fmt_q(m['applyToReadySeconds'])}")
    print(f"  apply->Deployment seen:  {fmt_q(m['applyToDeploymentCreatedSeconds'])}")
    print(f"  apply->Deployment Ready: {fmt_q(m['applyToDeploymentReadySeconds'])}")
    print(f"  Deployment Ready->serving Ready: {fmt_q(m['deploymentReadyToServingReadySeconds'])}")
    w = m["window"]
    print(f"  rollout window: {w['reconciles']} reconciles ({w['errors']} errors), {w['requestsTotal']} requests "
          f"{w['requests']} = {w['requestsPerReconcile']} per reconcile, mean reconcile {w['meanReconcileMs']} ms")
    s = m["steady"]
    print(f"  steady {s['windowSeconds']} s: {s['reconciles']} reconciles ({s['errors']} errors), "
          f"{s['requestsPerReconcile']} requests/reconcile {s['perVerbPerReconcile']}, "
          f"{s['reconcilesPerServingPerMinute']} reconciles/serving/min, mean reconcile {s['meanReconcileMs']} ms, "
          f"operator CPU {s['operatorCpuPercent']} %")
    print(f"  servings that lost Ready=True after reaching it (rollout + steady): {m['lostReadyCount']} "
          f"{m['lostReady'] or ''}")
    print(f"  operator RSS with {m['servings']}: {m['rss']['rssMiB']} MiB (peak {m['rss']['peakRssMiB']} MiB, "
          f"{m['rss']['threads']} threads); after deleting them: {r['afterDelete']['rssMiB']} MiB")
    print(f"  delete {m['servings']}: seconds until none is left of each kind: {m['deleteSeconds']}")
    print(f"control plane RSS MiB idle: {r['controlPlaneRssMiBIdle']}")
    print(f"control plane RSS MiB with {m['servings']}: {r['controlPlaneRssMiBWithMany']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=50, help="DrafterServings applied at once (default 50)")
    parser.add_argument("--single-runs", type=int, default=3, help="repetitions of the 1-serving case")
    parser.add_argument("--single-steady-seconds", type=float, default=20)
    parser.add_argument("--steady-seconds", type=float, default=60, help="steady-state window with --count servings")
    parser.add_argument("--settle-seconds", type=float, default=5, help="pause after all are Ready, before steady")
    parser.add_argument("--idle-seconds", type=float, default=20, help="wait before reading the idle RSS")
    parser.add_argument("--recheck-seconds", default=None,
                        help="DRAFTER_RECHECK_SECONDS for the operator (its safety re-check; events wake it at once)")
    parser.add_argument("--timeout", type=float, default=300, help="bound of every single wait")
    parser.add_argument("--operator-log", default=None)
    parser.add_argument("--keep", action="store_true", help="leave the cluster running (default: down --wipe)")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    return run_on_own_cluster(args, lambda cluster, holder, result: result.update(bench(args, cluster, holder)),
                              report)


def run_on_own_cluster(args: argparse.Namespace, body: Callable[[Cluster, list, dict], object],
                       report: Callable[[dict], None]) -> int:
    """Run `body(cluster, holder, result)` and always clean up: what it started (`holder`, stopped in
    reverse order), then the cluster (wiped after success; its component logs kept after a failure;
    left alone if it was running before). `result` is written to --json even after a failure, with
    what was measured until then, and reported after a success. Needs --keep and --json options."""
    def on_signal(signum, _frame):
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, on_signal)

    cluster = Cluster()
    holder: list = []
    started = time.monotonic()
    succeeded = False
    result: dict = {}
    try:
        body(cluster, holder, result)
        succeeded = True
    finally:
        if not succeeded and args.json:
            Path(args.json).write_text(json.dumps(result, indent=2, default=str))
        for thing in reversed(holder):
            try:
                thing.stop()
            except Exception as exc:  # noqa: BLE001 - keep cleaning up
                log(f"stopping {type(thing).__name__} failed: {exc!r}")
        if not cluster.started:
            log(f"the cluster in {os.environ['DRAFTER_STATE_DIR']} was running before this bench: left running")
        elif not args.keep:
            try:
                cluster.down(wipe=succeeded)
                if not succeeded:
                    log(f"component logs kept in {os.environ['DRAFTER_STATE_DIR']}/logs")
            except BenchError as exc:
                log(f"cluster down failed: {exc}")
    result["benchSeconds"] = round(time.monotonic() - started, 1)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2, default=str))
    report(result)
    print(f"bench wall time {result['benchSeconds']} s")
    return 0


def exit_with(main: Callable[[], int]) -> None:
    """The bench scripts' entry point: ``sys.exit(main())``, a BenchError printed as one ``error:`` line
    with status 1 (every wait is bounded and says what it waited for)."""
    try:
        sys.exit(main())
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    exit_with(main)
