"""Acceptance verdicts: from windows of engine counters to a `Degraded` condition, with statistics.

Pure logic, no I/O; the per-serving loop feeds it scrapes (source ``engine``) or query results
(source ``prometheus``) and writes what it returns. Three parts:

- :class:`ScrapeHistory` keeps one replica's recent scrapes and answers "acceptance over the last
  ``window`` seconds" as the delta between the newest scrape and the newest one at least ``window``
  old (counter resets handled by ``engines.metrics.window``, like Prometheus' ``increase()``).
- :func:`combine` sums the replicas' windows: counter deltas are added and the rate and mean length
  recomputed from the sums, never averaged, so a busy replica weighs what it drafted.
- :func:`evaluate` is the state machine of the condition. One sample never decides:
  ``Degraded=True`` only after the rate (or the mean length) stayed below its threshold for ``for``;
  recovery needs it above threshold *plus a hysteresis* for ``for`` as well; too few draft tokens in
  the window is ``Unknown/InsufficientData``; a scrape that cannot be trusted is
  ``Unknown/MetricsUnavailable`` or ``Unknown/MetricsInvalid`` and never ``True``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace
from typing import Literal

from drafter_operator.engines import metrics as m
from drafter_operator.engines.replica_windows import combine
from drafter_operator.engines import metrics_verdicts as mv
from drafter_operator.acceptance import break_even as be
from drafter_operator.acceptance import message
# The reasons live with every sentence Degraded says (message.py); read here as a.LOW_RATE and so on.
from drafter_operator.acceptance.message import (
    BELOW_THRESHOLD,
    DRAFTER_LOST,
    HEALTHY,
    INSUFFICIENT_DATA,
    LOW_LENGTH,
    LOW_RATE,
    METRICS_INVALID,
    METRICS_UNAVAILABLE,
    NO_BENCHMARK,
    NOT_MONITORED,
)

Status = Literal["True", "False", "Unknown"]


#: Recovery needs the rate this far above its threshold (absolute), and the length this far above its
#: own, so a drafter hovering at the threshold does not flip the condition with every window.
RATE_HYSTERESIS = 0.02
LENGTH_HYSTERESIS = 0.05
#: A drafter whose first position accepts less than this while drafting is lost, whatever the thresholds: even a
#: poor drafter of the right model accepts well above it at position 0 (the seed's 15% drafter: about 40%).
LOST_FIRST_POSITION = 0.02


# --------------------------------------------------------------------------------------------------
# One replica's scrapes over time


class ScrapeHistory:
    """A replica's recent scrapes, enough to answer for the last ``keep_seconds``."""

    def __init__(self, keep_seconds: float) -> None:
        if keep_seconds <= 0:
            raise ValueError("keep_seconds must be positive")
        self.keep_seconds = keep_seconds
        self._scrapes: deque[tuple[float, m.SpecDecodeCounters]] = deque()

    def __len__(self) -> int:
        return len(self._scrapes)

    def add(self, at: float, counters: m.SpecDecodeCounters) -> None:
        """Record a scrape taken at ``at`` (seconds); older scrapes than needed are dropped."""
        if self._scrapes and at <= self._scrapes[-1][0]:
            raise ValueError(f"scrapes must arrive in time order ({at} after {self._scrapes[-1][0]})")
        self._scrapes.append((at, counters))
        # Keep the newest scrape that is at least keep_seconds old: it is the window's start.
        while len(self._scrapes) >= 2 and self._scrapes[1][0] <= at - self.keep_seconds:
            self._scrapes.popleft()

    def window(self, seconds: float, num_speculative_tokens: int | None = None) -> tuple[m.AcceptanceWindow, float] | None:
        """Acceptance over (up to) the last ``seconds``, and the seconds it really covers.

        None with fewer than two scrapes. Raises ``MetricsUnusable`` when the two scrapes do not make
        an honest window (see ``engines.metrics.window``), or when any two consecutive scrapes inside
        it do not: the figures are the difference of the window's ends, and a scrape that contradicts
        its neighbours (one counter gone back, a family missing) would otherwise bias them the whole
        time it is the window's start, unseen.
        """
        if len(self._scrapes) < 2:
            return None
        end, newest = self._scrapes[-1]
        first = 0
        for i, (at, _) in enumerate(self._scrapes):
            if at <= end - seconds:
                first = i
        inside = [counters for _, counters in list(self._scrapes)[first:]]
        for earlier, later in zip(inside, inside[1:]):
            m.window(earlier, later, num_speculative_tokens)
        start, oldest = self._scrapes[first]
        return m.load_seen(m.window(oldest, newest, num_speculative_tokens), inside), end - start


