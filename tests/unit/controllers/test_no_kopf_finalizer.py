"""Deletes finish without the operator: kopf puts no finalizer on our objects, and takes away the one an
older operator version (whose serving loop was a kopf daemon) left behind.

kopf adds its finalizer only for a daemon or timer, or for an on.create/update/delete/resume handler that
is not optional, matching the object; it removes it, on the object's next event, when none does. The first
test checks that the operator registers none; the others drive kopf's own event processing (the code that
decides on the finalizer) with an object that carries it.
"""

from __future__ import annotations

import asyncio
import copy

import kopf
import pytest
from kopf._cogs.structs import bodies, patches, references
from kopf._core.actions import lifecycles, loggers
from kopf._core.engines import indexing
from kopf._core.intents import registries
from kopf._core.reactor import inventory, processing

from drafter_operator.constants import API_GROUP, API_VERSION
from drafter_operator.controllers import handlers

KOPF_FINALIZER = kopf.OperatorSettings().persistence.finalizer
OURS = [references.Resource(API_GROUP, API_VERSION, plural)
        for plural in ("drafterservings", "drafterbenchmarks", "draftertrainings")]


def test_kopf_finalizer_is_the_one_older_versions_left():
    assert KOPF_FINALIZER == "kopf.zalando.org/KopfFinalizerMarker"


@pytest.mark.parametrize("resource", OURS, ids=lambda r: r.plural)
def test_no_handler_of_the_operator_makes_kopf_add_its_finalizer(resource):
    registry = registries.get_default_registry()
    assert registry._watching.has_handlers(resource=resource)  # the handlers are registered (imported above)
    assert not registry._spawning.has_handlers(resource=resource), "a kopf daemon or timer: kopf adds its finalizer"
    changing = [h for h in registry._changing.get_all_handlers() if h.selector.check(resource)]
    assert not [h.id for h in changing if h.requires_finalizer], "a non-optional on.create/update/delete/resume"


def _patched_finalizers(registry: registries.OperatorRegistry, metadata: dict) -> list[str]:
    """The object's finalizers after kopf processed one MODIFIED event of it and applied its patch."""
    resource = OURS[0]
    raw = {"apiVersion": f"{resource.group}/{resource.version}", "kind": "DrafterServing",
           "metadata": {"name": "kimi", "namespace": "team", "uid": "u1", "resourceVersion": "7", **metadata}}
    body = bodies.Body(raw)
    patch = patches.Patch(body=body)
    settings = kopf.OperatorSettings()
    logger = loggers.LocalObjectLogger(body=body, settings=settings)

    async def process() -> None:
        await processing.process_resource_causes(
            lifecycle=lifecycles.all_at_once, indexers=indexing.OperatorIndexers(), registry=registry,
            settings=settings, resource=resource, raw_event={"type": "MODIFIED", "object": raw}, body=body,
            patch=patch, memory=inventory.ResourceMemory(), local_logger=logger, event_logger=logger,
            stream_pressure=None, operator_paused=None, consistency_time=None)
    asyncio.run(process())
    patched = copy.deepcopy(raw)
    for fn in patch.fns:
        fn(patched)
    return patched.get("metadata", {}).get("finalizers", [])


def _registry_like_the_operators() -> registries.OperatorRegistry:
    """The operator's daemons, timers and change handlers (whatever could make kopf keep its finalizer),
    beside a watching handler that does nothing: ours need the running operator's memo."""
    ours = registries.get_default_registry()
    registry = registries.OperatorRegistry()
    registry._spawning, registry._changing = ours._spawning, ours._changing

    @kopf.on.event(API_GROUP, API_VERSION, "drafterservings", registry=registry)
    async def seen(**_):
        pass

    return registry


@pytest.mark.parametrize("deleting", [False, True], ids=["live", "being-deleted"])
def test_kopf_removes_the_finalizer_an_older_operator_left(deleting):
    metadata = {"finalizers": ["example.com/keep", KOPF_FINALIZER]}
    if deleting:
        metadata["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    assert _patched_finalizers(_registry_like_the_operators(), metadata) == ["example.com/keep"]


def test_a_kopf_daemon_would_keep_it_which_is_what_the_operator_no_longer_registers():
    # The same processing with a daemon registered: kopf keeps (and would add) its finalizer.
    registry = registries.OperatorRegistry()

    @kopf.daemon(API_GROUP, API_VERSION, "drafterservings", registry=registry)
    async def daemon(**_):
        pass

    assert _patched_finalizers(registry, {"finalizers": [KOPF_FINALIZER]}) == [KOPF_FINALIZER]
