"""The operator's own Prometheus metrics (served on :8080/metrics by `drafter-operator run`).

Acceptance gauges carry the labels of one serving revision (namespace, name, engine, drafter,
revision). A gauge series outlives its revision unless removed, and a stale ``drafter_degraded 1``
for a deleted serving would page someone forever: :func:`forget_revision` and :func:`forget_serving`
remove them (``prometheus_client``'s ``.remove()``). "No figure" is an absent series, never a stale
number or NaN: a window without drafts removes the rate and length series; Degraded=Unknown removes
``drafter_degraded``. See docs/monitoring.md.

The state gauges (serving Ready, a swap under way, the last benchmark's speedup, the figure at promotion and
drift from it, a failed benchmark or training, usable engine metrics) exist for the chart's alert rules
(charts/drafter-operator/files/alerts.yaml): they are set from the status each reconcile leaves, so Prometheus
sees what ``kubectl get`` shows.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import contextmanager
from typing import TYPE_CHECKING

from prometheus_client import Counter, Gauge, Histogram

from drafter_operator import timestamps

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
ACCEPTANCE_FIRST_POSITION = Gauge(
    "drafter_acceptance_first_position_rate", "Accepted / drafts at the first draft position over the acceptance "
    "window (SGLang: accepted tokens per step, its upper bound); near 0 while drafting, the drafter is lost.",
    REVISION_LABELS)
DEGRADED = Gauge("drafter_degraded", "1 when the revision's Degraded condition is True, 0 when False; "
                 "absent when Unknown.", REVISION_LABELS)
ENGINE_METRICS_AVAILABLE = Gauge(
    "drafter_engine_metrics_available", "1 when the revision's last acceptance measurement could read and trust "
    "the engines' metrics; 0 when a scrape or query failed (MetricsUnavailable) or an answer was refused "
    "(MetricsInvalid); absent while the revision has no Ready pod.", REVISION_LABELS)
SERVING_READY = Gauge("drafter_serving_ready", "1 when the serving's Ready condition is True, else 0.", SERVING_LABELS)
#: Ready=False reasons that are what the spec asked for, not a serving that fails to serve.
NOT_READY_BY_REQUEST = frozenset({"ScaledToZero"})
NOT_READY = Gauge(
    "drafter_serving_not_ready",
    "1 while the serving's Ready condition is not True, labelled with its reason; absent while Ready, and while "
    "spec.replicas is 0 (ScaledToZero: not Ready by request). One series per serving.", SERVING_LABELS + ("reason",))
SWAP_STARTED = Gauge("drafter_swap_started_timestamp_seconds",
                     "While a swap is under way (Progressing True): when it started, Unix seconds; absent otherwise.",
                     SERVING_LABELS + ("reason",))
LAST_BENCHMARK_LABELS = SERVING_LABELS + ("drafter", "revision", "benchmark")
LAST_BENCHMARK_SPEEDUP = Gauge("drafter_last_benchmark_speedup",
                               "Speedup against its baseline of the newest finished benchmark of the active "
                               "revision (status.lastBenchmark); absent without one.", LAST_BENCHMARK_LABELS)
ACCEPTANCE_LENGTH_AT_PROMOTION = Gauge(
    "drafter_acceptance_length_at_promotion", "Mean acceptance length the serving revision's swap gate measured "
    "before it took traffic (status.acceptance.atPromotion), beside drafter_acceptance_length; absent without one.",
    REVISION_LABELS + ("benchmark",))
DRIFT = Gauge("drafter_acceptance_drift", "1 when the serving's DriftDetected condition is True (the live acceptance "
              "length stayed more than spec.acceptance.driftTolerance below atPromotion for spec.acceptance.for), 0 "
              "when False; absent when Unknown or unset.", REVISION_LABELS)
#: Per-revision series and their label names (the order ``.remove()`` wants).
_BY_REVISION = ((ACCEPTANCE_RATE, REVISION_LABELS), (ACCEPTANCE_LENGTH, REVISION_LABELS),
                (ACCEPTANCE_FIRST_POSITION, REVISION_LABELS), (DEGRADED, REVISION_LABELS),
                (ENGINE_METRICS_AVAILABLE, REVISION_LABELS))
#: Everything labelled by serving; forget_serving clears all of them.
_BY_SERVING = _BY_REVISION + ((SWAPS, SERVING_LABELS + ("strategy",)), (ROLLBACKS, SERVING_LABELS),
                              (SERVING_READY, SERVING_LABELS), (SWAP_STARTED, SERVING_LABELS + ("reason",)),
                              (NOT_READY, SERVING_LABELS + ("reason",)),
                              (LAST_BENCHMARK_SPEEDUP, LAST_BENCHMARK_LABELS),
                              (ACCEPTANCE_LENGTH_AT_PROMOTION, REVISION_LABELS + ("benchmark",)),
                              (DRIFT, REVISION_LABELS))
RECONCILE_FAILING = Gauge("drafter_reconcile_failing",
                          "1 while the object's last reconcile failed (a refused write, an apiserver error), 0 once "
                          "one succeeds: one stuck object among healthy ones.", ("kind", "namespace", "name"))
BENCHMARK_LABELS = ("namespace", "benchmark", "serving")
BENCHMARK_FAILED = Gauge("drafter_benchmark_failed", "1 when the DrafterBenchmark's state is Failed, else 0.",
                         BENCHMARK_LABELS)
BENCHMARK_SPEEDUP = Gauge("drafter_benchmark_speedup", "A finished DrafterBenchmark's speedup against its baseline.",
                          BENCHMARK_LABELS)
BENCHMARK_CROSSOVER = Gauge("drafter_benchmark_crossover_concurrency",
                            "A load sweep's lowest concurrency whose speedup is below 1.0; absent when none is.",
                            BENCHMARK_LABELS)
BENCHMARK_OUTPUT_DEFECTS = Gauge("drafter_benchmark_output_defects",
                                 "Prompts whose served output left the no-speculation baseline's at a clearly decided "
                                 "token (spec.equivalence); absent when the run compared no outputs.", BENCHMARK_LABELS)
_BY_BENCHMARK = ((BENCHMARK_FAILED, BENCHMARK_LABELS), (BENCHMARK_SPEEDUP, BENCHMARK_LABELS),
                 (BENCHMARK_CROSSOVER, BENCHMARK_LABELS), (BENCHMARK_OUTPUT_DEFECTS, BENCHMARK_LABELS))
TRAINING_LABELS = ("namespace", "training")
TRAINING_FAILED = Gauge("drafter_training_failed", "1 when the DrafterTraining's stage is Failed, else 0.",
                        TRAINING_LABELS)
LEADER = Gauge("drafter_operator_leader", "1 while this operator process leads (holds the leader Lease, or runs "
               "with --no-leader-election), 0 while it stands by: only a leader runs handlers.")
SHARD = Gauge("drafter_operator_shard", "1 for the shard this operator process leads (label shard, of shards; "
              "--shards): it reconciles only the objects whose namespace and name hash to it. Absent while it "
              "stands by.", ("shard", "shards"))
SHARDS = Gauge("drafter_operator_shards", "The shard count this operator process was started with (--shards), leading "
               "or standing by: a shard nobody leads shows as fewer drafter_operator_shard series than this.")
FOLLOWED = Gauge("drafter_operator_followed_objects", "Objects this operator process follows (a loop per object), "
                 "by kind: with --shards, its shard's share.", ("kind",))
API_REQUESTS = Gauge("drafter_operator_api_requests", "Kubernetes API requests made by the operator, by verb.",
                     ("verb",))
WATCH_EVENTS = Counter("drafter_watch_events", "Watch events the operator received for its children's kinds "
                       "(pods, deployments, services, jobs), by kind: its watches select only its own children, "
                       "so other workloads' churn does not show here.", ("kind",))


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
    first = window.first_position if window and window.has_data else None
    for gauge, value in ((ACCEPTANCE_RATE, rate), (ACCEPTANCE_LENGTH, length), (ACCEPTANCE_FIRST_POSITION, first)):
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
    return _forget(_BY_SERVING, lambda labels: (labels["namespace"], labels["name"]) != (namespace, name)) + \
        _forget(((RECONCILE_FAILING, ("kind", "namespace", "name")),),
                lambda labels: (labels["kind"], labels["namespace"], labels["name"]) != ("DrafterServing", namespace, name))


def set_engine_metrics_available(namespace: str, name: str, engine: str, drafter: str, revision: str,
                                 available: bool | None) -> None:
    """1 or 0; None (no Ready pod to read) removes the series."""
    if available is None:
        _remove(ENGINE_METRICS_AVAILABLE, (namespace, name, engine, drafter, revision))
        return
    ENGINE_METRICS_AVAILABLE.labels(namespace, name, engine, drafter, revision).set(1.0 if available else 0.0)


def _condition(status: dict, kind: str) -> dict:
    return next((c for c in status.get("conditions") or () if c.get("type") == kind), {})


def _timestamp(text: str | None) -> float | None:
    try:
        return timestamps.parse(text).timestamp() if text else None
    except ValueError:
        return None


def _keep_only(metric: Gauge, names: tuple[str, ...], mine: Callable[[dict[str, str]], bool],
               values: tuple[str, ...] | None) -> None:
    """Remove the series of ``metric`` that ``mine`` claims except ``values`` (None: remove them all)."""
    _forget(((metric, names),), lambda labels: not mine(labels)
            or (values is not None and tuple(labels[n] for n in names) == values))


def set_serving_state(namespace: str, name: str, engine: str, status: dict) -> None:
    """Ready, the swap under way, the last benchmark's speedup and drift from promotion, from the status a
    reconcile leaves.
    The rollback counter is created at zero here, so ``increase()`` sees a serving's first rollback."""
    ROLLBACKS.labels(namespace, name, engine)
    SERVING_READY.labels(namespace, name, engine).set(1.0 if _condition(status, "Ready").get("status") == "True" else 0.0)

    def of_serving(labels: dict[str, str]) -> bool:
        return (labels["namespace"], labels["name"]) == (namespace, name)

    # Apart from drafter_serving_ready (0 for ScaledToZero too) so a per-serving alert can wait `for` on it
    # without paging for servings scaled to zero on purpose. Not a lastTransitionTime clock: scaling up from
    # zero keeps Ready False (reason EngineStarting) with the old time, and would page at once.
    ready = _condition(status, "Ready")
    not_ready = (namespace, name, engine, ready.get("reason") or "") if ready.get("status") in ("False", "Unknown") \
        and ready.get("reason") not in NOT_READY_BY_REQUEST else None
    _keep_only(NOT_READY, SERVING_LABELS + ("reason",), of_serving, not_ready)
    if not_ready:
        NOT_READY.labels(*not_ready).set(1.0)

    progressing = _condition(status, "Progressing")
    since = _timestamp(progressing.get("lastTransitionTime")) if progressing.get("status") == "True" else None
    swap_values = (namespace, name, engine, progressing.get("reason") or "") if since is not None else None
    _keep_only(SWAP_STARTED, SERVING_LABELS + ("reason",), of_serving, swap_values)
    if swap_values:
        SWAP_STARTED.labels(*swap_values).set(since)

    last = status.get("lastBenchmark") or {}
    speedup = last.get("speedup")
    drafter = next((r.get("drafter") or "" for r in status.get("revisions") or () if r.get("name") == last.get("revision")), "")
    bench_values = (namespace, name, engine, drafter, last.get("revision") or "", last.get("name") or "") \
        if isinstance(speedup, (int, float)) else None
    _keep_only(LAST_BENCHMARK_SPEEDUP, LAST_BENCHMARK_LABELS, of_serving, bench_values)
    if bench_values:
        LAST_BENCHMARK_SPEEDUP.labels(*bench_values).set(speedup)
    _set_drift(namespace, name, engine, status, of_serving)


