"""The acceptance part of a DrafterServing decision, pure: the Degraded condition, status.acceptance,
and what ``spec.acceptance.onDegraded`` does (``decide.decide`` calls it).

A Rollback or DisableSpeculation is recorded in ``status.degradedAction`` and changes what the serving
*runs* without rewriting the spec: the running spec is the spec with the action's drafter (and image)
in place of the spec's own, and the normal swap path moves traffic to its revision. The action stays
in force while the spec asks for the revision it was taken on; a spec change to any other revision
(a new drafter, target, engine or image) ends it, which is how a user re-enables speculation.

Measurements come from the serving loop (``acceptance/measurement.py``) and only count when they describe
the revision that both serves and is wanted: mid-swap, the condition keeps its last value. What the
watch measures (``watched_revision``: the active revision and the drafter it runs) is chosen here too.
Every Degraded reason and sentence comes from ``acceptance/message.py``.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pydantic

from drafter_operator import timestamps
from drafter_operator.api import DrafterServingSpec
from drafter_operator.api.serving import DrafterSpec
from drafter_operator.acceptance import actions as acceptance_actions
from drafter_operator.controllers.conditions import Event
from drafter_operator.controllers.serving.revisions import measured_as, revision_hash
from drafter_operator.controllers.swap import Verdict
from drafter_operator.acceptance import break_even as be
from drafter_operator.acceptance import drift as d
from drafter_operator.acceptance import message
from drafter_operator.resources.labels import drafter_summary
from drafter_operator.acceptance.message import ACTION_BLOCKED, ACTION_FAILED, ACTION_IN_PROGRESS, SPECULATION_DISABLED

if TYPE_CHECKING:
    from drafter_operator.acceptance.measurement import Measurement

NOT_MONITORED_VERDICT = Verdict("Unknown", message.NOT_MONITORED, message.NOT_MONITORED_MESSAGE)
NOT_MEASURED_VERDICT = Verdict("Unknown", message.INSUFFICIENT_DATA, message.NOT_MEASURED_MESSAGE)
#: status.acceptance is rewritten when its figures move by this much, at most once a minute (or at
#: once when the verdict changes), and at least once a window: a write per scrape would cost the
#: apiserver more than the figures are worth, and a small window's rate wobbles by points between scrapes.
RATE_STEP, LENGTH_STEP = 0.01, 0.05
MIN_REWRITE_SECONDS = 60.0


@dataclass(frozen=True)
class RunningSpec:
    """What the serving runs: the spec, or the spec with a degradedAction's drafter in force."""

    spec: DrafterServingSpec
    image: str
    spec_revision: str  # the revision the spec itself asks for
    action: dict | None  # status.degradedAction, when in force


def running_spec(spec: DrafterServingSpec, image: str, status: dict) -> RunningSpec:
    spec_revision = revision_hash(spec, image)
    action = status.get("degradedAction")
    if not action or action.get("specRevision") != spec_revision:
        return RunningSpec(spec, image, spec_revision, None)
    try:
        drafter = DrafterSpec.model_validate(action["drafterSpec"])
    except (pydantic.ValidationError, KeyError):
        return RunningSpec(spec, image, spec_revision, None)  # unreadable (hand-edited): the spec rules
    return RunningSpec(spec.model_copy(update={"drafter": drafter}), action.get("image") or image, spec_revision,
                       action)


def revision_record(spec: DrafterServingSpec, image: str, name: str, now: str) -> dict:
    """A status.revisions entry that can be rolled back to: it keeps the drafter exactly as it ran."""
    return {"name": name, "drafter": drafter_summary(spec), "engine": spec.engine, "since": now, "image": image,
            "drafterSpec": spec.drafter.to_json()}


