"""What must hold after every step of a simulation, one named function per invariant.

Each invariant is `fn(world) -> list[str]` (violations, worded for a person). Some read the world's
state at the step; others report what `Tracks` recorded as it happened (a write the operator made, a
cut stream, a finished outage), since a state alone cannot show them. `INVARIANTS` maps names to
functions; the runner calls all of them after every event.
"""

from __future__ import annotations

import json

import pydantic

from drafter_operator.api import DrafterServingSpec
from drafter_operator.controllers.serving.revisions import pod_settings_hash

from drafter_operator.acceptance import verdict as a
from drafter_operator.api import parse_duration
from drafter_operator.resources.labels import REVISION_LABEL

from dataclasses import dataclass, field

from drafter_testbed.simulation.clock import T0
from drafter_testbed.simulation.cluster import DEAD_ENDPOINT, fate_of, owner_uid
from drafter_testbed.simulation.objects import WORKLOAD_PLURALS, pod_templates
from drafter_testbed.simulation.engines import below

LOW_REASONS = ("LowAcceptanceRate", "LowAcceptanceLength")
SUCCESS_REASON = {"DisableSpeculation": "SpeculationDisabled", "Rollback": "RolledBack"}
DRAIN_BOUND = 600.0  # seconds an old revision may keep its pods after traffic left it (generous)
#: The reconciler checks a waiting plan's view against the apiserver every 60 s (ServingReconciler.verify_waiting);
#: with API faults (a refused read or patch is retried after a backoff) several checks may be needed.
VIEW_CHECK_GRACE = 600.0
SETTLE_SLACK = 900.0  # scheduling, termination, watch and reconcile delays (generous)
DELETE_BOUND = 900.0  # a deleted serving's children and the serving itself are gone by then
NODE_LOSS_GRACE = 3600.0
#: A StatefulSet's name is at most 52 characters (its pods' controller-revision-hash label holds it and a hash of up to
#: 10 in 63); LWS names each group's worker StatefulSet <set>-<group index>, and a set has at most 64 groups.
STATEFULSET_NAME_MAX = 52
LAST_GROUP_INDEX = 63


def startup_limit(spec: dict) -> float:
    """spec.startup.timeout (the world's models are all on the volume: no download allowance)."""
    return float(parse_duration(((spec.get("startup") or {}).get("timeout")) or "45m"))


def gate_bound(spec: dict) -> float:
    swap = spec.get("swap") or {}
    return float(parse_duration(swap.get("gateTimeout") or "30m")) if swap.get("gate") else 0.0


def two_revisions_bound(spec: dict) -> float:
    """How long two revisions of one serving may hold GPUs at once: a start, a gate, a drain."""
    return startup_limit(spec) + gate_bound(spec) + DRAIN_BOUND + SETTLE_SLACK


def action_bound(spec: dict) -> float:
    """How long after an onDegraded action is recorded its revision serves, or a condition says why not."""
    return startup_limit(spec) + gate_bound(spec) + DRAIN_BOUND + SETTLE_SLACK


def _spec_sans_replicas(world) -> dict:
    return {k: v for k, v in world.config.items() if k != "replicas"}


