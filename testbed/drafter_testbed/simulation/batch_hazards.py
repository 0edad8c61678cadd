"""What production does to trainings that users do not: the batch world's hazards (batch.py mixes them in).

* Disruptions: a stage pod drained off its node, preempted by the scheduler, taken by the taint manager
  (each: Kubernetes' DisruptionTarget condition, then a graceful kill) or evicted by the kubelet under node
  pressure (DisruptionTarget and reason Evicted); a Train group's other ranks then fail as torchrun loses a
  peer. The Job controller applies the Job's podFailurePolicy: a disrupted pod it counts first fails the Job
  with reason PodFailurePolicy when a FailJob rule names DisruptionTarget, else BackoffLimitExceeded.
* Another tenant's workload holds the queue's quota for a while: Kueue preempts the admitted stage Job, if one
  runs (suspends it: its pods are deleted, not counted as failures), and readmits it once that workload is done;
  the Job controller then makes new pods. And Kueue races the operator: a waiting stage Job the operator deletes
  may be admitted just before the delete lands, its pods made at once.
* A stage pod that hangs (never ends) and the Job controller's activeDeadlineSeconds.
* Generate's engine: a Deployment that becomes Ready, a Service given a cluster IP.
* The administrator's tenancy settings (an allow-list tightened or opened again, with or without the
  operator's restart, as a `helm upgrade` does) and users whose spec.image the list refuses.
* An intruder who creates, first, a ConfigMap (and a Service) under the names a training's next stage will use.
* Train's checkpoints: a Train pod starts from what the real stage runner decides (its checkpoint directory made
  its run's, the checkpoint to resume from: training/checkpoints.py), rendered by the real renderer, and read the
  way each framework's installed code reads its config (SpecForge resumes from training.resume_from, speculators
  from its highest epoch unless told not to); rank 0 writes checkpoints as the framework lays them out, in a
  directory of the world per claim; its log carries the runner's progress line.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import weakref
from pathlib import Path

import yaml

from drafter_operator.resources.pod_policy import TenantPolicy
from drafter_operator.resources.queueing import QUEUE_LABEL
from drafter_operator.resources.training import TRAINING_LABEL, training_labels
from drafter_operator.resources.training_job import (STAGE_LABEL, rendezvous_service_name, spec_config_map_name)

from drafter_testbed.simulation.cluster import owner_uid

#: The stage deadlines every simulated training sets (its stages take 30 s to 40 min here).
SIM_DEADLINES = {"generate": "1h", "extract": "1h", "train": "2h", "export": "1h"}
TRAINER = "ghcr.io/drafter-dev/trainer:sim"
#: The administrator's allow-lists: the usual one (the operator's trainer, the engines, the internal registry)
#: and a tightened one that refuses every image a simulated training runs by default.
POLICIES = {"open": TenantPolicy(image_prefixes=("ghcr.io/drafter-dev/", "registry.internal/", "lmsysorg/")),
            "tight": TenantPolicy(image_prefixes=("registry.internal/",))}
DISRUPTIONS = {"drain": "EvictionByEvictionAPI", "preempt": "PreemptionByScheduler", "taint": "DeletionByTaintManager",
               "pressure": "TerminationByKubelet"}
#: The target's and a base drafter's config.json as the stage container reads them (enough to render Train).
TARGET_CONFIG = {"num_hidden_layers": 61, "hidden_size": 7168, "vocab_size": 163840, "num_attention_heads": 64,
                 "num_key_value_heads": 64, "intermediate_size": 18432, "rms_norm_eps": 1e-6}
BASE_CONFIG = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 7168,
               "num_hidden_layers": 1, "vocab_size": 163840, "draft_vocab_size": 32000}
_STEP = re.compile(r"-step(\d+)$")


def flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv and argv.index(name) + 1 < len(argv) else None


def specforge_start(config: dict, train_dir: Path) -> int:
    """The step SpecForge 0.2.0 starts from: training.resume_from's checkpoint (a complete one), else 0; -1 when
    it names none that exists (the real trainer stops there)."""
    resume = (config.get("training") or {}).get("resume_from")
    if not resume:
        return 0
    where = train_dir / Path(resume).name
    match = _STEP.search(where.name)
    return int(match[1]) if match and (where / "training_state.pt").is_file() else -1


def speculators_start(argv: list[str], train_dir: Path) -> int:
    """The step speculators 0.9.0 starts from: its highest epoch directory's global step, unless told not to."""
    if "--no-resume-from-checkpoint" in argv or not train_dir.is_dir():
        return 0
    epochs = sorted(int(p.name) for p in train_dir.iterdir() if p.is_dir() and p.name.isdigit())
    if not epochs:
        return 0
    try:
        return int(json.loads((train_dir / str(epochs[-1]) / "training_state.json").read_text())["global_step"])
    except (OSError, ValueError, KeyError):
        return 0


