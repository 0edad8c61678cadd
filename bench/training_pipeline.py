"""How long does a DrafterTraining take on the local cluster, stage by stage, and what does running it
through Kubernetes Jobs cost on top of the framework code itself?

Runs on its OWN local cluster (DRAFTER_STATE_DIR=/tmp/bench-training-cluster, DRAFTER_PORT_BASE=18580
unless already set): brought up if needed, and brought down (wiped) at the end only if this script
started it. The set-up is the one of tests/e2e/test_training.py: the training environment
(`.ci/training-env`, recorded with `drafter-operator cluster training-env`), one process node (8 x
NVIDIA-H100-80GB-HBM3, a product only this benchmark's node carries) where the stage pods really run
the real SpecForge 0.2.0 / speculators 0.9.0 code on the CPU, the tiny random Llama target and a chat
dataset written onto the host directory of the `models` claim, a PersistentVolume pre-bound to the
hidden-state claim, and the operator as a subprocess with DRAFTER_TRAINING_CPU=1.

Per framework (--frameworks, default both), one DrafterTraining with --conversations (default 24) and
--epochs (default 1):
  specforge:   a local JSONL: Extract -> Train -> Export;
  speculators: spec.data.generation {engine: vllm}: the target's engine pod (the engine emulator;
               ConfigMap drafter-emulator with --time-scale and --engine-startup-seconds) answers the
               prompts in Generate, then Extract -> Train -> Export.

What is measured, all stamped on receipt with CLOCK_BOOTTIME (the clock /proc's process start times use):
  * watches on the namespace's Jobs, Pods, Deployments and the DrafterTraining, opened before the apply;
  * per stage: Job seen created -> Job seen Complete (wall); the stage process's life (its start time
    from /proc/<pid>/stat, its end when /proc/<pid> is gone: sampled every --sample-seconds; the pid is
    the pod's containerID drafter-process://<pid>); the container's startedAt/finishedAt and the Job's
    startTime/completionTime as the API reports them (whole seconds); overhead = wall - process life,
    split into Job -> Pod (job controller), Pod -> scheduled (scheduler), scheduled -> process started
    (the local runner), process gone -> Job Complete (runner status + job controller), and the operator's
    hand-off (previous Job Complete -> next Job created);
  * peak memory per stage: the largest sum of PSS (/proc/<pid>/smaps_rollup: shared library pages split
    between the processes, not counted once each as summed RSS would) over the processes in the stage
    process's session (the runner starts each container in a new session), sampled every
    --sample-seconds; reported with the largest single-process VmHWM (peak RSS) as a floor, so a spike
    between samples is not missed entirely;
  * artifacts from status.artifacts, hidden states from status.hiddenStates (bytesWritten/estimatedBytes);
  * Generate's engine: its Deployment seen created -> readyReplicas >= 1;
  * the operator's cost: its own /metrics (drafter_operator_api_requests{verb}: requests of its REST
    client, not kopf's watches or its status patches; drafter_reconcile_total{kind="DrafterTraining"};
    process_cpu_seconds_total) sampled every second, differenced over each stage's window, per minute.

Usage:
  python bench/training_pipeline.py [--conversations 24] [--epochs 1] [--frameworks specforge,speculators]
                                    [--keep] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("DRAFTER_STATE_DIR", "/tmp/bench-training-cluster")
os.environ.setdefault("DRAFTER_PORT_BASE", "18580")
# The operator subprocess inherits this: no GPU here, so the stages take the frameworks' CPU adapters.
os.environ["DRAFTER_TRAINING_CPU"] = "1"
# Generate's stage runs `drafter-operator regenerate` from the PATH the local runner inherits from the
# cluster this script starts: this python's scripts directory (the venv's), as `./dev` would put it.
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serving_scale import (BenchError, Operator, drafter_operator, exit_with, log, metric_samples,  # noqa: E402
                           run_on_own_cluster)
from drafter_testbed import harness  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
GPU_PRODUCT = "NVIDIA-H100-80GB-HBM3"
NODE_PREFIX = "train-gpu"
STAGE_LABEL = "drafter.dev/training-stage"
TRAINING_LABEL = "drafter.dev/training"
ENGINE_COMPONENT = "generation-engine"
STAGES = ("Generate", "Extract", "Train", "Export")
TINY_LAYERS = [1, 2, 3]  # vLLM's ids on the 4-layer tiny target
CPU_ENV = [{"name": "VLLM_TARGET_DEVICE", "value": "cpu"}, {"name": "TOKENIZERS_PARALLELISM", "value": "false"},
           {"name": "WANDB_MODE", "value": "disabled"}, {"name": "HF_DATASETS_OFFLINE", "value": "1"},
           {"name": "TRANSFORMERS_OFFLINE", "value": "1"}]
PAGE = os.sysconf("SC_PAGE_SIZE")
TICK = os.sysconf("SC_CLK_TCK")


def now() -> float:
    """CLOCK_BOOTTIME: the clock /proc/<pid>/stat's start times count from."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


