"""The status a DrafterTraining decision leaves: the stage, the merged conditions and the other fields that
changed. Every way a decision ends (decide.py's stages, refusal.py's refused spec) writes it here."""

from __future__ import annotations

from drafter_operator.controllers import conditions
from drafter_operator.controllers.plan import Plan
from drafter_operator.controllers.swap import Verdict
from drafter_operator.controllers.training.state import TrainingState


def set_stage_status(plan: Plan, state: TrainingState, stage: str, verdicts: list[tuple[str, Verdict]],
                     extra: dict | None = None) -> Plan:
    """Set plan.status to what changed: the stage, the merged conditions and ``extra``'s fields."""
    meta, status = state.training["metadata"], state.training.get("status") or {}
    generation = meta.get("generation") or 1
    merged = conditions.merge(status.get("conditions"), verdicts, generation, state.now)
    desired = {"stage": stage, "observedGeneration": generation, "conditions": merged, **(extra or {})}
    plan.status = {k: v for k, v in desired.items() if status.get(k) != v}
    return plan