# --------------------------------------------------------------------------------------------------
# The verdict


@dataclass(frozen=True)
class Thresholds:
    """``spec.acceptance`` in numbers."""

    min_rate: float | None
    min_length: float | None
    min_draft_tokens: float
    window_seconds: float
    for_seconds: float
    #: The break-even threshold ``auto`` learned, cited by the verdict; None when the spec gives numbers.
    learned: be.BreakEven | None = None
    auto_rate: bool = False
    auto_length: bool = False
    #: Whether a lost drafter decides after one window (DrafterLost). The drift watch (drift.py) runs this same
    #: machine on its own floor and leaves it out: a lost drafter is Degraded's to say, and drift waits `for`.
    judge_lost: bool = True

    def __post_init__(self) -> None:
        if self.min_rate is None and self.min_length is None:
            raise ValueError("a threshold is needed: min_rate or min_length")
        if self.window_seconds <= 0 or self.for_seconds < 0 or self.min_draft_tokens < 0:
            raise ValueError("window must be positive, for and min_draft_tokens not negative")

    @classmethod
    def from_spec(cls, acceptance, learned: be.BreakEven | None = None) -> Thresholds:
        """From an ``api.serving.AcceptanceSpec``; an ``auto`` threshold takes ``learned`` (the break-even
        threshold of the active revision's benchmark). ValueError for ``auto`` without one: no threshold
        is ever made up (the serving decision reports ``NoBenchmark`` instead)."""
        from drafter_operator.api import parse_decimal, parse_duration

        auto_rate = acceptance.min_acceptance_rate == be.AUTO
        auto_length = acceptance.min_acceptance_length == be.AUTO
        if (auto_rate or auto_length) and learned is None:
            raise ValueError("an auto threshold needs a benchmark of the active revision")

        def threshold(text: str | None, auto: bool, learned_value) -> float | None:
            if auto:
                return learned_value()
            return parse_decimal(text) if text else None

        return cls(min_rate=threshold(acceptance.min_acceptance_rate, auto_rate, lambda: learned.min_rate),
                   min_length=threshold(acceptance.min_acceptance_length, auto_length, lambda: learned.min_length),
                   min_draft_tokens=acceptance.min_draft_tokens, window_seconds=parse_duration(acceptance.window),
                   for_seconds=parse_duration(acceptance.for_),
                   learned=learned if auto_rate or auto_length else None, auto_rate=auto_rate, auto_length=auto_length)


@dataclass(frozen=True)
class AcceptanceSample:
    """One look at a revision's acceptance: a window, or why there is none, at time ``at`` (seconds)."""

    at: float
    window: m.AcceptanceWindow | None = None
    #: (reason, message) when the metrics could not be read or trusted.
    problem: tuple[str, str] | None = None
    #: Per-replica windows (pod name -> window), when there are several.
    replicas: tuple[tuple[str, m.AcceptanceWindow], ...] = ()

    @classmethod
    def unusable(cls, at: float, error: mv.MetricsUnusable) -> AcceptanceSample:
        return cls(at=at, problem=(METRICS_INVALID, str(error.verdict)))

    @classmethod
    def unavailable(cls, at: float, message: str) -> AcceptanceSample:
        return cls(at=at, problem=(METRICS_UNAVAILABLE, message))


