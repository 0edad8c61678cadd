"""The Service: the pointer that sends a DrafterServing's traffic to one revision (pure).

Its selector names the active revision; its annotations record the last switch (the revision traffic
left and when), so a restarted operator finds a drain in progress there. Its port is fixed for the
serving's life.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Mapping

from drafter_operator import engines, timestamps
from drafter_operator.controllers.serving.observe import Observed
from drafter_operator.controllers.plan import Write
from drafter_operator.controllers.serving.patches import adopt
from drafter_operator.kube import object_path
from drafter_operator.resources.engine import service_revision, serving_service
from drafter_operator.constants import DRAINS_ANNOTATION, PREVIOUS_REVISION_ANNOTATION, SWITCHED_AT_ANNOTATION

SWITCH_ANNOTATIONS = (PREVIOUS_REVISION_ANNOTATION, SWITCHED_AT_ANNOTATION, DRAINS_ANNOTATION)


def switch_record(service: dict | None) -> dict:
    """The Service's annotations: among them the last switch (PREVIOUS_REVISION_ANNOTATION, SWITCHED_AT_ANNOTATION)."""
    return ((service or {}).get("metadata") or {}).get("annotations") or {}


def pointer_write(serving, owner: dict, observed: Observed, revision: str | None, switched_from: str | None,
                  port: int, now: dt.datetime, still_draining: Mapping[str, dt.datetime] | None = None) -> Write | None:
    """Point the Service at ``revision`` (None: leave it), recording the switch when traffic moves now, with the
    earlier revisions that still drain (``still_draining``)."""
    if not revision:
        return None
    record = {k: v for k, v in switch_record(observed.service).items() if k in SWITCH_ANNOTATIONS}
    if switched_from:
        drains = {**(still_draining or {}), switched_from: now}
        record = {PREVIOUS_REVISION_ANNOTATION: switched_from, SWITCHED_AT_ANNOTATION: timestamps.format_seconds(now),
                  DRAINS_ANNOTATION: json.dumps({name: timestamps.format_seconds(at) for name, at in sorted(drains.items())},
                                                separators=(",", ":"))}
    return service_write(owner, serving_service(serving, revision, port, record), observed.service)


def service_write(owner: dict, manifest: dict, existing: dict | None) -> Write | None:
    adopt(manifest, owner)
    namespace = manifest["metadata"]["namespace"]
    if existing is None:
        return Write("create", "services", object_path("v1", "services", namespace), manifest)
    annotations = existing["metadata"].get("annotations") or {}
    if existing["spec"].get("selector") != manifest["spec"]["selector"] or \
            [p.get("port") for p in existing["spec"].get("ports", [])] != [p["port"] for p in manifest["spec"]["ports"]] \
            or any(annotations.get(k) != v for k, v in manifest["metadata"]["annotations"].items()):
        return Write("patch", "services", object_path("v1", "services", namespace, manifest["metadata"]["name"]), {
            "metadata": {"annotations": manifest["metadata"]["annotations"]},
            "spec": {"selector": manifest["spec"]["selector"], "ports": manifest["spec"]["ports"]}})
    return None


def published_port(service: dict | None, status: dict, engine_port: int) -> int:
    """The port the serving's Service publishes, fixed for the serving's life (pure): the Service's own
    port once it exists, else the one status.endpoint already announced, else the engine's default at
    the first rollout. Clients hold the URL; an engine switch (vLLM 8000, SGLang 30000) must not move
    it, and need not: the Service targets the engine container's port by name."""
    ports = ((service or {}).get("spec") or {}).get("ports") or []
    if ports and isinstance(ports[0].get("port"), int):
        return ports[0]["port"]
    announced = (status.get("endpoint") or {}).get("port")
    return announced if isinstance(announced, int) else engine_port


def recorded_drains(service: dict | None) -> dict[str, dt.datetime]:
    """The revisions traffic left that the Service's last switch recorded as draining, with when traffic left
    each (pure); an unreadable record (edited by hand) is none."""
    try:
        recorded = json.loads(switch_record(service).get(DRAINS_ANNOTATION) or "{}")
    except ValueError:
        return {}
    if not isinstance(recorded, dict):
        return {}
    left = {name: timestamps.parse_aware(at) for name, at in recorded.items() if isinstance(name, str)}
    return {name: at for name, at in left.items() if at is not None}


def draining_revisions(observed: Observed) -> list[str]:
    """The revisions traffic left at the last switch, or at an earlier one, while their Deployments remain (pure):
    those whose engines the serving loop asks for their requests in flight before deciding. The Service records
    each switch with the pointer itself, so a restarted operator finds them there."""
    service = observed.service or {}
    previous = switch_record(service).get(PREVIOUS_REVISION_ANNOTATION)
    active = service_revision(service) if service else None
    left = set(recorded_drains(service)) | ({previous} if previous else set())
    return sorted(name for name in left if name != active and name in observed.deployments)


def revision_engine(serving: dict, revision: str) -> str:
    """The engine a revision runs, from its record (after an engine switch the spec names the new one)."""
    status = serving.get("status") or {}
    record = next((r for r in status.get("revisions") or [] if r.get("name") == revision), {})
    return record.get("engine") or (serving.get("spec") or {}).get("engine") or engines.DEFAULT_ENGINE


