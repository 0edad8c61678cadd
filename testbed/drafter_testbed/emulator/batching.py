"""The batching model: how long one engine step takes for a batch, and what that does to speculation.

Pure functions, no I/O. ``engines/speedup.py`` is the single-stream model; this module extends it to
a continuous-batching engine where every running request advances by one step at a time and a step's
duration depends on what the whole batch computes in it.

One engine step with ``B`` decoding requests, ``k`` draft tokens per request, ``v`` tokens verified
per request (``v = k + 1`` for a chain; SGLang's ``--speculative-num-draft-tokens`` for a tree), a
draft width ``w`` (tokens each draft step computes per request: 1 for a chain, the ``topk`` of a tree)
and ``P`` prompt tokens prefilled in the same step costs, in milliseconds::

    step(B, P) = T x max(1, B v / N_t)            target forward: a roofline in tokens
               + f x c x T x max(1, B w / N_d)    f draft forwards: the same roofline for the drafter
               + 1000 x P / R_p                   prefill of newly admitted prompts

where ``f`` is the number of draft forwards a step runs, which depends on the drafter family
(:func:`speculation_for`): ``k`` for the sequential drafters (EAGLE, EAGLE-3, MTP, a draft model: one
forward per drafted token), 1 for the block drafters (DFlash, DSpark: the whole block of ``k`` tokens in
one forward, ``w`` = the block's queries), 0 for prompt lookup (n-gram, suffix decoding: a match in
the context or a suffix tree, no model forward).

with the parameters (``drafter_testbed/data/emulator-profiles.yaml``, section ``calibration``):

- ``T`` (``targetStepMs``, 12.12 ms): the floor of one target forward step, the time it takes whatever
  the number of tokens as long as the step is bound by reading weights and by fixed per-step costs
  (kernel launches, tensor-parallel all-reduces). 82.5 tok/s single stream.
- ``c`` (``draftCost``, 0.33): one draft step at batch 1, relative to ``T``. It is an *effective*
  cost measured at batch 1 (the seed's E = 1.75 at k = 5 gave 0.66x), so it also holds whatever extra
  the verification of ``k + 1`` tokens costs over a one-token step at batch 1.
- ``N_t`` (``computeKneeTokens``, 32): tokens per target step at which the step leaves its floor and
  grows in proportion to the tokens it computes. For a dense model the hardware roofline puts the
  knee at hundreds of tokens; for a large mixture-of-experts target the effective knee is far lower,
  since each token added to a decode step routes to experts no other token in the step touched, so the
  weights read grow with the tokens (Kimi-K2: 8 of 384 experts per token; 32 tokens touch about half of
  them). 32 is *calibrated*, not derived: it puts the good drafter's break-even near 20 concurrent
  streams and its speedup at 32 streams near -32 %, as the published crossovers do (docs/emulator-model.md).
- ``N_d`` (``draftKneeTokens``, 32): the same knee for one draft step (``B w`` tokens). The drafter
  runs on the same GPUs with the same parallelism, so the same knee is assumed. With ``N_d <= N_t``
  the speedup never rises again with the batch (see :func:`speedup_at`).
- ``R_p`` (``prefillTokensPerSecond``, 20,000): prompt tokens per second the target prefills on top
  of a step. Prefill is compute-bound at any useful prompt length, so it is charged per token rather
  than through the decode knee; prompts admitted together add up, so time to first token grows with
  the prompt and with the number of prompts arriving at once.

Consequences, at ``B`` concurrent streams:

- throughput ``B E / step(B, 0)`` tokens per second, with ``E`` the mean acceptance length
  (``speedup.mean_acceptance_length``; 1 without speculation);
- at ``B = 1`` (and any ``B`` with ``B v <= N_t`` and ``B w <= N_d``) a step costs
  ``T (1 + f c)`` exactly: the single-stream model (``f = k``) is unchanged;
- without speculation throughput grows linearly up to ``N_t`` streams and then saturates at
  ``N_t / T`` (2,640 tok/s); it never decreases;
- the speedup over no speculation at the same concurrency is ``E T max(1, B / N_t) / step(B, 0)``:
  flat while the verify batch fits under the knee, then falling; for ``B >= max(N_t, N_d)`` it is
  the constant ``E / (v + f c w N_t / N_d)``, below 1 for every drafter since ``E <= k + 1 = v`` for a
  chain (a prompt-lookup drafter, ``f = 0``, tends to ``E / v``: still below 1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from drafter_operator import engines
from drafter_operator.engines import speedup
from drafter_operator.families import FAMILIES, Family

#: Tokens per decode step at which the seed's target (Kimi-K2.5 INT4, TP 8) leaves its step-time floor.
DEFAULT_COMPUTE_KNEE_TOKENS = 32.0


def _spellings(family: Family) -> set[str]:
    """A family's names, lowercased, as the API and each engine spell it (vLLM's speculative_config method,
    SGLang's algorithm): the emulator is handed any of them."""
    names = {family.method}
    for module in engines.ENGINES.values():
        names |= {spelling for method, spelling in module.METHOD_SPELLINGS.items() if method == family.method}
    return {name.lower() for name in names}


