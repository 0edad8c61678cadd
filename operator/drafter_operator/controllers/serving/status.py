"""A DrafterServing's status fields, built pure from one decision's facts: the revision records, status.serving,
status.lastBenchmark, the retry request, the gating record, and the Events its condition transitions are worth.
"""

from __future__ import annotations

import datetime as dt

import pydantic

from drafter_operator import engines, figures, timestamps
from drafter_operator.api.serving import DrafterSpec
from drafter_operator.controllers.conditions import Event
from drafter_operator.acceptance.message import DATA_PROBLEMS, INSUFFICIENT_DATA, SPECULATION_DISABLED
from drafter_operator.controllers.serving.acceptance import AcceptanceDecision
from drafter_operator.controllers.serving.drift import acceptance_block
from drafter_operator.controllers.serving.observe import benchmark_revision
from drafter_operator.controllers.swap import SwapPlan
from drafter_operator.constants import K_ANNOTATION, RETRY_ANNOTATION


def retry_request(meta: dict, status: dict, desired: str) -> dict | None:
    """A new value of the retry annotation (pure): the status fields that record it, with the failed
    verdict of ``desired`` cleared so the swap path starts it again; None when there is nothing new."""
    retry = (meta.get("annotations") or {}).get(RETRY_ANNOTATION)
    if not retry or retry == status.get("retryRequest"):
        return None
    revisions = [{k: v for k, v in r.items() if k not in ("good", "failedReason")}
                 if r.get("name") == desired and r.get("good") is False else r for r in status.get("revisions") or []]
    fields = {"revisions": revisions, "retryRequest": retry}
    if (status.get("gating") or {}).get("revision") == desired:
        fields["gating"] = None  # its gate deadline counts afresh from the retried gating
    return fields


def serving_now(active: str | None, revisions: list[dict]) -> dict | None:
    """status.serving (pure): the active revision as its record says it runs (after a Rollback or
    DisableSpeculation that is not the spec's drafter), None before there is one."""
    record = next((r for r in revisions if r.get("name") == active), None)
    if record is None:
        return None
    engine, drafter = record.get("engine"), record.get("drafterSpec") or {}
    method = drafter.get("method") or ("none" if record.get("drafter") == "none" else None)
    try:
        speculates = drafter and method != "none"
        k = engines.draft_tokens_per_step(engine, DrafterSpec.model_validate(drafter)) if speculates else None
    except pydantic.ValidationError:
        k = None
    # Every key, null when unknown: a merge patch must remove what the previous revision's block had.
    return {"revision": active, "engine": engine, "drafter": record.get("drafter"), "method": method,
            "numSpeculativeTokens": k, "image": record.get("image")}


def last_benchmark(runs: list[dict], known: dict | None, describing: tuple[str, ...] = ()) -> dict | None:
    """status.lastBenchmark (pure): the newest finished DrafterBenchmark of the active revision (``runs``,
    newest first: its gate or a run by hand), with its name, throughput, speedup, mean acceptance
    length, k and revision; else what status already holds."""
    if not runs:
        # A figure of another revision would describe what no longer serves (the SPEEDUP column).
        return known if known and (not describing or known.get("revision") in describing) else None
    benchmark = runs[0]
    meta, status = benchmark["metadata"], benchmark["status"]
    result = status["result"]
    k = status.get("numSpeculativeTokens")
    if k is None:  # a gate recorded before status had it
        annotated = (meta.get("annotations") or {}).get(K_ANNOTATION, "")
        k = int(annotated) if annotated.isdigit() else None
    block = {"name": meta["name"], "tokensPerSecond": result.get("tokensPerSecond"), "speedup": result.get("speedup"),
             "acceptanceLength": result.get("acceptanceLength"), "numSpeculativeTokens": k,
             "meanDraftTokens": result.get("meanDraftTokens"),
             "revision": benchmark_revision(benchmark)}
    return {key: value for key, value in block.items() if value is not None}


def acceptance_status(new_status: dict, status: dict, judged: AcceptanceDecision, benchmarked: dict | None,
                      promoted: dict | None) -> None:
    """lastBenchmark, acceptanceThreshold and status.acceptance (the window's figures when the acceptance step
    writes them, and ``promoted``, atPromotion, beside them), and the end of an onDegraded action."""
    new_status["lastBenchmark"] = benchmarked  # None removes one of a revision that no longer serves
    new_status["acceptanceThreshold"] = judged.threshold  # None removes it (merge patch)
    # Unchanged, it is no change (changed_fields); None removes it.
    new_status["acceptance"] = acceptance_block(status.get("acceptance"), judged.acceptance, judged.write_acceptance,
                                                promoted)
    new_status["display"] = columns_shown(new_status["lastBenchmark"], new_status["acceptance"])
    if judged.end_action:
        new_status["degradedAction"] = None
        new_status["speculationDisabled"] = None


