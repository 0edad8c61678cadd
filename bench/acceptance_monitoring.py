"""How fast does the operator notice a drafter that stops paying, and what does watching acceptance cost?

Runs on its OWN local cluster (DRAFTER_STATE_DIR=/tmp/bench-accept-cluster, DRAFTER_PORT_BASE=18540
unless already set), so nobody else's cluster is touched. Engine pods land on *process* nodes
(`cluster add-nodes --runtime process`, a GPU product only these nodes carry), where the local process
runner really starts them as the engine emulator on their pod IP (127.x): the operator really scrapes
each pod's /metrics. The emulator runs ten times faster than real time (ConfigMap `drafter-emulator`
in each namespace: DRAFTER_EMULATOR_TIME_SCALE=0.1, DRAFTER_EMULATOR_STARTUP_SECONDS=1); the
operator's acceptance clock (window, for, interval) is wall time.

The servings are the seed example (examples/serving-vllm-kimi-k25-eagle3.yaml: vLLM, EAGLE-3, k=5) with
the drafter /models/drafters/emulator-good-drafter (per-token acceptance 0.89: rate 71 % at k=5),
target.tensorParallelSize 1 and resources.gpusPerReplica 1 (eight fit on one 8-GPU node), a pre-bound
`models` claim, and spec.acceptance {minAcceptanceRate "0.4", window 30s, for 10s, minDraftTokens 200,
onDegraded Alert} (all changeable by flags). The operator runs as a subprocess
(`python -m drafter_operator.cli run --metrics-port <free> --metrics-host 127.0.0.1`) with
DRAFTER_ACCEPTANCE_INTERVAL_SECONDS=--interval (default 15, the production default).

Phase 1, detection latency (--trials, default 10), one serving, a client streaming /v1/completions
to its pod back to back the whole time:
  wait for Degraded=False (AcceptanceHealthy) over a window of good traffic; wait a random fraction of
  the interval (so the drop lands at a random phase of the operator's measurement clock); lower the
  drafter's acceptance at run time (POST <podIP>:8000/emulator/acceptance {"acceptance": 0.432}: 15 %
  acceptance rate at k=5); time until a watch on DrafterServings delivers Degraded=True. Also timed:
  the first status.acceptance below the threshold (Degraded=False/BelowThresholdPending), i.e. how
  long the window took to drain. Then restore {"acceptance": 0.89}, time recovery (Degraded=False
  needs the rate above threshold + 0.02 for `for`), and wait until the window holds only good
  traffic again (restore + window + 2 x interval) before the next trial: each trial starts from the
  same clean state as the first, not from a half-drained window. Reported against the bound
  window + for + interval. Reusing one serving is faster than a fresh serving per trial (which would
  need a full window of history before its first verdict) and measures the same thing.

Phase 2, operator cost (--count servings, default 50): apply them in one `kubectl apply`, wait until
all are Ready, send light traffic to --traffic-servings of them (default all: one streamed request of
--request-tokens tokens, then a pause of --request-pause seconds, per serving), wait until they all
have Degraded=False, then hold --steady-seconds (default 120) and report per minute: operator CPU
seconds (/proc/<pid>/stat utime+stime), Kubernetes API requests by verb (the operator's gauge
drafter_operator_api_requests{verb}: its own REST client, not kopf's watches, annotation patches or
Events), reconciles (drafter_reconcile_total{kind="DrafterServing"}), and status writes (watch events
in which a DrafterServing's .status changed), plus the operator's RSS (VmRSS), Degraded flips, the
emulators' total RSS and the load average.

Usage:
  python bench/acceptance_monitoring.py [--trials 10] [--interval 15] [--count 50] [--steady-seconds 120]
                                        [--skip-detection | --skip-scale] [--keep] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import math
import os
import random
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

os.environ.setdefault("DRAFTER_STATE_DIR", "/tmp/bench-accept-cluster")
os.environ.setdefault("DRAFTER_PORT_BASE", "18540")

import yaml  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serving_scale import BenchError, Cluster, Operator, drafter_operator, exit_with, log, run_on_own_cluster  # noqa: E402
from drafter_testbed import harness  # noqa: E402

from drafter_operator.constants import API_GROUP, API_VERSION, SERVING_PLURAL  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SEED = REPO / "examples" / "serving-vllm-kimi-k25-eagle3.yaml"
GROUP, VERSION, PLURAL = API_GROUP, API_VERSION, SERVING_PLURAL
# Only this benchmark's process nodes carry it (the local cluster's own kwok nodes are B200s).
GPU_PRODUCT = "NVIDIA-GB200"
NODE_PREFIX = "accept-gpu"
GOOD_DRAFTER = "/models/drafters/emulator-good-drafter"
TARGET_MODEL = "/models/Kimi-K2.5"
ENGINE_PORT = 8000


def vllm_rate(per_token: float, k: int) -> float:
    """vLLM's acceptance rate (accepted / drafted) for a per-token acceptance at k drafted tokens."""
    return sum(per_token ** i for i in range(1, k + 1)) / k