def restored_spec(spec: DrafterServingSpec, record: dict) -> tuple[DrafterServingSpec, str] | None:
    """The spec and image that rebuild a recorded revision exactly (its own drafter and image in the current
    spec), or None when it cannot be rebuilt: something else that names a revision changed since, or its
    record is unreadable. What brings back a revision whose Deployment someone deleted."""
    if not _restorable(spec, record):
        return None
    return spec.model_copy(update={"drafter": DrafterSpec.model_validate(record["drafterSpec"])}), record["image"]


def _restorable(spec: DrafterServingSpec, record: dict) -> bool:
    """Can this revision be rebuilt from the current spec and its recorded drafter? Only when nothing
    else that names a revision (target, engine, GPUs) changed since: a rollback restores a drafter."""
    if not record.get("drafterSpec") or not record.get("image"):
        return False
    try:
        drafter = DrafterSpec.model_validate(record["drafterSpec"])
    except pydantic.ValidationError:
        return False
    return revision_hash(spec.model_copy(update={"drafter": drafter}), record["image"]) == record["name"]


@dataclass(frozen=True)
class Watched:
    """What the acceptance watch measures: the active revision, the spec it runs, for ``auto``
    thresholds the break-even learned from ``status.lastBenchmark`` (an input of the measurement, like
    the spec, never part of the API), and what its gate measured at promotion (``status.acceptance.atPromotion``)
    to judge drift against."""

    spec: DrafterServingSpec
    revision: str
    learned: be.BreakEven | None = None
    baseline: d.Baseline | None = None
    #: The batch-size schedule the revision runs (status.speculationSchedule's ranges, when it is the revision
    #: that schedule was rendered into), to hold the engine's drafting to (ScheduleIgnored).
    schedule: tuple[tuple[int, int, int], ...] | None = None


def revision_family(spec: DrafterServingSpec, revisions: list[dict], active: str | None) -> tuple[str, str]:
    """(engine, method) the active revision runs: its record's (after a Rollback it is not the spec's drafter),
    else the spec's. What an acceptance rate means depends on it (``break_even.rate_problem``)."""
    record = next((r for r in revisions or [] if r.get("name") == active), {})
    method = (record.get("drafterSpec") or {}).get("method") or spec.drafter.method
    return record.get("engine") or spec.engine, method


def learned_threshold(acceptance, status: dict, family: tuple[str | None, str | None] = (None, None)) -> be.BreakEven | None:
    """The break-even threshold of the active revision's last benchmark, when ``acceptance`` says auto."""
    if not be.uses_auto(acceptance):
        return None
    learned = be.from_last_benchmark(status.get("lastBenchmark"),
                                     measured_as(status.get("activeRevision"), status.get("speculationSchedule")),
                                     family, rate_auto=acceptance.min_acceptance_rate == be.AUTO)
    return learned if isinstance(learned, be.BreakEven) else None


def watched_revision(body: dict) -> Watched | None:
    """What to measure for a serving body (pure): its active revision, with the spec that revision runs
    (the spec with the revision's own recorded drafter: after a Rollback it is not the spec's). None
    when nothing is to be watched: no spec.acceptance, no active revision, an invalid spec, or an
    ``auto`` threshold with no benchmark of the active revision to learn it from (``NoBenchmark``)."""
    status = body.get("status") or {}
    active = status.get("activeRevision")
    try:
        spec = DrafterServingSpec.model_validate(body.get("spec") or {})
    except pydantic.ValidationError:
        return None
    if spec.acceptance is None or not active:
        return None
    record = next((r for r in status.get("revisions") or [] if r.get("name") == active), {})
    if record.get("drafterSpec"):
        try:
            spec = spec.model_copy(update={"drafter": DrafterSpec.model_validate(record["drafterSpec"])})
        except pydantic.ValidationError:
            return None
    learned = learned_threshold(spec.acceptance, status, (spec.engine, spec.drafter.method))
    if be.uses_auto(spec.acceptance) and learned is None:
        return None
    baseline = d.baseline((status.get("acceptance") or {}).get("atPromotion"), spec.acceptance.drift_tolerance,
                          measured_as(active, status.get("speculationSchedule")))
    return Watched(spec, active, learned, baseline, scheduled_ranges(active, status.get("speculationSchedule")))


