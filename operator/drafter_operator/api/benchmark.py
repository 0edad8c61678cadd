"""DrafterBenchmark: a measured run of prompts against a serving, with acceptance and speedup."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, StringConstraints

from drafter_operator.api.benchmark_comparison import (
    CEL_BASELINE_NOT_A_CANDIDATE,
    CEL_CANDIDATES_DISTINCT,
    Candidates,
    Comparison,
    baseline_not_a_candidate,
    candidates_distinct,
)
from drafter_operator.api.benchmark_gate import CEL_LEVELS_DISTINCT, Baseline, EquivalenceSpec, Gate, levels_distinct
from drafter_operator.api.common import (
    CONDITIONS_SCHEMA_EXTRA,
    ApiModel,
    Condition,
    Duration,
    LocalObjectReference,
    QueueName,
    Rule,
    StatusModel,
    Url,
    duration_range_rule,
    exactly_one_rule,
)
from drafter_operator.api.kind import KindModel
from drafter_operator.api.prompts import PromptsSpec, prompt_count_rules
from drafter_operator.api.traffic import TrafficSpec
from drafter_operator.traffic_categories import TrafficCategory
from drafter_operator.constants import API_GROUP_VERSION, BENCHMARK_PLURAL, ApiGroupVersion
from drafter_operator.api.pod import ContainerResources, PodPolicy, Toleration

TEMPERATURE_PATTERN = r"^([01](\.[0-9]{1,3})?|2(\.0{1,3})?)$"


class BenchmarkPlacement(ApiModel):
    """Which nodes the benchmark pod may run on. It never requests a GPU, wherever it lands."""

    node_preference: Literal["PreferCPUNodes", "RequireCPUNodes", "Any"] = "PreferCPUNodes"
    """PreferCPUNodes: nodes without the nvidia.com/gpu.present label first, GPU nodes (tolerating their nvidia.com/gpu taint) when no CPU node fits, so a cluster of GPU nodes only runs it too. RequireCPUNodes: only nodes without that label (the run waits while none fits). Any: no preference."""
    tolerations: Annotated[list[Toleration], Field(max_length=32)] | None = None
    """Further taints the pod tolerates, e.g. a dedicated=benchmarks:NoSchedule taint of the nodes meant for it."""


class DrafterBenchmarkSpec(ApiModel):
    """Desired benchmark run."""

    rules = (
        exactly_one_rule(
            ("servingRef", "endpoint", "candidates"),
            "spec needs exactly one of spec.servingRef (a DrafterServing in this namespace), spec.endpoint (an OpenAI-compatible base URL) or spec.candidates (DrafterServings to compare)",
        ),
        Rule(
            cel="!has(self.candidates) || (has(self.concurrencyLevels) && has(self.baseline))",
            message="spec.candidates are compared by their speedup at each load: set spec.concurrencyLevels (e.g. [1, 8, 32]) and spec.baseline (e.g. servingRef: a no-speculation serving of the same target)",
            check=lambda s: s.candidates is None or (s.concurrency_levels is not None and s.baseline is not None),
            field_path=".candidates",
        ),
        Rule(
            cel="!has(self.traffic) || (has(self.candidates) && has(self.acceptanceByCategory) && self.acceptanceByCategory)",
            message="spec.traffic picks among spec.candidates from each one's acceptance by category: set spec.candidates "
                    "and spec.acceptanceByCategory: true, or remove spec.traffic",
            check=lambda s: s.traffic is None or (s.candidates is not None and bool(s.acceptance_by_category)),
            field_path=".traffic",
        ),
        Rule(
            cel="!has(self.candidates) || !has(self.gate)",
            message="spec.gate judges one serving and spec.candidates compare several: remove the gate (status.comparison names the pick at each load)",
            check=lambda s: s.candidates is None or s.gate is None,
            field_path=".gate",
        ),
        Rule(
            cel=CEL_CANDIDATES_DISTINCT,
            message="spec.candidates must name each DrafterServing once: remove the duplicates",
            check=candidates_distinct,
            field_path=".candidates",
        ),
        Rule(
            cel=CEL_BASELINE_NOT_A_CANDIDATE,
            message="spec.baseline.servingRef must not be one of spec.candidates: the baseline serves without speculation, which every level's pick already weighs (\"none\")",
            check=baseline_not_a_candidate,
            field_path=".baseline.servingRef.name",
        ),
        *prompt_count_rules("spec"),
        Rule(
            cel="!has(self.concurrencyLevels) || self.concurrency == 1",
            message="spec.concurrency and spec.concurrencyLevels are alternatives: remove concurrency (or set it to 1) when you sweep concurrencyLevels",
            check=lambda s: s.concurrency_levels is None or s.concurrency == 1,
            field_path=".concurrency",
        ),
        Rule(
            cel=CEL_LEVELS_DISTINCT,
            message="spec.concurrencyLevels must not repeat a level (each is run once): remove the duplicates, e.g. [1, 8, 32]",
            check=lambda s: levels_distinct(s.concurrency_levels),
            field_path=".concurrencyLevels",
        ),
        Rule(
            cel="self.concurrency <= self.numPrompts",
            message="spec.concurrency cannot exceed spec.numPrompts (the extra streams would have nothing to send): lower concurrency or add prompts",
            check=lambda s: s.concurrency <= s.num_prompts,
            field_path=".concurrency",
        ),
        Rule(
            cel=(
                "!has(self.baseline) || !has(self.baseline.servingRef) || !has(self.servingRef) "
                "|| self.baseline.servingRef.name != self.servingRef.name"
            ),
            message="spec.baseline.servingRef must name a different DrafterServing than spec.servingRef: point it at a no-speculation serving of the same target",
            check=lambda s: s.baseline is None or s.baseline.serving_ref is None or s.serving_ref is None
            or s.baseline.serving_ref.name != s.serving_ref.name,
            field_path=".baseline.servingRef.name",
        ),
        Rule(
            cel="!has(self.gate) || !has(self.gate.minSpeedup) || has(self.baseline)",
            message="spec.gate.minSpeedup needs spec.baseline (a no-speculation DrafterServing or a recorded tokensPerSecond)",
            check=lambda s: s.gate is None or s.gate.min_speedup is None or s.baseline is not None,
            field_path=".baseline",
            reason="FieldValueRequired",
        ),
        Rule(
            cel="!has(self.equivalence) || (has(self.baseline) && has(self.baseline.servingRef))",
            message="spec.equivalence compares outputs with a live no-speculation serving: set spec.baseline.servingRef "
                    "(a recorded tokensPerSecond or another benchmark has no outputs to compare)",
            check=lambda s: s.equivalence is None or (s.baseline is not None and s.baseline.serving_ref is not None),
            field_path=".baseline",
            reason="FieldValueRequired",
        ),
        Rule(
            cel="!has(self.equivalence) || !has(self.candidates)",
            message="spec.equivalence checks one serving: remove it from a comparison of spec.candidates, or benchmark "
                    "each candidate with spec.servingRef",
            check=lambda s: s.equivalence is None or s.candidates is None,
            field_path=".equivalence",
            reason="FieldValueForbidden",
        ),
        Rule(
            cel="!has(self.promptLengthBuckets) || self.promptLengthBuckets.all(x, self.promptLengthBuckets.exists_one(y, y == x))",
            message="spec.promptLengthBuckets must not repeat an edge: remove the duplicates, e.g. [1024, 4096, 16384]",
            check=lambda s: s.prompt_length_buckets is None or len(set(s.prompt_length_buckets)) == len(s.prompt_length_buckets),
            field_path=".promptLengthBuckets",
        ),
        duration_range_rule(
            "timeout", "1m", "24h",
            'spec.timeout must be between 1m and 24h, e.g. "30m"',
        ),
    )

    serving_ref: LocalObjectReference | None = None
    """The DrafterServing to benchmark (its pods' /metrics give acceptance)."""
    candidates: Candidates | None = None
    """DrafterServings of one target to compare (2 to 8), instead of servingRef: each is measured in turn by a DrafterBenchmark of its own with this spec's settings (needs concurrencyLevels and a baseline), and status.comparison names the one to pick at each load."""
    endpoint: Url | None = None
    """Or an OpenAI-compatible base URL outside the operator's control, e.g. http://my-vllm.serving.svc:8000 (its /metrics is read too)."""
    model: Annotated[str, StringConstraints(min_length=1, max_length=512)] | None = None
    """Model name sent in requests; default: the first entry of /v1/models."""
    prompts: PromptsSpec | None = None
    """Prompts to send; default: the operator's built-in set of long-form prompts."""
    num_prompts: Annotated[int, Field(ge=1, le=1000)] = 5
    """Prompts per repetition."""
    max_tokens: Annotated[int, Field(ge=1, le=65536)] = 512
    """Tokens generated per prompt (ignore_eos, so every prompt yields exactly this many)."""
    concurrency: Annotated[int, Field(ge=1, le=256)] = 1
    """Concurrent streams; 1 measures single-stream decode speed."""
    concurrency_levels: Annotated[list[Annotated[int, Field(ge=1, le=256)]], Field(min_length=2, max_length=16)] | None = None
    """A load sweep instead of one level, e.g. [1, 2, 4, 8, 16, 32, 64]: the result has the speedup at each level and crossoverConcurrency, the first level where speculation is slower than the baseline. (A separate field: a schema cannot let spec.concurrency be a number or a list.)"""
    temperature: Annotated[str, StringConstraints(pattern=TEMPERATURE_PATTERN, max_length=5)] = "0"
    """Sampling temperature as a decimal string between "0" and "2"; "0" (greedy) makes runs comparable."""
    repetitions: Annotated[int, Field(ge=1, le=100)] = 1
    """How many times the prompt set is run; results are totals over all repetitions."""
    baseline: Baseline | None = None
    """What the speedup is measured against; no speedup is reported without one."""
    gate: Gate | None = None
    """Thresholds for a Passed / Failed verdict."""
    prompt_length_buckets: Annotated[list[Annotated[int, Field(ge=1, le=16777216)]], Field(min_length=1, max_length=8)] | None = None
    """Acceptance by prompt length: upper edges in prompt tokens, e.g. [1024, 4096, 16384] (a last bucket takes longer prompts). After the measurement each bucket's prompts are sent again one at a time, with the engine's counters read before and after, so status.result.acceptanceByPromptLength tells a drafter that loses acceptance on long contexts (one trained at a shorter length) from one that is poor everywhere. Needs the serving's /metrics (servingRef, or an endpoint whose /metrics answers)."""
    traffic: TrafficSpec | None = None
    """With spec.candidates and acceptanceByCategory: the traffic to pick for, e.g. {mix: {code: 60, chat: 40}}. Each candidate's speedup at each load is predicted for this mix from its sweep and its acceptance by category, and the pick follows that prediction (status.comparison.levels[].speedups[].mixSpeedup) rather than the speedup its prompts measured."""
    acceptance_by_category: bool | None = None
    """Acceptance and speedup by traffic category (code, math, chat, writing, toolCalls, longContext, nonEnglish): after the measurement each category's prompts of the set (every prompt of it that carries a category, not only the first numPrompts) are sent again one at a time, with the engine's counters read before and after and, with spec.baseline.servingRef, the same prompts on the baseline, so status.result.acceptanceByCategory says which kinds of traffic the drafter serves well. Needs categorized prompts (the built-in set has every category) and the serving's /metrics for acceptance."""
    equivalence: EquivalenceSpec | None = None
    """Also compare the outputs with spec.baseline.servingRef's at temperature 0, token by token (status.result.equivalence): a divergence where the baseline was clearly decided is a defect and fails the run's verdict, naming the prompt and the token."""
    timeout: Duration = "30m"
    """Deadline of the benchmark Job."""
    resources: ContainerResources | None = None
    """CPU and memory of the benchmark pod; default requests cpu 500m and memory 256Mi, limits cpu 2 and memory 1Gi. Whatever is left unset is filled from these (a limit never below its request), so the pod always carries requests and limits for cpu and memory."""
    placement: BenchmarkPlacement | None = None
    """Which nodes the benchmark pod may run on; default: CPU nodes preferred, GPU nodes as a fallback (never requesting a GPU)."""
    pod: PodPolicy | None = None
    """Pod settings of the benchmark pod: labels, annotations, serviceAccountName, imagePullSecrets (for the operator's image), priorityClassName, security contexts."""
    queue_name: QueueName | None = None
    """A Kueue LocalQueue in this namespace: the benchmark Job is created suspended in it and runs once Kueue admits it (spec.timeout counts from then: a Job's active deadline restarts when it is resumed); the Complete condition says Queued, with Kueue's reason, while it waits. Unset: it starts at once."""


class PromptResult(StatusModel):
    """One prompt of the run."""

    index: int
    """Position in the prompt set (0-based), per repetition in order."""
    prompt_tokens: int | None = None
    """Prompt length in tokens."""
    completion_tokens: int
    """Tokens generated."""
    seconds: float
    """Wall time of the stream."""
    tokens_per_second: float
    """Decode throughput of this prompt."""
    ttft_seconds: float | None = None
    """Time to first token."""
    itl_seconds: float | None = None
    """Mean inter-token latency after the first token: (seconds - ttftSeconds) / (completionTokens - 1)."""
    concurrency: int | None = None
    """Streams in flight while this prompt ran (the load-sweep level it belongs to)."""


class LevelResult(StatusModel):
    """One concurrency level of a load sweep: N streams at once over the prompt set."""

    concurrency: int
    """Streams sent at once."""
    total_tokens: int | None = None
    """Tokens generated at this level."""
    total_seconds: float | None = None
    """Time the target spent on this level's requests (sum of the waves' wall times)."""
    tokens_per_second: float
    """Aggregate output throughput at this level: totalTokens / totalSeconds."""
    ttft_seconds: float | None = None
    """Mean time to first token at this level."""
    itl_seconds: float | None = None
    """Mean inter-token latency at this level."""
    baseline_tokens_per_second: float | None = None
    """The baseline's aggregate throughput at the same level."""
    speedup: float | None = None
    """tokensPerSecond / baselineTokensPerSecond at this level."""


class CrossoverBracket(StatusModel):
    """Where speculation stops paying, between two measured levels: the sweep measures levels inside the bracket until its width is at most 10% of aboveConcurrency (or one stream)."""

    above_concurrency: int | None = None
    """The highest measured level below belowConcurrency (its speedup is 1.0 or more); unset when speculation was slower already at the lowest level."""
    below_concurrency: int
    """The lowest measured level whose speedup is below 1.0 (crossoverConcurrency)."""
    estimate: float | None = None
    """Streams at which the speedup crosses 1.0, interpolated linearly between the two levels; what drafter.dynamic fromBenchmark turns speculation off at."""
    within_tolerance: bool | None = None
    """True when the bracket is as narrow as asked (10% of aboveConcurrency, or adjacent levels); false when the refinement stopped at its level budget (bench --refine)."""


class Divergence(StatusModel):
    """Where one prompt's output first left the baseline's."""

    prompt: int
    """The prompt's position among those compared (0-based: the prompt set in order, cycled when it is shorter than equivalence.numPrompts)."""
    position: int
    """The first generated token that differs (0-based)."""
    expected: int | None = None
    """The baseline's token id there."""
    got: int | None = None
    """The served token id there."""
    margin: float | None = None
    """The baseline's top-1 minus top-2 logprob at that token, in nats; unset when it returned no logprobs there."""
    defect: bool
    """True when margin is at least minMargin (or unknown): the baseline was clearly decided, so speculation changed the output."""


class LengthBucketResult(StatusModel):
    """Acceptance over the prompts of one prompt-length bucket."""

    min_prompt_tokens: int
    """Shortest prompt the bucket takes (the previous edge + 1, or 0)."""
    max_prompt_tokens: int | None = None
    """Longest prompt the bucket takes (its edge); unset for the last, open bucket."""
    prompts: int
    """Prompts of the set in this bucket (each sent once, one at a time)."""
    mean_prompt_tokens: float | None = None
    """Their mean length in tokens, as the engine counted them."""
    acceptance_rate: float | None = None
    """Accepted / drafted tokens over the bucket's requests."""
    acceptance_length: float | None = None
    """Mean acceptance length over the bucket's requests (tokens per verification step)."""
    draft_tokens: int | None = None
    """Tokens drafted over the bucket's requests."""
    acceptance_unavailable: str | None = None
    """Why there are no figures for this bucket ("<Reason>: <message>")."""


class CategoryResult(StatusModel):
    """Acceptance and throughput over the prompts of one traffic category."""

    category: TrafficCategory
    """The traffic category."""
    prompts: int
    """Prompts of the set in this category (each sent once, one at a time)."""
    acceptance_length: float | None = None
    """Mean acceptance length over the category's requests (tokens per verification step)."""
    acceptance_rate: float | None = None
    """Accepted / drafted tokens over the category's requests."""
    per_position_acceptance: list[float] | None = None
    """Per draft position, how often it was accepted per verification step (vLLM; position 0 first)."""
    draft_tokens: int | None = None
    """Tokens drafted over the category's requests."""
    tokens_per_second: float | None = None
    """Single-stream output throughput over the category's requests: their tokens / their wall time."""
    baseline_tokens_per_second: float | None = None
    """The baseline serving's single-stream throughput on the same prompts (spec.baseline.servingRef or an endpoint)."""
    speedup: float | None = None
    """tokensPerSecond / baselineTokensPerSecond."""
    acceptance_unavailable: str | None = None
    """Why there are no acceptance figures for this category ("<Reason>: <message>")."""


class EquivalenceResult(StatusModel):
    """Served outputs against the no-speculation baseline's at temperature 0 (spec.equivalence)."""

    prompts: int
    """Prompts compared."""
    identical: int
    """Prompts whose generated token ids are identical on both sides."""
    identical_fraction: float
    """identical / prompts."""
    defects: int
    """Prompts with a defect: a divergence where the baseline was clearly decided."""
    near_ties: int
    """Divergences, over all prompts, where the baseline's margin was below minMargin (numerical noise a verify forward and a decode step may differ by; not a defect). The check goes on past each from the baseline's prefix, at most 3 times per prompt."""
    tokens_compared: int | None = None
    """Generated tokens compared, up to and including each prompt's defect or fourth near-tie, else to its end."""
    min_margin: float
    """The margin a divergence needed to count as a defect (0 in the engines' deterministic modes)."""
    deterministic: bool | None = None
    """True when both servings ran the engines' deterministic mode, so every divergence counted."""
    seconds_per_prompt: float | None = None
    """Wall time of the check per prompt (both sides, one request each, one after the other)."""
    divergences: list[Divergence] | None = None
    """Every divergence found, defects first (the status keeps the first five; the full list is in the result ConfigMap)."""


class BenchmarkResult(StatusModel):
    """What the benchmark measured (copied from the Job's termination message)."""

    prompts: list[PromptResult] | None = None
    """Per-prompt results."""
    total_tokens: int | None = None
    """Tokens generated over the run."""
    total_seconds: float | None = None
    """Wall time of the run."""
    tokens_per_second: float | None = None
    """Output throughput: total tokens / total seconds."""
    ms_per_token: float | None = None
    """Mean time per output token in milliseconds."""
    ttft_seconds: float | None = None
    """Mean time to first token."""
    acceptance_rate: float | None = None
    """Accepted / drafted tokens over the run (deltas of the engine's counters)."""
    acceptance_length: float | None = None
    """Mean acceptance length over the run (tokens per verification step)."""
    draft_tokens: int | None = None
    """Tokens drafted over the run."""
    accepted_tokens: int | None = None
    """Draft tokens accepted over the run."""
    mean_draft_tokens: float | None = None
    """Tokens drafted per verification step (draftTokens over the engine's drafting steps), where the engine counts drafted tokens (vLLM); below k for families that draft fewer."""
    baseline_tokens_per_second: float | None = None
    """The baseline's throughput under the same settings."""
    speedup: float | None = None
    """tokensPerSecond / baselineTokensPerSecond."""
    per_position_acceptance: list[float] | None = None
    """Per draft position, how often it was accepted per verification step (vLLM; position 0 first)."""
    acceptance_unavailable: str | None = None
    """Why there are no acceptance figures although the engine was scraped ("<Reason>: <message>")."""
    itl_seconds: float | None = None
    """Mean inter-token latency after the first token."""
    concurrency: int | None = None
    """Streams of the level the top-level figures come from (the first level of the sweep)."""
    levels: list[LevelResult] | None = None
    """Every concurrency level of the sweep, in the order run."""
    crossover_concurrency: int | None = None
    """The lowest concurrency level whose speedup is below 1.0 (speculation stops paying); unset when none is. With a refined sweep, the upper end of crossover."""
    crossover: CrossoverBracket | None = None
    """The break-even bracket of a load sweep with a baseline: the sweep adds levels between the last level at or above 1.0x and the first below until they are within 10% (the added levels are at the end of levels)."""
    acceptance_by_prompt_length: list[LengthBucketResult] | None = None
    """With spec.promptLengthBuckets: acceptance per bucket of prompt length, shortest first (empty buckets left out)."""
    acceptance_by_category: list[CategoryResult] | None = None
    """With spec.acceptanceByCategory: acceptance, throughput and speedup per traffic category of the prompt set (categories without prompts left out)."""
    equivalence: EquivalenceResult | None = None
    """With spec.equivalence: the outputs against the baseline's."""
    truncated: bool | None = None
    """True when per-prompt (and maybe per-level) detail was left out to fit the 4096-byte termination message."""
    verdict: Literal["Passed", "Failed"] | None = None
    """Against spec.gate, when set."""
    verdict_message: str | None = None
    """Which threshold failed, with the numbers."""


class BenchmarkDisplayStatus(StatusModel):
    """The figures of kubectl get's columns as a person reads them (a printer column cannot format a number);
    written with the result they show."""

    tokens_per_second: str | None = None
    """result.tokensPerSecond with one decimal, e.g. "41.2"."""
    speedup: str | None = None
    """result.speedup, e.g. "1.68x"."""
    acceptance: str | None = None
    """result.acceptanceRate as a percentage, e.g. "15.0%"."""


class DrafterBenchmarkStatus(StatusModel):
    """Observed state of a DrafterBenchmark."""

    observed_generation: int | None = None
    """The metadata.generation the status reflects."""
    conditions: Annotated[list[Condition], Field(json_schema_extra=CONDITIONS_SCHEMA_EXTRA)] | None = None
    """Complete (the run finished and a result is recorded) and GatePassed."""
    state: Literal["Pending", "Running", "Succeeded", "Failed"] | None = None
    """One-word summary for kubectl get; the conditions carry the details."""
    drafter: str | None = None
    """The drafter of the benchmarked serving at run time, e.g. "eagle3" or "none"."""
    revision: str | None = None
    """The DrafterServing revision the run measured: the serving's active revision when the run started (a gate: the revision it gates). Unset when the serving swapped revisions during the run, or for an endpoint outside the operator. What minAcceptanceRate auto and drafter.dynamic fromBenchmark learn from."""
    num_speculative_tokens: int | None = None
    """Draft tokens per step of the benchmarked revision (vLLM numSpeculativeTokens, SGLang numSteps), when its spec says."""
    job_name: str | None = None
    """The Job running the benchmark."""
    start_time: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    """When the run started."""
    completion_time: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    """When the run finished."""
    result: BenchmarkResult | None = None
    """What was measured."""
    display: BenchmarkDisplayStatus | None = None
    """The Tok/s, SPEEDUP and ACCEPTANCE columns as text: status.result's figures, formatted."""
    result_config_map: str | None = None
    """A ConfigMap holding the full result (every prompt and level, key result.json); status.result keeps what fits the 4 KiB termination message."""
    comparison: Comparison | None = None
    """With spec.candidates: each candidate's run and, once all succeeded, the speedups side by side and the pick at each load."""


class DrafterBenchmark(KindModel):
    """A measured benchmark run: tokens per second, acceptance and speedup against a baseline."""

    kind_name: ClassVar[str] = "DrafterBenchmark"
    plural: ClassVar[str] = BENCHMARK_PLURAL
    singular: ClassVar[str] = "drafterbenchmark"
    short_names: ClassVar[tuple[str, ...]] = ("dbench",)
    printer_columns: ClassVar[tuple[dict[str, Any], ...]] = (
        {"name": "Serving", "type": "string", "jsonPath": ".spec.servingRef.name"},
        {"name": "Drafter", "type": "string", "jsonPath": ".status.drafter"},
        {"name": "Tok/s", "type": "string", "jsonPath": ".status.display.tokensPerSecond"},
        {"name": "Speedup", "type": "string", "jsonPath": ".status.display.speedup"},
        {"name": "Acceptance", "type": "string", "jsonPath": ".status.display.acceptance"},
        {"name": "Status", "type": "string", "jsonPath": ".status.state"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    )

    api_version: ApiGroupVersion = API_GROUP_VERSION
    """drafter.dev/v1alpha1"""
    kind: Literal["DrafterBenchmark"] = "DrafterBenchmark"
    """DrafterBenchmark"""
    spec: DrafterBenchmarkSpec
    """Desired run."""
    status: DrafterBenchmarkStatus | None = None
    """Observed state, written by the operator."""


# What benchmark_problems() checks, for docs/api.md (one line per check).
BENCHMARK_OPERATOR_CHECKS: tuple[str, ...] = (
    "spec.servingRef names an existing DrafterServing.",
    "spec.baseline.servingRef names an existing DrafterServing.",
    "the baseline DrafterServing has drafter.method none.",
    "the baseline DrafterServing serves the same target model as the benchmarked one.",
    "spec.maxTokens fits the serving's target.maxModelLen.",
    "spec.gate.minAcceptanceRate is only used against a speculating serving.",
    "each of spec.candidates names an existing, valid DrafterServing, checked as spec.servingRef is, before the first candidate is measured.",
)


def benchmark_problems(spec: DrafterBenchmarkSpec, *, serving: Any = None, baseline_serving: Any = None) -> list[str]:
    """Problems the apiserver cannot detect (they need other objects), each naming the field and the fix.

    `serving` and `baseline_serving` are the DrafterServingSpec objects that spec.servingRef and
    spec.baseline.servingRef name, or None when the caller could not find them.
    """
    problems: list[str] = []
    if spec.serving_ref is not None and serving is None:
        problems.append(f"spec.servingRef: DrafterServing {spec.serving_ref.name!r} not found in this namespace: create it or fix the name")
    baseline_ref = spec.baseline.serving_ref if spec.baseline else None
    if baseline_ref is not None:
        if baseline_serving is None:
            problems.append(f"spec.baseline.servingRef: DrafterServing {baseline_ref.name!r} not found in this namespace: create it or fix the name")
        else:
            if baseline_serving.drafter.method != "none":
                problems.append(
                    f"spec.baseline.servingRef: DrafterServing {baseline_ref.name!r} speculates (drafter.method "
                    f"{baseline_serving.drafter.method}): a baseline must have drafter.method none"
                )
            if serving is not None and baseline_serving.target.model != serving.target.model:
                problems.append(
                    f"spec.baseline.servingRef: DrafterServing {baseline_ref.name!r} serves {baseline_serving.target.model!r} "
                    f"but the benchmarked serving serves {serving.target.model!r}: a speedup needs the same target model"
                )
    if serving is not None:
        max_len = serving.target.max_model_len
        if max_len is not None and spec.max_tokens >= max_len:
            problems.append(
                f"spec.maxTokens {spec.max_tokens} does not fit the serving's target.maxModelLen {max_len}: lower maxTokens"
            )
        if spec.gate is not None and spec.gate.min_acceptance_rate is not None and serving.drafter.method == "none":
            problems.append(
                "spec.gate.minAcceptanceRate: the benchmarked serving has drafter.method none, so there is no acceptance "
                "rate: remove the threshold or benchmark a speculating serving"
            )
    return problems
