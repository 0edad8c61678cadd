"""Drift against promotion in a DrafterServing decision (pure): ``status.acceptance.atPromotion``, the
DriftDetected condition and its Events (``decide.decide`` calls them).

atPromotion follows the revision that serves: what its gate (a passed DrafterBenchmark) measured before it took
traffic; kept while that revision serves, even once its gate benchmark is gone; cleared when a revision no gate
measured serves (a first revision, a swap without a gate, an onDegraded action's revision). It lives beside the
live window in ``status.acceptance``, so every write of that block carries it.

DriftDetected is judged by the acceptance watch (``acceptance/drift.py``, the verdict's clock on the floor the
tolerance sets); here it only becomes the condition, and only when the figures can be compared: with a figure at
promotion, a measurement of the revision that serves against that same figure, and no swap under way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

from drafter_operator.acceptance import drift as d
from drafter_operator.controllers.conditions import Event
from drafter_operator.controllers.serving.observe import benchmark_revision

if TYPE_CHECKING:
    from drafter_operator.acceptance.measurement import Measurement
    from drafter_operator.api.serving import AcceptanceSpec


def at_promotion(recorded: dict | None, gates: Mapping[str, dict], describing: tuple[str, ...]) -> dict | None:
    """status.acceptance.atPromotion for the revision that serves (``describing``: it, and the static-k revision
    its learned schedule was swept on, ``revisions.measured_as``): the record as it is while it describes that
    revision, else what a passed gate of it measured, else None (no gate measured an acceptance length)."""
    if recorded and recorded.get("revision") in describing:
        return recorded
    for revision in describing:
        gate = gates.get(revision) or {}
        status = gate.get("status") or {}
        result = status.get("result") or {}
        if result.get("verdict") != "Passed" or benchmark_revision(gate) != revision \
                or not isinstance(result.get("acceptanceLength"), (int, float)):
            continue
        record = {"revision": revision, "benchmark": gate["metadata"]["name"],
                  "acceptanceRate": result.get("acceptanceRate"), "acceptanceLength": result["acceptanceLength"],
                  "measuredAt": status.get("completionTime")}
        return {key: value for key, value in record.items() if value is not None}
    return None


def acceptance_block(old: dict | None, figures: dict | None, write_figures: bool, promoted: dict | None) -> dict | None:
    """status.acceptance as a merge patch: the window's figures (``figures`` when the acceptance step writes them,
    else those recorded) with atPromotion beside them; every recorded key the block no longer has is nulled, as a
    merge patch only adds keys. None removes the block (nothing measured, nothing promoted)."""
    old = old or {}
    kept = figures if write_figures else {k: v for k, v in old.items() if k != "atPromotion"}
    wanted = {k: v for k, v in {**(kept or {}), "atPromotion": promoted}.items() if v is not None}
    if not wanted:
        return None
    return {**{k: None for k in old if k not in wanted}, **wanted}


def drift_verdict(acceptance: AcceptanceSpec | None, baseline: d.Baseline | None, measurement: Measurement | None,
                  active: str | None, swapping: bool, condition: dict | None, promoted_anew: bool,
                  refresh: bool):
    """DriftDetected for this decision, None to leave it as it is (pure).

    ``baseline``: the figure at promotion of the revision that serves, with the spec's tolerance; ``promoted_anew``:
    atPromotion changed in this decision (a new revision took traffic); ``refresh``: status.acceptance is rewritten
    with new figures, so the message may be too (otherwise only a new status or reason is written: a message per
    scrape would cost the apiserver a write per scrape)."""
    if acceptance is None:
        return d.not_monitored() if condition is not None else None
    if baseline is None:
        # Absent until there is a figure to drift from; a condition already there is over.
        return d.not_gated(active) if condition is not None else None
    if promoted_anew:
        return d.new_promotion(active, baseline.benchmark)
    if swapping:
        return None  # mid-swap the window may describe neither revision for long: the condition keeps its value
    drift = measurement.drift if measurement is not None and measurement.revision == active else None
    if drift is None or drift.baseline != baseline:
        return d.not_measured() if condition is None else None
    verdict = drift.condition
    if condition and (condition.get("status"), condition.get("reason")) == (verdict.status, verdict.reason) \
            and not refresh:
        return None
    return verdict


def drift_events(before: list[dict] | None, after: list[dict]) -> list[Event]:
    """A Warning DriftDetected when the condition turns True, a Normal DriftCleared when it turns False from True."""
    old = next((c for c in before or [] if c.get("type") == d.CONDITION), {})
    new = next((c for c in after if c.get("type") == d.CONDITION), {})
    if new.get("status") == "True" and old.get("status") != "True":
        return [("Warning", d.CONDITION, new["message"])]
    if new.get("status") == "False" and old.get("status") == "True":
        return [("Normal", "DriftCleared", new["message"])]
    return []
