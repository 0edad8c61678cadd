"""Thin kopf handlers: one loop per DrafterServing, woken by watch events.

A serving's Deployments, pods and Service are kept in kopf indexes fed by watches, so a reconcile reads
no object from the API: in steady state it makes no request at all (docs/performance.md). The same
watches wake the owning serving's loop: kopf runs `on.event` handlers after it has updated the indexes
for that event, so the reconcile that follows sees it. The reconcile itself (blocking REST client)
runs in a thread pool, never on the event loop.

No handler here makes kopf put its finalizer on our objects, so deleting one (or its namespace) never
waits for the operator, even when it is uninstalled: the per-object loops are object_loops.ObjectLoops,
not kopf daemons or timers, and there is no on.create/update/delete/resume handler. kopf itself removes
the finalizer an older operator version left on an object, at the object's first event, because no
handler requires it (tests/unit/controllers/test_no_kopf_finalizer.py).
"""

from __future__ import annotations

import asyncio
import contextvars
import datetime as dt
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import kopf

from drafter_operator import engines
from drafter_operator.controllers import kopf_fixes, object_loops, sharding
from drafter_operator.controllers.serving import loop as serving_loop
from drafter_operator.controllers.benchmark.apply import BenchmarkReconciler
from drafter_operator.acceptance.measurement import AcceptanceMonitor, incarnation
from drafter_operator.controllers.serving.apply import ServingReconciler, now_utc
from drafter_operator.controllers.serving.acceptance import WatchedByVersion
from drafter_operator.controllers.serving.observe import benchmarked_serving, observed_from
from drafter_operator.controllers.serving.pointer import draining_revisions, revision_engine
from drafter_operator.controllers.retraining.apply import RetrainingReconciler
from drafter_operator.controllers.training.apply import TrainingReconciler
from drafter_operator.controllers.watched_copies import kept, thawed_all
from drafter_operator.kube import ApiError, Kube, kopf_connection, kopf_timeouts, load_api_client, object_path
from drafter_operator.monitoring import operator_metrics
from drafter_operator.monitoring.in_flight import requests_in_flight
from drafter_operator.constants import (
    API_GROUP,
    API_GROUP_VERSION,
    API_VERSION,
    BENCHMARK_LABEL,
    BENCHMARK_PLURAL,
    COMPARISON_LABEL,
    KOPF_ANNOTATION_PREFIX,
    RETRAINING_LABEL,
    SERVING_LABEL,
    SERVING_PLURAL,
    TRAINING_LABEL,
    TRAINING_PLURAL,
)
from drafter_operator.resources.labels import MANAGED_BY
from drafter_operator.resources.group import LWS_GROUP as GROUP_API, LWS_VERSION as GROUP_VERSION
from drafter_operator.resources.workloads import GROUP
from drafter_operator.settings import (
    ACCEPTANCE_INTERVAL_SECONDS,
    CATCH_UP_SECONDS,
    DRAIN_SECONDS,
    RECHECK_SECONDS,
    WORKERS,
)

kopf_fixes.install()  # before kopf starts any watcher (kopf_fixes.py says what it fixes)

# How often an unfinished DrafterBenchmark (a deadline passes with no event) and DrafterTraining (its
# progress is read from a pod's log) are reconciled besides their watch events.
BENCHMARK_TICK_SECONDS = 3.0
TRAINING_TICK_SECONDS = 5.0
# A serving with spec.retraining is looked at this often besides its events and its trainings' (the cooldown and
# the interval end with no event).
RETRAINING_TICK_SECONDS = 60.0
# A finished one is still reconciled now and then: its cleanup (the hidden-state claim, old Jobs) may have been
# refused, and the event that would retry it lost (the simulation's seed 305 left a claim for good otherwise).
FINISHED_RESYNC_SECONDS = 300.0
# How long a failed object loop waits before it starts again (kopf's default backoff for a failed daemon).
LOOP_RESTART_SECONDS = 60.0
# How long the operator's cleanup waits for the loops' own cleanups (kopf's daemon cancellation timeout was 5 s).
LOOP_STOP_SECONDS = 5.0


