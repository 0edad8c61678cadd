"""What ``spec.acceptance.onDegraded`` does about a Degraded revision: a pure decision.

- ``Alert``: nothing beyond the condition, the Event and the metric.
- ``Rollback``: traffic goes back to the newest revision that served well (``good``) and never went
  Degraded, through the normal swap path; the degraded revision is marked so it is never chosen again
  automatically, so two bad drafters cannot ping-pong. With no such revision the serving stays on the
  degraded one and says why (rolling back to nothing would be an outage).
- ``DisableSpeculation``: the same target served with method ``none`` (the 1.0x baseline instead of,
  say, 0.66x). The spec is not rewritten: status says speculation is disabled and why, and the next
  spec change re-enables it.

The action fires once per Degraded revision: when the active revision is already the rollback target
or already serves without speculation, there is nothing left to do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ActionKind = Literal["none", "rollback", "disableSpeculation"]


@dataclass(frozen=True)
class RevisionRecord:
    """What the decision needs to know of one revision (from ``status.revisions``)."""

    name: str
    good: bool = False
    degraded: bool = False
    speculative: bool = True


@dataclass(frozen=True)
class Action:
    kind: ActionKind
    #: The revision traffic should move to (rollback), or the degraded revision being replaced.
    target: str | None = None
    #: Revisions to mark degraded in status.
    mark_degraded: tuple[str, ...] = ()
    #: Why, for the Event, status and the operator log.
    message: str = ""


def plan(on_degraded: str, degraded: bool, active: str | None, revisions: list[RevisionRecord],
         speculation_disabled: bool) -> Action:
    """The action for the current verdict. ``revisions`` are oldest first, as in status."""
    if not degraded or active is None:
        return Action("none")
    by_name = {r.name: r for r in revisions}
    current = by_name.get(active, RevisionRecord(active))
    mark = () if current.degraded else (active,)
    if on_degraded == "Alert":
        return Action("none", mark_degraded=mark, message="onDegraded is Alert: traffic stays on the degraded drafter")
    if on_degraded == "DisableSpeculation":
        if speculation_disabled or not current.speculative:
            return Action("none", mark_degraded=mark)
        return Action("disableSpeculation", target=active, mark_degraded=mark,
                      message=f"revision {active} is Degraded: serving the target without speculation "
                              "until the spec changes")
    if on_degraded == "Rollback":
        candidates = [r for r in revisions if r.name != active and r.good and not r.degraded]
        if not candidates:
            return Action("none", mark_degraded=mark,
                          message=f"revision {active} is Degraded but no earlier revision served well: "
                                  "staying on it (rolling back to nothing would be an outage)")
        target = candidates[-1].name
        return Action("rollback", target=target, mark_degraded=mark,
                      message=f"revision {active} is Degraded: rolling back to {target}, the last revision "
                              "that served well")
    raise ValueError(f"unknown onDegraded {on_degraded!r}")