def scheduled_ranges(active: str, block: dict | None) -> tuple[tuple[int, int, int], ...] | None:
    """The (start, end, k) ranges ``active`` runs: status.speculationSchedule's, when its scheduledRevision is the
    active revision (pure)."""
    if not block or block.get("scheduledRevision") != active or not block.get("ranges"):
        return None
    return tuple((r["start"], r["end"], r["numSpeculativeTokens"]) for r in block["ranges"])


class WatchedByVersion:
    """``watched_revision`` once per version of a serving's body (its uid and resourceVersion): it is pure in
    the body, and the watch looks far more often than the body changes.

    Why the watch derives this from the body rather than taking what ``decide`` computed: the body's
    status is what the last reconcile *wrote*, and a plan can be cut short (a refused Service write leaves
    ``activeRevision`` as it was, ``serving.refused_plan``), so a value published by ``decide`` could name a
    revision that never took traffic and restart the watch's verdict on it. ``decide`` also judges with
    the status *before* its swap step, the watch measures the one after it: not the same fact twice."""

    def __init__(self) -> None:
        self.version: tuple | None = None
        self.watched: Watched | None = None

    def of(self, body: dict) -> Watched | None:
        meta = body.get("metadata") or {}
        if not meta.get("resourceVersion"):
            return watched_revision(body)  # nothing to know a new version by
        version = (meta.get("uid"), meta["resourceVersion"])
        if version != self.version:
            self.version, self.watched = version, watched_revision(body)
        return self.watched


@dataclass
class AcceptanceDecision:
    degraded: Verdict | None = None  # the Degraded condition; None leaves it as it is
    acceptance: dict | None = None  # status.acceptance when it should be written
    write_acceptance: bool = False
    action: dict | None = None  # a new status.degradedAction to record first
    end_action: bool = False  # the action in force no longer applies: clear it
    mark_degraded: tuple[str, ...] = ()
    events: list[Event] = field(default_factory=list)
    rolled_back: bool = False
    threshold: dict | None = None  # status.acceptanceThreshold (None: none in force)


def no_benchmark_verdict(acceptance, why: str) -> Verdict:
    """Degraded=Unknown/NoBenchmark: an auto threshold with nothing to learn it from."""
    fields = [f for f, value in (("minAcceptanceRate", acceptance.min_acceptance_rate),
                                 ("minAcceptanceLength", acceptance.min_acceptance_length)) if value == be.AUTO]
    return Verdict("Unknown", message.NO_BENCHMARK, message.no_benchmark(fields, why))


