"""Speculative-decoding counters read from an engine's ``/metrics``, and the window math on them.

Engine-specific metric names and the parsers that fill :class:`SpecDecodeCounters` live in
``engines/vllm.py`` and ``engines/sglang.py``; this module holds what both share:

- parsing Prometheus text with ``prometheus_client.parser`` (never by hand) and summing or averaging
  samples by name and labels;
- :class:`SpecDecodeCounters`, one scrape's worth of cumulative counters (plus SGLang's gauges);
- :func:`window`, which turns two scrapes into an :class:`AcceptanceWindow`: acceptance rate and mean
  acceptance length over the interval between them, from counter *deltas*, never lifetime totals.
  A counter that went backwards means the engine restarted; like Prometheus' ``increase()`` the
  window then counts the new value from zero and says so (``reset``).

Definitions (see engines.md):
- vLLM: acceptance rate = accepted / draft tokens; mean acceptance length = 1 + accepted / drafts.
- SGLang: mean acceptance length = delta(generation_tokens_total) / delta(spec_verify_calls_total)
  (generation tokens include each request's first, prefill-produced token, so this reads a little
  high on short requests, exactly as SGLang's own per-request ``spec_accept_length`` does). SGLang
  has no draft-token counter: with ``k`` draft tokens per verification the rate is derived as
  ``(length - 1) / k`` and the drafted tokens as ``k x verify calls`` (``estimated``); without ``k``
  the window falls back to the ``sglang:spec_accept_rate`` gauge, an interval value from the last
  scrape (``rate_source == "gauge"``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample


class MetricsParseError(ValueError):
    """The text is not valid Prometheus exposition."""


# --------------------------------------------------------------------------------------------------
# Parsing and selecting samples
# --------------------------------------------------------------------------------------------------

def parse_samples(text: str) -> list[Sample]:
    """Every sample in a Prometheus text exposition (``prometheus_client.parser``)."""
    try:
        return [sample for family in text_string_to_metric_families(text) for sample in family.samples]
    except (ValueError, TypeError, IndexError) as exc:  # the parser raises these on bad input
        raise MetricsParseError(f"cannot parse Prometheus text: {exc}") from exc


def select(samples: Iterable[Sample], name: str, labels: Mapping[str, str] | None = None) -> list[Sample]:
    """Samples called ``name`` whose labels include ``labels`` (a label set to None is not checked)."""
    wanted = {key: value for key, value in (labels or {}).items() if value is not None}
    return [
        sample for sample in samples
        if sample.name == name and all(sample.labels.get(key) == value for key, value in wanted.items())
    ]


def sum_samples(samples: Iterable[Sample], name: str, labels: Mapping[str, str] | None = None) -> float | None:
    """Sum of the matching samples (e.g. a counter over engines or ``is_streaming``); None if absent."""
    matched = select(samples, name, labels)
    if not matched:
        return None
    return math.fsum(sample.value for sample in matched)


def mean_samples(samples: Iterable[Sample], name: str, labels: Mapping[str, str] | None = None) -> float | None:
    """Mean of the matching samples (a gauge reported by several ranks); None if absent."""
    matched = [s for s in select(samples, name, labels) if not math.isnan(s.value)]
    if not matched:
        return None
    return math.fsum(sample.value for sample in matched) / len(matched)


# --------------------------------------------------------------------------------------------------
# One scrape
# --------------------------------------------------------------------------------------------------

EngineName = Literal["vllm", "sglang"]


@dataclass(frozen=True)
class SpecDecodeCounters:
    """Cumulative speculative-decoding counters from one scrape of one engine.

    ``drafts`` counts verification steps (vLLM ``spec_decode_num_drafts``, SGLang
    ``spec_verify_calls``). Fields an engine does not export are None: SGLang has no draft-token or
    accepted-token counters, vLLM has no acceptance gauges. ``speculative`` says whether the engine
    exports speculative-decoding metrics at all (vLLM only registers them when speculation is on).
    """

    engine: EngineName
    speculative: bool
    drafts: float | None = None
    draft_tokens: float | None = None
    accepted_tokens: float | None = None
    accepted_per_position: tuple[float, ...] = ()
    generation_tokens: float | None = None
    prompt_tokens: float | None = None
    # SGLang scheduler gauges (interval values, not counters).
    accept_length_gauge: float | None = None
    accept_rate_gauge: float | None = None
    num_steps_gauge: float | None = None
    num_draft_tokens_gauge: float | None = None

    @property
    def num_speculative_tokens(self) -> int | None:
        """Draft tokens per verification step, when the scrape reveals it."""
        if self.accepted_per_position:
            return len(self.accepted_per_position)
        if self.num_steps_gauge:
            return int(self.num_steps_gauge)
        return None


# --------------------------------------------------------------------------------------------------
# Window math
# --------------------------------------------------------------------------------------------------

def counter_delta(before: float | None, after: float | None) -> tuple[float, bool]:
    """Increase of a counter between two scrapes, and whether it was reset in between.

    A missing series counts as zero (labelled counters appear on their first increment).
    """
    b = before or 0.0
    a = after or 0.0
    if a < b:
        return a, True
    return a - b, False


def acceptance_rate(accepted_tokens: float, draft_tokens: float) -> float | None:
    """Accepted / drafted tokens; None without drafted tokens."""
    if draft_tokens <= 0:
        return None
    return accepted_tokens / draft_tokens


def mean_acceptance_length(accepted_tokens: float, drafts: float) -> float | None:
    """Tokens per verification step, bonus token included: ``1 + accepted / drafts`` (vLLM)."""
    if drafts <= 0:
        return None
    return 1.0 + accepted_tokens / drafts


def tokens_per_verification(generation_tokens: float, verify_calls: float) -> float | None:
    """SGLang's acceptance length: generated tokens / verification calls."""
    if verify_calls <= 0:
        return None
    return generation_tokens / verify_calls


