"""The break-even acceptance threshold a benchmark implies (``spec.acceptance.minAcceptanceLength: auto``
and ``minAcceptanceRate: auto``). Pure, no I/O.

The model is ``engines/speedup.py``'s: a verification step costs one target step plus ``k`` draft steps
of relative cost ``c`` and yields ``E`` tokens on average (the mean acceptance length, bonus token
included), so the speedup over plain decoding is ``S = E / (1 + k c)``. A benchmark that measured ``S``
(against a no-speculation baseline) and ``E`` with ``k`` draft tokens per step therefore gives

- the draft cost ``c = (E / S - 1) / k`` (in target steps per drafted token), and
- the break-even mean acceptance length ``L* = 1 + k c`` (which is ``E / S``): below it, speculation
  is slower than not speculating at all.

``L*`` is ``E / S`` whatever ``k`` is, so ``minAcceptanceLength: auto`` holds for every family: the live
length is read from the same counters the benchmark read (vLLM: ``1 + accepted / drafts``, where
``spec_decode_num_drafts`` counts only the steps that drafted; SGLang: generated tokens per verify call).

``auto`` marks the serving Degraded below ``L* (1 + margin)``; for ``minAcceptanceRate`` the same
threshold is expressed per drafted token, ``rate = (L - 1) / k``. That is what the engines' rate means
only where every drafting step drafts ``k`` tokens (:func:`rate_problem` says for which families it is
not). Where a family drafts fewer (suffix, n-gram, a DSpark block cut short) and the engine counts the
tokens it drafted (vLLM), ``k`` becomes the benchmark's mean draft ``d`` (drafted tokens per drafting
step, ``lastBenchmark.meanDraftTokens``): a step costs ``1 + d c`` and yields ``1 + rate d``, so
speculation pays exactly where ``rate > c`` whatever is drafted, and the rate threshold is
``(L* (1 + margin) - 1) / d``. Otherwise ``minAcceptanceRate: auto`` is refused with the reason, never a
made-up threshold.

The seed: ``k = 5``, ``E = 1.75``, ``S = 0.66`` give ``c = 0.3303`` and ``L* = 2.652``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from drafter_operator import engines
from drafter_operator.engines import speedup as model

AUTO = "auto"

#: ``auto`` asks for this much more than break-even (relative). A benchmark's speedup is measured over a
#: handful of prompts and moves by a few percent between runs, and a drafter within 5% of break-even
#: costs GPU memory and latency variance for no throughput: flagging it is the point of the watch.
BREAK_EVEN_MARGIN = 0.05


@dataclass(frozen=True)
class BenchmarkFigures:
    """What a benchmark of the serving's drafter measured (``status.lastBenchmark``)."""

    name: str
    speedup: float  # against a no-speculation baseline
    acceptance_length: float  # E: tokens per verification step, bonus token included
    num_speculative_tokens: int  # k: draft tokens per verification step
    #: d: tokens actually drafted per drafting step, for a family that drafts fewer than k (else None: k)
    mean_draft_tokens: float | None = None

    @property
    def drafts_per_step(self) -> float:
        return self.num_speculative_tokens if self.mean_draft_tokens is None else self.mean_draft_tokens

    def problem(self) -> str | None:
        """Why these figures cannot give a threshold, or None."""
        k, s, e, d = self.num_speculative_tokens, self.speedup, self.acceptance_length, self.mean_draft_tokens
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            return f"it has no number of draft tokens per step (k = {k!r})"
        if d is not None and not (math.isfinite(d) and 0 < d <= k):
            return f"its mean draft {d!r} tokens per step is outside (0, {k}] for k={k}"
        if not math.isfinite(s) or s <= 0:
            return f"its speedup {s!r} is not a positive number"
        limit = self.drafts_per_step + 1.0
        if not math.isfinite(e) or not 1.0 <= e <= limit:
            drafted = f"k={k}" if d is None else f"a mean draft of {d:g}"
            return f"its mean acceptance length {e!r} is outside [1, {limit:g}] for {drafted}"
        return None


def draft_cost(acceptance_length: float, speedup: float, k: int) -> float:
    """``c = (E / S - 1) / k``, clamped at 0: a benchmark faster than its acceptance allows (noise, or a
    baseline measured under other load) says the drafts were free, not that they gave time back."""
    return max(0.0, model.draft_cost_from_benchmark(acceptance_length, speedup, k))


def rate_problem(engine: str | None, method: str | None) -> str | None:
    """Why a length threshold cannot be expressed as a rate the engine's figures for this family compare with,
    or None (every drafting step drafts k tokens, or the rate is derived with k: SGLang's block drafters)."""
    why = engines.engine(engine).RATE_NOT_PER_K_DRAFTS.get(method or "") if engine in engines.ENGINES else None
    if why is None:
        return None
    return (f"{why}, so {engine}'s acceptance rate for {method} is not (length - 1) / k and a rate threshold "
            f"learned from a length would not compare with it; use minAcceptanceLength: auto (lengths compare)")


def rate_for_length(length: float, k: float) -> float:
    """A mean-length threshold expressed per drafted token: ``(L - 1) / k`` accepted per drafted token (for a
    family whose :func:`rate_problem` is None; else ``k`` is the mean draft per step)."""
    if k <= 0:
        raise ValueError("a rate needs k > 0 draft tokens per step")
    return (length - 1.0) / k


def rate_learnable_from_mean_draft(engine: str | None, method: str | None) -> bool:
    """A family whose steps draft fewer than k, on an engine that counts what it drafted: the rate threshold
    follows from the benchmark's mean draft per step."""
    return engine in engines.ENGINES and engines.engine(engine).RATE_PER_DRAFTED_TOKEN \
        and rate_problem(engine, method) is not None


