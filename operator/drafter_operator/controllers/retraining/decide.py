"""When a serving's spec.retraining starts a DrafterTraining, and which of the ones it started it deletes (pure).

Input: the DrafterServing as read, the DrafterTrainings it owns (labelled with its name and owned by its uid), and
the clock. Output: a `Plan` whose writes create at most one training, whose deletes trim the finished ones beyond
spec.retraining.historyLimit, and whose status is `status.retraining` when it changed.

The triggers, in the order they are looked at:

- **Requested**: the drafter.dev/retrain annotation has a value no training was started for. The cooldown does not
  apply (a person asked), one at a time does.
- **DriftDetected**: the DriftDetected condition is True and turned True after the last start (one drift, one
  training: a drift that outlived a retraining does not start another until it clears and comes back).
- **Interval**: spec.retraining.interval has passed since the last start (or since the serving was created).
- **Schedule**: a time spec.retraining.schedule names (in its timeZone) has come since the last start (or since the
  serving was created). Times missed meanwhile (the operator down, a training running) start one training, as soon
  as it may, as a CronJob without a starting deadline would.

Automatic triggers wait for the cooldown after the last start, then, with spec.retraining.minNewSamples, for that
many prompts captured since the last start (or the serving's creation): the first decision asks for the count
(`Plan.count_samples_since`), the reconciler reads it from the capture sidecar and decides again with it
(`RetrainingState.new_samples`). Nothing starts while a training the serving started is unfinished; one its refused
spec stopped before it ended (Failed, InvalidSpec) is unfinished too, since it resumes once its spec is allowed again
(deleting it is how to start anew). What a start records is in the training itself (its run number in its name, its
trigger and request in its annotations, its creation time), so a crash between creating it and writing the status
neither loses the start nor repeats it.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

import pydantic

from drafter_operator import schedules, timestamps
from drafter_operator.acceptance.drift import CONDITION as DRIFT_CONDITION
from drafter_operator.api import DrafterServing, parse_duration
from drafter_operator.constants import (
    API_GROUP_VERSION,
    RETRAIN_ANNOTATION,
    RETRAINING_TRIGGER_ANNOTATION,
    TRAINING_PLURAL,
)
from drafter_operator.controllers.plan import Plan, Write
from drafter_operator.controllers.training.refusal import REFUSED, resumes_once_allowed
from drafter_operator.kube import object_path
from drafter_operator.resources.retraining import retraining_training

REQUESTED, DRIFT, INTERVAL, SCHEDULE = "Requested", "DriftDetected", "Interval", "Schedule"
#: The triggers that wait for the cooldown and the new samples (a person's request does not).
AUTOMATIC = (DRIFT, INTERVAL, SCHEDULE)
#: A training's stages once it will do nothing more (but see `Run.resumes_once_allowed`).
FINISHED_STAGES = ("Succeeded", "Failed")
_RUN_RE = re.compile(r"-r(\d+)$")


#: How soon a trigger waiting for captured prompts looks again (the reconciler's tick comes every minute anyway).
SAMPLES_RECHECK = dt.timedelta(minutes=1)


@dataclass(frozen=True)
class NewSamples:
    """The capture's answer: the prompts it holds captured at or after ``since``; ``count`` None when no pod could
    say (``problem`` says why)."""

    since: dt.datetime
    count: int | None
    problem: str = ""


@dataclass(frozen=True)
class RetrainingState:
    serving: dict  # the DrafterServing as read
    trainings: tuple[dict, ...]  # the DrafterTrainings labelled as its retrainings
    now: dt.datetime
    new_samples: NewSamples | None = None  # read only when a decision asked for it


@dataclass(frozen=True)
class Run:
    """One training the serving started, as the decision reads it."""

    name: str
    number: int
    trigger: str
    request: str | None
    started: dt.datetime
    stage: str
    resumes_once_allowed: bool = False  # Failed, stopped by its refused spec before it ended

    @property
    def finished(self) -> bool:
        """It will do nothing more. A refused run is not: counted as finished, the next would start, and both
        would run once the allow-list opens again."""
        return self.stage in FINISHED_STAGES and not self.resumes_once_allowed


def owned_runs(trainings: tuple[dict, ...], uid: str | None) -> list[Run]:
    """The trainings owned by the serving's uid (a same-named serving created since owns none of the old one's),
    newest first."""
    runs = []
    for body in trainings:
        meta = body["metadata"]
        if not any(ref.get("uid") == uid and ref.get("controller") for ref in meta.get("ownerReferences") or []):
            continue
        number = _RUN_RE.search(meta["name"])
        annotations, status = meta.get("annotations") or {}, body.get("status") or {}
        runs.append(Run(meta["name"], int(number.group(1)) if number else 0,
                        annotations.get(RETRAINING_TRIGGER_ANNOTATION, ""), annotations.get(RETRAIN_ANNOTATION),
                        timestamps.parse(meta["creationTimestamp"]), status.get("stage") or "Pending",
                        resumes_once_allowed=resumes_once_allowed(status)))
    return sorted(runs, key=lambda run: (run.number, run.started), reverse=True)


def _drift_since(status: dict) -> dt.datetime | None:
    found = next((c for c in status.get("conditions") or [] if c.get("type") == DRIFT_CONDITION), None)
    if found is None or found.get("status") != "True" or not found.get("lastTransitionTime"):
        return None
    return timestamps.parse(found["lastTransitionTime"])


def _latest(*moments: dt.datetime | None) -> dt.datetime | None:
    present = [m for m in moments if m is not None]
    return max(present) if present else None


def decide(state: RetrainingState) -> Plan:
    body, now = state.serving, state.now
    meta, status = body["metadata"], body.get("status") or {}
    plan = Plan()
    try:
        serving = DrafterServing.model_validate(body)
    except pydantic.ValidationError:
        return plan  # the serving controller reports a refused spec; nothing is started from one
    retraining = serving.spec.retraining
    if retraining is None or meta.get("deletionTimestamp"):
        return plan
    recorded = status.get("retraining") or {}
    runs = owned_runs(state.trainings, meta.get("uid"))
    last_start = _latest(runs[0].started if runs else None,
                         timestamps.parse(recorded["lastStart"]) if recorded.get("lastStart") else None)
    count = max([recorded.get("runs") or 0] + [run.number for run in runs])
    handled = {recorded.get("request")} | {run.request for run in runs}

    request = (meta.get("annotations") or {}).get(RETRAIN_ANNOTATION)
    drift_since = _drift_since(status) if retraining.on_drift else None
    cooldown = dt.timedelta(seconds=parse_duration(retraining.cooldown))
    trigger, waiting = None, None
    if request and request not in handled:
        trigger = REQUESTED
    elif drift_since is not None and (last_start is None or drift_since > last_start):
        trigger = DRIFT
    elif retraining.interval is not None or retraining.schedule is not None:
        since = last_start or timestamps.parse(meta["creationTimestamp"])
        if retraining.interval is not None:
            due = since + dt.timedelta(seconds=parse_duration(retraining.interval))
        else:
            due = schedules.next_after(retraining.schedule, retraining.time_zone, since)
        if now >= due:
            trigger = INTERVAL if retraining.interval is not None else SCHEDULE
        else:
            plan.recheck_at = due
    if trigger in AUTOMATIC and last_start is not None and now < last_start + cooldown:
        waiting = f"{trigger}: cooldown until {timestamps.format_seconds(last_start + cooldown)}"
        plan.recheck_at = last_start + cooldown
        trigger = None
    unfinished = next((run for run in runs if not run.finished), None)
    if trigger is not None and unfinished is not None:
        holds = (f"is stopped by its refused spec ({REFUSED}) and resumes once it is allowed; delete it to "
                 "start anew" if unfinished.resumes_once_allowed else f"is still running ({unfinished.stage})")
        waiting, trigger = f"{trigger}: {unfinished.name} {holds}", None
    needed = retraining.min_new_samples
    if trigger in AUTOMATIC and needed is not None:
        since = last_start or timestamps.parse(meta["creationTimestamp"])
        counted = state.new_samples if state.new_samples is not None and state.new_samples.since == since else None
        if counted is None:
            plan.count_samples_since, trigger = since, None  # decided again with the count
        elif counted.count is None or counted.count < needed:
            found = (f"the capture's count could not be read ({counted.problem})" if counted.count is None
                     else f"{counted.count} prompts captured")
            waiting = (f"{trigger}: {found} since {timestamps.format_seconds(since)}; spec.retraining.minNewSamples "
                       f"is {needed}")
            plan.recheck_at, trigger = now + SAMPLES_RECHECK, None

    started: Run | None = None
    if trigger is not None:
        count += 1
        manifest = retraining_training(meta["namespace"], meta["name"], meta.get("uid") or "", serving.spec, count,
                                       trigger)
        if trigger == REQUESTED:
            manifest["metadata"]["annotations"][RETRAIN_ANNOTATION] = request
        plan.writes.append(Write("create", TRAINING_PLURAL,
                                 object_path(API_GROUP_VERSION, TRAINING_PLURAL, meta["namespace"]), manifest))
        started = Run(manifest["metadata"]["name"], count, trigger, request if trigger == REQUESTED else None, now,
                      "Pending")
        plan.events.append(("Normal", "RetrainingStarted",
                            f"started DrafterTraining {started.name} ({trigger}); the drafter it exports is "
                            f"promoted here{' through spec.retraining.gate' if retraining.gate else ''}"))
        last_start = now

    kept = ([started] if started else []) + runs
    finished = [run for run in kept if run.finished]
    for run in finished[retraining.history_limit:]:
        plan.deletes.append(object_path(API_GROUP_VERSION, TRAINING_PLURAL, meta["namespace"], run.name))
    gone = {run.name for run in finished[retraining.history_limit:]}
    history = [{"name": run.name, "trigger": run.trigger, "startedAt": timestamps.format_seconds(run.started),
                "stage": run.stage} for run in kept if run.name not in gone]
    block = {"runs": count, "history": history[:retraining.history_limit + 1]}
    if last_start is not None:
        block["lastStart"] = timestamps.format_seconds(last_start)
    if request and (request in handled or trigger == REQUESTED):
        block["request"] = request
    elif recorded.get("request"):
        block["request"] = recorded["request"]
    if waiting:
        block["waiting"] = waiting
    if block != recorded:
        # A merge patch: a field recorded before and absent now (a wait that ended) is removed by a null.
        plan.status = {"retraining": {**{key: None for key in recorded if key not in block}, **block}}
    return plan
