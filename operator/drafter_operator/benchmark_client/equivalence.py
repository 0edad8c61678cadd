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
speculation. So after a near-tie the check goes on from the baseline's prefix: both sides get the prompt's token
ids (as the engine rendered them: ``prompt_token_ids``) followed by the baseline's tokens up to and including
the divergent one, as a completions prompt, and generate the rest (at most ``RESUMES`` times per prompt). A
near-tie early in a prompt then no longer hides a fault later in it. A defect ends the prompt. The requests go
one at a time, after the throughput levels: they never overlap a measured wave.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import aiohttp

from drafter_operator.api.benchmark import Divergence, EquivalenceResult
from drafter_operator.benchmark_client.stream import CHAT_PATH, COMPLETIONS_PATH, BenchError, Endpoint

#: How many times per prompt the check goes on past a near-tie from the baseline's prefix.
RESUMES = 3

@dataclass(frozen=True)
class Generation:
    """What one side generated for one prompt: the token ids, and per token its top logprobs (best first)."""

    token_ids: tuple[int, ...]
    top_logprobs: tuple[tuple[float, ...], ...]
    #: The prompt as the engine tokenized it (chat template applied); None when it did not say.
    prompt_ids: tuple[int, ...] | None = None

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
    body: dict = endpoint.named({"model": endpoint.model, "max_tokens": max_tokens, "temperature": 0,
                                 "ignore_eos": True, "stream": False, "return_token_ids": True})
    if endpoint.chat:
        body.update(messages=[{"role": "user", "content": prompt}], logprobs=True, top_logprobs=2)
        return CHAT_PATH, body
    body.update(prompt=prompt, logprobs=2)
    return COMPLETIONS_PATH, body


def resumed_request(endpoint: Endpoint, prompt_ids: Sequence[int], max_tokens: int) -> tuple[str, dict]:
    """(path, body) going on from a forced prefix: token ids as a completions prompt (no template applied again)."""
    return COMPLETIONS_PATH, endpoint.named({"model": endpoint.model, "max_tokens": max_tokens, "temperature": 0,
                                             "ignore_eos": True, "stream": False, "return_token_ids": True,
                                             "prompt": list(prompt_ids), "logprobs": 2})


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
        # vLLM: top level (chat) or in the choice (completions); SGLang: in the choice.
        prompt = choice.get("prompt_token_ids") if choice.get("prompt_token_ids") is not None else \
            body.get("prompt_token_ids")  # type: ignore[union-attr]
    except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
        raise BenchError(f"{where}: not a completion response ({type(exc).__name__}: {exc})") from None
    prompt_ids = tuple(prompt) if isinstance(prompt, list) and all(isinstance(i, int) for i in prompt) else None
    return Generation(tuple(ids), tuple(top), prompt_ids)


def compare(prompt: int, baseline: Generation, served: Generation, min_margin: float,
            offset: int = 0) -> Divergence | None:
    """The first divergence from the baseline, or None when the token ids are identical; ``offset``: generated
    tokens before these (a resumed comparison), added to the position reported."""
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
    return Divergence(prompt=prompt, position=offset + position, expected=expected, got=got,
                      margin=None if margin is None or math.isinf(margin) else margin,
                      defect=margin is None or margin >= min_margin)


def equivalence_result(per_prompt: Sequence[Sequence[Divergence]], tokens: int, min_margin: float,
                       deterministic: bool, seconds: float) -> EquivalenceResult:
    """The check's summary from each prompt's divergences (none: identical), in prompt order."""
    found = sorted((d for divergences in per_prompt for d in divergences),
                   key=lambda d: (not d.defect, d.prompt, d.position))
    prompts = len(per_prompt)
    identical = sum(not divergences for divergences in per_prompt)
    defects = sum(any(d.defect for d in divergences) for divergences in per_prompt)
    return EquivalenceResult(
        prompts=prompts, identical=identical, identical_fraction=round(identical / prompts, 4) if prompts else 0.0,
        defects=defects, near_ties=sum(not d.defect for d in found), tokens_compared=tokens, min_margin=min_margin,
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


async def _generate(session: aiohttp.ClientSession, endpoint: Endpoint, index: int,
                    path_and_body: tuple[str, dict]) -> Generation:
    path, body = path_and_body
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


@dataclass(frozen=True)
class Sides:
    """The two endpoints an output check compares: the ``target`` served, and the ``baseline`` it must match."""

    target: Endpoint
    baseline: Endpoint


async def check(session: aiohttp.ClientSession, sides: Sides, prompts: Sequence[str], max_tokens: int,
                min_margin: float, deterministic: bool) -> EquivalenceResult:
    """Compare every prompt of ``prompts`` on both sides, one request at a time."""
    margin = 0.0 if deterministic else min_margin
    per_prompt: list[list[Divergence]] = []
    tokens = 0
    started = time.perf_counter()
    for index, prompt in enumerate(prompts):
        found, compared = await _compare_prompt(session, sides, index, prompt, max_tokens, margin)
        per_prompt.append(found)
        tokens += compared
    return equivalence_result(per_prompt, tokens, margin, deterministic, time.perf_counter() - started)


async def _compare_prompt(session: aiohttp.ClientSession, sides: Sides, index: int, prompt: str, max_tokens: int,
                          min_margin: float) -> tuple[list[Divergence], int]:
    """One prompt's divergences (a defect ends it; each near-tie is gone past from the baseline's prefix, at most
    RESUMES times) and the tokens compared."""
    target, baseline = sides.target, sides.baseline
    reference = await _generate(session, baseline, index, request(baseline, prompt, max_tokens))
    served = await _generate(session, target, index, request(target, prompt, max_tokens))
    found: list[Divergence] = []
    offset = tokens = 0
    for resumed in range(RESUMES + 1):
        divergence = compare(index, reference, served, min_margin, offset)
        # The tokens examined: up to the end, or up to and including the divergent one.
        tokens += len(reference.token_ids) if divergence is None else divergence.position - offset + 1
        if divergence is None:
            break
        found.append(divergence)
        cut = divergence.position - offset + 1  # the baseline's tokens kept, the divergent one included
        if divergence.defect or resumed == RESUMES or reference.prompt_ids is None or cut >= len(reference.token_ids):
            break
        prefix = (*reference.prompt_ids, *reference.token_ids[:cut])
        remaining = len(reference.token_ids) - cut
        offset += cut
        reference = await _generate(session, baseline, index, resumed_request(baseline, prefix, remaining))
        served = await _generate(session, target, index, resumed_request(target, prefix, remaining))
    return found, tokens