class BatchHazards:
    """Mixed into BatchWorld (it has api, clock, rng, track, operator and the Job controller's helpers)."""

    def init_hazards(self) -> None:
        self.policy = "open"
        self.hung: set[str] = set()
        self.kueue_blocked_until = 0.0
        self.job_started: dict[str, float] = {}  # Job uid -> when it last started running (its deadline's origin)
        self.train_runs: dict[str, dict] = {}  # Train pod key -> what it started from
        self.claims_root = Path(tempfile.mkdtemp(prefix="sim-claims-"))
        self.api.racing = self.kueue_races
        weakref.finalize(self, shutil.rmtree, str(self.claims_root), True)

    def tenant_policy(self) -> TenantPolicy:
        return POLICIES[self.policy]

    # ------------------------------------------------------------------ the administrator and intruders
    def op_admin(self, op: dict) -> None:
        """The administrator tightens the allow-list for a while (``for``), then opens it again, each time with
        the operator's restart when ``restart`` (a `helm upgrade`; else the setting changes under it)."""
        self._set_policy("tight", op["restart"])
        self._admin_salt = op["salt"]
        self.clock.after(op["for"], self._open_again, op["salt"], op["restart"])

    def _open_again(self, salt: int, restart: bool) -> None:
        if getattr(self, "_admin_salt", None) == salt:
            self._set_policy("open", restart)

    def _set_policy(self, policy: str, restart: bool) -> None:
        self.policy = policy
        self.track.policy_changed()
        if restart and self.operator.up:
            self.api.faults.crash_in = 1
            self.pending_restart_after = 20.0

    def op_squat(self, op: dict) -> None:
        """An intruder creates, first, the spec ConfigMap (and rendezvous Service) the slot's next generation will
        use, with a spec that exports over the drafter the serving loads; the user removes them after a while."""
        from drafter_testbed.simulation.batch import CONFIGMAPS, NS, SERVED_DRAFTER, SERVICES, TRAININGS, training_spec
        t = self.trainings[op["slot"]]
        body = self.api.store.get(f"{TRAININGS}/{t['name']}")
        generation = (body["metadata"].get("generation") or 1) + 1 if body else 1
        labels = training_labels(t["name"]) if op["labelled"] else {}
        spec = {**training_spec(t["config"], op["slot"]), "output": {"path": SERVED_DRAFTER + "/v2"}}
        made = []
        key = f"{CONFIGMAPS}/{spec_config_map_name(t['name'], generation)}"
        if key not in self.api.store:
            made.append(self.api.put("intruder", key, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
                "name": key.rsplit("/", 1)[1], "namespace": NS, "labels": labels},
                "data": {"training.json": json.dumps(spec)}}))
        key = f"{SERVICES}/{rendezvous_service_name(t['name'])}"
        if op["service"] and key not in self.api.store:
            made.append(self.api.put("intruder", key, {"apiVersion": "v1", "kind": "Service", "metadata": {
                "name": key.rsplit("/", 1)[1], "namespace": NS, "labels": labels},
                "spec": {"clusterIP": "None", "selector": {"app": "elsewhere"}, "ports": [{"port": 29400}]}}))
        for obj in made:
            self.track.intruders.add(obj["metadata"]["uid"])
            self.clock.after(op["for"], self._intruder_leaves, obj["metadata"]["uid"])

    def _intruder_leaves(self, uid: str) -> None:
        key = self.api.by_uid.get(uid)
        if key is not None:
            self.api.remove("user", key)

    # ------------------------------------------------------------------ Generate's engine
    def engine_written(self, plural: str, key: str, old: dict | None, new: dict | None) -> None:
        if new is None or old is not None or TRAINING_LABEL not in (new["metadata"].get("labels") or {}):
            return
        if plural == "services" and new["spec"].get("clusterIP") is None:
            self.clock.after(0.01, self._assign_ip, key, new["metadata"]["uid"])
        elif plural == "deployments":
            self.clock.after(self.rng.uniform(5, 300), self._engine_ready, key, new["metadata"]["uid"])

    def _assign_ip(self, key: str, uid: str) -> None:
        service = self.api.store.get(key)
        if service is not None and service["metadata"]["uid"] == uid and not service["spec"].get("clusterIP"):
            self.api.put("apiserver", key, {**service, "spec": {**service["spec"], "clusterIP": f"10.96.1.{len(key) % 250}"}})

    def _engine_ready(self, key: str, uid: str) -> None:
        deployment = self.api.store.get(key)
        if deployment is not None and deployment["metadata"]["uid"] == uid and not deployment["metadata"].get("deletionTimestamp"):
            self.api.put("deployment-controller", key, {**deployment, "status": {
                "observedGeneration": deployment["metadata"].get("generation", 1), "readyReplicas": 1, "replicas": 1}})

    # ------------------------------------------------------------------ the Job controller's deadline
    def job_runs(self, key: str, job: dict) -> None:
        """A Job started (created unsuspended, or resumed by Kueue): its activeDeadlineSeconds counts from now."""
        uid, deadline = job["metadata"]["uid"], job["spec"].get("activeDeadlineSeconds")
        self.job_started[uid] = started = self.clock.t
        if deadline:
            self.clock.after(float(deadline), self._job_deadline, key, uid, started)

    def _job_deadline(self, key: str, uid: str, started: float) -> None:
        job = self.api.store.get(key)
        if job is None or job["metadata"]["uid"] != uid or self.job_started.get(uid) != started \
                or (job.get("status") or {}).get("conditions") or job["spec"].get("suspend"):
            return
        from drafter_testbed.simulation.batch import PODS
        self.track.job_cause(uid, "deadline")
        for pod_key, pod in list(self.api.store.items()):
            if pod_key.startswith(PODS + "/") and owner_uid(pod) == uid:
                self.delete_pod(pod_key)
        self.api.put("job-controller", key, {**job, "status": {**(job.get("status") or {}), "conditions": [
            {"type": "Failed", "status": "True", "reason": "DeadlineExceeded",
             "message": "Job was active longer than specified deadline"}]}})

    # ------------------------------------------------------------------ disruptions
    def _running_stage_pods(self) -> list[str]:
        return sorted(k for k, p in self.api.store.items() if "/pods/" in k and STAGE_LABEL in (p["metadata"].get("labels") or {})
                      and (p.get("status") or {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp"))

    def op_disrupt(self, op: dict) -> None:
        running = self._running_stage_pods()
        if not running:
            return
        key = running[op["pick"] % len(running)]
        pod = self.api.store[key]
        uid, job_uid = pod["metadata"]["uid"], owner_uid(pod)
        reason = DISRUPTIONS[op["how"]]
        condition = {"type": "DisruptionTarget", "status": "True", "reason": reason,
                     "message": {"drain": "Eviction API: evicting", "preempt": "tolerated by a higher-priority pod",
                                 "taint": "Taint manager: deleting due to NoExecute taint",
                                 "pressure": "The node was low on resource: memory."}[op["how"]]}
        status = {**pod["status"], "conditions": [*(pod["status"].get("conditions") or []), condition]}
        self.track.disrupted(job_uid, key)
        if op["how"] == "pressure":  # the kubelet evicts: the pod fails on its node and stays, reason Evicted
            self.api.put("kubelet", key, {**pod, "status": {**status, "reason": "Evicted",
                                                           "message": "The node was low on resource: memory."}})
            self.clock.after(self.rng.uniform(1, 10), self._pod_killed, key, uid, False)
            return
        self.api.put("eviction", key, {**pod, "metadata": {**pod["metadata"], "deletionTimestamp": self.clock.iso()},
                                        "status": status})
        self.clock.after(self.rng.uniform(1, 30), self._pod_killed, key, uid, True)

    def _pod_killed(self, key: str, uid: str, goes: bool) -> None:
        """The disrupted pod's container is killed: the pod fails; the Job controller counts it; a deleted pod
        goes once counted; a Train group's other ranks lose their peer."""
        pod = self.api.store.get(key)
        if pod is None or pod["metadata"]["uid"] != uid:
            return
        if pod["status"].get("phase") != "Running":
            if goes and pod["status"].get("phase") in ("Succeeded", "Failed"):
                self.clock.after(5.0, self.pod_gone, key, uid)  # it ended on its own meanwhile: the kubelet removes it
            return
        self.api.put("kubelet", key, {**pod, "status": {**pod["status"], "phase": "Failed", "containerStatuses": [
            {"name": c["name"], "state": {"terminated": {"exitCode": 137, "reason": "Error", "message": ""}}}
            for c in pod["spec"]["containers"]]}})
        job_uid = owner_uid(pod)
        self.clock.after(self.rng.uniform(0.1, 5.0), self.job_finishes, job_uid, False, key)
        if goes:
            self.clock.after(self.rng.uniform(5.0, 10.0), self.pod_gone, key, uid)
        if (pod["metadata"].get("labels") or {}).get(STAGE_LABEL) == "Train":
            for peer_key, peer in list(self.api.store.items()):
                if "/pods/" in peer_key and peer_key != key and owner_uid(peer) == job_uid:
                    self.clock.after(self.rng.uniform(0.5, 20.0), self._peer_lost, peer_key, peer["metadata"]["uid"])
        self.schedule_sweep()

    def _peer_lost(self, key: str, uid: str) -> None:
        pod = self.api.store.get(key)
        if pod is None or pod["metadata"]["uid"] != uid or pod["status"].get("phase") != "Running":
            return
        message = json.dumps({"outcome": "Failed", "command": ["torchrun"], "exitCode": 1,
                              "tail": "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: a peer left"})
        self.api.put("kubelet", key, {**pod, "status": {**pod["status"], "phase": "Failed", "containerStatuses": [
            {"name": c["name"], "state": {"terminated": {"exitCode": 1, "message": message}}}
            for c in pod["spec"]["containers"]]}})
        self.clock.after(self.rng.uniform(0.1, 5.0), self.job_finishes, owner_uid(pod), False, key)
        self.schedule_sweep()

    def op_preempt(self, op: dict) -> None:
        """Another tenant's higher-priority workload takes the queue's quota for ``hold``: Kueue preempts the
        admitted stage Job, if one runs, and admits none meanwhile."""
        from drafter_testbed.simulation.batch import PODS, WORKLOADS
        self.kueue_blocked_until = max(self.kueue_blocked_until, self.clock.t + op["hold"])
        self.clock.at(self.kueue_blocked_until + 1.0, self.kueue_admits)
        admitted = sorted(k for k, j in self.api.store.items() if "/jobs/" in k and QUEUE_LABEL in (j["metadata"].get("labels") or {})
                          and not j["spec"].get("suspend") and not (j.get("status") or {}).get("conditions"))
        if not admitted:
            return
        key = admitted[op["pick"] % len(admitted)]
        job = self.api.store[key]
        uid = job["metadata"]["uid"]
        self.job_started.pop(uid, None)
        self.api.put("kueue", key, {**job, "spec": {**job["spec"], "suspend": True}})
        workload = next(((k, w) for k, w in self.api.store.items() if k.startswith(WORKLOADS + "/") and owner_uid(w) == uid), None)
        if workload is not None:
            self.api.put("kueue", workload[0], {**workload[1], "status": {"conditions": [
                {"type": "QuotaReserved", "status": "False", "reason": "Pending",
                 "message": "Preempted to accommodate a higher-priority workload; waiting for quota"},
                {"type": "Evicted", "status": "True", "reason": "Preempted", "message": "Preempted by a higher-priority workload"}]}})
        for pod_key, pod in list(self.api.store.items()):  # the Job controller stops a suspended Job's pods
            if pod_key.startswith(PODS + "/") and owner_uid(pod) == uid:
                self.delete_pod(pod_key)
        self.track.preempted(uid)

    def kueue_races(self, method: str, path: str) -> None:
        """Kueue racing the operator's request: a stage Job waiting in its queue that the operator deletes
        (a spec change) is, three times in four, admitted just before the delete lands (the workload that held the quota
        ended then), and the Job controller makes its pods at once."""
        from drafter_testbed.simulation.batch import JOBS, WORKLOADS
        job = self.api.store.get(path) if method == "DELETE" and path.startswith(JOBS + "/") else None
        if job is not None and job["spec"].get("suspend") and QUEUE_LABEL in (job["metadata"].get("labels") or {}) \
                and not job["metadata"].get("deletionTimestamp") and not (job.get("status") or {}).get("conditions") \
                and self.rng.random() < 0.75:
            self.kueue_blocked_until = 0.0
            uid = job["metadata"]["uid"]
            workload = next(((k, w) for k, w in self.api.store.items() if k.startswith(WORKLOADS + "/") and owner_uid(w) == uid), None)
            if workload is not None:
                self.api.put("kueue", workload[0], {**workload[1], "status": {"conditions": [
                    {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "Quota reserved"}]}})
            self.api.put("kueue", path, {**job, "spec": {**job["spec"], "suspend": False}})
            self.job_creates_pod(path, uid)

    def op_hang(self, op: dict) -> None:
        """A stage pod that never ends (a deadlock, a stuck collective): only its Job's deadline stops it."""
        running = self._running_stage_pods()
        if running:
            self.hung.add(running[op["pick"] % len(running)])

    # ------------------------------------------------------------------ Train's checkpoints
    def train_starts(self, key: str, pod: dict) -> None:
        """A Train pod starts: the real stage runner's resume decision on the claim's directory, the real Train
        rendering with it, and where the framework then starts; rank 0 goes on to write checkpoints."""
        from drafter_operator.api.training import DrafterTrainingSpec
        from drafter_operator.training import RenderOptions, TrainingPaths
        from drafter_operator.training.specforge import TRAIN_CONFIG
        from drafter_operator.training.stage_runner import resumed_from, stage_of, train_resume
        from drafter_operator.training.torchrun import Rendezvous
        from drafter_testbed.simulation.batch import CLAIMS
        spec_json = self.track.export_spec(pod)
        claim = next(((v.get("persistentVolumeClaim") or {}).get("claimName") for v in pod["spec"].get("volumes") or []
                      if v.get("name") == "work"), None)
        claim_obj = self.api.store.get(f"{CLAIMS}/{claim}") if claim else None
        if spec_json is None or claim_obj is None:
            return
        argv = pod["spec"]["containers"][0]["command"]
        spec = DrafterTrainingSpec.model_validate(spec_json)
        work = self.claims_root / claim_obj["metadata"]["uid"]
        resume = train_resume(spec, flag(argv, "--training-uid"), {TrainingPaths().work: str(work)})
        endpoint = flag(argv, "--rendezvous-endpoint")
        options = RenderOptions(target_config=TARGET_CONFIG, base_drafter_config=BASE_CONFIG if spec.base_drafter else None,
                                chat_template=spec.data.chat_template, resume=resume,
                                rendezvous=Rendezvous(endpoint, flag(argv, "--rendezvous-id") or "none") if endpoint else None,
                                generation=int(flag(argv, "--generation") or 1),
                                generation_endpoint=flag(argv, "--generation-endpoint"))
        stage = stage_of(spec, "Train", options)
        train_dir = work / "train"
        if spec.framework == "specforge":
            config = yaml.safe_load(next(f for f in stage.files if f.name == TRAIN_CONFIG).text())
            start = specforge_start(config, train_dir)
        else:
            start = speculators_start(list(stage.commands[-1].argv), train_dir)
        index = (pod["metadata"].get("annotations") or {}).get("batch.kubernetes.io/job-completion-index")
        run = self.track.train_run(pod, spec_json)
        self.train_runs[key] = {"start": start, "step": max(start, 0), "framework": spec.framework, "dir": train_dir,
                                "resumed": resumed_from(resume), "claim": claim_obj["metadata"]["uid"], "run": run,
                                "epoch": len([p for p in train_dir.iterdir() if p.name.isdigit()]) if train_dir.is_dir() else 0}
        self.track.train_started(key, pod, claim_obj["metadata"]["uid"], run, start)
        if index in (None, "0"):
            self.clock.after(self.rng.uniform(120, 600), self._checkpoint, key, pod["metadata"]["uid"])

    def _checkpoint(self, key: str, uid: str) -> None:
        pod, run = self.api.store.get(key), self.train_runs.get(key)
        if pod is None or run is None or pod["metadata"]["uid"] != uid or pod["status"].get("phase") != "Running" \
                or pod["metadata"].get("deletionTimestamp"):
            return
        run["step"] += self.rng.randint(50, 300)
        where: Path = run["dir"]
        if run["framework"] == "specforge":  # <run_id>-step<N>/training_state.pt, <run_id>-latest -> it
            checkpoint = where / f"drafter-step{run['step']}"
            checkpoint.mkdir(parents=True, exist_ok=True)
            (checkpoint / "training_state.pt").write_bytes(b"")
            latest = where / "drafter-latest"
            if latest.is_symlink() or latest.exists():
                latest.unlink()
            latest.symlink_to(checkpoint.name)
        else:  # <epoch>/ with training_state.json
            checkpoint = where / str(run["epoch"])
            checkpoint.mkdir(parents=True, exist_ok=True)
            (checkpoint / "training_state.json").write_text(json.dumps(
                {"epoch": run["epoch"], "local_step": 0, "global_step": run["step"]}))
            run["epoch"] += 1
        self.track.checkpoint_written(run["claim"], run["run"], run["step"])
        self.clock.after(self.rng.uniform(120, 600), self._checkpoint, key, uid)

    def train_log(self, key: str) -> str | None:
        """A running Train pod's log: the runner's progress line (with where it resumed from)."""
        from drafter_operator.training import progress
        run = self.train_runs.get(key)
        if run is None:
            return ""
        plan = {"stage": "Train", "commands": [], "files": [], **({"resumedFrom": run["resumed"]} if run["resumed"] else {})}
        return progress.format_line(progress.record(progress.start(plan), "Train", self.clock.now()))
