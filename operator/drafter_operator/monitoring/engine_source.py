"""Acceptance from the engine pods themselves (``spec.acceptance.source: engine``).

Each Ready pod of the active revision is scraped at its own address (never through the Service, which
would show one replica per request), its counters go into that pod's :class:`ScrapeHistory`, and the
revision's sample is the replicas' windows combined (``monitoring/acceptance.py``). A pod that cannot
be scraped makes the sample ``MetricsUnavailable``; a body the parser refuses makes it
``MetricsInvalid``: a verdict on part of the replicas would be a verdict on the wrong traffic.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import httpx

from drafter_operator import engines
from drafter_operator.engines import metrics as m
from drafter_operator.monitoring import acceptance as a

#: A scrape that takes longer than this is a failed scrape (engines answer /metrics in milliseconds).
SCRAPE_TIMEOUT_SECONDS = 5.0


@dataclass(frozen=True)
class Replica:
    """One Ready engine pod of the revision being watched."""

    name: str
    ip: str
    port: int


class EngineSource:
    """Scrapes one revision's replicas and keeps their histories between samples."""

    def __init__(self, engine: str, window_seconds: float, num_speculative_tokens: int | None = None,
                 model_name: str | None = None, max_body_bytes: int = m.DEFAULT_MAX_BODY_BYTES) -> None:
        self.engine = engines.engine(engine)
        self.window_seconds = window_seconds
        self.k = num_speculative_tokens
        self.model_name = model_name
        self.max_body_bytes = max_body_bytes
        self.histories: dict[str, a.ScrapeHistory] = {}

    async def _scrape(self, client: httpx.AsyncClient, replica: Replica) -> m.SpecDecodeCounters:
        url = f"http://{replica.ip}:{replica.port}{self.engine.METRICS_PATH}"
        async with client.stream("GET", url) as response:
            response.raise_for_status()
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > self.max_body_bytes:
                    # Stop reading: the parser would refuse it anyway, and memory stays bounded.
                    raise m.unusable(m.UnusableReason.TOO_LARGE,
                                     f"{replica.name}: /metrics body over {self.max_body_bytes} bytes")
        return self.engine.parse_spec_decode_metrics(bytes(body), self.model_name,
                                                     max_body_bytes=self.max_body_bytes)

    async def sample(self, replicas: list[Replica], at: float, client: httpx.AsyncClient | None = None) -> a.Sample:
        """Scrape every replica now (concurrently) and return the revision's sample at ``at``."""
        for gone in set(self.histories) - {r.name for r in replicas}:
            del self.histories[gone]  # a deleted or replaced pod's counters mean nothing any more
        if not replicas:
            return a.Sample.unavailable(at, "no Ready engine pod to scrape")
        own = client is None
        client = client or httpx.AsyncClient(timeout=SCRAPE_TIMEOUT_SECONDS)
        try:
            results = await asyncio.gather(*(self._scrape(client, r) for r in replicas), return_exceptions=True)
        finally:
            if own:
                await client.aclose()
        windows: dict[str, m.AcceptanceWindow] = {}
        for replica, result in zip(replicas, results):
            if isinstance(result, m.MetricsUnusable):
                return a.Sample(at=at, problem=(a.METRICS_INVALID, f"{replica.name}: {result.verdict}"))
            if isinstance(result, BaseException):
                return a.Sample.unavailable(at, f"{replica.name} ({replica.ip}): cannot scrape "
                                                f"{self.engine.METRICS_PATH}: {type(result).__name__}: {result}")
            history = self.histories.setdefault(replica.name, a.ScrapeHistory(self.window_seconds))
            history.add(at, result)
            try:
                found = history.window(self.window_seconds, self.k)
            except m.MetricsUnusable as exc:
                return a.Sample(at=at, problem=(a.METRICS_INVALID, f"{replica.name}: {exc.verdict}"))
            if found is not None:
                windows[replica.name] = found[0]
        return a.with_replicas(a.Sample(at=at), windows, self.k)
