"""The per-serving acceptance watch: one measurement per interval, turned into a verdict.

The serving loop owns one :class:`AcceptanceMonitor` per DrafterServing with ``spec.acceptance``. Each
``measure`` call takes a sample of the active revision (its Ready pods' ``/metrics``, or a Prometheus
query), feeds the verdict state machine (``verdict.py``) and returns what the pure
``decide`` needs: the verdict and the ``status.acceptance`` block. It also keeps the operator's own
gauges (``drafter_acceptance_rate``, ``_length``, ``drafter_degraded``) in step. A change of the
active revision or of ``spec.acceptance`` starts a fresh watch: old counters say nothing about a new
drafter. Beside the verdict, the same sample is judged against the figure the revision's gate measured at
promotion (``drift.py``), when there is one.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Protocol

from drafter_operator import engines, timestamps
from drafter_operator.engines import metrics_verdicts as mv
from drafter_operator.acceptance import verdict as a
from drafter_operator.acceptance import break_even as be
from drafter_operator.acceptance import drift as d
from drafter_operator.acceptance import schedule_obeyed
from drafter_operator.monitoring import operator_metrics
from drafter_operator.acceptance import prometheus_source as prom
from drafter_operator.acceptance.prometheus_query import revision_matchers
from drafter_operator.acceptance.engine_source import EngineSource, Replica
from drafter_operator.constants import REVISION_LABEL


@dataclass(frozen=True)
class Measurement:
    """What one look at acceptance gives ``decide``."""

    revision: str  # the revision measured
    verdict: a.AcceptanceVerdict
    previous: a.AcceptanceVerdict | None
    status: dict | None  # status.acceptance, camelCase
    # Which incarnation of the serving was measured: a measurement of one deleted and re-created under
    # the same name (a revision of the same hash) says nothing about the new one.
    serving_uid: str | None = None
    # Against status.acceptance.atPromotion, when the watched revision has one (DriftDetected).
    drift: d.Drift | None = None
    # Against the batch-size schedule the watched revision runs, when it runs one (ScheduleIgnored).
    schedule: schedule_obeyed.ScheduleCheck | None = None

    @property
    def changed(self) -> bool:
        return not self.verdict.same_condition(self.previous) or bool(self.drift and self.drift.changed)


def ready_with_ip(pod: dict) -> bool:
    """Whether a pod takes traffic: Ready, with an IP, and not being deleted (pure). The one definition
    both the acceptance watch (its scrape targets) and the serving's observation (the gate's target) use."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    return bool(status.get("podIP")) and not meta.get("deletionTimestamp") and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def ready_replicas(pods: list[dict], revision: str, port: int) -> list[Replica]:
    """The revision's pods that are Ready and have an IP, as scrape targets (pure). Read from the pods
    index when the watch measures, not from the last reconcile's view: a pod gone since then would be a
    failed scrape (the whole sample unavailable), a pod Ready since then a replica left out."""
    replicas = [Replica(name=pod["metadata"]["name"], ip=pod["status"]["podIP"], port=port) for pod in pods
                if (pod.get("metadata") or {}).get("labels", {}).get(REVISION_LABEL) == revision and ready_with_ip(pod)]
    return sorted(replicas, key=lambda r: r.name)


def persisted_verdict(status: dict, revision: str) -> a.AcceptanceVerdict | None:
    """The Degraded verdict status records for ``revision``, to resume from after an operator restart:
    a restart must neither clear Degraded nor restart its ``for`` clock."""
    if (status.get("acceptance") or {}).get("revision") != revision:
        return None
    condition = next((c for c in status.get("conditions") or [] if c.get("type") == "Degraded"), None)
    if not condition or condition.get("status") != "True" or \
            condition.get("reason") not in (a.LOW_RATE, a.LOW_LENGTH, a.DRAFTER_LOST):
        return None
    since = timestamps.parse(condition["lastTransitionTime"]).timestamp()
    return a.AcceptanceVerdict(status="True", reason=condition["reason"], message=condition.get("message", ""),
                     below_since=since)


