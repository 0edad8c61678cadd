"""One bounded HTTP fetch for both acceptance sources: a deadline for the whole answer, a size cap while
it streams, and failures turned into ``MetricsUnavailable`` with a one-word reason.

Per-operation timeouts (connect, each read) never trip on a server that sends a byte every few seconds,
so a sick engine or Prometheus could hold a measurement for as long as it liked. The deadline here covers
everything from connecting to the last byte.

The client is aiohttp's, the one HTTP library of the runtime (kopf's own, and the faster of the two this
package used to carry: docs/performance.md, "One HTTP client").
"""

from __future__ import annotations

import asyncio
import functools
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import aiohttp


class MetricsUnavailable(Exception):
    """No answer to judge (condition reason ``MetricsUnavailable``), from either source.

    ``reason`` says why, in one word: ``Unreachable`` (connection refused, reset or closed without an
    answer), ``Timeout`` (no complete answer in time), ``HTTPError`` (an error status), and for the
    ``prometheus`` source ``QueryError`` and ``NoSeries``.
    """

    condition_reason = "MetricsUnavailable"  # the Degraded reason (acceptance/message.py METRICS_UNAVAILABLE)

    def __init__(self, reason: str, message: str):
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class Timeout:
    """Per-operation limits in seconds: ``connect`` for the connection, ``read`` for each wait for bytes."""
    read: float
    connect: float | None = None

    def client_timeout(self) -> aiohttp.ClientTimeout:
        # total=None: the whole answer is bounded by fetch's deadline, which names the timeout it hit.
        return aiohttp.ClientTimeout(total=None, connect=self.connect, sock_read=self.read)


@functools.cache
def _tls_context() -> ssl.SSLContext:
    # Building and loading a TLS context costs tens of ms of CPU on the event loop that runs every serving's
    # watch; a client per measurement would build one each time: all clients share this one.
    return ssl.create_default_context()


def client(timeout: Timeout | float) -> aiohttp.ClientSession:
    """A client for one measurement; cheap to create because the TLS context is shared. Call it on the
    event loop that uses it (an aiohttp session belongs to its loop) and close it (``async with``, or
    ``await client.close()``). ``trust_env``: proxies from the environment (HTTP_PROXY, NO_PROXY) apply."""
    limits = timeout if isinstance(timeout, Timeout) else Timeout(read=timeout, connect=timeout)
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=_tls_context()),
                                 timeout=limits.client_timeout(), trust_env=True)


@dataclass(frozen=True)
class AnswerBounds:
    """What one request waits for and reads: the whole answer within ``deadline_seconds``, at most ``max_bytes``
    of it (beyond, ``too_large``'s exception, given why), and ``timeout``: per-operation timeouts for this
    request instead of the client's (None: the client's)."""

    deadline_seconds: float
    max_bytes: int
    too_large: Callable[[str], Exception]
    timeout: Timeout | None = None


async def fetch(client_: aiohttp.ClientSession, method: str, url: str, bounds: AnswerBounds, *,
                data: Mapping[str, str] | None = None, shown_as: str | None = None) -> tuple[int, bytes]:
    """``(status, body)`` of one request within ``bounds``, the body read while it streams and refused
    (``bounds.too_large``'s exception) past ``bounds.max_bytes``. Raises ``MetricsUnavailable``: ``Timeout`` when
    the whole answer did not arrive within ``bounds.deadline_seconds``, ``Unreachable`` when there was no answer
    (refused, reset, closed early). The status is the caller's to judge. ``shown_as``: what messages call the
    target instead of its URL (an operator-configured endpoint's name: its URL may carry credentials)."""
    deadline_seconds, max_bytes, too_large, timeout = bounds.deadline_seconds, bounds.max_bytes, bounds.too_large, \
        bounds.timeout
    shown = url if shown_as is None else shown_as
    try:
        async with asyncio.timeout(deadline_seconds):
            per_request = {} if timeout is None else {"timeout": timeout.client_timeout()}
            async with client_.request(method, url, data=data, **per_request) as response:
                declared = response.headers.get("content-length")
                if declared and declared.isdigit() and int(declared) > max_bytes:
                    raise too_large(f"the answer is {declared} bytes, over the {max_bytes}-byte cap")
                body = bytearray()
                async for chunk in response.content.iter_any():
                    body += chunk
                    if len(body) > max_bytes:
                        # Stop reading: the parser would refuse it anyway, and memory stays bounded.
                        raise too_large(f"the answer is over the {max_bytes}-byte cap")
                return response.status, bytes(body)
    except TimeoutError:  # the deadline, and aiohttp's own connect and read timeouts (TimeoutError subclasses)
        raise MetricsUnavailable("Timeout", f"{shown}: no complete answer within {deadline_seconds:g} s") from None
    except aiohttp.ClientError as exc:
        # The transport's own words (refused, reset), bounded: no answer arrived, so no body can be in them.
        detail = str(exc)[:200] or "no answer"
        raise MetricsUnavailable("Unreachable", f"{shown}: {type(exc).__name__}: {detail}") from None
