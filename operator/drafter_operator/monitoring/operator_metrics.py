"""The operator's own Prometheus metrics (served on :8080/metrics by `drafter-operator run`).

Acceptance gauges carry the labels of one serving revision (namespace, name, engine, drafter,
revision). A gauge series outlives its revision unless removed, and a stale ``drafter_degraded 1``
for a deleted serving would page someone forever: :func:`forget_revision` and :func:`forget_serving`
remove them (``prometheus_client``'s ``.remove()``). "No figure" is an absent series, never a stale
number or NaN: a window without drafts removes the rate and length series; Degraded=Unknown removes
``drafter_degraded``. See docs/monitoring.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import contextmanager
from typing import TYPE_CHECKING

from prometheus_client import Counter, Gauge, Histogram

if TYPE_CHECKING:
    from drafter_operator.engines.metrics import AcceptanceWindow

SERVING_LABELS = ("namespace", "name", "engine")
REVISION_LABELS = SERVING_LABELS + ("drafter", "revision")

SWAPS = Counter("drafter_swaps", "Drafter swaps completed (traffic moved to a new revision).",
                SERVING_LABELS + ("strategy",))
ROLLBACKS = Counter("drafter_rollbacks", "Revisions abandoned with traffic kept on (or returned to) the previous one.",
                    SERVING_LABELS)
RECONCILES = Counter("drafter_reconcile", "Reconciles run, by kind.", ("kind", "result"))
RECONCILE_SECONDS = Histogram("drafter_reconcile_duration_seconds", "Reconcile duration, by kind.", ("kind",),
                              buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
ACCEPTANCE_RATE = Gauge("drafter_acceptance_rate",
                        "Accepted / drafted tokens over the acceptance window (SGLang: derived from k).",
                        REVISION_LABELS)
ACCEPTANCE_LENGTH = Gauge("drafter_acceptance_length",
                          "Mean tokens per verification step over the acceptance window, bonus token included.",
                          REVISION_LABELS)
DEGRADED = Gauge("drafter_degraded", "1 when the revision's Degraded condition is True, 0 when False; "
                 "absent when Unknown.", REVISION_LABELS)
#: Per-revision series and their label names (the order ``.remove()`` wants).
_BY_REVISION = ((ACCEPTANCE_RATE, REVISION_LABELS), (ACCEPTANCE_LENGTH, REVISION_LABELS), (DEGRADED, REVISION_LABELS))
#: Everything labelled by serving; forget_serving clears all of them.
_BY_SERVING = _BY_REVISION + ((SWAPS, SERVING_LABELS + ("strategy",)), (ROLLBACKS, SERVING_LABELS))
API_REQUESTS = Gauge("drafter_operator_api_requests", "Kubernetes API requests made by the operator, by verb.",
                     ("verb",))


def swap(namespace: str, name: str, engine: str, strategy: str) -> None:
    SWAPS.labels(namespace, name, engine, strategy).inc()


def rollback(namespace: str, name: str, engine: str) -> None:
    ROLLBACKS.labels(namespace, name, engine).inc()


def _remove(gauge: Gauge | Counter, values: tuple[str, ...]) -> None:
    try:
        gauge.remove(*values)
    except KeyError:
        pass  # never set: nothing to remove


def set_acceptance(namespace: str, name: str, engine: str, drafter: str, revision: str,
                   window: AcceptanceWindow | None) -> None:
    """Publish a window's rate and mean length; a figure the window does not have (or no window: the
    data was missing or untrusted) removes its series rather than leaving a stale value."""
    values = (namespace, name, engine, drafter, revision)
    rate = window.acceptance_rate if window else None
    length = window.mean_acceptance_length if window else None
    for gauge, value in ((ACCEPTANCE_RATE, rate), (ACCEPTANCE_LENGTH, length)):
        if value is None:
            _remove(gauge, values)
        else:
            gauge.labels(*values).set(value)


def set_degraded(namespace: str, name: str, engine: str, drafter: str, revision: str, degraded: bool | None) -> None:
    """1/0 for Degraded True/False; None (Unknown: insufficient or unusable data) removes the series."""
    values = (namespace, name, engine, drafter, revision)
    if degraded is None:
        _remove(DEGRADED, values)
    else:
        DEGRADED.labels(*values).set(1.0 if degraded else 0.0)


def _forget(metrics: tuple, keep: Callable[[dict[str, str]], bool]) -> int:
    """Remove every series of ``metrics`` whose labels ``keep`` rejects; how many were removed."""
    removed = 0
    for metric, names in metrics:
        doomed = {tuple(sample.labels[n] for n in names)
                  for family in metric.collect() for sample in family.samples
                  if all(n in sample.labels for n in names) and not keep(sample.labels)}
        for values in doomed:
            _remove(metric, values)
            removed += 1
    return removed


def forget_revision(namespace: str, name: str, revision: str) -> int:
    """Remove a revision's acceptance and degraded series (it was deleted or superseded)."""
    return _forget(_BY_REVISION, lambda labels: (labels["namespace"], labels["name"], labels["revision"])
                   != (namespace, name, revision))


def forget_serving(namespace: str, name: str) -> int:
    """Remove every series of a deleted serving (gauges and its swap and rollback counters)."""
    return _forget(_BY_SERVING, lambda labels: (labels["namespace"], labels["name"]) != (namespace, name))


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