class WatchedRevision(Protocol):
    """What a measurement looks at (the serving loop's ``Watched`` is one): the active ``revision`` and the
    ``spec`` it runs, for ``auto`` thresholds the break-even ``learned`` from its last benchmark, and the
    ``baseline`` its gate measured at promotion to judge drift against (None without one)."""

    @property
    def spec(self) -> Any: ...

    @property
    def revision(self) -> str: ...

    @property
    def learned(self) -> be.BreakEven | None: ...

    @property
    def baseline(self) -> d.Baseline | None: ...

    @property
    def schedule(self) -> tuple[tuple[int, int, int], ...] | None: ...


@dataclass(frozen=True)
class Incarnation:
    """What the serving's body says of the watch so far: which incarnation of the serving it is (``uid``) and
    the verdicts its status records for the watched revision (``verdict``: Degraded's, ``drift``: DriftDetected's),
    which a fresh watch resumes from."""

    uid: str | None = None
    verdict: a.AcceptanceVerdict | None = None
    drift: a.AcceptanceVerdict | None = None


def incarnation(body: dict, watched: WatchedRevision | None) -> Incarnation:
    """The ``Incarnation`` a serving's ``body`` records for ``watched`` (pure)."""
    if watched is None:
        return Incarnation(uid=(body.get("metadata") or {}).get("uid"))
    status = body.get("status") or {}
    return Incarnation(uid=body["metadata"].get("uid"), verdict=persisted_verdict(status, watched.revision),
                       drift=d.persisted(status, watched.baseline) if watched.baseline else None)


