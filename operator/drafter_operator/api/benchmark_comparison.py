"""DrafterBenchmark spec.candidates: several servings of one target measured under the same settings, one after
another, and the one to pick at each load (status.comparison)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from drafter_operator.api.common import LocalObjectReference, StatusModel

#: A comparison runs its candidates one after another: each a whole sweep.
MAX_CANDIDATES = 8

Candidates = Annotated[list[LocalObjectReference], Field(min_length=2, max_length=MAX_CANDIDATES)]

#: Each candidate named once (CEL), and never the baseline.
CEL_CANDIDATES_DISTINCT = "!has(self.candidates) || self.candidates.all(x, self.candidates.exists_one(y, y.name == x.name))"
CEL_BASELINE_NOT_A_CANDIDATE = ("!has(self.candidates) || !has(self.baseline) || !has(self.baseline.servingRef) "
                                "|| !self.candidates.exists(c, c.name == self.baseline.servingRef.name)")


def candidates_distinct(spec) -> bool:
    names = [c.name for c in spec.candidates or ()]
    return len(set(names)) == len(names)


def baseline_not_a_candidate(spec) -> bool:
    baseline = spec.baseline.serving_ref if spec.baseline is not None else None
    return baseline is None or all(c.name != baseline.name for c in spec.candidates or ())


class ComparedCandidate(StatusModel):
    """One candidate serving and the run that measured it."""

    serving: str
    """The DrafterServing (spec.candidates)."""
    benchmark: str | None = None
    """The DrafterBenchmark that measures it (owned by this one; created when its turn comes)."""
    state: str | None = None
    """That run's state."""
    drafter: str | None = None
    """The drafter it measured, e.g. "suffix" or "eagle3:/models/drafters/kimi-eagle3"."""
    break_even: float | None = None
    """Its sweep's interpolated break-even, in streams (speculation stops paying above it); unset where its levels did not bracket one."""


class CandidateSpeedup(StatusModel):
    serving: str
    """The candidate."""
    speedup: float | None = None
    """Its speedup against the baseline at this level; unset where its sweep did not measure the level."""
    tokens_per_second: float | None = None
    """Its aggregate decode throughput at this level."""
    mix_speedup: float | None = None
    """With spec.traffic: its speedup at this level predicted for the traffic mix, from its sweep's step costs and its acceptance by category; the pick follows it."""


class ComparedLevel(StatusModel):
    concurrency: int
    """Streams."""
    speedups: list[CandidateSpeedup]
    """Every candidate, in spec.candidates order."""
    pick: str | None = None
    """The candidate with the highest speedup, or "no speculation" where none beats the baseline (serve without speculation); unset at a level only some candidates measured (a sweep's refinement around its own break-even)."""


class Comparison(StatusModel):
    """The candidates side by side."""

    candidates: list[ComparedCandidate]
    """In spec.candidates order."""
    levels: list[ComparedLevel] | None = None
    """Every level any candidate measured, ascending; set once every candidate's run succeeded."""
    basis: Literal["measured", "trafficMix"] | None = None
    """What the picks follow: the speedups the candidates' prompts measured, or (spec.traffic) the speedups predicted for the traffic mix; measured where a candidate's sweep cannot predict the mix (no acceptance for one of its categories), and the Complete condition says why."""
