"""DrafterTraining and DrafterBenchmark in the simulated world: the real `TrainingReconciler` and
`BenchmarkReconciler` (observe, decide, apply) against the fake apiserver, with a Job controller, a
kubelet whose pods use claims, the claim-protection controller and the garbage collector.

The operator reads the apiserver directly (as its handlers do), so a stale view here is time passing
between its reads: before each of its requests the world runs whatever falls due meanwhile (a Job ends,
a pod goes, the user edits the spec), slowly at times. Watch events arrive late or are lost; the
object loops tick as `handlers._tick_while_unfinished` does (every `TICK` seconds of the simulation,
not 3-5 s: ticks only add reconciles); the operator can die at any request and restarts with a
re-list (an event for every object). A serving `kimi` is Ready for the benchmarks and loads
`SERVED_DRAFTER`, which no training may overwrite.

The serving's spec.retraining (one scenario in eight) and the real `RetrainingReconciler` beside them come from
batch_retraining.py, which says what of the serving controller it plays.

Production's hazards come from batch_hazards.py: disruptions (drains, preemptions, evictions) of stage pods,
Kueue preempting an admitted stage, a hung stage and the Jobs' deadlines, Generate's engine, the administrator's
allow-list changing under running trainings, intruders taking a child's name first, and Train's checkpoints,
resumed through the real stage runner's decision.

`BatchWorld(seed, setup)` and `generate(seed, count, days)` follow world.py and operations.py, so the
runner, the shrinker and bench/simulate.py run these scenarios as they run the serving's
(`family="batch"`).
"""

from __future__ import annotations

import copy
import json
import random
import string

from drafter_operator.constants import RETRAINING_LABEL
from drafter_operator.controllers import object_loops
from drafter_operator.controllers.benchmark.apply import BenchmarkReconciler
from drafter_operator.controllers.retraining.apply import RetrainingReconciler
from drafter_operator.controllers.training.apply import TrainingReconciler
from drafter_operator.resources.benchmark_job import BENCHMARK_LABEL
from drafter_operator.resources.labels import REVISION_LABEL, SERVING_LABEL
from drafter_operator.resources.queueing import QUEUE_LABEL
from drafter_operator.resources.training import TRAINING_LABEL
from drafter_operator.resources.training_job import STAGE_LABEL

from drafter_testbed.simulation.apiserver import PVC_PROTECTION, FakeApiserver, OperatorCrash
from drafter_testbed.simulation.batch_hazards import POLICIES, SIM_DEADLINES, TRAINER, BatchHazards
from drafter_testbed.simulation.batch_invariants import GENERATION
from drafter_testbed.simulation.batch_retraining import (RETRAINING_KINDS, RETRAINING_SPLIT, RETRAINING_STAGE_MAX,
                                                         RetrainingWorld, draw_retraining, draw_retraining_op,
                                                         with_retraining)
from drafter_testbed.simulation.clock import Clock
from drafter_testbed.simulation.cluster import owner_uid
from drafter_testbed.simulation.fault_operations import FaultOperations
from drafter_testbed.simulation.operations import SEED_SPEC, serving_name, timeline

NS = "team"
CUSTOM = f"/apis/drafter.dev/v1alpha1/namespaces/{NS}"
TRAININGS, BENCHMARKS, SERVINGS = f"{CUSTOM}/draftertrainings", f"{CUSTOM}/drafterbenchmarks", f"{CUSTOM}/drafterservings"
JOBS = f"/apis/batch/v1/namespaces/{NS}/jobs"
CORE = f"/api/v1/namespaces/{NS}"
PODS, CLAIMS, CONFIGMAPS, SERVICES = f"{CORE}/pods", f"{CORE}/persistentvolumeclaims", f"{CORE}/configmaps", f"{CORE}/services"
SERVING = "kimi"
TARGET = "/models/Kimi-K2.5"
SERVED_DRAFTER = SEED_SPEC["drafter"]["model"]  # /models/drafters/kimi-k25-eagle3: the serving loads it
USER_CLAIM = "hidden-states-by-hand"  # a claim the user made and names by claimName: never deleted
TICK = 60.0
FINISHED_RESYNC = 300.0  # handlers.FINISHED_RESYNC_SECONDS (handlers.py imports kopf)
WATCH_DELAY = 0.3
GRACE = 30.0  # terminationGracePeriodSeconds of a stage pod (the default)
DAY = 86400.0

#: Output paths a user may write: fresh directories, and the mistakes of issue 22 (the target, the drafter
#: a serving loads, a parent of it, paths under it, dot-dot, trailing and double slashes).
GOOD_OUTPUTS = ["/models/drafters/new-{slot}", "/models/drafters/new-{slot}-v2", "/models/team-{slot}/drafter"]
BAD_OUTPUTS = [TARGET, SERVED_DRAFTER, SERVED_DRAFTER + "/v2", "/models/drafters", "/models/..", "/models/../etc/x",
               "/models/drafters/x/../../Kimi-K2.5", "/models/drafters/new/", "/models//drafters/new", "/models/."]
BASES = [None, "AQ-MedAI/Kimi-K2-Instruct-eagle3", SERVED_DRAFTER]
QUEUE = "gpus"  # the Kueue LocalQueue a queued training names; its ClusterQueue holds one stage Job at a time
WORKLOADS = f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{NS}/workloads"
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
#: spec.image a user may set: unset (the operator's trainer), the internal registry's, one outside the allow-list.
IMAGES = [None, None, "registry.internal/trainer:2", "docker.io/someone/trainer:latest"]