# The children's kinds the operator watches (indexes and event handlers below). Every child carries MANAGED_BY.
CHILD_RESOURCES = (("", "v1", "pods"), ("apps", "v1", "deployments"), ("", "v1", "services"), ("batch", "v1", "jobs"),
                   (GROUP_API, GROUP_VERSION, GROUP.plural))
CHILD_SELECTOR = ",".join(f"{key}={value}" for key, value in MANAGED_BY.items())


@kopf.on.login()
async def login(logger, settings: kopf.OperatorSettings, **_) -> kopf.AiohttpSession | None:
    """kopf's own login (the kubernetes library's in-cluster or kubeconfig credentials), on a connection with
    TCP keepalive (kube.kopf_connection). Called again whenever the apiserver refuses the credentials."""
    info = await asyncio.to_thread(kopf.login_via_client, logger=logger, settings=settings)  # reads files
    return kopf_connection(info) if info is not None else None


def select_own_children(settings: kopf.OperatorSettings) -> None:
    """The children's watches carry a label selector: the apiserver sends only the operator's own children, so
    another workload's churn never reaches the operator (the handlers' labels= filters below are kopf's, applied
    to each event after it arrived and was parsed). bench/foreign_churn.py measures the difference."""
    for group, version, plural in CHILD_RESOURCES:
        settings.watching.label_selectors[group, version, plural] = CHILD_SELECTOR


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_) -> None:
    # Progress and diff-base in annotations: status stays ours (and the printer columns clean).
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=KOPF_ANNOTATION_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=KOPF_ANNOTATION_PREFIX)
    settings.posting.level = logging.WARNING  # our own Events carry the story; kopf posts only its warnings
    settings.watching.server_timeout = 270  # re-open watches before silent network drops can stall them
    settings.watching.client_timeout = 300
    kopf_timeouts(settings)  # every other request of kopf's is bounded too (kube.py)
    select_own_children(settings)
    workers = WORKERS.read()
    memo.reconcile_pool = ThreadPoolExecutor(workers, thread_name_prefix="reconcile")
    kube = Kube(load_api_client())
    operator_metrics.track_api_requests(kube)
    operator_metrics.start_reconcile_counters(("DrafterServing", BenchmarkReconciler.kind, TrainingReconciler.kind,
                                               RetrainingReconciler.kind))
    memo.reconciler = ServingReconciler(kube, drain=dt.timedelta(seconds=DRAIN_SECONDS.read()))
    memo.benchmarks = BenchmarkReconciler(kube)
    memo.trainings = TrainingReconciler(kube)
    memo.retrainings = RetrainingReconciler(kube)
    # Set here, before kopf copies the memo for each object: every handler shares these two.
    memo.loops = object_loops.ObjectLoops(restart_backoff=LOOP_RESTART_SECONDS)
    operator_metrics.track_followed(memo.loops, {"DrafterServing": SERVING_PLURAL, BenchmarkReconciler.kind:
                                                 BENCHMARK_PLURAL, TrainingReconciler.kind: TRAINING_PLURAL})
    if "shard" not in memo:  # set by the runner once this process leads a shard (`--shards`); else the whole
        memo.shard = sharding.WHOLE
    memo.serving_bodies = {}  # (namespace, name) -> the serving's body from its latest watch event (Kept)
    # Watch events wake a serving's loop at once; the interval is only a safety net (a lost watch event,
    # a change nobody announces). Each steady reconcile costs no API request, so it could be short, but
    # it would only repeat the same decision.
    memo.recheck_seconds = RECHECK_SECONDS.read()
    # After writing, a loop waits at most this long for the watch to return its own writes before it
    # decides again (normally milliseconds; a watch re-list can skip the exact version).
    memo.wakeups = serving_loop.Wakeups(catch_up=CATCH_UP_SECONDS.read())
    # A failed reconcile (an apiserver error) is retried this soon, or earlier on the next watch event.
    memo.error_retry_seconds = 5.0
    # Each watched serving's active revision is measured this often (a scrape of every Ready pod, or one
    # Prometheus query). Detection takes up to window + for + this; see docs/monitoring.md.
    memo.acceptance_seconds = ACCEPTANCE_INTERVAL_SECONDS.read()


