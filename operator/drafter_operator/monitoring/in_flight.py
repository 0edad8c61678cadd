"""How many requests a draining revision's engines still owe answers to (running or waiting), read from
each Ready pod's own /metrics, so the old revision of a swap is stopped when its streams have finished
rather than after a fixed delay that cuts long ones (docs/guarantees.md, "No cut requests").

Any doubt is "unknown" (None): a pod that does not answer within the deadline, or a body the parser
refuses. Unknown never ends a drain early; only spec.swap.drainTimeout does.
"""

from __future__ import annotations

import asyncio

from drafter_operator import engines
from drafter_operator.engines import metrics_verdicts as mv
from drafter_operator.engines.metrics_body import read_series
from drafter_operator.monitoring import http_fetch
from drafter_operator.monitoring.http_fetch import MetricsUnavailable

#: The whole answer of one pod, connecting included (engines answer /metrics in milliseconds).
DEADLINE_SECONDS = 3.0


def count_in_flight(engine_name: str, body: bytes) -> int:
    """Requests running or waiting in one /metrics body (summed over the engine's series; raises
    ``mv.MetricsUnusable`` for a body that is not this engine's, or a gauge that is not a count)."""
    engine = engines.engine(engine_name)
    found = read_series(body, f"{engine.ENGINE}:", engine.REQUESTS_IN_FLIGHT)
    total = 0.0
    for name in engine.REQUESTS_IN_FLIGHT:
        for series in found.get(name, []):
            problem = mv.count_problem(series.value)
            if problem is not None:
                raise mv.unusable(problem, f"{name} is {series.value}, not a count of requests", name, series.labels)
            total += series.value
    if not any(found.get(name) for name in engine.REQUESTS_IN_FLIGHT):
        raise mv.unusable(mv.UnusableReason.NOT_ENGINE_METRICS, f"none of {', '.join(engine.REQUESTS_IN_FLIGHT)}")
    return int(total)


async def requests_in_flight(engine_name: str, pod_ips: list[str], port: int) -> int | None:
    """The sum over ``pod_ips`` (a revision's Ready pods), or None when any of them leaves it unknown.
    No Ready pod at all: 0 (nothing can be in flight on a pod that does not serve)."""
    engine = engines.engine(engine_name)
    if not pod_ips:
        return 0

    async def one(client, ip: str) -> int:
        url = f"http://{ip}:{port}{engine.METRICS_PATH}"
        status, body = await http_fetch.fetch(client, "GET", url, http_fetch.AnswerBounds(
            DEADLINE_SECONDS, mv.DEFAULT_MAX_BODY_BYTES, lambda why: mv.unusable(mv.UnusableReason.TOO_LARGE, why)))
        if status != 200:
            raise MetricsUnavailable("HTTPError", f"{url}: HTTP {status}")
        return count_in_flight(engine_name, body)

    async with http_fetch.client(DEADLINE_SECONDS) as client:
        counts = await asyncio.gather(*(one(client, ip) for ip in pod_ips), return_exceptions=True)
    if any(isinstance(c, BaseException) for c in counts):
        return None
    return sum(counts)