def _set_drift(namespace: str, name: str, engine: str, status: dict,
               of_serving: Callable[[dict[str, str]], bool]) -> None:
    """The active revision's figure at promotion and its DriftDetected condition, labelled as its live gauges are."""
    active = status.get("activeRevision") or ""
    drafter = next((r.get("drafter") or "" for r in status.get("revisions") or () if r.get("name") == active), "")
    revision = (namespace, name, engine, drafter, active)
    promoted = (status.get("acceptance") or {}).get("atPromotion") or {}
    length = promoted.get("acceptanceLength")
    promoted_values = revision + (promoted.get("benchmark") or "",) if active and isinstance(length, (int, float)) \
        else None
    _keep_only(ACCEPTANCE_LENGTH_AT_PROMOTION, REVISION_LABELS + ("benchmark",), of_serving, promoted_values)
    if promoted_values:
        ACCEPTANCE_LENGTH_AT_PROMOTION.labels(*promoted_values).set(length)
    drifted = {"True": 1.0, "False": 0.0}.get(_condition(status, "DriftDetected").get("status"))
    drift_values = revision if active and drifted is not None else None
    _keep_only(DRIFT, REVISION_LABELS, of_serving, drift_values)
    if drift_values:
        DRIFT.labels(*drift_values).set(drifted)