@kopf.on.cleanup()
async def release(memo: kopf.Memo, **_) -> None:
    await memo.loops.stop_all(timeout=LOOP_STOP_SECONDS)
    memo.reconcile_pool.shutdown(wait=False, cancel_futures=True)


async def _count_watch_event(resource: kopf.Resource, **_) -> None:
    operator_metrics.WATCH_EVENTS.labels(resource.plural).inc()


# No labels= filter: it counts every event kopf receives for these kinds, the figure bench/foreign_churn.py reads.
for _group, _version, _plural in CHILD_RESOURCES:
    kopf.on.event(_group, _version, _plural, id=f"count_watch_event_{_plural}")(_count_watch_event)


# --------------------------------------------------------------------------------------------------
# Sharding (controllers/sharding.py): every handler below acts only for the objects of this process's shard, each
# filtered by the key it dispatches to: an object's own name, or the owner its label names (a serving's children
# and gate benchmarks go to the serving's shard). tests/unit/controllers/test_sharding.py checks that each
# registered handler has one of these filters and that exactly one shard matches any event.


def _shard(memo: kopf.Memo) -> sharding.Shard:
    return getattr(memo, "shard", None) or sharding.WHOLE


def mine(memo: kopf.Memo, namespace: str | None, name: str, **_) -> bool:
    """The object itself is this shard's."""
    return _shard(memo).owns(namespace, name)


def owner_mine(label: str) -> Callable[..., bool]:
    """The object whose name the label ``label`` carries (the owner the event is dispatched to) is this shard's."""
    def when(memo: kopf.Memo, namespace: str | None, labels: kopf.Labels, **_) -> bool:
        return _shard(memo).owns(namespace, labels.get(label))
    when.__qualname__ = f"owner_mine({label!r})"
    return when


def benchmarked_serving_mine(memo: kopf.Memo, namespace: str | None, labels: kopf.Labels, spec, **_) -> bool:
    """The serving a benchmark measures (its gate's or its target's) is this shard's."""
    return _shard(memo).owns(namespace, benchmarked_serving(labels, spec))


_SERVING_OWNS = owner_mine(SERVING_LABEL)


# The index handlers are async: a JSON encoding each, on the event loop, where a sync handler would take a thread of
# kopf's pool (fewer threads, fewer glibc arenas holding freed memory: docs/performance.md).
def _by_serving(namespace: str | None, labels: kopf.Labels, body: kopf.Body) -> dict:
    # A snapshot: kopf's body is a live view, and the reconciler reads it from another thread.
    return {(namespace, labels[SERVING_LABEL]): kept(body)}


@kopf.index("apps", "v1", "deployments", labels={SERVING_LABEL: kopf.PRESENT}, when=_SERVING_OWNS)
async def serving_deployments(namespace, labels, body, **_):
    return _by_serving(namespace, labels, body)


# A replica over several nodes (resources/group.py). Without the LeaderWorkerSet API in the cluster kopf serves
# nothing here and says so; a serving that needs it finds its create refused, and Progressing says what to install.
@kopf.index(GROUP_API, GROUP_VERSION, GROUP.plural, labels={SERVING_LABEL: kopf.PRESENT}, when=_SERVING_OWNS)
async def serving_groups(namespace, labels, body, **_):
    return _by_serving(namespace, labels, body)


@kopf.index("", "v1", "pods", labels={SERVING_LABEL: kopf.PRESENT}, when=_SERVING_OWNS)
async def serving_pods(namespace, labels, body, **_):
    return _by_serving(namespace, labels, body)


@kopf.index("", "v1", "services", labels={SERVING_LABEL: kopf.PRESENT}, when=_SERVING_OWNS)
async def serving_services(namespace, labels, body, **_):
    return _by_serving(namespace, labels, body)


@kopf.index(API_GROUP, API_VERSION, BENCHMARK_PLURAL, when=benchmarked_serving_mine)
async def serving_benchmarks(namespace, labels, spec, body, **_):
    # Gates decide swaps; every finished run of a revision teaches auto thresholds and dynamic schedules.
    serving = benchmarked_serving(labels, spec)
    return {(namespace, serving): kept(body)} if serving else None


