"""The operator process in the simulated world: its (lagging) view of the store, its reconcile loop
and its acceptance watch, crashes and restarts.

The view is what kopf's watches and indexes hold: the store's change log delivered up to `lag` seconds
late (0 most of the time; a stalled watch for a while), replaced by a full re-list at a restart or when
the stall ends. A reconcile runs the real `ServingReconciler` on the serving body and children from the
view, with the real `observed_from`, writing through the fake apiserver. It runs on watch events of
the serving's objects, at the plan's `recheck_at`, on a safety interval, after an error (5 s), and at
once after a restart. The acceptance watch measures the active revision as `AcceptanceMonitor.measure`
does (the real verdict state machine, `acceptance/verdict.py`), on samples the world's engines give.
"""

from __future__ import annotations

import datetime as dt

from drafter_operator.acceptance.measurement import Measurement, persisted_verdict
from drafter_operator.controllers.serving_acceptance import WatchedByVersion
from drafter_operator.controllers.serving import ServingReconciler
from drafter_operator.controllers.serving_observe import observed_from
from drafter_operator.kube import ApiError
from drafter_operator.acceptance import verdict as a
from drafter_operator.resources.labels import SERVING_LABEL

from tests.simulation.apiserver import OperatorCrash

WATCH_DELAY = 0.3  # seconds from a write to the reconcile its watch event triggers
ERROR_RETRY = 5.0
CATCH_UP = 5.0


def json_copy(obj):
    """A deep copy of JSON data (what kopf's kept_copy gives the reconciler), without copy.deepcopy's cost."""
    if type(obj) is dict:
        return {k: json_copy(v) for k, v in obj.items()}
    if type(obj) is list:
        return [json_copy(v) for v in obj]
    return obj


