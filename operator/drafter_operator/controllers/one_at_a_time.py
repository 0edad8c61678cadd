"""observe -> decide -> apply for one custom resource at a time: what the DrafterBenchmark and the
DrafterTraining reconcilers share (kopf calls them from several threads: an Event of the resource, of
its Job and of its pod can arrive together, and two decisions on the same state would create twice)."""

from __future__ import annotations

import threading
from typing import Any, Callable, ClassVar

from drafter_operator.monitoring import operator_metrics as metrics

EventSink = Callable[[dict, str, str, str], None]  # (body, type, reason, message)


class ObjectLocks:
    """One lock per namespace/name, made on first use."""

    def __init__(self) -> None:
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def of(self, namespace: str, name: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(f"{namespace}/{name}", threading.Lock())


class OneAtATime:
    """Mixin: ``reconcile`` runs ``observe`` (None: the resource is gone), the pure ``decide`` and ``apply``
    under the resource's lock, timed in the operator's reconcile metric as ``kind``."""

    kind: ClassVar[str]
    body_field: ClassVar[str]
    locks: ObjectLocks

    def reconcile(self, namespace: str, name: str, post_event: EventSink) -> Any:
        with self.locks.of(namespace, name), metrics.reconcile_timer(self.kind):
            state = self.observe(namespace, name)
            if state is None:
                return None
            plan = self.decide(state)
            self.apply(getattr(state, self.body_field), plan, post_event)
            return plan