#: Families that draft by looking the context up (vLLM ngram, ngram_gpu, suffix; SGLang NGRAM; the API's
#: ngramGpu): no model forward, so no draft cost (vllm/v1/spec_decode/ngram_proposer.py, suffix_decoding.py).
PROMPT_LOOKUP_METHODS = frozenset(name for f in FAMILIES if f.drafting == "lookup" for name in _spellings(f))
#: Block drafters and the queries their one forward computes per request beyond the k drafts
#: (Family.block_extra_queries): DFlash runs a 1 + k query block; DSpark k queries, the anchor being its first
#: prediction (sample_from_anchor, v1/worker/gpu/spec_decode/dspark/speculator.py:49-54).
BLOCK_METHODS = {name: f.block_extra_queries for f in FAMILIES if f.drafting == "block" for name in _spellings(f)}

#: Per-token acceptance: one probability for every position, or one per position (conditional on the
#: earlier ones accepted; speedup.curve_acceptance_length).
Acceptance = float | Sequence[float]

#: The same knee for one draft step.
DEFAULT_DRAFT_KNEE_TOKENS = 32.0
#: Prompt tokens per second prefilled on top of a step.
DEFAULT_PREFILL_TOKENS_PER_SECOND = 20_000.0


@dataclass(frozen=True)
class StepCosts:
    """The parameters of the step-time model (see the module docstring for their meaning)."""

    target_step_ms: float = speedup.DEFAULT_TARGET_STEP_MS
    draft_cost: float = speedup.DEFAULT_DRAFT_COST
    compute_knee_tokens: float = DEFAULT_COMPUTE_KNEE_TOKENS
    draft_knee_tokens: float = DEFAULT_DRAFT_KNEE_TOKENS
    prefill_tokens_per_second: float = DEFAULT_PREFILL_TOKENS_PER_SECOND

    def __post_init__(self) -> None:
        for name in ("target_step_ms", "compute_knee_tokens", "draft_knee_tokens", "prefill_tokens_per_second"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
        if not (math.isfinite(self.draft_cost) and self.draft_cost >= 0):
            raise ValueError(f"draft_cost must be a finite number >= 0, got {self.draft_cost!r}")


@dataclass(frozen=True)
class Speculation:
    """What one request computes per step: ``k`` drafted tokens, ``verify`` verified tokens, ``width``
    tokens per draft forward and ``draft_forwards`` forwards (None: ``k``, one per drafted token)."""

    k: int = 0
    verify_tokens: float | None = None
    draft_width: int = 1
    draft_forwards: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.k, int) or isinstance(self.k, bool) or self.k < 0:
            raise ValueError(f"k must be an integer >= 0, got {self.k!r}")
        if self.verify_tokens is not None and self.verify_tokens < 1:
            raise ValueError(f"verify_tokens must be >= 1, got {self.verify_tokens!r}")
        if self.draft_width < 1:
            raise ValueError(f"draft_width must be >= 1, got {self.draft_width!r}")
        if self.draft_forwards is not None and (isinstance(self.draft_forwards, bool) or self.draft_forwards < 0):
            raise ValueError(f"draft_forwards must be >= 0, got {self.draft_forwards!r}")

    @property
    def forwards(self) -> int:
        """Draft forwards per step: 0 without drafting, else ``draft_forwards`` (default ``k``)."""
        if self.k == 0:
            return 0
        return self.k if self.draft_forwards is None else self.draft_forwards

    @property
    def verified_per_request(self) -> float:
        """Tokens the target verifies per request and step: ``k + 1`` for a chain (1 without drafting)."""
        if self.k == 0:
            return 1
        return self.verify_tokens if self.verify_tokens is not None else self.k + 1


NO_SPECULATION = Speculation()


def speculation_for(method: str, k: int, verify_tokens: float | None = None, draft_width: int = 1) -> Speculation:
    """What a step of ``method`` (any engine's or the API's spelling) drafting ``k`` tokens computes.

    Sequential drafters keep one forward per drafted token (and a tree's ``draft_width``); a block
    drafter runs one forward over its block whatever ``k``; prompt lookup runs none."""
    name = method.lower()
    if k == 0:
        return NO_SPECULATION
    if name in PROMPT_LOOKUP_METHODS:
        return Speculation(k, verify_tokens, 1, draft_forwards=0)
    if name in BLOCK_METHODS:
        return Speculation(k, verify_tokens, k + BLOCK_METHODS[name], draft_forwards=1)
    return Speculation(k, verify_tokens, draft_width)


def mean_length(a: Acceptance, k: int) -> float:
    """Tokens per verification step for a constant acceptance or a per-position curve."""
    if isinstance(a, (int, float)):
        return speedup.mean_acceptance_length(float(a), k)
    return speedup.curve_acceptance_length(tuple(a), k)


