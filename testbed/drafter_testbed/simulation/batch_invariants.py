"""What must hold for DrafterTraining and DrafterBenchmark in the simulation (batch.py), after every event.

Most are judged the moment a write happens (`BatchTracks.on_write` sees every write, with its actor):
a claim deleted while a pod runs on it, a stage Job created twice or beside another of its generation, a
finished stage run again for a spec that reads the same, an Export pod starting to write somewhere it must
not, a stage pod mounting a child the training does not own, a Train pod starting before its run's last
checkpoint, a run ending Failed on a disruption it had retries for. The rest look at the store a bounded
time after a change (completion, deletion, a refusal, the last change of status), allowing for the
operator's downtime and for the faults of the scenario: liveness beside safety.

The serving's spec.retraining (batch_retraining.py) has its own: at most one unfinished training the serving
started at any moment, one its refused spec stopped counted as unfinished since it resumes by itself once allowed
(`retrains-one-at-a-time`); never two trainings for one
drafter.dev/retrain value, nor one run number twice (`retrains-once-per-request`); no automatic start (drift,
interval) within spec.retraining.cooldown of the previous start, read from the trainings' creationTimestamps as
decide reads them (`retrains-after-cooldown`); the operator deletes only a finished training, and only with
historyLimit newer finished ones kept, and the finished ones beyond historyLimit are gone within HISTORY_BOUND
(`retraining-history-bounded`); status.retraining.history names only trainings the serving started
(`retraining-history-real`); a drafter.dev/retrain value no training was started for starts one within
REQUEST_BOUND of the operator's uptime once none runs (`retrain-request-starts`).
"""

from __future__ import annotations

import json
import posixpath
import re

from drafter_operator import timestamps
from drafter_operator.api.common import parse_duration
from drafter_operator.constants import RETRAIN_ANNOTATION, RETRAINING_LABEL, RETRAINING_TRIGGER_ANNOTATION
from drafter_operator.controllers.conditions import job_finished
from drafter_operator.controllers.retraining.decide import AUTOMATIC, FINISHED_STAGES
from drafter_operator.engines import DEFAULT_IMAGES
from drafter_operator.resources.queueing import QUEUE_LABEL
from drafter_operator.resources.training_job import STAGE_LABEL

from drafter_testbed.simulation.clock import T0
from drafter_testbed.simulation.cluster import owner_uid

JOB_STAGE_CONDITIONS = {"Generate": "Generated", "Extract": "Extracted", "Train": "Trained", "Export": "Exported"}
DELETE_BOUND = 900.0  # a deleted training's or benchmark's Jobs, pods and claim are gone by then
SETTLE = 1800.0  # after a run ends (and any fault of the scenario ends): its leftovers are gone by then
QUEUED_BOUND = 300.0  # a stage Job waiting in its Kueue queue this long: the training's status says Queued
REFUSED_BOUND = 300.0  # a refused training holds no running stage pod, unfinished Job or engine this long after
LIFTED_BOUND = 900.0  # a run refused by the allow-list resumes this long after the list allows it again
#: An unfinished training's stage, Job or Ready reason changes within this bound: a stage ends within its
#: deadline (2h at most here: batch_hazards.SIM_DEADLINES) after it starts, and waits in the queue at most for
#: another training's stage.
LIVENESS_BOUND = 3 * 3600.0
NAME_CONFLICT_BOUND = 600.0  # a NameConflict with no one else's object about is wrong by then
DEADLINE_SLACK = 300.0  # the Job controller stops a Job past its deadline within this
RESUME_SAID_BOUND = 300.0  # a resumed Train's status says from which step within this bound
#: spec.retraining: the finished trainings beyond historyLimit are deleted within this (the loop ticks every minute)
HISTORY_BOUND = 600.0
#: spec.retraining: a drafter.dev/retrain value no training runs for starts one within this, once none runs
REQUEST_BOUND = 600.0
DISRUPTION_RETRIES = 3  # the API's default spec.limits.disruptionRetries (the simulated specs keep it)
GENERATION = re.compile(r"-g(\d+)(?:-r\d+)?$")
#: What each Job stage's output follows from, among what the simulated specs set, and the stages before it:
#: the simulation's own statement (beside training/inputs.py's) of when a finished stage may be carried over
#: to a new generation, and when a Train checkpoint belongs to the same run.
READS = {"Generate": ("target", "framework", "data.dataset", "data.numSamples", "data.maxTokens", "data.chatTemplate",
                      "data.generation.engine", "storage"),
         "Extract": ("baseDrafter", "method", "hiddenStates.layers", "hiddenStates.storage.claimName", "train.maxLength"),
         "Train": ("train", "resources.nodes", "resources.gpus"),
         "Export": ("output",)}


def reads(spec: dict, stage: str) -> str:
    """What ``stage`` (and the stages before it) read of ``spec``, as one string."""
    def at(path: str):
        value = spec
        for part in path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        return value
    stages = list(READS)[:list(READS).index(stage) + 1]
    return json.dumps({path: at(path) for s in stages for path in READS[s]}, sort_keys=True)


def _parts(path: str) -> str:
    return path.rstrip("/")


def _run_number(name: str) -> int:
    """A retraining's run number, from its name (<serving>-r<N>)."""
    found = re.search(r"-r(\d+)$", name)
    return int(found.group(1)) if found else 0


def overlaps(a: str, b: str) -> bool:
    """Is one path the other, or inside it?"""
    a, b = _parts(a), _parts(b)
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


