"""The engines' acceptance as the acceptance watch reads it: one window per look at a revision.

Each revision has a base acceptance rate (its `Fate`); an operation can drop a revision's rate and
let it recover. Samples are built as the engine source builds them (an `AcceptanceWindow` per look,
over the revision's Ready pods), with the metric faults the world is in: no measurement at all, or an
unreadable endpoint (Unknown).
"""

from __future__ import annotations

from drafter_operator import engines
from drafter_operator.engines import metrics as m
from drafter_operator.acceptance import verdict as a
from drafter_operator.resources.labels import REVISION_LABEL, SERVING_LABEL

from drafter_testbed.simulation.cluster import fate_of, ready

VERIFY_STEPS_PER_SECOND = 8.0  # per replica


class Engines:
    def __init__(self, world):
        self.world = world
        self.override: dict[str, float] = {}  # revision -> acceptance rate now

    def rate(self, revision: str) -> float:
        return self.override.get(revision, fate_of(self.world.seed, revision).acceptance)

    def sample(self, spec, revision: str, view: dict, thresholds: a.Thresholds, at: float) -> a.AcceptanceSample:
        if self.world.metrics_fault == "unknown":
            return a.AcceptanceSample.unavailable(at, "GET http://10.0.0.1:8000/metrics: connection refused")
        prefix = f"/api/v1/namespaces/{self.world.namespace}/pods/"
        # The serving's pods as the operator's index holds them (its label): a group's leaders, never its workers.
        pods = [p for k, p in view.items() if k.startswith(prefix) and not p["metadata"].get("deletionTimestamp")
                and (p["metadata"].get("labels") or {}).get(REVISION_LABEL) == revision and ready(p)
                and (p["metadata"].get("labels") or {}).get(SERVING_LABEL) == self.world.name
                and p["status"].get("podIP")]
        if not pods:
            return a.AcceptanceSample(at=at)
        k = engines.draft_tokens_per_step(spec.engine, spec.drafter) or 1
        r = self.rate(revision)
        drafts = VERIFY_STEPS_PER_SECOND * thresholds.window_seconds * len(pods)
        draft_tokens = drafts * k
        accepted = draft_tokens * r
        window = m.AcceptanceWindow(engine=spec.engine, drafts=drafts, draft_tokens=draft_tokens,
                                    accepted_tokens=accepted, generation_tokens=drafts + accepted,
                                    acceptance_rate=r, mean_acceptance_length=1 + accepted / drafts,
                                    rate_source="counters")
        return a.AcceptanceSample(at=at, window=window)


#: docs/monitoring.md: a drafter whose first position accepts under 2% while drafting is lost.
LOST_FIRST_POSITION = 0.02


def below(sample: a.AcceptanceSample, t: a.Thresholds) -> bool | None:
    """Whether a sample is evidence of low acceptance: True below a threshold with enough data, False
    above, None when it is no evidence at all (no window, too few draft tokens, unreadable metrics)."""
    w = sample.window
    if sample.problem is not None or w is None or a.drafted(w) < t.min_draft_tokens:
        return None
    if t.judge_lost and w.first_position is not None and w.first_position < LOST_FIRST_POSITION:
        return True  # a lost drafter (guarantee 11: one window of evidence decides it; drift judges lengths only)
    if t.min_rate is not None and w.acceptance_rate is not None and w.acceptance_rate < t.min_rate:
        return True
    if t.min_length is not None and w.mean_acceptance_length is not None and w.mean_acceptance_length < t.min_length:
        return True
    return False
