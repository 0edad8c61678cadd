"""What other workloads' churn costs the operator: 1,000 foreign pods created and deleted on the local cluster.

The operator watches Pods, Deployments, Services and Jobs cluster-wide. Every event of those watches
reaches its process (kopf parses it, starts or feeds a per-object worker), whether or not it is about
one of its children; the watches' server-side label selector (controllers/handlers.py `configure`)
keeps other objects' events in the apiserver. This bench measures what reaches the operator while
another workload churns pods it does not own.

Runs on its OWN local cluster (DRAFTER_STATE_DIR=/tmp/foreign-churn-cluster, DRAFTER_PORT_BASE=19640
unless set), wiped at the end unless --keep (see bench/serving_scale.py run_on_own_cluster).

Steps:
1. `cluster up`, CRDs; the operator started (no DrafterServing anywhere); --idle-seconds to settle, then
   its CPU seconds over another --idle-seconds (the idle rate, for comparison);
2. --pods pods without any of the operator's labels created in namespace `foreign-churn` (from
   --threads threads; they stay Pending: their nodeSelector matches no node, so no node runtime adds
   work), then deleted; the events the apiserver sent for them are counted by this script's own watch;
3. once the operator's event counter has not moved for 5 s (or --drain-seconds passed): the operator's
   drafter_watch_events_total by kind and its process_cpu_seconds_total, both as deltas over the churn.

Usage: python bench/foreign_churn.py [--pods 1000] [--threads 8] [--json out.json] [--keep]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("DRAFTER_STATE_DIR", "/tmp/foreign-churn-cluster")
os.environ.setdefault("DRAFTER_PORT_BASE", "19640")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from serving_scale import (REPO, BenchError, Cluster, Operator, exit_with, log, metric_samples,  # noqa: E402
                           run_on_own_cluster)
from drafter_testbed import harness  # noqa: E402

NAMESPACE = "foreign-churn"
BENCH_AGENT = "foreign-churn-bench"


def operator_figures(operator: Operator) -> dict[str, float]:
    """The operator's watch events by kind and its CPU seconds, from its /metrics."""
    out: dict[str, float] = {}
    for s in metric_samples(operator.metrics_port):
        if s.name == "drafter_watch_events_total":
            out[f"events.{s.labels['kind']}"] = s.value
        elif s.name == "process_cpu_seconds_total":
            out["cpuSeconds"] = s.value
    return out


