"""``drafter-operator bench``: run a benchmark, print it, and leave the result where the Job's reader looks.

Outputs, for the DrafterBenchmark controller and for people:
- stdout: the full result as JSON, always (``{"error": ...}`` when the run failed);
- with a terminal on stdout, also a table like the seed's, and while it runs a progress bar per
  concurrency level on stderr (waves done); without one (a Job's log) no progress lines at all;
- ``--termination-log PATH``: the compact result (at most 4096 bytes, ``BenchmarkResult`` JSON) on
  success; on failure one line naming what failed, and exit status 1, so the controller can tell a
  result from an error by the exit code and show the line as is.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from pathlib import Path

from drafter_operator import timestamps
from drafter_operator.api.benchmark import BenchmarkResult
from drafter_operator.benchmark_client import equivalence
from drafter_operator.benchmark_client.captured import CapturedPrompts
from drafter_operator.benchmark_client.prompts import PromptsError
from drafter_operator.benchmark_client.result import termination_message
from drafter_operator.benchmark_client.run import Options, run
from drafter_operator.benchmark_client.stream import BenchError


def _positive_list(text: str, kind: str, item: str, unit: str, example: str) -> tuple[int, ...]:
    """``"1,2,4"`` -> (1, 2, 4); an argparse type's body, so a bad list is a usage error naming what it lists."""
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of {kind}, e.g. {example}") from None
    if not values or any(value < 1 for value in values):
        raise argparse.ArgumentTypeError(f"{text!r}: every {item} must be {unit} >= 1")
    return values


def concurrency_list(text: str) -> tuple[int, ...]:
    """``"1,2,4"`` -> (1, 2, 4): concurrency levels; an argparse type."""
    return _positive_list(text, "integers", "concurrency level", "an integer", "1,2,4")


def token_edges(text: str) -> tuple[int, ...]:
    """``"1024,4096"`` -> (1024, 4096): prompt-length bucket edges in tokens; an argparse type."""
    return _positive_list(text, "token counts", "bucket edge", "a token count", "1024,4096")


def captured_from(args: argparse.Namespace) -> CapturedPrompts | None:
    """--captured-prompts and its options, or None without it."""
    claim = getattr(args, "captured_prompts", None)
    if not claim:
        return None
    if args.held_out_fraction is None:
        raise BenchError("--captured-prompts needs --held-out-fraction (the held-out share the training used)")
    before = None
    if args.captured_before:
        before = timestamps.parse_aware(args.captured_before)
        if before is None:
            raise BenchError(f"--captured-before {args.captured_before!r} is not an RFC 3339 time with a zone, "
                             "e.g. 2026-12-07T10:00:00Z")
    return CapturedPrompts(Path(claim), args.held_out_fraction, before, args.captured_per_category)


def options_from(args: argparse.Namespace) -> Options:
    return Options(captured=captured_from(args), url=args.url, engine=args.engine, model=args.model, metrics_urls=tuple(args.metrics_url),
                   baseline_url=args.baseline_url, baseline_metrics_urls=tuple(args.baseline_metrics_url),
                   baseline_tps=args.baseline_tps, num_prompts=args.num_prompts, max_tokens=args.max_tokens,
                   concurrency=args.concurrency, repetitions=args.repetitions, temperature=args.temperature,
                   prompts_file=args.prompts_file, completions=args.completions,
                   num_speculative_tokens=args.num_speculative_tokens, timeout=args.timeout,
                   refine=getattr(args, "refine", Options.refine),
                   prompt_length_buckets=getattr(args, "prompt_length_buckets", None) or (),
                   acceptance_by_category=getattr(args, "acceptance_by_category", False),
                   equivalence_prompts=getattr(args, "equivalence_prompts", 0),
                   equivalence_tokens=getattr(args, "equivalence_tokens", Options.equivalence_tokens),
                   equivalence_margin=getattr(args, "equivalence_margin", Options.equivalence_margin),
                   deterministic=getattr(args, "deterministic", False))


def _write(path: str | None, text: str) -> None:
    if path:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


def main(args: argparse.Namespace) -> int:
    interactive = sys.stdout.isatty()
    try:
        if interactive:
            with wave_progress() as progress:
                result = asyncio.run(run(options_from(args), progress))
        else:
            result = asyncio.run(run(options_from(args)))
    except (BenchError, PromptsError) as exc:
        return _fail(args, str(exc))
    except Exception as exc:  # noqa: BLE001 - the Job must still say what failed, in one line
        return _fail(args, f"bench failed: {type(exc).__name__}: {exc}")
    # The termination log first: it is what the controller reads, and a closed stdout must not lose it.
    _write(args.termination_log, termination_message(result))
    print(json.dumps(result.to_json(), indent=2))
    if interactive:
        print_table(result)
    return 0