# ---------------------------------------------------------------- the cluster's objects, watched
class Events(threading.Thread):
    """Every event of one kind in one namespace, as (receipt time, type, object dict)."""

    def __init__(self, api_client, list_fn, *args, on_event=None):
        super().__init__(daemon=True)
        self.api_client, self.list_fn, self.args, self.on_event = api_client, list_fn, args, on_event
        self.events: list[tuple[float, str, dict]] = []
        self.errors: list[str] = []
        self.stop_event = threading.Event()
        listing = list_fn(*args)
        meta = listing["metadata"] if isinstance(listing, dict) else listing.metadata
        self.rv = meta["resourceVersion"] if isinstance(meta, dict) else meta.resource_version

    def run(self) -> None:
        from kubernetes import watch

        while not self.stop_event.is_set():
            try:
                w = watch.Watch()
                for event in w.stream(self.list_fn, *self.args, resource_version=self.rv, timeout_seconds=5):
                    t = now()
                    obj = event["object"]
                    obj = obj if isinstance(obj, dict) else self.api_client.sanitize_for_serialization(obj)
                    self.rv = obj["metadata"]["resourceVersion"]
                    self.events.append((t, event["type"], obj))
                    if self.on_event:
                        self.on_event(t, obj)
                    if self.stop_event.is_set():
                        w.stop()
            except Exception as exc:  # noqa: BLE001 - a dropped watch is re-opened until stopped
                self.errors.append(repr(exc)[:300])
                time.sleep(0.5)

    def by_name(self) -> dict[str, list[tuple[float, str, dict]]]:
        out: dict[str, list] = {}
        for event in list(self.events):
            out.setdefault(event[2]["metadata"]["name"], []).append(event)
        return out

    def stop(self) -> None:
        self.stop_event.set()
        self.join(15)


# ---------------------------------------------------------------- stage processes, sampled in /proc
def _stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