# ---------------------------------------------------------------- manifests
def serving_manifest(name: str, args: argparse.Namespace) -> dict:
    serving = copy.deepcopy(yaml.safe_load(SEED.read_text()))
    serving["metadata"] = {"name": name}
    spec = serving["spec"]
    spec["drafter"]["model"] = GOOD_DRAFTER
    spec["target"]["tensorParallelSize"] = 1
    spec["resources"]["gpusPerReplica"] = 1
    spec["placement"]["gpuProduct"] = GPU_PRODUCT
    spec["placement"]["nodeSelector"] = {"drafter.dev/node-runtime": "process"}
    spec["acceptance"] = {"minAcceptanceRate": str(args.min_rate), "window": args.window, "for": args.for_,
                          "minDraftTokens": args.min_draft_tokens, "onDegraded": "Alert"}
    return serving


def namespace_objects(namespace: str, time_scale: str) -> list[dict]:
    from drafter_testbed.launch import EMULATOR_CONFIGMAP, EMULATOR_ENV_PREFIX
    from drafter_testbed.volumes import static_claim

    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": EMULATOR_CONFIGMAP, "namespace": namespace},
          "data": {f"{EMULATOR_ENV_PREFIX}TIME_SCALE": time_scale, f"{EMULATOR_ENV_PREFIX}STARTUP_SECONDS": "1"}}
    return [*static_claim(namespace, "models", f"/tmp/drafter-bench-accept/{namespace}"), cm]


def seconds(duration: str) -> float:
    from drafter_operator.api import parse_duration

    return parse_duration(duration)


# ---------------------------------------------------------------- the operator, measured from outside
class MeasuredOperator(Operator):
    def cpu_seconds(self) -> float:
        """utime + stime of the operator process (/proc/<pid>/stat), seconds."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def counters(self) -> dict[str, float]:
        """The operator's own /metrics (requests, reconciles, Degraded gauges) and its CPU from /proc."""
        return {**self.metrics(), "cpuSeconds": self.cpu_seconds()}


