"""Speculation must not change the output: the served tokens against the no-speculation baseline's, greedily.

Each prompt is sent once to each side at temperature 0, without streaming, asking for the generated token
ids (``return_token_ids``: vLLM answers ``choices[0].token_ids``, SGLang's chat ``response_token_ids``) and
the top-2 logprobs of every generated token. The first position where the ids differ is the prompt's
divergence. Real engines are not bit-exact between a verify forward (k + 1 tokens at once) and a decode
step, so a token the baseline chose by a hair may flip without anything being wrong: a divergence is a
*defect* only where the baseline's own top-1 minus top-2 logprob there is at least ``min_margin`` nats.
Closer calls are *near-ties*. In the engines' deterministic modes (``engines.deterministic_mode``) the
two forwards agree, so the margin is 0 and every divergence is a defect.

After a divergence the two continuations condition on different prefixes and say nothing more about
speculation, so each prompt contributes one divergence at most. The requests go one at a time, after the
throughput levels: they never overlap a measured wave.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import aiohttp

from drafter_operator.api.benchmark import Divergence, EquivalenceResult
from drafter_operator.benchmark_client.stream import CHAT_PATH, COMPLETIONS_PATH, BenchError, Endpoint

@dataclass(frozen=True)
class Generation:
    """What one side generated for one prompt: the token ids, and per token its top logprobs (best first)."""

    token_ids: tuple[int, ...]
    top_logprobs: tuple[tuple[float, ...], ...]

    def margin(self, position: int) -> float | None:
        """Top-1 minus top-2 logprob at ``position``; inf when the engine gave one candidate only; None
        when it gave no logprobs there."""
        if position >= len(self.top_logprobs) or not self.top_logprobs[position]:
            return None
        best = self.top_logprobs[position]
        return best[0] - best[1] if len(best) > 1 else math.inf


def request(endpoint: Endpoint, prompt: str, max_tokens: int) -> tuple[str, dict]:
    """(path, JSON body) of one greedy, non-streamed request with token ids and top-2 logprobs.

    SGLang refuses ``return_token_ids`` with streaming, so neither side streams."""
    body: dict = {"model": endpoint.model, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
                  "stream": False, "return_token_ids": True}
    if endpoint.chat:
        body.update(messages=[{"role": "user", "content": prompt}], logprobs=True, top_logprobs=2)
        return CHAT_PATH, body
    body.update(prompt=prompt, logprobs=2)
    return COMPLETIONS_PATH, body


def _chat_top(logprobs: dict) -> list[tuple[float, ...]]:
    return [tuple(sorted((float(t["logprob"]) for t in entry.get("top_logprobs") or ()), reverse=True))
            for entry in logprobs.get("content") or ()]


def _completion_top(logprobs: dict) -> list[tuple[float, ...]]:
    return [tuple(sorted((float(v) for v in (entry or {}).values()), reverse=True))
            for entry in logprobs.get("top_logprobs") or ()]


def parse_generation(body: object, where: str) -> Generation:
    """The generation in one response body (chat or completions, vLLM's or SGLang's field names)."""
    try:
        choice = body["choices"][0]  # type: ignore[index]
        ids = choice.get("token_ids") if choice.get("token_ids") is not None else choice.get("response_token_ids")
        if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            raise BenchError(f"{where}: the response has no generated token ids (choices[0].token_ids or "
                             "response_token_ids): the engine ignored return_token_ids; vLLM >= 0.10.2 and SGLang "
                             ">= 0.5 return them")
        logprobs = choice.get("logprobs")
        if not isinstance(logprobs, dict):
            raise BenchError(f"{where}: the response has no logprobs: the engine refused or ignored top-2 "
                             "logprobs, which the output check needs to tell a near-tie from a defect")
        top = _chat_top(logprobs) if "content" in logprobs else _completion_top(logprobs)
    except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
        raise BenchError(f"{where}: not a completion response ({type(exc).__name__}: {exc})") from None
    return Generation(tuple(ids), tuple(top))


def compare(prompt: int, baseline: Generation, served: Generation, min_margin: float) -> Divergence | None:
    """The prompt's first divergence from the baseline, or None when the token ids are identical."""
    common = min(len(baseline.token_ids), len(served.token_ids))
    position = next((i for i in range(common) if baseline.token_ids[i] != served.token_ids[i]), None)
    if position is None:
        if len(baseline.token_ids) == len(served.token_ids):
            return None
        position = common  # one side stopped early: nothing to weigh, so it is a defect
    margin = baseline.margin(position)
    # Judged as shown: to 4 decimals, so float noise in a difference of two logprobs decides nothing.
    margin = None if margin is None else margin if math.isinf(margin) else round(margin, 4)
    expected = baseline.token_ids[position] if position < len(baseline.token_ids) else None
    got = served.token_ids[position] if position < len(served.token_ids) else None
    return Divergence(prompt=prompt, position=position, expected=expected, got=got,
                      margin=None if margin is None or math.isinf(margin) else margin,
                      defect=margin is None or margin >= min_margin)


