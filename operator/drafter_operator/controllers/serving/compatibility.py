"""DrafterCompatible: the known-bad table and a revision's drafter preflight against what a serving runs (pure).

The table is checked when a revision is created (the spec, and spec.placement's GPU product) and again once its
pods are placed and their nodes' GPU product is known. A row matched from the spec alone, with
spec.drafter.allowKnownBad false, keeps the revision from being created; a row matched only once the pods are
placed fails the revision as an engine that cannot start does (its traffic stays where it is), unless that
revision already serves: then it warns.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from drafter_operator.controllers.serving import drafter_compatible
from drafter_operator.controllers.conditions import Event
from drafter_operator.controllers.serving.known_bad import KnownBad, admission_gpu_products
from drafter_operator.controllers.serving.observe import Observed
from drafter_operator.controllers.swap import RevisionObservation, SwapPlan, Verdict

#: How a revision's failedReason begins when a known-bad row refused it on its GPU (`placement_refusal`).
REFUSED_ON_GPU = "refused on its GPU by known-bad row"


@dataclass(frozen=True)
class Compatibility:
    """What the known-bad table and the revision's preflight say of the target."""

    blocked: bool  # a row matched from the spec alone and spec.drafter.allowKnownBad is false: nothing is created
    known: Verdict  # the known-bad table's verdict alone
    condition: Verdict | None  # DrafterCompatible
    current: dict | None  # DrafterCompatible as written
    # A row matched once the revision's pods were placed (their GPU product) and allowKnownBad is false: the
    # revision fails with this, unless it already serves.
    refusal: str | None = None
    # The nodes a row keyed by GPU product waits for: the revision's pods are placed there, their label unread.
    read_nodes: tuple[str, ...] = ()
    # The revision is refused on its GPU (now, or recorded so) and does not serve: its pods stop.
    stop: bool = False


def check_compatibility(spec, image: str, desired: str, observed: Observed, status: dict,
                        serving: bool = False) -> Compatibility:
    """The known-bad table against the target, and DrafterCompatible with its revision's preflight. ``serving``:
    the desired revision already took traffic (then a row its GPU brings to light warns, never refuses)."""
    placed = observed.gpu_products(desired)
    matched, pending = drafter_compatible.known_bad_outcomes(spec, image, gpu_products=placed)
    known_bad = drafter_compatible.unresolved(matched, observed.preflight.get(desired))
    on_gpu = [e for e in known_bad if e.gpu_products and admission_gpu_products(spec) is None]
    refuse = not spec.drafter.allow_known_bad
    blocked = refuse and any(e not in on_gpu for e in known_bad)
    refusal = placement_refusal(on_gpu[0], placed) if refuse and on_gpu and not blocked and not serving else None
    action = ("refused: spec.drafter.allowKnownBad is false" if blocked or refusal else
              "not refused: the revision already served when its GPU became known" if refuse else
              "serving anyway (a warning; spec.drafter.allowKnownBad: false refuses it)")
    known = compatibility_verdict(known_bad, action, [e.id for e in matched if e not in known_bad], pending, placed,
                                  observed.nodes_unreadable)
    earlier = refused_earlier(status, desired)
    if earlier and known.status == "True":  # its pods are gone since: the row that refused it still stands
        known = Verdict("False", "KnownBadCombination", f"revision {desired} {earlier}")
    # Refused earlier: it stays stopped while refusing still holds (allowKnownBad true and a retry start it again).
    stop = refusal is not None or (earlier is not None and refuse and not serving)
    current = next((c for c in status.get("conditions") or [] if c["type"] == "DrafterCompatible"), None)
    unread = tuple(n for n in observed.nodes.get(desired, ()) if n not in observed.node_products) \
        if pending and observed.nodes_unreadable is None else ()
    return Compatibility(blocked, known, drafter_compatible.drafter_compatible(
        known, observed.preflight.get(desired), desired, current), current, refusal, unread, stop)


def placement_refusal(entry: KnownBad, products: frozenset[str] | None) -> str:
    """The failure of a revision a row refuses once its GPU product is known (status.revisions[].failedReason)."""
    return (f"{REFUSED_ON_GPU} {entry.id} on {', '.join(sorted(products or ()))} ({entry.citation}): {entry.reason} "
            f"Fix: {entry.fix} Or, to serve it anyway, set spec.drafter.allowKnownBad to true and retry the revision "
            "(kubectl drafter retry)")