def decide_acceptance(spec: DrafterServingSpec, running: RunningSpec, status: dict, active: str | None,
                      desired: str, measurement: Measurement | None, revisions: list[dict],
                      now: dt.datetime, last_benchmark: dict | None = None,
                      benchmark_revisions: tuple[str, ...] | None = None, routed: bool = True) -> AcceptanceDecision:
    """``last_benchmark``: status.lastBenchmark as this decision fills it (where ``auto`` learns from);
    ``benchmark_revisions``: whose benchmarks describe the active drafter (default: the active revision's);
    ``routed``: whether the serving's Service exists to send traffic to ``active`` (an action is in effect
    only then)."""
    out = AcceptanceDecision()
    stored = status.get("degradedAction")
    if stored and running.action is None:
        out.end_action = True
        out.events.append(("Normal", "DegradedActionEnded",
                           f"the spec now asks for revision {running.spec_revision}: the {stored.get('action')} taken "
                           f"on revision {stored.get('degradedRevision')} no longer applies"))
    condition = next((c for c in status.get("conditions") or [] if c.get("type") == "Degraded"), None)
    if spec.acceptance is None:
        out.degraded = NOT_MONITORED_VERDICT if condition is not None else None
        out.write_acceptance = bool(status.get("acceptance"))  # figures of a watch that no longer runs would mislead
        return out
    if benchmark_revisions is None:
        benchmark_revisions = (active,) if active else ()
    learned = be.from_last_benchmark(last_benchmark, benchmark_revisions, revision_family(spec, revisions, active),
                                     rate_auto=spec.acceptance.min_acceptance_rate == be.AUTO) \
        if be.uses_auto(spec.acceptance) else None
    out.threshold = be.status_block(spec.acceptance, learned if isinstance(learned, be.BreakEven) else None)
    if running.action and (active != desired or not routed):
        # The action is recorded but its revision does not serve (yet, or ever): say so, never its success.
        return _action_not_serving(out, running.action, status, active, desired, measurement)
    if running.action and running.action.get("action") == "DisableSpeculation":
        out.degraded = Verdict("True", SPECULATION_DISABLED, running.action.get("message", ""))
    elif isinstance(learned, str):  # never a made-up threshold: no verdict until a benchmark gives one
        out.degraded = no_benchmark_verdict(spec.acceptance, learned)
    elif measurement is None or not measurement.revision == active == desired:
        out.degraded = unmeasured(condition, out.end_action)
    elif record_measurement(out, condition or {}, status, measurement).degraded:
        act_on_degraded(out, spec, running, active, revisions, measurement.verdict.message, now)
    return out


def unmeasured(condition: dict | None, action_ended: bool) -> Verdict | None:
    """Degraded while the revision that serves and is wanted has no measurement yet: as it was (None), or
    InsufficientData where what it says is over. A NoBenchmark condition is over once a threshold exists
    (learned, or numbers in the spec); an action's reason is over with its action: what serves now has
    not been measured yet."""
    reason = (condition or {}).get("reason")
    stale = reason == message.NO_BENCHMARK or (
        action_ended and reason in (SPECULATION_DISABLED, ACTION_IN_PROGRESS, ACTION_FAILED, ACTION_BLOCKED))
    return None if condition is not None and not stale else NOT_MEASURED_VERDICT


def record_measurement(out: AcceptanceDecision, condition: dict, status: dict, measurement: Measurement):
    """status.acceptance and Degraded from a measurement of the serving revision; returns its verdict."""
    verdict = measurement.verdict
    out.write_acceptance = acceptance_due(status.get("acceptance"), measurement.status, measurement.revision)
    out.acceptance = measurement.status
    if (condition.get("status"), condition.get("reason")) != (verdict.status, verdict.reason):
        out.write_acceptance = measurement.status is not None or out.write_acceptance  # figures and verdict agree
        out.degraded = Verdict(verdict.status, verdict.reason, verdict.message)
    elif out.write_acceptance:
        # Its message carries the figures: rewritten with them, not with every scrape's last digit.
        out.degraded = Verdict(verdict.status, verdict.reason, verdict.message)
    return verdict


def act_on_degraded(out: AcceptanceDecision, spec: DrafterServingSpec, running: RunningSpec, active: str | None,
                    revisions: list[dict], figures: str, now: dt.datetime) -> None:
    """What spec.acceptance.onDegraded does about the Degraded active revision: the action to record,
    its Event, and the revisions to mark degraded."""
    by_name = {r["name"]: r for r in revisions}
    first_detection = not by_name.get(active, {}).get("degraded")
    records = [acceptance_actions.RevisionRecord(
        name=r["name"], good=bool(r.get("good")), degraded=bool(r.get("degraded")),
        speculative=(r.get("drafter") or "none") != "none") for r in revisions
        if r["name"] == active or _restorable(spec, r)]
    action = acceptance_actions.plan(spec.acceptance.on_degraded, True, active, records, speculation_disabled=False)
    out.mark_degraded = action.mark_degraded
    since = timestamps.format_seconds(now)
    taken = {"degradedRevision": active, "specRevision": running.spec_revision,
             "message": f"{action.message} ({figures})", "since": since}
    if action.kind == "rollback":
        target = by_name[action.target]
        out.action = {"action": "Rollback", "revision": action.target, "drafterSpec": target["drafterSpec"],
                      "image": target["image"], **taken}
        out.events.append(("Warning", "RollingBack", taken["message"]))
        out.rolled_back = True
    elif action.kind == "disableSpeculation":
        baseline = running.spec.model_copy(update={"drafter": DrafterSpec(method="none")})
        out.action = {"action": "DisableSpeculation", "revision": revision_hash(baseline, running.image),
                      "drafterSpec": {"method": "none"}, "image": running.image, **taken}
        out.events.append(("Warning", SPECULATION_DISABLED, taken["message"]))
    elif action.message and first_detection and spec.acceptance.on_degraded != "Alert":
        out.events.append(("Warning", "NoRollbackTarget", action.message))