def set_benchmark_state(namespace: str, benchmark: str, serving: str, status: dict) -> None:
    """Failed or not, and a finished run's speedup, crossover concurrency and output defects (each absent when it
    has none)."""
    values = (namespace, benchmark, serving)
    forget_benchmark(namespace, benchmark, keep_serving=serving)  # the serving it measures may have changed
    BENCHMARK_FAILED.labels(*values).set(1.0 if status.get("state") == "Failed" else 0.0)
    result = status.get("result") or {}
    for gauge, value in ((BENCHMARK_SPEEDUP, result.get("speedup")),
                         (BENCHMARK_CROSSOVER, result.get("crossoverConcurrency")),
                         (BENCHMARK_OUTPUT_DEFECTS, (result.get("equivalence") or {}).get("defects"))):
        if isinstance(value, (int, float)):
            gauge.labels(*values).set(value)
        else:
            _remove(gauge, values)


def forget_benchmark(namespace: str, benchmark: str, keep_serving: str | None = None) -> int:
    """Remove a benchmark's series (it was deleted); ``keep_serving``: except those naming that serving."""
    return _forget(_BY_BENCHMARK, lambda labels: (labels["namespace"], labels["benchmark"]) != (namespace, benchmark)
                   or labels["serving"] == keep_serving)