@kopf.on.event(API_GROUP, API_VERSION, BENCHMARK_PLURAL, when=benchmarked_serving_mine)
async def serving_benchmark_event(namespace, labels, spec, name, meta, memo: kopf.Memo, **_) -> None:
    serving = benchmarked_serving(labels, spec)
    if serving:
        memo.wakeups.saw((namespace, serving), BENCHMARK_PLURAL, name, meta.get("resourceVersion"))


@kopf.on.event("apps", "v1", "deployments", labels={SERVING_LABEL: kopf.PRESENT}, when=_SERVING_OWNS)
async def deployment_event(namespace, labels, name, meta, memo: kopf.Memo, **_) -> None:
    memo.wakeups.saw((namespace, labels[SERVING_LABEL]), "deployments", name, meta.get("resourceVersion"))


@kopf.on.event(GROUP_API, GROUP_VERSION, GROUP.plural, labels={SERVING_LABEL: kopf.PRESENT},
                when=_SERVING_OWNS)
async def group_event(namespace, labels, name, meta, memo: kopf.Memo, **_) -> None:
    memo.wakeups.saw((namespace, labels[SERVING_LABEL]), GROUP.plural, name, meta.get("resourceVersion"))


@kopf.on.event("", "v1", "pods", labels={SERVING_LABEL: kopf.PRESENT}, when=_SERVING_OWNS)
async def pod_event(namespace, labels, name, meta, memo: kopf.Memo, **_) -> None:
    memo.wakeups.saw((namespace, labels[SERVING_LABEL]), "pods", name, meta.get("resourceVersion"))


@kopf.on.event("", "v1", "services", labels={SERVING_LABEL: kopf.PRESENT}, when=_SERVING_OWNS)
async def service_event(namespace, labels, name, meta, memo: kopf.Memo, **_) -> None:
    memo.wakeups.saw((namespace, labels[SERVING_LABEL]), "services", name, meta.get("resourceVersion"))


@dataclass(frozen=True)
class ServingIndexes:
    """The kopf indexes of the servings' children, each keyed by (namespace, serving): what a serving's loop
    observes without a request."""

    deployments: kopf.Index
    pods: kopf.Index
    services: kopf.Index
    benchmarks: kopf.Index
    groups: kopf.Index

    @classmethod
    def of(cls, handler_kwargs: dict) -> ServingIndexes:
        """From a handler's keyword arguments: kopf passes every index by its handler's name."""
        return cls(handler_kwargs["serving_deployments"], handler_kwargs["serving_pods"],
                   handler_kwargs["serving_services"], handler_kwargs["serving_benchmarks"],
                   handler_kwargs["serving_groups"])

    def workloads(self, key) -> list[dict]:
        """A serving's revision workloads: its Deployments and LeaderWorkerSets."""
        return [*thawed_all(self.deployments.get(key, [])), *thawed_all(self.groups.get(key, []))]

    def pods_of(self, key) -> list[dict]:
        return thawed_all(self.pods.get(key, []))

    def services_of(self, key) -> list[dict]:
        return thawed_all(self.services.get(key, []))

    def benchmarks_of(self, key) -> list[dict]:
        return thawed_all(self.benchmarks.get(key, []))


@kopf.on.event(API_GROUP, API_VERSION, SERVING_PLURAL, when=mine)
async def serving_event(type, body: kopf.Body, namespace, name, meta, memo: kopf.Memo, **kwargs) -> None:
    # Every serving's first event (kopf lists them all at startup) starts its loop; spec changes and our own
    # status writes wake it. The loop reads the body this event leaves in `serving_bodies`.
    key = (namespace, name)
    running = object_loops.keeps_running(type, meta)
    if running:
        memo.serving_bodies[key] = kept(body)
    indexes = ServingIndexes.of(kwargs)
    memo.loops.follow((SERVING_PLURAL, *key), running, lambda: _serving_loop(key, memo, indexes))
    if type == "DELETED":
        memo.serving_bodies.pop(key, None)
    memo.wakeups.saw(key, SERVING_PLURAL, name, meta.get("resourceVersion"))


