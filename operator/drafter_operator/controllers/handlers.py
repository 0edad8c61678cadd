"""Thin kopf handlers: one loop per DrafterServing (a kopf daemon), woken by watch events.

A serving's Deployments, pods and Service are kept in kopf indexes fed by watches, so a reconcile reads
no object from the API: in steady state it makes no request at all (docs/performance.md). The same
watches wake the owning serving's loop: kopf runs `on.event` handlers after it has updated the indexes
for that event, so the reconcile that follows sees it. The reconcile itself (blocking REST client)
runs in a thread pool, never on the event loop.
"""

from __future__ import annotations

import asyncio
import contextvars
import datetime as dt
import logging
import os
from concurrent.futures import Future, ThreadPoolExecutor

import kopf

from drafter_operator.controllers import serving_loop
from drafter_operator.controllers.benchmark import BenchmarkReconciler
from drafter_operator.controllers.acceptance_monitor import AcceptanceMonitor, persisted_verdict, watched_revision
from drafter_operator.controllers.serving import ServingReconciler, now_utc
from drafter_operator.controllers.serving_decide import observed_from
from drafter_operator.controllers.training import TrainingReconciler
from drafter_operator.controllers.watched_copies import kept_copy
from drafter_operator.kube import Kube, load_api_client
from drafter_operator.monitoring import operator_metrics
from drafter_operator.resources.benchmark_job import BENCHMARK_LABEL
from drafter_operator.resources.labels import SERVING_LABEL
from drafter_operator.resources.training import TRAINING_LABEL

GROUP, VERSION = "drafter.dev", "v1alpha1"
# How long an old revision keeps running after traffic left it (connections in flight finish).
DRAIN_SECONDS = float(os.environ.get("DRAFTER_DRAIN_SECONDS", "15"))


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_) -> None:
    # Progress and diff-base in annotations: status stays ours (and the printer columns clean).
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="drafter.dev")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix="drafter.dev")
    settings.posting.level = logging.WARNING  # our own Events carry the story; kopf posts only its warnings
    settings.watching.server_timeout = 270  # re-open watches before silent network drops can stall them
    settings.watching.client_timeout = 300
    workers = int(os.environ.get("DRAFTER_WORKERS", "8"))
    settings.execution.max_workers = workers  # kopf's pool, for the index handlers
    memo.reconcile_pool = ThreadPoolExecutor(workers, thread_name_prefix="reconcile")
    kube = Kube(load_api_client())
    operator_metrics.track_api_requests(kube)
    operator_metrics.start_reconcile_counters(("DrafterServing", BenchmarkReconciler.kind, TrainingReconciler.kind))
    memo.reconciler = ServingReconciler(kube, drain=dt.timedelta(seconds=DRAIN_SECONDS))
    memo.benchmarks = BenchmarkReconciler(kube)
    memo.trainings = TrainingReconciler(kube)
    # Watch events wake a serving's loop at once; the interval is only a safety net (a lost watch event,
    # a change nobody announces). Each steady reconcile costs no API request, so it could be short, but
    # it would only repeat the same decision.
    memo.recheck_seconds = float(os.environ.get("DRAFTER_RECHECK_SECONDS", "20"))
    # After writing, a loop waits at most this long for the watch to return its own writes before it
    # decides again (normally milliseconds; a watch re-list can skip the exact version).
    memo.wakeups = serving_loop.Wakeups(catch_up=float(os.environ.get("DRAFTER_CATCH_UP_SECONDS", "5")))
    # A failed reconcile (an apiserver error) is retried this soon, or earlier on the next watch event.
    memo.error_retry_seconds = 5.0
    # Each watched serving's active revision is measured this often (a scrape of every Ready pod, or one
    # Prometheus query). Detection takes up to window + for + this; see docs/monitoring.md.
    memo.acceptance_seconds = float(os.environ.get("DRAFTER_ACCEPTANCE_INTERVAL_SECONDS", "15"))


@kopf.on.cleanup()
def release(memo: kopf.Memo, **_) -> None:
    memo.reconcile_pool.shutdown(wait=False, cancel_futures=True)


def _by_serving(namespace: str | None, labels: kopf.Labels, body: kopf.Body) -> dict:
    # A snapshot: kopf's body is a live view, and the reconciler reads it from another thread.
    return {(namespace, labels[SERVING_LABEL]): kept_copy(body)}


@kopf.index("apps", "v1", "deployments", labels={SERVING_LABEL: kopf.PRESENT})
def serving_deployments(namespace, labels, body, **_):
    return _by_serving(namespace, labels, body)


@kopf.index("", "v1", "pods", labels={SERVING_LABEL: kopf.PRESENT})
def serving_pods(namespace, labels, body, **_):
    return _by_serving(namespace, labels, body)