@dataclass(frozen=True)
class BreakEven:
    """The threshold ``auto`` learned from one benchmark."""

    benchmark: BenchmarkFigures
    revision: str | None  # the revision the benchmark measured
    draft_cost: float
    break_even_length: float
    margin: float = BREAK_EVEN_MARGIN

    @property
    def min_length(self) -> float:
        return self.break_even_length * (1.0 + self.margin)

    @property
    def min_rate(self) -> float:
        return rate_for_length(self.min_length, self.benchmark.drafts_per_step)

    def basis(self) -> str:
        """Where the threshold comes from, for the Degraded message."""
        b = self.benchmark
        drafted = "" if b.mean_draft_tokens is None else f" (mean draft {b.mean_draft_tokens:.2f})"
        return (f"break-even {self.break_even_length:.2f} + {self.margin:.0%}, from benchmark {b.name}: "
                f"{b.speedup:.2f}x at length {b.acceptance_length:.2f}, k={b.num_speculative_tokens}{drafted}, "
                f"draft cost {self.draft_cost:.2f}")


def learn(figures: BenchmarkFigures, revision: str | None = None, margin: float = BREAK_EVEN_MARGIN) -> BreakEven:
    """The break-even threshold of a benchmark's figures; ValueError when they cannot give one."""
    problem = figures.problem()
    if problem:
        raise ValueError(f"benchmark {figures.name}: {problem}")
    if margin < 0:
        raise ValueError(f"the margin must be >= 0, got {margin!r}")
    k = figures.drafts_per_step
    cost = draft_cost(figures.acceptance_length, figures.speedup, k)
    return BreakEven(benchmark=figures, revision=revision, draft_cost=cost,
                     break_even_length=model.break_even_length(k, cost), margin=margin)


def uses_auto(acceptance) -> bool:
    """Whether an ``api.serving.AcceptanceSpec`` asks for a learned threshold."""
    return acceptance is not None and AUTO in (acceptance.min_acceptance_rate, acceptance.min_acceptance_length)


def from_last_benchmark(last: dict | None, revisions: tuple[str, ...], family: tuple[str | None, str | None] = (None, None),
                        rate_auto: bool = False) -> BreakEven | str:
    """The threshold ``status.lastBenchmark`` gives for the active revision, or why there is none (a
    sentence for the ``NoBenchmark`` message). ``revisions``: the active revision first, then any other
    that runs the same drafter (``controllers.serving.revisions.measured_as``). Only a benchmark of one of them
    counts: the draft cost belongs to one drafter, k and engine. ``family``: the active revision's (engine,
    method); with ``rate_auto`` (minAcceptanceRate: auto) a family whose rate is not per drafted token
    gets the reason instead of a threshold."""
    revision = revisions[0] if revisions else None
    problem = rate_problem(*family) if rate_auto else None
    by_mean_draft = problem is not None and rate_learnable_from_mean_draft(*family)
    if problem and not by_mean_draft:
        return f"minAcceptanceRate: auto cannot be learned: {problem}"
    how = ("run a DrafterBenchmark against this serving with a baseline (baseline.tokensPerSecond, "
           "servingRef or benchmarkRef, so it measures a speedup), or let a gated swap record one "
           "(spec.swap.gate with a baseline)")
    if not last:
        return f"no benchmark of this serving yet ({how}); auto never makes a threshold up"
    name = last.get("name") or "(unnamed)"
    if revision is None or last.get("revision") not in revisions:
        return (f"the last benchmark ({name}) measured revision {last.get('revision') or 'unknown'}, not the active "
                f"revision {revision}: a threshold belongs to one drafter ({how})")
    if last.get("speedup") is None:
        return f"benchmark {name} measured no speedup: it ran without a baseline ({how})"
    if last.get("acceptanceLength") is None:
        return f"benchmark {name} measured no mean acceptance length (the engine's counters were not read)"
    if by_mean_draft and last.get("meanDraftTokens") is None:
        return (f"benchmark {name} recorded no mean draft (tokens drafted per step), which a rate threshold for "
                f"{family[1]} needs ({family[1]} drafts fewer than k): benchmark the serving again, or use "
                "minAcceptanceLength: auto")
    figures = BenchmarkFigures(name=name, speedup=float(last["speedup"]),
                               acceptance_length=float(last["acceptanceLength"]),
                               num_speculative_tokens=last.get("numSpeculativeTokens"),
                               mean_draft_tokens=float(last["meanDraftTokens"]) if by_mean_draft else None)
    problem = figures.problem()
    if problem:
        return f"benchmark {name} cannot give a threshold: {problem}"
    return learn(figures, last["revision"])


def status_block(acceptance, learned: BreakEven | None) -> dict | None:
    """``status.acceptanceThreshold`` (camelCase): the thresholds in force and, for ``auto``, how they
    were learned. None when there are none (``auto`` without a benchmark)."""
    if acceptance is None:
        return None
    auto_rate, auto_length = acceptance.min_acceptance_rate == AUTO, acceptance.min_acceptance_length == AUTO
    if (auto_rate or auto_length) and learned is None:
        return None

    def spec_number(text: str | None) -> float | None:
        return float(text) if text is not None else None

    block = {"source": f"benchmark {learned.benchmark.name}" if auto_rate or auto_length else "spec",
             "minAcceptanceRate": round(learned.min_rate, 4) if auto_rate else spec_number(acceptance.min_acceptance_rate),
             "minAcceptanceLength": round(learned.min_length, 4) if auto_length
             else spec_number(acceptance.min_acceptance_length)}
    if auto_rate or auto_length:
        block.update(draftCost=round(learned.draft_cost, 4), breakEvenLength=round(learned.break_even_length, 4),
                     margin=learned.margin, revision=learned.revision)
    return {k: v for k, v in block.items() if v is not None}