# ---------------------------------------------------------------------------------------------- specs
def training_spec(config: dict, slot: int) -> dict:
    output = config["output"]
    path = GOOD_OUTPUTS[output].format(slot=slot) if output < len(GOOD_OUTPUTS) else \
        BAD_OUTPUTS[(output - len(GOOD_OUTPUTS)) % len(BAD_OUTPUTS)]
    storage = {"claimName": USER_CLAIM} if config["user_claim"] else {"size": "1Ti", "retain": config["retain"]}
    spec = {"target": {"model": TARGET, "tensorParallelSize": 8}, "framework": "specforge",
            "storage": {"modelClaim": "models", "mountPath": "/models"},
            "data": {"dataset": "/models/datasets/prompts.jsonl", "numSamples": config["samples"], "maxTokens": 1024,
                     "chatTemplate": "kimi-k2-instruct"},
            "hiddenStates": {"storage": storage}, "train": {"epochs": config["epochs"], "maxLength": 2048},
            "output": {"path": path}}
    if BASES[config["base"]]:
        spec["baseDrafter"] = BASES[config["base"]]
    framework = config.get("framework", "specforge")
    spec["framework"] = framework
    if config.get("nodes", 1) > 1:  # Train across them; Extract too with speculators
        spec["resources"] = {"nodes": config["nodes"]}
    if config.get("queued"):
        spec["queueName"] = QUEUE
    if config.get("generation"):  # the target regenerates the answers: Generate's engine holds GPUs meanwhile
        spec["data"]["generation"] = {"engine": "sglang"}
    if IMAGES[config.get("image", 0)]:
        spec["image"] = IMAGES[config["image"]]
    spec["limits"] = {"deadlines": dict(SIM_DEADLINES)}
    return spec


def benchmark_spec(config: dict) -> dict:
    return {"servingRef": {"name": SERVING}, "numPrompts": config["prompts"], "maxTokens": 256, "concurrency": 1,
            "temperature": "0", "repetitions": 1, "timeout": config["timeout"]}


TRAINING_FIELDS = {"output": list(range(len(GOOD_OUTPUTS))) * 3 + list(range(len(GOOD_OUTPUTS), len(GOOD_OUTPUTS) + len(BAD_OUTPUTS))),
                   "user_claim": [False, False, True], "retain": [False, False, True], "samples": [1000, 10000],
                   "epochs": [1, 3, 5], "base": [0, 1, 2], "framework": ["specforge", "speculators"],
                   "nodes": [1, 1, 2, 4], "queued": [False, True, True], "generation": [False, False, True],
                   "image": list(range(len(IMAGES)))}
BENCHMARK_FIELDS = {"prompts": [5, 20, 100], "timeout": ["10m", "30m"]}


def draw_config(rng: random.Random, fields: dict) -> dict:
    return {f: rng.choice(v) for f, v in fields.items()}


