"""One bounded HTTP fetch for both acceptance sources: a deadline for the whole answer, a size cap while
it streams, and failures turned into ``MetricsUnavailable`` with a one-word reason.

httpx's timeouts are per operation (connect, each read): a server that sends a byte every few seconds
never trips them, so a sick engine or Prometheus could hold a measurement for as long as it liked.
The deadline here covers everything from connecting to the last byte.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
from collections.abc import Callable, Mapping

import httpx

from drafter_operator.monitoring.acceptance import MetricsUnavailable


@functools.cache
def _tls_context() -> ssl.SSLContext:
    # httpx builds and loads a fresh TLS context for every client it creates (about 30 ms of CPU on this
    # machine, on the event loop that runs every serving's watch): all clients share this one.
    return ssl.create_default_context()


def client(timeout: httpx.Timeout | float) -> httpx.AsyncClient:
    """A client for one measurement; cheap to create because the TLS context is shared."""
    return httpx.AsyncClient(timeout=timeout, verify=_tls_context())


async def fetch(client_: httpx.AsyncClient, method: str, url: str, *, deadline_seconds: float, max_bytes: int,
                too_large: Callable[[str], Exception], data: Mapping[str, str] | None = None,
                timeout: httpx.Timeout | None = None, shown_as: str | None = None) -> tuple[int, bytes]:
    """``(status, body)`` of one request, the body read while it streams and refused (``too_large``'s
    exception) past ``max_bytes``. Raises ``MetricsUnavailable``: ``Timeout`` when the whole answer did
    not arrive within ``deadline_seconds``, ``Unreachable`` when there was no answer (refused, reset,
    closed early). The status is the caller's to judge. ``timeout``: per-operation timeouts for this
    request instead of the client's. ``shown_as``: what messages call the target instead of its URL (an
    operator-configured endpoint's name: its URL may carry credentials)."""
    shown = url if shown_as is None else shown_as
    try:
        async with asyncio.timeout(deadline_seconds):
            per_request = {} if timeout is None else {"timeout": timeout}
            async with client_.stream(method, url, data=data, **per_request) as response:
                declared = response.headers.get("content-length")
                if declared and declared.isdigit() and int(declared) > max_bytes:
                    raise too_large(f"the answer is {declared} bytes, over the {max_bytes}-byte cap")
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > max_bytes:
                        # Stop reading: the parser would refuse it anyway, and memory stays bounded.
                        raise too_large(f"the answer is over the {max_bytes}-byte cap")
                return response.status_code, bytes(body)
    except (TimeoutError, httpx.TimeoutException):
        raise MetricsUnavailable("Timeout", f"{shown}: no complete answer within {deadline_seconds:g} s") from None
    except httpx.HTTPError as exc:
        # The transport's own words (refused, reset), bounded: no answer arrived, so no body can be in them.
        detail = str(exc)[:200] or "no answer"
        raise MetricsUnavailable("Unreachable", f"{shown}: {type(exc).__name__}: {detail}") from None