@contextlib.contextmanager
def wave_progress():
    """A progress callback for :func:`run` drawing one bar per concurrency level on stderr (stdout keeps
    only the JSON result); the bars stay on screen when the run ends."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bars = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("waves"),
                    TimeElapsedColumn(), console=Console(stderr=True))
    tasks: dict[int, int] = {}

    def advance(concurrency: int, done: int, waves: int) -> None:
        if concurrency not in tasks:
            streams = "stream" if concurrency == 1 else "streams"
            tasks[concurrency] = bars.add_task(f"{concurrency:>4} {streams}", total=waves)
        bars.update(tasks[concurrency], completed=done, total=waves)

    with bars:
        yield advance


def _fail(args: argparse.Namespace, message: str) -> int:
    line = " ".join(message.split())  # one line, whatever the error text held
    print(json.dumps({"error": line}))
    print(f"drafter-operator bench: {line}", file=sys.stderr)
    _write(args.termination_log, line)
    return 1


def _f(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def category_table(result: BenchmarkResult):
    """Acceptance, throughput and speedup per traffic category, one row each."""
    from rich.table import Table

    table = Table(title="by traffic category (one stream)")
    for column in ("category", "prompts", "acceptance", "mean length", "tok/s", "baseline tok/s", "speedup"):
        table.add_column(column, justify="right")
    for row in result.acceptance_by_category or ():
        table.add_row(row.category, str(row.prompts), _f(row.acceptance_rate, ".1%"), _f(row.acceptance_length, ".2f"),
                      _f(row.tokens_per_second, ".1f"), _f(row.baseline_tokens_per_second, ".1f"),
                      _f(row.speedup, ".2f") + ("x" if row.speedup is not None else ""))
    return table


def print_table(result: BenchmarkResult) -> None:
    """The seed's table: one row per prompt of the first level, totals, baseline, speedup, acceptance."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    first = [p for p in result.prompts or () if p.concurrency in (None, result.concurrency)]
    table = Table(title=f"drafter-operator bench (concurrency {result.concurrency})")
    for column in ("prompt", "tokens", "seconds", "tok/s", "ms/token", "TTFT s"):
        table.add_column(column, justify="right")
    for p in first:
        table.add_row(str(p.index), str(p.completion_tokens), f"{p.seconds:.2f}", f"{p.tokens_per_second:.1f}",
                      _f(1000 * p.seconds / p.completion_tokens if p.completion_tokens else None, ".1f"),
                      _f(p.ttft_seconds, ".3f"))
    table.add_section()
    table.add_row("total", str(result.total_tokens), _f(result.total_seconds, ".2f"),
                  _f(result.tokens_per_second, ".1f"), _f(result.ms_per_token, ".1f"), _f(result.ttft_seconds, ".3f"))
    console.print(table)
    lines = [f"baseline: {_f(result.baseline_tokens_per_second, '.1f')} tok/s",
             f"speedup: {_f(result.speedup, '.2f')}x"]
    if result.acceptance_unavailable:
        lines.append(f"acceptance unavailable: {result.acceptance_unavailable}")
    elif result.acceptance_rate is None and result.acceptance_length is None:
        lines.append("acceptance: not speculative")
    else:
        lines.append(f"acceptance: {_f(result.acceptance_rate, '.1%')}, mean length "
                     f"{_f(result.acceptance_length, '.2f')} ({_f(result.accepted_tokens, 'd')}/"
                     f"{_f(result.draft_tokens, 'd')} draft tokens)")
        if result.per_position_acceptance:
            lines.append("per position: " + " ".join(f"{r:.1%}" for r in result.per_position_acceptance))
    console.print("\n".join(lines))
    if result.levels:
        sweep = Table(title="load sweep (output tok/s, all streams at once)")
        for column in ("streams", "tok/s", "baseline tok/s", "speedup"):
            sweep.add_column(column, justify="right")
        for level in result.levels:
            sweep.add_row(str(level.concurrency), f"{level.tokens_per_second:.1f}",
                          _f(level.baseline_tokens_per_second, ".1f"), _f(level.speedup, ".2f") + "x")
        console.print(sweep)
        bracket = result.crossover
        if bracket is None:
            console.print("crossover (speedup < 1.0): none")
        elif bracket.above_concurrency is None:
            console.print(f"crossover (speedup < 1.0): already at the lowest level, {bracket.below_concurrency}")
        else:
            console.print(f"break-even between {bracket.above_concurrency} and {bracket.below_concurrency} streams "
                          f"(interpolated {bracket.estimate}"
                          + (")" if bracket.within_tolerance else "; wider than 10%: the --refine budget ran out)"))
    for bucket in result.acceptance_by_prompt_length or ():
        span = f"{bucket.min_prompt_tokens}-{bucket.max_prompt_tokens}" if bucket.max_prompt_tokens is not None \
            else f">= {bucket.min_prompt_tokens}"
        console.print(f"prompts of {span} tokens ({bucket.prompts}): acceptance {_f(bucket.acceptance_rate, '.1%')}, "
                      f"mean length {_f(bucket.acceptance_length, '.2f')}"
                      + (f" ({bucket.acceptance_unavailable})" if bucket.acceptance_unavailable else ""))
    if result.acceptance_by_category:
        console.print(category_table(result))
    outputs = result.equivalence
    if outputs is not None:
        console.print(f"outputs: {outputs.identical} of {outputs.prompts} prompts identical to the baseline, "
                      f"{outputs.defects} defects, {outputs.near_ties} near-ties (margin < {outputs.min_margin:g} nats)")
        if outputs.defects:
            console.print(equivalence.defect_message(outputs))