def columns_shown(benchmarked: dict | None, acceptance: dict | None) -> dict | None:
    """status.display (pure): the SPEEDUP and ACCEPTANCE columns' text, from the lastBenchmark and acceptance
    blocks this decision writes (``acceptance`` as its merge patch: a null rate is one that goes). Derived from
    them alone, it changes only when they do, so it costs no status write of its own."""
    return figures.shown({"speedup": (benchmarked or {}).get("speedup"),
                          "acceptance": (acceptance or {}).get("rate")})


def gating_since(record: dict | None, revision: str) -> dt.datetime | None:
    """status.gating's start, when it is about ``revision``."""
    if not record or record.get("revision") != revision or not record.get("since"):
        return None
    return timestamps.parse(record["since"])


def updated_revisions(revisions: list[dict], desired: dict, plan: SwapPlan, mark_degraded: tuple[str, ...]) -> list[dict]:
    out = [dict(r) for r in revisions]
    if not any(r["name"] == desired["name"] for r in out):
        out.append(desired)
    for r in out:
        if r["name"] == plan.mark_good:
            r["good"] = True
        if r["name"] == plan.mark_failed:
            r["good"] = False
            if plan.failure_reason:
                r["failedReason"] = plan.failure_reason
        if r["name"] in mark_degraded:
            r["degraded"] = True
    return out[-10:]  # bounded history, newest last


#: The Ready/Progressing reasons of a rollout going as it should: a revision starting, getting Ready, gated, taking
#: traffic, its predecessor stopping. The conditions say them; an Event would only be chatter (a new serving would
#: post four, each an API write, and a fleet's Events would bury the ones a person must read).
PROGRESS_REASONS = frozenset({"EngineStarting", "RevisionStarting", "EngineReady", "RevisionActive", "Gating",
                              "StoppingOldRevision"})
#: Of the reasons that do post an Event, those that are good news (the way back from a problem).
_NORMAL_REASONS = PROGRESS_REASONS - {"EngineStarting"}


def transition_events(before: list[dict] | None, after: list[dict]) -> list[Event]:
    """An Event for each Ready/Progressing change a person should read: to a reason that is not the rollout's
    normal progress, back from one (a recovery), or Ready lost (True to False, whatever the reason); and for each
    Degraded change a user acts on (its status; the data going missing or coming back)."""
    old = {c["type"]: c for c in before or []}
    events = []
    for cond in after:
        prior = old.get(cond["type"], {})
        if cond["type"] in ("Ready", "Progressing"):
            if (prior.get("status"), prior.get("reason")) == (cond["status"], cond["reason"]):
                continue
            lost = cond["type"] == "Ready" and prior.get("status") == "True" and cond["status"] == "False"
            recovered = prior.get("reason") is not None and prior["reason"] not in PROGRESS_REASONS
            if cond["reason"] in PROGRESS_REASONS and not lost and not recovered:
                continue
            kind = "Normal" if cond["reason"] in _NORMAL_REASONS and not lost else "Warning"
            events.append((kind, cond["reason"], f"{cond['type']}={cond['status']}: {cond['message']}"))
        elif cond["type"] == "Degraded" and _degraded_news(prior, cond):
            kind = "Warning" if cond["status"] == "True" or cond["reason"] in DATA_PROBLEMS else "Normal"
            events.append((kind, cond["reason"], f"Degraded={cond['status']}: {cond['message']}"))
    return events


def _degraded_news(prior: dict, cond: dict) -> bool:
    """Degraded changes worth an Event: its status (a first InsufficientData is not news, nor a healthy first
    verdict after it), or the metrics becoming unusable or usable again. Not BelowThresholdPending <->
    AcceptanceHealthy: the
    condition exists so that a wobble does not page anyone; and not the action's own reason, whose
    Event (RollingBack, SpeculationDisabled) already says it."""
    if cond["reason"] == SPECULATION_DISABLED:
        return False
    if not prior:
        return cond["status"] != "Unknown"
    if prior.get("status") != cond["status"]:
        # A healthy drafter's first verdict (its window filled) is what everyone expects: the condition says it.
        return not (prior.get("reason") == INSUFFICIENT_DATA and cond["status"] == "False")
    return (prior.get("reason") in DATA_PROBLEMS) != (cond["reason"] in DATA_PROBLEMS) or \
        (cond["reason"] in DATA_PROBLEMS and prior.get("reason") != cond["reason"])


