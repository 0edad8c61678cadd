"""Acceptance over a subset of the prompts: the step acceptance by prompt length and by traffic category share.

After the run's measurement, the subset's prompts are sent again one at a time, with the target pods' counters
scraped before and after: the delta is the subset's acceptance. One at a time, so nothing else drafts in
between (when nothing else sends traffic to those pods, as for the run itself). With a live baseline each
prompt is sent to it too, right after the target's: the baseline's pods are other pods, so its requests leave
the target's counters alone, and both sides see the same prompts under the same conditions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import aiohttp

from drafter_operator.benchmark_client import scrape
from drafter_operator.benchmark_client.result import Stream, tokens_per_second
from drafter_operator.benchmark_client.stream import Endpoint, stream_one
from drafter_operator.engines.metrics import AcceptanceWindow

#: Why a subset has no acceptance although every pod answered: none of them speculates.
NOT_SPECULATIVE = "NotSpeculative: the engine does not speculate"


@dataclass(frozen=True)
class SubsetMeasurement:
    """What sending a subset's prompts one at a time measured."""

    #: Acceptance over the subset's requests; None with ``unavailable`` saying why.
    window: AcceptanceWindow | None
    unavailable: str | None
    #: The target's streams, in the subset's order.
    streams: tuple[Stream, ...]
    #: The baseline's tokens and seconds over the same prompts; 0 without a baseline.
    baseline_tokens: int = 0
    baseline_seconds: float = 0.0

    @property
    def tokens_per_second(self) -> float:
        return tokens_per_second(sum(s.completion_tokens for s in self.streams), sum(s.seconds for s in self.streams))

    @property
    def baseline_tokens_per_second(self) -> float | None:
        return tokens_per_second(self.baseline_tokens, self.baseline_seconds) if self.baseline_seconds > 0 else None


async def measure(session: aiohttp.ClientSession, target: Endpoint, prompts: Sequence[str], members: Sequence[int],
                  counters: scrape.AcceptanceCounters, baseline: Endpoint | None = None) -> SubsetMeasurement:
    """The subset ``members`` (indices into ``prompts``) sent one at a time to ``target`` between two scrapes
    of its counters, each prompt then to ``baseline`` when there is one."""
    before = await scrape.scrape_all(session, counters.metrics_urls, counters.engine, target.model)
    streams, base_tokens, base_seconds = [], 0, 0.0
    for index in members:
        streams.append(await stream_one(session, target, prompts[index], index))
        if baseline is not None:
            base = await stream_one(session, baseline, prompts[index], index)
            base_tokens += base.completion_tokens
            base_seconds += base.seconds
    after = await scrape.scrape_all(session, counters.metrics_urls, counters.engine, target.model)
    window, unavailable = scrape.acceptance_between(before, after, counters.num_speculative_tokens)
    if window is None and unavailable is None:
        unavailable = NOT_SPECULATIVE
    return SubsetMeasurement(window, unavailable, tuple(streams), base_tokens, base_seconds)