def _action_not_serving(out: AcceptanceDecision, action: dict, status: dict, active: str | None, desired: str,
                        measurement: Measurement | None) -> AcceptanceDecision:
    """Degraded while an onDegraded action's revision (``desired``) is not the one serving: under way
    (ActionInProgress), or failed to start or to pass its checks (ActionFailed, with a Warning Event once).
    The degraded revision still serves and is still measured: its figures keep landing in status.acceptance."""
    kind = action.get("action", "the onDegraded action")
    record = next((r for r in status.get("revisions") or [] if r.get("name") == desired), {})
    serving = message.who_serves(active, desired)
    if record.get("good") is False:
        why = record.get("failedReason") or "it did not become Ready within spec.startup.timeout"
        verdict = Verdict("True", ACTION_FAILED, message.action_failed(kind, desired, why, serving))
    else:
        verdict = Verdict("True", ACTION_IN_PROGRESS, message.action_in_progress(kind, desired, serving))
    condition = next((c for c in status.get("conditions") or [] if c.get("type") == "Degraded"), {})
    if (condition.get("status"), condition.get("reason")) != (verdict.status, verdict.reason):
        out.degraded = verdict
        if verdict.reason == ACTION_FAILED:
            out.events.append(("Warning", ACTION_FAILED, verdict.message))
    if measurement is not None and measurement.revision == active and active:
        out.write_acceptance = acceptance_due(status.get("acceptance"), measurement.status, measurement.revision)
        out.acceptance = measurement.status
    return out


def action_blocked(action: dict, why: str, active: str | None) -> Verdict:
    """Degraded while an onDegraded action's revision cannot be created (a name another owner holds):
    blocked, not under way."""
    return Verdict("True", ACTION_BLOCKED, message.action_blocked(action.get("action"), why, active))


def acceptance_due(old: dict | None, new: dict | None, revision: str) -> bool:
    """Whether status.acceptance should be rewritten: a new revision or source, a new replica list, or
    figures that moved visibly (after at least a minute) or are a whole window old."""
    if new is None:
        return bool(old) and old.get("revision") != revision  # no figures yet for a new revision: clear
    if not old or old.get("revision") != new.get("revision") or old.get("source") != new.get("source"):
        return True
    if [r.get("pod") for r in old.get("replicas") or []] != [r.get("pod") for r in new.get("replicas") or []]:
        return True
    try:
        age = (timestamps.parse(new["windowEnd"]) - timestamps.parse(old["windowEnd"])).total_seconds()
    except (KeyError, AttributeError, ValueError):
        return True

    def moved(key: str, step: float) -> bool:
        before, after = old.get(key), new.get(key)
        if before is None or after is None:
            return before is not after
        return abs(before - after) >= step

    if age >= max(new.get("windowSeconds") or 0, MIN_REWRITE_SECONDS):
        return True
    return age >= MIN_REWRITE_SECONDS and (moved("rate", RATE_STEP) or moved("meanLength", LENGTH_STEP))
