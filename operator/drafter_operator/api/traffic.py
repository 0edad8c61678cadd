"""A workload's traffic by category (spec.traffic): shared by a DrafterServing and a DrafterBenchmark's comparison."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from drafter_operator.api.common import ApiModel, Rule, cel_in, spoken
from drafter_operator.traffic_categories import TRAFFIC_CATEGORIES


class TrafficSpec(ApiModel):
    """What is asked of a serving, by category: a serving's load schedule (drafter.dynamic) and a comparison's pick
    (a DrafterBenchmark's candidates) are predicted for this mix."""

    rules = (
        Rule(
            cel=f"self.mix.all(c, {cel_in('c', TRAFFIC_CATEGORIES)})",
            message=f"spec.traffic.mix takes the categories {spoken(TRAFFIC_CATEGORIES)}: rename or remove the others",
            check=lambda t: all(category in TRAFFIC_CATEGORIES for category in t.mix),
            field_path=".mix",
        ),
        Rule(
            cel="self.mix.exists(c, self.mix[c] > 0)",
            message="spec.traffic.mix needs a weight above 0 for at least one category, e.g. {code: 60, chat: 40}",
            check=lambda t: any(weight > 0 for weight in t.mix.values()),
            field_path=".mix",
        ),
    )

    mix: Annotated[dict[str, Annotated[int, Field(ge=0, le=100)]], Field(min_length=1, max_length=len(TRAFFIC_CATEGORIES))]
    """Relative weights of the categories of traffic, e.g. {code: 60, chat: 40} (need not sum to 100). On a DrafterServing with drafter.dynamic, the schedule's acceptance is this mix of the sweep's acceptance by category (a DrafterBenchmark with acceptanceByCategory), weighted by the verification steps each category's tokens take; without categories in the sweep, its overall acceptance. On a DrafterBenchmark with candidates, the pick at each load is the candidate whose sweep predicts the highest speedup for this mix."""
