"""DrafterCompatible: the known-bad table and a revision's drafter preflight against what a serving runs (pure)."""

from __future__ import annotations

from dataclasses import dataclass

from drafter_operator.controllers import compatibility
from drafter_operator.controllers.conditions import Event
from drafter_operator.controllers.serving_observe import Observed
from drafter_operator.controllers.swap import Verdict

@dataclass(frozen=True)
class Compatibility:
    """What the known-bad table and the revision's preflight say of the target."""

    blocked: bool  # a known-bad combination and spec.drafter.allowKnownBad is false
    known: Verdict  # the known-bad table's verdict alone
    condition: Verdict | None  # DrafterCompatible
    current: dict | None  # DrafterCompatible as written


def check_compatibility(spec, image: str, desired: str, observed: Observed, status: dict) -> Compatibility:
    """The known-bad table against the target, and DrafterCompatible with its revision's preflight."""
    matched = compatibility.matching_known_bad(spec, image)
    known_bad = compatibility.unresolved(matched, observed.preflight.get(desired))
    blocked = bool(known_bad) and not spec.drafter.allow_known_bad
    known = compatibility_verdict(known_bad, blocked, [e.id for e in matched if e not in known_bad])
    current = next((c for c in status.get("conditions") or [] if c["type"] == "DrafterCompatible"), None)
    return Compatibility(blocked, known, compatibility.drafter_compatible(
        known, observed.preflight.get(desired), desired, current), current)


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


def compatibility_verdict(known_bad: list[compatibility.KnownBad], blocked: bool,
                           ruled_out: list[str] = ()) -> Verdict:
    if not known_bad:
        if ruled_out:
            return Verdict("True", "NoKnownIssues", f"known-bad {', '.join(ruled_out)} matches this engine, drafter "
                                                    "method and target, but this drafter's preflight ruled out its cause")
        return Verdict("True", "NoKnownIssues", "no known-bad entry matches this engine, drafter method and target")
    entry = known_bad[0]
    action = "blocked by spec.drafter.allowKnownBad: false" if blocked else "serving anyway (warning)"
    return Verdict("False", "KnownBadCombination",
                   f"{entry.id}: {entry.reason} Observed: {entry.observed}. See {entry.link}. {action}")


def _changed(current: dict | None, verdict: Verdict) -> bool:
    """Whether a condition's status or reason differs from what is written (a new problem is news)."""
    return current is None or (current.get("status"), current.get("reason")) != (verdict.status, verdict.reason)