class ProcSampler(threading.Thread):
    """For each pod's container process (pid from its containerID): its start time (/proc), when it was
    seen gone, and the peak of the summed PSS of its session (the runner gives each container its own)."""

    def __init__(self, every: float):
        super().__init__(daemon=True)
        self.every = every
        self.lock = threading.Lock()
        self.procs: dict[int, dict] = {}  # pid -> {pod, start, end, peakRss, peakHwm, samples}
        self.stop_event = threading.Event()

    def track(self, pod: str, pid: int) -> None:
        with self.lock:
            if pid in self.procs:
                return
            fields = _stat(pid)
            # A pid whose process already went (and whose number nobody reused yet) has no start time.
            start = int(fields[19]) / TICK if fields else None
            self.procs[pid] = {"pod": pod, "start": start, "end": None if fields else now(),
                               "peakRss": 0, "peakHwm": 0, "samples": 0}

    def run(self) -> None:
        while not self.stop_event.is_set():
            with self.lock:
                live = {pid: p for pid, p in self.procs.items() if p["end"] is None}
            if live:
                self._sample(live)
            self.stop_event.wait(self.every)

    def _sample(self, live: dict[int, dict]) -> None:
        t = now()
        rss: dict[int, int] = dict.fromkeys(live, 0)
        hwm: dict[int, int] = dict.fromkeys(live, 0)
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            fields = _stat(int(entry.name))
            if not fields or int(fields[3]) not in live:  # fields[3]: the session id
                continue
            session = int(fields[3])
            try:
                # PSS, not RSS: a stage's processes share the pages of torch's libraries, and summed RSS
                # would count those once per process.
                for line in Path(f"/proc/{entry.name}/smaps_rollup").read_text().splitlines():
                    if line.startswith("Pss:"):
                        rss[session] += int(line.split()[1]) * 1024
                for line in Path(f"/proc/{entry.name}/status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        hwm[session] = max(hwm[session], int(line.split()[1]) * 1024)
            except (OSError, ValueError, IndexError):
                continue
        with self.lock:
            for pid, proc in live.items():
                if not Path(f"/proc/{pid}").exists() or (_stat(pid) or ["Z"])[0] == "Z":
                    proc["end"] = t
                    continue
                proc["peakRss"] = max(proc["peakRss"], rss[pid])
                proc["peakHwm"] = max(proc["peakHwm"], hwm[pid])
                proc["samples"] += 1

    def stop(self) -> None:
        self.stop_event.set()
        self.join(10)


class MetricsSampler(threading.Thread):
    """The operator's /metrics every `every` seconds: API requests by verb, DrafterTraining reconciles, CPU."""

    def __init__(self, port: int, every: float = 1.0):
        super().__init__(daemon=True)
        self.port, self.every = port, every
        self.samples: list[tuple[float, dict[str, float]]] = []
        self.errors: list[str] = []
        self.stop_event = threading.Event()

    def read(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for s in metric_samples(self.port):
            if s.name == "drafter_operator_api_requests":
                out[f"requests.{s.labels['verb']}"] = s.value
            elif s.name == "drafter_reconcile_total" and s.labels.get("kind") == "DrafterTraining":
                out["reconciles"] = out.get("reconciles", 0) + s.value
            elif s.name == "process_cpu_seconds_total":
                out["cpuSeconds"] = s.value
        return out

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                self.samples.append((now(), self.read()))
            except OSError as exc:
                self.errors.append(repr(exc)[:200])
            self.stop_event.wait(self.every)

    def window(self, start: float, end: float) -> dict | None:
        """Per-minute rates between the last sample at or before `start` and the first at or after `end`."""
        before = [s for s in self.samples if s[0] <= start]
        after = [s for s in self.samples if s[0] >= end]
        if not before or not after:
            return None
        (t0, a), (t1, b) = before[-1], after[0]
        per_min = 60 / (t1 - t0)
        d = {k: b.get(k, 0) - a.get(k, 0) for k in set(a) | set(b)}
        verbs = {k.split(".", 1)[1]: round(v * per_min, 1) for k, v in sorted(d.items()) if k.startswith("requests.") and v}
        return {"seconds": round(t1 - t0, 1), "requests": int(sum(v for k, v in d.items() if k.startswith("requests."))),
                "requestsPerMinute": round(sum(v for k, v in d.items() if k.startswith("requests.")) * per_min, 1),
                "byVerbPerMinute": verbs, "reconcilesPerMinute": round(d.get("reconciles", 0) * per_min, 1),
                "cpuSecondsPerMinute": round(d.get("cpuSeconds", 0) * per_min, 2)}

    def stop(self) -> None:
        self.stop_event.set()
        self.join(10)


# ---------------------------------------------------------------- set-up
def training_python() -> str:
    python = os.environ.get("DRAFTER_TRAINING_PYTHON") or subprocess.run(
        [str(REPO / ".ci" / "training-env")], check=True, capture_output=True, text=True, timeout=1800).stdout.strip()
    if not os.access(python, os.X_OK):
        raise BenchError(f"no training python at {python!r}")
    return python


def import_seconds(python: str) -> float:
    """What a stage pays before its framework does anything: a python importing torch and transformers
    (measured once here, warm page cache; the stage runner imports these and more)."""
    t0 = time.monotonic()
    subprocess.run([python, "-c", "import torch, transformers"], check=True, capture_output=True, timeout=300,
                   env={**os.environ, "TRANSFORMERS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"})
    return round(time.monotonic() - t0, 2)


def prepare_namespace(cluster, namespace: str, name: str, python: str, args) -> Path:
    from drafter_testbed.launch import EMULATOR_CONFIGMAP, EMULATOR_ENV_PREFIX
    from drafter_testbed.volumes import static_claim

    cluster.kubectl("create", "namespace", namespace)
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": EMULATOR_CONFIGMAP, "namespace": namespace},
          "data": {f"{EMULATOR_ENV_PREFIX}TIME_SCALE": str(args.time_scale),
                   f"{EMULATOR_ENV_PREFIX}STARTUP_SECONDS": str(args.engine_startup_seconds)}}
    # The local cluster runs no provisioner: the hidden-state claim the operator creates binds to this volume.
    hidden = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"{namespace}-{name}-hs"},
              "spec": {"capacity": {"storage": "2Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "",
                       "persistentVolumeReclaimPolicy": "Delete",
                       "hostPath": {"path": f"/tmp/bench-training-hs/{namespace}"},
                       "claimRef": {"namespace": namespace, "name": f"{name}-hidden-states"}}}
    objects = [*static_claim(namespace, "models", f"/tmp/bench-training-models/{namespace}"), cm, hidden]
    cluster.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in objects))
    # The process runner maps a claim to <state dir>/claims/<namespace>/<claim>: write the target there.
    root = Path(os.environ["DRAFTER_STATE_DIR"]) / "claims" / namespace / "models"
    env = {**os.environ, "PYTHONPATH": str(REPO / "operator"), "HF_HUB_OFFLINE": "1"}
    for argv in (["target", str(root / "tiny-target")],
                 ["dataset", str(root / "chats.jsonl"), "--conversations", str(args.conversations)]):
        subprocess.run([python, "-m", "drafter_testbed.tiny_target", *argv], env=env, check=True,
                       capture_output=True, timeout=300)
    (root / "drafters").mkdir(exist_ok=True)  # Export writes only into an existing parent (docs/training.md)
    return root


