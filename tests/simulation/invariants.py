"""What must hold after every step of a simulation, one named function per invariant.

Each invariant is `fn(world) -> list[str]` (violations, worded for a person). Some read the world's
state at the step; others report what `Tracks` recorded as it happened (a write the operator made, a
cut stream, a finished outage), since a state alone cannot show them. `INVARIANTS` maps names to
functions; the runner calls all of them after every event.
"""

from __future__ import annotations

import pydantic

from drafter_operator.api import DrafterServingSpec
from drafter_operator.controllers.revisions import pod_settings_hash

from drafter_operator.api import parse_duration
from drafter_operator.resources.labels import REVISION_LABEL

from tests.simulation.cluster import owner_uid

LOW_REASONS = ("LowAcceptanceRate", "LowAcceptanceLength")
SUCCESS_REASON = {"DisableSpeculation": "SpeculationDisabled", "Rollback": "RolledBack"}
DRAIN_BOUND = 600.0  # seconds an old revision may keep its pods after traffic left it (generous)
SETTLE_SLACK = 900.0  # scheduling, termination, watch and reconcile delays (generous)
DELETE_BOUND = 900.0  # a deleted serving's children and the serving itself are gone by then
NODE_LOSS_GRACE = 3600.0


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
        self.deletes: list[tuple[str, float]] = []
        self.cuts_seen = 0
        self.outages_seen = 0
        self.reconcile_number = 0
        self.last_template_change = -1e18

    def report(self, invariant: str, message: str) -> None:
        self.found.setdefault(invariant, []).append(f"t={self.world.clock.t:.0f}s: {message}")

    def take(self, invariant: str) -> list[str]:
        return self.found.pop(invariant, [])

    # ------------------------------------------------------------------ hooks
    def spec_edited(self, field: str) -> None:
        pass

    def serving_deleted(self, uid: str) -> None:
        self.deletes.append((uid, self.world.clock.t))

    def measured(self, uid, revision, t, sample, thresholds) -> None:
        from tests.simulation.engines import below
        self.samples.setdefault((uid, revision), []).append((t, below(sample, thresholds)))
        self.thresholds[(uid, revision)] = thresholds

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
        if plural == "deployments":
            if old is None and new is not None:  # created
                name = new["metadata"]["name"]
                if len(name) > 63:
                    self.report("names-fit", f"Deployment name {name!r} is {len(name)} characters (> 63)")
                revision = new["metadata"]["labels"].get(REVISION_LABEL)
                gen = self.failed.get((uid, revision))
                if gen is not None and gen == generation:
                    self.report("no-stale-decisions", f"revision {revision} was marked failed (good: false) at "
                                                      f"generation {gen} and re-created with no spec change")
                self.template_spec[key] = _spec_sans_replicas(w)
            elif old is not None and new is not None:
                if old["spec"].get("template") != new["spec"].get("template"):
                    # The operator renders from its own (possibly stale) view: the Deployment's record of the pod
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
                    self.report("no-unplanned-restarts", f"the operator deleted Deployment {old['metadata']['name']} "
                                                         f"of revision {revision}, which the Service selects")
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
        status = new.get("status") or {}
        old_status = ((old or {}).get("status") or {}) if old and old["metadata"]["uid"] == uid else {}
        known = {r["name"]: r.get("good") for r in old_status.get("revisions") or []}
        for r in status.get("revisions") or []:
            if r.get("good") is False and known.get(r["name"]) is not False:
                self.failed[(uid, r["name"])] = new["metadata"].get("generation")
        action = status.get("degradedAction")
        if action and (self.action is None or self.action[:2] != (uid, action.get("since"))):
            self.action = (uid, action.get("since"), action.get("revision"), action.get("action"), w.clock.t)
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

    def _degraded_evidence(self, uid: str, status: dict, degraded: dict) -> None:
        revision = (status.get("acceptance") or {}).get("revision") or status.get("activeRevision")
        samples = self.samples.get((uid, revision), [])
        t = self.thresholds.get((uid, revision))
        if t is None or not samples:
            self.report("degraded-needs-evidence", f"Degraded={degraded.get('reason')} on revision {revision} with no "
                                                   "measurement of it at all")
            return
        # The run of evidence that ends at the last look: below-threshold samples, no healthy one, and no
        # stretch without a below-threshold sample (no data, unreadable metrics) longer than one window.
        last = next((at for at, b in reversed(samples) if b is True), None)
        if last is None:
            self.report("degraded-needs-evidence", f"Degraded={degraded.get('reason')} on revision {revision} with no "
                                                   "below-threshold measurement of it")
            return
        need_from = last - t.for_seconds
        prev_below = last
        for at, below in reversed(samples):
            if at > last:
                continue
            if below is False:
                self.report("degraded-needs-evidence", f"Degraded={degraded.get('reason')} at {last:.0f}s on revision "
                                                       f"{revision}: the sample at {at:.0f}s was above threshold, within "
                                                       f"for ({t.for_seconds:.0f}s)")
                return
            if below is None:
                continue
            if prev_below - at > t.window_seconds + 1:
                self.report("degraded-needs-evidence", f"Degraded={degraded.get('reason')} at {last:.0f}s on revision "
                                                       f"{revision}: no below-threshold measurement from {at:.0f}s to "
                                                       f"{prev_below:.0f}s, longer than the window {t.window_seconds:.0f}s")
                return
            prev_below = at
            if at <= need_from + 1e-6:
                return
        self.report("degraded-needs-evidence", f"Degraded={degraded.get('reason')} at {last:.0f}s on revision {revision} "
                                               f"after {last - prev_below:.0f}s of below-threshold samples; for is "
                                               f"{t.for_seconds:.0f}s")

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
    for cut in tr.cuts[track.cuts_seen:]:
        if cut.strategy != "BlueGreen" or cut.cause in ("node-loss", "serving-deleted", "template-change", "unknown"):
            continue
        if cut.cause == "scale-down" and cut.revision == world.selected_revision():
            continue  # fewer replicas asked for
        out.append(f"a stream on pod {cut.pod} (revision {cut.revision}) was cut: {cut.cause} "
                   f"within {48:.0f}s of it serving traffic")
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
        return []
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
            if track.two_since is None:
                track.two_since = world.clock.t
        else:
            track.two_since = None
    if track.two_since is None:
        return []
    spent = world.clock.t - track.two_since - world.operator.downtime_since(track.two_since)
    bound = two_revisions_bound(serving.get("spec") or {})
    if spent > bound:
        holding = sorted(world.cluster.revisions_holding_gpus(serving["metadata"]["uid"]))
        track.two_since = world.clock.t  # once per bound
        return [f"revisions {', '.join(map(str, holding))} have held GPUs together for {spent:.0f}s (> {bound:.0f}s)"]
    return []


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
    "deletes-finish": deletes_finish,
}
