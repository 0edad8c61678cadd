"""The operator process in the simulated world: its watches and the view they build, its reconcile loop and
its acceptance watch, its settings, crashes and restarts.

**Watches.** One stream per kind the real operator watches (handlers.py): DrafterServings, DrafterBenchmarks,
and the children's kinds (Deployments, LeaderWorkerSets, pods, Services), which carry the managed-by label selector
(`handlers.CHILD_SELECTOR`): an object without it never reaches the view, and one that loses it leaves the view
as the apiserver's selected watch says (a DELETED event). Each stream delivers its events in order, `lag`
seconds late, on its own: kinds are never ordered among themselves. A stream can stall; when it comes back
kopf re-lists that kind and delivers what it lists, but not what was deleted during the gap, so the view keeps
those objects (ghosts) until an event names them again. A restarted operator lists everything afresh.

**The loop** is `controllers.serving.loop.run` step for step, with the real `controllers.serving.loop.Wakeups`: watch events and
acceptance measurements call `Wakeups.saw`; after a reconcile the loop `expect`s its own writes and waits as
`Wakeups.wait` does (woken with its own writes delivered, or `catch_up` past them, which sets the loop's
`behind`, or the plan's deadline, or the safety interval); the next reconcile is told `view_behind` by
`take_behind`, so the real reconciler reads the apiserver itself. Before each reconcile the loop reads the
requests in flight on every draining revision (`handlers.read_drain`): the world's traffic answers for each
pod IP, None when a pod cannot be read (a ghost's IP, a metrics fault).

**Settings.** The operator's environment (`environ`, the chart's values: tenancy.allowedImagePrefixes,
prometheus.endpoints) is the process environment during each reconcile, as the real process reads it
(ServingState's defaults); the drain setting and the default images are the reconciler's construction
arguments, as `handlers.configure` builds it. An administrator's change restarts the operator with the new
values (`helm upgrade` rolls the operator's pod).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os

from drafter_operator.acceptance.measurement import Measurement, persisted_verdict
from drafter_operator.controllers.handlers import CHILD_SELECTOR
from drafter_operator.controllers.serving.acceptance import WatchedByVersion
from drafter_operator.controllers.serving.apply import ServingReconciler
from drafter_operator.controllers.serving.loop import Wakeups
from drafter_operator.controllers.serving.observe import benchmarked_serving, observed_from
from drafter_operator.controllers.serving.pointer import draining_revisions
from drafter_operator.acceptance import drift as d
from drafter_operator.acceptance import verdict as a
from drafter_operator.resources.labels import SERVING_LABEL
from drafter_operator.settings import CATCH_UP_SECONDS

from drafter_testbed.simulation.apiserver import OperatorCrash, selected

WATCH_LATENCY = 0.3  # seconds from a write to its watch event, on a healthy stream
ERROR_RETRY = 5.0  # handlers.configure: memo.error_retry_seconds
CATCH_UP = CATCH_UP_SECONDS.default  # handlers.configure: Wakeups(catch_up=CATCH_UP_SECONDS.read())

#: The kinds the operator watches, and whether the apiserver selects them by the managed-by label.
WATCHED = {"drafterservings": False, "drafterbenchmarks": False, "deployments": True, "pods": True, "services": True,
           "leaderworkersets": True}


def json_copy(obj):
    """A deep copy of JSON data (what a thawed watched_copies.Kept gives the reconciler), without its encoding."""
    if type(obj) is dict:
        return {k: json_copy(v) for k, v in obj.items()}
    if type(obj) is list:
        return [json_copy(v) for v in obj]
    return obj


def plural_of(key: str) -> str:
    parts = key.split("/")
    return parts[parts.index("namespaces") + 2]


class WatchStream:
    """One kind's watch: its events in order, delivered `lag` late, or not at all while stalled."""

    def __init__(self, operator: OperatorSim, plural: str):
        self.operator, self.plural = operator, plural
        self.selected_by_label = WATCHED[plural]
        self.view: dict[str, dict] = {}
        self.log: list[tuple[str, dict | None, dict]] = []  # (key, object or None for DELETED, last body)
        self.pos = 0
        self.lag = WATCH_LATENCY
        self.stalled_until: float | None = None
        self.ghosts_made = 0  # objects a re-list left in the view that the store no longer has

    def matches(self, obj: dict | None) -> bool:
        return obj is not None and (not self.selected_by_label or selected(obj, CHILD_SELECTOR))

    def listed(self) -> dict[str, dict]:
        store = self.operator.world.api.store
        prefix = f"/{self.plural}/"
        return {k: o for k, o in store.items() if prefix in k and plural_of(k) == self.plural and self.matches(o)}

    def written(self, key: str, old: dict | None, new: dict | None) -> None:
        if self.matches(new):
            self.log.append((key, new, new))
        elif self.matches(old):  # deleted, or no longer selected: the selected watch says DELETED
            self.log.append((key, None, old))
        else:
            return
        if self.stalled_until is None:
            w = self.operator.world
            w.clock.after(self.lag, self.deliver, self.operator.incarnation, len(self.log))

    def deliver(self, incarnation: int, upto: int) -> None:
        if incarnation != self.operator.incarnation or self.stalled_until is not None or not self.operator.up:
            return
        while self.pos < min(upto, len(self.log)):
            key, obj, last = self.log[self.pos]
            self.pos += 1
            if obj is None:
                self.view.pop(key, None)
            else:
                self.view[key] = obj
            self.operator.event(self.plural, key, last)

    def stall(self, until: float) -> None:
        if self.stalled_until is None or until > self.stalled_until:
            self.operator.stalls.setdefault(self.plural, []).append((self.operator.world.clock.t, until))
            self.stalled_until = until
            self.operator.world.clock.at(until, self.resume, self.operator.incarnation, until)

    def resume(self, incarnation: int, until: float) -> None:
        if incarnation != self.operator.incarnation or self.stalled_until != until:
            return
        self.stalled_until = None
        self.relist()

    def relist(self) -> None:
        """kopf's re-list after a watch gap: every listed object is delivered as an event; what was deleted meanwhile
        is not, so the view keeps it."""
        listed = self.listed()
        self.ghosts_made += sum(1 for k in self.view if k not in listed)
        self.pos = len(self.log)
        for key, obj in listed.items():
            self.view[key] = obj
            self.operator.event(self.plural, key, obj)