def manifest(name: str, framework: str, args) -> dict:
    data = {"dataset": "/models/chats.jsonl", "numSamples": args.conversations, "maxTokens": 256}
    if framework == "specforge":
        data["chatTemplate"] = "qwen"
    else:
        data["generation"] = {"engine": "vllm"}
    return {
        "apiVersion": "drafter.dev/v1alpha1", "kind": "DrafterTraining", "metadata": {"name": name},
        "spec": {
            "target": {"model": "/models/tiny-target", "tensorParallelSize": 1},
            "framework": framework,
            "storage": {"modelClaim": "models", "mountPath": "/models"},
            "data": data,
            "hiddenStates": {"layers": TINY_LAYERS, "storage": {"size": "1Gi"}},
            "train": {"epochs": args.epochs, "learningRate": "1e-4", "batchSize": 1, "maxLength": 512,
                      "draftVocabSize": 256},
            "output": {"path": f"/models/drafters/{name}"},
            "resources": {"gpus": 1, "requests": {"cpu": "100m", "memory": "256Mi"}},
            "placement": {"gpuProduct": GPU_PRODUCT, "nodeSelector": {"drafter.dev/node-runtime": "process"}},
            "env": CPU_ENV,
        },
    }


# ---------------------------------------------------------------- one run
def _first(events, test) -> float | None:
    return next((t for t, _type, obj in events if test(obj)), None)


def _condition(obj: dict, kind: str) -> dict:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == kind), {})


def _iso_seconds(a: str | None, b: str | None) -> float | None:
    from datetime import datetime

    if not a or not b:
        return None
    parse = lambda s: datetime.fromisoformat(s.replace("Z", "+00:00"))  # noqa: E731
    return (parse(b) - parse(a)).total_seconds()


def _r(x: float | None, digits: int = 1) -> float | None:
    return None if x is None else round(x, digits)