class OperatorSim:
    def __init__(self, world, safety_interval: float, acceptance_interval: float, drain: dt.timedelta | None = None):
        self.world = world
        self.safety_interval = safety_interval
        self.acceptance_interval = acceptance_interval
        self.drain = drain
        self.up = False
        self.incarnation = 0
        self.reconciles = 0
        self.errors: list[tuple[float, str]] = []
        self.events: list[tuple[float, str, str, str]] = []
        self.down_since: float | None = 0.0
        self.downtime = 0.0  # total seconds down, for invariants that allow for it
        self.lag = 0.0
        self.stall_until = 0.0
        self.last_quiet = False

    # ------------------------------------------------------------------ life
    def start(self) -> None:
        self.incarnation += 1
        self.up = True
        if self.down_since is not None:
            self.downtime += self.world.clock.t - self.down_since
            self.world.track.down_periods.append((self.down_since, self.world.clock.t))
            self.down_since = None
        kwargs = {"drain": self.drain} if self.drain is not None else {}
        self.reconciler = ServingReconciler(kube=self.world.api, clock=self.world.clock.now, **kwargs)
        self.relist()
        self.latest: Measurement | None = None
        self.monitor_key = None
        self.verdict: a.Verdict | None = None
        self.wake_at: float | None = None
        self.awaiting_until = 0.0
        self.watch = WatchedByVersion()
        self.wake(0.0)
        self.world.clock.after(0.0, self.measure, self.incarnation)

    def crash(self, restart_after: float) -> None:
        self.up = False
        self.down_since = self.world.clock.t
        self.world.clock.after(restart_after, self.start)

    def downtime_since(self, t: float) -> float:
        """Seconds the operator was down since time t (up to now)."""
        now = self.world.clock.t
        down = 0.0 if self.down_since is None else now - max(self.down_since, t)
        for start, end in self.world.track.down_periods:
            down += max(0.0, min(end, now) - max(start, t))
        return down

    # ------------------------------------------------------------------ the view
    def relist(self) -> None:
        self.view = dict(self.world.api.store)
        self.log_pos = len(self.world.watch_log)

    def catch_up(self) -> None:
        t = self.world.clock.t
        if self.stall_until and t >= self.stall_until:
            self.stall_until = 0.0
            self.relist()  # the stalled watch expires: kopf re-lists
            return
        cutoff = t - self.lag if not self.stall_until else -1.0
        log = self.world.watch_log
        i = self.log_pos
        while i < len(log) and log[i][0] <= cutoff:
            _, key, obj = log[i]
            if obj is None:
                self.view.pop(key, None)
            else:
                self.view[key] = obj
            i += 1
        self.log_pos = i

    def caught_up(self) -> bool:
        return self.log_pos == len(self.world.watch_log)

    # ------------------------------------------------------------------ the loop
    def wake(self, delay: float) -> None:
        """A watch event (or a deadline): reconcile after `delay`, coalesced with any earlier wake-up."""
        if not self.up:
            return
        t = self.world.clock.t + delay
        if self.wake_at is not None and self.wake_at <= t:
            return
        self.wake_at = t
        self.world.clock.at(t, self.reconcile, self.incarnation, t)

    def reconcile(self, incarnation: int, due: float) -> None:
        if not self.up or incarnation != self.incarnation or self.wake_at != due:
            return
        self.wake_at = None
        w = self.world
        self.catch_up()
        body = self.view.get(w.serving_key)
        if body is None or body["metadata"].get("deletionTimestamp"):
            return  # no loop for a deleted serving
        name = w.name
        deployments, pods, services, benchmarks = [], [], [], []
        for key, obj in self.view.items():
            labels = obj["metadata"].get("labels") or {}
            if "/drafterbenchmarks/" in key:
                if labels.get(SERVING_LABEL) == name or (obj.get("spec") or {}).get("servingRef", {}).get("name") == name:
                    benchmarks.append(obj)
            elif labels.get(SERVING_LABEL) != name:
                continue
            elif "/deployments/" in key:
                deployments.append(obj)
            elif "/pods/" in key:
                pods.append(obj)
            elif "/services/" in key:
                services.append(obj)
        service = next((s for s in services if s["metadata"]["name"] == name), None)
        observed = observed_from(deployments, pods, service, owner_uid=body["metadata"].get("uid"),
                                 benchmarks=benchmarks)
        before = sum(w.api.requests.values())
        events_before = len(self.events)
        self.reconciles += 1
        w.track.reconcile_started(self)
        try:
            applied = self.reconciler.reconcile(json_copy(body), self.post_event, observed, self.latest)
        except OperatorCrash:
            self.crash(w.pending_restart_after)
            return
        except Exception as exc:  # noqa: BLE001 - the loop outlives a failed write (serving_loop.run)
            self.errors.append((w.clock.t, repr(exc)))
            w.track.reconcile_failed(self, exc)
            self.wake(ERROR_RETRY)
            return
        quiet = sum(w.api.requests.values()) == before and len(self.events) == events_before
        self.last_quiet = quiet and self.caught_up()
        w.track.reconcile_done(self, self.last_quiet)
        if applied.written and not self.caught_up():
            self.awaiting_until = w.clock.t + CATCH_UP
        delay = self.safety_interval
        if applied.recheck_at is not None:
            delay = min(delay, max((applied.recheck_at - w.clock.now()).total_seconds(), 0.0))
        self.wake(delay)

    def post_event(self, kind: str, reason: str, message: str) -> None:
        self.events.append((self.world.clock.t, kind, reason, message))

    def saw_write(self) -> None:
        """The watch delivers a change of one of the serving's objects: wake (after our own writes land)."""
        if self.up:
            self.wake(max(WATCH_DELAY, self.lag, self.awaiting_until - self.world.clock.t)
                      if not self.stall_until else max(WATCH_DELAY, self.stall_until - self.world.clock.t))

    # ------------------------------------------------------------------ the acceptance watch
    def measure(self, incarnation: int) -> None:
        if not self.up or incarnation != self.incarnation:
            return
        w = self.world
        w.clock.after(self.acceptance_interval, self.measure, incarnation)
        if w.metrics_fault == "missing":
            return  # the measurement failed: nothing published (serving_loop.watch_acceptance)
        self.catch_up()
        body = self.view.get(w.serving_key)
        if body is None or body["metadata"].get("deletionTimestamp"):
            return
        status = body.get("status") or {}
        watched = self.watch.of(body)  # as the handler: once per version of the body
        spec = watched.spec if watched else None
        if watched is None or spec.acceptance is None or spec.drafter.method == "none":
            self.monitor_key, self.verdict = None, None
            self.publish(None)
            return
        key = (watched.revision, spec.engine, spec.acceptance.model_dump_json(), watched.learned,
               body["metadata"].get("uid"))  # as AcceptanceMonitor keys it
        if key != self.monitor_key:
            self.monitor_key, self.verdict = key, None
            self.thresholds = a.Thresholds.from_spec(spec.acceptance, watched.learned)
        if self.verdict is None:
            self.verdict = persisted_verdict(status, watched.revision)
        at = w.clock.now().timestamp()
        sample = w.engines.sample(spec, watched.revision, self.view, self.thresholds, at)
        previous = self.verdict
        self.verdict = a.evaluate(previous, sample, self.thresholds)
        w.track.measured(body["metadata"]["uid"], watched.revision, w.clock.t, sample, self.thresholds)
        block = a.status_block(sample, spec.acceptance.source, self.thresholds.window_seconds, w.clock.iso())
        if block is not None:
            block["revision"] = watched.revision
        self.publish(Measurement(revision=watched.revision, verdict=self.verdict, previous=previous, status=block,
                                 serving_uid=body["metadata"].get("uid")))

    def publish(self, measurement: Measurement | None) -> None:
        old, self.latest = self.latest, measurement
        # The real loop wakes on every measurement; one whose verdict did not change decides nothing new
        # beyond a status.acceptance refresh, which the safety interval's reconcile still writes.
        if (old is None) != (measurement is None) or (measurement is not None and measurement.changed):
            self.wake(WATCH_DELAY)