class AcceptanceMonitor:
    """The acceptance watch of one serving (kept by the serving loop between reconciles)."""

    def __init__(self, namespace: str, name: str, port: int | None = None) -> None:
        self.namespace, self.name = namespace, name
        #: The engine's port on each pod; None means the engine's default (what the operator renders).
        self.port = port
        self.key: tuple | None = None
        self.verdict: a.AcceptanceVerdict | None = None
        self.thresholds: a.Thresholds | None = None
        self.engine_source: EngineSource | None = None
        # The drift watch's own state: its key (the verdict's key and the baseline: a new figure at promotion
        # starts its clock afresh, the Degraded clock runs on), verdict and thresholds.
        self.drift_key: tuple | None = None
        self.drift: a.AcceptanceVerdict | None = None
        self.drift_thresholds: a.Thresholds | None = None

    def follow(self, watched: WatchedRevision, serving_uid: str | None = None) -> None:
        """Judge ``watched`` from here on: its ``thresholds`` and engine source, and a fresh watch (no verdict)
        when anything it is judged by changed since the last call."""
        spec, revision, learned = watched.spec, watched.revision, watched.learned
        acceptance = spec.acceptance
        # The serving's uid too: one deleted and re-created under the same name (its delete event lost in a
        # watch gap) starts from nothing, never from the old one's verdict on a revision of the same name.
        key = (revision, spec.engine, acceptance.model_dump_json() if acceptance else None, learned, serving_uid)
        if key != self.key:
            if self.key is not None:
                operator_metrics.forget_revision(self.namespace, self.name, self.key[0])
            self.key, self.verdict = key, None
            self.thresholds = a.Thresholds.from_spec(acceptance, learned)
            self.engine_source = EngineSource(spec.engine, self.thresholds.window_seconds,
                                              engines.draft_tokens_per_step(spec.engine, spec.drafter),
                                              model_name=spec.target.served_model_name or None)

    async def measure(self, watched: WatchedRevision | None, pods: list[dict], now: dt.datetime,
                      recorded: Incarnation = Incarnation()) -> Measurement | None:
        """One sample of the ``watched`` revision and the verdict on it; None (the watch forgotten) when nothing
        is watched or there is nothing to judge. ``pods``: the serving's pods now (its Ready ones are the scrape
        targets); ``recorded``: what the serving's body records (``incarnation``), which a fresh watch resumes
        from."""
        if watched is None:
            self.forget()
            return None
        spec, revision, learned, baseline = watched.spec, watched.revision, watched.learned, watched.baseline
        serving_uid = recorded.uid
        if spec.acceptance is None or spec.drafter.method == "none" or not revision \
                or (be.uses_auto(spec.acceptance) and learned is None):
            self.forget()  # nothing to judge (auto without a benchmark: decide says NoBenchmark)
            return None
        self.follow(watched, serving_uid)
        if self.verdict is None:
            self.verdict = recorded.verdict
        thresholds = self.thresholds
        at = now.timestamp()
        port = self.port or engines.engine(spec.engine).DEFAULT_PORT
        replicas = ready_replicas(pods, revision, port)
        if spec.acceptance.source == "prometheus":
            sample = await self._prometheus_sample(spec, revision, thresholds, at)
        else:
            sample = await self.engine_source.sample(replicas, at)
        previous = self.verdict
        self.verdict = a.evaluate(previous, sample, thresholds)
        drafter = f"{spec.drafter.method}:{spec.drafter.model or ''}".rstrip(":")
        labels = (self.namespace, self.name, spec.engine, drafter, revision)
        operator_metrics.set_acceptance(*labels, self.verdict.window)
        operator_metrics.set_degraded(*labels, {"True": True, "False": False}.get(self.verdict.status))
        # No Ready pod of the revision (its engines still load the model, or all restart) is nothing to read
        # yet, not an unreadable endpoint: the series is left out, so DrafterEngineMetricsUnavailable does not
        # page for every model load of a new serving.
        operator_metrics.set_engine_metrics_available(*labels, sample.problem is None if replicas else None)
        block = a.status_block(sample, spec.acceptance.source, thresholds.window_seconds,
                               timestamps.format_seconds(now))
        if block is not None:
            block["revision"] = revision
        return Measurement(revision=revision, verdict=self.verdict, previous=previous, status=block,
                           serving_uid=serving_uid, drift=self._drift(spec, sample, baseline, recorded.drift),
                           schedule=self._schedule_check(spec, watched.schedule, sample))

    @staticmethod
    def _schedule_check(spec, schedule: tuple[tuple[int, int, int], ...] | None,
                        sample: a.AcceptanceSample) -> schedule_obeyed.ScheduleCheck | None:
        """The sample's replicas against the schedule the revision runs; None when it runs none."""
        k = engines.draft_tokens_per_step(spec.engine, spec.drafter)
        if not schedule or not k:
            return None
        return schedule_obeyed.check(schedule, k, sample.replicas if sample.problem is None else ())

    def _drift(self, spec, sample: a.AcceptanceSample, baseline: d.Baseline | None,
               resume_drift: a.AcceptanceVerdict | None) -> d.Drift | None:
        """The same sample against the figure at promotion; None without one."""
        if baseline is None:
            self.drift_key, self.drift = None, None
            return None
        key = (self.key, baseline)
        if key != self.drift_key:
            self.drift_key, self.drift = key, resume_drift
            self.drift_thresholds = d.thresholds(spec.acceptance, baseline)
        seen = d.look(self.drift, sample, baseline, self.drift_thresholds)
        self.drift = seen.verdict
        return seen

    async def _prometheus_sample(self, spec, revision: str, thresholds: a.Thresholds, at: float) -> a.AcceptanceSample:
        name = spec.acceptance.prometheus
        try:
            endpoints = prom.endpoints_from_env()
            if name not in endpoints:  # decide refuses the spec too; never query a URL nobody configured
                raise prom.MetricsUnavailable("UnknownEndpoint", prom.endpoint_problem(name, endpoints) or "")
            found = await prom.fetch_acceptance(
                prom.PrometheusConnection(endpoints[name], shown_as=f"Prometheus endpoint {name!r}"),
                prom.AcceptanceQuery(spec.engine, revision_matchers(self.namespace, self.name, revision),
                                     thresholds.window_seconds,
                                     num_speculative_tokens=engines.draft_tokens_per_step(spec.engine, spec.drafter)))
        except prom.MetricsUnavailable as exc:
            return a.AcceptanceSample.unavailable(at, str(exc))
        except mv.MetricsUnusable as exc:
            return a.AcceptanceSample.unusable(at, exc)
        # Prometheus' total is its own sum of increases (one extrapolation per series), kept as is.
        return a.AcceptanceSample(at=at, window=found.total, replicas=tuple(sorted(found.replicas.items())))

    def forget(self) -> None:
        if self.key is not None:
            operator_metrics.forget_revision(self.namespace, self.name, self.key[0])
        self.key, self.verdict, self.engine_source = None, None, None
        self.drift_key, self.drift = None, None