def run_training(cluster, operator: Operator, python: str, framework: str, args, run_id: str) -> dict:
    from kubernetes import client, config

    name = "sf" if framework == "specforge" else "spec"
    namespace = f"bench-train-{name}-{run_id}"  # the training name differs per framework
    log(f"{framework}: namespace {namespace}, {args.conversations} conversations, {args.epochs} epoch(s)")
    prepare_namespace(cluster, namespace, name, python, args)
    api_client = config.new_client_from_config(config_file=cluster.kubeconfig)
    core, batch, apps = client.CoreV1Api(api_client), client.BatchV1Api(api_client), client.AppsV1Api(api_client)
    custom = client.CustomObjectsApi(api_client)
    procs = ProcSampler(args.sample_seconds)

    def on_pod(_t: float, pod: dict) -> None:
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            cid = status.get("containerID") or ""
            if cid.startswith("drafter-process://") and "running" in (status.get("state") or {}):
                procs.track(pod["metadata"]["name"], int(cid.rsplit("/", 1)[1]))

    watches = {
        "jobs": Events(api_client, batch.list_namespaced_job, namespace),
        "pods": Events(api_client, core.list_namespaced_pod, namespace, on_event=on_pod),
        "deployments": Events(api_client, apps.list_namespaced_deployment, namespace),
        "claims": Events(api_client, core.list_namespaced_persistent_volume_claim, namespace),
        "training": Events(api_client, custom.list_namespaced_custom_object, "drafter.dev", "v1alpha1", namespace,
                           "draftertrainings"),
    }
    metrics = MetricsSampler(operator.metrics_port)
    threads = [*watches.values(), procs, metrics]
    for thread in threads:
        thread.start()
    try:
        time.sleep(2)  # a metrics sample and open watches before t0
        body = manifest(name, framework, args)
        t0 = now()
        cluster.kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(body))  # YAML would make 1e-4 a number
        final = _wait(watches["training"], name, args.timeout, cluster, namespace)
        t_done = now()
        time.sleep(2.5)  # the process sampler sees the last stage's process gone; a metrics sample after the end
    finally:
        for thread in threads:
            thread.stop()
        api_client.close()
    result = _analyse(framework, namespace, name, t0, t_done, final, watches, procs, metrics)
    result["conversations"], result["epochs"] = args.conversations, args.epochs
    if not args.keep:
        cluster.kubectl("-n", namespace, "delete", "draftertrainings.drafter.dev", name, "--wait=true",
                        "--timeout=120s", check=False)
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        cluster.kubectl("delete", "pv", f"{namespace}-models", f"{namespace}-{name}-hs", "--wait=false",
                        "--ignore-not-found", check=False)
    return result


def _wait(watch: Events, name: str, timeout: float, cluster, namespace: str) -> dict:
    deadline = now() + timeout
    last_stage = None
    while now() < deadline:
        events = [e for e in watch.events if e[2]["metadata"]["name"] == name]
        if events:
            obj = events[-1][2]
            stage = (obj.get("status") or {}).get("stage")
            if stage != last_stage:
                log(f"  stage {stage}")
                last_stage = stage
            if stage == "Succeeded":
                return obj
            if stage == "Failed":
                logs = cluster.kubectl("-n", namespace, "logs", "-l", f"{TRAINING_LABEL}={name}", "--tail=40",
                                       "--prefix", check=False)
                raise BenchError(f"DrafterTraining {namespace}/{name} failed: {_condition(obj, 'Ready')}\n{logs}")
        time.sleep(0.5)
    raise BenchError(f"DrafterTraining {namespace}/{name} not Succeeded within {timeout:.0f}s (stage {last_stage})")


