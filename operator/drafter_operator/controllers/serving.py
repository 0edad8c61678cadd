"""Reconcile one DrafterServing: observe its revisions, plan the swap (swap.py), act, report status.

Called by the kopf handlers on create/update/resume and by a timer; idempotent, and safe to run from
a restarted operator in the middle of a swap (the Service is the pointer to the active revision).
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from dataclasses import dataclass, field
from typing import Callable, Iterable

import kopf
import pydantic

from drafter_operator import engines
from drafter_operator.api import DrafterServing, parse_duration, serving_problems
from drafter_operator.controllers import compatibility, conditions
from drafter_operator.controllers.revisions import drafter_summary, revision_hash
from drafter_operator.controllers.swap import RevisionObservation, SwapInput, SwapPlan, Verdict, plan_swap
from drafter_operator.kube import Kube, object_path
from drafter_operator.monitoring import operator_metrics as metrics
from drafter_operator.resources.engine import (
    PREVIOUS_REVISION_ANNOTATION,
    SWITCHED_AT_ANNOTATION,
    engine_deployment,
    engine_pod_spec,
    service_revision,
    serving_service,
)
from drafter_operator.resources.labels import REVISION_LABEL, deployment_name

log = logging.getLogger("drafter.serving")

GROUP_VERSION = "drafter.dev/v1alpha1"
PLURAL = "drafterservings"
# (type, reason, message) -> posts a Kubernetes Event on the DrafterServing
EventSink = Callable[[str, str, str], None]


def parse_time(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def now_utc() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def iso(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Observed:
    deployments: dict[str, dict] = field(default_factory=dict)  # revision -> Deployment
    revisions: dict[str, RevisionObservation] = field(default_factory=dict)
    service: dict | None = None


def observed_from(deployments: Iterable[dict], pods: Iterable[dict], service: dict | None) -> Observed:
    """Group a serving's Deployments and pods (from the operator's kopf indexes) by revision (pure)."""
    pods = list(pods)
    observed = Observed(service=service)
    for deployment in deployments:
        revision = deployment["metadata"]["labels"].get(REVISION_LABEL)
        if not revision or deployment["metadata"].get("deletionTimestamp"):
            continue
        own = [p for p in pods if p["metadata"].get("labels", {}).get(REVISION_LABEL) == revision]
        unschedulable = next((c.get("message") for p in own for c in p.get("status", {}).get("conditions") or []
                              if c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"), None)
        observed.deployments[revision] = deployment
        observed.revisions[revision] = RevisionObservation(
            name=revision, replicas=deployment["spec"].get("replicas", 1),
            ready=deployment.get("status", {}).get("readyReplicas", 0) if _current(deployment) else 0,
            pods=len(own), created=parse_time(deployment["metadata"]["creationTimestamp"]),
            unschedulable=unschedulable)
    return observed


def _current(deployment: dict) -> bool:
    """readyReplicas only counts once the Deployment controller has seen the latest spec."""
    return deployment.get("status", {}).get("observedGeneration", 0) >= deployment["metadata"].get("generation", 0)


@dataclass
class ServingReconciler:
    kube: Kube
    default_images: dict[str, str] = field(default_factory=lambda: dict(engines.DEFAULT_IMAGES))
    clock: Callable[[], dt.datetime] = now_utc
    drain: dt.timedelta = dt.timedelta(seconds=15)
    _locks: dict[str, threading.Lock] = field(default_factory=dict)
    _guard: threading.Lock = field(default_factory=threading.Lock)

    def _lock(self, key: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(key, threading.Lock())

    def reconcile(self, body: dict, post_event: EventSink, observed: Observed) -> None:
        """`observed`: the serving's children as the operator's watches (kopf indexes) see them."""
        key = f"{body['metadata']['namespace']}/{body['metadata']['name']}"
        with self._lock(key), metrics.reconcile_timer("DrafterServing"):
            self._reconcile(body, post_event, observed)

    def _reconcile(self, body: dict, post_event: EventSink, observed: Observed) -> None:
        meta = body["metadata"]
        namespace, name, generation = meta["namespace"], meta["name"], meta.get("generation")
        status = body.get("status") or {}
        try:
            serving = DrafterServing.model_validate(body)
        except pydantic.ValidationError as exc:
            self._write_invalid(body, status, [f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()],
                                post_event)
            return
        problems = serving_problems(serving.spec)
        if problems:
            self._write_invalid(body, status, problems, post_event)
            return
        spec = serving.spec
        engine = engines.engine(spec.engine)
        image = spec.image or self.default_images[spec.engine]
        desired = revision_hash(spec, image)
        now = self.clock()

        known_bad = compatibility.matching_known_bad(spec, image)
        blocked = bool(known_bad) and not spec.drafter.allow_known_bad
        compatible = _compatibility_verdict(known_bad, blocked)

        active = service_revision(observed.service) if observed.service else status.get("activeRevision")
        if active is not None and active not in observed.revisions and active != desired:
            active = None  # its Deployment is gone: nothing left to protect or fall back to
        failed = frozenset(r["name"] for r in status.get("revisions") or [] if r.get("good") is False)
        switch_record = ((observed.service or {}).get("metadata") or {}).get("annotations") or {}
        switched_at = switch_record.get(SWITCHED_AT_ANNOTATION)

        if blocked and active is None:
            plan = SwapPlan(ready=Verdict("False", "KnownBadCombination", compatible.message),
                            progressing=Verdict("False", "Blocked", "spec.drafter.allowKnownBad is false"))
        else:
            plan = plan_swap(SwapInput(
                desired=active if blocked else desired, strategy=spec.swap.strategy, replicas=spec.replicas,
                startup_timeout=dt.timedelta(seconds=parse_duration(spec.startup.timeout)), active=active,
                failed=failed, revisions=observed.revisions, now=now,
                previous=switch_record.get(PREVIOUS_REVISION_ANNOTATION),
                switched_at=parse_time(switched_at) if switched_at else None, drain=self.drain))

        revisions = _updated_revisions(status.get("revisions") or [], desired, spec, now, plan)
        if revisions != status.get("revisions") and (plan.mark_failed or plan.mark_good):
            # Record the verdict before acting on it, so a restart never retries a failed revision.
            self._patch_status(namespace, name, {"revisions": revisions})
            status = {**status, "revisions": revisions}

        argv = engine.render_command(spec)
        pod_spec = engine_pod_spec(serving, image, argv, engine.DEFAULT_PORT, engine.HEALTH_PATH, engine.READINESS_PATH)
        for revision, replicas in plan.scale.items():
            if revision == desired:
                self._ensure_deployment(body, engine_deployment(
                    serving, revision, replicas, pod_spec,
                    annotations={"drafter.dev/drafter": drafter_summary(spec), "drafter.dev/engine": spec.engine}),
                    observed.deployments.get(revision))
            elif revision in observed.deployments:
                self._scale(namespace, observed.deployments[revision], replicas)

        if plan.service_revision:
            record = {k: v for k, v in switch_record.items() if k in (PREVIOUS_REVISION_ANNOTATION, SWITCHED_AT_ANNOTATION)}
            if plan.switched_from:
                record = {PREVIOUS_REVISION_ANNOTATION: plan.switched_from, SWITCHED_AT_ANNOTATION: iso(now)}
            self._ensure_service(body, serving_service(serving, plan.service_revision, engine.DEFAULT_PORT, record),
                                 observed.service)

        new_status = {
            "observedGeneration": generation,
            "activeRevision": plan.active,
            "previousRevision": plan.switched_from or status.get("previousRevision"),
            "revisions": revisions,
            "endpoint": {"host": f"{name}.{namespace}.svc.cluster.local", "port": engine.DEFAULT_PORT,
                         "url": f"http://{name}.{namespace}.svc.cluster.local:{engine.DEFAULT_PORT}/v1"},
            "conditions": conditions.merge(status.get("conditions"), [
                ("Ready", plan.ready), ("Progressing", plan.progressing), ("DrafterCompatible", compatible),
            ], generation, now),
        }
        self._patch_status(namespace, name, _changed(status, new_status))

        for revision in plan.delete:
            if revision in observed.deployments:
                self.kube.delete(object_path("apps/v1", "deployments", namespace, deployment_name(name, revision)))
        posted = {reason for _, reason, _ in plan.events}
        for kind, reason, message in plan.events + _transition_events(status.get("conditions"), new_status["conditions"]):
            if reason not in posted or (kind, reason, message) in plan.events:
                post_event(kind, reason, message)
        if plan.switched_from:
            metrics.swap(namespace, name, spec.engine, spec.swap.strategy)
        if plan.mark_failed and active is not None:
            metrics.rollback(namespace, name, spec.engine)
        if compatible.status == "False" and _transitioned(status, "DrafterCompatible", "False"):
            post_event("Warning", compatible.reason, compatible.message)

    # ---- writes ----
    def _ensure_deployment(self, owner: dict, manifest: dict, existing: dict | None) -> None:
        _adopt(manifest, owner)
        path = object_path("apps/v1", "deployments", manifest["metadata"]["namespace"])
        if existing is None:
            self.kube.create(path, manifest)
            return
        current = existing["spec"]
        if current.get("replicas") != manifest["spec"]["replicas"] or \
                _template_differs(current["template"], manifest["spec"]["template"]):
            self.kube.patch(f"{path}/{manifest['metadata']['name']}", {"spec": {
                "replicas": manifest["spec"]["replicas"], "template": manifest["spec"]["template"],
                "progressDeadlineSeconds": manifest["spec"]["progressDeadlineSeconds"]}})

    def _scale(self, namespace: str, deployment: dict, replicas: int) -> None:
        if deployment["spec"].get("replicas") != replicas:
            self.kube.patch(object_path("apps/v1", "deployments", namespace, deployment["metadata"]["name"]),
                            {"spec": {"replicas": replicas}})

    def _ensure_service(self, owner: dict, manifest: dict, existing: dict | None) -> None:
        _adopt(manifest, owner)
        namespace = manifest["metadata"]["namespace"]
        if existing is None:
            self.kube.create(object_path("v1", "services", namespace), manifest)
        else:
            annotations = existing["metadata"].get("annotations") or {}
            if existing["spec"].get("selector") != manifest["spec"]["selector"] or \
                    [p.get("port") for p in existing["spec"].get("ports", [])] != [p["port"] for p in manifest["spec"]["ports"]] \
                    or any(annotations.get(k) != v for k, v in manifest["metadata"]["annotations"].items()):
                self.kube.patch(object_path("v1", "services", namespace, manifest["metadata"]["name"]), {
                    "metadata": {"annotations": manifest["metadata"]["annotations"]},
                    "spec": {"selector": manifest["spec"]["selector"], "ports": manifest["spec"]["ports"]}})

    def _patch_status(self, namespace: str, name: str, status: dict) -> None:
        if status:
            self.kube.patch(object_path(GROUP_VERSION, PLURAL, namespace, name, "status"), {"status": status})

    def _write_invalid(self, body: dict, status: dict, problems: list[str], post_event: EventSink) -> None:
        meta = body["metadata"]
        message = "; ".join(problems)
        new_status = {"observedGeneration": meta.get("generation"), "conditions": conditions.merge(
            status.get("conditions"), [("Ready", Verdict("False", "InvalidSpec", message)),
                                       ("Progressing", Verdict("False", "InvalidSpec", "fix the spec to continue"))],
            meta.get("generation"), self.clock())}
        changed = _changed(status, new_status)
        self._patch_status(meta["namespace"], meta["name"], changed)
        if "conditions" in changed:
            post_event("Warning", "InvalidSpec", message)


def _compatibility_verdict(known_bad: list[compatibility.KnownBad], blocked: bool) -> Verdict:
    if not known_bad:
        return Verdict("True", "NoKnownIssues", "no known-bad entry matches this engine, drafter method and target")
    entry = known_bad[0]
    action = "blocked by spec.drafter.allowKnownBad: false" if blocked else "serving anyway (warning)"
    return Verdict("False", "KnownBadCombination",
                   f"{entry.id}: {entry.reason} Observed: {entry.observed}. See {entry.link}. {action}")


def _updated_revisions(revisions: list[dict], desired: str, spec, now: dt.datetime, plan: SwapPlan) -> list[dict]:
    out = [dict(r) for r in revisions]
    if not any(r["name"] == desired for r in out):
        out.append({"name": desired, "drafter": drafter_summary(spec), "engine": spec.engine, "since": iso(now)})
    for r in out:
        if r["name"] == plan.mark_good:
            r["good"] = True
        if r["name"] == plan.mark_failed:
            r["good"] = False
    return out[-10:]  # bounded history, newest last


# Transitions worth an Event (the rest are visible in the conditions alone).
_NORMAL_REASONS = {"EngineReady", "RevisionStarting", "RevisionActive"}


def _transition_events(before: list[dict] | None, after: list[dict]) -> list[tuple[str, str, str]]:
    """An Event for each Ready/Progressing condition whose status or reason changed."""
    old = {c["type"]: c for c in before or []}
    events = []
    for cond in after:
        if cond["type"] not in ("Ready", "Progressing"):
            continue
        prior = old.get(cond["type"], {})
        if (prior.get("status"), prior.get("reason")) != (cond["status"], cond["reason"]):
            kind = "Normal" if cond["reason"] in _NORMAL_REASONS else "Warning"
            events.append((kind, cond["reason"], f"{cond['type']}={cond['status']}: {cond['message']}"))
    return events


def _changed(current: dict, desired: dict) -> dict:
    return {k: v for k, v in desired.items() if current.get(k) != v}


def _transitioned(status: dict, kind: str, to: str) -> bool:
    old = next((c for c in status.get("conditions") or [] if c["type"] == kind), None)
    return old is None or old.get("status") != to


def _template_differs(current: dict, wanted: dict) -> bool:
    """Compare only what we set: the apiserver adds defaults (imagePullPolicy, dnsPolicy, ...)."""
    def subset(want, have) -> bool:
        if isinstance(want, dict):
            return isinstance(have, dict) and all(subset(v, have.get(k)) for k, v in want.items())
        if isinstance(want, list):
            return isinstance(have, list) and len(want) == len(have) and all(map(subset, want, have))
        return want == have or (isinstance(want, (int, str)) and str(want) == str(have))
    return not subset(wanted, current)


def _adopt(manifest: dict, owner: dict) -> None:
    """Owner reference (garbage collection on delete) and namespace; our own labels, not the owner's."""
    kopf.append_owner_reference(manifest, owner=owner)
    kopf.adjust_namespace(manifest, namespace=owner["metadata"]["namespace"], forced=True)