# ---------------------------------------------------------------------------------------------- the world
class BatchWorld(FaultOperations, BatchHazards, RetrainingWorld):
    def __init__(self, seed: int, setup: dict):
        from drafter_testbed.simulation.batch_invariants import BatchTracks
        self.seed = seed
        self.rng = random.Random(seed)
        self.clock = Clock()
        self.setup = setup
        self.trainings = [dict(c) for c in setup["trainings"]]  # per slot: name and config
        self.benchmarks = [dict(c) for c in setup["benchmarks"]]
        self.track = BatchTracks(self)
        self.api = FakeApiserver(self.clock, lambda: self.rng, self.on_write)
        self.api.logs = self.pod_log
        # A running pod the operator deletes runs on (with its claims) until its grace period ends.
        self.api.graceful = lambda pod: bool(pod["spec"].get("nodeName")) and \
            (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        self.slow = False  # requests take seconds (much changes between the operator's reads)
        self.watch_loss = 0.0  # chance that a watch event never arrives
        self.pending_restart_after = 30.0
        self.gc_due = self.sweep_due = False
        self.events = 0
        self.pod_seq = 0
        self.init_hazards()
        self.init_retraining()
        self.operator = BatchOperator(self)
        self._make_serving()
        self.operator.start()

    # ------------------------------------------------------------------ fixtures
    def _make_serving(self) -> None:
        spec = with_retraining(copy.deepcopy(SEED_SPEC), self.retraining)
        self.api.put("user", f"{SERVINGS}/{SERVING}", {"apiVersion": "drafter.dev/v1alpha1", "kind": "DrafterServing",
                                                       "metadata": {"name": SERVING, "namespace": NS}, "spec": spec})
        serving = self.api.store[f"{SERVINGS}/{SERVING}"]
        self.api.put("serving-controller", f"{SERVINGS}/{SERVING}", {**serving, "status": {
            "activeRevision": "r1", "revisions": [{"name": "r1", "engine": spec["engine"], "drafterSpec": spec["drafter"]}],
            "conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "serving"}]}})
        labels = {SERVING_LABEL: SERVING, REVISION_LABEL: "r1"}
        self.api.put("user", f"{SERVICES}/{SERVING}", {"apiVersion": "v1", "kind": "Service",
                                                       "metadata": {"name": SERVING, "namespace": NS, "labels": {SERVING_LABEL: SERVING}},
                                                       "spec": {"clusterIP": "10.96.0.10", "ports": [{"port": 8000}],
                                                                "selector": labels}})
        self.api.put("kubelet", f"{PODS}/{SERVING}-r1-0", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{SERVING}-r1-0", "namespace": NS, "labels": labels},
            "spec": {"nodeName": "node-0", "containers": [{"name": "engine"}]},
            "status": {"phase": "Running", "podIP": "10.0.0.9", "conditions": [{"type": "Ready", "status": "True"}]}})
        self.api.put("user", f"{CLAIMS}/{USER_CLAIM}", {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                                       "metadata": {"name": USER_CLAIM, "namespace": NS},
                                                       "spec": {"accessModes": ["ReadWriteMany"],  # shared: any nodes
                                                                "resources": {"requests": {"storage": "2Ti"}}}})
        self.track.user_claims.add(self.api.store[f"{CLAIMS}/{USER_CLAIM}"]["metadata"]["uid"])

    # ------------------------------------------------------------------ the store's change feed
    def on_write(self, actor, plural, key, old, new, ok, detail) -> None:
        self.track.on_write(actor, plural, key, old, new, ok, detail)
        if not ok:
            return
        if plural == "pods" and actor == "operator" and new is not None and new["metadata"].get("deletionTimestamp") \
                and not old["metadata"].get("deletionTimestamp"):
            self.clock.after(self.rng.uniform(1, GRACE), self.pod_gone, key, new["metadata"]["uid"])
        if plural == "jobs" and new is not None and not new["spec"].get("suspend") and \
                (old is None or old["spec"].get("suspend")):
            self.clock.after(self.rng.uniform(0.5, 3.0), self.job_creates_pod, key, new["metadata"]["uid"])
            self.job_runs(key, new)
        if plural in ("deployments", "services") and actor == "operator":
            self.engine_written(plural, key, old, new)
        if plural == "drafterservings":
            self.serving_written(actor, old, new)
        elif plural == "draftertrainings":
            self.retraining_created(actor, old, new)
        if plural == "jobs" and QUEUE_LABEL in (((new or old)["metadata"].get("labels")) or {}):
            if old is None:
                self.kueue_sees(key, new)
            self.clock.after(self.rng.uniform(0.5, 5.0), self.kueue_admits)
        if new is None or (plural == "persistentvolumeclaims" and new["metadata"].get("deletionTimestamp")):
            self.schedule_gc()
            self.schedule_sweep()
        elif old is None and new["metadata"].get("ownerReferences"):
            self.schedule_gc()  # a dependent created after its owner went (a stale decision) goes too
        self.operator.on_write(plural, key, old, new)

    def schedule_gc(self) -> None:
        if not self.gc_due:
            self.gc_due = True
            self.clock.after(self.rng.uniform(1, 30), self.gc)

    def gc(self) -> None:
        self.gc_due = False
        removed = 0
        for key in self.api.orphans():
            if key.startswith(PODS + "/"):
                removed += self.delete_pod(key)
            else:
                self.api.remove("garbage-collector", key)
                removed += 1
        if removed:
            self.schedule_gc()

    def schedule_sweep(self) -> None:
        if not self.sweep_due:
            self.sweep_due = True
            self.clock.after(0.5, self.pvc_protection)

    def pvc_protection(self) -> None:
        """The claim-protection controller: a deleted claim goes once no scheduled pod names it."""
        self.sweep_due = False
        for key, claim in list(self.api.store.items()):
            if not key.startswith(CLAIMS + "/") or not claim["metadata"].get("deletionTimestamp"):
                continue
            if PVC_PROTECTION in (claim["metadata"].get("finalizers") or []) and \
                    not self.pods_naming(claim["metadata"]["name"], scheduled_only=True):
                rest = [f for f in claim["metadata"]["finalizers"] if f != PVC_PROTECTION]
                self.api.patch_as("pvc-protection-controller", key, {"metadata": {"finalizers": rest or None}})

    def pods_naming(self, claim: str, scheduled_only: bool = False, running_only: bool = False) -> list[str]:
        out = []
        for key, pod in self.api.store.items():
            if not key.startswith(PODS + "/") or (scheduled_only and not pod["spec"].get("nodeName")):
                continue
            if running_only and (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            if any((v.get("persistentVolumeClaim") or {}).get("claimName") == claim for v in pod["spec"].get("volumes") or []):
                out.append(key)
        return out

    # ------------------------------------------------------------------ Kueue (one stage Job of the queue at a time)
    def kueue_sees(self, key: str, job: dict) -> None:
        """Kueue's Workload for a queued Job: owned by it, waiting for quota until admitted."""
        meta = job["metadata"]
        self.api.put("kueue", f"{WORKLOADS}/job-{meta['name'][:40]}-{meta['uid'][-5:]}", {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": f"job-{meta['name'][:40]}-{meta['uid'][-5:]}", "namespace": NS,
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"],
                                              "uid": meta["uid"], "controller": True}]},
            "status": {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
                                       "message": "couldn't assign flavors to pod set main: insufficient unused "
                                                  "quota for nvidia.com/gpu in flavor gpu"}]}})

    def kueue_admits(self) -> None:
        """The ClusterQueue's GPU quota holds one stage Job: the oldest waiting one is admitted once none runs (and
        no other tenant's workload holds it: batch_hazards.op_preempt)."""
        if self.clock.t < self.kueue_blocked_until:
            return
        queued = sorted(((k, j) for k, j in self.api.store.items() if k.startswith(JOBS + "/")
                         and QUEUE_LABEL in (j["metadata"].get("labels") or {}) and not j["metadata"].get("deletionTimestamp")
                         and not (j.get("status") or {}).get("conditions")), key=lambda kj: int(kj[1]["metadata"]["uid"][4:]))
        if not queued or any(not j["spec"].get("suspend") for _, j in queued):
            return
        key, job = queued[0]
        workload = next((w for k, w in self.api.store.items() if k.startswith(WORKLOADS + "/")
                         and owner_uid(w) == job["metadata"]["uid"]), None)
        if workload is not None:
            self.api.put("kueue", f"{WORKLOADS}/{workload['metadata']['name']}", {**workload, "status": {"conditions": [
                {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "Quota reserved"}]}})
        self.api.put("kueue", key, {**job, "spec": {**job["spec"], "suspend": False}})

    # ------------------------------------------------------------------ Job controller and kubelet
    def job_creates_pod(self, key: str, uid: str) -> None:
        job = self.api.store.get(key)
        if job is None or job["metadata"]["uid"] != uid or job["spec"].get("suspend") or (job.get("status") or {}).get("conditions"):
            return  # a suspended Job makes no pods (Kueue resumes it)
        owned = [p for k, p in self.api.store.items() if k.startswith(PODS + "/") and owner_uid(p) == uid]
        if any(not p["metadata"].get("deletionTimestamp") for p in owned):
            return
        if owned:  # a resumed Job's pods from before its suspension are still stopping: new ones once they are gone
            self.clock.after(5.0, self.job_creates_pod, key, uid)
            return
        name = job["metadata"]["name"]
        indexed = job["spec"].get("completionMode") == "Indexed"
        if indexed and len(f"{name}-{job['spec']['completions'] - 1}") > 63:
            # The pods' hostname <job>-<index> is no DNS label: the apiserver refuses every pod, the Job never runs.
            self.track.report("names-fit", f"the Job controller cannot create the pods of {name}: hostname "
                                           f"{name}-{job['spec']['completions'] - 1} is over 63 characters")
            return
        for index in range(job["spec"]["completions"]) if indexed else (None,):
            self._job_pod(job, index)

    def _job_pod(self, job: dict, index: int | None) -> None:
        self.pod_seq += 1
        name, uid = job["metadata"]["name"], job["metadata"]["uid"]
        suffix = "".join(random.Random(f"{self.seed}/{self.pod_seq}").choice(string.ascii_lowercase) for _ in range(5))
        template = job["spec"]["template"]
        labels = {**((template.get("metadata") or {}).get("labels") or {}), "job-name": name,
                  "batch.kubernetes.io/job-name": name, "controller-uid": uid}
        spec = copy.deepcopy(template["spec"])
        annotations = {}
        if index is not None:
            spec["hostname"], annotations[INDEX_ANNOTATION] = f"{name}-{index}", str(index)
        pod_key = f"{PODS}/{name[:57]}-{suffix}" if index is None else f"{PODS}/{name[:54]}-{index}-{suffix}"
        self.api.put("job-controller", pod_key, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod_key.rsplit("/", 1)[1], "namespace": NS, "labels": labels, "annotations": annotations,
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid,
                                              "controller": True}]},
            "spec": spec, "status": {"phase": "Pending"}})
        self.clock.after(self.rng.uniform(1, 60), self.start_pod, pod_key, uid)

    def start_pod(self, key: str, job_uid: str) -> None:
        pod = self.api.store.get(key)
        if pod is None or pod["metadata"].get("deletionTimestamp") or pod["status"].get("phase") != "Pending":
            return
        for volume in pod["spec"].get("volumes") or []:
            claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
            config_map = (volume.get("configMap") or {}).get("name")
            obj = self.api.store.get(f"{CLAIMS}/{claim}") if claim else \
                self.api.store.get(f"{CONFIGMAPS}/{config_map}") if config_map else {"metadata": {}}
            if claim == "models":
                continue  # the model volume is always there
            if obj is None or obj["metadata"].get("deletionTimestamp"):
                self.clock.after(30.0, self.start_pod, key, job_uid)  # the kubelet waits for its volumes
                return
        self.api.put("kubelet", key, {**pod, "spec": {**pod["spec"], "nodeName": "node-0"},
                                      "status": {"phase": "Running", "containerStatuses": [
                                          {"name": c["name"], "state": {"running": {}}} for c in pod["spec"]["containers"]]}})
        if (pod["metadata"].get("labels") or {}).get(STAGE_LABEL) == "Train":
            self.train_starts(key, self.api.store[key])
        index = (pod["metadata"].get("annotations") or {}).get(INDEX_ANNOTATION)
        rng = random.Random(f"{self.seed}/{job_uid}" + (f"/{index}" if index else ""))
        longest = RETRAINING_STAGE_MAX if self.of_a_retraining(pod) else 2400
        self.clock.after(rng.uniform(30, longest), self.pod_ends, key, job_uid, rng.random() < (0.88 if index is None else 0.97))

    def pod_ends(self, key: str, job_uid: str, success: bool) -> None:
        pod = self.api.store.get(key)
        if pod is None or pod["status"].get("phase") != "Running" or key in self.hung or owner_uid(pod) != job_uid:
            return
        labels = pod["metadata"].get("labels") or {}
        if BENCHMARK_LABEL in labels:
            message = json.dumps({"tokensPerSecond": 91.5, "totalTokens": 25600, "totalSeconds": 280.0,
                                  "acceptanceRate": 0.6, "acceptanceLength": 3.1}) if success else "bench: connection refused"
        else:
            message = json.dumps({"outcome": "Succeeded", "outputs": self._outputs(pod)} if success else
                                 {"outcome": "Failed", "command": ["train"], "exitCode": 1, "tail": "CUDA out of memory"})
        code = 0 if success else 1
        self.api.put("kubelet", key, {**pod, "status": {"phase": "Succeeded" if success else "Failed", "containerStatuses": [
            {"name": c["name"], "state": {"terminated": {"exitCode": code, "message": message}}}
            for c in pod["spec"]["containers"]]}})
        if not success:
            self.track.job_cause(job_uid, "failed")
        self.clock.after(self.rng.uniform(0.1, 5.0), self.job_finishes, owner_uid(pod), success, key)
        self.schedule_sweep()

    def _outputs(self, pod: dict) -> dict:
        stage = (pod["metadata"].get("labels") or {}).get(STAGE_LABEL)
        if stage == "Export":
            spec = self.track.export_spec(pod)
            return {"drafter": {"path": ((spec or {}).get("output") or {}).get("path"), "sizeBytes": 1 << 30}}
        if stage == "Extract":
            return {"hiddenStates": {"path": "/work/hidden-states", "sizeBytes": 1 << 40}}
        return {}

    def job_finishes(self, uid: str, success: bool, pod_key: str | None = None) -> None:
        """The Job controller counts a pod that ended (the first failure it counts decides the Job's reason: a
        disrupted pod's is its podFailurePolicy's FailJob rule when the Job has one, else the backoff limit)."""
        key = self.api.by_uid.get(uid)
        job = self.api.store.get(key) if key else None
        if job is None or (job.get("status") or {}).get("conditions") or job["spec"].get("suspend"):
            return
        if job["spec"].get("completionMode") == "Indexed":
            pods = [(k, p) for k, p in self.api.store.items() if k.startswith(PODS + "/") and owner_uid(p) == uid]
            if success:
                done = sum((p.get("status") or {}).get("phase") == "Succeeded" for _, p in pods)
                self.api.put("job-controller", key, {**job, "status": {"succeeded": done}})
                if done < job["spec"]["completions"]:
                    return
            else:  # one pod failed the Job (Train's group; Extract's share, retries aside): the others are stopped
                for pod_key, pod in pods:
                    if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                        self.delete_pod(pod_key)
            job = self.api.store[key]
        kind = "Complete" if success else "Failed"
        reason, message = ("Completed", "") if success else ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
        pod = self.api.store.get(pod_key) if pod_key else None
        disrupted = pod is not None and any(c.get("type") == "DisruptionTarget" and c.get("status") == "True"
                                            for c in (pod.get("status") or {}).get("conditions") or [])
        fail_job = any(r.get("action") == "FailJob" and any(c.get("type") == "DisruptionTarget" for c in r.get("onPodConditions") or [])
                       for r in (job["spec"].get("podFailurePolicy") or {}).get("rules") or [])
        if not success and disrupted and fail_job:
            reason, message = "PodFailurePolicy", (f"Pod {NS}/{pod['metadata']['name']} has condition DisruptionTarget "
                                                   "matching FailJob rule at index 0")
        self.api.put("job-controller", key, {**job, "status": {"conditions": [
            {"type": kind, "status": "True", "reason": reason, "message": message}]}})

    def delete_pod(self, key: str) -> int:
        """A pod deleted gracefully: a running one keeps running (and its claims) for the grace period."""
        pod = self.api.store.get(key)
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            return 0
        finished = pod["status"].get("phase") in ("Succeeded", "Failed") or not pod["spec"].get("nodeName")
        self.api.put("garbage-collector", key, {**pod, "metadata": {**pod["metadata"], "deletionTimestamp": self.clock.iso()}})
        self.clock.after(0.5 if finished else self.rng.uniform(1, GRACE), self.pod_gone, key, pod["metadata"]["uid"])
        return 1

    def pod_gone(self, key: str, uid: str) -> None:
        pod = self.api.store.get(key)
        if pod is not None and pod["metadata"]["uid"] == uid:
            self.api._drop("kubelet", "pods", key)

    def pod_log(self, key: str):
        pod = self.api.store[key]
        labels = pod["metadata"].get("labels") or {}
        terminated = [((c.get("state") or {}).get("terminated") or {}) for c in (pod.get("status") or {}).get("containerStatuses") or []]
        if BENCHMARK_LABEL in labels:
            return {"tokensPerSecond": 91.5, "prompts": []} if terminated and terminated[0].get("exitCode") == 0 else None
        return self.train_log(key) if (pod.get("status") or {}).get("phase") == "Running" else None

    # ------------------------------------------------------------------ running (as World)
    def run_for(self, seconds: float, check) -> None:
        self.events += self.clock.run_for(seconds, check)

    def interleave(self) -> None:
        """Time passes during one of the operator's requests: what falls due meanwhile happens."""
        end = self.clock.t + (self.rng.uniform(0.5, 20.0) if self.slow else self.rng.uniform(0.001, 0.05))
        while True:
            due = self.clock.next_due()
            if due is None or due > end:
                break
            fn, args = self.clock.pop()
            fn(*args)
            self.events += 1
        self.clock.t = max(self.clock.t, end)

    # ------------------------------------------------------------------ operations
    def apply(self, op: dict) -> None:
        self.rng = random.Random(self.seed * 1_000_003 + op["salt"])
        getattr(self, "op_" + op["kind"])(op)

    def _training(self, slot: int) -> tuple[str, dict | None]:
        name = self.trainings[slot]["name"]
        return f"{TRAININGS}/{name}", self.api.store.get(f"{TRAININGS}/{name}")

    def _benchmark(self, slot: int) -> tuple[str, dict | None]:
        name = self.benchmarks[slot]["name"]
        return f"{BENCHMARKS}/{name}", self.api.store.get(f"{BENCHMARKS}/{name}")

    def op_create_training(self, op: dict) -> None:
        key, body = self._training(op["slot"])
        if body is None:
            t = self.trainings[op["slot"]]
            self.api.put("user", key, {"apiVersion": "drafter.dev/v1alpha1", "kind": "DrafterTraining",
                                       "metadata": {"name": t["name"], "namespace": NS},
                                       "spec": training_spec(t["config"], op["slot"])})

    def op_edit_training(self, op: dict) -> None:
        t = self.trainings[op["slot"]]
        t["config"] = {**t["config"], op["field"]: op["value"]}
        key, body = self._training(op["slot"])
        if body is not None:
            self.api.put("user", key, {**body, "spec": training_spec(t["config"], op["slot"])})
        if op["field"] == "image" and not (IMAGES[op["value"]] or TRAINER).startswith(POLICIES["open"].image_prefixes):
            # The user reads InvalidSpec and moves the image to the internal registry (op["fix"]: when).
            self.clock.after(op.get("fix", 900.0), self._image_fixed, op["slot"], op["value"])

    def _image_fixed(self, slot: int, value: int) -> None:
        if self.trainings[slot]["config"].get("image") == value:
            self.op_edit_training({"slot": slot, "field": "image", "value": IMAGES.index("registry.internal/trainer:2")})

    def op_delete_training(self, op: dict) -> None:
        key, body = self._training(op["slot"])
        if body is not None:
            self.track.owner_deleted(body["metadata"]["uid"])
            self.api.remove("user", key)
            if op.get("gap") is not None:
                self.clock.after(op["gap"], self.op_create_training, op)

    def op_create_benchmark(self, op: dict) -> None:
        key, body = self._benchmark(op["slot"])
        if body is None:
            b = self.benchmarks[op["slot"]]
            self.api.put("user", key, {"apiVersion": "drafter.dev/v1alpha1", "kind": "DrafterBenchmark",
                                       "metadata": {"name": b["name"], "namespace": NS}, "spec": benchmark_spec(b["config"])})

    def op_edit_benchmark(self, op: dict) -> None:
        b = self.benchmarks[op["slot"]]
        b["config"] = {**b["config"], op["field"]: op["value"]}
        key, body = self._benchmark(op["slot"])
        if body is not None:
            self.api.put("user", key, {**body, "spec": benchmark_spec(b["config"])})

    def op_delete_benchmark(self, op: dict) -> None:
        key, body = self._benchmark(op["slot"])
        if body is not None:
            self.track.owner_deleted(body["metadata"]["uid"])
            self.api.remove("user", key)
            if op.get("gap") is not None:
                self.clock.after(op["gap"], self.op_create_benchmark, op)

    def op_delete_finished_job(self, op: dict) -> None:
        """A tidy user deletes a stage Job whose success the training's status already records."""
        key, body = self._training(op["slot"])
        if body is None:
            return
        status = body.get("status") or {}
        done = {c["type"] for c in status.get("conditions") or [] if c.get("status") == "True"
                and c.get("observedGeneration") == body["metadata"].get("generation")}
        from drafter_operator.controllers.training.stages import STAGE_CONDITIONS
        for job_key, job in list(self.api.store.items()):
            stage = (job["metadata"].get("labels") or {}).get(STAGE_LABEL)
            found = GENERATION.search(job["metadata"]["name"])
            if job_key.startswith(JOBS + "/") and owner_uid(job) == body["metadata"]["uid"] and \
                    STAGE_CONDITIONS.get(stage) in done and found and int(found[1]) == body["metadata"]["generation"]:
                self.api.remove("user", job_key)

    def op_serving_ready(self, op: dict) -> None:
        serving = self.api.store[f"{SERVINGS}/{SERVING}"]
        cond = {"type": "Ready", "status": "True" if op["ready"] else "False", "reason": "Sim", "message": "sim"}
        others = [c for c in serving["status"].get("conditions") or [] if c.get("type") != "Ready"]
        self.api.put("serving-controller", f"{SERVINGS}/{SERVING}",
                     {**serving, "status": {**serving["status"], "conditions": [cond] + others}})

    def op_api_faults(self, op: dict) -> None:
        super().op_api_faults(op)
        self.track.disturbed_until(self.clock.t + op["for"])

    def op_admission(self, op: dict) -> None:
        plural, code = op["rule"], op["code"]
        message = f'admission webhook "policy.example.com" denied the request: {plural} writes are frozen (CF-{op["salt"]})'

        def rule(method, p, path, body, plural=plural):
            if plural == "status":
                return (code, message) if path.endswith("/status") else None
            return (code, message) if p == plural and method in ("POST", "PATCH", "DELETE") else None

        name = f"freeze-{op['salt']}"
        self.api.faults.admission[name] = rule
        self.track.disturbed_until(self.clock.t + op["for"])
        self.clock.after(op["for"], self.api.faults.admission.pop, name, None)

    def op_watch(self, op: dict) -> None:
        self.watch_loss, self.slow = op["loss"], op["slow"]
        self._watch_salt = op["salt"]
        self.track.disturbed_until(self.clock.t + op["for"])
        self.clock.after(op["for"], self._end_watch, op["salt"])

    def _end_watch(self, salt: int) -> None:
        if getattr(self, "_watch_salt", None) == salt:
            lost, self.watch_loss, self.slow = self.watch_loss, 0.0, False
            if lost and self.operator.up:
                self.operator.relist()  # the watch that lost events breaks and kopf lists again