def compared_tokens(baseline: Generation, divergence: Divergence | None) -> int:
    return len(baseline.token_ids) if divergence is None else divergence.position


def equivalence_result(divergences: Sequence[Divergence | None], tokens: int, min_margin: float,
                       deterministic: bool, seconds: float) -> EquivalenceResult:
    """The check's summary from each prompt's divergence (None: identical), in prompt order."""
    found = sorted((d for d in divergences if d is not None), key=lambda d: (not d.defect, d.prompt))
    prompts = len(divergences)
    defects = sum(d.defect for d in found)
    return EquivalenceResult(
        prompts=prompts, identical=prompts - len(found), identical_fraction=round((prompts - len(found)) / prompts, 4),
        defects=defects, near_ties=len(found) - defects, tokens_compared=tokens, min_margin=min_margin,
        deterministic=deterministic, seconds_per_prompt=round(seconds / prompts, 4) if prompts else None,
        divergences=found or None)


def first_defect(result: EquivalenceResult | None) -> Divergence | None:
    return next((d for d in result.divergences or () if d.defect), None) if result is not None else None


def defect_message(result: EquivalenceResult) -> str:
    """One line naming the first defect: the prompt, the token, both ids and the baseline's margin."""
    first = first_defect(result)
    if first is None:
        return ""
    margin = "unknown" if first.margin is None else f"{first.margin:.2f}"
    return (f"output differs from the baseline in {result.defects} of {result.prompts} prompts: prompt {first.prompt} "
            f"at generated token {first.position} (baseline token id {first.expected}, served {first.got}, baseline "
            f"top-2 margin {margin} nats >= {result.min_margin:g}); speculation changed the output "
            "(see the output-divergence runbook)")


async def _generate(session: aiohttp.ClientSession, endpoint: Endpoint, prompt: str, index: int,
                    max_tokens: int) -> Generation:
    path, body = request(endpoint, prompt, max_tokens)
    url = endpoint.base_url + path
    where = f"output check: {endpoint.name} POST {url} (prompt {index})"
    try:
        async with session.post(url, json=body) as resp:
            if resp.status != 200:
                detail = (await resp.read()).decode("utf-8", "replace")[:300]
                raise BenchError(f"{where}: HTTP {resp.status}: {detail}")
            answer = await resp.json(content_type=None)
    except aiohttp.ClientError as exc:
        raise BenchError(f"{where}: {type(exc).__name__}: {exc}") from None
    except TimeoutError:
        raise BenchError(f"{where}: no answer within the timeout") from None
    except ValueError as exc:
        raise BenchError(f"{where}: the answer is not JSON: {exc}") from None
    return parse_generation(answer, where)


async def check(session: aiohttp.ClientSession, target: Endpoint, baseline: Endpoint, prompts: Sequence[str],
                max_tokens: int, min_margin: float, deterministic: bool) -> EquivalenceResult:
    """Compare every prompt of ``prompts`` on both sides, one request at a time."""
    margin = 0.0 if deterministic else min_margin
    divergences: list[Divergence | None] = []
    tokens = 0
    started = time.perf_counter()
    for index, prompt in enumerate(prompts):
        reference = await _generate(session, baseline, prompt, index, max_tokens)
        served = await _generate(session, target, prompt, index, max_tokens)
        divergence = compare(index, reference, served, margin)
        divergences.append(divergence)
        tokens += compared_tokens(reference, divergence)
    return equivalence_result(divergences, tokens, margin, deterministic, time.perf_counter() - started)
