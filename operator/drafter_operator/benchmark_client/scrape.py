"""Acceptance over a benchmark run from the engine pods' ``/metrics``: scraped before and after.

Each ``--metrics-url`` is one engine pod (a Service would answer from a different pod each time, and
deltas between two pods are meaningless). Per pod the window is the delta of its counters
(``engines.metrics.window``); the pods' windows are summed by ``engines.replica_windows.combine``, so a
busy pod weighs what it drafted. Anything that makes a pod's figures untrustworthy (unreachable,
an HTTP error, a verdict on the body, a restart that is not a clean reset) makes the whole run's
acceptance unavailable with that reason: a sum missing a pod would be a wrong number, and a missing
body is never taken for "not speculative".
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import aiohttp

from drafter_operator import engines
from drafter_operator.engines.metrics import AcceptanceWindow, SpecDecodeCounters, window
from drafter_operator.engines.metrics_verdicts import MetricsUnusable
from drafter_operator.engines.replica_windows import combine

#: Reason of an acceptanceUnavailable that is not a verdict on a body: the scrape itself failed.
UNAVAILABLE = "MetricsUnavailable"
#: The engine speculates but counted no verification step over the run.
NO_DATA = "NoData"


@dataclass(frozen=True)
class AcceptanceCounters:
    """Where an engine's acceptance counters are read: its /metrics at ``metrics_urls``, counted as ``engine``'s
    with ``num_speculative_tokens`` drafts per step (None: read from the engine's own counters)."""

    metrics_urls: Sequence[str]
    engine: str
    num_speculative_tokens: int | None


@dataclass(frozen=True)
class Scrape:
    """One pod's counters, or why there are none ("<Reason>: <url>: <message>")."""

    url: str
    counters: SpecDecodeCounters | None = None
    problem: str | None = None


def metrics_endpoint(url: str, engine: str) -> str:
    """The URL to GET: ``url`` as given when it already ends in the metrics path, else base + path."""
    path = engines.engine(engine).METRICS_PATH
    url = url.rstrip("/")
    return url if url.endswith(path) else url + path


async def scrape(session: aiohttp.ClientSession, url: str, engine: str, model: str | None) -> Scrape:
    """One pod's counters; every failure becomes a problem string, never an exception."""
    endpoint = metrics_endpoint(url, engine)
    try:
        async with session.get(endpoint) as resp:
            status, body = resp.status, await resp.read()
    except (aiohttp.ClientError, TimeoutError) as exc:
        return Scrape(url, problem=f"{UNAVAILABLE}: GET {endpoint}: {type(exc).__name__}: {exc}")
    if status != 200:
        return Scrape(url, problem=f"{UNAVAILABLE}: GET {endpoint} returned HTTP {status}")
    try:
        return Scrape(url, counters=engines.engine(engine).parse_spec_decode_metrics(body, model))
    except MetricsUnusable as exc:
        return Scrape(url, problem=f"{exc.verdict.reason}: {endpoint}: {exc.verdict.message}")


async def scrape_all(session: aiohttp.ClientSession, urls: Sequence[str], engine: str,
                     model: str | None) -> list[Scrape]:
    return list(await asyncio.gather(*(scrape(session, url, engine, model) for url in urls)))


def acceptance_between(before: Sequence[Scrape], after: Sequence[Scrape],
                       num_speculative_tokens: int | None = None) -> tuple[AcceptanceWindow | None, str | None]:
    """(window over the run summed over pods, None) or (None, why not); (None, None): not speculative.

    ``before`` and ``after`` hold the same URLs in the same order. "Not speculative" needs every pod
    to have answered with trusted counters that say so; one bad pod makes the figures unavailable.
    """
    for s in (*before, *after):
        if s.problem is not None:
            return None, s.problem
    if not any(s.counters.speculative for s in after):
        return None, None
    windows = []
    for b, a in zip(before, after, strict=True):
        if not a.counters.speculative:
            continue  # a pod without a drafter drafts nothing: nothing to add
        try:
            windows.append(window(b.counters, a.counters, num_speculative_tokens))
        except MetricsUnusable as exc:  # e.g. counters that went down without a clean restart
            return None, f"{exc.verdict.reason}: {a.url}: {exc.verdict.message}"
    combined = combine(windows, num_speculative_tokens)
    if not combined.has_data:
        return None, (f"{NO_DATA}: the engine speculates but counted no verification step during the run: "
                      "are the metrics URLs the pods that served the requests?")
    return combined, None
