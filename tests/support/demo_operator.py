"""The demo's operator during an end-to-end session (pure): the first session worker to start scales it to zero
(one operator per cluster: the demo's would reconcile the objects under test), the last to end restores the
replicas it found. The record lives in a file beside the cluster, shared by the pytest-xdist workers; a worker
that died without leaving is dropped by the next one that looks (``alive``)."""

from __future__ import annotations

from collections.abc import Callable


def enter(paused: dict | None, pid: int, alive: Callable[[int], bool], found: int | None) -> tuple[dict | None, bool]:
    """The record once session ``pid`` holds the demo's operator down, and whether to scale it to zero now.
    ``found``: the replicas its Deployment has (None: no demo installed). A record already there keeps the
    replicas the first holder found, even if that holder died: they are what the demo had before any test."""
    if paused is not None:
        holders = [p for p in paused["holders"] if alive(p)]
        return {"replicas": paused["replicas"], "holders": [*holders, pid]}, bool(found)
    if not found:
        return None, False  # nothing runs: nothing to scale, nothing to restore
    return {"replicas": found, "holders": [pid]}, True


def leave(paused: dict | None, pid: int, alive: Callable[[int], bool]) -> tuple[dict | None, int | None]:
    """The record once session ``pid`` lets go, and the replicas to restore now (only when no live session
    holds it any more, and only what a session scaled down)."""
    if paused is None:
        return None, None
    holders = [p for p in paused["holders"] if p != pid and alive(p)]
    if holders:
        return {**paused, "holders": holders}, None
    return None, paused["replicas"]
