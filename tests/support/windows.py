"""Acceptance windows built by hand, as the engines' metrics parser returns them."""
from __future__ import annotations

from drafter_operator.engines import metrics as m


def vllm_window(drafts: float, accepted: float, k: int = 5) -> m.AcceptanceWindow:
    """A vLLM window with ``drafts`` steps of ``k`` draft tokens, ``accepted`` of them accepted."""
    return m.AcceptanceWindow(engine="vllm", drafts=drafts, draft_tokens=drafts * k, accepted_tokens=accepted,
                              generation_tokens=drafts + accepted, acceptance_rate=accepted / (drafts * k),
                              mean_acceptance_length=1 + accepted / drafts, rate_source="counters")
