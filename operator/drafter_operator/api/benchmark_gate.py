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
    needs_rule,
)
from drafter_operator.api.prompts import PromptsSpec, prompt_count_rules


class EquivalenceSpec(ApiModel):
    """Compare the served outputs with the no-speculation baseline's, greedily, token by token: speculation must not
    change what the target would have said. Real engines are not bit-exact between a verify forward and a decode
    step, so a divergence counts as a defect only where the baseline was clearly decided (its top-2 logprob margin
    at that token is at least minMargin); closer calls are reported as near-ties."""

    rules = (
        decimal_range_rule(
            "minMargin", DECIMAL_PATTERN,
            'equivalence.minMargin must be between 0 and 100 nats, e.g. "1.0" ("0": every divergence is a defect, '
            "for servings in the engines' deterministic modes)",
            minimum=0.0, maximum=100.0,
        ),
    )

    num_prompts: Annotated[int, Field(ge=1, le=1000)] = 8
    """Prompts compared (the first of the benchmark's prompt set, reused in order when it has fewer)."""
    max_tokens: Annotated[int, Field(ge=1, le=4096)] = 128
    """Tokens generated per prompt on each side, at temperature 0."""
    min_margin: Decimal = "1.0"
    """How clearly the baseline must have preferred its token, in nats (top-1 minus top-2 logprob), for a divergence there to be a defect. bf16 logits let a verify forward and a decode step disagree by a few of bf16's steps at the logits' magnitude: up to 0.625 nats measured on an H100 at top logits near 30, so the default leaves room above that. "0": every divergence is one (use it when both servings run the engines' deterministic modes: vLLM VLLM_BATCH_INVARIANT=1, SGLang --enable-deterministic-inference; the check then applies it by itself)."""


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

    rules = (
        Rule(
            cel="has(self.minSpeedup) || has(self.minAcceptanceRate) || has(self.minTokensPerSecond) || has(self.equivalence)",
            message="gate needs a threshold or an output check: set gate.minSpeedup, gate.minAcceptanceRate, "
                    "gate.minTokensPerSecond or gate.equivalence",
            check=lambda g: g.min_speedup is not None or g.min_acceptance_rate is not None
            or g.min_tokens_per_second is not None or g.equivalence is not None,
            reason="FieldValueRequired",
        ),
        *Gate.rules[1:],
        Rule(
            cel="!has(self.equivalence) || (has(self.baseline) && has(self.baseline.servingRef))",
            message="gate.equivalence compares outputs with a live no-speculation serving: set gate.baseline.servingRef",
            check=lambda g: g.equivalence is None or (g.baseline is not None and g.baseline.serving_ref is not None),
            field_path=".baseline",
            reason="FieldValueRequired",
        ),
        Rule(
            cel=CEL_LEVELS_DISTINCT,
            message="gate.concurrencyLevels must not repeat a level (each is run once): remove the duplicates, e.g. [1, 8, 32]",
            check=lambda g: levels_distinct(g.concurrency_levels),
            field_path=".concurrencyLevels",
        ),
        needs_rule("minSpeedup", "baseline", "gate.minSpeedup needs gate.baseline (a no-speculation DrafterServing or "
                   "a recorded tokensPerSecond)", field_path=".baseline", reason="FieldValueRequired"),
        # The gate benchmark's spec (resources/gate.py gate_benchmark) takes prompts, numPrompts and
        # acceptanceByCategory as they are: the DrafterBenchmark spec's rules on them, said of the gate's fields.
        *prompt_count_rules("gate"),
    )

    baseline: Baseline | None = None
    """What the speedup is measured against."""
    num_prompts: Annotated[int, Field(ge=1, le=1000)] = 5
    """Prompts in the gate benchmark."""
    max_tokens: Annotated[int, Field(ge=1, le=65536)] = 512
    """Tokens generated per prompt in the gate benchmark."""
    equivalence: EquivalenceSpec | None = None
    """Compare the revision's outputs with gate.baseline.servingRef's at temperature 0: a divergence where the baseline was clearly decided fails the gate, naming the prompt and the token."""
    concurrency_levels: Annotated[list[Annotated[int, Field(ge=1, le=256)]], Field(min_length=2, max_length=16)] | None = None
    """A load sweep in the gate benchmark, e.g. [1, 4, 8, 32]: the thresholds judge its first level, and the sweep gives spec.drafter.dynamic fromBenchmark its crossover."""
    prompts: PromptsSpec | None = None
    """Prompts the gate benchmark sends, as a DrafterBenchmark's spec.prompts: inline, categorized, a ConfigMap key or a file on a PersistentVolumeClaim (e.g. {persistentVolumeClaim: {claimName: kimi-ft-work, path: data/held-out-prompts.json}}); default: the operator's built-in set (a DrafterTraining's promote.gate: the captured prompts it held out, when it trains from a capture). A DrafterTraining's Evaluate benchmark sends the same prompts, so the current and the new drafter are measured on one set."""
    acceptance_by_category: bool | None = None
    """Also measure acceptance and speedup by traffic category in the gate benchmark (its status.result.acceptanceByCategory), as a DrafterBenchmark's spec.acceptanceByCategory: it needs prompts that carry a category (gate.prompts.categorized, a ConfigMap key or claim file of {"text", "category"} objects, or the built-in set). The thresholds still judge the whole run. A DrafterTraining's promote.gate measures its held-out captured prompts by category unless this is false."""
