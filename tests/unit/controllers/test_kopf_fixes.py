"""kopf's readiness survives a namespace's watcher cancelled before its first listing ended."""

from __future__ import annotations

import asyncio

import kopf
import pytest
from kopf._cogs.aiokits import aiotoggles
from kopf._cogs.structs import references
from kopf._core.reactor import queueing

from drafter_operator.controllers import kopf_fixes

LWS = references.Resource("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", namespaced=True)


async def listing_that_never_ends(**_):
    """An initial list the apiserver keeps answering 429 ("storage is (re)initializing"), retried for good."""
    await asyncio.Event().wait()
    yield  # an async generator, as kopf's infinite_watch is


async def readiness_after_cancelling(watcher) -> bool:
    operator_indexed = aiotoggles.ToggleSet(all)
    resource_indexed = await operator_indexed.make_toggle(name="leaderworkersets@deleted-namespace")
    task = asyncio.create_task(watcher(operator_paused=aiotoggles.ToggleSet(any), operator_indexed=operator_indexed,
                                       resource_indexed=resource_indexed, settings=kopf.OperatorSettings(),
                                       resource=LWS, namespace="deleted-namespace", processor=None))
    await asyncio.sleep(0.05)
    task.cancel()  # what kopf's orchestration does once the namespace is gone
    await asyncio.gather(task, return_exceptions=True)
    return operator_indexed.is_on()


@pytest.fixture
def hanging_list(monkeypatch):
    monkeypatch.setattr(queueing.watching, "infinite_watch", listing_that_never_ends)


def test_kopfs_own_watcher_keeps_the_operator_unready_which_is_what_the_fix_is_for(hanging_list):
    assert asyncio.run(readiness_after_cancelling(kopf_fixes._kopf_watcher)) is False


def test_the_fixed_watcher_releases_the_readiness_it_held(hanging_list):
    assert asyncio.run(readiness_after_cancelling(kopf_fixes.watcher_releasing_its_readiness)) is True


def test_the_operators_handlers_install_the_fix():
    from drafter_operator.controllers import handlers  # noqa: F401  (importing them installs it)

    assert queueing.watcher is kopf_fixes.watcher_releasing_its_readiness
