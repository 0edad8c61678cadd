"""What must hold for DrafterTraining and DrafterBenchmark in the simulation (batch.py), after every event.

Most are judged the moment a write happens (`BatchTracks.on_write` sees every write, with its actor):
a claim deleted while a pod runs on it, a stage Job created twice or beside another of its generation,
an Export pod starting to write somewhere it must not. The rest look at the store a bounded time after
an end (completion, deletion), allowing for the operator's downtime and for the faults of the scenario.
"""

from __future__ import annotations

import json
import posixpath
import re

from drafter_operator.controllers.conditions import job_finished
from drafter_operator.resources.queueing import QUEUE_LABEL
from drafter_operator.resources.training_job import STAGE_LABEL

from tests.simulation.cluster import owner_uid

JOB_STAGE_CONDITIONS = {"Generate": "Generated", "Extract": "Extracted", "Train": "Trained", "Export": "Exported"}
DELETE_BOUND = 900.0  # a deleted training's or benchmark's Jobs, pods and claim are gone by then
SETTLE = 1800.0  # after a run ends (and any fault of the scenario ends): its leftovers are gone by then
QUEUED_BOUND = 300.0  # a stage Job waiting in its Kueue queue this long: the training's status says Queued
GENERATION = re.compile(r"-g(\d+)$")


def _parts(path: str) -> str:
    return path.rstrip("/")


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
        self.created_at: dict[str, float] = {}  # stage Job uid -> when the operator created it

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
        from tests.simulation.batch import CONFIGMAPS
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
        if plural == "draftertrainings" and new is not None:
            self.specs[(new["metadata"]["uid"], new["metadata"].get("generation") or 1)] = new.get("spec") or {}
            if actor == "operator":
                self._stages_recorded(old, new)
        elif plural == "jobs":
            self._job_written(actor, old, new)
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

    def _stages_recorded(self, old: dict | None, new: dict) -> None:
        """A stage is recorded done only once a Job of this training (this uid) for this generation did it."""
        uid, generation = new["metadata"]["uid"], new["metadata"].get("generation") or 1

        def done(body):
            return {c["type"] for c in ((body or {}).get("status") or {}).get("conditions") or []
                    if c.get("status") == "True" and c.get("observedGeneration") == generation}
        for stage, kind in JOB_STAGE_CONDITIONS.items():
            if kind in done(new) - done(old) and (uid, generation, stage) not in self.completed:
                self.report("own-stages-only", f"{new['metadata']['name']} records {kind} for generation {generation}, "
                                               f"but no {stage} Job of its own (uid {uid}) succeeded")

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
}
