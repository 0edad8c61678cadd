"""The speculative-decoding model: pure functions, no I/O.

With per-token acceptance ``a`` (each draft token is accepted with probability ``a``, independently,
and verification stops at the first rejection) and ``k`` draft tokens per verification step:

- expected tokens per verification step (the *mean acceptance length*, bonus token included)
  ``E = 1 + a + a^2 + ... + a^k = (1 - a^(k+1)) / (1 - a)``;
- expected *acceptance rate* (accepted draft tokens / drafted tokens)
  ``(E - 1) / k = (a - a^(k+1)) / (k (1 - a))``, which is not ``a``;
- one verification step costs one target step plus ``k`` draft steps of relative cost ``c``,
  so the speedup over plain decoding is ``E / (1 + k c)``; speculation pays only while
  ``E > 1 + k c`` (the break-even acceptance length);
- a benchmark that measures ``E`` and the speedup gives the draft cost back:
  ``c = (E / speedup - 1) / k``.

Calibration (docs/emulator-model.md): a target step of 12.12 ms (82.5 tok/s single stream) and
``c = 0.33`` reproduce the seed: the vLLM drafter with ``k = 5`` and ``a = 0.432`` gives 15.0 %
acceptance, ``E = 1.75`` and 0.66x.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

#: Single-stream decode step of the seed's target (Kimi-K2.5 INT4, TP 8, Blackwell): 82.5 tok/s.
DEFAULT_TARGET_STEP_MS = 12.12
#: Cost of one draft step relative to one target step, derived from the seed (E 1.75 -> 0.66x at k 5).
DEFAULT_DRAFT_COST = 0.33

_BISECT_ITERATIONS = 100


def _check_k(k: int) -> None:
    if not isinstance(k, int) or isinstance(k, bool) or k < 0:
        raise ValueError(f"the number of draft tokens k must be an integer >= 0, got {k!r}")


def _check_probability(name: str, value: float) -> None:
    if not (0.0 <= value <= 1.0) or math.isnan(value):
        raise ValueError(f"{name} must lie in [0, 1], got {value!r}")


def mean_acceptance_length(a: float, k: int) -> float:
    """Expected tokens per verification step, ``(1 - a^(k+1)) / (1 - a)``; ``k + 1`` at ``a = 1``."""
    _check_probability("per-token acceptance a", a)
    _check_k(k)
    # The finite geometric sum is exact at a = 1 and numerically stable near it.
    return math.fsum(a**i for i in range(k + 1))


def position_curve(a: float, k: int, decay: float = 1.0) -> tuple[float, ...]:
    """Per-position conditional acceptance ``a, a d, a d^2, ...`` (``d = decay``) for ``k`` positions.

    Position ``i`` is accepted with probability ``a d^i`` given that every earlier one was: drafters
    predict the first token best and get worse further out (EAGLE, DFlash and DSpark all report
    per-position acceptance that decays; docs/emulator-model.md). ``decay = 1`` is the i.i.d. model."""
    _check_probability("per-token acceptance a", a)
    _check_probability("per-position decay", decay)
    _check_k(k)
    return tuple(a * decay**i for i in range(k))


def curve_acceptance_length(curve: Sequence[float], k: int) -> float:
    """Expected tokens per verification step with per-position conditional acceptances ``curve``.

    ``1 + c0 + c0 c1 + ... + c0...c(k-1)``; positions past the curve's end repeat its last value
    (an empty curve accepts nothing). Equals :func:`mean_acceptance_length` for a constant curve."""
    _check_k(k)
    for value in curve:
        _check_probability("a position's acceptance", value)
    total, reach = 1.0, 1.0
    for i in range(k):
        reach *= curve[min(i, len(curve) - 1)] if curve else 0.0
        total += reach
    return total


def acceptance_rate(a: float, k: int) -> float:
    """Expected accepted / drafted tokens, ``(a - a^(k+1)) / (k (1 - a))``."""
    if k == 0:
        raise ValueError("the acceptance rate is undefined without draft tokens (k = 0)")
    return (mean_acceptance_length(a, k) - 1.0) / k


def speedup(a: float, k: int, draft_cost: float = DEFAULT_DRAFT_COST) -> float:
    """Single-stream speedup over plain decoding, ``E / (1 + k c)``."""
    if draft_cost < 0:
        raise ValueError(f"the draft cost c must be >= 0, got {draft_cost!r}")
    return mean_acceptance_length(a, k) / (1.0 + k * draft_cost)


def step_seconds(k: int, draft_cost: float = DEFAULT_DRAFT_COST,
                 target_step_ms: float = DEFAULT_TARGET_STEP_MS) -> float:
    """Duration of one verification step: one target step plus ``k`` draft steps."""
    _check_k(k)
    return target_step_ms / 1000.0 * (1.0 + k * draft_cost)


def tokens_per_second(a: float, k: int, draft_cost: float = DEFAULT_DRAFT_COST,
                      target_step_ms: float = DEFAULT_TARGET_STEP_MS) -> float:
    """Steady-state single-stream decode throughput."""
    return mean_acceptance_length(a, k) / step_seconds(k, draft_cost, target_step_ms)


def break_even_length(k: float, draft_cost: float = DEFAULT_DRAFT_COST) -> float:
    """The mean acceptance length at which speculation is exactly as fast as plain decoding. ``k``: tokens drafted
    per step, a mean where steps draft fewer than the configured k (suffix, n-gram)."""
    if isinstance(k, bool) or not isinstance(k, (int, float)) or not k >= 0:
        raise ValueError(f"the tokens drafted per step must be a number >= 0, got {k!r}")
    return 1.0 + k * draft_cost


def break_even_rate(k: int, draft_cost: float = DEFAULT_DRAFT_COST) -> float:
    """The acceptance rate at which speculation is exactly as fast as plain decoding (``c``)."""
    if k == 0:
        raise ValueError("the acceptance rate is undefined without draft tokens (k = 0)")
    return (break_even_length(k, draft_cost) - 1.0) / k


def draft_cost_from_benchmark(mean_length: float, measured_speedup: float, k: int) -> float:
    """The draft cost ``c`` a benchmark implies: ``c = (E / speedup - 1) / k``."""
    if k <= 0:
        raise ValueError("a draft cost needs k >= 1")
    if measured_speedup <= 0:
        raise ValueError(f"the speedup must be > 0, got {measured_speedup!r}")
    return (mean_length / measured_speedup - 1.0) / k


def _bisect_increasing(f, target: float) -> float:
    """The ``a`` in [0, 1] where the increasing function ``f`` reaches ``target``."""
    lo, hi = 0.0, 1.0
    for _ in range(_BISECT_ITERATIONS):
        mid = (lo + hi) / 2.0
        if f(mid) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


def per_token_acceptance_from_rate(rate: float, k: int) -> float:
    """Solve ``acceptance_rate(a, k) == rate`` for ``a`` (monotonic, so bisection)."""
    _check_probability("acceptance rate", rate)
    if k == 0:
        raise ValueError("the acceptance rate is undefined without draft tokens (k = 0)")
    if k == 1:
        return rate
    return _bisect_increasing(lambda a: acceptance_rate(a, k), rate)


def per_token_acceptance_from_length(mean_length: float, k: int) -> float:
    """Solve ``mean_acceptance_length(a, k) == mean_length`` for ``a``."""
    _check_k(k)
    if k == 0 or not (1.0 <= mean_length <= k + 1.0):
        raise ValueError(f"a mean acceptance length for k = {k} lies in [1, {k + 1}], got {mean_length!r}")
    return _bisect_increasing(lambda a: mean_acceptance_length(a, k), mean_length)


@dataclass(frozen=True)
class Prediction:
    """What the model predicts for one configuration (``k = 0``: no speculation)."""

    per_token_acceptance: float
    num_speculative_tokens: int
    draft_cost: float
    target_step_ms: float
    mean_acceptance_length: float
    acceptance_rate: float | None
    speedup: float
    tokens_per_second: float
    baseline_tokens_per_second: float
    step_ms: float

    def as_dict(self) -> dict[str, float | int | None]:
        return {
            "perTokenAcceptance": self.per_token_acceptance,
            "numSpeculativeTokens": self.num_speculative_tokens,
            "draftCost": self.draft_cost,
            "targetStepMs": self.target_step_ms,
            "stepMs": self.step_ms,
            "meanAcceptanceLength": self.mean_acceptance_length,
            "acceptanceRate": self.acceptance_rate,
            "speedup": self.speedup,
            "tokensPerSecond": self.tokens_per_second,
            "baselineTokensPerSecond": self.baseline_tokens_per_second,
        }


def predict(a: float, k: int, draft_cost: float = DEFAULT_DRAFT_COST,
            target_step_ms: float = DEFAULT_TARGET_STEP_MS) -> Prediction:
    """Every model figure for per-token acceptance ``a`` and ``k`` draft tokens."""
    return Prediction(
        per_token_acceptance=a,
        num_speculative_tokens=k,
        draft_cost=draft_cost,
        target_step_ms=target_step_ms,
        mean_acceptance_length=mean_acceptance_length(a, k),
        acceptance_rate=acceptance_rate(a, k) if k > 0 else None,
        speedup=speedup(a, k, draft_cost),
        tokens_per_second=tokens_per_second(a, k, draft_cost, target_step_ms),
        baseline_tokens_per_second=1000.0 / target_step_ms,
        step_ms=step_seconds(k, draft_cost, target_step_ms) * 1000.0,
    )