def refused_earlier(status: dict, revision: str) -> str | None:
    """The failure recorded for a revision a known-bad row refused on its GPU, else None."""
    record = next((r for r in status.get("revisions") or [] if r.get("name") == revision), {})
    reason = record.get("failedReason") or ""
    return reason if record.get("good") is False and REFUSED_ON_GPU in reason else None


def refused_revisions(revisions: dict[str, RevisionObservation], compatible: Compatibility, desired: str,
                      serving: bool) -> dict[str, RevisionObservation]:
    """The revisions as the swap planner is to see them: a revision a row refuses on its GPU as one whose engine
    cannot start (it fails at once, its traffic stays where it is), unless it already ``serving``: a revision that
    took traffic is never torn down for it (the condition warns)."""
    observation = revisions.get(desired)
    if compatible.refusal is None or serving or observation is None:
        return revisions
    return {**revisions, desired: dataclasses.replace(observation, ready=0, exited=compatible.refusal, exit_restarts=0,
                                                      exit_final=True)}


def stop_refused(swap: SwapPlan, revision: str, compatible: Compatibility) -> None:
    """A revision refused on its GPU stops: its engine would otherwise load and, as a first revision, take traffic
    (the Service points at a first revision from the start). Its Deployment is deleted; as a failed revision it
    is not started again until the spec changes. A first revision's Ready says why nothing serves."""
    if not compatible.stop:
        return
    if revision in swap.scale:
        del swap.scale[revision]
        if revision not in swap.delete:
            swap.delete.append(revision)
    if swap.active == revision:
        why = compatible.known.message.removeprefix(f"revision {revision} ")
        swap.ready = Verdict("False", "KnownBadCombination", f"revision {revision} does not serve: {why}")


def compatibility_events(compatible: Compatibility) -> list[Event]:
    """A Warning when DrafterCompatible is not True and its status or reason is new."""
    condition = compatible.condition
    if condition is not None and condition.status != "True" and _changed(compatible.current, condition):
        return [("Warning", condition.reason, condition.message)]
    return []


def preflight_ready(ready: Verdict | None, observed: Observed) -> Verdict | None:
    """Ready as the swap planner judged it, with EngineExited named DrafterIncompatible when what "exited"
    was a revision's preflight: its engine never started."""
    if ready is None or ready.reason != "EngineExited":
        return ready
    failures = [o.failure() for o in observed.preflight.values() if o.failed]
    if any(ready.message.endswith(failure) for failure in failures):
        return Verdict("False", "DrafterIncompatible", ready.message)
    return ready


def compatibility_verdict(known_bad: list[KnownBad], action: str, ruled_out: list[str] = (),
                          pending: list[KnownBad] = (), products: frozenset[str] | None = None,
                          unreadable: str | None = None) -> Verdict:
    """The known-bad table's verdict: the first matching row (its id, issue, reason, fix, and ``action``: what the
    operator does about it), else the rows a preflight ruled out and the rows waiting for the GPU product, else
    none."""
    if known_bad:
        entry = known_bad[0]
        where = f" on {', '.join(sorted(products))}" if entry.gpu_products and products else ""
        observed = f" Observed: {entry.observed}." if entry.observed else ""
        more = f" Also: {', '.join(e.id for e in known_bad[1:])}." if len(known_bad) > 1 else ""
        return Verdict("False", "KnownBadCombination",
                       f"known-bad row {entry.id}{where} ({entry.citation}): {entry.reason}{observed} "
                       f"Fix: {entry.fix}{more} {action}")
    notes = []
    if ruled_out:
        notes.append(f"known-bad {', '.join(ruled_out)} matches this engine, drafter method and target, but this "
                     "drafter's preflight ruled out its cause")
    if pending:
        why = f" ({unreadable}: set spec.placement.gpuProduct to have it checked)" if unreadable else \
            ": checked once the revision's pods are placed"
        notes.append(f"known-bad {', '.join(f'{e.id} ({e.citation})' for e in pending)} applies on GPUs matching "
                     f"{' or '.join(sorted({p for e in pending for p in e.gpu_products}))}, not known yet{why}")
    if notes:
        return Verdict("True", "GPUCheckPending" if pending else "NoKnownIssues", "; ".join(notes))
    return Verdict("True", "NoKnownIssues", "no known-bad row matches this engine, drafter, target and launch flags")


def _changed(current: dict | None, verdict: Verdict) -> bool:
    """Whether a condition's status or reason differs from what is written (a new problem is news)."""
    return current is None or (current.get("status"), current.get("reason")) != (verdict.status, verdict.reason)