def _event_sink(body: dict):
    return lambda kind, reason, message: kopf.event(body, type=kind, reason=reason, message=message[:1024])


async def _serving_loop(key: tuple[str, str], memo: kopf.Memo, indexes: ServingIndexes) -> None:
    """One serving's reconcile loop and acceptance watch, until cancelled (the serving deleted, the operator
    stopping) or one of them fails (ObjectLoops starts it again after its backoff)."""
    namespace, name = key
    monitor = AcceptanceMonitor(namespace, name)
    watch = WatchedByVersion()
    latest: dict = {}

    def body() -> dict:
        """A copy of the serving's body from its latest watch event."""
        return memo.serving_bodies[key].thawed()

    async def measure_once():
        snapshot = body()
        watched = watch.of(snapshot)
        return await monitor.measure(watched, indexes.pods_of(key), now_utc(),
                                     incarnation(snapshot, watched))

    def publish(measurement) -> None:
        latest["acceptance"] = measurement
        memo.wakeups.saw(key, "acceptance", name, None)

    in_flight: set[Future] = set()

    async def reconcile_once():
        # Snapshots taken on the event loop, where kopf updates the indexes and the event handler the body.
        snapshot = body()
        service = next((s for s in indexes.services_of(key) if s["metadata"]["name"] == name), None)
        observed = observed_from(indexes.workloads(key), indexes.pods_of(key), service,
                                 owner_uid=snapshot["metadata"].get("uid"),
                                 benchmarks=indexes.benchmarks_of(key))
        await read_drain(observed, snapshot)
        # In this task's context: kopf.event() finds kopf's Event queue through context variables.
        context = contextvars.copy_context()
        running = memo.reconcile_pool.submit(context.run, memo.reconciler.reconcile, snapshot, _event_sink(snapshot),
                                             observed, latest.get("acceptance"), memo.wakeups.take_behind(key))
        in_flight.add(running)
        running.add_done_callback(in_flight.discard)
        try:
            return await asyncio.wrap_future(running)
        except ApiError as refused:
            # A 404: the serving (or its namespace) may be gone without a DELETED event (kopf stops watching a
            # namespace once it is marked for deletion). Asked, the apiserver says so, and the loop ends.
            if refused.status == 404 and await asyncio.to_thread(serving_gone, memo.reconciler.kube, snapshot):
                memo.serving_bodies.pop(key, None)
                raise serving_loop.ObjectGone(f"{namespace}/{name}") from refused
            raise

    tasks = {asyncio.create_task(serving_loop.run(key, memo.wakeups, reconcile_once, memo.recheck_seconds,
                                                  memo.error_retry_seconds, now_utc)),
             asyncio.create_task(serving_loop.watch_acceptance(measure_once, publish, memo.acceptance_seconds))}
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        await stop_serving_loop(tasks, monitor, in_flight, namespace, name)
    for task in tasks:
        if not task.cancelled() and task.exception():
            raise task.exception()  # ObjectLoops starts the loop again after its backoff


def serving_gone(kube: Kube, snapshot: dict) -> bool:
    """Whether the apiserver no longer has this serving: none of its name, or one of another uid (re-created)."""
    meta = snapshot["metadata"]
    current = kube.get(object_path(API_GROUP_VERSION, SERVING_PLURAL, meta["namespace"], meta["name"]))
    return current is None or current["metadata"].get("uid") != meta.get("uid")


async def read_drain(observed, snapshot: dict) -> None:
    """Record in ``observed.in_flight`` the requests in flight on each revision that drains, as its engines
    (the revision's own, read from the body ``snapshot``) answer: its drain ends when their streams are done,
    not after a guess. A revision whose engines leave the count unknown is left out."""
    for draining in draining_revisions(observed):
        engine = revision_engine(snapshot, draining)
        ips = observed.ready_pod_ips.get(draining, [])
        requests = await requests_in_flight(engine, ips, engines.engine(engine).DEFAULT_PORT)
        meta = snapshot.get("metadata") or {}
        if requests is not None:
            observed.in_flight[draining] = requests
            if requests:  # what keeps the revision: said at each look (every few seconds, for as long as it drains)
                serving_loop.log.info("%s/%s: revision %s drains: %d requests in flight on %s", meta.get("namespace"),
                                      meta.get("name"), draining, requests, ", ".join(ips))
        else:
            serving_loop.log.info("%s/%s: revision %s drains with its requests in flight unknown (its engines' "
                                  "metrics did not answer): it is kept until spec.swap.drainTimeout",
                                  meta.get("namespace"), meta.get("name"), draining)


