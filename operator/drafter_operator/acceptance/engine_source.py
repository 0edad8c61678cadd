"""Acceptance from the engine pods themselves (``spec.acceptance.source: engine``).

Each Ready pod of the active revision is scraped at its own address (never through the Service, which
would show one replica per request), its counters go into that pod's :class:`ScrapeHistory`, and the
revision's sample is the replicas' windows combined (``verdict.py``). A pod that cannot
be scraped makes the sample ``MetricsUnavailable``; a body the parser refuses makes it
``MetricsInvalid``: a verdict on part of the replicas would be a verdict on the wrong traffic.

Every serving's watch runs on the operator's one event loop, so nothing here may hold it: a scrape
has a deadline for its whole answer (``http_fetch``), and bodies are parsed in a worker thread (a body
at the size cap takes over a second to parse; on the loop it would stall every other serving).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import aiohttp

from drafter_operator import engines
from drafter_operator.engines import metrics as m
from drafter_operator.engines import metrics_verdicts as mv
from drafter_operator.acceptance import verdict as a
from drafter_operator.monitoring import http_fetch

log = logging.getLogger("drafter.acceptance")

#: A scrape whose whole answer takes longer than this is a failed scrape (engines answer /metrics in
#: milliseconds; connecting included).
SCRAPE_TIMEOUT_SECONDS = 5.0
#: Parses run here, off the event loop. Two threads: the GIL lets one parse at a time anyway, and a
#: queue of large bodies only delays those servings' verdicts, never anyone's reconcile.
_PARSERS = ThreadPoolExecutor(2, thread_name_prefix="metrics-parse")


@dataclass(frozen=True)
class Replica:
    """One Ready engine pod of the revision being watched."""

    name: str
    ip: str
    port: int


#: What one replica's scrape gave: its counters, or why there are none (``http_fetch.MetricsUnavailable``,
#: ``mv.MetricsUnusable``).
Scraped = m.SpecDecodeCounters | Exception


class EngineSource:
    """Scrapes one revision's replicas and keeps their histories between samples."""

    def __init__(self, engine: str, window_seconds: float, num_speculative_tokens: int | None = None,
                 model_name: str | None = None, max_body_bytes: int = mv.DEFAULT_MAX_BODY_BYTES,
                 timeout_seconds: float = SCRAPE_TIMEOUT_SECONDS) -> None:
        self.engine = engines.engine(engine)
        self.window_seconds = window_seconds
        self.k = num_speculative_tokens
        self.model_name = model_name
        self.max_body_bytes = max_body_bytes
        self.timeout_seconds = timeout_seconds
        self.histories: dict[str, a.ScrapeHistory] = {}

    async def _fetch(self, client: aiohttp.ClientSession, replica: Replica) -> bytes:
        """The replica's /metrics body; ``http_fetch.MetricsUnavailable`` or ``mv.MetricsUnusable`` (too large)."""
        url = f"http://{replica.ip}:{replica.port}{self.engine.METRICS_PATH}"
        status, body = await http_fetch.fetch(client, "GET", url, http_fetch.AnswerBounds(
            self.timeout_seconds, self.max_body_bytes,
            lambda why: mv.unusable(mv.UnusableReason.TOO_LARGE, f"{self.engine.METRICS_PATH}: {why}")))
        if status != 200:
            raise http_fetch.MetricsUnavailable("HTTPError", f"{url}: HTTP {status}")
        return body

    def parse(self, body: bytes) -> Scraped:
        """One body's counters, or the parser's verdict (returned, not raised: many bodies are parsed
        in one call in a worker thread)."""
        try:
            return self.engine.parse_spec_decode_metrics(body, self.model_name, max_body_bytes=self.max_body_bytes)
        except mv.MetricsUnusable as exc:
            return exc
        except Exception as exc:  # noqa: BLE001 - a parser bug on an untrusted body
            # Still a body nobody can trust; raised, it would skip the measurement and leave the last verdict.
            log.exception("the %s metrics parser failed on a /metrics body", self.engine.ENGINE)
            return mv.unusable(mv.UnusableReason.UNPARSEABLE,
                              f"the parser failed on this body: {type(exc).__name__}: {str(exc)[:120]}")

    async def sample(self, replicas: list[Replica], at: float, client: aiohttp.ClientSession | None = None) -> a.AcceptanceSample:
        """Scrape every replica now (concurrently) and return the revision's sample at ``at``."""
        if not replicas:
            return self.sample_from([], at)
        own = client is None
        client = client or http_fetch.client(self.timeout_seconds)
        try:
            fetched = await asyncio.gather(*(self._fetch(client, r) for r in replicas), return_exceptions=True)
        finally:
            if own:
                await client.close()
        bodies = [(i, body) for i, body in enumerate(fetched) if isinstance(body, bytes)]
        parsed = await asyncio.get_running_loop().run_in_executor(
            _PARSERS, lambda: [self.parse(body) for _, body in bodies])
        scraped: list[Scraped] = list(fetched)
        for (i, _), result in zip(bodies, parsed):
            scraped[i] = result
        return self.sample_from(list(zip(replicas, scraped)), at)

    def sample_from(self, scraped: Sequence[tuple[Replica, Scraped]], at: float) -> a.AcceptanceSample:
        """The revision's sample at ``at`` from each replica's scrape (pure but for the histories it
        updates): the first failure decides, else the replicas' windows combined."""
        for gone in set(self.histories) - {r.name for r, _ in scraped}:
            del self.histories[gone]  # a deleted or replaced pod's counters mean nothing any more
        if not scraped:
            return a.AcceptanceSample.unavailable(at, "no Ready engine pod to scrape")
        windows: dict[str, m.AcceptanceWindow] = {}
        for replica, result in scraped:
            if isinstance(result, mv.MetricsUnusable):
                return a.AcceptanceSample(at=at, problem=(a.METRICS_INVALID, f"{replica.name}: {result.verdict}"))
            if isinstance(result, http_fetch.MetricsUnavailable):
                return a.AcceptanceSample.unavailable(at, f"{replica.name}: {result}")
            if isinstance(result, BaseException):
                return a.AcceptanceSample.unavailable(at, f"{replica.name} ({replica.ip}): cannot scrape "
                                                f"{self.engine.METRICS_PATH}: {type(result).__name__}: {str(result)[:200]}")
            history = self.histories.setdefault(replica.name, a.ScrapeHistory(self.window_seconds))
            history.add(at, result)
            try:
                found = history.window(self.window_seconds, self.k)
            except mv.MetricsUnusable as exc:
                return a.AcceptanceSample(at=at, problem=(a.METRICS_INVALID, f"{replica.name}: {exc.verdict}"))
            if found is not None:
                windows[replica.name] = found[0]
        return a.with_replicas(a.AcceptanceSample(at=at), windows, self.k)
