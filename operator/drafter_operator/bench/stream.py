"""One streamed request to an OpenAI-compatible endpoint, timed: tokens, seconds, time to first token.

Chat (``/v1/chat/completions``) by default: the engine applies the model's chat template, as for real
traffic; a raw prompt without it makes the target continue text in a way real users never see, and
drafters are trained on chat-formatted data, so acceptance would not be the production figure.
``ignore_eos`` makes every request generate exactly ``max_tokens``, so runs and baselines compare the
same amount of work. Output tokens come from the stream's final ``usage``: with speculation one chunk
can carry several tokens, so counting chunks would undercount exactly the tokens a drafter adds.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import httpx

from drafter_operator.bench.result import Stream

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


def request(endpoint: Endpoint, prompt: str) -> tuple[str, dict]:
    """(path, JSON body) of one streamed request."""
    body: dict = {"model": endpoint.model, "max_tokens": endpoint.max_tokens, "temperature": endpoint.temperature,
                  "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    if endpoint.chat:
        body["messages"] = [{"role": "user", "content": prompt}]
        return CHAT_PATH, body
    body["prompt"] = prompt
    return COMPLETIONS_PATH, body


def event(line: str) -> dict | None:
    """The JSON of one server-sent-event line; None for keep-alives, comments and ``[DONE]``."""
    if not line.startswith("data:"):
        return None
    payload = line[len("data:"):].strip()
    if not payload or payload == "[DONE]":
        return None
    return json.loads(payload)


def has_text(chunk: dict) -> bool:
    """Whether a chunk carries generated text (a chat stream opens with an empty role-only delta)."""
    for choice in chunk.get("choices") or ():
        if choice.get("text") or (choice.get("delta") or {}).get("content"):
            return True
    return False


async def first_model(client: httpx.AsyncClient, base_url: str) -> str:
    """The first id of GET /v1/models (what ``--model`` defaults to, as spec.model does)."""
    url = f"{base_url}/v1/models"
    try:
        resp = await client.get(url)
        resp.raise_for_status()
        return resp.json()["data"][0]["id"]
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise BenchError(f"GET {url}: cannot read a model id ({type(exc).__name__}: {exc}); pass --model") from None


async def stream_one(client: httpx.AsyncClient, endpoint: Endpoint, prompt: str, index: int,
                     concurrency: int = 1) -> Stream:
    """Send one prompt and time its stream; raises :class:`BenchError` naming the request on failure."""
    path, body = request(endpoint, prompt)
    url = endpoint.base_url + path
    where = f"{endpoint.name} POST {url} (prompt {index}, concurrency {concurrency})"
    usage: dict | None = None
    ttft = None
    started = time.perf_counter()
    try:
        async with client.stream("POST", url, json=body) as resp:
            if resp.status_code != 200:
                detail = (await resp.aread()).decode("utf-8", "replace")[:300]
                raise BenchError(f"{where}: HTTP {resp.status_code}: {detail}")
            async for line in resp.aiter_lines():
                chunk = event(line)
                if chunk is None:
                    continue
                if ttft is None and has_text(chunk):
                    ttft = time.perf_counter() - started
                if chunk.get("usage"):
                    usage = chunk["usage"]
    except httpx.HTTPError as exc:
        raise BenchError(f"{where}: {type(exc).__name__}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise BenchError(f"{where}: a stream event is not JSON: {exc}") from None
    seconds = time.perf_counter() - started
    if not usage or not isinstance(usage.get("completion_tokens"), int):
        raise BenchError(f"{where}: the stream ended without usage.completion_tokens "
                         "(the endpoint ignored stream_options.include_usage)")
    prompt_tokens = usage.get("prompt_tokens")
    return Stream(index=index, completion_tokens=usage["completion_tokens"], seconds=seconds, ttft_seconds=ttft,
                  prompt_tokens=prompt_tokens if isinstance(prompt_tokens, int) else None, concurrency=concurrency)