# ---------------------------------------------------------------- a watch on every DrafterServing
class ServingWatch(threading.Thread):
    """Every DrafterServing event, stamped on receipt: Degraded/Ready conditions, status changes."""

    def __init__(self, kubeconfig: str):
        super().__init__(daemon=True)
        from kubernetes import client, config

        self.api_client = config.new_client_from_config(config_file=kubeconfig)
        self.custom = client.CustomObjectsApi(self.api_client)
        self.stop_event = threading.Event()
        self.changed = threading.Condition()
        self.status: dict[tuple, dict] = {}  # (namespace, name) -> last status seen
        self.seen_at: dict[tuple, float] = {}
        self.history: dict[tuple, list] = {}  # -> [(t, degraded status, reason, rate)] on each status change
        self.status_writes: dict[tuple, int] = {}
        self.errors: list[str] = []
        self.rv = self.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)["metadata"]["resourceVersion"]

    def run(self) -> None:
        from kubernetes import watch

        while not self.stop_event.is_set():
            try:
                w = watch.Watch()
                for event in w.stream(self.custom.list_cluster_custom_object, GROUP, VERSION, PLURAL,
                                      resource_version=self.rv, timeout_seconds=10):
                    self._on(event, time.monotonic())
                    if self.stop_event.is_set():
                        w.stop()
            except Exception as exc:  # noqa: BLE001 - re-opened until stopped
                self.errors.append(repr(exc)[:300])
                time.sleep(0.5)

    def _on(self, event: dict, now: float) -> None:
        obj = event["object"]
        meta = obj["metadata"]
        self.rv = meta["resourceVersion"]
        key = (meta["namespace"], meta["name"])
        status = obj.get("status") or {}
        with self.changed:
            if event["type"] == "DELETED":
                self.status.pop(key, None)
            elif status != self.status.get(key):
                if key in self.status:
                    self.status_writes[key] = self.status_writes.get(key, 0) + 1
                self.status[key] = status
                self.seen_at[key] = now
                d = condition(status, "Degraded")
                self.history.setdefault(key, []).append(
                    (now, d.get("status"), d.get("reason"), (status.get("acceptance") or {}).get("rate")))
            self.changed.notify_all()

    def wait(self, what: str, predicate, timeout: float):
        """Wait until predicate(self) is truthy (checked on every event); returns its value."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while True:
                value = predicate(self)
                if value:
                    return value
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BenchError(f"timed out after {timeout:.0f}s waiting for {what}")
                self.changed.wait(min(left, 1.0))

    def writes_total(self, namespace: str | None = None) -> int:
        with self.changed:
            return sum(v for k, v in self.status_writes.items() if namespace is None or k[0] == namespace)

    def stop(self) -> None:
        self.stop_event.set()
        self.join(15)
        self.api_client.close()


def condition(status: dict, kind: str) -> dict:
    return next((c for c in status.get("conditions") or [] if c.get("type") == kind), {})


# ---------------------------------------------------------------- traffic
class Traffic(threading.Thread):
    """Streamed /v1/completions to each target IP, one request at a time per target (asyncio, aiohttp)."""

    def __init__(self, ips: list[str], tokens: int, pause: float):
        super().__init__(daemon=True)
        self.ips, self.tokens, self.pause = ips, tokens, pause
        self.ok: dict[str, int] = {ip: 0 for ip in ips}
        self.failures: list[str] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stopping: asyncio.Event | None = None
        self.started_event = threading.Event()

    def run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        import aiohttp

        self.loop, self.stopping = asyncio.get_running_loop(), asyncio.Event()
        self.started_event.set()
        timeout = aiohttp.ClientTimeout(total=60)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            await asyncio.gather(*(self._client(session, ip, i) for i, ip in enumerate(self.ips)))

    async def _client(self, session, ip: str, index: int) -> None:
        # Stagger the starts so 50 clients do not fire in the same millisecond.
        await asyncio.sleep((index % 20) * self.pause / 20 if self.pause else 0)
        body = {"model": TARGET_MODEL, "prompt": "Explain speculative decoding.", "max_tokens": self.tokens,
                "stream": True, "temperature": 0}
        while not self.stopping.is_set():
            try:
                async with session.post(f"http://{ip}:{ENGINE_PORT}/v1/completions", json=body) as resp:
                    resp.raise_for_status()
                    async for _ in resp.content:
                        pass
                self.ok[ip] += 1
            except Exception as exc:  # noqa: BLE001 - counted, the client carries on
                if len(self.failures) < 1000:
                    self.failures.append(f"{ip}: {exc!r}"[:200])
                await asyncio.sleep(1)
            if self.pause:
                try:
                    await asyncio.wait_for(self.stopping.wait(), self.pause)
                except asyncio.TimeoutError:
                    pass

    def start_and_wait(self) -> None:
        self.start()
        self.started_event.wait(10)

    def stop(self) -> None:
        if self.loop and self.stopping:
            self.loop.call_soon_threadsafe(self.stopping.set)
        self.join(70)


def set_acceptance(ip: str, value: float) -> None:
    request = urllib.request.Request(f"http://{ip}:{ENGINE_PORT}/emulator/acceptance",
                                     data=json.dumps({"acceptance": value}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as resp:
        resp.read()


# ---------------------------------------------------------------- helpers
def quantiles(values: list[float]) -> dict:
    if not values:
        return {}
    values = sorted(values)

    def q(p: float) -> float:  # nearest rank
        return values[max(0, math.ceil(p * len(values)) - 1)]
    return {"n": len(values), "min": round(values[0], 2), "median": round(statistics.median(values), 2),
            "p90": round(q(0.9), 2), "p99": round(q(0.99), 2), "max": round(values[-1], 2),
            "mean": round(statistics.fmean(values), 2)}


def pod_ips(cluster: Cluster, namespace: str) -> dict[str, str]:
    """serving name -> pod IP of its (single) Ready, running pod."""
    out = {}
    for pod in cluster.get_json("-n", namespace, "pods", "-l", "drafter.dev/serving")["items"]:
        if pod["metadata"].get("deletionTimestamp") or not pod.get("status", {}).get("podIP"):
            continue
        if condition(pod["status"], "Ready").get("status") == "True":
            out[pod["metadata"]["labels"]["drafter.dev/serving"]] = pod["status"]["podIP"]
    return out


def emulator_rss_mib(ips: set[str]) -> tuple[int, float]:
    """Count and total VmRSS of emulator processes serving on these pod IPs (found via /proc environ)."""
    count, total = 0, 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
            host = next((e.split(b"=", 1)[1].decode() for e in env if e.startswith(b"DRAFTER_EMULATOR_HOST=")), None)
            if host not in ips:
                continue
            rss = next(line for line in (entry / "status").read_text().splitlines() if line.startswith("VmRSS:"))
        except (OSError, StopIteration):
            continue
        count += 1
        total += float(rss.split()[1]) / 1024
    return count, round(total, 1)


def wait_until(what: str, check, timeout: float, every: float = 1.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    raise BenchError(f"timed out after {timeout:.0f}s waiting for {what}")


def prepare_namespace(cluster: Cluster, namespace: str, args: argparse.Namespace) -> None:
    cluster.kubectl("create", "namespace", namespace)
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(namespace_objects(namespace, args.time_scale)))


def remove_namespace(cluster: Cluster, namespace: str, timeout: float) -> None:
    cluster.kubectl("-n", namespace, "delete", PLURAL, "--all", "--wait=false", timeout=60)
    wait_until(f"pods in {namespace} gone",
               lambda: not cluster.get_json("-n", namespace, "pods")["items"], timeout)
    cluster.kubectl("delete", "namespace", namespace, "--wait=false")
    cluster.kubectl("delete", "pv", f"{namespace}-models", "--wait=false", check=False)


def degraded(watch: ServingWatch, key: tuple) -> dict:
    return condition(watch.status.get(key, {}), "Degraded")


# ---------------------------------------------------------------- phase 1: detection latency
def detection(cluster: Cluster, operator: MeasuredOperator, watch: ServingWatch, args: argparse.Namespace,
              run_id: str, parent: dict) -> dict:
    namespace = f"accept-detect-{run_id}"
    prepare_namespace(cluster, namespace, args)
    name = "kimi"
    key = (namespace, name)
    window, hold, interval = seconds(args.window), seconds(args.for_), args.interval
    bound = window + hold + interval
    clean_wait = window + 2 * interval
    rng = random.Random(args.seed)
    log(f"detection: 1 serving in {namespace}; bound window {window:.0f} + for {hold:.0f} + interval "
        f"{interval:.0f} = {bound:.0f} s")
    t0 = time.monotonic()
    cluster.kubectl("-n", namespace, "apply", "-f", "-", input=yaml.safe_dump(serving_manifest(name, args)))
    watch.wait("the serving Ready", lambda w: condition(w.status.get(key, {}), "Ready").get("status") == "True",
               args.timeout)
    ready_s = time.monotonic() - t0
    ip = wait_until("its pod IP", lambda: pod_ips(cluster, namespace).get(name), 60)
    traffic = Traffic([ip], args.detect_tokens, 0)
    traffic.start_and_wait()
    result = parent["detection"] = {"namespace": namespace, "applyToReadySeconds": round(ready_s, 1),
                                    "boundSeconds": bound, "trials": []}
    try:
        healthy = watch.wait("Degraded=False (AcceptanceHealthy) with traffic",
                             lambda w: degraded(w, key).get("status") == "False"
                             and degraded(w, key).get("reason") == "AcceptanceHealthy" and w.seen_at[key],
                             args.timeout)
        result["readyToFirstHealthySeconds"] = round(healthy - t0 - ready_s, 1)
        log(f"  Ready after {ready_s:.1f}s; Degraded=False after {healthy - t0:.1f}s")
        # Make sure the first trial, too, starts from a window holding only good traffic.
        time.sleep(max(0.0, t0 + ready_s + clean_wait - time.monotonic()))
        for trial in range(args.trials):
            t = run_trial(watch, key, ip, args, rng, interval, clean_wait, trial)
            result["trials"].append(t)
            log(f"  trial {trial + 1}: Degraded=True after {t['detectSeconds']:.1f}s (first below threshold "
                f"{t.get('firstBelowSeconds')}s); recovered after {t.get('recoverSeconds')}s; load "
                f"{t['loadavg1']:.2f}")
    finally:
        traffic.stop()
        result["trafficRequests"] = sum(traffic.ok.values())
        result["trafficFailures"] = len(traffic.failures)
        result["trafficFailureSamples"] = traffic.failures[:3]
    det = [t["detectSeconds"] for t in result["trials"]]
    below = [t["firstBelowSeconds"] for t in result["trials"] if t.get("firstBelowSeconds") is not None]
    rec = [t["recoverSeconds"] for t in result["trials"] if t.get("recoverSeconds") is not None]
    result["detectSeconds"] = quantiles(det)
    result["firstBelowSeconds"] = quantiles(below)
    result["belowToDegradedSeconds"] = quantiles(
        [t["detectSeconds"] - t["firstBelowSeconds"] for t in result["trials"] if t.get("firstBelowSeconds") is not None])
    result["recoverSeconds"] = quantiles(rec)
    result["withinBound"] = sum(d <= bound for d in det)
    result["falseDegraded"] = sum(t["falseDegradedBeforeDrop"] for t in result["trials"])
    remove_namespace(cluster, namespace, args.timeout)
    return result


def run_trial(watch: ServingWatch, key: tuple, ip: str, args: argparse.Namespace, rng: random.Random,
              interval: float, clean_wait: float, trial: int) -> dict:
    out: dict = {"trial": trial + 1, "loadavg1": os.getloadavg()[0]}
    # Degraded=False over good traffic, then a random phase against the operator's measurement clock.
    watch.wait("Degraded=False before the drop", lambda w: degraded(w, key).get("status") == "False", args.timeout)
    time.sleep(rng.uniform(0, interval))
    with watch.changed:
        before = len(watch.history.get(key, []))
        out["falseDegradedBeforeDrop"] = sum(1 for h in watch.history.get(key, []) if h[1] == "True") if trial == 0 else 0
        out["rateBeforeDrop"] = (watch.status[key].get("acceptance") or {}).get("rate")
    t_drop = time.monotonic()
    set_acceptance(ip, args.bad_acceptance)
    out["dropPostSeconds"] = round(time.monotonic() - t_drop, 3)

    def after_drop(w: ServingWatch):
        for t, status, reason, rate in w.history.get(key, [])[before:]:
            if status == "True":
                return t
        return None
    t_degraded = watch.wait("Degraded=True", after_drop, args.timeout)
    out["detectSeconds"] = round(t_degraded - t_drop, 2)
    with watch.changed:
        hist = watch.history.get(key, [])[before:]
        first_below = next((t for t, s, r, rate in hist if rate is not None and rate < args.min_rate), None)
        out["firstBelowSeconds"] = round(first_below - t_drop, 2) if first_below else None
        d = degraded(watch, key)
        out["reason"], out["message"] = d.get("reason"), d.get("message")
        out["rateAtDetection"] = (watch.status[key].get("acceptance") or {}).get("rate")
        after = len(hist) + before
    # Restore, time the recovery, then let the window fill with good traffic only.
    t_restore = time.monotonic()
    set_acceptance(ip, args.good_acceptance)

    def recovered(w: ServingWatch):
        return next((t for t, s, r, rate in w.history.get(key, [])[after:] if s == "False"), None)
    t_recovered = watch.wait("Degraded=False after restoring", recovered, args.timeout)
    out["recoverSeconds"] = round(t_recovered - t_restore, 2)
    time.sleep(max(0.0, t_restore + clean_wait - time.monotonic()))
    return out


# ---------------------------------------------------------------- phase 2: cost at scale
def scale(cluster: Cluster, operator: MeasuredOperator, watch: ServingWatch, args: argparse.Namespace,
          run_id: str, parent: dict) -> dict:
    namespace = f"accept-scale-{run_id}"
    prepare_namespace(cluster, namespace, args)
    names = [f"kimi-{i:03d}" for i in range(args.count)]
    keys = [(namespace, n) for n in names]
    log(f"scale: {args.count} servings in {namespace}")
    t0 = time.monotonic()
    cluster.kubectl("-n", namespace, "apply", "-f", "-",
                    input=yaml.safe_dump_all([serving_manifest(n, args) for n in names]), timeout=180)

    def all_ready(w: ServingWatch):
        return all(condition(w.status.get(k, {}), "Ready").get("status") == "True" for k in keys)
    watch.wait(f"all {args.count} Ready", all_ready, args.timeout * 3)
    out = parent["scale"] = {"namespace": namespace, "servings": args.count,
                             "allReadySeconds": round(time.monotonic() - t0, 1)}
    log(f"  all Ready after {out['allReadySeconds']}s")
    ips = wait_until("every pod IP", lambda: (lambda m: m if len(m) == len(names) else None)(pod_ips(cluster, namespace)),
                     120)
    with_traffic = names[:args.traffic_servings if args.traffic_servings is not None else len(names)]
    traffic = Traffic([ips[n] for n in with_traffic], args.request_tokens, args.request_pause)
    traffic.start_and_wait()
    out["trafficServings"] = len(with_traffic)
    try:
        t1 = time.monotonic()

        def all_healthy(w: ServingWatch):
            return all(degraded(w, (namespace, n)).get("status") == "False" for n in with_traffic)
        try:
            watch.wait("Degraded=False on every serving with traffic", all_healthy, args.timeout)
            out["trafficToAllHealthySeconds"] = round(time.monotonic() - t1, 1)
        except BenchError as exc:
            out["notHealthy"] = {n: degraded(watch, (namespace, n)) for n in with_traffic
                                 if degraded(watch, (namespace, n)).get("status") != "False"}
            log(f"  {exc}: {len(out['notHealthy'])} not Degraded=False, e.g. {list(out['notHealthy'].items())[:2]}")
        time.sleep(args.settle_seconds)
        log(f"  steady for {args.steady_seconds:.0f}s")
        out["steady"] = steady(operator, watch, namespace, keys, args.steady_seconds)
        out["rss"] = operator.rss_mib()
        out["emulators"], out["emulatorRssMiB"] = emulator_rss_mib(set(ips.values()))
        out["degradedStates"] = {}
        for k in keys:
            d = degraded(watch, k)
            label = f"{d.get('status')}/{d.get('reason')}"
            out["degradedStates"][label] = out["degradedStates"].get(label, 0) + 1
    finally:
        traffic.stop()
        out["trafficRequests"] = sum(traffic.ok.values())
        out["trafficFailures"] = len(traffic.failures)
        out["trafficFailureSamples"] = traffic.failures[:3]
    if not args.keep_servings:
        remove_namespace(cluster, namespace, args.timeout * 2)
    return out


def steady(operator: MeasuredOperator, watch: ServingWatch, namespace: str, keys: list[tuple], hold: float) -> dict:
    before, writes_before = operator.counters(), watch.writes_total(namespace)
    with watch.changed:
        flips_before = {k: [h[1] for h in watch.history.get(k, [])] for k in keys}
    load_before = os.getloadavg()
    t0 = time.monotonic()
    rss_samples = []
    while time.monotonic() - t0 < hold:
        time.sleep(min(10.0, hold - (time.monotonic() - t0)))
        rss_samples.append(operator.rss_mib()["rssMiB"])
    elapsed = time.monotonic() - t0
    after, writes_after = operator.counters(), watch.writes_total(namespace)
    per_min = 60 / elapsed
    d = {k: after.get(k, 0) - before.get(k, 0) for k in set(before) | set(after)}
    requests = {k.split(".", 1)[1]: round(v * per_min, 1) for k, v in sorted(d.items()) if k.startswith("requests.") and v}
    flips = 0
    with watch.changed:
        for k in keys:
            states = [h[1] for h in watch.history.get(k, [])][len(flips_before[k]):]
            prev = flips_before[k][-1] if flips_before[k] else None
            for s in states:
                flips += s != prev
                prev = s
    reconciles = d.get("reconciles.ok", 0) + d.get("reconciles.error", 0)
    return {
        "windowSeconds": round(elapsed, 1), "loadavgAtStart": load_before, "loadavgAtEnd": os.getloadavg(),
        "cpuSecondsPerMinute": round(d["cpuSeconds"] * per_min, 2),
        "cpuPercentOfOneCore": round(100 * d["cpuSeconds"] / elapsed, 1),
        "apiRequestsPerMinute": requests, "apiRequestsPerMinuteTotal": round(sum(requests.values()), 1),
        "reconcilesPerMinute": round(reconciles * per_min, 1), "reconcileErrors": int(d.get("reconciles.error", 0)),
        "statusWritesPerMinute": round((writes_after - writes_before) * per_min, 1),
        "statusWritesPerServingPerMinute": round((writes_after - writes_before) * per_min / len(keys), 2),
        "degradedConditionChanges": flips,
        "rssMiBMin": min(rss_samples), "rssMiBMax": max(rss_samples),
        "degradedGauge": {"1": int(after.get("degraded.1", 0)), "0": int(after.get("degraded.0", 0))},
    }


def idle(operator: MeasuredOperator, seconds_: float) -> dict:
    before = operator.counters()
    time.sleep(seconds_)
    after = operator.counters()
    return {"rss": operator.rss_mib(), "cpuSecondsPerMinute": round((after["cpuSeconds"] - before["cpuSeconds"]) * 60 / seconds_, 2)}


# ---------------------------------------------------------------- main
def bench(args: argparse.Namespace, cluster: Cluster, holder: list, result: dict) -> dict:
    result.update({
        "machine": {"cpus": os.cpu_count(), "loadavgAtStart": os.getloadavg(),
                    "memTotalGiB": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)},
        "stateDir": os.environ["DRAFTER_STATE_DIR"], "portBase": os.environ["DRAFTER_PORT_BASE"],
        "acceptanceIntervalSeconds": args.interval, "timeScale": args.time_scale,
        "spec": {"minAcceptanceRate": args.min_rate, "window": args.window, "for": args.for_,
                 "minDraftTokens": args.min_draft_tokens, "onDegraded": "Alert"},
        "acceptance": {"good": args.good_acceptance, "goodRate": round(vllm_rate(args.good_acceptance, 5), 3),
                       "bad": args.bad_acceptance, "badRate": round(vllm_rate(args.bad_acceptance, 5), 3)},
    })
    os.environ["DRAFTER_ACCEPTANCE_INTERVAL_SECONDS"] = str(args.interval)
    cluster.up()
    nodes_needed = max(1 if not args.skip_detection else 0, 0 if args.skip_scale else math.ceil(args.count / 8))
    have = len(cluster.get_json("nodes", "-l", f"nvidia.com/gpu.product={GPU_PRODUCT},drafter.dev/node-runtime=process")["items"])
    if have < nodes_needed:
        log(f"adding {nodes_needed - have} process nodes (8 x {GPU_PRODUCT})")
        drafter_operator("cluster", "add-nodes", "--count", str(nodes_needed - have), "--runtime", "process",
                         "--gpus", "8", "--gpu-product", GPU_PRODUCT, "--name-prefix", NODE_PREFIX, timeout=args.timeout)
    result["processNodes"] = max(have, nodes_needed)
    harness.install_crds(cluster.kubectl)

    log_path = Path(args.operator_log or tempfile.mkstemp(prefix="acceptance-operator-", suffix=".log")[1])
    operator = MeasuredOperator(cluster, log_path, None)
    holder.append(operator)
    log(f"starting the operator (DRAFTER_ACCEPTANCE_INTERVAL_SECONDS={args.interval}, metrics "
        f"127.0.0.1:{operator.metrics_port}, log {log_path})")
    operator.start()
    result["operatorLog"] = str(log_path)
    watch = ServingWatch(cluster.kubeconfig)
    watch.start()
    holder.append(watch)
    result["idle"] = idle(operator, args.idle_seconds)
    run_id = time.strftime("%H%M%S")
    if not args.skip_detection:
        detection(cluster, operator, watch, args, run_id, result)
    if not args.skip_scale:
        scale(cluster, operator, watch, args, run_id, result)
    result["watchErrors"] = watch.errors[:5]
    result["machine"]["loadavgAtEnd"] = os.getloadavg()
    return result


def fq(q: dict, unit: str = "s") -> str:
    if not q:
        return "-"
    return (f"median {q['median']:.1f} {unit}, min {q['min']:.1f}, p90 {q['p90']:.1f}, max {q['max']:.1f} "
            f"(n={q['n']})")


def report(r: dict) -> None:
    m = r["machine"]
    print(f"machine: {m['cpus']} CPUs, {m['memTotalGiB']} GiB; 1-min load average at start "
          f"{m['loadavgAtStart'][0]:.2f}, at end {m.get('loadavgAtEnd', [float('nan')])[0]:.2f}")
    print(f"operator: DRAFTER_ACCEPTANCE_INTERVAL_SECONDS={r['acceptanceIntervalSeconds']}; emulator time scale "
          f"{r['timeScale']}; spec.acceptance {r['spec']}")
    a = r["acceptance"]
    print(f"drafter: per-token acceptance {a['good']} (rate {a['goodRate']:.1%}) -> {a['bad']} "
          f"(rate {a['badRate']:.1%}) at k=5")
    print(f"operator idle (no serving): RSS {r['idle']['rss']['rssMiB']} MiB, CPU {r['idle']['cpuSecondsPerMinute']} s/min")
    d = r.get("detection")
    if d:
        print(f"\ndetection latency, 1 serving, {len(d['trials'])} trials (bound window + for + interval = "
              f"{d['boundSeconds']:.0f} s):")
        print(f"  {'trial':>5}  {'load':>5}  {'rate before':>11}  {'below thr.':>10}  {'Degraded=True':>13}  "
              f"{'recovered':>9}  message")
        for t in d["trials"]:
            print(f"  {t['trial']:>5}  {t['loadavg1']:>5.2f}  {t['rateBeforeDrop'] or 0:>11.1%}  "
                  f"{t['firstBelowSeconds'] if t['firstBelowSeconds'] is not None else '-':>9}s  "
                  f"{t['detectSeconds']:>12.1f}s  {t['recoverSeconds']:>8.1f}s  {t['message']}")
        print(f"  drop -> Degraded=True:           {fq(d['detectSeconds'])}; within the bound: "
              f"{d['withinBound']}/{len(d['trials'])}")
        print(f"  drop -> status rate below 0.4:   {fq(d['firstBelowSeconds'])}")
        print(f"  below -> Degraded=True:          {fq(d['belowToDegradedSeconds'])}")
        print(f"  restore -> Degraded=False:       {fq(d['recoverSeconds'])}")
        print(f"  apply -> Ready {d['applyToReadySeconds']} s, Ready -> first Degraded=False "
              f"{d.get('readyToFirstHealthySeconds')} s; Degraded=True before any drop: {d['falseDegraded']}; "
              f"client requests {d['trafficRequests']}, failures {d['trafficFailures']}")
    s = r.get("scale")
    if s:
        st = s.get("steady", {})
        print(f"\noperator cost, {s['servings']} servings (process nodes: {r['processNodes']}), light traffic to "
              f"{s['trafficServings']}:")
        print(f"  all Ready {s['allReadySeconds']} s after one apply; traffic -> all Degraded=False "
              f"{s.get('trafficToAllHealthySeconds', 'never')} s")
        if st:
            print(f"  steady window {st['windowSeconds']} s, load average {st['loadavgAtStart'][0]:.2f} -> "
                  f"{st['loadavgAtEnd'][0]:.2f}")
            print(f"  operator CPU:          {st['cpuSecondsPerMinute']} s/min ({st['cpuPercentOfOneCore']} % of one core)")
            print(f"  operator RSS:          {st['rssMiBMin']} to {st['rssMiBMax']} MiB")
            print(f"  API requests/min:      {st['apiRequestsPerMinuteTotal']} {st['apiRequestsPerMinute']}")
            print(f"  reconciles/min:        {st['reconcilesPerMinute']} ({st['reconcileErrors']} errors)")
            print(f"  status writes/min:     {st['statusWritesPerMinute']} ({st['statusWritesPerServingPerMinute']} per "
                  f"serving; one measurement per serving per {r['acceptanceIntervalSeconds']} s = "
                  f"{60 / r['acceptanceIntervalSeconds']:.0f} per serving per minute)")
            print(f"  Degraded changes in the window: {st['degradedConditionChanges']}; drafter_degraded gauge "
                  f"{st['degradedGauge']}")
        print(f"  Degraded at the end: {s.get('degradedStates')}")
        print(f"  emulators: {s.get('emulators')} processes, {s.get('emulatorRssMiB')} MiB RSS together; client "
              f"requests {s['trafficRequests']}, failures {s['trafficFailures']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--trials", type=int, default=10, help="detection trials")
    parser.add_argument("--interval", type=float, default=15,
                        help="DRAFTER_ACCEPTANCE_INTERVAL_SECONDS for the operator (production default 15)")
    parser.add_argument("--min-rate", type=float, default=0.4)
    parser.add_argument("--window", default="30s")
    parser.add_argument("--for", dest="for_", default="10s")
    parser.add_argument("--min-draft-tokens", type=int, default=200)
    parser.add_argument("--good-acceptance", type=float, default=0.89, help="per-token acceptance before the drop")
    parser.add_argument("--bad-acceptance", type=float, default=0.432, help="per-token acceptance after the drop")
    parser.add_argument("--detect-tokens", type=int, default=128, help="tokens per request, detection phase")
    parser.add_argument("--count", type=int, default=50, help="servings in the cost phase")
    parser.add_argument("--traffic-servings", type=int, default=None, help="how many of them get traffic (all)")
    parser.add_argument("--request-tokens", type=int, default=32, help="tokens per request, cost phase")
    parser.add_argument("--request-pause", type=float, default=2.0, help="pause between a serving's requests")
    parser.add_argument("--steady-seconds", type=float, default=120)
    parser.add_argument("--settle-seconds", type=float, default=10)
    parser.add_argument("--idle-seconds", type=float, default=15)
    parser.add_argument("--time-scale", default="0.1", help="DRAFTER_EMULATOR_TIME_SCALE")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random drop phases")
    parser.add_argument("--skip-detection", action="store_true")
    parser.add_argument("--skip-scale", action="store_true")
    parser.add_argument("--keep-servings", action="store_true", help="leave the cost phase's servings running")
    parser.add_argument("--timeout", type=float, default=300, help="bound of every single wait")
    parser.add_argument("--operator-log", default=None)
    parser.add_argument("--keep", action="store_true", help="leave the cluster running (default: down --wipe)")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    return run_on_own_cluster(args, lambda cluster, holder, result: bench(args, cluster, holder, result), report)


if __name__ == "__main__":
    exit_with(main)