@dataclass(frozen=True)
class AcceptanceVerdict:
    """The condition after a sample, and what the next evaluation needs to remember."""

    status: Status
    reason: str
    message: str
    #: Since when the figures have been below threshold (None when they are not).
    below_since: float | None = None
    #: The last sample that was below threshold: evidence older than a window does not keep the `for`
    #: clock running (two low readings hours apart are not "below for 10 minutes").
    below_seen_at: float | None = None
    #: Since when the figures have been healthy again while Degraded (None when they are not).
    healthy_since: float | None = None
    #: The window the verdict was made on (for status.acceptance and the operator's metrics).
    window: m.AcceptanceWindow | None = None
    #: For an Unknown verdict: whether the last known verdict was Degraded. A gap in the data neither
    #: clears Degraded nor restarts the clocks, so the condition cannot flip faster than ``for``.
    was_degraded: bool = False

    @property
    def degraded(self) -> bool:
        return self.status == "True"

    @property
    def counts_as_degraded(self) -> bool:
        """Degraded now, or Degraded before the data went missing."""
        return self.degraded or (self.status == "Unknown" and self.was_degraded)

    def same_condition(self, other: AcceptanceVerdict | None) -> bool:
        """Whether the condition a user sees (status and reason) is unchanged."""
        return other is not None and (self.status, self.reason) == (other.status, other.reason)


def _lost(window: m.AcceptanceWindow) -> tuple[str, str] | None:
    first = window.first_position
    if first is None or first >= LOST_FIRST_POSITION:
        return None
    return DRAFTER_LOST, message.drafter_lost(first, LOST_FIRST_POSITION, bool(window.per_position))


def _below(window: m.AcceptanceWindow, t: Thresholds) -> tuple[str, str] | None:
    """(reason, comparison) when a figure is under its threshold, or the drafter is lost; a learned threshold
    says it is the break-even one and cites the benchmark it comes from."""
    def basis(auto: bool) -> str | None:
        return t.learned.basis() if auto and t.learned else None

    lost = _lost(window) if t.judge_lost else None
    if lost is not None:
        return lost

    if t.min_rate is not None and window.acceptance_rate is not None and window.acceptance_rate < t.min_rate:
        return LOW_RATE, message.below_rate(t.min_rate, t.auto_rate, basis(t.auto_rate))
    if t.min_length is not None and window.mean_acceptance_length is not None \
            and window.mean_acceptance_length < t.min_length:
        return LOW_LENGTH, message.below_length(t.min_length, basis(t.auto_length))
    return None


def _healthy(window: m.AcceptanceWindow, t: Thresholds) -> bool:
    """Above every threshold by the hysteresis (recovery must be clear, not a wobble at the line)."""
    if t.min_rate is not None and (window.acceptance_rate is None or window.acceptance_rate < t.min_rate + RATE_HYSTERESIS):
        return False
    if t.min_length is not None and (window.mean_acceptance_length is None
                                     or window.mean_acceptance_length < t.min_length + LENGTH_HYSTERESIS):
        return False
    return True


def drafted(window: m.AcceptanceWindow) -> float:
    """Draft tokens in the window (SGLang: verify calls x k when k is known, else verify calls)."""
    return window.draft_tokens if window.draft_tokens is not None else window.drafts


