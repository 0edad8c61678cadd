"""The thresholds a benchmark must meet (Gate), what a speedup is measured against (Baseline), and the gate a new
revision or drafter must pass before it takes traffic (BenchmarkGate): shared by the three kinds."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from drafter_operator.api.common import (
    DECIMAL_PATTERN,
    ApiModel,
    Decimal,
    LocalObjectReference,
    Ratio,
    Rule,
    decimal_range_rule,
    exactly_one_rule,
)


class Gate(ApiModel):
    """Thresholds a benchmark must meet; at least one is required."""

    rules = (
        Rule(
            cel="has(self.minSpeedup) || has(self.minAcceptanceRate) || has(self.minTokensPerSecond)",
            message="gate needs a threshold: set gate.minSpeedup, gate.minAcceptanceRate or gate.minTokensPerSecond",
            check=lambda g: g.min_speedup is not None or g.min_acceptance_rate is not None or g.min_tokens_per_second is not None,
            reason="FieldValueRequired",
        ),
        decimal_range_rule(
            "minSpeedup", DECIMAL_PATTERN,
            'gate.minSpeedup must be above 0, e.g. "1.2" (20% faster than the baseline)',
            minimum=0.0, exclusive_minimum=True,
        ),
        decimal_range_rule(
            "minTokensPerSecond", DECIMAL_PATTERN,
            'gate.minTokensPerSecond must be above 0, e.g. "100"',
            minimum=0.0, exclusive_minimum=True,
        ),
    )

    min_speedup: Decimal | None = None
    """Lowest acceptable speedup against the baseline, e.g. "1.2"; needs a baseline."""
    min_acceptance_rate: Ratio | None = None
    """Lowest acceptable acceptance rate (accepted / drafted tokens over the run), e.g. "0.5"."""
    min_tokens_per_second: Decimal | None = None
    """Lowest acceptable single-stream decode throughput in tokens per second, e.g. "100"."""


class Baseline(ApiModel):
    """What a speedup is measured against: a no-speculation DrafterServing, another benchmark's result, or a recorded throughput."""

    rules = (
        exactly_one_rule(
            ("servingRef", "benchmarkRef", "tokensPerSecond"),
            "baseline needs exactly one of baseline.servingRef (a no-speculation DrafterServing), baseline.benchmarkRef (a finished DrafterBenchmark of one) or baseline.tokensPerSecond (a recorded figure)",
        ),
        decimal_range_rule(
            "tokensPerSecond", DECIMAL_PATTERN,
            'baseline.tokensPerSecond must be above 0, e.g. "82.5"',
            minimum=0.0, exclusive_minimum=True,
        ),
    )

    serving_ref: LocalObjectReference | None = None
    """A DrafterServing with drafter.method none, benchmarked under the same settings."""
    benchmark_ref: LocalObjectReference | None = None
    """A DrafterBenchmark of a no-speculation serving in this namespace: its result's tokensPerSecond is the baseline (waited for until it finishes)."""
    tokens_per_second: Decimal | None = None
    """A recorded no-speculation throughput in tokens per second, e.g. "82.5"."""


def levels_distinct(levels: list[int] | None) -> bool:
    """A sweep runs each level once: a repeated level would be measured twice and reported as two levels."""
    return levels is None or len(set(levels)) == len(levels)


#: CEL for levels_distinct of an optional concurrencyLevels field (at most 16 entries: 256 comparisons).
CEL_LEVELS_DISTINCT = "!has(self.concurrencyLevels) || self.concurrencyLevels.all(x, self.concurrencyLevels.exists_one(y, y == x))"


class BenchmarkGate(Gate):
    """A benchmark a new revision or drafter must pass before it takes traffic; on failure nothing changes."""

    rules = Gate.rules + (
        Rule(
            cel=CEL_LEVELS_DISTINCT,
            message="gate.concurrencyLevels must not repeat a level (each is run once): remove the duplicates, e.g. [1, 8, 32]",
            check=lambda g: levels_distinct(g.concurrency_levels),
            field_path=".concurrencyLevels",
        ),
        Rule(
            cel="!has(self.minSpeedup) || has(self.baseline)",
            message="gate.minSpeedup needs gate.baseline (a no-speculation DrafterServing or a recorded tokensPerSecond)",
            check=lambda g: g.min_speedup is None or g.baseline is not None,
            field_path=".baseline",
            reason="FieldValueRequired",
        ),
    )

    baseline: Baseline | None = None
    """What the speedup is measured against."""
    num_prompts: Annotated[int, Field(ge=1, le=1000)] = 5
    """Prompts in the gate benchmark."""
    max_tokens: Annotated[int, Field(ge=1, le=65536)] = 512
    """Tokens generated per prompt in the gate benchmark."""
    concurrency_levels: Annotated[list[Annotated[int, Field(ge=1, le=256)]], Field(min_length=2, max_length=16)] | None = None
    """A load sweep in the gate benchmark, e.g. [1, 4, 8, 32]: the thresholds judge its first level, and the sweep gives spec.drafter.dynamic fromBenchmark its crossover."""
