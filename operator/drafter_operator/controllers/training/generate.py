"""Generate's engine, as pure functions: the Deployment and Service that serve the target while Generate
runs (resources/training_engine.py), created when missing, read until they serve, and deleted whenever
Generate is not the stage running (they hold GPUs).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from drafter_operator.controllers.plan import Write
from drafter_operator.engines import DEFAULT_IMAGES
from drafter_operator.kube import object_path
from drafter_operator.resources.engine import service_url
from drafter_operator.resources.training_engine import engine_name, generation_engine, generation_engine_ready


@dataclass(frozen=True)
class EngineStep:
    """Where Generate's engine stands: its endpoint once it serves, else what it waits for or why it failed."""

    endpoint: str | None = None
    waiting: str | None = None
    failed: str | None = None  # its Deployment gave up (the stage fails)
    writes: list[Write] = field(default_factory=list)  # the engine's Deployment and Service, when missing
    events: list[tuple[str, str, str]] = field(default_factory=list)


def _engine_path(namespace: str, kind: str, name: str | None = None) -> str:
    """The collection (or, with ``name``, object) path of an engine Deployment or Service."""
    plural = "deployments" if kind == "Deployment" else "services"
    return object_path("apps/v1" if plural == "deployments" else "v1", plural, namespace, name)


def idle_engine_deletes(engine: tuple[dict, ...], namespace: str, keep: str | None) -> list[str]:
    """Every engine object but ``keep``'s (the one Generate runs on now; None: Generate is not running)."""
    return [_engine_path(namespace, obj.get("kind"), obj["metadata"]["name"]) for obj in engine
            if not obj["metadata"].get("deletionTimestamp") and obj["metadata"]["name"] != keep]


def engine_step(engine: tuple[dict, ...], namespace: str, name: str, spec, generation: int) -> EngineStep:
    """Generate's engine: created when missing; its endpoint once it serves, else what it waits for, or why
    it failed when its Deployment gave up."""
    own = engine_name(name, generation)
    mine = {obj.get("kind"): obj for obj in engine if obj["metadata"]["name"] == own}
    if not mine:
        image = spec.data.generation.image or DEFAULT_IMAGES[spec.data.generation.engine]
        creates = []
        for manifest in generation_engine(namespace, name, spec, generation, image):
            collection = _engine_path(namespace, manifest["kind"])
            creates.append(Write("create", collection.rsplit("/", 1)[-1], collection, manifest))
        event = ("Normal", "EngineStarting", f"{spec.data.generation.engine} serves the target for Generate as {own}")
        return EngineStep(waiting="waiting for the target's engine to start", writes=creates, events=[event])
    deployment, service = mine.get("Deployment"), mine.get("Service")
    stalled = next((c for c in ((deployment or {}).get("status") or {}).get("conditions") or []
                    if c.get("type") == "Progressing" and c.get("reason") == "ProgressDeadlineExceeded"), None)
    if stalled:
        return EngineStep(failed=f"did not become Ready: {stalled.get('message', '')}")
    url = service_url(service)
    endpoint = f"{url}/v1" if url else None
    if not generation_engine_ready(deployment) or endpoint is None:
        return EngineStep(waiting="waiting for the target's engine to be Ready")
    return EngineStep(endpoint=endpoint)
