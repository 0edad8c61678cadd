"""Acceptance by prompt length: does the drafter lose acceptance on long contexts?

A drafter trained at one maximum length accepts less once the context grows past it (speculators#613), and a
run's single acceptance figure averages that away. With bucket edges (``--prompt-length-buckets 1024,4096``)
the prompts of the set are grouped by their length as the engine counted it in the measured run
(``usage.prompt_tokens``), and after the measurement each bucket's prompts are sent again, one at a time, with
the target pods' counters scraped before and after the bucket: the delta is the bucket's acceptance
(``subset.py``, the step acceptance by traffic category shares).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import aiohttp

from drafter_operator.api.benchmark import LengthBucketResult
from drafter_operator.benchmark_client import scrape, subset
from drafter_operator.benchmark_client.result import clip_reason, record_acceptance
from drafter_operator.benchmark_client.stream import Endpoint
from drafter_operator.engines.metrics import AcceptanceWindow


def buckets(edges: Sequence[int]) -> list[tuple[int, int | None]]:
    """(shortest, longest) prompt tokens of each bucket: up to each edge, then an open last one."""
    bounds, low = [], 0
    for edge in sorted(set(edges)):
        bounds.append((low, edge))
        low = edge + 1
    return [*bounds, (low, None)]


def assign(prompt_tokens: Mapping[int, int], edges: Sequence[int]) -> list[tuple[int, int | None, list[int]]]:
    """The prompt indices of each non-empty bucket, shortest bucket first."""
    grouped = []
    for low, high in buckets(edges):
        members = sorted(i for i, n in prompt_tokens.items() if n >= low and (high is None or n <= high))
        if members:
            grouped.append((low, high, members))
    return grouped


def bucket_result(low: int, high: int | None, members: Sequence[int], prompt_tokens: Mapping[int, int],
                  window: AcceptanceWindow | None, unavailable: str | None) -> LengthBucketResult:
    result = LengthBucketResult(min_prompt_tokens=low, max_prompt_tokens=high, prompts=len(members),
                                mean_prompt_tokens=round(sum(prompt_tokens[i] for i in members) / len(members), 1),
                                acceptance_unavailable=clip_reason(unavailable))
    return record_acceptance(result, window)


async def measure(session: aiohttp.ClientSession, target: Endpoint, prompts: Sequence[str],
                  prompt_tokens: Mapping[int, int], edges: Sequence[int],
                  counters: scrape.AcceptanceCounters) -> list[LengthBucketResult]:
    """Each non-empty bucket's acceptance over its prompts, sent again one at a time."""
    results = []
    for low, high, members in assign(prompt_tokens, edges):
        measured = await subset.measure(session, target, prompts, members, counters)
        results.append(bucket_result(low, high, members, prompt_tokens, measured.window, measured.unavailable))
    return results