# ---------------------------------------------------------------------------------------------- the operator
class BatchOperator:
    """The operator's training and benchmark handlers (handlers.py): a reconcile per watch event of the
    object, its Jobs, their pods (and a training's benchmarks), one at a time; the object loops."""

    def __init__(self, world: BatchWorld):
        self.world = world
        self.up = False
        self.incarnation = 0
        self.reconciles = 0
        self.errors: list[tuple[float, str]] = []
        self.events: list[tuple[float, str, str, str]] = []
        self.down_since: float | None = 0.0
        self.down_periods: list[tuple[float, float]] = []
        self.busy = False

    def start(self) -> None:
        w = self.world
        self.incarnation += 1
        self.up = True
        if self.down_since is not None:
            self.down_periods.append((self.down_since, w.clock.t))
            self.down_since = None
        self.reconcilers = {"t": TrainingReconciler(kube=w.api, image=TRAINER, clock=w.clock.now, tenant_policy=w.tenant_policy),
                            "b": BenchmarkReconciler(kube=w.api, image="ghcr.io/drafter-dev/operator:sim", clock=w.clock.now),
                            "r": RetrainingReconciler(kube=w.api, clock=w.clock.now, count_samples=w.count_samples)}
        self.wake_at: dict[tuple[str, str], float] = {}
        self.loops: dict[tuple[str, str], tuple[float, float]] = {}
        w.api.on_request = w.interleave
        self.relist()

    def relist(self) -> None:
        """A (re)list: an event for every object (the initial one, and kopf's after a broken watch)."""
        for key, obj in list(self.world.api.store.items()):
            self.deliver(key.split("/")[-2], obj, "ADDED", self.incarnation)

    def crash(self) -> None:
        self.up = False
        self.down_since = self.world.clock.t
        self.world.clock.after(self.world.pending_restart_after, self.start)

    def downtime_since(self, t: float) -> float:
        now = self.world.clock.t
        down = 0.0 if self.down_since is None else now - max(self.down_since, t)
        return down + sum(max(0.0, min(end, now) - max(start, t)) for start, end in self.down_periods)

    # ------------------------------------------------------------------ watch events
    def on_write(self, plural: str, key: str, old: dict | None, new: dict | None) -> None:
        if not self.up or plural not in ("draftertrainings", "drafterbenchmarks", "jobs", "pods", "drafterservings"):
            return
        if plural == "drafterservings" and not any(((o or {}).get("spec") or {}).get("retraining") for o in (old, new)):
            return  # kopf delivers it, and the retraining handler does nothing with it
        w = self.world
        if w.watch_loss and w.rng.random() < w.watch_loss:
            return  # this event never arrives
        w.clock.after(WATCH_DELAY + (w.rng.uniform(0, 5) if w.slow else 0.0), self.deliver, plural,
                      new if new is not None else old, "DELETED" if new is None else "MODIFIED", self.incarnation)

    def deliver(self, plural: str, obj: dict, event: str, incarnation: int) -> None:
        if not self.up or incarnation != self.incarnation:
            return
        meta = obj["metadata"]
        labels = meta.get("labels") or {}
        targets = []
        if plural in ("draftertrainings", "drafterbenchmarks"):
            kind = "t" if plural == "draftertrainings" else "b"
            running = event != "DELETED" and not meta.get("deletionTimestamp")
            unfinished = not object_loops.finished(obj.get("status"))
            self.follow((kind, meta["name"]), None if not running else TICK if unfinished else FINISHED_RESYNC)
            if event != "DELETED":
                targets.append((kind, meta["name"]))
            if plural == "drafterbenchmarks" and TRAINING_LABEL in labels:
                targets.append(("t", labels[TRAINING_LABEL]))
            if plural == "draftertrainings" and RETRAINING_LABEL in labels:
                targets.append(("r", labels[RETRAINING_LABEL]))  # handlers.retraining_training_event
        elif plural == "drafterservings":
            # handlers.retraining_serving_event: a loop every TICK while the serving has spec.retraining
            wanted = event != "DELETED" and not meta.get("deletionTimestamp") and bool((obj.get("spec") or {}).get("retraining"))
            self.follow(("r", meta["name"]), TICK if wanted else None)
            if wanted:
                targets.append(("r", meta["name"]))
        elif plural in ("jobs", "pods"):
            if BENCHMARK_LABEL in labels:
                targets.append(("b", labels[BENCHMARK_LABEL]))
            if TRAINING_LABEL in labels:
                targets.append(("t", labels[TRAINING_LABEL]))
        for target in targets:
            self.wake(target, 0.0)

    def follow(self, target: tuple[str, str], interval: float | None) -> None:
        """The object's loop ticks every `interval` seconds (None: no loop); as in handlers.py, a finished
        object's slow loop is another loop than its unfinished one."""
        if interval is not None and (self.loops.get(target) or (None, None))[1] != interval:
            token = (self.world.clock.t, interval)
            self.loops[target] = token
            self.world.clock.after(interval, self.tick, target, token, self.incarnation)
        elif interval is None:
            self.loops.pop(target, None)

    def tick(self, target: tuple[str, str], token: tuple[float, float], incarnation: int) -> None:
        if not self.up or incarnation != self.incarnation or self.loops.get(target) != token:
            return
        if self.busy:
            self.world.clock.after(0.05, self.tick, target, token, incarnation)
            return
        ok = self.reconcile(target)
        if ok is not None and self.loops.get(target) == token:
            self.world.clock.after(token[1] if ok else 60.0, self.tick, target, token, incarnation)

    def wake(self, target: tuple[str, str], delay: float) -> None:
        t = self.world.clock.t + delay
        if self.wake_at.get(target) is not None and self.wake_at[target] <= t:
            return
        self.wake_at[target] = t
        self.world.clock.at(t, self.run, target, self.incarnation, t)

    def run(self, target: tuple[str, str], incarnation: int, due: float) -> None:
        if not self.up or incarnation != self.incarnation or self.wake_at.get(target) != due:
            return
        del self.wake_at[target]
        if self.busy:  # another reconcile is in a request: this one waits its turn
            self.wake(target, 0.05)
            return
        self.reconcile(target)

    def reconcile(self, target: tuple[str, str]) -> bool | None:
        """True: done; False: it failed (kopf logs an event handler's error; the loop retries); None: crashed."""
        kind, name = target
        self.reconciles += 1
        self.busy = True
        try:
            self.reconcilers[kind].reconcile(NS, name, self.post_event)
            return True
        except OperatorCrash:
            self.crash()
            return None
        except Exception as exc:  # noqa: BLE001 - a handler's error ends that reconcile, not the operator
            self.errors.append((self.world.clock.t, repr(exc)))
            return False
        finally:
            self.busy = False

    def post_event(self, body: dict, kind: str, reason: str, message: str) -> None:
        self.events.append((self.world.clock.t, kind, reason, message))


