"""A whole benchmark run: warm-up, scrape, concurrency levels in waves (baseline interleaved), scrape.

Scheduling. A level of concurrency N sends its prompts in waves of N streams at once; the time the
target spent on the level is the sum of its waves' wall times. Every request generates exactly
``max_tokens`` (ignore_eos), so a wave's streams end together and a wave measures N-stream throughput
without a pool's ragged tail; the last wave is filled by reusing prompts from the start, so a level
never ends with fewer streams than it claims. With a baseline URL, each target wave is followed by the
same prompts on the baseline (target prompt i, then baseline prompt i): both see the same client
machine, network and time of day, and a drift during the run hits both alike.
A wave measures N streams only if its N requests reach the engine together, in one step: the streams
go through aiohttp for that (``stream.py`` says why not httpx).

After the given levels, a sweep with a baseline measures more levels between the last one at or above
1.0x and the first below, until the break-even is bracketed within 10% (``crossover.py``; at most
``refine`` of them). They are appended to the levels in the order run.

Acceptance comes from the target pods' counters scraped after the warm-up and after the last level,
so it covers exactly the measured requests (when nothing else sends traffic to those pods).

With ``prompt_length_buckets``, acceptance by prompt length (``length_buckets.py``) is measured next, bucket by
bucket with scrapes of its own; with ``acceptance_by_category``, acceptance and speedup by traffic category
(``categories.py``) category by category; with ``equivalence_prompts``, the output check (``equivalence.py``)
runs last. All come after the run's last scrape: their requests neither overlap a measured wave nor count in
the run's acceptance window.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp

from drafter_operator.api.benchmark import BenchmarkResult
from drafter_operator import engines
from drafter_operator.engines import DEFAULT_ENGINE, crossover
from drafter_operator.benchmark_client import categories, equivalence, length_buckets
from drafter_operator.benchmark_client import captured as captured_prompts
from drafter_operator.benchmark_client import prompts as prompt_sets
from drafter_operator.benchmark_client import scrape
from drafter_operator.benchmark_client.result import Level, Stream, benchmark_result
from drafter_operator.benchmark_client.stream import BenchError, Endpoint, first_model, stream_one, stream_session

#: Warm-up generation length: enough to take the first-request costs (connections, graph capture,
#: prefix caches of the template) out of the measurement, short enough to cost nothing.
WARMUP_TOKENS = 16

#: Told after each target wave: (concurrency level, waves of the level done, waves in the level). The
#: command draws a progress bar with it on a terminal; the Job's run passes none.
Progress = Callable[[int, int, int], None]


@dataclass(frozen=True)
class Options:
    """What ``drafter-operator bench`` was asked to do (one field per CLI option)."""

    url: str
    engine: str = DEFAULT_ENGINE
    model: str | None = None
    metrics_urls: tuple[str, ...] = ()
    baseline_url: str | None = None
    baseline_metrics_urls: tuple[str, ...] = ()
    baseline_tps: float | None = None
    num_prompts: int = 5
    max_tokens: int = 512
    concurrency: tuple[int, ...] = (1,)
    repetitions: int = 1
    temperature: float = 0.0
    prompts_file: str | None = None
    #: The held-out prompts of a serving's capture (``captured.py``), instead of a file or the built-in set.
    captured: captured_prompts.CapturedPrompts | None = None
    completions: bool = False
    num_speculative_tokens: int | None = None
    timeout: float = 600.0
    #: Levels at most added to narrow the break-even bracket (``crossover.py``); 0: the given levels only.
    refine: int = 8
    #: Upper edges of the prompt-length buckets acceptance is measured in (``length_buckets.py``); empty: none.
    prompt_length_buckets: tuple[int, ...] = ()
    #: Measure acceptance and speedup per traffic category of the tagged prompts (``categories.py``).
    acceptance_by_category: bool = False
    #: Prompts of the output check against the baseline (``equivalence.py``); 0: no check.
    equivalence_prompts: int = 0
    equivalence_tokens: int = 128
    #: Nats the baseline's top-2 margin must reach for a divergence to be a defect.
    equivalence_margin: float = 1.0
    #: Both sides run the engines' deterministic modes: every divergence is a defect.
    deterministic: bool = False
    #: For callers with prompts in hand (tests): texts, or Prompts carrying a category.
    prompts: tuple[str | prompt_sets.Prompt, ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        if self.prompts_file and self.captured:
            raise BenchError("--prompts-file and --captured-prompts are alternatives: pass one")
        if self.baseline_url and self.baseline_tps is not None:
            raise BenchError("--baseline-url and --baseline-tps are alternatives: pass one")
        if self.baseline_tps is not None and not (math.isfinite(self.baseline_tps) and self.baseline_tps > 0):
            raise BenchError(f"--baseline-tps must be a positive number, not {self.baseline_tps}")
        if not self.concurrency or any(c < 1 for c in self.concurrency):
            raise BenchError(f"--concurrency needs positive integers, got {list(self.concurrency)}")
        if self.max_tokens < 1 or self.repetitions < 1 or self.num_prompts < 1:
            raise BenchError("--max-tokens, --repetitions and --num-prompts must be at least 1")
        if self.refine < 0:
            raise BenchError(f"--refine must be 0 or more, not {self.refine}")
        if any(edge < 1 for edge in self.prompt_length_buckets):
            raise BenchError(f"--prompt-length-buckets needs positive token counts, got {list(self.prompt_length_buckets)}")
        if self.equivalence_prompts and not self.baseline_url:
            raise BenchError("--equivalence-prompts compares outputs with a live baseline: pass --baseline-url")
        if self.equivalence_prompts < 0 or self.equivalence_tokens < 1:
            raise BenchError("--equivalence-prompts must be 0 or more and --equivalence-tokens at least 1")
        if not (math.isfinite(self.equivalence_margin) and self.equivalence_margin >= 0):
            raise BenchError(f"--equivalence-margin must be a number >= 0, not {self.equivalence_margin}")
        if self.timeout <= 0:
            raise BenchError("--timeout must be positive")


def prompt_set(options: Options) -> list[prompt_sets.Prompt]:
    """The prompts of the run, each with its category (None: untagged)."""
    if options.prompts:
        return [p if isinstance(p, prompt_sets.Prompt) else prompt_sets.Prompt(p) for p in options.prompts]
    if options.captured is not None:
        return captured_prompts.load(options.captured)
    return prompt_sets.load_set(options.prompts_file)


def category_members(options: Options, tagged: list[prompt_sets.Prompt]) -> tuple[list[str], dict[str, list[int]]]:
    """What the measurement by category sends: its prompts' texts and each category's indices among them.
    Raises :class:`BenchError` before anything is sent when no prompt carries a category."""
    given = options.prompts or options.captured is not None  # the set is what was given: no built-in additions
    pool = tagged if given else prompt_sets.category_set(tagged, options.prompts_file)
    members = prompt_sets.by_category(pool)
    if not members:
        raise BenchError("--acceptance-by-category needs prompts tagged with a traffic category: use the built-in "
                         "set, or a JSON list of {\"text\": ..., \"category\": ...} objects in --prompts-file")
    return list(prompt_sets.texts(pool)), members


def level_schedule(num_prompts: int, repetitions: int, concurrency: int) -> list[list[int]]:
    """Waves of prompt indices for one level: the set ``repetitions`` times, padded to whole waves."""
    order = [i for _ in range(repetitions) for i in range(num_prompts)]
    waves = math.ceil(len(order) / concurrency)
    padded = [order[i % len(order)] for i in range(waves * concurrency)]
    return [padded[w * concurrency:(w + 1) * concurrency] for w in range(waves)]


async def _wave(session: aiohttp.ClientSession, endpoint: Endpoint, prompts: list[str], indices: list[int],
                concurrency: int) -> tuple[list[Stream], float]:
    started = time.perf_counter()
    streams = await asyncio.gather(*(stream_one(session, endpoint, prompts[i], i, concurrency) for i in indices))
    return list(streams), time.perf_counter() - started


@dataclass(frozen=True)
class LevelWork:
    """What one concurrency level sends: the ``prompts``, ``repetitions`` times, ``concurrency`` streams at once."""

    prompts: list[str]
    repetitions: int
    concurrency: int


async def run_level(session: aiohttp.ClientSession, target: Endpoint, baseline: Endpoint | None, work: LevelWork,
                    baseline_tps: float | None = None, progress: Progress | None = None) -> Level:
    """The level's streams on ``target``; the same waves on ``baseline`` when there is one, else its throughput is
    ``baseline_tps`` (a recorded figure, or None)."""
    prompts, repetitions, concurrency = work.prompts, work.repetitions, work.concurrency
    streams: list[Stream] = []
    seconds = base_tokens = base_seconds = 0.0
    schedule = level_schedule(len(prompts), repetitions, concurrency)
    for done, indices in enumerate(schedule, 1):
        wave, wall = await _wave(session, target, prompts, indices, concurrency)
        streams.extend(wave)
        seconds += wall
        if baseline is not None:
            base_wave, base_wall = await _wave(session, baseline, prompts, indices, concurrency)
            base_tokens += sum(s.completion_tokens for s in base_wave)
            base_seconds += base_wall
        if progress is not None:
            progress(concurrency, done, len(schedule))
    if baseline is not None:
        baseline_tps = base_tokens / base_seconds if base_seconds > 0 else None
    return Level(concurrency=concurrency, streams=tuple(streams), seconds=seconds,
                 baseline_tokens_per_second=baseline_tps)


async def run(options: Options, progress: Progress | None = None) -> BenchmarkResult:
    """Run the benchmark ``options`` describe; raises :class:`BenchError` when a request fails.
    ``progress`` is told after each wave of the target (and its baseline wave)."""
    tagged = prompt_set(options)
    prompt_texts = list(prompt_sets.texts(tagged))
    prompts = prompt_sets.select(prompt_texts, options.num_prompts)
    by_category_work = category_members(options, tagged) if options.acceptance_by_category else None
    base_url = options.url.rstrip("/")
    metrics_urls = options.metrics_urls or (base_url,)
    # One session for the streams and the few one-off requests (model id, /metrics): stream.py says why aiohttp.
    async with stream_session(max(options.concurrency), options.timeout) as session:
        # Every request is named as a benchmark's, so a serving that captures its traffic leaves it out (the baseline
        # is taken to run the target's engine: another engine ignores the field, and captures these requests).
        id_field = engines.engine(options.engine).CLIENT_REQUEST_ID_FIELD
        target = Endpoint("target", base_url, options.model or await first_model(session, base_url),
                          options.max_tokens, options.temperature, chat=not options.completions,
                          request_id_field=id_field)
        baseline = None
        if options.baseline_url:
            baseline_url = options.baseline_url.rstrip("/")
            baseline = Endpoint("baseline", baseline_url, options.model or await first_model(session, baseline_url),
                                options.max_tokens, options.temperature, chat=not options.completions,
                                request_id_field=id_field)
        for endpoint in (target, baseline):
            if endpoint is not None:
                warm = dataclasses.replace(endpoint, name=endpoint.name + " warm-up", max_tokens=WARMUP_TOKENS)
                await stream_one(session, warm, prompts[0], 0)
        before = await scrape.scrape_all(session, metrics_urls, options.engine, target.model)
        levels = [await run_level(session, target, baseline, LevelWork(prompts, options.repetitions, concurrency),
                                  options.baseline_tps, progress)
                  for concurrency in options.concurrency]
        # The break-even, measured: levels between the last one at or above 1.0x and the first below,
        # until they bracket it within 10% (crossover.py); each refined level is measured like the others.
        for _ in range(options.refine if len(levels) > 1 else 0):
            concurrency = crossover.next_level((level.concurrency, level.speedup) for level in levels)
            if concurrency is None:
                break
            levels.append(await run_level(session, target, baseline,
                                          LevelWork(prompts, options.repetitions, concurrency),
                                          options.baseline_tps, progress))
        after = await scrape.scrape_all(session, metrics_urls, options.engine, target.model)
        by_length = None
        if options.prompt_length_buckets:
            counted = {s.index: s.prompt_tokens for s in levels[0].streams if s.prompt_tokens is not None}
            by_length = await length_buckets.measure(
                session, target, prompts, counted, options.prompt_length_buckets,
                scrape.AcceptanceCounters(metrics_urls, options.engine, options.num_speculative_tokens))
        by_category = None
        if by_category_work is not None:
            category_prompts, members = by_category_work
            by_category = await categories.measure(
                session, target, category_prompts, members,
                scrape.AcceptanceCounters(metrics_urls, options.engine, options.num_speculative_tokens), baseline)
        outputs = None
        if options.equivalence_prompts and baseline is not None:
            outputs = await equivalence.check(session, equivalence.Sides(target, baseline),
                                              prompt_sets.select(prompt_texts, options.equivalence_prompts),
                                              options.equivalence_tokens, options.equivalence_margin,
                                              options.deterministic)
    window, unavailable = scrape.acceptance_between(before, after, options.num_speculative_tokens)
    result = benchmark_result(levels, window, unavailable)
    result.acceptance_by_prompt_length = by_length or None
    result.acceptance_by_category = by_category or None
    result.equivalence = outputs
    return result
