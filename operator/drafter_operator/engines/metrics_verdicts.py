"""Why an engine's ``/metrics`` (or a pair of scrapes) cannot be trusted: the limits a body must keep, the
verdict reasons, and the checks that raise them (pure). The lowest room of the metrics code: the body
reader (``metrics_body.py``), the counters and window math (``metrics.py``) and both acceptance
sources raise these verdicts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from drafter_operator.constants import Engine

#: Largest /metrics body read, in bytes (UTF-8). A real vLLM or SGLang body is tens to hundreds of
#: KiB; 4 MiB leaves room for many LoRA adapters or data-parallel ranks while keeping a parse below
#: a few seconds and a few tens of MB.
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
#: Most draft positions accepted in ``..._per_pos`` (vLLM pre-creates one series per position 0..k-1).
DEFAULT_MAX_POSITIONS = 64
#: Counters count tokens and steps: whole numbers no larger than a double holds exactly.
MAX_COUNT = float(2**53)

# --------------------------------------------------------------------------------------------------
# Verdicts
# --------------------------------------------------------------------------------------------------


class UnusableReason(StrEnum):
    """Why a scrape (or a window between two scrapes) cannot be trusted. Values are CamelCase,
    ready to be a Kubernetes condition reason."""

    EMPTY = "Empty"                                   # no samples at all
    NOT_ENGINE_METRICS = "NotEngineMetrics"           # samples, but none of this engine (or model)
    UNPARSEABLE = "Unparseable"                       # not Prometheus text exposition
    TOO_LARGE = "TooLarge"                            # body over the size cap
    NON_FINITE = "NonFinite"                          # NaN or +-Inf where a number is read
    NEGATIVE_COUNTER = "NegativeCounter"
    NOT_A_COUNT = "NotACount"                         # a token/step counter that is not a whole number
    OUT_OF_RANGE = "OutOfRange"                       # a gauge outside its domain (e.g. a rate > 1)
    DUPLICATE_SERIES = "DuplicateSeries"              # the same name and labels twice
    BAD_POSITION = "BadPosition"                      # a position label that is not an integer
    TOO_MANY_POSITIONS = "TooManyPositions"           # a position beyond the cap
    MISSING_SERIES = "MissingSeries"                  # some spec-decode counters without the others
    ACCEPTED_EXCEEDS_DRAFTED = "AcceptedExceedsDrafted"
    COUNTER_DECREASE = "CounterDecrease"              # a decrease that is not a clean reset
    INCONSISTENT_COUNTERS = "InconsistentCounters"    # counts no engine produces (see check_steps_consistent)


Labels = tuple[tuple[str, str], ...]
SeriesKey = tuple[str, Labels]


@dataclass(frozen=True)
class ScrapeVerdict:
    """What was wrong with a scrape: a reason code and a message naming the metric and labels."""

    reason: UnusableReason
    message: str
    metric: str | None = None
    labels: Labels = ()

    def as_dict(self) -> dict[str, object]:
        return {"reason": str(self.reason), "message": self.message, "metric": self.metric,
                "labels": dict(self.labels)}

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}"


class MetricsUnusable(ValueError):
    """Raised instead of returning numbers that cannot be trusted; carries the :class:`ScrapeVerdict`."""

    def __init__(self, verdict: ScrapeVerdict):
        super().__init__(str(verdict))
        self.verdict = verdict

    @property
    def reason(self) -> UnusableReason:
        return self.verdict.reason


class MetricsParseError(MetricsUnusable):
    """The text is not valid Prometheus exposition (reason ``Unparseable``)."""


def unusable(reason: UnusableReason, message: str, metric: str | None = None, labels: Labels = ()) -> MetricsUnusable:
    """The exception for a verdict (``raise unusable(...)``); parse errors get their own subclass."""
    verdict = ScrapeVerdict(reason, message, metric, labels)
    return MetricsParseError(verdict) if reason is UnusableReason.UNPARSEABLE else MetricsUnusable(verdict)


def clip(text: str, limit: int = 80) -> str:
    """Bodies are untrusted: never copy an unbounded piece of one into a message."""
    return text if len(text) <= limit else text[:limit] + "..."


def series_name(name: str, labels: Labels) -> str:
    """``name{key="value",...}`` as Prometheus prints it, label values clipped."""
    if not labels:
        return name
    return name + "{" + ",".join(f'{key}="{clip(value, 40)}"' for key, value in labels) + "}"


# --------------------------------------------------------------------------------------------------
# Counts
# --------------------------------------------------------------------------------------------------

def count_problem(value: float) -> UnusableReason | None:
    """Why ``value`` is not a count of tokens or steps (a whole number in [0, 2**53]), or None."""
    if not math.isfinite(value):
        return UnusableReason.NON_FINITE
    if value < 0:
        return UnusableReason.NEGATIVE_COUNTER
    if value > MAX_COUNT or not float(value).is_integer():
        return UnusableReason.NOT_A_COUNT
    return None


def check_accepted_within_drafted(where: str, drafts: float | None, draft_tokens: float | None,
                                  accepted: float | None, per_position: tuple[float, ...] = ()) -> None:
    """Accepted tokens never exceed drafted ones; no position accepts more often than there were drafts."""
    if accepted is not None and accepted > (draft_tokens or 0.0):
        raise unusable(UnusableReason.ACCEPTED_EXCEEDS_DRAFTED,
                       f"{where}: {accepted:g} accepted tokens but {draft_tokens or 0:g} draft tokens")
    for i, value in enumerate(per_position):
        if value > (drafts or 0.0):
            raise unusable(UnusableReason.ACCEPTED_EXCEEDS_DRAFTED,
                           f"{where}: position {i} accepted {value:g} times in {drafts or 0:g} drafts")


def check_steps_consistent(where: str, engine: Engine, drafts: float, draft_tokens: float | None,
                           generation_tokens: float, k: int | None) -> None:
    """Counts the engine cannot produce, which a plausible-looking number (a scaled or garbled counter)
    would otherwise turn into a low acceptance: vLLM counts a draft only when it proposed tokens, at most
    k of them (``drafts <= draft tokens <= k x drafts``); every SGLang verification emits at least one
    token (``verify calls <= generation tokens``, both counted when a request finishes)."""
    if engine == "vllm" and draft_tokens is not None and drafts > 0:
        if draft_tokens < drafts or (k and draft_tokens > k * drafts):
            bound = f"1 to {k}" if k else "at least 1"
            raise unusable(UnusableReason.INCONSISTENT_COUNTERS,
                           f"{where}: {draft_tokens:g} draft tokens in {drafts:g} drafts, not {bound} per draft")
    if engine == "sglang" and generation_tokens < drafts:
        raise unusable(UnusableReason.INCONSISTENT_COUNTERS,
                       f"{where}: {generation_tokens:g} generated tokens in {drafts:g} verification calls, "
                       "fewer than one per call")