# ---------------------------------------------------------------------------------------------- scenarios
KINDS = [("create_training", 10), ("edit_training", 14), ("delete_training", 6), ("create_benchmark", 8),
         ("edit_benchmark", 5), ("delete_benchmark", 4), ("delete_finished_job", 4), ("serving_ready", 3),
         ("wait", 10), ("crash", 12), ("api_faults", 4), ("admission", 4), ("watch", 6),
         ("disrupt", 8), ("preempt", 10), ("hang", 4), ("admin", 3), ("squat", 3)]


def draw(rng: random.Random, kind: str) -> dict:
    op: dict = {"kind": kind}
    draw_retraining_op(rng, kind, op)
    if kind in ("create_training", "edit_training", "delete_training", "delete_finished_job"):
        op["slot"] = rng.randint(0, 1)
    if kind in ("create_benchmark", "edit_benchmark", "delete_benchmark"):
        op["slot"] = rng.randint(0, 1)
    if kind == "edit_training":
        op["field"] = rng.choice(list(TRAINING_FIELDS))
        op["value"] = rng.choice(TRAINING_FIELDS[op["field"]])
        if op["field"] == "image":
            op["fix"] = rng.uniform(120, 3600)
    elif kind == "edit_benchmark":
        op["field"] = rng.choice(list(BENCHMARK_FIELDS))
        op["value"] = rng.choice(BENCHMARK_FIELDS[op["field"]])
    elif kind in ("delete_training", "delete_benchmark"):
        op["gap"] = rng.choice([None, 0.0, rng.uniform(0.5, 20), rng.uniform(20, 600)])
    elif kind == "serving_ready":
        op["ready"] = rng.random() < 0.6
    elif kind == "crash":
        op.update(after=rng.randint(1, 12), restart=rng.choice([5.0, 30.0, rng.uniform(5, 900)]))
    elif kind == "api_faults":
        op.update(rate=rng.uniform(0.05, 0.4), **{"for": rng.uniform(60, 1800)})
    elif kind == "admission":
        op.update(rule=rng.choice(["jobs", "persistentvolumeclaims", "configmaps", "pods", "status"]),
                  code=rng.choice([403, 422]), **{"for": rng.uniform(60, 1200)})
    elif kind == "watch":
        op.update(loss=rng.choice([0.0, 0.3, 1.0]), slow=rng.random() < 0.5, **{"for": rng.uniform(30, 1800)})
    elif kind in ("disrupt", "preempt", "hang"):
        op["pick"] = rng.randint(0, 7)
        if kind == "disrupt":
            op["how"] = rng.choice(["drain", "drain", "preempt", "taint", "pressure"])
        elif kind == "preempt":
            op["hold"] = rng.uniform(300, 3600)
    elif kind == "admin":
        op.update(restart=rng.random() < 0.5, **{"for": rng.uniform(300, 7200)})
    elif kind == "squat":
        op.update(slot=rng.randint(0, 1), labelled=rng.random() < 0.5, service=rng.random() < 0.5,
                  **{"for": rng.uniform(60, 3600)})
    return op


