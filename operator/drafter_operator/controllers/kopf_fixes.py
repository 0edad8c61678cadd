"""A fix to kopf (1.45.2) that the operator installs with its handlers: a watcher that ends before its first listing
ended releases its hold on the operator's readiness.

kopf holds the processing of every object first seen after a watcher starts until every indexed resource's watcher
has listed once (its `operator_indexed` toggles). A watcher cancelled before its listing ended keeps its toggle for
good: the operator watches a namespace pattern, a namespace is deleted while the apiserver still answers its list
with 429 ("storage is (re)initializing": a CRD installed a moment before, such as LeaderWorkerSet's), kopf cancels
that namespace's watchers, and from then on nothing in a namespace created afterwards is processed: its servings
never get a status. Seen in the end-to-end session operator: every later test on that worker timed out waiting for
a first status. Dropping a toggle twice is harmless, so the fix stays correct once kopf drops it itself.
"""

from __future__ import annotations

import asyncio

from kopf._core.reactor import queueing

_kopf_watcher = queueing.watcher


async def watcher_releasing_its_readiness(*, operator_indexed=None, resource_indexed=None, **kwargs) -> None:
    """kopf's watcher of one resource (in one namespace), which on any end drops the readiness toggle it held."""
    try:
        await _kopf_watcher(operator_indexed=operator_indexed, resource_indexed=resource_indexed, **kwargs)
    finally:
        if operator_indexed is not None and resource_indexed is not None:
            # Shielded: orchestration may cancel the watcher again while it waits for the toggle set's lock.
            await asyncio.shield(operator_indexed.drop_toggle(resource_indexed))


def install() -> None:
    """kopf's orchestration looks the watcher up on its module at each spawn: it gets this one from now on."""
    queueing.watcher = watcher_releasing_its_readiness