async def stop_serving_loop(tasks: set[asyncio.Task], monitor: AcceptanceMonitor, in_flight: set[Future],
                            namespace: str, name: str) -> None:
    """Cancel a serving's loop tasks and forget its series, now and once a reconcile still running (``in_flight``)
    is done."""
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)

    def forget(_finished=None) -> None:
        # Its series would otherwise outlive the serving (a stale drafter_degraded 1 pages forever).
        monitor.forget()
        operator_metrics.forget_serving(namespace, name)

    forget()
    # Cancelling the loop does not stop a reconcile already running in the pool, and the gauges it sets at
    # its end would bring the series back for good: forget again once it is done. A callback, not an await:
    # the operator's cleanup waits only so long for a cancelled loop, and a cancelled await forgets nothing.
    for running in list(in_flight):
        running.add_done_callback(forget)


def _post_event(body: dict, kind: str, reason: str, message: str) -> None:
    kopf.event(body, type=kind, reason=reason, message=message[:1024])


async def _in_pool(memo: kopf.Memo, reconcile, namespace: str, name: str) -> object:
    """Run one reconcile of a kind that observes, decides and applies one object at a time (OneAtATime) in the
    pool; object_loops.GONE when it found the object gone or going (the object's tick loop ends)."""
    # In this task's context: kopf.event() finds kopf's Event queue through context variables.
    context = contextvars.copy_context()
    plan = await asyncio.get_running_loop().run_in_executor(memo.reconcile_pool, context.run, reconcile, namespace,
                                                            name, _post_event)
    return object_loops.GONE if plan is None else plan


async def _reconcile_benchmark(memo: kopf.Memo, namespace: str, name: str) -> object:
    return await _in_pool(memo, memo.benchmarks.reconcile, namespace, name)


@dataclass(frozen=True)
class Ticks:
    """How a kind's objects are reconciled besides their events: its ``plural``, every ``interval`` seconds while
    one is unfinished, by ``reconcile(memo, namespace, name)``."""

    plural: str
    interval: float
    reconcile: Callable[[kopf.Memo, str, str], Awaitable[object]]


def _tick_while_unfinished(memo: kopf.Memo, ticks: Ticks, key: tuple[str, str], type, meta, status) -> None:
    """Reconcile the object ``key`` (namespace, name) every `ticks.interval` seconds while it is unfinished, every
    FINISHED_RESYNC_SECONDS once it finished (object loops, not kopf timers: kopf would put its finalizer on the
    object)."""
    namespace, name = key
    loop_key = (ticks.plural, namespace, name)
    exists, finished = object_loops.keeps_running(type, meta), object_loops.finished(status)
    memo.loops.follow(loop_key, exists and not finished,
                      lambda: object_loops.every(ticks.interval, lambda: ticks.reconcile(memo, namespace, name)))
    memo.loops.follow(loop_key + ("finished",), exists and finished,
                      lambda: object_loops.every(FINISHED_RESYNC_SECONDS,
                                                 lambda: ticks.reconcile(memo, namespace, name)))


@kopf.on.event(API_GROUP, API_VERSION, BENCHMARK_PLURAL, when=mine)
async def benchmark_event(type, namespace, name, meta, status, memo: kopf.Memo, **_) -> None:
    _tick_while_unfinished(memo, Ticks(BENCHMARK_PLURAL, BENCHMARK_TICK_SECONDS, _reconcile_benchmark),
                           (namespace, name), type, meta, status)
    if type != "DELETED":
        await _reconcile_benchmark(memo, namespace, name)


@kopf.on.event(API_GROUP, API_VERSION, BENCHMARK_PLURAL, labels={COMPARISON_LABEL: kopf.PRESENT},
                when=owner_mine(COMPARISON_LABEL))