def _roofline(tokens: float, knee: float) -> float:
    """Step time in units of the floor: 1 while memory-bound, ``tokens / knee`` once compute-bound."""
    return max(1.0, tokens / knee)


def target_ms(batch: float, spec: Speculation, costs: StepCosts) -> float:
    """One target forward over ``batch`` decoding requests: ``T max(1, B v / N_t)``."""
    return costs.target_step_ms * _roofline(batch * spec.verified_per_request, costs.compute_knee_tokens)


def draft_ms(batch: float, spec: Speculation, costs: StepCosts) -> float:
    """The ``f`` draft forwards of one step: ``f c T max(1, B w / N_d)``."""
    if spec.forwards == 0 or batch == 0:
        return 0.0
    return spec.forwards * costs.draft_cost * costs.target_step_ms * _roofline(batch * spec.draft_width,
                                                                              costs.draft_knee_tokens)


def prefill_ms(prompt_tokens: int, costs: StepCosts) -> float:
    """Prefill of ``prompt_tokens`` on top of a step: ``1000 P / R_p``."""
    if prompt_tokens < 0:
        raise ValueError(f"prompt_tokens must be >= 0, got {prompt_tokens!r}")
    return 1000.0 * prompt_tokens / costs.prefill_tokens_per_second


def step_ms(batch: float, spec: Speculation, costs: StepCosts, prefill_tokens: int = 0) -> float:
    """One engine step: ``batch`` requests decode (verify) while ``prefill_tokens`` are prefilled.

    A step that only prefills still pays the target floor ``T`` once (one forward reads the weights);
    prefill tokens mixed into a decode step share that step's floor (chunked prefill). An empty step
    costs nothing.
    """
    if batch < 0:
        raise ValueError(f"batch must be >= 0, got {batch!r}")
    if batch == 0 and prefill_tokens == 0:
        return 0.0
    target = target_ms(batch, spec, costs) if batch else costs.target_step_ms
    return target + draft_ms(batch, spec, costs) + prefill_ms(prefill_tokens, costs)


def first_token_ms(prompt_tokens: int, costs: StepCosts, running: int = 0,
                   spec: Speculation = NO_SPECULATION, other_prompt_tokens: int = 0) -> float:
    """Time to first token for a request admitted into an idle slot: the step that prefills it.

    ``running`` requests decoding in the same step and ``other_prompt_tokens`` of prompts admitted
    with it make that step longer.
    """
    return step_ms(running, spec, costs, prompt_tokens + other_prompt_tokens)


def tokens_per_second(batch: int, a: Acceptance, spec: Speculation, costs: StepCosts) -> float:
    """Steady-state aggregate decode throughput of ``batch`` streams (no prefill)."""
    if batch <= 0:
        return 0.0
    length = mean_length(a, spec.k)
    return batch * length * 1000.0 / step_ms(batch, spec, costs)


def per_stream_tokens_per_second(batch: int, a: Acceptance, spec: Speculation, costs: StepCosts) -> float:
    """What each of ``batch`` streams sees: ``E / step`` (the inverse of its time per output token)."""
    return tokens_per_second(batch, a, spec, costs) / batch


def speedup_at(batch: int, a: Acceptance, spec: Speculation, costs: StepCosts) -> float:
    """Throughput with speculation over throughput without it, both at ``batch`` concurrent streams."""
    return tokens_per_second(batch, a, spec, costs) / tokens_per_second(batch, 0.0, NO_SPECULATION, costs)


def asymptotic_speedup(a: Acceptance, spec: Speculation, costs: StepCosts) -> float:
    """The speedup once both the target and the drafter are compute-bound (large batches)."""
    length = mean_length(a, spec.k)
    draft = spec.forwards * costs.draft_cost * spec.draft_width * costs.compute_knee_tokens / costs.draft_knee_tokens
    return length / (spec.verified_per_request + draft)


def crossover_streams(a: Acceptance, spec: Speculation, costs: StepCosts, max_batch: int = 4096) -> float | None:
    """The (fractional) number of concurrent streams at which the speedup falls to 1.0.

    ``None`` when it never does up to ``max_batch``; ``0.0`` when speculation does not pay even for a
    single stream. Between integers the speedup is continuous in the batch, so bisection applies.
    """
    length = mean_length(a, spec.k)

    def excess(b: float) -> float:
        # The step model is continuous in the batch, so it is evaluated at real-valued batches here.
        return length * step_ms(b, NO_SPECULATION, costs) / step_ms(b, spec, costs) - 1.0

    if excess(1.0) <= 0:
        return 0.0
    if excess(float(max_batch)) > 0:
        return None
    lo, hi = 1.0, float(max_batch)
    for _ in range(100):
        mid = (lo + hi) / 2.0
        if excess(mid) > 0:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


def saturation_streams(costs: StepCosts) -> float:
    """Concurrent streams above which throughput without speculation stops growing (``N_t``)."""
    return costs.compute_knee_tokens
