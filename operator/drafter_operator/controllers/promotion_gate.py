"""The one-shot swap of a DrafterTraining's Promote (pure).

Promote changes the serving's drafter and, in the same merge patch, sets the annotation
`drafter.dev/promotion`: the drafter it promotes (model and content digest), the strategy (BlueGreen)
and the gate the new drafter must pass (promote.gate plus "beat the current drafter"). The serving's
decision swaps to that drafter's revision with that strategy and gate instead of spec.swap; every other
swap (a later manual drafter change, an image change, an onDegraded action) follows spec.swap as the user
left it, which Promote never writes.

The annotation binds to one revision: the first desired revision (as it runs without a learned schedule)
whose drafter has the promoted model and digest while the annotation has that value; status.promotion
records the binding so a later spec change with the same drafter is not mistaken for the promotion. It
applies to that revision, and to its scheduled revision under spec.drafter.dynamic (the same drafter,
a schedule learned from the gate's sweep), until it has served (is good).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Literal

import pydantic

from drafter_operator.api.benchmark_gate import BenchmarkGate
from drafter_operator.api.common import ApiModel, ModelRef
from drafter_operator.api.serving import ContentDigest, DrafterServingSpec
from drafter_operator.constants import PROMOTION_ANNOTATION

SPEC_GATE = "spec.swap.gate"


class PromotionRequest(ApiModel):
    """The annotation's value (JSON)."""

    by: str
    model: ModelRef
    content_digest: ContentDigest | None = None
    strategy: Literal["BlueGreen"] = "BlueGreen"
    gate: BenchmarkGate | None = None


def promotion_annotation(by: str, model: str, content_digest: str | None, gate: dict | None) -> str:
    """The annotation's value for a promotion of ``model`` at ``content_digest`` through ``gate``. The gate travels
    whole (its prompts and acceptanceByCategory too), and as UTF-8 rather than \\u escapes: a gate's inline prompts
    in another script would otherwise take up to three times their size of the serving's 256 KiB of annotations
    (an ASCII gate's value is the same either way)."""
    request = {"by": by, "model": model, "contentDigest": content_digest, "strategy": "BlueGreen", "gate": gate or None}
    return json.dumps({k: v for k, v in request.items() if v is not None}, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False)


def request_key(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()[:10]


@dataclass(frozen=True)
class PromotionSwap:
    request: PromotionRequest | None = None  # the promotion that governs the swap to the desired revision
    record: dict | None = None  # status.promotion (None removes it)

    @property
    def gate_source(self) -> str:
        """Whose gate, for messages and status.gating.source."""
        return f"the gate of {PROMOTION_ANNOTATION} by {self.request.by}" if self.request else SPEC_GATE


@dataclass(frozen=True)
class Desired:
    """The revision a serving's decision wants to run, and its form without a learned schedule (``static``; the
    same revision when no schedule is learned): a promotion binds to the static form."""

    revision: str
    static: str


def promotion_swap(annotations: dict | None, recorded: dict | None, spec: DrafterServingSpec, desired: Desired,
                   good: frozenset[str], action: bool) -> PromotionSwap:
    """Whether the promotion annotation governs the swap to the ``desired`` revision (pure). ``action``: an
    onDegraded action chose what runs (never a promotion). ``good``: revisions that have served; a promotion
    ends once its revision has."""
    static_revision = desired.static
    raw = (annotations or {}).get(PROMOTION_ANNOTATION)
    if not raw:
        return PromotionSwap()
    try:
        request = PromotionRequest.model_validate(json.loads(raw))
    except (ValueError, pydantic.ValidationError):
        return PromotionSwap()  # written by hand and wrong: spec.swap governs, as without one
    key = request_key(raw)
    recorded = recorded or {}
    if recorded.get("request") == key:
        bound = recorded.get("revision")
    elif not action and spec.drafter.model == request.model and spec.drafter.content_digest == request.content_digest:
        bound = static_revision
    else:
        return PromotionSwap()  # the spec no longer (or not yet) runs the promoted drafter
    record = {"request": key, "by": request.by, "revision": bound}
    applies = bound == static_revision and not {static_revision, desired.revision} & good and not action
    return PromotionSwap(request if applies else None, record)