async def comparison_candidate_event(namespace, labels, memo: kopf.Memo, **_) -> None:
    # A candidate's run moved on: its comparison starts the next one or records the result at once.
    await _reconcile_benchmark(memo, namespace, labels[COMPARISON_LABEL])


@kopf.on.event("batch", "v1", "jobs", labels={BENCHMARK_LABEL: kopf.PRESENT}, when=owner_mine(BENCHMARK_LABEL))
async def benchmark_job_event(namespace, labels, memo: kopf.Memo, **_) -> None:
    await _reconcile_benchmark(memo, namespace, labels[BENCHMARK_LABEL])


@kopf.on.event("", "v1", "pods", labels={BENCHMARK_LABEL: kopf.PRESENT}, when=owner_mine(BENCHMARK_LABEL))
async def benchmark_pod_event(namespace, labels, memo: kopf.Memo, **_) -> None:
    await _reconcile_benchmark(memo, namespace, labels[BENCHMARK_LABEL])


# --------------------------------------------------------------------------------------------------
# DrafterTraining: reconciled when it, one of its Jobs, their pods or its benchmark changes, and every 5 s
# while a stage runs (its progress is read from the stage pod's log; nothing announces it).


async def _reconcile_training(memo: kopf.Memo, namespace: str, name: str) -> object:
    return await _in_pool(memo, memo.trainings.reconcile, namespace, name)


@kopf.on.event(API_GROUP, API_VERSION, TRAINING_PLURAL, when=mine)
async def training_event(type, namespace, name, meta, status, memo: kopf.Memo, **_) -> None:
    _tick_while_unfinished(memo, Ticks(TRAINING_PLURAL, TRAINING_TICK_SECONDS, _reconcile_training),
                           (namespace, name), type, meta, status)
    if type != "DELETED":
        await _reconcile_training(memo, namespace, name)


@kopf.on.event("batch", "v1", "jobs", labels={TRAINING_LABEL: kopf.PRESENT}, when=owner_mine(TRAINING_LABEL))
async def training_job_event(namespace, labels, memo: kopf.Memo, **_) -> None:
    await _reconcile_training(memo, namespace, labels[TRAINING_LABEL])


@kopf.on.event(API_GROUP, API_VERSION, BENCHMARK_PLURAL, labels={TRAINING_LABEL: kopf.PRESENT},
                when=owner_mine(TRAINING_LABEL))
async def training_benchmark_event(namespace, labels, memo: kopf.Memo, **_) -> None:
    await _reconcile_training(memo, namespace, labels[TRAINING_LABEL])


@kopf.on.event("", "v1", "pods", labels={TRAINING_LABEL: kopf.PRESENT}, when=owner_mine(TRAINING_LABEL))
async def training_pod_event(namespace, labels, memo: kopf.Memo, **_) -> None:
    await _reconcile_training(memo, namespace, labels[TRAINING_LABEL])


# --------------------------------------------------------------------------------------------------
# spec.retraining: reconciled when its serving or one of the trainings it started changes, and every minute
# while it has one (controllers/retraining).


async def _reconcile_retraining(memo: kopf.Memo, namespace: str, name: str) -> object:
    return await _in_pool(memo, memo.retrainings.reconcile, namespace, name)


@kopf.on.event(API_GROUP, API_VERSION, SERVING_PLURAL, when=mine)
async def retraining_serving_event(type, namespace, name, meta, spec, memo: kopf.Memo, **_) -> None:
    wanted = object_loops.keeps_running(type, meta) and bool(spec.get("retraining"))
    memo.loops.follow(("retraining", namespace, name), wanted, lambda: object_loops.every(
        RETRAINING_TICK_SECONDS, lambda: _reconcile_retraining(memo, namespace, name)))
    if wanted:
        await _reconcile_retraining(memo, namespace, name)


@kopf.on.event(API_GROUP, API_VERSION, TRAINING_PLURAL, labels={RETRAINING_LABEL: kopf.PRESENT},
                when=owner_mine(RETRAINING_LABEL))
async def retraining_training_event(namespace, labels, memo: kopf.Memo, **_) -> None:
    await _reconcile_retraining(memo, namespace, labels[RETRAINING_LABEL])