@kopf.index("", "v1", "services", labels={SERVING_LABEL: kopf.PRESENT})
def serving_services(namespace, labels, body, **_):
    return _by_serving(namespace, labels, body)


def _benchmarked_serving(labels: kopf.Labels, spec: kopf.Spec) -> str | None:
    """The serving a DrafterBenchmark measures: a gate's by its label, anyone's by spec.servingRef."""
    return labels.get(SERVING_LABEL) or (spec.get("servingRef") or {}).get("name")


@kopf.index(GROUP, VERSION, "drafterbenchmarks")
def serving_benchmarks(namespace, labels, spec, body, **_):
    # Gates decide swaps; every finished run of a revision teaches auto thresholds and dynamic schedules.
    serving = _benchmarked_serving(labels, spec)
    return {(namespace, serving): kept_copy(body)} if serving else None


@kopf.on.event(GROUP, VERSION, "drafterbenchmarks")
async def serving_benchmark_event(namespace, labels, spec, name, meta, memo: kopf.Memo, **_) -> None:
    serving = _benchmarked_serving(labels, spec)
    if serving:
        memo.wakeups.saw((namespace, serving), "drafterbenchmarks", name, meta.get("resourceVersion"))


@kopf.on.event("apps", "v1", "deployments", labels={SERVING_LABEL: kopf.PRESENT})
async def deployment_event(namespace, labels, name, meta, memo: kopf.Memo, **_) -> None:
    memo.wakeups.saw((namespace, labels[SERVING_LABEL]), "deployments", name, meta.get("resourceVersion"))


@kopf.on.event("", "v1", "pods", labels={SERVING_LABEL: kopf.PRESENT})
async def pod_event(namespace, labels, name, meta, memo: kopf.Memo, **_) -> None:
    memo.wakeups.saw((namespace, labels[SERVING_LABEL]), "pods", name, meta.get("resourceVersion"))


@kopf.on.event("", "v1", "services", labels={SERVING_LABEL: kopf.PRESENT})
async def service_event(namespace, labels, name, meta, memo: kopf.Memo, **_) -> None:
    memo.wakeups.saw((namespace, labels[SERVING_LABEL]), "services", name, meta.get("resourceVersion"))


@kopf.on.event(GROUP, VERSION, "drafterservings")
async def serving_event(namespace, name, meta, memo: kopf.Memo, **_) -> None:
    # Spec changes and our own status writes: the daemon's `body` is already this version.
    memo.wakeups.saw((namespace, name), "drafterservings", name, meta.get("resourceVersion"))


def _event_sink(body: dict):
    return lambda kind, reason, message: kopf.event(body, type=kind, reason=reason, message=message[:1024])