class OperatorSim:
    def __init__(self, world, safety_interval: float, acceptance_interval: float, drain: dt.timedelta | None = None):
        self.world = world
        self.safety_interval = safety_interval
        self.acceptance_interval = acceptance_interval
        self.drain = drain
        self.default_images: dict[str, str] | None = None  # None: the release's (engines.DEFAULT_IMAGES)
        self.environ: dict[str, str] = {}  # the chart's settings on the operator's container
        self.up = False
        self.incarnation = 0
        self.reconciles = 0
        self.errors: list[tuple[float, str]] = []
        self.events: list[tuple[float, str, str, str]] = []
        self.down_since: float | None = 0.0
        self.downtime = 0.0  # total seconds down, for invariants that allow for it
        self.last_quiet = False
        self.streams: dict[str, WatchStream] = {}
        self.stalls: dict[str, list[tuple[float, float]]] = {}  # kind -> (from, until) of its watch's stalls

    @property
    def key(self) -> tuple[str, str]:
        return (self.world.namespace, self.world.name)

    # ------------------------------------------------------------------ life
    def start(self) -> None:
        if self.up:
            return
        self.incarnation += 1
        self.up = True
        if self.down_since is not None:
            self.downtime += self.world.clock.t - self.down_since
            self.world.track.down_periods.append((self.down_since, self.world.clock.t))
            self.down_since = None
        kwargs = {"drain": self.drain} if self.drain is not None else {}
        if self.default_images is not None:
            kwargs["default_images"] = dict(self.default_images)
        self.reconciler = ServingReconciler(kube=self.world.api, clock=self.world.clock.now, **kwargs)
        self.wakeups = Wakeups(catch_up=CATCH_UP, clock=lambda: self.world.clock.t)
        self.latest: Measurement | None = None
        self.monitor_key = None
        self.verdict: a.AcceptanceVerdict | None = None
        self.drift_key = None  # as AcceptanceMonitor keeps the drift watch: its key, verdict and thresholds
        self.drift: a.AcceptanceVerdict | None = None
        self.drift_thresholds: a.Thresholds | None = None
        self.watch = WatchedByVersion()
        self.waiting = False
        self.wait_generation = 0
        self.loop_running = False
        self.streams = {plural: WatchStream(self, plural) for plural in WATCHED}
        for stream in self.streams.values():  # kopf lists every watched kind at startup
            stream.view = stream.listed()
        self.world.clock.after(0.0, self.loop_turn, self.incarnation)
        self.world.clock.after(0.0, self.measure, self.incarnation)

    def crash(self, restart_after: float) -> None:
        self.up = False
        self.down_since = self.world.clock.t
        self.world.clock.after(restart_after, self.start)

    def restart(self, down_for: float) -> None:
        """A rolling restart (helm upgrade): down now, up with the current settings after `down_for`."""
        if self.up:
            self.crash(down_for)

    def downtime_since(self, t: float) -> float:
        """Seconds the operator was down since time t (up to now)."""
        now = self.world.clock.t
        down = 0.0 if self.down_since is None else now - max(self.down_since, t)
        for start, end in self.world.track.down_periods:
            down += max(0.0, min(end, now) - max(start, t))
        return down

    def stalled_serving_watch_since(self, t: float) -> float:
        """Seconds since t (up to now) during which the DrafterServing watch was stalled: the spec's changes unseen."""
        now = self.world.clock.t
        return sum(max(0.0, min(end, now) - max(start, t)) for start, end in self.stalls.get("drafterservings", []))

    # ------------------------------------------------------------------ the watches
    def written(self, plural: str, key: str, old: dict | None, new: dict | None) -> None:
        """The store changed: the watch of that kind (if the operator watches it) carries the event."""
        if self.up and plural in self.streams:
            self.streams[plural].written(key, old, new)

    def view(self, plural: str) -> dict[str, dict]:
        return self.streams[plural].view if plural in self.streams else {}

    def event(self, plural: str, key: str, body: dict) -> None:
        """A watch event reached the operator (its index is updated): the handlers wake the serving it is about."""
        w = self.world
        labels = body["metadata"].get("labels") or {}
        if plural == "drafterservings":
            about = body["metadata"]["name"]
        elif plural == "drafterbenchmarks":
            about = benchmarked_serving(labels, body.get("spec") or {})
        else:
            about = labels.get(SERVING_LABEL)
        if about != w.name:
            return
        self.wakeups.saw(self.key, plural, body["metadata"]["name"], body["metadata"].get("resourceVersion"))
        self.poke()

    # ------------------------------------------------------------------ the loop (controllers.serving.loop.run and Wakeups.wait)
    def poke(self) -> None:
        """Something set the loop's wake signal: a waiting loop looks at once (after what else happens now)."""
        if self.waiting:
            self.wait_generation += 1
            self.world.clock.after(0.0, self.wait_pass, self.incarnation, self.wait_generation)

    def begin_wait(self, timeout: float) -> None:
        self.waiting, self.woken = True, False
        self.deadline = self.world.clock.t + timeout
        self.wait_generation += 1
        self.wait_pass(self.incarnation, self.wait_generation)

    def wait_pass(self, incarnation: int, generation: int) -> None:
        """One pass of Wakeups.wait's loop, as it runs each time its wake signal fires or its limit comes."""
        if not self.up or incarnation != self.incarnation or not self.waiting or generation != self.wait_generation:
            return
        wakeups = self.wakeups
        signals = wakeups._signals(self.key)
        if signals.wake.is_set():
            self.woken = True
            signals.wake.clear()
        now = self.world.clock.t
        if signals.awaiting and now >= signals.awaiting_since + wakeups.catch_up:
            signals.awaiting.clear()
            signals.behind = True
        if (self.woken and not signals.awaiting) or now >= self.deadline:
            self.waiting = False
            self.world.clock.after(0.0, self.loop_turn, incarnation)
            return
        limit = min(self.deadline, signals.awaiting_since + wakeups.catch_up) if signals.awaiting else self.deadline
        self.wait_generation += 1
        self.world.clock.at(limit, self.wait_pass, incarnation, self.wait_generation)

    def loop_turn(self, incarnation: int) -> None:
        """One turn of controllers.serving.loop.run: reconcile, then wait."""
        if not self.up or incarnation != self.incarnation:
            return
        w = self.world
        body = self.view("drafterservings").get(w.serving_key)
        if body is None or body["metadata"].get("deletionTimestamp"):
            # No loop for a deleted serving (ObjectLoops stops it); a new one starts at the serving's next event.
            self.wakeups.forget(self.key)
            self.begin_wait(self.safety_interval)
            return
        try:
            applied = self.reconcile(body)
        except OperatorCrash:
            self.crash(w.pending_restart_after)
            return
        except Exception as exc:  # noqa: BLE001 - the loop outlives a failed write (controllers.serving.loop.run)
            self.errors.append((w.clock.t, repr(exc)))
            w.track.reconcile_failed(self, exc)
            self.begin_wait(ERROR_RETRY)
            return
        self.wakeups.expect(self.key, applied.written)
        timeout = self.safety_interval
        if applied.recheck_at is not None:
            timeout = min(timeout, max((applied.recheck_at - w.clock.now()).total_seconds(), 0.0))
        self.begin_wait(timeout)

    def reconcile(self, body: dict):
        w = self.world
        name = w.name
        deployments, groups, pods, services, benchmarks = [], [], [], [], []
        # kopf's indexes: children by their serving label (handlers.py's labels= filters), benchmarks by the
        # serving they measure.
        for plural, out in (("deployments", deployments), ("leaderworkersets", groups), ("pods", pods),
                            ("services", services)):
            for obj in self.view(plural).values():
                if (obj["metadata"].get("labels") or {}).get(SERVING_LABEL) == name:
                    out.append(obj)
        for obj in self.view("drafterbenchmarks").values():
            if benchmarked_serving(obj["metadata"].get("labels") or {}, obj.get("spec") or {}) == name:
                benchmarks.append(obj)
        service = next((s for s in services if s["metadata"]["name"] == name), None)
        snapshot = json_copy(body)
        # ServingIndexes.workloads: the Deployments, then the LeaderWorkerSets.
        observed = observed_from([*deployments, *groups], pods, service, owner_uid=body["metadata"].get("uid"),
                                 benchmarks=benchmarks)
        self.read_drain(observed)
        before = sum(w.api.requests.values())
        events_before = len(self.events)
        self.reconciles += 1
        w.track.reconcile_started(self)
        with self.settings():
            applied = self.reconciler.reconcile(snapshot, self.post_event, observed, self.latest,
                                                self.wakeups.take_behind(self.key))
        quiet = sum(w.api.requests.values()) == before and len(self.events) == events_before
        self.last_quiet = quiet and self.caught_up()
        w.track.reconcile_done(self, self.last_quiet)
        return applied

    def read_drain(self, observed) -> None:
        """handlers.read_drain: each draining revision's requests in flight, from its Ready pods' IPs in the view."""
        for draining in draining_revisions(observed):
            count = self.world.traffic.in_flight_at(observed.ready_pod_ips.get(draining, []))
            if count is not None:
                observed.in_flight[draining] = count

    @contextlib.contextmanager
    def settings(self):
        """The operator's environment as the process environment, for the reconcile (ServingState reads it)."""
        saved = {k: os.environ.get(k) for k in self.environ}
        os.environ.update(self.environ)
        try:
            yield
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def caught_up(self) -> bool:
        return all(s.pos == len(s.log) and s.stalled_until is None for s in self.streams.values())

    def post_event(self, kind: str, reason: str, message: str) -> None:
        self.events.append((self.world.clock.t, kind, reason, message))

    # ------------------------------------------------------------------ the acceptance watch
    def measure(self, incarnation: int) -> None:
        if not self.up or incarnation != self.incarnation:
            return
        w = self.world
        w.clock.after(self.acceptance_interval, self.measure, incarnation)
        if w.metrics_fault == "missing":
            return  # the measurement failed: nothing published (controllers.serving.loop.watch_acceptance)
        body = self.view("drafterservings").get(w.serving_key)
        if body is None or body["metadata"].get("deletionTimestamp"):
            return
        status = body.get("status") or {}
        watched = self.watch.of(body)  # as the handler: once per version of the body
        spec = watched.spec if watched else None
        if watched is None or spec.acceptance is None or spec.drafter.method == "none":
            self.monitor_key, self.verdict = None, None
            self.drift_key, self.drift = None, None
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
        sample = w.engines.sample(spec, watched.revision, self.view("pods"), self.thresholds, at)
        previous = self.verdict
        self.verdict = a.evaluate(previous, sample, self.thresholds)
        w.track.measured(body["metadata"]["uid"], watched.revision, w.clock.t, sample, self.thresholds)
        block = a.status_block(sample, spec.acceptance.source, self.thresholds.window_seconds, w.clock.iso())
        if block is not None:
            block["revision"] = watched.revision
        self.publish(Measurement(revision=watched.revision, verdict=self.verdict, previous=previous, status=block,
                                 serving_uid=body["metadata"].get("uid"),
                                 drift=self.measure_drift(body, watched, key, sample)))

    def measure_drift(self, body: dict, watched, key: tuple, sample: a.AcceptanceSample) -> d.Drift | None:
        """AcceptanceMonitor._drift: the same sample against the figure at promotion, when there is one."""
        baseline = watched.baseline
        if baseline is None:
            self.drift_key, self.drift = None, None
            return None
        if (key, baseline) != self.drift_key:
            self.drift_key = (key, baseline)
            self.drift = d.persisted(body.get("status") or {}, baseline)
            self.drift_thresholds = d.thresholds(watched.spec.acceptance, baseline)
        seen = d.look(self.drift, sample, baseline, self.drift_thresholds)
        self.drift = seen.verdict
        self.world.track.drift_measured(body["metadata"]["uid"], watched.revision, baseline.benchmark,
                                        (body.get("spec") or {}).get("acceptance") or {}, self.world.clock.t, sample)
        return seen

    def publish(self, measurement: Measurement | None) -> None:
        """controllers.serving.loop.watch_acceptance's publish (handlers._serving_loop): keep it, and wake the loop. The real
        loop wakes on every measurement; one whose verdict did not change decides nothing new beyond a
        status.acceptance refresh, which the next wake-up (any event, or the safety interval) still writes, so
        only a change wakes it here: a wake-up per measurement would triple the reconciles a scenario costs."""
        old, self.latest = self.latest, measurement
        if (old is None) != (measurement is None) or (measurement is not None and measurement.changed):
            self.wakeups.saw(self.key, "acceptance", self.world.name, None)
            self.poke()