def foreign_pod(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "someone-else", "churn": "yes"}},
            "spec": {"nodeSelector": {"foreign-churn/no-such-node": "true"},
                     "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}


class EventCounter(threading.Thread):
    """Counts the watch events the apiserver sends for the foreign namespace's pods (the churn's size)."""

    def __init__(self, api_client, resource_version: str):
        super().__init__(daemon=True)
        self.api_client, self.rv = api_client, resource_version
        self.count = 0
        self.stop_event = threading.Event()

    def run(self) -> None:
        from kubernetes import client, watch

        core = client.CoreV1Api(self.api_client)
        while not self.stop_event.is_set():
            w = watch.Watch()
            for event in w.stream(core.list_namespaced_pod, NAMESPACE, resource_version=self.rv, timeout_seconds=5,
                                  allow_watch_bookmarks=True):
                if event["type"] != "BOOKMARK":
                    self.count += 1
                self.rv = event["raw_object"]["metadata"]["resourceVersion"]

    def stop(self) -> None:
        self.stop_event.set()


def bench(args: argparse.Namespace, cluster: Cluster, holder: list) -> dict:
    from drafter_operator.kube import Kube, load_api_client, object_path

    result: dict = {"pods": args.pods, "cpus": os.cpu_count(), "loadavgAtStart": os.getloadavg()}
    cluster.up()
    harness.install_crds(cluster.kubectl)
    cluster.kubectl("create", "namespace", NAMESPACE, check=False)

    log_path = Path(args.operator_log or tempfile.mkstemp(prefix="foreign-churn-operator-", suffix=".log")[1])
    operator = Operator(cluster, log_path, None)
    holder.append(operator)
    log(f"starting the operator (metrics 127.0.0.1:{operator.metrics_port}, log {log_path})")
    operator.start()
    result["operatorLog"] = str(log_path)
    time.sleep(args.idle_seconds)
    idle_start, t_idle = operator_figures(operator), time.monotonic()
    time.sleep(args.idle_seconds)
    idle_end = operator_figures(operator)
    result["idleCpuSecondsPerMinute"] = round(
        60 * (idle_end["cpuSeconds"] - idle_start["cpuSeconds"]) / (time.monotonic() - t_idle), 3)

    api_client = load_api_client(cluster.kubeconfig)
    api_client.user_agent = BENCH_AGENT
    kube = Kube(api_client)
    pods_path = object_path("v1", "pods", NAMESPACE)
    listed = kube.request("GET", pods_path, query={"limit": 1})
    counter = EventCounter(api_client, listed["metadata"]["resourceVersion"])
    holder.append(counter)
    counter.start()

    before, t0 = operator_figures(operator), time.monotonic()
    names = [f"foreign-{i:04d}" for i in range(args.pods)]
    log(f"creating {args.pods} foreign pods in {NAMESPACE}")
    with ThreadPoolExecutor(args.threads) as pool:
        list(pool.map(lambda n: kube.create(pods_path, foreign_pod(n)), names))
        log("deleting them")
        list(pool.map(lambda n: kube.request("DELETE", object_path("v1", "pods", NAMESPACE, n),
                                             {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}),
                      names))
    result["churnSeconds"] = round(time.monotonic() - t0, 1)

    # The operator may still be working through the events it received: wait until its counter rests.
    deadline, last, still_since = time.monotonic() + args.drain_seconds, None, time.monotonic()
    while time.monotonic() < deadline:
        now = operator_figures(operator)
        events = sum(v for k, v in now.items() if k.startswith("events."))
        if events != last:
            last, still_since = events, time.monotonic()
        elif time.monotonic() - still_since >= 5:
            break
        time.sleep(1)
    after = operator_figures(operator)
    counter.stop()
    result["windowSeconds"] = round(time.monotonic() - t0, 1)
    result["foreignPodEventsSentByApiserver"] = counter.count
    result["operatorWatchEvents"] = {k.split(".", 1)[1]: int(after[k] - before.get(k, 0))
                                     for k in after if k.startswith("events.")}
    result["operatorCpuSeconds"] = round(after["cpuSeconds"] - before["cpuSeconds"], 2)
    idle_rate = result["idleCpuSecondsPerMinute"]
    result["operatorCpuSecondsIdleOverWindow"] = round(idle_rate * result["windowSeconds"] / 60, 2)
    result["loadavgAtEnd"] = os.getloadavg()
    return result


def report(r: dict) -> None:
    if "operatorWatchEvents" not in r:
        return
    print(f"{r['pods']} foreign pods created and deleted in {r['churnSeconds']} s; the apiserver sent "
          f"{r['foreignPodEventsSentByApiserver']} events about them")
    events = r['operatorWatchEvents']
    print(f"operator: watch events received {sum(events.values())} {events}, CPU {r['operatorCpuSeconds']} s over "
          f"{r['windowSeconds']} s (idle rate {r['idleCpuSecondsPerMinute']} s/min)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--idle-seconds", type=float, default=15)
    parser.add_argument("--drain-seconds", type=float, default=120, help="bound of the wait for the operator to rest")
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--operator-log", default=None)
    parser.add_argument("--keep", action="store_true", help="leave the cluster running (default: down --wipe)")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    if args.pods < 1:
        raise BenchError("--pods must be at least 1")
    return run_on_own_cluster(args, lambda cluster, holder, result: result.update(bench(args, cluster, holder)),
                              report)


if __name__ == "__main__":
    exit_with(main)