def set_training_state(namespace: str, training: str, status: dict) -> None:
    TRAINING_FAILED.labels(namespace, training).set(1.0 if status.get("stage") == "Failed" else 0.0)


def forget_training(namespace: str, training: str) -> int:
    return _forget(((TRAINING_FAILED, TRAINING_LABELS),), lambda labels: (labels["namespace"], labels["training"])
                   != (namespace, training))


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


def start_reconcile_counters(kinds: tuple[str, ...]) -> None:
    """Create each kind's reconcile counters at zero when the operator starts. A counter's first sample
    has no increase: created by the first reconcile instead, ``increase(drafter_reconcile_total[...])``
    would miss it and DrafterOperatorNotReconciling go pending for a freshly started operator."""
    for kind in kinds:
        for result in ("ok", "error"):
            RECONCILES.labels(kind, result)


def set_reconcile_failing(kind: str, namespace: str, name: str, failing: bool) -> None:
    RECONCILE_FAILING.labels(kind, namespace, name).set(1 if failing else 0)


def set_leader(leading: bool) -> None:
    LEADER.set(1.0 if leading else 0.0)


def set_shard(shard) -> None:
    """The shard (sharding.Shard) this process leads from now on, for as long as it runs."""
    SHARDS.set(shard.count)
    SHARD.labels(str(shard.index), str(shard.count)).set(1.0)


def set_shard_count(count: int) -> None:
    """How many shards this process's election is for, said while it stands by too."""
    SHARDS.set(count)


def track_followed(loops, kinds: dict[str, str]) -> None:
    """Expose how many objects of each kind ``loops`` (object_loops.ObjectLoops) follows, read at scrape time;
    ``kinds`` maps each kind's name to its loops' key prefix."""
    for kind, prefix in kinds.items():
        FOLLOWED.labels(kind).set_function(lambda prefix=prefix: loops.count(prefix))


def track_api_requests(kube) -> None:
    """Expose the Kube client's request counts as a gauge, read at scrape time."""
    for verb in ("GET", "POST", "PATCH", "PUT", "DELETE"):
        API_REQUESTS.labels(verb).set_function(lambda verb=verb: kube.requests[verb])
