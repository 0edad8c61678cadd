"""The Service: the pointer that sends a DrafterServing's traffic to one revision (pure).

Its selector names the active revision; its annotations record the last switch (the revision traffic
left and when), so a restarted operator finds a drain in progress there. Its port is fixed for the
serving's life.
"""

from __future__ import annotations

import datetime as dt

from drafter_operator import timestamps
from drafter_operator.controllers.serving_observe import Observed
from drafter_operator.controllers.serving_patches import Write, adopt
from drafter_operator.kube import object_path
from drafter_operator.resources.engine import service_revision, serving_service
from drafter_operator.constants import PREVIOUS_REVISION_ANNOTATION, SWITCHED_AT_ANNOTATION


def switch_record(service: dict | None) -> dict:
    """The Service's annotations: among them the last switch (PREVIOUS_REVISION_ANNOTATION, SWITCHED_AT_ANNOTATION)."""
    return ((service or {}).get("metadata") or {}).get("annotations") or {}


def pointer_write(serving, owner: dict, observed: Observed, revision: str | None, switched_from: str | None,
                  port: int, now: dt.datetime) -> Write | None:
    """Point the Service at ``revision`` (None: leave it), recording the switch when traffic moves now."""
    if not revision:
        return None
    record = {k: v for k, v in switch_record(observed.service).items()
              if k in (PREVIOUS_REVISION_ANNOTATION, SWITCHED_AT_ANNOTATION)}
    if switched_from:
        record = {PREVIOUS_REVISION_ANNOTATION: switched_from, SWITCHED_AT_ANNOTATION: timestamps.format_seconds(now)}
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


def draining_revision(observed: Observed) -> str | None:
    """The revision traffic left at the last switch while its Deployment remains (pure): the one whose
    engines the serving loop asks for their requests in flight before deciding. The Service records the
    switch with the pointer itself, so a restarted operator finds it there."""
    service = observed.service or {}
    previous = ((service.get("metadata") or {}).get("annotations") or {}).get(PREVIOUS_REVISION_ANNOTATION)
    active = service_revision(service) if service else None
    return previous if previous and previous != active and previous in observed.deployments else None


def revision_engine(serving: dict, revision: str) -> str:
    """The engine a revision runs, from its record (after an engine switch the spec names the new one)."""
    status = serving.get("status") or {}
    record = next((r for r in status.get("revisions") or [] if r.get("name") == revision), {})
    return record.get("engine") or (serving.get("spec") or {}).get("engine") or "vllm"