RateSource = Literal["counters", "derived", "gauge", "none"]


@dataclass(frozen=True)
class AcceptanceWindow:
    """Acceptance over the interval between two scrapes."""

    engine: EngineName
    drafts: float
    draft_tokens: float | None
    accepted_tokens: float | None
    generation_tokens: float
    acceptance_rate: float | None
    mean_acceptance_length: float | None
    rate_source: RateSource
    #: True when ``draft_tokens`` was derived (SGLang: k x verify calls), not counted.
    estimated: bool = False
    #: True when a counter went backwards (engine restart): the window counts from the restart.
    reset: bool = False
    #: Per-position unconditional acceptance, ``accepted_per_pos[i] / drafts`` (vLLM).
    per_position: tuple[float, ...] = ()

    @property
    def has_data(self) -> bool:
        return self.drafts > 0

    def as_dict(self) -> dict[str, object]:
        return {
            "engine": self.engine,
            "drafts": self.drafts,
            "draftTokens": self.draft_tokens,
            "acceptedTokens": self.accepted_tokens,
            "generationTokens": self.generation_tokens,
            "acceptanceRate": self.acceptance_rate,
            "meanAcceptanceLength": self.mean_acceptance_length,
            "rateSource": self.rate_source,
            "estimated": self.estimated,
            "reset": self.reset,
            "perPosition": list(self.per_position),
        }


def window(before: SpecDecodeCounters, after: SpecDecodeCounters,
           num_speculative_tokens: int | None = None) -> AcceptanceWindow:
    """Acceptance between two scrapes of the same engine (``after`` is the later one).

    ``num_speculative_tokens`` (k) lets an SGLang window derive its rate from counters; without it
    the scrape's ``spec_num_steps`` gauge is used when present, else the rate gauge.
    """
    if before.engine != after.engine:
        raise ValueError(f"cannot compare a {before.engine} scrape with a {after.engine} scrape")
    drafts, reset = counter_delta(before.drafts, after.drafts)
    generation, r = counter_delta(before.generation_tokens, after.generation_tokens)
    reset = reset or r

    if after.engine == "vllm":
        draft_tokens, r1 = counter_delta(before.draft_tokens, after.draft_tokens)
        accepted, r2 = counter_delta(before.accepted_tokens, after.accepted_tokens)
        reset = reset or r1 or r2
        positions = []
        for i, value in enumerate(after.accepted_per_position):
            previous = before.accepted_per_position[i] if i < len(before.accepted_per_position) else 0.0
            delta, r3 = counter_delta(previous, value)
            reset = reset or r3
            positions.append(delta / drafts if drafts > 0 else 0.0)
        if reset:
            # A restart: the previous values belong to another process; count from zero.
            drafts, draft_tokens, accepted = after.drafts or 0.0, after.draft_tokens or 0.0, after.accepted_tokens or 0.0
            generation = after.generation_tokens or 0.0
            positions = [v / drafts if drafts > 0 else 0.0 for v in after.accepted_per_position]
        rate = acceptance_rate(accepted, draft_tokens)
        return AcceptanceWindow(
            engine="vllm", drafts=drafts, draft_tokens=draft_tokens, accepted_tokens=accepted,
            generation_tokens=generation, acceptance_rate=rate,
            mean_acceptance_length=mean_acceptance_length(accepted, drafts),
            rate_source="counters" if rate is not None else "none",
            reset=reset, per_position=tuple(positions),
        )

    # SGLang
    if reset:
        drafts, generation = after.drafts or 0.0, after.generation_tokens or 0.0
    length = tokens_per_verification(generation, drafts)
    k = num_speculative_tokens or after.num_speculative_tokens
    draft_tokens = accepted = rate = None
    source: RateSource = "none"
    estimated = False
    if length is not None and k:
        draft_tokens = drafts * k
        accepted = max(generation - drafts, 0.0)
        rate = min(max((length - 1.0) / k, 0.0), 1.0)
        source, estimated = "derived", True
    elif after.accept_rate_gauge is not None and after.speculative:
        rate, source = after.accept_rate_gauge, "gauge"
    return AcceptanceWindow(
        engine="sglang", drafts=drafts, draft_tokens=draft_tokens, accepted_tokens=accepted,
        generation_tokens=generation, acceptance_rate=rate, mean_acceptance_length=length,
        rate_source=source, estimated=estimated, reset=reset,
    )
