"""Acceptance and speedup by traffic category: which kinds of traffic does the drafter serve well?

A drafter's acceptance depends on what is generated (``traffic_categories.py``), so a run's single figure
averages code the drafter predicts well with chat or other languages it predicts poorly. With
``--acceptance-by-category`` the tagged prompts of the set are grouped by category and, after the
measurement, each category's prompts are sent again one at a time (``subset.py``): the target's counters
give the category's acceptance, its streams its single-stream throughput, and a live baseline, sent the
same prompts, the speedup on exactly that traffic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import aiohttp

from drafter_operator.api.benchmark import CategoryResult
from drafter_operator.benchmark_client import scrape, subset
from drafter_operator.benchmark_client.result import clip_reason, record_acceptance, speedup
from drafter_operator.benchmark_client.stream import Endpoint


def category_result(category: str, measured: subset.SubsetMeasurement) -> CategoryResult:
    """The API object of one category's measurement (rounded like the run's figures)."""
    baseline = measured.baseline_tokens_per_second
    result = CategoryResult(category=category, prompts=len(measured.streams),
                            tokens_per_second=round(measured.tokens_per_second, 3),
                            baseline_tokens_per_second=None if baseline is None else round(baseline, 3),
                            acceptance_unavailable=clip_reason(measured.unavailable))
    ratio = speedup(measured.tokens_per_second, baseline)
    result.speedup = None if ratio is None else round(ratio, 4)
    return record_acceptance(result, measured.window)


async def measure(session: aiohttp.ClientSession, target: Endpoint, prompts: Sequence[str],
                  members_by_category: Mapping[str, Sequence[int]], counters: scrape.AcceptanceCounters,
                  baseline: Endpoint | None = None) -> list[CategoryResult]:
    """Each category's figures over its prompts (``members_by_category``: indices into ``prompts``), in the
    order given."""
    return [category_result(category, await subset.measure(session, target, prompts, members, counters, baseline))
            for category, members in members_by_category.items()]