def _analyse(framework, namespace, name, t0, t_done, final, watches, procs: ProcSampler, metrics: MetricsSampler) -> dict:
    jobs, pods, deps = watches["jobs"].by_name(), watches["pods"].by_name(), watches["deployments"].by_name()
    status = final.get("status") or {}
    artifacts: dict[str, list] = {}
    for artifact in status.get("artifacts") or []:
        artifacts.setdefault(artifact["stage"], []).append({"path": artifact["path"], "sizeBytes": artifact.get("sizeBytes")})
    by_pod = {p["pod"]: (pid, p) for pid, p in procs.procs.items()}
    stages, previous_complete = [], None
    for stage in STAGES:
        job_name = next((n for n, ev in jobs.items() if (ev[0][2]["metadata"].get("labels") or {}).get(STAGE_LABEL) == stage), None)
        if job_name is None:
            continue
        events = jobs[job_name]
        created = events[0][0]
        complete = _first(events, lambda o: _condition(o, "Complete").get("status") == "True")
        job_status = events[-1][2].get("status") or {}
        pod_name = next((n for n, ev in pods.items() if (ev[0][2]["metadata"].get("labels") or {}).get("job-name") == job_name), None)
        row: dict = {"stage": stage, "job": job_name, "pod": pod_name,
                     "wallSeconds": _r(complete - created if complete else None),
                     "jobApiSeconds": _iso_seconds(job_status.get("startTime"), job_status.get("completionTime")),
                     "handoffSeconds": _r(created - (previous_complete or t0)),
                     "handoffFrom": "previous Job Complete" if previous_complete else "kubectl apply"}
        if pod_name:
            pev = pods[pod_name]
            pod_created = pev[0][0]
            scheduled = _first(pev, lambda o: (o.get("spec") or {}).get("nodeName"))
            last = next((o for _t, _ty, o in reversed(pev) if any(
                "terminated" in (s.get("state") or {}) for s in (o.get("status") or {}).get("containerStatuses") or [])), pev[-1][2])
            term = next((s["state"]["terminated"] for s in (last.get("status") or {}).get("containerStatuses") or []
                         if "terminated" in (s.get("state") or {})), {})
            row["containerApiSeconds"] = _iso_seconds(term.get("startedAt"), term.get("finishedAt"))
            pid, proc = by_pod.get(pod_name, (None, None))
            overhead: dict = {"jobToPod": _r(pod_created - created, 2),
                              "podToScheduled": _r(scheduled - pod_created, 2) if scheduled else None}
            if proc and proc["start"] and proc["end"]:
                row["runSeconds"] = _r(proc["end"] - proc["start"])
                row["runSource"] = f"/proc pid {pid}"
                overhead["scheduledToProcess"] = _r(proc["start"] - scheduled, 2) if scheduled else None
                overhead["processGoneToJobComplete"] = _r(complete - proc["end"], 2) if complete else None
                row["peakMemMiB"] = round(max(proc["peakRss"], proc["peakHwm"]) / 2**20)
                row["peakPssSampledMiB"] = round(proc["peakRss"] / 2**20)
                row["largestProcessHwmMiB"] = round(proc["peakHwm"] / 2**20)
                row["rssSamples"] = proc["samples"]
            else:  # the process was not caught while running: the API's whole seconds instead
                row["runSeconds"], row["runSource"] = row["containerApiSeconds"], "container startedAt/finishedAt"
            row["overheadSeconds"] = _r(row["wallSeconds"] - row["runSeconds"]) \
                if row["wallSeconds"] is not None and row["runSeconds"] is not None else None
            row["overhead"] = overhead
        row["artifacts"] = artifacts.get(stage, [])
        row["operator"] = metrics.window(created, complete) if complete else None
        if stage == "Generate":
            engine = next((n for n, ev in deps.items()
                           if (ev[0][2]["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == ENGINE_COMPONENT), None)
            if engine:
                dev = deps[engine]
                ready = _first(dev, lambda o: ((o.get("status") or {}).get("readyReplicas") or 0) >= 1)
                engine_pod = next((n for n, ev in pods.items() if (ev[0][2]["metadata"].get("labels") or {}).get(
                    "app.kubernetes.io/component") == ENGINE_COMPONENT), None)
                _pid, eproc = by_pod.get(engine_pod, (None, None))
                row["engine"] = {"deployment": engine, "applyToCreated": _r(dev[0][0] - t0),
                                 "createdToReady": _r(ready - dev[0][0]) if ready else None,
                                 "readyToGenerateJob": _r(created - ready) if ready else None,
                                 "peakMemMiB": round(max(eproc["peakRss"], eproc["peakHwm"]) / 2**20) if eproc else None}
                # The Generate stage's wall clock from the engine's creation (what the user waits for).
                row["wallWithEngineSeconds"] = _r(complete - dev[0][0]) if complete else None
                row["handoffSeconds"] = None  # the Job waits for the engine, reported above
        stages.append(row)
        previous_complete = complete or previous_complete
    hidden = status.get("hiddenStates") or {}
    # The first stage pod cannot be scheduled before the hidden-state claim the operator creates is bound.
    claim = watches["claims"].by_name().get(f"{name}-hidden-states") or []
    bound = _first(claim, lambda o: (o.get("status") or {}).get("phase") == "Bound")
    claim_times = {"applyToCreated": _r(claim[0][0] - t0, 2) if claim else None,
                   "createdToBound": _r(bound - claim[0][0], 2) if claim and bound else None}
    return {
        "framework": framework, "namespace": namespace, "training": name,
        "totalSeconds": _r(t_done - t0), "stages": stages,
        "hiddenStates": {k: hidden.get(k) for k in ("bytesWritten", "estimatedBytes", "deleted")},
        "hiddenStateClaim": claim_times,
        # status.hiddenStates.bytesWritten as reported while Extract ran (the last status may drop it).
        "bytesWrittenSeenMax": max((((o.get("status") or {}).get("hiddenStates") or {}).get("bytesWritten") or 0
                                    for _t, _ty, o in watches["training"].events), default=0) or None,
        "operatorWholeRun": metrics.window(t0, t_done),
        "watchErrors": [e for w in watches.values() for e in w.errors][:5],
    }


# ---------------------------------------------------------------- main
def bench(args, cluster, holder: list, result: dict) -> None:
    result.update({"machine": {"cpus": os.cpu_count(), "loadavgAtStart": os.getloadavg(),
                               "memTotalGiB": round(PAGE * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)},
                   "stateDir": os.environ["DRAFTER_STATE_DIR"], "portBase": os.environ["DRAFTER_PORT_BASE"],
                   "timeScale": args.time_scale, "engineStartupSeconds": args.engine_startup_seconds,
                   "sampleSeconds": args.sample_seconds, "runs": []})
    cluster.up()
    python = training_python()
    drafter_operator("cluster", "training-env", python)
    result["importTorchTransformersSeconds"] = import_seconds(python)
    have = cluster.get_json("nodes", "-l", f"nvidia.com/gpu.product={GPU_PRODUCT},drafter.dev/node-runtime=process")["items"]
    if not have:
        log(f"adding a process node (8 x {GPU_PRODUCT})")
        drafter_operator("cluster", "add-nodes", "--count", "1", "--runtime", "process", "--gpus", "8",
                         "--gpu-product", GPU_PRODUCT, "--name-prefix", NODE_PREFIX, timeout=args.timeout)
    harness.install_crds(cluster.kubectl)
    log_path = Path(args.operator_log or tempfile.mkstemp(prefix="training-operator-", suffix=".log")[1])
    operator = Operator(cluster, log_path, None)
    holder.append(operator)
    log(f"starting the operator (DRAFTER_TRAINING_CPU=1, metrics 127.0.0.1:{operator.metrics_port}, log {log_path})")
    operator.start()
    result["operatorLog"] = str(log_path)
    idle = MetricsSampler(operator.metrics_port)
    idle.start()
    time.sleep(args.idle_seconds)
    idle.stop()
    result["operatorIdle"] = idle.window(idle.samples[0][0], idle.samples[-1][0]) if len(idle.samples) > 1 else None
    run_id = time.strftime("%H%M%S")
    for framework in args.frameworks.split(","):
        run = run_training(cluster, operator, python, framework, args, run_id)
        result["runs"].append(run)
        print(json.dumps(run), flush=True)  # one JSON line per run
    result["machine"]["loadavgAtEnd"] = os.getloadavg()


def _mb(n) -> str:
    return "-" if n is None else f"{n / 1e6:.2f} MB"


def _s(x) -> str:
    return "-" if x is None else f"{x:.1f}"


def report(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=240)  # the table is wide; a pipe would otherwise get 80 columns
    m = result.get("machine", {})
    console.print(f"machine: {m.get('cpus')} CPUs, {m.get('memTotalGiB')} GiB; load average at start "
                  f"{m.get('loadavgAtStart', [0])[0]:.2f}; python importing torch + transformers: "
                  f"{result.get('importTorchTransformersSeconds')} s; engine emulator time scale "
                  f"{result.get('timeScale')}, start-up {result.get('engineStartupSeconds')} s")
    idle = result.get("operatorIdle") or {}
    console.print(f"operator idle (no training): {idle.get('requestsPerMinute')} API requests/min, "
                  f"{idle.get('cpuSecondsPerMinute')} CPU s/min")
    for run in result.get("runs", []):
        table = Table(title=f"{run['framework']}: {run['conversations']} conversations, {run['epochs']} epoch(s); "
                            f"kubectl apply -> Succeeded {run['totalSeconds']} s")
        for column in ("stage", "hand-off s", "wall s", "run s", "overhead s", "job->pod / sched / ->proc / ->complete",
                       "peak mem", "artifacts", "operator req/min", "op. CPU s/min"):
            table.add_column(column, justify="right" if column not in ("stage", "artifacts") else "left")
        for row in run["stages"]:
            o = row.get("overhead") or {}
            op = row.get("operator") or {}
            stage = row["stage"]
            if row.get("engine"):
                e = row["engine"]
                stage += f"\n(engine: created {_s(e['applyToCreated'])} s after apply, Ready {_s(e['createdToReady'])} s " \
                         f"later; Job {_s(e['readyToGenerateJob'])} s after Ready; wall incl. engine {_s(row.get('wallWithEngineSeconds'))} s)"
            table.add_row(
                stage, _s(row.get("handoffSeconds")), _s(row.get("wallSeconds")), _s(row.get("runSeconds")),
                _s(row.get("overheadSeconds")),
                " / ".join(_s(o.get(k)) if o.get(k) is None else f"{o[k]:.2f}" for k in
                           ("jobToPod", "podToScheduled", "scheduledToProcess", "processGoneToJobComplete")),
                f"{row['peakMemMiB']} MiB" if row.get("peakMemMiB") else "-",
                ", ".join(f"{Path(a['path']).name} {_mb(a['sizeBytes'])}" for a in row.get("artifacts") or []) or "-",
                _s(op.get("requestsPerMinute")), _s(op.get("cpuSecondsPerMinute")))
        console.print(table)
        hs = run.get("hiddenStates") or {}
        whole = run.get("operatorWholeRun") or {}
        console.print(f"  hidden states: bytesWritten {hs.get('bytesWritten')}, estimatedBytes {hs.get('estimatedBytes')}, "
                      f"claim deleted {hs.get('deleted')}; claim {run.get('hiddenStateClaim')}; operator over the whole run: {whole.get('requestsPerMinute')} "
                      f"API requests/min {whole.get('byVerbPerMinute')}, {whole.get('reconcilesPerMinute')} reconciles/min, "
                      f"{whole.get('cpuSecondsPerMinute')} CPU s/min")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frameworks", default="specforge,speculators")
    parser.add_argument("--conversations", type=int, default=24)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--time-scale", type=float, default=0.1, help="the engine emulator's (Generate's engine)")
    parser.add_argument("--engine-startup-seconds", type=float, default=2.0, help="the engine emulator's start-up")
    parser.add_argument("--sample-seconds", type=float, default=0.25, help="/proc sampling period for RSS and exits")
    parser.add_argument("--idle-seconds", type=float, default=15.0, help="operator idle window before the runs")
    parser.add_argument("--timeout", type=float, default=1200)
    parser.add_argument("--operator-log")
    parser.add_argument("--keep", action="store_true", help="keep the cluster and the trainings")
    parser.add_argument("--json", help="write the whole result here")
    args = parser.parse_args()
    for framework in args.frameworks.split(","):
        if framework not in ("specforge", "speculators"):
            parser.error(f"unknown framework {framework!r}")
    return run_on_own_cluster(args, lambda cluster, holder, result: bench(args, cluster, holder, result), report)


if __name__ == "__main__":
    exit_with(main)