@kopf.daemon(GROUP, VERSION, "drafterservings", cancellation_timeout=5.0)
async def serving_daemon(body: kopf.Body, namespace: str, name: str, memo: kopf.Memo, stopped: kopf.DaemonStopped,
                         serving_deployments: kopf.Index, serving_pods: kopf.Index, serving_services: kopf.Index,
                         serving_benchmarks: kopf.Index, **_) -> None:
    key = (namespace, name)

    monitor = AcceptanceMonitor(namespace, name)
    latest: dict = {}

    async def measure_once():
        watched = watched_revision(kept_copy(body))
        if watched is None:
            monitor.forget()
            return None
        return await monitor.measure(watched.spec, watched.revision, list(serving_pods.get(key, [])), now_utc(),
                                     resume_from=persisted_verdict(body.get("status") or {}, watched.revision),
                                     learned=watched.learned)

    def publish(measurement) -> None:
        latest["acceptance"] = measurement
        memo.wakeups.saw(key, "acceptance", name, None)

    in_flight: set[Future] = set()

    async def reconcile_once():
        # Snapshots taken on the event loop, where kopf updates the body and the indexes.
        snapshot = kept_copy(body)
        service = next((s for s in serving_services.get(key, []) if s["metadata"]["name"] == name), None)
        observed = observed_from(serving_deployments.get(key, []), serving_pods.get(key, []), service,
                                 owner_uid=snapshot["metadata"].get("uid"),
                                 benchmarks=serving_benchmarks.get(key, []))
        # In this task's context: kopf.event() finds kopf's Event queue through context variables.
        context = contextvars.copy_context()
        running = memo.reconcile_pool.submit(context.run, memo.reconciler.reconcile, snapshot, _event_sink(snapshot),
                                             observed, latest.get("acceptance"))
        in_flight.add(running)
        running.add_done_callback(in_flight.discard)
        return await asyncio.wrap_future(running)

    tasks = {asyncio.create_task(serving_loop.run(key, memo.wakeups, reconcile_once, memo.recheck_seconds,
                                                  memo.error_retry_seconds, now_utc)),
             asyncio.create_task(serving_loop.watch_acceptance(measure_once, publish, memo.acceptance_seconds))}
    # Exit on kopf's stop signal (the serving deleted, the operator stopping) rather than being cancelled.
    stop = asyncio.ensure_future(stopped.wait())
    try:
        await asyncio.wait(tasks | {stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks | {stop}:
            task.cancel()
        await asyncio.gather(*tasks, stop, return_exceptions=True)

        def forget(_finished=None) -> None:
            # Its series would otherwise outlive the serving (a stale drafter_degraded 1 pages forever).
            monitor.forget()
            operator_metrics.forget_serving(namespace, name)

        forget()
        # Cancelling the loop does not stop a reconcile already running in the pool, and the gauges it sets at
        # its end would bring the series back for good: forget again once it is done. A callback, not an await:
        # kopf cancels this task after cancellation_timeout, and a cancelled await here would forget nothing.
        for running in list(in_flight):
            running.add_done_callback(forget)
    for task in tasks:
        if not task.cancelled() and task.exception():
            raise task.exception()  # kopf restarts the daemon after its backoff


# --------------------------------------------------------------------------------------------------
# DrafterBenchmark: reconciled when it or its Job or pod changes, and every few seconds while it waits
# for its serving or runs (a deadline passes with no event).


def _post_event(body: dict, kind: str, reason: str, message: str) -> None:
    kopf.event(body, type=kind, reason=reason, message=message[:1024])


async def _in_pool(memo: kopf.Memo, reconcile, namespace: str, name: str) -> None:
    # In this task's context: kopf.event() finds kopf's Event queue through context variables.
    context = contextvars.copy_context()
    await asyncio.get_running_loop().run_in_executor(memo.reconcile_pool, context.run, reconcile, namespace, name,
                                                     _post_event)


async def _reconcile_benchmark(memo: kopf.Memo, namespace: str, name: str) -> None:
    await _in_pool(memo, memo.benchmarks.reconcile, namespace, name)


def _unfinished(status, **_) -> bool:
    return (status or {}).get("state") not in ("Succeeded", "Failed")


@kopf.on.event(GROUP, VERSION, "drafterbenchmarks")
async def benchmark_event(type, namespace, name, memo: kopf.Memo, **_) -> None:
    if type != "DELETED":
        await _reconcile_benchmark(memo, namespace, name)


@kopf.timer(GROUP, VERSION, "drafterbenchmarks", interval=3.0, when=_unfinished)
async def benchmark_timer(namespace, name, memo: kopf.Memo, **_) -> None:
    await _reconcile_benchmark(memo, namespace, name)


@kopf.on.event("batch", "v1", "jobs", labels={BENCHMARK_LABEL: kopf.PRESENT})
async def benchmark_job_event(namespace, labels, memo: kopf.Memo, **_) -> None:
    await _reconcile_benchmark(memo, namespace, labels[BENCHMARK_LABEL])


@kopf.on.event("", "v1", "pods", labels={BENCHMARK_LABEL: kopf.PRESENT})
async def benchmark_pod_event(namespace, labels, memo: kopf.Memo, **_) -> None:
    await _reconcile_benchmark(memo, namespace, labels[BENCHMARK_LABEL])


# --------------------------------------------------------------------------------------------------
# DrafterTraining: reconciled when it, one of its Jobs, their pods or its benchmark changes, and every 5 s
# while a stage runs (its progress is read from the stage pod's log; nothing announces it).


async def _reconcile_training(memo: kopf.Memo, namespace: str, name: str) -> None:
    await _in_pool(memo, memo.trainings.reconcile, namespace, name)


@kopf.on.event(GROUP, VERSION, "draftertrainings")
async def training_event(type, namespace, name, memo: kopf.Memo, **_) -> None:
    if type != "DELETED":
        await _reconcile_training(memo, namespace, name)


@kopf.timer(GROUP, VERSION, "draftertrainings", interval=5.0, when=_unfinished)
async def training_timer(namespace, name, memo: kopf.Memo, **_) -> None:
    await _reconcile_training(memo, namespace, name)


@kopf.on.event("batch", "v1", "jobs", labels={TRAINING_LABEL: kopf.PRESENT})
async def training_job_event(namespace, labels, memo: kopf.Memo, **_) -> None:
    await _reconcile_training(memo, namespace, labels[TRAINING_LABEL])


@kopf.on.event(GROUP, VERSION, "drafterbenchmarks", labels={TRAINING_LABEL: kopf.PRESENT})
async def training_benchmark_event(namespace, labels, memo: kopf.Memo, **_) -> None:
    await _reconcile_training(memo, namespace, labels[TRAINING_LABEL])


@kopf.on.event("", "v1", "pods", labels={TRAINING_LABEL: kopf.PRESENT})
async def training_pod_event(namespace, labels, memo: kopf.Memo, **_) -> None:
    await _reconcile_training(memo, namespace, labels[TRAINING_LABEL])
