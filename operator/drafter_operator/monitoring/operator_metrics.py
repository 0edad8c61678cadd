"""The operator's own Prometheus metrics (served on :8080/metrics by `drafter-operator run`)."""

from __future__ import annotations

import time
from contextlib import contextmanager

from prometheus_client import Counter, Gauge, Histogram

SERVING_LABELS = ("namespace", "name", "engine")

SWAPS = Counter("drafter_swaps", "Drafter swaps completed (traffic moved to a new revision).",
                SERVING_LABELS + ("strategy",))
ROLLBACKS = Counter("drafter_rollbacks", "Revisions abandoned with traffic kept on (or returned to) the previous one.",
                    SERVING_LABELS)
RECONCILES = Counter("drafter_reconcile", "Reconciles run, by kind.", ("kind", "result"))
RECONCILE_SECONDS = Histogram("drafter_reconcile_duration_seconds", "Reconcile duration, by kind.", ("kind",),
                              buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
API_REQUESTS = Gauge("drafter_operator_api_requests", "Kubernetes API requests made by the operator, by verb.",
                     ("verb",))


def swap(namespace: str, name: str, engine: str, strategy: str) -> None:
    SWAPS.labels(namespace, name, engine, strategy).inc()


def rollback(namespace: str, name: str, engine: str) -> None:
    ROLLBACKS.labels(namespace, name, engine).inc()


@contextmanager
def reconcile_timer(kind: str):
    started = time.perf_counter()
    result = "error"
    try:
        yield
        result = "ok"
    finally:
        RECONCILE_SECONDS.labels(kind).observe(time.perf_counter() - started)
        RECONCILES.labels(kind, result).inc()


def track_api_requests(kube) -> None:
    """Expose the Kube client's request counts as a gauge, read at scrape time."""
    for verb in ("GET", "POST", "PATCH", "PUT", "DELETE"):
        API_REQUESTS.labels(verb).set_function(lambda verb=verb: kube.requests[verb])
