"""The demo's single-stream benchmark of one engine endpoint (the operator's own is `bench/`): tok/s, ms/token, TTFT, acceptance over the run.

Acceptance comes from the engine's own counters scraped before and after the run (deltas, never
lifetime totals), so it covers exactly the measured requests (when nothing else is sending traffic).
When a scrape cannot be trusted (empty body, not the engine's metrics, NaN counters, a restart that
is not a clean reset...), the run still reports its throughput and says "acceptance unavailable:
<reason>" instead of a number or a false "not speculative".
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
import time
from dataclasses import asdict, dataclass, field

import httpx

from drafter_operator import engines
from drafter_operator.engines.metrics import AcceptanceWindow, SpecDecodeCounters, window
from drafter_operator.engines.metrics_verdicts import MetricsUnusable

DEFAULT_PROMPTS = (
    "Explain speculative decoding to an infrastructure engineer in three paragraphs.",
    "Write a Python function that merges overlapping intervals, with tests.",
    "Summarize the trade-offs of tensor parallelism versus pipeline parallelism.",
    "Draft a runbook for an LLM serving outage caused by GPU memory exhaustion.",
    "Compare EAGLE-3 with multi-token prediction heads for a 1T-parameter MoE model.",
)


@dataclass
class PromptResult:
    prompt_index: int
    tokens: int
    seconds: float
    ttft_seconds: float

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


@dataclass
class RunResult:
    engine: str
    prompts: list[PromptResult] = field(default_factory=list)
    acceptance: AcceptanceWindow | None = None
    #: Why there is no acceptance window although one was asked for ("<Reason>: <message>").
    acceptance_unavailable: str | None = None

    @property
    def tokens(self) -> int:
        return sum(p.tokens for p in self.prompts)

    @property
    def seconds(self) -> float:
        return sum(p.seconds for p in self.prompts)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def ms_per_token(self) -> float:
        return 1000 * self.seconds / self.tokens if self.tokens else 0.0

    @property
    def mean_ttft_seconds(self) -> float:
        return sum(p.ttft_seconds for p in self.prompts) / len(self.prompts) if self.prompts else 0.0

    def as_dict(self) -> dict:
        return {"engine": self.engine, "tokens": self.tokens, "seconds": round(self.seconds, 4),
                "tokensPerSecond": round(self.tokens_per_second, 3), "msPerToken": round(self.ms_per_token, 3),
                "meanTtftSeconds": round(self.mean_ttft_seconds, 4),
                "prompts": [{**asdict(p), "tokensPerSecond": round(p.tokens_per_second, 3)} for p in self.prompts],
                "acceptance": self.acceptance.as_dict() if self.acceptance and self.acceptance.has_data else None,
                "acceptanceUnavailable": self.acceptance_unavailable}

    def acceptance_summary(self) -> str:
        """One line for people: the window's figures, or why there are none."""
        if self.acceptance_unavailable:
            return f"acceptance unavailable: {self.acceptance_unavailable}"
        if self.acceptance is None:
            return "not speculative"
        if not self.acceptance.has_data:
            return "acceptance unavailable: no verification steps during the run"
        rate, length = self.acceptance.acceptance_rate, self.acceptance.mean_acceptance_length
        return (f"acceptance rate {'-' if rate is None else f'{rate:.1%}'} ({self.acceptance.rate_source}), "
                f"mean acceptance length {'-' if length is None else f'{length:.3f}'}")


def stream_completion(client: httpx.Client, base_url: str, model: str, prompt: str, max_tokens: int,
                      temperature: float = 0.0) -> tuple[int, float, float]:
    """(completion tokens, seconds, time to first token) of one streamed /v1/completions request."""
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": temperature,
            "stream": True, "stream_options": {"include_usage": True}}
    started = time.perf_counter()
    first = None
    chunks = usage_tokens = 0
    with client.stream("POST", f"{base_url}/v1/completions", json=body) as resp:
        resp.raise_for_status()
        for line in resp.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[len("data: "):])
            if event.get("usage"):
                usage_tokens = event["usage"].get("completion_tokens", 0)
            if event.get("choices") and event["choices"][0].get("text"):
                chunks += 1
                if first is None:
                    first = time.perf_counter() - started
    seconds = time.perf_counter() - started
    return usage_tokens or chunks, seconds, first if first is not None else seconds


def aggregate_tokens_per_second(base_url: str, model: str, streams: int, max_tokens: int,
                                prompt: str = DEFAULT_PROMPTS[0]) -> float:
    """Output tokens per second of ``streams`` requests sent at once, each to completion (one wave).

    A first look at load; the DrafterBenchmark's sweep measures it properly (warm-up, repetitions).
    """
    limits = httpx.Limits(max_connections=streams, max_keepalive_connections=streams)
    with httpx.Client(timeout=120.0, limits=limits) as client, ThreadPoolExecutor(max_workers=streams) as pool:
        started = time.perf_counter()
        results = list(pool.map(lambda _: stream_completion(client, base_url, model, prompt, max_tokens),
                                range(streams)))
        seconds = time.perf_counter() - started
    return sum(tokens for tokens, _, _ in results) / seconds if seconds > 0 else 0.0


def scrape(client: httpx.Client, base_url: str, engine: str, model: str | None = None) -> SpecDecodeCounters:
    """One scrape of the engine's counters; raises MetricsUnusable when the body cannot be trusted."""
    module = engines.engine(engine)
    resp = client.get(f"{base_url}{module.METRICS_PATH}")
    resp.raise_for_status()
    return module.parse_spec_decode_metrics(resp.content, model)


def scrape_or_verdict(client: httpx.Client, base_url: str, engine: str,
                      model: str | None) -> SpecDecodeCounters | MetricsUnusable:
    """A scrape, or the verdict on it: the run goes on either way and reports why acceptance is missing."""
    try:
        return scrape(client, base_url, engine, model)
    except MetricsUnusable as exc:
        return exc


def measure_acceptance(result: RunResult, before: SpecDecodeCounters | MetricsUnusable,
                       after: SpecDecodeCounters | MetricsUnusable, num_speculative_tokens: int | None) -> None:
    """Fill ``result.acceptance`` from the two scrapes, or ``acceptance_unavailable`` with the verdict."""
    for counters in (before, after):
        if isinstance(counters, MetricsUnusable):
            result.acceptance_unavailable = str(counters.verdict)
            return
    if not after.speculative:
        return
    try:
        result.acceptance = window(before, after, num_speculative_tokens)
    except MetricsUnusable as exc:  # e.g. a restart during the run that is not a clean reset
        result.acceptance_unavailable = str(exc.verdict)


def run(base_url: str, engine: str, model: str, prompts: list[str] | tuple[str, ...] = DEFAULT_PROMPTS,
        max_tokens: int = 512, num_speculative_tokens: int | None = None, timeout: float = 600) -> RunResult:
    """Send the prompts one at a time (concurrency 1) and measure each; acceptance over the whole run."""
    result = RunResult(engine=engine)
    with httpx.Client(timeout=timeout) as client:
        before = scrape_or_verdict(client, base_url, engine, model)
        for index, prompt in enumerate(prompts):
            tokens, seconds, ttft = stream_completion(client, base_url, model, prompt, max_tokens)
            result.prompts.append(PromptResult(index, tokens, seconds, ttft))
        after = scrape_or_verdict(client, base_url, engine, model)
    measure_acceptance(result, before, after, num_speculative_tokens)
    return result