def _condition(serving: dict | None, kind: str) -> dict | None:
    for c in ((serving or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return c
    return None


EARLY = 5.0  # seconds a clock-based verdict may come early (timestamps are whole seconds)
PLACEMENT_TIMEOUT = 1800.0  # spec.startup.placementTimeout's default (the scenarios never set it)
GATE_TIMEOUT = 1800.0  # spec.swap.gateTimeout's default (the scenarios never set it)


def iso_seconds(stamp: str) -> float:
    """A timestamp the world wrote (clock.iso_at) as simulated seconds."""
    import datetime as _dt
    return (_dt.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=_dt.timezone.utc) - T0).total_seconds()


@dataclass
class RevisionFacts:
    """What the world did to one revision of one serving."""

    exits: int = 0
    pods: dict = field(default_factory=dict)  # pod uid -> [created, scheduled or None, Ready or None]
    gates: list = field(default_factory=list)  # gate verdicts the benchmark controller wrote
    first_ready: float | None = None
    unschedulable_at: float | None = None


@dataclass
class Asked:
    """A revision the user asked for, and since when."""

    uid: str
    revision: str
    since: float
    bound: float


class Tracks:
    """History the invariants need, recorded as the world changes."""

    def __init__(self, world):
        self.world = world
        self.found: dict[str, list[str]] = {}
        self.down_periods: list[tuple[float, float]] = []
        self.node_lost_at: float | None = None
        self.ever_ready: dict[str, bool] = {}
        self.endpoint: dict[str, tuple] = {}  # uid -> (service name, port, status.endpoint)
        self.template_spec: dict[str, dict] = {}  # Deployment key -> spec (sans replicas) its template was written for
        self.failed: dict[tuple[str, str], int] = {}  # (uid, revision) -> generation it was marked failed at
        self.foreign_uids: set[str] = set()
        self.admission_rules: dict[str, str] = {}
        self.refusals: list[tuple[int, str, str | None]] = []  # (reconcile number, message, admission rule)
        self.action: tuple | None = None  # (uid, since, revision, kind, recorded at)
        self.two_since: float | None = None
        self.gpus_dirty = False
        self.samples: dict[tuple[str, str], list[tuple[float, bool | None]]] = {}
        self.was_degraded: dict[str, bool] = {}
        self.settings_seen: dict[str, set[str]] = {}  # uid -> every pod-settings hash its spec has had  # uid -> its last known (True/False) Degraded status was True
        self.thresholds: dict[tuple[str, str], object] = {}
        self.degraded_checked: set[tuple[str, str]] = set()
        # The drift watch's samples per (uid, revision, gate benchmark at promotion, spec.acceptance as written),
        # judged when DriftDetected turns True against a floor read from the status and the spec, not the watch's;
        # the transitions judged, and each serving's last known (True/False) DriftDetected.
        self.drift_samples: dict[tuple[str, str, str, str], list[tuple[float, object]]] = {}
        self.drift_checked: set[tuple[str, str]] = set()
        self.was_drifting: dict[str, bool] = {}
        self.deletes: list[tuple[str, float]] = []
        self.cuts_seen = 0
        self.outages_seen = 0
        self.reconcile_number = 0
        self.last_template_change = -1e18
        # What the world really did to each revision of each serving (uid, revision): its engines' exits, its pods'
        # creation, scheduling and readiness, its gates' verdicts; what a failure must rest on.
        self.revision_facts: dict[tuple[str, str], RevisionFacts] = {}
        self.startup_history: list[tuple[float, float]] = []  # (time, spec.startup.timeout in seconds from then)
        self.last_selected: dict[str, str] = {}  # serving uid -> the revision its Service last selected
        self.ungated: dict[tuple[str, str], str] = {}  # (uid, revision) traffic moved to without its gate -> how
        self.operator_benchmarks: set[str] = set()  # benchmarks the operator created (gates)
        self.tenant_benchmarks: dict[str, str] = {}  # benchmark name -> how a tenant made it
        self.hands: list[tuple[float, str, str | None]] = []  # (time, what, revision) of hands on children
        self.admission_periods: list[tuple[float, float]] = []
        self.progress: dict[str, tuple[str, str, float]] = {}  # uid -> (Progressing reason, message, since)
        # uid -> since when a revision other than the serving one holds GPUs while Progressing says InvalidSpec
        self.refused_extra_since: dict[str, float] = {}
        self.asked: Asked | None = None
        self.ask_dirty_at: float | None = 0.0
        self.two_holding: set = set()  # the revisions holding GPUs together since two_since
        self.action_at = -1e18  # the last time an onDegraded action was recorded

    def report(self, invariant: str, message: str) -> None:
        self.found.setdefault(invariant, []).append(f"t={self.world.clock.t:.0f}s: {message}")

    def take(self, invariant: str) -> list[str]:
        return self.found.pop(invariant, [])

    # ------------------------------------------------------------------ hooks
    def spec_edited(self, field: str) -> None:
        self.asked_again(field)

    def asked_again(self, why: str) -> None:
        """The user (or an administrator) changed what is asked for: the liveness clock starts again."""
        self.ask_dirty_at = self.world.clock.t

    def hands_on(self, what: str, revision: str | None) -> None:
        self.hands.append((self.world.clock.t, what, revision))

    def scaled_by_hand(self, revision: str | None) -> bool:
        return any(what == "scale" and r == revision for _, what, r in self.hands)

    def facts(self, pod: dict) -> RevisionFacts | None:
        """The record of the revision a pod belongs to, by the serving uid owning its Deployment or LeaderWorkerSet."""
        api = self.world.api
        workload = api.store.get(api.by_uid.get(owner_uid(pod) or "", ""))
        uid = owner_uid(workload) if workload else None
        revision = (pod["metadata"].get("labels") or {}).get(REVISION_LABEL)
        if not uid or not revision:
            return None
        return self.revision_facts.setdefault((uid, revision), RevisionFacts())

    def pod_scheduled(self, pod: dict) -> None:
        facts = self.facts(pod)
        if facts is not None:
            created = iso_seconds(pod["metadata"]["creationTimestamp"])
            facts.pods.setdefault(pod["metadata"]["uid"], [created, None, None])[1] = self.world.clock.t

    def pod_unschedulable(self, pod: dict) -> None:
        facts = self.facts(pod)
        if facts is not None:
            facts.pods.setdefault(pod["metadata"]["uid"], [iso_seconds(pod["metadata"]["creationTimestamp"]), None, None])
            facts.unschedulable_at = self.world.clock.t

    def pod_ready(self, pod: dict) -> None:
        facts = self.facts(pod)
        if facts is not None:
            entry = facts.pods.setdefault(pod["metadata"]["uid"], [iso_seconds(pod["metadata"]["creationTimestamp"]),
                                                                   None, None])
            entry[2] = self.world.clock.t
            if facts.first_ready is None:
                facts.first_ready = self.world.clock.t

    def engine_exited(self, pod: dict) -> None:
        facts = self.facts(pod)
        if facts is not None:
            facts.exits += 1

    def benchmark_created(self, actor: str, body: dict) -> None:
        if actor == "operator":
            self.operator_benchmarks.add(body["metadata"]["name"])

    def gate_finished(self, benchmark: dict, verdict: str) -> None:
        uid, revision = owner_uid(benchmark), (benchmark["metadata"].get("labels") or {}).get(REVISION_LABEL)
        if uid and revision:
            facts = self.revision_facts.setdefault((uid, revision), RevisionFacts())
            facts.gates.append(verdict)

    def startup_limit_between(self, start: float, end: float) -> float:
        """The shortest spec.startup.timeout in force at any time from `start` to `end`."""
        limits = [limit for t, limit in self.startup_history if start < t <= end]
        before = [limit for t, limit in self.startup_history if t <= start]
        return min(limits + before[-1:] or [2700.0])

    def serving_deleted(self, uid: str) -> None:
        self.deletes.append((uid, self.world.clock.t))

    def measured(self, uid, revision, t, sample, thresholds) -> None:
        from drafter_testbed.simulation.engines import below
        self.samples.setdefault((uid, revision), []).append((t, below(sample, thresholds)))
        self.thresholds[(uid, revision)] = thresholds

    def drift_measured(self, uid, revision, benchmark, acceptance: dict, t, sample) -> None:
        self.drift_samples.setdefault((uid, revision, benchmark, _spec_key(acceptance)), []).append((t, sample))

    def reconcile_started(self, operator) -> None:
        self.reconcile_number += 1

    def reconcile_failed(self, operator, exc) -> None:
        self._judge_refusals()

    def reconcile_done(self, operator, quiet: bool) -> None:
        self._judge_refusals()
        if quiet:
            self._status_says_what_serves()

    def on_write(self, actor, plural, key, old, new, ok, detail) -> None:
        w = self.world
        if not ok:
            method, path, code, message, body = detail
            if actor == "operator" and code in (403, 422):
                if code == 422 and method == "POST" and "metadata.name" in message:
                    self.report("names-fit", f"the apiserver refused a name the operator chose: {message}")
                rule = next((n for n, m in self.admission_rules.items() if m == message), None)
                self.refusals.append((self.reconcile_number, message, rule))
            return
        serving = w.serving()
        generation = serving["metadata"].get("generation") if serving else None
        uid = serving["metadata"]["uid"] if serving else None
        if plural == "drafterservings" and new is not None and key == w.serving_key:
            self._serving_written(old, new)
        if actor != "operator":
            if plural == "pods" and new is None and w.cluster.removal_cause.get(key) == "template-change":
                self.last_template_change = w.clock.t
            return
        target = old or new
        if old is not None and old["metadata"]["uid"] in self.foreign_uids:
            verb = "deleted" if new is None else "patched"
            self.report("never-adopt", f"the operator {verb} {key}, which the serving does not own")
        if plural in WORKLOAD_PLURALS:
            kind = (old or new).get("kind") or "Deployment"
            if old is None and new is not None:  # created
                name = new["metadata"]["name"]
                if len(name) > 63:
                    self.report("names-fit", f"{kind} name {name!r} is {len(name)} characters (> 63)")
                if plural == "leaderworkersets" and len(f"{name}-{LAST_GROUP_INDEX}") > STATEFULSET_NAME_MAX:
                    self.report("names-fit", f"LeaderWorkerSet name {name!r} leaves its last group's StatefulSet "
                                             f"{name}-{LAST_GROUP_INDEX} over {STATEFULSET_NAME_MAX} characters")
                revision = new["metadata"]["labels"].get(REVISION_LABEL)
                gen = self.failed.get((uid, revision))
                if gen is not None and gen == generation:
                    self.report("no-stale-decisions", f"revision {revision} was marked failed (good: false) at "
                                                      f"generation {gen} and re-created with no spec change")
                self.template_spec[key] = _spec_sans_replicas(w)
            elif old is not None and new is not None:
                if pod_templates(old) != pod_templates(new):
                    # The operator renders from its own (possibly stale) view: the workload's record of the pod
                    # settings it was rendered from says whether the settings changed, whatever the view was.
                    settings = [((d["metadata"].get("annotations") or {}).get(POD_SETTINGS)) for d in (old, new)]
                    if settings[0] is not None and settings[0] == settings[1]:
                        self.report("no-unplanned-restarts", f"{new['metadata']['name']}'s pod template changed with "
                                                             "no spec change but replicas (its pods restart)")
                    elif settings[1] not in self.settings_seen.get(owner_uid(new), set()):
                        self.report("no-unplanned-restarts", f"{new['metadata']['name']}'s pod template was rewritten "
                                                             f"for pod settings {settings[1]} the spec never had")
                    self.template_spec[key] = _spec_sans_replicas(w)
                    self.last_template_change = w.clock.t
            elif new is None:
                revision = old["metadata"]["labels"].get(REVISION_LABEL)
                if revision is not None and revision == w.selected_revision() and owner_uid(old) == uid:
                    self.report("no-unplanned-restarts", f"the operator deleted {kind} {old['metadata']['name']} "
                                                         f"of revision {revision}, which the Service selects")
        if plural == "services" and new is not None and uid and owner_uid(new) == uid:
            self._service_pointed(uid, serving, new)
        if plural in ("drafterbenchmarks", "services") and old is None and new is not None:
            name = new["metadata"]["name"]
            if plural == "drafterbenchmarks" and len(name) > 52:
                self.report("names-fit", f"DrafterBenchmark name {name!r} > 52")
            if plural == "drafterbenchmarks" and serving is not None:
                # Guarantee 5: an onDegraded action's revision is the way out; it is never held to the gate.
                action = (serving.get("status") or {}).get("degradedAction") or {}
                gated = (new["metadata"].get("labels") or {}).get(REVISION_LABEL)
                if action.get("revision") and gated == action["revision"]:
                    self.report("actions-take-effect", f"the revision {gated} of onDegraded {action.get('action')} "
                                                       "was given a gate benchmark")

    def _serving_written(self, old: dict | None, new: dict) -> None:
        w = self.world
        uid = new["metadata"]["uid"]
        try:
            self.settings_seen.setdefault(uid, set()).add(
                pod_settings_hash(DrafterServingSpec.model_validate(new.get("spec") or {})))
        except pydantic.ValidationError:
            pass
        limit = startup_limit(new.get("spec") or {}) if isinstance((new.get("spec") or {}).get("startup"), dict) else 2700.0
        if not self.startup_history or self.startup_history[-1][1] != limit:
            self.startup_history.append((w.clock.t, limit))
        status = new.get("status") or {}
        old_status = ((old or {}).get("status") or {}) if old and old["metadata"]["uid"] == uid else {}
        known = {r["name"]: r.get("good") for r in old_status.get("revisions") or []}
        for r in status.get("revisions") or []:
            if r.get("good") is False and known.get(r["name"]) is not False:
                self.failed[(uid, r["name"])] = new["metadata"].get("generation")
                self._judge_failure(uid, r["name"], r.get("failedReason"))
            elif r.get("good") is not False:
                # A retry cleared it, or a first revision failed on its bound became Ready and served after all:
                # starting it again is no stale decision.
                self.failed.pop((uid, r["name"]), None)
        self._benchmarks_steer(uid, old_status, status)
        self._progress_seen(uid, new)
        action = status.get("degradedAction")
        if action and (self.action is None or self.action[:2] != (uid, action.get("since"))):
            self.action = (uid, action.get("since"), action.get("revision"), action.get("action"), w.clock.t)
            self.action_at = w.clock.t
        degraded = _condition(new, "Degraded")
        # A Degraded that was established and then went Unknown (no data) is the same Degraded when the data
        # comes back low: the property is about entering it, which needs `for` of continuous evidence.
        continued = self.was_degraded.get(uid, False)
        if degraded and degraded.get("status") == "True" and degraded.get("reason") in LOW_REASONS and not continued:
            mark = (uid, degraded.get("lastTransitionTime"))
            if mark not in self.degraded_checked:
                self.degraded_checked.add(mark)
                self._degraded_evidence(uid, status, degraded)
        if degraded and degraded.get("status") != "Unknown":
            self.was_degraded[uid] = degraded.get("status") == "True"
        self._drift_seen(uid, old_status, new)

    def _drift_seen(self, uid: str, old_status: dict, serving: dict) -> None:
        """DriftDetected turns True only with a figure at promotion, never mid-swap, and after readings below the
        floor covering spec.acceptance.for (a return from Unknown to an established drift excepted, as Degraded)."""
        status = serving.get("status") or {}
        drift = _condition({"status": status}, "DriftDetected")
        before = _condition({"status": old_status}, "DriftDetected") or {}
        if drift and drift.get("status") == "True" and before.get("status") != "True" \
                and not self.was_drifting.get(uid, False):
            mark = (uid, drift.get("lastTransitionTime"))
            if mark not in self.drift_checked:
                self.drift_checked.add(mark)
                promoted = (status.get("acceptance") or {}).get("atPromotion") or {}
                progressing = _condition({"status": status}, "Progressing") or {}
                if not promoted.get("benchmark"):
                    self.report("drift-needs-evidence", "DriftDetected=True without status.acceptance.atPromotion")
                elif progressing.get("status") == "True":
                    self.report("drift-needs-evidence", f"DriftDetected turned True mid-swap (Progressing="
                                                        f"{progressing.get('reason')})")
                else:
                    # The watch measures the active revision (status.acceptance keeps the figures of the last one
                    # both wanted and serving, which a failed swap leaves behind).
                    revision = status.get("activeRevision")
                    acceptance = (serving.get("spec") or {}).get("acceptance") or {}
                    samples = self.drift_samples.get((uid, revision, promoted["benchmark"], _spec_key(acceptance)), [])
                    t = drift_floor(promoted, acceptance)
                    self._evidence("drift-needs-evidence", f"DriftDetected={drift.get('reason')}", revision,
                                   [(at, below(sample, t)) for at, sample in samples], t, None)
        if drift and drift.get("status") != "Unknown":
            self.was_drifting[uid] = drift.get("status") == "True"

    def _service_pointed(self, uid: str, serving: dict, service: dict) -> None:
        """Guarantee 2: traffic moves to a revision only once it passed its gate, when the spec gates it (an onDegraded
        action's revision is not gated; a serving that never served has nothing to protect). Recorded at the switch,
        judged once the revision takes traffic (a switch at zero replicas serves nothing until a scale-up)."""
        revision = ((service.get("spec") or {}).get("selector") or {}).get(REVISION_LABEL)
        before = self.last_selected.get(uid)
        if revision is None or revision == before:
            return
        self.last_selected[uid] = revision
        status = serving.get("status") or {}
        served = any(r.get("good") for r in status.get("revisions") or [] if r.get("name") != revision)
        gate = ((serving.get("spec") or {}).get("swap") or {}).get("gate")
        action = (status.get("degradedAction") or {}).get("revision")
        facts = self.revision_facts.get((uid, revision))
        if before is not None and served and gate and revision != action and "Passed" not in (facts.gates if facts else []):
            self.ungated[(uid, revision)] = (f"the Service moved from revision {before} to {revision} at "
                                             f"t={self.world.clock.t:.0f}s (replicas {serving['spec'].get('replicas')}), "
                                             f"which the spec gates, and no gate of it passed "
                                             f"(gates seen: {facts.gates if facts else []})")

    def _judge_failure(self, uid: str, revision: str, reason: str | None) -> None:
        """A revision is marked failed only for what the world really did: its engine exited, it was not Ready within
        its startup bound of a pod's scheduling, a pod was not placed within the placement bound, its gate failed, or
        it was Ready a gate timeout ago without a passed gate."""
        t = self.world.clock.t
        facts = self.revision_facts.get((uid, revision)) or RevisionFacts()
        # A gate the operator aimed at a pod that was gone (DEAD_ENDPOINT) is no reason: that failure is its own.
        if facts.exits or any(g not in ("Passed", DEAD_ENDPOINT) for g in facts.gates):
            return
        replicas = ((self.world.serving() or {}).get("spec") or {}).get("replicas", 1)
        fully_ready = self.world.ready_pods(uid, revision) >= max(replicas, 1)
        for created, scheduled, ready in facts.pods.values():
            if scheduled is not None:
                limit = self.startup_limit_between(scheduled, t)
                # The revision is Ready when all its replicas are: one Ready pod beside others that wait is not.
                if t >= scheduled + limit - EARLY and (not fully_ready or ready is None or ready > scheduled + limit - EARLY):
                    return
            if t >= created + PLACEMENT_TIMEOUT - EARLY and (scheduled is None or scheduled > created + PLACEMENT_TIMEOUT - EARLY):
                return
        if facts.first_ready is not None and t >= facts.first_ready + GATE_TIMEOUT - EARLY and "Passed" not in facts.gates:
            return
        self.report("failed-for-a-reason", f"revision {revision} was marked failed ({reason!r}) though the world gave no "
                                           f"reason: exits {facts.exits}, gates {facts.gates}, pods (created, scheduled, "
                                           f"ready) {sorted(map(str, facts.pods.values()))[:4]}")

    def _benchmarks_steer(self, uid: str, old_status: dict, status: dict) -> None:
        """Issue 38 item 4: only a benchmark the operator ran against the serving (its gate, or a run by hand through
        spec.servingRef) may set status.lastBenchmark (SPEEDUP, learned thresholds) or status.speculationSchedule."""
        named = []
        last = (status.get("lastBenchmark") or {}).get("name")
        if last and last != (old_status.get("lastBenchmark") or {}).get("name"):
            named.append(("lastBenchmark", last))
        source = (status.get("speculationSchedule") or {}).get("source") or ""
        if source.startswith("benchmark ") and source != (old_status.get("speculationSchedule") or {}).get("source"):
            named.append(("speculationSchedule", source.split(" ", 1)[1]))
        for field, name in named:
            variant = self.tenant_benchmarks.get(name)
            if name not in self.operator_benchmarks and variant != "by_hand":
                self.report("benchmarks-steer-nothing", f"status.{field} now comes from DrafterBenchmark {name} "
                                                        f"({variant or 'unknown'}), which the operator did not run "
                                                        "against the serving")

    def _progress_seen(self, uid: str, serving: dict) -> None:
        progressing = _condition(serving, "Progressing") or {}
        now = (progressing.get("reason") or "", progressing.get("message") or "")
        known = self.progress.get(uid)
        if known is None or known[:2] != now:
            self.progress[uid] = (*now, self.world.clock.t)

    def _degraded_evidence(self, uid: str, status: dict, degraded: dict) -> None:
        revision = (status.get("acceptance") or {}).get("revision") or status.get("activeRevision")
        t = self.thresholds.get((uid, revision))
        # A lost drafter needs one window of evidence (or `for`, if shorter); any other reason the whole `for`.
        needed = min(t.for_seconds, t.window_seconds) if t is not None and degraded.get("reason") == "DrafterLost" \
            else None
        self._evidence("degraded-needs-evidence", f"Degraded={degraded.get('reason')}", revision,
                       self.samples.get((uid, revision), []), t, needed)

    def _evidence(self, invariant: str, what: str, revision: str | None, samples: list, t, needed: float | None) -> None:
        """A condition turned True on ``samples`` (the watch's looks at ``revision``, judged against ``t``): it needs
        a run of below-threshold samples covering ``needed`` (default ``for``) with no healthy one and no stretch
        without a below-threshold sample (no data, unreadable metrics) longer than one window."""
        if t is None or not samples:
            self.report(invariant, f"{what} on revision {revision} with no measurement of it at all")
            return
        last = next((at for at, b in reversed(samples) if b is True), None)
        if last is None:
            self.report(invariant, f"{what} on revision {revision} with no below-threshold measurement of it")
            return
        needed = t.for_seconds if needed is None else needed
        need_from = last - needed
        prev_below = last
        for at, below in reversed(samples):
            if at > last:
                continue
            if below is False:
                self.report(invariant, f"{what} at {last:.0f}s on revision {revision}: the sample at {at:.0f}s was "
                                       f"above threshold, within for ({t.for_seconds:.0f}s)")
                return
            if below is None:
                continue
            if prev_below - at > t.window_seconds + 1:
                self.report(invariant, f"{what} at {last:.0f}s on revision {revision}: no below-threshold measurement "
                                       f"from {at:.0f}s to {prev_below:.0f}s, longer than the window "
                                       f"{t.window_seconds:.0f}s")
                return
            prev_below = at
            if at <= need_from + 1e-6:
                return
        self.report(invariant, f"{what} at {last:.0f}s on revision {revision} after {last - prev_below:.0f}s of "
                               f"below-threshold samples; it needs {needed:.0f}s")

    def _judge_refusals(self) -> None:
        if not self.refusals:
            return
        keep = []
        serving = self.world.serving()
        again = {message for number, message, _ in self.refusals if number == self.reconcile_number}
        for number, message, rule in self.refusals:
            if number >= self.reconcile_number:
                keep.append((number, message, rule))
                continue
            if serving is None or (rule is not None and rule not in self.world.api.faults.admission):
                continue  # the refusal is over (the retry went through) or there is no serving to report on
            if message not in again:
                continue  # the next reconcile no longer needed that write: there is nothing refused to report
            core = message.split(": ", 1)[-1][:60]
            if "/status" in (rule or "") or "status writes" in message:
                # The status itself is refused: only an Event can tell (Kubernetes Events are another write).
                if not any(core in e[3] for e in self.world.operator.events):
                    self.report("failures-visible", f"a refused status write ({message}) is in no Event of the "
                                                    "serving one reconcile later")
                continue
            in_status = any(core in (c.get("message") or "") for c in (serving.get("status") or {}).get("conditions") or [])
            status_refused = any("/status" in (r or "") or "status writes" in m for _, m, r in self.refusals)
            if not in_status and not (status_refused and any(core in e[3] for e in self.world.operator.events)):
                # While the status itself is refused, the Warning Event is the only channel left.
                self.report("failures-visible", f"a refused write ({message}) is in no condition of the serving "
                                                "one reconcile later")
        self.refusals = keep

    def _status_says_what_serves(self) -> None:
        w = self.world
        serving = w.serving()
        selected = w.selected_revision()
        if serving is None:
            return
        status = serving.get("status") or {}
        if selected and status.get("activeRevision") and status["activeRevision"] != selected:
            self.report("status-says-what-serves", f"status.activeRevision {status['activeRevision']} but the Service "
                                                   f"selects {selected} (after a quiet reconcile)")
        ready = _condition(serving, "Ready") or {}
        # A revision out of the watches' sight (a label removed) is found by the next check of the view: a grace.
        if selected and ready.get("reason") == "InvalidSpec" and w.spec_refused() and \
                w.ready_pods(serving["metadata"]["uid"], selected) and \
                w.clock.t - (since := iso_seconds(ready["lastTransitionTime"])) - w.operator.downtime_since(since) \
                > VIEW_CHECK_GRACE:
            self.report("status-says-what-serves", f"Ready says InvalidSpec while the Service routes to revision "
                                                   f"{selected}, which has Ready pods (guarantee 14: what serves, serves)")
        serving_block = status.get("serving") or {}
        if selected and serving_block.get("revision") and serving_block["revision"] != selected:
            self.report("status-says-what-serves", f"status.serving describes revision {serving_block['revision']} but "
                                                   f"the Service selects {selected} (after a quiet reconcile)")
        degraded = _condition(serving, "Degraded")
        if degraded and degraded.get("reason") in SUCCESS_REASON.values():
            action = status.get("degradedAction") or {}
            if action.get("revision") != selected:
                self.report("status-says-what-serves", f"Degraded reason {degraded['reason']} while the Service selects "
                                                       f"{selected}, not the action's revision {action.get('revision')}")


# ---------------------------------------------------------------------- the invariants

def stable_endpoint(world) -> list[str]:
    serving = world.serving()
    if serving is None:
        return []
    uid = serving["metadata"]["uid"]
    service = world.owned_service(uid)
    endpoint = (serving.get("status") or {}).get("endpoint")
    port = ((service or {}).get("spec") or {}).get("ports", [{}])[0].get("port") if service else None
    known = world.track.endpoint.get(uid)
    now = (service["metadata"]["name"] if service else None, port, endpoint)
    if known is None:
        if service is not None or endpoint:
            world.track.endpoint[uid] = now
        return []
    out = []
    merged = tuple(n if n is not None else k for n, k in zip(now, known))
    if service is not None and known[0] is not None and (now[0], now[1]) != (known[0], known[1]):
        out.append(f"the Service moved from {known[0]}:{known[1]} to {now[0]}:{now[1]} (engine {world.config['engine']})")
    if endpoint and known[2] and endpoint != known[2]:
        out.append(f"status.endpoint moved from {known[2]} to {endpoint} (engine {world.config['engine']})")
    world.track.endpoint[uid] = known if out else merged
    return out


def no_cut_streams(world) -> list[str]:
    out = []
    tr, track = world.traffic, world.track
    spec = (world.serving() or {}).get("spec") or {}
    drain_timeout = max(float(parse_duration((spec.get("swap") or {}).get("drainTimeout") or "5m")),
                        world.operator.reconciler.drain.total_seconds())
    for cut in tr.cuts[track.cuts_seen:]:
        if cut.strategy != "BlueGreen" or cut.cause in ("node-loss", "serving-deleted", "template-change", "unknown") \
                or cut.cause in BY_HAND:
            continue
        if cut.cause == "scale-down" and (cut.revision == world.selected_revision() or not world.config["replicas"]
                                          or track.scaled_by_hand(cut.revision)):
            continue  # fewer replicas asked for
        if cut.left_at is not None and cut.t >= cut.left_at + drain_timeout - 1.0:
            continue  # a stream longer than spec.swap.drainTimeout: the drain ended at its bound
        since = "while it served" if cut.left_at is None else f"{cut.t - cut.left_at:.0f}s after traffic left it"
        out.append(f"a stream on pod {cut.pod} (revision {cut.revision}) was cut: {cut.cause} {since}, before "
                   f"drainTimeout {drain_timeout:.0f}s")
    track.cuts_seen = len(tr.cuts)
    for outage in tr.outages[track.outages_seen:]:
        start, end = outage.context, outage.context.get("end", {})
        if not (start.get("strategy") == end.get("strategy") == "BlueGreen") or not start.get("replicas") \
                or not end.get("replicas") or not start.get("ever_ready") or not start.get("service_owned") \
                or start.get("uid") != end.get("uid"):
            continue
        if track.node_lost_at is not None and track.node_lost_at >= outage.start - NODE_LOSS_GRACE:
            continue
        if track.last_template_change >= outage.start - NODE_LOSS_GRACE:
            continue  # an in-place restart (env, pod policy): planned, judged by no-unplanned-restarts
        if any(outage.start - NODE_LOSS_GRACE <= t <= (outage.end or outage.start) for t, _, _ in track.hands):
            continue  # someone deleted or restarted what served (hands on children)
        out.append(f"requests failed for {outage.end - outage.start:.0f}s from t={outage.start:.0f}s: the Service "
                   f"selected no Ready pod (revision {start.get('selected')} -> {end.get('selected')})")
    track.outages_seen = len(tr.outages)
    return out


#: The annotation on a Deployment naming the pod settings its template was rendered from (serving_patches).
POD_SETTINGS = "drafter.dev/pod-settings"


def no_unplanned_restarts(world) -> list[str]:
    return world.track.take("no-unplanned-restarts")


def status_says_what_serves(world) -> list[str]:
    return world.track.take("status-says-what-serves")


def actions_take_effect(world) -> list[str]:
    track = world.track
    gated = track.take("actions-take-effect")  # an action's revision given a gate benchmark (on_write)
    if gated:
        return gated
    if track.action is None:
        return _action_never_taken(world)
    uid, since, revision, kind, at = track.action
    serving = world.serving()
    if serving is None or serving["metadata"]["uid"] != uid or \
            ((serving.get("status") or {}).get("degradedAction") or {}).get("since") != since:
        track.action = None  # ended (a spec change) or the serving is gone
        return []
    if world.selected_revision() == revision:
        track.action = None
        return []
    spec = serving.get("spec") or {}
    elapsed = world.clock.t - at - world.operator.downtime_since(at)
    if elapsed <= action_bound(spec) or not spec.get("replicas") or \
            (track.node_lost_at is not None and track.node_lost_at >= at):
        return []
    track.action = None
    degraded = _condition(serving, "Degraded") or {}
    if degraded.get("reason") not in (SUCCESS_REASON.get(kind), "ActionInProgress") and degraded.get("message"):
        return []
    return [f"onDegraded {kind} to revision {revision} recorded {elapsed:.0f}s ago: the Service selects "
            f"{world.selected_revision()} and Degraded says {degraded.get('reason')}: {degraded.get('message', '')[:120]}"]


def _action_never_taken(world) -> list[str]:
    """Guarantee 5's other half: a speculative revision Degraded for low acceptance, with onDegraded
    DisableSpeculation, gets its action recorded (checked once Degraded has lasted a settle slack, with the
    operator up and the spec accepted)."""
    serving = world.serving()
    spec, status = (serving or {}).get("spec") or {}, (serving or {}).get("status") or {}
    degraded = _condition(serving, "Degraded") or {}
    if (spec.get("acceptance") or {}).get("onDegraded") != "DisableSpeculation" or status.get("degradedAction") or \
            degraded.get("status") != "True" or degraded.get("reason") != "LowAcceptanceRate" or \
            (status.get("serving") or {}).get("method") in (None, "none") or not spec.get("replicas") or \
            not world.operator.up or world.spec_refused() or not degraded.get("lastTransitionTime"):
        return []
    # From the later of Degraded's start and the last change of what is asked (onDegraded set to it, a restart).
    asked = world.track.asked
    since = max(iso_seconds(degraded["lastTransitionTime"]), world.track.ask_dirty_at or 0.0,
                asked.since if asked is not None else 0.0)
    lasted = world.clock.t - since - world.operator.downtime_since(since)
    if lasted <= SETTLE_SLACK:
        return []
    return [f"Degraded (LowAcceptanceRate) for {lasted:.0f}s with onDegraded DisableSpeculation and revision "
            f"{status['serving'].get('revision')} speculating, and no action recorded"]


def every_step_has_a_deadline(world) -> list[str]:
    track = world.track
    serving = world.serving()
    if serving is None:
        track.two_since = None
        return []
    if track.gpus_dirty:
        track.gpus_dirty = False
        holding = world.cluster.revisions_holding_gpus(serving["metadata"]["uid"])
        if len(holding) >= 2:
            # A revision joining is a new step (the user's next swap while one still drains): its own bound.
            if track.two_since is None or not set(holding) <= track.two_holding:
                track.two_since = world.clock.t
            track.two_holding = set(holding)
        else:
            track.two_since, track.two_holding = None, set()
    if track.two_since is None:
        return []
    spent = world.clock.t - track.two_since - world.operator.downtime_since(track.two_since)
    bound = two_revisions_bound(serving.get("spec") or {})
    if spent > bound:
        holding = sorted(world.cluster.revisions_holding_gpus(serving["metadata"]["uid"]))
        track.two_since = world.clock.t  # once per bound
        return [f"revisions {', '.join(map(str, holding))} have held GPUs together for {spent:.0f}s (> {bound:.0f}s)"]
    return []


def _spec_key(acceptance: dict) -> str:
    return json.dumps(acceptance, sort_keys=True)


def drift_floor(promoted: dict, acceptance: dict) -> a.Thresholds:
    """The oracle's own reading of guarantee 15: the floor atPromotion.acceptanceLength x (1 - driftTolerance),
    judged over spec.acceptance's window and `for`, the lost drafter no shortcut (defaults as documented)."""
    floor = promoted["acceptanceLength"] * (1 - float(acceptance.get("driftTolerance", "0.25")))
    return a.Thresholds(min_rate=None, min_length=floor, min_draft_tokens=acceptance.get("minDraftTokens", 1000),
                        window_seconds=parse_duration(acceptance.get("window", "5m")),
                        for_seconds=parse_duration(acceptance.get("for", "5m")), judge_lost=False)


def names_fit(world) -> list[str]:
    return world.track.take("names-fit")


def failures_visible(world) -> list[str]:
    return world.track.take("failures-visible")


def never_adopt(world) -> list[str]:
    return world.track.take("never-adopt")


def no_stale_decisions(world) -> list[str]:
    return world.track.take("no-stale-decisions")


def degraded_needs_evidence(world) -> list[str]:
    return world.track.take("degraded-needs-evidence")


def drift_needs_evidence(world) -> list[str]:
    return world.track.take("drift-needs-evidence")


def deletes_finish(world) -> list[str]:
    track = world.track
    if not track.deletes or track.deletes[0][1] + DELETE_BOUND > world.clock.t:
        return []
    uid, at = track.deletes.pop(0)
    left = [k for k, o in world.api.store.items()
            if o["metadata"]["uid"] == uid or any(r.get("uid") == uid for r in o["metadata"].get("ownerReferences") or [])]
    if left:
        return [f"{DELETE_BOUND:.0f}s after the serving (uid {uid}) was deleted, these remain: {', '.join(left)[:300]}"]
    return []


#: Causes of a pod's going that are someone else's hands, not the operator's (world.op_hands).
BY_HAND = ("workload-deleted:user", "deleted-by-hand")


def served_passed_gate(world) -> list[str]:
    track = world.track
    if not track.ungated:
        return []
    serving = world.serving()
    selected = world.selected_revision()
    key = (serving["metadata"]["uid"] if serving else None, selected)
    if key not in track.ungated or not world.traffic.endpoints:
        return []
    facts = track.revision_facts.get(key)
    how = track.ungated.pop(key)
    if facts is not None and "Passed" in facts.gates:
        return []
    return [f"revision {selected} serves without having passed its gate: {how}"]


def failed_for_a_reason(world) -> list[str]:
    return world.track.take("failed-for-a-reason")


def benchmarks_steer_nothing(world) -> list[str]:
    return world.track.take("benchmarks-steer-nothing")


def _overlaps(periods, start: float, end: float) -> bool:
    return any(s < end and (e is None or e > start) for s, e in periods)


def healthy_serves_in_time(world) -> list[str]:
    """Liveness: a healthy revision the user asked for (its engine starts within the startup bound, its gate passes)
    serves within startup + gate timeout + slack of the ask, the operator's downtime and a stalled DrafterServing
    watch added. Excused, narrowly: no GPUs for its pods, admission refusals, a lost node, a name another owner
    holds, an onDegraded action, hands on the children (the clock starts again), a spec the settings refuse, a
    revision that failed before (no retry asked)."""
    track = world.track
    serving = world.serving()
    t = world.clock.t
    if serving is None or serving["metadata"].get("deletionTimestamp"):
        track.asked = None
        return []
    uid = serving["metadata"]["uid"]
    if track.ask_dirty_at is not None or track.asked is None or track.asked.uid != uid:
        since = t if track.ask_dirty_at is None else track.ask_dirty_at
        track.ask_dirty_at = None
        revision = world.desired_revision()
        spec = serving.get("spec") or {}
        track.asked = Asked(uid, revision, since, startup_limit(spec) + gate_bound(spec) + SETTLE_SLACK) \
            if revision else None
    asked = track.asked
    if asked is None or asked.revision is None:
        return []
    if world.selected_revision() == asked.revision:
        track.asked = Asked(uid, None, t, 0.0)
        return []
    since = max([asked.since] + [h for h, _, _ in track.hands if h >= asked.since])
    elapsed = t - since - world.operator.downtime_since(since) - world.operator.stalled_serving_watch_since(since)
    if elapsed <= asked.bound:
        return []
    track.asked = Asked(uid, None, t, 0.0)  # judged once per ask
    spec = serving.get("spec") or {}
    fate = fate_of(world.seed, asked.revision)
    gated = bool((spec.get("swap") or {}).get("gate"))
    status = serving.get("status") or {}
    facts = track.revision_facts.get((uid, asked.revision))
    excused = (not world.config["replicas"] or world.spec_refused() or fate.broken or fate.never_ready
               or fate.startup * 1.25 >= startup_limit(spec) - 60
               or (gated and (fate.gate != "Passed" or fate.gate_seconds >= GATE_TIMEOUT - 60))
               or any(r.get("name") == asked.revision and r.get("good") is False for r in status.get("revisions") or [])
               or _overlaps(track.admission_periods, asked.since, t)
               or (track.node_lost_at is not None and track.node_lost_at >= asked.since - NODE_LOSS_GRACE)
               or (facts is not None and facts.unschedulable_at is not None and facts.unschedulable_at >= asked.since)
               # No GPUs for its pods, seen by the operator before any pod waits (BlueGreen beside the active one).
               or (_condition(serving, "Progressing") or {}).get("reason") == "InsufficientCapacity"
               or status.get("degradedAction") or track.action_at >= asked.since - SETTLE_SLACK
               or world.name_held(asked.revision))
    if excused:
        return []
    progressing = _condition(serving, "Progressing") or {}
    return [f"revision {asked.revision} (healthy: starts in ~{fate.startup:.0f}s, gate {fate.gate if gated else 'none'}) "
            f"was asked for at t={asked.since:.0f}s and does not serve {elapsed:.0f}s later (bound {asked.bound:.0f}s); "
            f"the Service selects {world.selected_revision()}; Progressing {progressing.get('reason')}: "
            f"{(progressing.get('message') or '')[:160]}"]


#: How long a Progressing state may last (seconds, beyond SETTLE_SLACK) before it ends or changes.
STATE_BOUNDS = {
    "RevisionStarting": lambda spec: PLACEMENT_TIMEOUT + startup_limit(spec),
    "InsufficientCapacity": lambda spec: PLACEMENT_TIMEOUT + startup_limit(spec),
    "Unschedulable": lambda spec: PLACEMENT_TIMEOUT + startup_limit(spec),
    "Gating": lambda spec: GATE_TIMEOUT,
    "StoppingOldRevision": lambda spec: 120.0,
    "WriteRefused": lambda spec: 0.0,
}


def states_end(world) -> list[str]:
    """Liveness: every transient state the status reports (a revision starting, a gate, old pods stopping, a refused
    write) ends or changes within its bound; InvalidSpec may last, but not while a revision other than the one that
    serves keeps pods past the drain. Admission refusals, a lost node and hands on children excuse it."""
    track = world.track
    serving = world.serving()
    if serving is None:
        return []
    uid = serving["metadata"]["uid"]
    known = track.progress.get(uid)
    if known is None:
        return []
    reason, message, since = known
    t = world.clock.t
    spec = serving.get("spec") or {}
    if reason == "InvalidSpec":
        bound = DRAIN_BOUND
        # What serves: the Service's revision, or with no Service (deleted, and a refused spec cannot render it),
        # the revision the operator keeps as active.
        selected = world.selected_revision() or (serving.get("status") or {}).get("activeRevision")
        if not (world.cluster.revisions_holding_gpus(uid) - {selected}):
            track.refused_extra_since.pop(uid, None)
            return []
        # The bound is on the other revision's GPUs, so it counts from when they were taken, not from when the spec
        # was refused: a spec made valid again starts a revision at once, and a crash before the status write
        # leaves the refusal said beside it until the operator is back (its downtime is not counted).
        since = max(since, track.refused_extra_since.setdefault(uid, t))
    elif reason in STATE_BOUNDS:
        bound = STATE_BOUNDS[reason](spec)
    else:
        return []
    start = max([since] + [h for h, _, _ in track.hands if h >= since]
                + ([track.node_lost_at] if track.node_lost_at is not None else []))
    elapsed = t - start - world.operator.downtime_since(start)
    if elapsed <= bound + SETTLE_SLACK:
        return []
    track.progress[uid] = (reason, message, t)  # once per bound
    if _overlaps(track.admission_periods, since, t) or world.name_held(None):
        return []
    return [f"Progressing has said {reason} for {elapsed:.0f}s (bound {bound + SETTLE_SLACK:.0f}s): {message[:200]}"]


INVARIANTS = {
    "stable-endpoint": stable_endpoint,
    "no-cut-streams": no_cut_streams,
    "no-unplanned-restarts": no_unplanned_restarts,
    "status-says-what-serves": status_says_what_serves,
    "actions-take-effect": actions_take_effect,
    "every-step-has-a-deadline": every_step_has_a_deadline,
    "names-fit": names_fit,
    "failures-visible": failures_visible,
    "never-adopt": never_adopt,
    "no-stale-decisions": no_stale_decisions,
    "degraded-needs-evidence": degraded_needs_evidence,
    "drift-needs-evidence": drift_needs_evidence,
    "deletes-finish": deletes_finish,
    "served-passed-gate": served_passed_gate,
    "failed-for-a-reason": failed_for_a_reason,
    "benchmarks-steer-nothing": benchmarks_steer_nothing,
    "healthy-serves-in-time": healthy_serves_in_time,
    "states-end": states_end,
}