class BatchTracks:
    def __init__(self, world):
        self.world = world
        self.found: dict[str, list[str]] = {}
        self.user_claims: set[str] = set()
        self.specs: dict[tuple[str, int], dict] = {}  # (training uid, generation) -> its spec
        self.jobs: dict[str, tuple[str, int, str | None]] = {}  # Job uid -> (owner uid, generation, stage)
        self.completed: set[tuple[str, int, str]] = set()  # (training uid, generation, stage) whose Job succeeded
        self.deletes: list[tuple[str, float]] = []
        self.quiet_from = 0.0  # the end of the latest fault period
        self.finished_at: dict[tuple, float] = {}
        self.judged: set[tuple] = set()
        self.last_scan = -1
        self.cross_generation = 0  # stage Jobs created while an older generation's stage pod still ran
        self.created_at: dict[str, float] = {}  # stage Job uid -> when the operator created it (or Kueue re-queued it)
        #: training uid -> stage -> (what its claim holds of the stage: "ran", "completed" or "done" (recorded),
        #: what it was run for: reads()): the record a finished stage is carried over from, or redone against.
        self.content: dict[str, dict[str, tuple[str, str]]] = {}
        self.causes: dict[str, str] = {}  # Job uid -> why it failed: "disrupted", "failed" (its own), "deadline"
        self.disrupted_at: dict[str, float] = {}  # Job uid -> when a pod of it was disrupted
        self.checkpoints: dict[str, tuple[object, int]] = {}  # claim uid -> (run, last checkpoint step)
        self.train_pods: dict[str, tuple[int, float, str]] = {}  # Train pod key -> (start step, started at, Job uid)
        self.intruders: set[str] = set()  # uids of objects an intruder made under a training's child names
        self.refused_since: dict[str, float] = {}
        self.lifted_since: dict[str, float] = {}
        self.live: dict[str, tuple[tuple, float]] = {}
        self.policy_changed_at = 0.0
        self.spec_changed_at: dict[str, float] = {}  # training uid -> when its spec last changed
        self.running_since: dict[str, float] = {}  # stage Job uid -> since when it runs (created or resumed unsuspended)
        #: spec.retraining: every training the serving started, by name -> (creationTimestamp in seconds, trigger, request)
        self.retraining_starts: dict[str, tuple[float, str | None, str | None]] = {}
        self.retraining_ended: set[str] = set()  # trainings seen ended (Succeeded, or Failed but not refused) since they last ran
        self.request_pending: tuple[str, float] | None = None  # a drafter.dev/retrain value not started yet, since when
        self.history_over_since: float | None = None  # since when more finished trainings than historyLimit exist

    def report(self, invariant: str, message: str) -> None:
        self.found.setdefault(invariant, []).append(f"t={self.world.clock.t:.0f}s: {message}")

    def take(self, invariant: str) -> list[str]:
        return self.found.pop(invariant, [])

    def owner_deleted(self, uid: str) -> None:
        self.deletes.append((uid, self.world.clock.t))

    def disturbed_until(self, t: float) -> None:
        self.quiet_from = max(self.quiet_from, t)

    # ------------------------------------------------------------------ the spec an Export pod writes from
    def export_spec(self, pod: dict) -> dict | None:
        from drafter_testbed.simulation.batch import CONFIGMAPS
        name = next(((v.get("configMap") or {}).get("name") for v in pod["spec"].get("volumes") or []
                     if v.get("name") == "spec"), None)
        cm = self.world.api.store.get(f"{CONFIGMAPS}/{name}") if name else None
        if cm is None:
            return None
        try:
            return json.loads(next(iter(cm.get("data", {}).values())))
        except (ValueError, StopIteration):
            return None

    # ------------------------------------------------------------------ every write
    def on_write(self, actor, plural, key, old, new, ok, detail) -> None:
        if not ok:
            method, path, code, message, body = detail
            if actor == "operator" and code == 422 and method == "POST" and "metadata.name" in message:
                self.report("names-fit", f"the apiserver refused a name the operator chose: {message}")
            return
        if plural == "draftertrainings" and RETRAINING_LABEL in (((new or old)["metadata"].get("labels")) or {}):
            self._retraining_written(actor, old, new)
        elif plural == "drafterservings" and actor == "operator" and new is not None:
            self._retraining_status(new)
        if plural == "draftertrainings" and new is not None:
            self.specs[(new["metadata"]["uid"], new["metadata"].get("generation") or 1)] = new.get("spec") or {}
            if (old or {}).get("spec") != new.get("spec"):
                self.spec_changed_at[new["metadata"]["uid"]] = self.world.clock.t
            if actor == "operator":
                self._stages_recorded(old, new)
        elif plural == "jobs":
            self._job_written(actor, old, new)
            self._job_runs(old, new)
        elif plural == "persistentvolumeclaims" and old is not None and \
                (new is None or (new["metadata"].get("deletionTimestamp") and not old["metadata"].get("deletionTimestamp"))):
            self._claim_deleted(actor, old)
        elif plural == "pods" and new is not None and actor == "kubelet" and \
                (new.get("status") or {}).get("phase") == "Running" and ((old or {}).get("status") or {}).get("phase") != "Running":
            self._pod_started(new)

    def _job_written(self, actor, old, new) -> None:
        w = self.world
        if old is None and new is not None and actor == "operator":
            meta = new["metadata"]
            found = GENERATION.search(meta["name"])
            stage = (meta.get("labels") or {}).get(STAGE_LABEL)
            self.jobs[meta["uid"]] = info = (owner_uid(new), int(found.group(1)) if found else 0, stage)
            if stage is None:
                return
            self.created_at[meta["uid"]] = w.clock.t
            queue = self.specs.get(info[:2], {}).get("queueName")
            if queue and not (new["spec"].get("suspend") and (meta.get("labels") or {}).get(QUEUE_LABEL) == queue):
                self.report("queued-stages-wait", f"{meta['name']} ({stage}) of a training queued in {queue} was created "
                                                  f"{'unsuspended' if not new['spec'].get('suspend') else 'outside the queue'}: "
                                                  "it runs outside Kueue's quota")
            if (info[0], info[1], stage) in self.completed:
                self.report("no-repeated-stage", f"stage {stage} of generation {info[1]} was created again "
                                                 f"({meta['name']}) though its Job had succeeded")
            spec = self.specs.get(info[:2])
            if spec is not None and stage in READS:
                wanted, content = reads(spec, stage), self.content.setdefault(info[0], {})
                if content.get(stage) == ("done", wanted):
                    self.report("no-repeated-stage", f"{meta['name']} runs {stage} again for generation {info[1]}, though "
                                                     f"the training recorded it done for a spec that reads the same")
                content[stage] = ("ran", wanted)
                for later in list(READS)[list(READS).index(stage) + 1:]:
                    content.pop(later, None)  # what they read is being rewritten
            others = [k for k, j in w.api.store.items() if "/jobs/" in k and j["metadata"]["uid"] != meta["uid"]
                      and self.jobs.get(j["metadata"]["uid"], (None, None))[:2] == info[:2]
                      and self.jobs[j["metadata"]["uid"]][2] is not None and job_finished(j) is None]
            running = [k for k, p in w.api.store.items() if "/pods/" in k and (p.get("status") or {}).get("phase")
                       not in ("Succeeded", "Failed") and self.jobs.get(owner_uid(p) or "", (None, None))[:2] == info[:2]]
            cross = [k for k, p in w.api.store.items() if "/pods/" in k and (p.get("status") or {}).get("phase")
                     not in ("Succeeded", "Failed") and self.jobs.get(owner_uid(p) or "", (None,))[0] == info[0]
                     and self.jobs[owner_uid(p)][1] != info[1] and self.jobs[owner_uid(p)][2] is not None]
            if cross:  # an older generation's stage pod still runs, on the same hidden-state claim
                self.cross_generation += 1
                self.report("one-stage-at-a-time", f"{meta['name']} ({stage}) was created while "
                                                   f"{', '.join(k.rsplit('/', 1)[1] for k in cross)} of an older "
                                                   "generation still ran on the training's claim")
            if others or running:
                self.report("one-stage-at-a-time", f"{meta['name']} ({stage}) was created while "
                                                   f"{', '.join(k.rsplit('/', 1)[1] for k in others + running)} of "
                                                   f"generation {info[1]} still ran")
        elif new is not None and actor == "job-controller" and job_finished(new) and \
                job_finished(new).get("type") == "Complete":
            info = self.jobs.get(new["metadata"]["uid"])
            if info and info[2]:
                self.completed.add(info)
                content = self.content.get(info[0], {})
                spec = self.specs.get(info[:2])
                if spec is not None and info[2] in READS and content.get(info[2]) == ("ran", reads(spec, info[2])):
                    content[info[2]] = ("completed", content[info[2]][1])

    def _job_runs(self, old: dict | None, new: dict | None) -> None:
        """When each stage Job started running (its deadline's origin): created unsuspended, or resumed."""
        if new is None or job_finished(new) is not None or new["spec"].get("suspend"):
            self.running_since.pop(((new or old) or {}).get("metadata", {}).get("uid"), None)
        elif old is None or old["spec"].get("suspend"):
            self.running_since[new["metadata"]["uid"]] = self.world.clock.t

    def _within_deadlines(self, now: float) -> None:
        """No stage Job runs past the deadline its training's spec states for the stage (spec.limits.deadlines,
        else the API's default), give or take the Job controller's reaction."""
        from drafter_operator.api.common import parse_duration
        from drafter_operator.api.training.sections import STAGE_DEADLINE_DEFAULTS
        for uid, since in list(self.running_since.items()):
            info = self.jobs.get(uid)
            if info is None or info[2] not in STAGE_DEADLINE_DEFAULTS:
                continue
            stated = (((self.specs.get(info[:2]) or {}).get("limits") or {}).get("deadlines") or {}).get(info[2].lower())
            bound = parse_duration(stated or STAGE_DEADLINE_DEFAULTS[info[2]]) + DEADLINE_SLACK
            if now - since > bound:
                key = self.world.api.by_uid.get(uid, "")
                self.report("ends-or-changes", f"{info[2]} Job {key.rsplit('/', 1)[-1]} has run {now - since:.0f}s, past "
                                               f"its stated deadline of {stated or STAGE_DEADLINE_DEFAULTS[info[2]]}")
                self.running_since.pop(uid)

    def _stages_recorded(self, old: dict | None, new: dict) -> None:
        """A stage is recorded done only once a Job of this training (this uid) did it for a spec that reads the
        same as this generation's, and nothing has run that stage (or one before it) since."""
        uid, generation = new["metadata"]["uid"], new["metadata"].get("generation") or 1
        spec = self.specs.get((uid, generation), new.get("spec") or {})
        content = self.content.setdefault(uid, {})

        def done(body):
            return {c["type"] for c in ((body or {}).get("status") or {}).get("conditions") or []
                    if c.get("status") == "True" and c.get("observedGeneration") == generation}
        for stage, kind in JOB_STAGE_CONDITIONS.items():
            if kind not in done(new) - done(old):
                continue
            held = content.get(stage)
            if held not in (("completed", reads(spec, stage)), ("done", reads(spec, stage))):
                self.report("own-stages-only", f"{new['metadata']['name']} records {kind} for generation {generation}, "
                                               f"but no {stage} Job of its own (uid {uid}) did it for a spec that reads "
                                               f"the same, or another ran since ({held[0] if held else 'none'})")
            else:
                content[stage] = ("done", held[1])
        self._failed_on_a_disruption(old, new)

    def _failed_on_a_disruption(self, old: dict | None, new: dict) -> None:
        """A run that ends Failed because a pod of its stage was disrupted, while it had retries left (the world
        disrupted fewer of that stage's attempts than spec.limits.disruptionRetries allows again)."""
        status, before = new.get("status") or {}, (old or {}).get("status") or {}
        generation = new["metadata"].get("generation") or 1
        if status.get("stage") != "Failed" or before.get("stage") == "Failed" or status.get("observedGeneration") != generation:
            return
        failed = next((c for c in status.get("conditions") or [] if c.get("type") in JOB_STAGE_CONDITIONS.values()
                       and c.get("status") == "False" and c.get("observedGeneration") == generation), None)
        stage = next((s for s, kind in JOB_STAGE_CONDITIONS.items() if failed and kind == failed["type"]), None)
        attempts = sorted((self.created_at.get(j, 0.0), j) for j, info in self.jobs.items()
                          if info == (new["metadata"]["uid"], generation, stage))
        if not attempts or self.causes.get(attempts[-1][1]) != "disrupted":
            return
        last = attempts[-1][1]
        disrupted = sum(self.causes.get(j) == "disrupted" for _, j in attempts)
        limit = ((new.get("spec") or {}).get("limits") or {}).get("disruptionRetries", DISRUPTION_RETRIES)
        if disrupted > limit:
            return
        job = self.world.api.store.get(self.world.api.by_uid.get(last, ""), {})
        told = (job_finished(job) or {}).get("reason") == "PodFailurePolicy" if job else False
        since = self.disrupted_at.get(last, 0.0)
        if not told and (self.world.operator.downtime_since(since) > 0 or self.quiet_from > since):
            return  # the Job does not say it, and the operator could not see the disrupted pod: no promise
        self.report("disrupted-resumes", f"{new['metadata']['name']} failed at {stage} after a disruption of its pod, with "
                                         f"{limit - disrupted + 1} of {limit} retries left: "
                                         f"{next((c.get('message') for c in status.get('conditions') or [] if c.get('type') == 'Ready'), '')}"[:400])

    # ------------------------------------------------------------------ what the hazards tell the tracks
    def job_cause(self, uid: str | None, cause: str) -> None:
        if uid is not None:
            self.causes.setdefault(uid, cause)

    def disrupted(self, job_uid: str | None, pod_key: str) -> None:
        if job_uid is not None and job_uid not in self.causes:
            self.causes[job_uid] = "disrupted"
            self.disrupted_at[job_uid] = self.world.clock.t

    def preempted(self, job_uid: str) -> None:
        self.created_at[job_uid] = self.world.clock.t  # waits in its queue again from now

    def policy_changed(self) -> None:
        self.policy_changed_at = self.world.clock.t

    def train_run(self, pod: dict, spec: dict) -> tuple:
        """The run a Train pod belongs to: its training (uid) and what Train reads of its spec."""
        return (self.jobs.get(owner_uid(pod) or "", (None,))[0], reads(spec, "Train"))

    def train_started(self, key: str, pod: dict, claim: str, run: tuple, start: int) -> None:
        """A Train pod started at ``start``: never before its run's last checkpoint on the claim, never from
        another run's, never from one that is not there."""
        name = pod["metadata"]["name"]
        owner, last = self.checkpoints.get(claim, (None, 0))
        if start < 0:
            self.report("resumes-from-checkpoint", f"Train pod {name} resumes from a checkpoint that is not there")
        elif owner == run and start < last:
            self.report("resumes-from-checkpoint", f"Train pod {name} starts at step {start}, before its run's last "
                                                   f"checkpoint (step {last})")
        elif owner != run and start > 0:
            self.report("resumes-from-checkpoint", f"Train pod {name} starts at step {start} from another run's "
                                                   "checkpoint (another training, or a spec Train reads differently)")
        if owner != run:
            self.checkpoints[claim] = (run, 0)
        self.train_pods[key] = (start, self.world.clock.t, owner_uid(pod) or "")

    def checkpoint_written(self, claim: str, run: tuple, step: int) -> None:
        self.checkpoints[claim] = (run, step)

    def _claim_deleted(self, actor, claim) -> None:
        name = claim["metadata"]["name"]
        if claim["metadata"]["uid"] in self.user_claims and actor != "user":
            self.report("user-claims-kept", f"{actor} deleted claim {name}, which the user made and named by claimName")
        if actor == "operator":
            users = self.world.pods_naming(name, running_only=True)
            if users:
                self.report("claim-not-in-use", f"the operator deleted claim {name} while pod(s) "
                                                f"{', '.join(k.rsplit('/', 1)[1] for k in users)} still ran on it")

    def _pod_started(self, pod: dict) -> None:
        """The model of a stage's writes: only Export writes to the model volume, to the output of the spec
        of its own generation, which must lie inside the mount and clear of every model in use."""
        labels = pod["metadata"].get("labels") or {}
        stage = labels.get(STAGE_LABEL)
        if stage is None:
            return
        name = pod["metadata"]["name"]
        self._own_children_only(pod, stage)
        self._alone_on_the_claim(pod, stage)
        for mount in (pod["spec"]["containers"][0].get("volumeMounts") or []):
            if mount.get("name") == "models" and not mount.get("readOnly") and stage != "Export":
                self.report("writes-allowed", f"{stage} pod {name} mounts the model volume read-write")
        if stage != "Export":
            return
        info = self.jobs.get(owner_uid(pod) or "")
        spec = self.export_spec(pod)
        if info is None or spec is None:
            self.report("writes-allowed", f"Export pod {name} started without a Job or spec the operator made for it")
            return
        declared = self.specs.get(info[:2], {})
        path = (spec.get("output") or {}).get("path") or ""
        if path != (declared.get("output") or {}).get("path"):
            self.report("writes-allowed", f"Export pod {name} writes {path!r}, but generation {info[1]} of its training "
                                          f"asked for {(declared.get('output') or {}).get('path')!r}")
        mount = (spec.get("storage") or {}).get("mountPath") or "/models"
        if posixpath.normpath(path) != path or "//" in path or not path.startswith(mount + "/"):
            self.report("writes-allowed", f"Export pod {name} writes {path!r}: not a normalised path under {mount}")
            return
        writable = [m.get("mountPath") for m in pod["spec"]["containers"][0].get("volumeMounts") or []
                    if m.get("name") == "models" and not m.get("readOnly")]
        if any(m != posixpath.dirname(path) for m in writable):
            self.report("writes-allowed", f"Export pod {name} mounts {writable} of the model volume writable, "
                                          f"not only {posixpath.dirname(path)!r}, the parent of its output")
        for what, used in self._models_in_use(spec):
            if overlaps(path, used):
                self.report("writes-allowed", f"Export pod {name} writes {path!r} over {what} {used!r}")
                return

    def _alone_on_the_claim(self, pod: dict, stage: str) -> None:
        """A stage pod starts only when no pod of another stage Job of its training still runs (a Job deleted by a
        spec change or a refusal, a disrupted attempt, an older generation's Job Kueue admitted late): two would
        write the hidden-state claim at once."""
        job = owner_uid(pod) or ""
        training = self.jobs.get(job, (None,))[0]
        if training is None:
            return
        others = [k.rsplit("/", 1)[1] for k, p in self.world.api.store.items() if "/pods/" in k
                  and (p.get("status") or {}).get("phase") == "Running" and owner_uid(p) != job
                  and self.jobs.get(owner_uid(p) or "", (None,))[0] == training
                  and self.jobs[owner_uid(p)][2] is not None]
        if others:
            self.report("one-stage-at-a-time", f"{stage} pod {pod['metadata']['name']} started while "
                                               f"{', '.join(others)} of another stage Job of its training still ran")

    def _own_children_only(self, pod: dict, stage: str) -> None:
        """A stage pod mounts the spec ConfigMap of its own training, and Train's pods across nodes meet through
        its own rendezvous Service: never an object someone else made under that name."""
        from drafter_testbed.simulation.batch import CONFIGMAPS, SERVICES
        training = self.jobs.get(owner_uid(pod) or "", (None,))[0]
        if training is None:
            return
        config_map = next(((v.get("configMap") or {}).get("name") for v in pod["spec"].get("volumes") or []
                           if v.get("name") == "spec"), None)
        used = [("ConfigMap", self.world.api.store.get(f"{CONFIGMAPS}/{config_map}"), config_map)]
        if pod["spec"].get("subdomain"):
            used.append(("Service", self.world.api.store.get(f"{SERVICES}/{pod['spec']['subdomain']}"), pod["spec"]["subdomain"]))
        for kind, obj, name in used:
            if obj is not None and owner_uid(obj) != training:
                self.report("never-adopt", f"{stage} pod {pod['metadata']['name']} uses {kind} {name}, which its "
                                           f"training does not own ({'an intruder' if obj['metadata']['uid'] in self.intruders else 'someone else'} made it)")

    def _models_in_use(self, spec: dict) -> list[tuple[str, str]]:
        used = [("the target", (spec.get("target") or {}).get("model") or "")]
        if (spec.get("baseDrafter") or "").startswith("/"):
            used.append(("the base drafter", spec["baseDrafter"]))
        for key, serving in self.world.api.store.items():
            if "/drafterservings/" not in key:
                continue
            s = serving.get("spec") or {}
            what = f"DrafterServing {serving['metadata']['name']}'s"
            used += [(f"{what} target", (s.get("target") or {}).get("model") or ""),
                     (f"{what} drafter", (s.get("drafter") or {}).get("model") or "")]
            used += [(f"{what} revision {r.get('name')}'s drafter", (r.get("drafterSpec") or {}).get("model") or "")
                     for r in (serving.get("status") or {}).get("revisions") or []]
        return [(what, path) for what, path in used if path.startswith("/")]

    # ------------------------------------------------------------------ the periodic look
    def scan(self) -> None:
        w = self.world
        minute = int(w.clock.t // 60)
        if minute == self.last_scan:
            return
        self.last_scan = minute
        now = w.clock.t
        down = w.operator.downtime_since
        while self.deletes and now - self.deletes[0][1] - down(self.deletes[0][1]) > DELETE_BOUND:
            uid, _ = self.deletes.pop(0)
            left = [k for k, o in w.api.store.items() if owner_uid(o) == uid
                    or self.jobs.get(owner_uid(o) or "", (None,))[0] == uid]
            if left:
                self.report("nothing-left", f"{DELETE_BOUND:.0f}s after its owner (uid {uid}) was deleted, these remain: "
                                            f"{', '.join(k.rsplit('/', 2)[1] + '/' + k.rsplit('/', 1)[1] for k in left)[:300]}")
        self._queued_said(now, down)
        self._refusals(now, down)
        self._liveness(now, down)
        self._within_deadlines(now)
        self._resume_said(now, down)
        if w.retraining:
            self._retraining_liveness(now, down)
        for key, obj in list(w.api.store.items()):
            if "/draftertrainings/" not in key and "/drafterbenchmarks/" not in key:
                continue
            meta, status = obj["metadata"], obj.get("status") or {}
            end = status.get("stage") if "/draftertrainings/" in key else status.get("state")
            if end not in ("Succeeded", "Failed") or status.get("observedGeneration") != meta.get("generation"):
                continue
            mark = (meta["uid"], meta.get("generation"), end)
            since = max(self.finished_at.setdefault(mark, now), self.quiet_from)
            if mark in self.judged or now - since - down(since) <= SETTLE:
                continue
            self.judged.add(mark)
            left = [k.rsplit("/", 1)[1] for k, j in w.api.store.items() if "/jobs/" in k and owner_uid(j) == meta["uid"]
                    and job_finished(j) is None]
            if "/draftertrainings/" in key and end == "Succeeded":
                storage = ((obj.get("spec") or {}).get("hiddenStates") or {}).get("storage") or {}
                if not storage.get("claimName") and not storage.get("retain"):
                    left += [k.rsplit("/", 1)[1] for k, c in w.api.store.items()
                             if "/persistentvolumeclaims/" in k and owner_uid(c) == meta["uid"]]
            if left:
                self.report("nothing-left", f"{meta['name']} ended {end} {now - since:.0f}s ago and "
                                            f"{', '.join(left)[:300]} remain")


    def _queued_said(self, now: float, down) -> None:
        """A training whose running stage's Job has waited in its Kueue queue for QUEUED_BOUND says Queued."""
        w = self.world
        for key, job in w.api.store.items():
            uid = job["metadata"]["uid"]
            if "/jobs/" not in key or not job["spec"].get("suspend") or uid not in self.created_at:
                continue
            since = max(self.created_at[uid], self.quiet_from)
            if now - since - down(since) <= QUEUED_BOUND:
                continue
            training = w.api.store.get(w.api.by_uid.get(owner_uid(job) or "", ""), {})
            status = training.get("status") or {}
            found = GENERATION.search(job["metadata"]["name"])
            if status.get("jobName") != job["metadata"]["name"] or training["metadata"].get("deletionTimestamp") \
                    or not found or status.get("observedGeneration") != int(found.group(1)) \
                    or status.get("stage") in ("Failed", "Succeeded"):
                continue  # the status speaks of another generation (an invalid edit stops the run), or the run ended
            ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
            if ready.get("reason") != "Queued":
                self.report("queued-said", f"{training['metadata']['name']}'s {job['metadata']['name']} has waited in "
                                           f"its queue {now - since:.0f}s and Ready says {ready.get('reason')}: "
                                           f"{ready.get('message')}")


    def refused_by_policy(self, spec: dict) -> bool:
        """The administrator's allow-list (the world's now) refuses an image the spec runs."""
        from drafter_testbed.simulation.batch_hazards import POLICIES, TRAINER
        images = [spec.get("image") or TRAINER]
        generation = (spec.get("data") or {}).get("generation")
        if generation:
            images.append(generation.get("image") or DEFAULT_IMAGES[generation.get("engine") or "sglang"])
        return any(not image.startswith(POLICIES[self.world.policy].image_prefixes) for image in images)

    def _refusals(self, now: float, down) -> None:
        """A refused training (its images outside the allow-list, or its status saying InvalidSpec) holds nothing
        that runs once REFUSED_BOUND has passed: no running stage pod, unfinished stage Job or engine; and says
        InvalidSpec. Refused by the allow-list only, it resumes within LIFTED_BOUND of the list allowing it."""
        from drafter_operator.api import DrafterTraining
        w = self.world
        for key, body in list(w.api.store.items()):
            if "/draftertrainings/" not in key or body["metadata"].get("deletionTimestamp"):
                continue
            meta, status, spec = body["metadata"], body.get("status") or {}, body.get("spec") or {}
            uid = meta["uid"]
            ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
            said = ready.get("reason") == "InvalidSpec" and status.get("observedGeneration") == meta.get("generation")
            by_policy = self.refused_by_policy(spec)
            if by_policy or said:
                self.lifted_since.pop(uid, None)
                since = max(self.refused_since.setdefault(uid, now), self.quiet_from, self.spec_changed_at.get(uid, 0.0))
                if now - since - down(since) <= REFUSED_BOUND:
                    continue
                held = [k.rsplit("/", 1)[1] for k, o in w.api.store.items() if not o["metadata"].get("deletionTimestamp") and (
                    ("/jobs/" in k and owner_uid(o) == uid and job_finished(o) is None)
                    or ("/deployments/" in k and owner_uid(o) == uid)
                    or ("/pods/" in k and self.jobs.get(owner_uid(o) or "", (None,))[0] == uid
                        and (o.get("status") or {}).get("phase") == "Running"))]
                if held:
                    self.report("refused-stops", f"{meta['name']} has been refused for {now - since:.0f}s and still "
                                                 f"holds {', '.join(sorted(held))[:300]}")
                if by_policy and not said:
                    self.report("refused-stops", f"{meta['name']}'s images are refused by the allow-list for "
                                                 f"{now - since:.0f}s and Ready says {ready.get('reason')}: {ready.get('message')}")
                continue
            self.refused_since.pop(uid, None)
            if not (said and status.get("stage") == "Failed"):
                self.lifted_since.pop(uid, None)
                continue
            try:
                DrafterTraining.model_validate(body)
            except ValueError:
                continue  # the models refuse it: it stays refused
            since = max(self.lifted_since.setdefault(uid, now), self.quiet_from, self.spec_changed_at.get(uid, 0.0))
            if now - since - down(since) > LIFTED_BOUND:
                self.report("refused-stops", f"{meta['name']}'s spec has been allowed again for {now - since:.0f}s "
                                             "and the run has not resumed: it still says InvalidSpec")
                self.lifted_since[uid] = now

    def _liveness(self, now: float, down) -> None:
        """Every unfinished training's status moves (its stage, its Job or its Ready reason) within LIVENESS_BOUND,
        but while a person must act (NameConflict: someone else's object holds a child's name)."""
        w = self.world
        for key, body in list(w.api.store.items()):
            if "/draftertrainings/" not in key or body["metadata"].get("deletionTimestamp"):
                continue
            meta, status = body["metadata"], body.get("status") or {}
            ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
            if status.get("stage") in ("Succeeded", "Failed") and status.get("observedGeneration") == meta.get("generation") \
                    or ready.get("reason") == "NameConflict" and self._intruded():
                self.live.pop(meta["uid"], None)
                continue
            if ready.get("reason") == "NameConflict":  # with nobody else's object about: a conflict it made up
                since = max(self.live.setdefault(meta["uid"], (("conflict",), now))[1], self.quiet_from)
                if now - since - down(since) > NAME_CONFLICT_BOUND:
                    self.report("never-adopt", f"{meta['name']} has said NameConflict for {now - since:.0f}s with no "
                                               f"object of someone else's about: {ready.get('message')}"[:400])
                    self.live[meta["uid"]] = (("conflict",), now)
                continue
            state = (meta.get("generation"), status.get("stage"), status.get("jobName"), ready.get("reason"))
            mark = self.live.get(meta["uid"])
            if mark is None or mark[0] != state:
                self.live[meta["uid"]] = (state, now)
                continue
            since = max(mark[1], self.quiet_from)
            if now - since - down(since) > LIVENESS_BOUND:
                self.report("ends-or-changes", f"{meta['name']} has said stage {state[1]} (Job {state[2]}, Ready "
                                               f"{state[3]}) for {now - since:.0f}s, past its stage's deadline")
                self.live[meta["uid"]] = (state, now)

    # ------------------------------------------------------------------ spec.retraining
    def retrain_requested(self, value: str) -> None:
        """A person set drafter.dev/retrain to ``value`` (the world's values are fresh)."""
        self.request_pending = (value, self.world.clock.t)

    def _serving(self) -> dict:
        from drafter_testbed.simulation.batch import SERVING, SERVINGS
        return self.world.api.store[f"{SERVINGS}/{SERVING}"]

    def _retrainings(self) -> list[dict]:
        """The trainings the serving started, as stored (its label and its uid as their owner)."""
        serving = self._serving()
        name, uid = serving["metadata"]["name"], serving["metadata"]["uid"]
        return [o for k, o in self.world.api.store.items() if "/draftertrainings/" in k
                and (o["metadata"].get("labels") or {}).get(RETRAINING_LABEL) == name and owner_uid(o) == uid]

    def _unfinished(self, body: dict) -> bool:
        """Not at a finished stage, or stopped by a refused spec before it ended (it resumes by itself once the spec is
        allowed): a training ends when it is seen Succeeded, or Failed for another reason than its refused spec."""
        return (body.get("status") or {}).get("stage") not in FINISHED_STAGES or \
            (self._refused(body) and body["metadata"]["name"] not in self.retraining_ended)

    @staticmethod
    def _refused(body: dict) -> bool:
        """A training stopped by a refused spec (Failed, Ready InvalidSpec): it resumes once the spec is allowed."""
        ready = next((c for c in (body.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), {})
        return ready.get("reason") == "InvalidSpec"

    def _retraining_written(self, actor, old: dict | None, new: dict | None) -> None:
        """A training the serving started was created, written or deleted."""
        was_unfinished = old is not None and self._unfinished(old)
        if new is not None and (new.get("status") or {}).get("stage") in FINISHED_STAGES and not self._refused(new):
            self.retraining_ended.add(new["metadata"]["name"])
        elif new is not None and (new.get("status") or {}).get("stage") not in FINISHED_STAGES:
            self.retraining_ended.discard(new["metadata"]["name"])
        if old is None and new is not None:
            self._retraining_started(new)
        elif new is not None and self._unfinished(new) and not was_unfinished:
            running = [o["metadata"]["name"] for o in self._retrainings() if self._unfinished(o)]
            if len(running) > 1:
                self.report("retrains-one-at-a-time", f"{new['metadata']['name']} runs again (stage "
                                                      f"{(new.get('status') or {}).get('stage')}) beside "
                                                      f"{', '.join(n for n in running if n != new['metadata']['name'])}")
        if old is not None and actor == "operator" and (new is None or (new["metadata"].get("deletionTimestamp")
                                                        and not old["metadata"].get("deletionTimestamp"))):
            self._retraining_trimmed(old)

    def _retraining_trimmed(self, old: dict) -> None:
        """The operator deletes only a finished training, and only one with historyLimit newer finished ones kept."""
        name = old["metadata"]["name"]
        if self._unfinished(old):
            self.report("retraining-history-bounded", f"the operator deleted {name}, which had not finished (stage "
                                                      f"{(old.get('status') or {}).get('stage')})")
            return
        limit = ((self._serving().get("spec") or {}).get("retraining") or {}).get("historyLimit", 3)
        newer = [o["metadata"]["name"] for o in self._retrainings() if not self._unfinished(o)
                 and _run_number(o["metadata"]["name"]) > _run_number(name)]
        if len(newer) < limit:
            self.report("retraining-history-bounded", f"the operator deleted {name} though only {len(newer)} newer "
                                                      f"finished training(s) are kept ({', '.join(newer) or 'none'}); "
                                                      f"historyLimit is {limit}")

    def _retraining_started(self, body: dict) -> None:
        meta = body["metadata"]
        name, annotations = meta["name"], meta.get("annotations") or {}
        created = (timestamps.parse(meta["creationTimestamp"]) - T0).total_seconds()
        trigger, request = annotations.get(RETRAINING_TRIGGER_ANNOTATION), annotations.get(RETRAIN_ANNOTATION)
        starts = self.retraining_starts
        if name in starts:
            self.report("retrains-once-per-request", f"{name} was created again: its run number was used before")
        if request and any(r == request for _, _, r in starts.values()):
            self.report("retrains-once-per-request", f"{name} starts a second training for drafter.dev/retrain={request}")
        cooldown = parse_duration(((self._serving().get("spec") or {}).get("retraining") or {}).get("cooldown") or "24h")
        last = max((t for t, _, _ in starts.values()), default=None)
        if trigger in AUTOMATIC and last is not None and created - last < cooldown:
            self.report("retrains-after-cooldown", f"{name} ({trigger}) started {created - last:.0f}s after the previous "
                                                   f"start, within the cooldown of {cooldown:.0f}s")
        running = [o["metadata"]["name"] for o in self._retrainings() if o["metadata"]["name"] != name and self._unfinished(o)]
        if running:
            self.report("retrains-one-at-a-time", f"{name} ({trigger}) was created while {', '.join(running)} had not "
                                                  "finished")
        starts[name] = (created, trigger, request)
        if self.request_pending and self.request_pending[0] == request:
            self.request_pending = None

    def _retraining_status(self, serving: dict) -> None:
        """status.retraining.history names only trainings the serving started."""
        history = ((serving.get("status") or {}).get("retraining") or {}).get("history") or []
        invented = [h.get("name") for h in history if h.get("name") not in self.retraining_starts]
        if invented:
            self.report("retraining-history-real", f"status.retraining.history names {', '.join(map(str, invented))}, "
                                                   "which the serving never started")

    def _retraining_liveness(self, now: float, down) -> None:
        """The finished trainings beyond historyLimit go within HISTORY_BOUND; a request no training runs for starts
        one within REQUEST_BOUND once none is unfinished (allowing for downtime and the scenario's faults)."""
        retraining = (self._serving().get("spec") or {}).get("retraining")
        if not retraining:
            return
        trainings = self._retrainings()
        finished = sorted(o["metadata"]["name"] for o in trainings if not self._unfinished(o))
        limit = retraining.get("historyLimit", 3)
        if len(finished) > limit:
            since = max(self.history_over_since if self.history_over_since is not None else now, self.quiet_from)
            self.history_over_since = since
            if now - since - down(since) > HISTORY_BOUND:
                self.report("retraining-history-bounded", f"{len(finished)} finished trainings ({', '.join(finished)}) "
                                                          f"have been kept {now - since:.0f}s; historyLimit is {limit}")
                self.history_over_since = now
        else:
            self.history_over_since = None
        if self.request_pending is None:
            return
        value, since = self.request_pending
        if any(self._unfinished(o) for o in trainings):
            self.request_pending = (value, now)  # one at a time: it waits for the one running
            return
        since = max(since, self.quiet_from)
        if now - since - down(since) > REQUEST_BOUND:
            self.report("retrain-request-starts", f"drafter.dev/retrain={value} has waited {now - since:.0f}s with no "
                                                  f"training running, and none started: "
                                                  f"{(((self._serving().get('status') or {}).get('retraining')) or {}).get('waiting')}")
            self.request_pending = None

    def _intruded(self) -> bool:
        """An object an intruder made under a training's child names is still there."""
        return any(uid in self.world.api.by_uid for uid in self.intruders)

    def _resume_said(self, now: float, down) -> None:
        """A Train pod that resumed from a checkpoint has its training's status.progress say from which step."""
        w = self.world
        for key, (start, started, job_uid) in list(self.train_pods.items()):
            pod = w.api.store.get(key)
            if pod is None or (pod.get("status") or {}).get("phase") != "Running" or pod["metadata"].get("deletionTimestamp"):
                self.train_pods.pop(key, None)
                continue
            since = max(started, self.quiet_from)
            index = (pod["metadata"].get("annotations") or {}).get("batch.kubernetes.io/job-completion-index")
            if start <= 0 or index not in (None, "0") or now - since - down(since) <= RESUME_SAID_BOUND:
                continue
            self.train_pods.pop(key, None)
            training = w.api.store.get(w.api.by_uid.get(self.jobs.get(job_uid, (None,))[0] or "", ""), {})
            status = training.get("status") or {}
            job = w.api.store.get(w.api.by_uid.get(job_uid, ""), {})
            if not training or status.get("jobName") != (job.get("metadata") or {}).get("name"):
                continue
            said = (status.get("progress") or {}).get("resumedFromStep")
            if said != start:
                self.report("resume-said", f"{training['metadata']['name']}'s Train resumed from step {start} "
                                           f"{now - started:.0f}s ago and status.progress says {status.get('progress')}")


# ---------------------------------------------------------------------------------------------- the invariants
def _taker(name: str):
    def invariant(world) -> list[str]:
        return world.track.take(name)
    invariant.__name__ = name.replace("-", "_")
    return invariant


def nothing_left(world) -> list[str]:
    world.track.scan()
    return world.track.take("nothing-left")


INVARIANTS = {
    "nothing-left": nothing_left,
    "user-claims-kept": _taker("user-claims-kept"),
    "claim-not-in-use": _taker("claim-not-in-use"),
    "one-stage-at-a-time": _taker("one-stage-at-a-time"),
    "no-repeated-stage": _taker("no-repeated-stage"),
    "writes-allowed": _taker("writes-allowed"),
    "own-stages-only": _taker("own-stages-only"),
    "names-fit": _taker("names-fit"),
    "queued-stages-wait": _taker("queued-stages-wait"),
    "queued-said": _taker("queued-said"),
    "refused-stops": _taker("refused-stops"),
    "disrupted-resumes": _taker("disrupted-resumes"),
    "resumes-from-checkpoint": _taker("resumes-from-checkpoint"),
    "resume-said": _taker("resume-said"),
    "ends-or-changes": _taker("ends-or-changes"),
    "never-adopt": _taker("never-adopt"),
    "retrains-one-at-a-time": _taker("retrains-one-at-a-time"),
    "retrains-once-per-request": _taker("retrains-once-per-request"),
    "retrains-after-cooldown": _taker("retrains-after-cooldown"),
    "retraining-history-bounded": _taker("retraining-history-bounded"),
    "retraining-history-real": _taker("retraining-history-real"),
    "retrain-request-starts": _taker("retrain-request-starts"),
}
