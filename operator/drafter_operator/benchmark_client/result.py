"""From measured streams to a :class:`~drafter_operator.api.benchmark.BenchmarkResult` (pure: no I/O).

The figures follow the seed's table: total tokens, total seconds, tok/s = tokens / seconds, ms/token =
1000 x seconds / tokens, baseline tok/s and speedup = tok/s / baseline. With several concurrency levels
(a load sweep) every level gets its own figures; the top-level ones are the first level's, because
that is the setting a DrafterBenchmark asks for (it has a single ``spec.concurrency``) and what
``spec.gate`` is checked against.

The controller reads the result from the Job's termination message, which Kubernetes cuts at 4096
bytes: :func:`termination_message` drops detail (per-prompt rows first, then per-level detail) until
it fits, and says so with ``"truncated": true``, rather than letting a cut produce invalid JSON.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from drafter_operator.api.benchmark import BenchmarkResult, CrossoverBracket, LevelResult, PromptResult
from drafter_operator.engines import crossover
from drafter_operator.engines.metrics import AcceptanceWindow

#: Kubernetes keeps at most this many bytes of a container's termination message.
TERMINATION_MESSAGE_LIMIT = 4096
#: acceptanceUnavailable carries a verdict or an HTTP error; a body fragment in it could be long.
MAX_REASON_CHARS = 512


@dataclass(frozen=True)
class Stream:
    """One streamed request as measured by the client."""

    #: Position of the prompt in the prompt set.
    index: int
    #: Output tokens, from the response's ``usage`` (a chunk may carry several tokens when speculating).
    completion_tokens: int
    #: Wall time from sending the request to the end of the stream.
    seconds: float
    #: Time to the first chunk with generated text; None when no text came.
    ttft_seconds: float | None = None
    prompt_tokens: int | None = None
    #: Streams in flight with this one (the level it belongs to).
    concurrency: int = 1

    @property
    def tokens_per_second(self) -> float:
        return tokens_per_second(self.completion_tokens, self.seconds)

    @property
    def itl_seconds(self) -> float | None:
        """Mean time between output tokens after the first: (seconds - TTFT) / (tokens - 1)."""
        if self.ttft_seconds is None or self.completion_tokens < 2:
            return None
        return max(self.seconds - self.ttft_seconds, 0.0) / (self.completion_tokens - 1)


@dataclass(frozen=True)
class Level:
    """One concurrency level: the target's streams and the time it was busy with them."""

    concurrency: int
    streams: tuple[Stream, ...]
    #: Sum of the waves' wall times on the target (each wave: ``concurrency`` streams sent at once).
    #: Not the level's elapsed time: with an interleaved baseline, the baseline's waves run in between.
    seconds: float
    #: The baseline's throughput at this level: measured (interleaved) or a recorded figure; None without.
    baseline_tokens_per_second: float | None = None

    @property
    def tokens(self) -> int:
        return sum(s.completion_tokens for s in self.streams)

    @property
    def tokens_per_second(self) -> float:
        return tokens_per_second(self.tokens, self.seconds)

    @property
    def speedup(self) -> float | None:
        return speedup(self.tokens_per_second, self.baseline_tokens_per_second)


# --------------------------------------------------------------------------------------------------
# The seed's arithmetic


def tokens_per_second(tokens: float, seconds: float) -> float:
    return tokens / seconds if seconds > 0 else 0.0


def ms_per_token(tokens: float, seconds: float) -> float | None:
    return 1000.0 * seconds / tokens if tokens > 0 else None


def speedup(tps: float, baseline_tps: float | None) -> float | None:
    """tok/s over the baseline's; None without a (positive) baseline."""
    return tps / baseline_tps if baseline_tps else None


def mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def crossover_concurrency(levels: Sequence[Level] | Sequence[LevelResult]) -> int | None:
    """The lowest concurrency whose speedup is below 1.0 (speculation stops paying); None if none is.

    Levels without a speedup (no baseline) never count. Sorted by concurrency, so a sweep given as
    ``4,1,2`` answers the same as ``1,2,4``.
    """
    for level in sorted(levels, key=lambda lv: lv.concurrency):
        if level.speedup is not None and level.speedup < 1.0:
            return level.concurrency
    return None


def crossover_bracket(levels: Sequence[Level] | Sequence[LevelResult]) -> CrossoverBracket | None:
    """The break-even bracket of the levels (``crossover.bracket``); None when no speedup is below 1.0."""
    found = crossover.bracket((level.concurrency, level.speedup) for level in levels)
    if found is None:
        return None
    return CrossoverBracket(above_concurrency=found.above, below_concurrency=found.below,
                            estimate=_r(found.estimate, 2), within_tolerance=found.narrow)


# --------------------------------------------------------------------------------------------------
# The API objects. Rounded: a status shows numbers, and 4-6 significant digits is far below what a
# benchmark run can tell apart, while full doubles would eat the termination message's 4 KiB.


def _r(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def record_acceptance(result, window: AcceptanceWindow | None):
    """Write a counter window's acceptance into a result object (the run's, a length bucket's, a category's), as
    rounded as the run's own figures, in the fields that object has; nothing without drafts."""
    if window is None or not window.has_data:
        return result
    figures = {"acceptance_rate": _r(window.acceptance_rate, 4),
               "acceptance_length": _r(window.mean_acceptance_length, 4),
               "draft_tokens": None if window.draft_tokens is None else int(round(window.draft_tokens)),
               "per_position_acceptance": [round(p, 4) for p in window.per_position] or None}
    for name, value in figures.items():
        if name in type(result).model_fields:
            setattr(result, name, value)
    return result


def prompt_result(stream: Stream) -> PromptResult:
    return PromptResult(index=stream.index, prompt_tokens=stream.prompt_tokens,
                        completion_tokens=stream.completion_tokens, seconds=_r(stream.seconds, 4),
                        tokens_per_second=_r(stream.tokens_per_second, 3), ttft_seconds=_r(stream.ttft_seconds, 4),
                        itl_seconds=_r(stream.itl_seconds, 6), concurrency=stream.concurrency)


def level_result(level: Level) -> LevelResult:
    return LevelResult(concurrency=level.concurrency, total_tokens=level.tokens, total_seconds=_r(level.seconds, 4),
                       tokens_per_second=_r(level.tokens_per_second, 3),
                       ttft_seconds=_r(mean([s.ttft_seconds for s in level.streams]), 4),
                       itl_seconds=_r(mean([s.itl_seconds for s in level.streams]), 6),
                       baseline_tokens_per_second=_r(level.baseline_tokens_per_second, 3),
                       speedup=_r(level.speedup, 4))


def clip_reason(reason: str | None) -> str | None:
    if reason is None or len(reason) <= MAX_REASON_CHARS:
        return reason
    return reason[:MAX_REASON_CHARS - 3] + "..."


def benchmark_result(levels: Sequence[Level], acceptance: AcceptanceWindow | None = None,
                     acceptance_unavailable: str | None = None) -> BenchmarkResult:
    """The result of a run: the first level's figures at the top, every level in ``levels``.

    ``acceptance`` is the window over the whole run (None: not speculative, or unavailable);
    ``acceptance_unavailable`` says why there is none although the engine was scraped.
    """
    if not levels:
        raise ValueError("a benchmark result needs at least one level")
    first = levels[0]
    result = BenchmarkResult(
        prompts=[prompt_result(s) for level in levels for s in level.streams],
        total_tokens=first.tokens,
        total_seconds=_r(first.seconds, 4),
        tokens_per_second=_r(first.tokens_per_second, 3),
        ms_per_token=_r(ms_per_token(first.tokens, first.seconds), 3),
        ttft_seconds=_r(mean([s.ttft_seconds for s in first.streams]), 4),
        itl_seconds=_r(mean([s.itl_seconds for s in first.streams]), 6),
        concurrency=first.concurrency,
        baseline_tokens_per_second=_r(first.baseline_tokens_per_second, 3),
        speedup=_r(first.speedup, 4),
        levels=[level_result(level) for level in levels] if len(levels) > 1 else None,
        crossover_concurrency=crossover_concurrency(levels),
        crossover=crossover_bracket(levels),
        acceptance_unavailable=clip_reason(acceptance_unavailable),
    )
    if acceptance is not None and acceptance.has_data:
        record_acceptance(result, acceptance)
        result.accepted_tokens = None if acceptance.accepted_tokens is None else int(round(acceptance.accepted_tokens))
        if acceptance.draft_tokens is not None and not acceptance.estimated:  # SGLang's is k x calls: nothing new
            result.mean_draft_tokens = _r(acceptance.draft_tokens / acceptance.drafts, 4)
    return result


# --------------------------------------------------------------------------------------------------
# The termination message


def _divergences(result: BenchmarkResult, keep: int) -> BenchmarkResult:
    """The output check's first ``keep`` divergences (its counts stay whole)."""
    outputs = result.equivalence
    if outputs is None or not outputs.divergences or len(outputs.divergences) <= keep:
        return result
    return result.model_copy(update={"equivalence": outputs.model_copy(
        update={"divergences": outputs.divergences[:keep]})})


def _compact(result: BenchmarkResult) -> str:
    return json.dumps(result.to_json(), separators=(",", ":"))


def termination_message(result: BenchmarkResult, limit: int = TERMINATION_MESSAGE_LIMIT) -> str:
    """Compact JSON of ``result`` in at most ``limit`` bytes, valid as a ``BenchmarkResult``.

    Detail goes in this order until it fits: the per-prompt rows; the output check's divergences beyond the
    first five (defects come first); each level's detail (only
    concurrency, tok/s, baseline and speedup stay: the sweep's shape); the levels altogether
    (``crossoverConcurrency`` and the ``crossover`` bracket still answer the sweep's question); the per-position rates and the
    length of ``acceptanceUnavailable``; every divergence but the first; the buckets' and then the categories'
    reasons, and the categories' per-position rates. Anything dropped sets ``truncated``.
    """
    message = _compact(result)
    if len(message.encode()) <= limit:
        return message
    slim = result.model_copy(update={"prompts": None, "truncated": True})
    steps = [
        lambda r: r,
        lambda r: _divergences(r, 5),
        lambda r: r.model_copy(update={"levels": [
            LevelResult(concurrency=lv.concurrency, tokens_per_second=lv.tokens_per_second,
                        baseline_tokens_per_second=lv.baseline_tokens_per_second, speedup=lv.speedup)
            for lv in r.levels]} if r.levels else {}),
        lambda r: r.model_copy(update={"levels": None}),
        lambda r: r.model_copy(update={"per_position_acceptance": None,
                                       "acceptance_unavailable": (r.acceptance_unavailable or "")[:200] or None}),
        lambda r: _divergences(r, 1),
        lambda r: r.model_copy(update={"acceptance_by_prompt_length": [
            b.model_copy(update={"acceptance_unavailable": None}) for b in r.acceptance_by_prompt_length]}
            if r.acceptance_by_prompt_length else {}),
        lambda r: r.model_copy(update={"acceptance_by_category": [
            c.model_copy(update={"per_position_acceptance": None, "acceptance_unavailable": None})
            for c in r.acceptance_by_category]} if r.acceptance_by_category else {}),
    ]
    for step in steps:
        slim = step(slim)
        message = _compact(slim)
        if len(message.encode()) <= limit:
            return message
    # Unreachable with the fields above (every remaining one is a number or a short string); kept so a
    # future field cannot make the Job write a message Kubernetes would cut into invalid JSON.
    raise ValueError(f"benchmark result does not fit {limit} bytes even without detail: {message[:200]}")