def evaluate(previous: AcceptanceVerdict | None, sample: AcceptanceSample, t: Thresholds) -> AcceptanceVerdict:
    """The ``Degraded`` condition after ``sample``; pure and deterministic."""
    previous = previous or AcceptanceVerdict(status="Unknown", reason=INSUFFICIENT_DATA, message=message.NOT_MEASURED_MESSAGE)
    # Never Degraded on data that cannot be trusted or on too little of it; what was known is kept.
    carried = {"below_since": previous.below_since, "healthy_since": previous.healthy_since,
               "was_degraded": previous.counts_as_degraded, "below_seen_at": previous.below_seen_at}
    if sample.problem is not None:
        reason, why = sample.problem
        return AcceptanceVerdict(status="Unknown", reason=reason, message=why, **carried)
    window = sample.window
    if window is None or drafted(window) < t.min_draft_tokens:
        if window is not None and drafted(window) > 0 and _below(window, t) is None:
            # Too little for a verdict, but what there is looks healthy: evidence against a running `for`.
            carried.update(below_since=None, below_seen_at=None)
        seen = f"{drafted(window):.0f}" if window is not None else "no"
        return AcceptanceVerdict(status="Unknown", reason=INSUFFICIENT_DATA, window=window, **carried,
                       message=message.too_few(seen, t.window_seconds, t.min_draft_tokens))
    low = _below(window, t)
    numbers = message.figures(window, t.window_seconds, low)

    if previous.counts_as_degraded:
        if low is not None or not _healthy(window, t):
            reason = low[0] if low else (previous.reason if previous.degraded
                                         else LOW_RATE if t.min_rate is not None else LOW_LENGTH)
            return AcceptanceVerdict(status="True", reason=reason, message=message.still_low(numbers, low is not None), window=window,
                           below_since=previous.below_since, below_seen_at=sample.at if low else previous.below_seen_at)
        healthy_since = previous.healthy_since if previous.healthy_since is not None else sample.at
        if sample.at - healthy_since >= t.for_seconds:
            return AcceptanceVerdict(status="False", reason=HEALTHY, message=message.recovered(numbers), window=window)
        pending_reason = previous.reason if previous.degraded else LOW_RATE if t.min_rate is not None else LOW_LENGTH
        return AcceptanceVerdict(status="True", reason=pending_reason, window=window, below_since=previous.below_since,
                       healthy_since=healthy_since,
                       message=message.recovering(numbers, sample.at - healthy_since, t.for_seconds))

    if low is None:
        return AcceptanceVerdict(status="False", reason=HEALTHY, message=numbers, window=window)
    # The clock runs only on continuous evidence: a gap longer than one window without a low reading
    # (no data, untrusted data) starts it again.
    gap = previous.below_seen_at is not None and sample.at - previous.below_seen_at > t.window_seconds
    below_since = previous.below_since if previous.below_since is not None and not gap else sample.at
    # A lost drafter is no slow day: one window of evidence decides it, without waiting a longer `for`.
    needed = min(t.for_seconds, t.window_seconds) if low[0] == DRAFTER_LOST else t.for_seconds
    if sample.at - below_since >= needed:
        return AcceptanceVerdict(status="True", reason=low[0], message=numbers, window=window,
                       below_since=below_since, below_seen_at=sample.at)
    return AcceptanceVerdict(status="False", reason=BELOW_THRESHOLD, window=window, below_since=below_since,
                   below_seen_at=sample.at,
                   message=message.pending(numbers, sample.at - below_since, needed))


def with_replicas(sample: AcceptanceSample, windows: dict[str, m.AcceptanceWindow],
                  num_speculative_tokens: int | None = None) -> AcceptanceSample:
    """The sample of a revision from its replicas' windows (combined, and kept per replica)."""
    if not windows:
        return replace(sample, window=None)
    combined = combine(list(windows.values()), num_speculative_tokens)
    return replace(sample, window=combined, replicas=tuple(sorted(windows.items())))


# --------------------------------------------------------------------------------------------------
# status.acceptance

#: Replicas are listed in status when their rates differ by more than this (else the total says it all).
REPLICA_SPREAD_TO_LIST = 0.01


def _count(value: float | None) -> int | None:
    return None if value is None else int(round(value))


def _figure(value: float | None, digits: int) -> float | None:
    """Rounded for status (the printer column shows the number as stored): 4 digits of a rate is a
    hundredth of a percentage point, far below what a window can tell apart."""
    return None if value is None else round(value, digits)


def status_block(sample: AcceptanceSample, source: str, window_seconds: float, window_end: str) -> dict | None:
    """``status.acceptance`` (camelCase, for a status patch) from a sample with a window; else None."""
    window = sample.window
    if window is None:
        return None
    block: dict = {"rate": _figure(window.acceptance_rate, 4), "meanLength": _figure(window.mean_acceptance_length, 3),
                   "draftTokens": _count(window.draft_tokens), "drafts": _count(window.drafts),
                   "windowSeconds": int(window_seconds), "windowEnd": window_end, "source": source}
    rates = [w.acceptance_rate for _, w in sample.replicas if w.acceptance_rate is not None]
    if len(sample.replicas) > 1 and rates and max(rates) - min(rates) > REPLICA_SPREAD_TO_LIST:
        block["replicas"] = [{"pod": pod, "rate": _figure(w.acceptance_rate, 4),
                              "meanLength": _figure(w.mean_acceptance_length, 3),
                              "draftTokens": _count(w.draft_tokens)} for pod, w in sample.replicas]
    return block