def generate(seed: int, count: int, days: float = 1.0) -> tuple[dict, list[dict]]:
    """(setup, operations): two trainings and two benchmarks by name (often 52 characters), created
    first, and in one scenario in eight the serving's spec.retraining (batch_retraining.draw_retraining); the
    operations cover `days` x 6 simulated hours (a training's stages take hours)."""
    rng = random.Random(f"batch/{seed}")
    setup = {"trainings": [{"name": serving_name(rng), "config": draw_config(rng, TRAINING_FIELDS)} for _ in range(2)],
             "benchmarks": [{"name": serving_name(rng), "config": draw_config(rng, BENCHMARK_FIELDS)} for _ in range(2)]}
    for kind in ("trainings", "benchmarks"):
        while setup[kind][0]["name"] == setup[kind][1]["name"]:
            setup[kind][1]["name"] = serving_name(rng)
    first = [{"kind": "create_training", "slot": 0}, {"kind": "create_benchmark", "slot": 0}]
    kinds, split = KINDS, 300
    retraining = draw_retraining(seed)
    if retraining is not None:  # the serving retrains (batch_retraining.py); the others are drawn as before
        setup["retraining"] = retraining
        kinds, split = KINDS + RETRAINING_KINDS, RETRAINING_SPLIT
        first.append(draw(rng, "retrain"))  # someone asks early: every such scenario retrains
    return setup, timeline(rng, first, kinds, draw, count, split=split, at_least=days * DAY / 4)
