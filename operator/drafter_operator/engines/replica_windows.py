"""Replicas' acceptance windows summed into one (pure): counter deltas are added and the rate and mean
length recomputed from the sums, never averaged, so a busy replica weighs what it drafted.

Both the operator's acceptance monitor (``monitoring/acceptance.py``) and the benchmark client's scrape
(``benchmark_client/scrape.py``) combine a revision's pods this way; it lives beside the windows
(``engines/metrics.py``) so that neither reaches up into the other's room.
"""

from __future__ import annotations

from drafter_operator.engines import metrics as m


def combine(windows: list[m.AcceptanceWindow], num_speculative_tokens: int | None = None) -> m.AcceptanceWindow:
    """One window for the revision: counter deltas summed over replicas, figures recomputed."""
    if not windows:
        raise ValueError("no replica windows to combine")
    engines = {w.engine for w in windows}
    if len(engines) != 1:
        raise ValueError(f"cannot combine windows of different engines: {sorted(engines)}")
    engine = windows[0].engine
    drafts = sum(w.drafts for w in windows)
    generation = sum(w.generation_tokens for w in windows)
    counted = [w for w in windows if w.draft_tokens is not None and w.accepted_tokens is not None]
    draft_tokens = sum(w.draft_tokens or 0.0 for w in counted) if len(counted) == len(windows) else None
    accepted = sum(w.accepted_tokens or 0.0 for w in counted) if len(counted) == len(windows) else None
    reset = any(w.reset for w in windows)
    estimated = any(w.estimated for w in windows)
    if engine == "vllm":
        positions = max((len(w.per_position) for w in windows), default=0)
        # per_position[i] is accepted_at_i / drafts per replica: weight back by drafts before summing.
        per_position = tuple(
            sum(w.per_position[i] * w.drafts for w in windows if i < len(w.per_position)) / drafts if drafts else 0.0
            for i in range(positions))
        rate = m.acceptance_rate(accepted, draft_tokens) if accepted is not None and draft_tokens is not None else None
        length = m.mean_acceptance_length(accepted, drafts) if accepted is not None else None
        return m.AcceptanceWindow(engine="vllm", drafts=drafts, draft_tokens=draft_tokens, accepted_tokens=accepted,
                                  generation_tokens=generation, acceptance_rate=rate, mean_acceptance_length=length,
                                  rate_source="counters" if rate is not None else "none", reset=reset,
                                  per_position=per_position)
    length = m.tokens_per_verification(generation, drafts)
    rate = m.acceptance_rate(accepted, draft_tokens) if accepted is not None and draft_tokens else None
    source: m.RateSource = "derived" if rate is not None else "none"
    if rate is None and len(windows) == 1 and windows[0].rate_source == "gauge" and drafts > 0:
        rate, source = windows[0].acceptance_rate, "gauge"  # one replica's gauge is still its own figure
    return m.AcceptanceWindow(engine="sglang", drafts=drafts, draft_tokens=draft_tokens, accepted_tokens=accepted,
                              generation_tokens=generation, acceptance_rate=rate, mean_acceptance_length=length,
                              rate_source=source, estimated=estimated, reset=reset)
