"""One streamed request to an OpenAI-compatible endpoint, timed: tokens, seconds, time to first token.

Chat (``/v1/chat/completions``) by default: the engine applies the model's chat template, as for real
traffic; a raw prompt without it makes the target continue text in a way real users never see, and
drafters are trained on chat-formatted data, so acceptance would not be the production figure.
``ignore_eos`` makes every request generate exactly ``max_tokens``, so runs and baselines compare the
same amount of work. Output tokens come from the stream's final ``usage``: with speculation one chunk
can carry several tokens, so counting chunks would undercount exactly the tokens a drafter adds.

Every request goes through one ``aiohttp`` session (:func:`stream_session`), not ``httpx``: a wave sends N
requests at once on the N connections the previous wave kept alive, and httpcore 1.0's pool gives the
same idle connection to every request queued in one pass (it stays idle until the first of them sends
on it); the others fail with ``ConnectionNotAvailable`` and wait for another pass, and every pass polls
each idle socket (encode/httpcore#822). At 64 streams against the emulator the requests of such a wave
left over 0.6 to 0.8 s instead of 0.05 s, the engine took 284 to 303 steps for a wave of 256 tokens,
and the level read 3 to 8 % below the model of its schedule (docs/performance.md, "Benchmark clients
against the emulator"). aiohttp's connector gives each waiting request a connection of its own (256 to
257 steps a wave) at about a third of the CPU per token. The one-off requests (``/v1/models``,
``/metrics``) use the same session: aiohttp is the runtime's one HTTP library (docs/performance.md,
"One HTTP client").
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass

import aiohttp
from aiohttp.http_exceptions import HttpProcessingError

from drafter_operator.benchmark_client.result import Stream
from drafter_operator.constants import BENCHMARK_REQUEST_ID_PREFIX

CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"


class BenchError(RuntimeError):
    """A failure that ends the run; the message names what failed (endpoint, prompt, level)."""


@dataclass(frozen=True)
class Endpoint:
    """Where requests go and what they ask for."""

    name: str  # "target" or "baseline", for error messages
    base_url: str
    model: str
    max_tokens: int
    temperature: float = 0.0
    chat: bool = True
    #: The body field the engine names a request by (its CLIENT_REQUEST_ID_FIELD); None: the engine's own id.
    request_id_field: str | None = None

    def named(self, body: dict) -> dict:
        """``body`` with a benchmark's request id, so the serving's capture leaves the request out."""
        if self.request_id_field:
            body[self.request_id_field] = f"{BENCHMARK_REQUEST_ID_PREFIX}{uuid.uuid4().hex}"
        return body


def request(endpoint: Endpoint, prompt: str) -> tuple[str, dict]:
    """(path, JSON body) of one streamed request."""
    body: dict = endpoint.named({"model": endpoint.model, "max_tokens": endpoint.max_tokens,
                                 "temperature": endpoint.temperature, "ignore_eos": True, "stream": True,
                                 "stream_options": {"include_usage": True}})
    if endpoint.chat:
        body["messages"] = [{"role": "user", "content": prompt}]
        return CHAT_PATH, body
    body["prompt"] = prompt
    return COMPLETIONS_PATH, body


def event(line: bytes) -> dict | None:
    """The JSON of one server-sent-event line (bytes, as read); None for keep-alives, comments and ``[DONE]``."""
    if not line.startswith(b"data:"):
        return None
    payload = line[len(b"data:"):].strip()
    if not payload or payload == b"[DONE]":
        return None
    return json.loads(payload)


def has_text(chunk: dict) -> bool:
    """Whether a chunk carries generated text (a chat stream opens with an empty role-only delta)."""
    for choice in chunk.get("choices") or ():
        if choice.get("text") or (choice.get("delta") or {}).get("content"):
            return True
    return False


async def first_model(session: aiohttp.ClientSession, base_url: str) -> str:
    """The first id of GET /v1/models (what ``--model`` defaults to, as spec.model does)."""
    url = f"{base_url}/v1/models"
    try:
        async with session.get(url) as resp:
            resp.raise_for_status()
            # content_type=None: read the body as JSON whatever Content-Type the server names.
            return (await resp.json(content_type=None))["data"][0]["id"]
    except (aiohttp.ClientError, TimeoutError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise BenchError(f"GET {url}: cannot read a model id ({type(exc).__name__}: {exc}); pass --model") from None


def stream_session(max_streams: int, timeout: float) -> aiohttp.ClientSession:
    """The session every streamed request of a run goes through (see the module's docstring for why aiohttp).

    One wave is in flight at a time, target or baseline; the connector keeps up to twice the widest
    wave so that both keep their connections alive between waves. ``timeout`` bounds each wait
    (connecting, and every read), not the whole stream: a long
    generation is not an error. ``trust_env``: proxies from the environment (HTTP_PROXY, NO_PROXY) apply.
    """
    connector = aiohttp.TCPConnector(limit=2 * max_streams)
    timeouts = aiohttp.ClientTimeout(total=None, connect=timeout, sock_read=timeout)
    return aiohttp.ClientSession(connector=connector, timeout=timeouts, trust_env=True)


async def stream_one(session: aiohttp.ClientSession, endpoint: Endpoint, prompt: str, index: int,
                     concurrency: int = 1) -> Stream:
    """Send one prompt and time its stream; raises :class:`BenchError` naming the request on failure."""
    path, body = request(endpoint, prompt)
    url = endpoint.base_url + path
    where = f"{endpoint.name} POST {url} (prompt {index}, concurrency {concurrency})"
    usage: dict | None = None
    ttft = None
    started = time.perf_counter()
    try:
        async with session.post(url, json=body) as resp:
            if resp.status != 200:
                detail = (await resp.read()).decode("utf-8", "replace")[:300]
                raise BenchError(f"{where}: HTTP {resp.status}: {detail}")
            async for line in resp.content:  # one SSE line at a time
                chunk = event(line)
                if chunk is None:
                    continue
                if ttft is None and has_text(chunk):
                    ttft = time.perf_counter() - started
                if chunk.get("usage"):
                    usage = chunk["usage"]
    except (aiohttp.ClientError, HttpProcessingError) as exc:  # the latter: a line over the read buffer
        raise BenchError(f"{where}: {type(exc).__name__}: {exc}") from None
    except asyncio.TimeoutError:
        raise BenchError(f"{where}: no answer within the timeout") from None
    except json.JSONDecodeError as exc:
        raise BenchError(f"{where}: a stream event is not JSON: {exc}") from None
    seconds = time.perf_counter() - started
    if not usage or not isinstance(usage.get("completion_tokens"), int):
        raise BenchError(f"{where}: the stream ended without usage.completion_tokens "
                         "(the endpoint ignored stream_options.include_usage)")
    prompt_tokens = usage.get("prompt_tokens")
    return Stream(index=index, completion_tokens=usage["completion_tokens"], seconds=seconds, ttft_seconds=ttft,
                  prompt_tokens=prompt_tokens if isinstance(prompt_tokens, int) else None, concurrency=concurrency)
