"""Speculative-decoding counters read from an engine's ``/metrics``, and the window math on them.

Engine-specific metric names and the parsers that fill :class:`SpecDecodeCounters` live in
``engines/vllm.py`` and ``engines/sglang.py``; this module holds what both share:

- in ``metrics_verdicts.py``: ``ScrapeVerdict`` and ``MetricsUnusable``, why a body (or a pair of scrapes)
  cannot be trusted, with a reason code and a message naming the metric and labels that were wrong;
- in ``metrics_body.py``: ``read_series``, a bounded reader of Prometheus text (``prometheus_client.parser``,
  never by hand) that refuses oversized, empty, unparseable and foreign bodies, duplicated series and
  non-finite values, and keeps only the series a parser asked for, and the checked accessors
  (``count_total``, ``gauge_mean``, ``position_totals``) that turn those series into numbers or verdicts;
- :class:`SpecDecodeCounters`, one scrape's worth of cumulative counters (plus SGLang's gauges);
- :func:`window`, which turns two scrapes into an :class:`AcceptanceWindow`: acceptance rate and mean
  acceptance length over the interval between them, from counter *deltas*, never lifetime totals.

Why verdicts are raised rather than returned: every caller (the window math, the benchmark client,
the emulator checks) wants counters and has nothing useful to do with half of them, so the happy
path stays a plain value; a returned ``counters | verdict`` union would need a check at every call
site, and a forgotten one fails later and far away (or, worse, passes nonsense on as a number,
which is the bug this module exists to prevent). A caller that can go on without acceptance catches
:class:`MetricsUnusable` and reports ``exc.verdict``; one that cannot simply lets it propagate.

Counter resets follow Prometheus' ``increase()``: when counters went backwards the engine restarted
and the window counts the later scrape from zero (``reset``). What ``increase()`` cannot see is
handled here as a verdict: if some counters went down while others that were already non-zero went
up, the two scrapes are not "one process, then a fresh one" and no window between them is honest
(``CounterDecrease``). Rates are therefore always within [0, 1], counts never negative, and nothing
is NaN.

Definitions (vLLM 0.33.0 ``vllm/v1/spec_decode/metrics.py``; SGLang 0.5.23
``sglang/srt/observability/metrics_collector.py``):
- vLLM: acceptance rate = accepted / draft tokens; mean acceptance length = 1 + accepted / drafts.
- SGLang: mean acceptance length = delta(generation_tokens_total) / delta(spec_verify_calls_total)
  (generation tokens include each request's first, prefill-produced token, so this reads a little
  high on short requests, exactly as SGLang's own per-request ``spec_accept_length`` does). SGLang
  has no draft-token counter: with ``k`` draft tokens per verification the rate is derived as
  ``(length - 1) / k``, clamped to [0, 1] because of that prefill token, and the drafted tokens as
  ``k x verify calls`` (``estimated``); without ``k`` the window falls back to the
  ``sglang:spec_accept_rate`` gauge, an interval value from the last scrape (``rate_source ==
  "gauge"``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from drafter_operator.engines.metrics_verdicts import (
    DEFAULT_MAX_POSITIONS,
    SeriesKey,
    UnusableReason,
    check_accepted_within_drafted,
    check_steps_consistent,
    count_problem,
    series_name,
    unusable,
)
from drafter_operator.constants import Engine

# --------------------------------------------------------------------------------------------------
# One scrape
# --------------------------------------------------------------------------------------------------

_COUNT_FIELDS = ("drafts", "draft_tokens", "accepted_tokens", "generation_tokens", "prompt_tokens")
#: The gauges' domains [0, high]. SGLang 0.5.23 sets them to 0 when nothing was measured, never NaN
#: (``scheduler_components/metrics_reporter.py``); a step or draft count is at most the position cap
#: (+1: ``speculative_num_draft_tokens`` counts the root token).
GAUGE_RANGES: dict[str, float] = {
    "accept_length_gauge": DEFAULT_MAX_POSITIONS + 1.0,
    "accept_rate_gauge": 1.0,
    "num_steps_gauge": float(DEFAULT_MAX_POSITIONS),
    "num_draft_tokens_gauge": DEFAULT_MAX_POSITIONS + 1.0,
    # Requests one scheduler runs (vLLM per engine core, SGLang per rank): far above any --max-num-seqs.
    "running_requests": 1_000_000.0,
}


@dataclass(frozen=True)
class SpecDecodeCounters:
    """Cumulative speculative-decoding counters from one scrape of one engine.

    ``drafts`` counts verification steps (vLLM ``spec_decode_num_drafts``, SGLang
    ``spec_verify_calls``). Fields an engine does not export are None: SGLang has no draft-token or
    accepted-token counters, vLLM has no acceptance gauges. ``speculative`` says whether the engine
    exports speculative-decoding metrics at all (vLLM only registers them when speculation is on).

    Every instance is trustworthy: construction refuses non-finite or negative values, a rate gauge
    outside [0, 1] and more accepted than drafted tokens (:class:`MetricsUnusable`), so counters
    built by hand obey the same rules as parsed ones.
    """

    engine: Engine
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
    #: Requests running in one scheduler's batch at the scrape (vLLM ``num_requests_running``, SGLang
    #: ``num_running_reqs``), averaged over engine cores or ranks: the batch size a k-per-batch schedule keys on.
    running_requests: float | None = None
    #: The counters' individual series ``((name, labels), value)`` when parsed from a body; empty when
    #: built by hand. :func:`window` uses them to find resets per series.
    series: tuple[tuple[SeriesKey, float], ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        counts = [(name, getattr(self, name)) for name in _COUNT_FIELDS]
        counts += [(f"accepted_per_position[{i}]", v) for i, v in enumerate(self.accepted_per_position)]
        for name, value in counts:
            problem = None if value is None else count_problem(value)
            if problem is not None:
                raise unusable(problem, f"{self.engine} {name} is {value}, not a count of tokens or steps")
        if len(self.accepted_per_position) > DEFAULT_MAX_POSITIONS:
            raise unusable(UnusableReason.TOO_MANY_POSITIONS, f"{len(self.accepted_per_position)} positions")
        for name, high in GAUGE_RANGES.items():
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and 0.0 <= value <= high):
                reason = UnusableReason.NON_FINITE if not math.isfinite(value) else UnusableReason.OUT_OF_RANGE
                raise unusable(reason, f"{self.engine} {name} is {value}, outside [0, {high:g}]")
        if self.num_steps_gauge is not None and not float(self.num_steps_gauge).is_integer():
            raise unusable(UnusableReason.OUT_OF_RANGE, f"{self.engine} num_steps_gauge is {self.num_steps_gauge}")
        check_accepted_within_drafted("this scrape", self.drafts, self.draft_tokens, self.accepted_tokens,
                                      self.accepted_per_position)

    @property
    def num_speculative_tokens(self) -> int | None:
        """Draft tokens per verification step, when the scrape reveals it."""
        if self.accepted_per_position:
            return len(self.accepted_per_position)
        return sglang_draft_tokens(self.num_steps_gauge, self.num_draft_tokens_gauge)


def sglang_draft_tokens(num_steps: float | None, num_draft_tokens: float | None) -> int | None:
    """k from SGLang 0.5.23's ``spec_num_steps`` and ``spec_num_draft_tokens`` gauges: the steps, except at zero or
    one step, where it is the verify window minus the anchor. SGLang forces DFLASH and DSPARK to one step while their
    block drafts ``num_draft_tokens - 1`` tokens (srt/arg_groups/speculative_hook.py 334-349 and 386 for DFLASH,
    757-772 and 838 for DSPARK); a one-step EAGLE chain has a window of 2, so the rule gives it 1 as before; a
    one-step tree (topk > 1) gets the tree's drafts, SGLang's own rate denominator (srt/managers/
    scheduler_components/metrics_reporter.py 974-982)."""
    if num_steps is None or not float(num_steps).is_integer() or num_steps < 0:
        return None
    window = int(num_draft_tokens) if num_draft_tokens and float(num_draft_tokens).is_integer() else 0
    if num_steps == 0:
        # NGRAM with fewer draft tokens than its BFS breadth: SGLang resolves 0 steps (draft tokens // breadth,
        # speculative_hook.py 1324-1329) and drafts its tree all the same; its rate denominator is then the window
        # minus the anchor (metrics_reporter.py 975-977). Without speculation both gauges are 0 (518-524): None.
        return window - 1 if window >= 2 else None
    if num_steps == 1 and window > 2:
        return window - 1
    return int(num_steps)


# --------------------------------------------------------------------------------------------------
# Window math
# --------------------------------------------------------------------------------------------------

def acceptance_rate(accepted_tokens: float, draft_tokens: float) -> float | None:
    """Accepted / drafted tokens, within [0, 1]; None without drafted tokens."""
    if draft_tokens <= 0:
        return None
    return min(max(accepted_tokens / draft_tokens, 0.0), 1.0)


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


def _aggregate_series(c: SpecDecodeCounters) -> dict[SeriesKey, float]:
    """Hand-built counters have no series: compare their fields as if each were one series."""
    out: dict[SeriesKey, float] = {(name, ()): getattr(c, name) or 0.0 for name in _COUNT_FIELDS}
    out.update({("accepted_per_position", (("position", str(i)),)): v for i, v in enumerate(c.accepted_per_position)})
    return out


def detect_reset(before: SpecDecodeCounters, after: SpecDecodeCounters) -> bool:
    """Whether the counters were reset between the scrapes (an engine restart), per series.

    True when some series went down and none that was non-zero went up: the later scrape comes from
    a fresh process. Raises ``CounterDecrease`` when some went down while others grew from a
    non-zero value, which no single restart explains (Prometheus' ``increase()`` would silently mix
    the two processes' counts).
    """
    if before.series and after.series:
        b, a = dict(before.series), dict(after.series)
    else:
        b, a = _aggregate_series(before), _aggregate_series(after)
    decreased = [key for key in b.keys() | a.keys() if a.get(key, 0.0) < b.get(key, 0.0)]
    if not decreased:
        return False
    grew = [key for key, old in b.items() if old > 0 and a.get(key, 0.0) > old]
    if grew:
        down, up = min(decreased), min(grew)
        raise unusable(UnusableReason.COUNTER_DECREASE,
                       f"{series_name(*down)} went from {b.get(down, 0.0):g} to {a.get(down, 0.0):g} while "
                       f"{series_name(*up)} went from {b[up]:g} to {a[up]:g}: not a clean restart",
                       down[0], down[1])
    return True


RateSource = Literal["counters", "derived", "gauge", "none"]


@dataclass(frozen=True)
class AcceptanceWindow:
    """Acceptance over the interval between two scrapes."""

    engine: Engine
    drafts: float
    draft_tokens: float | None
    accepted_tokens: float | None
    generation_tokens: float
    acceptance_rate: float | None
    mean_acceptance_length: float | None
    rate_source: RateSource
    #: True when ``draft_tokens`` was derived (SGLang: k x verify calls), not counted.
    estimated: bool = False
    #: True when the counters went backwards (engine restart): the window counts from the restart.
    reset: bool = False
    #: Per-position unconditional acceptance, ``accepted_per_pos[i] / drafts`` (vLLM).
    per_position: tuple[float, ...] = ()
    #: The fewest requests any scrape inside the window saw running in a batch (None when the engine
    #: exported no such gauge): the largest k a batch-size schedule allowed in the window is its k there.
    fewest_running: float | None = None
    #: The most draft tokens one step drafted in the window, as far as the engine tells: vLLM's counted
    #: mean (draft tokens / drafts, an average of its steps), SGLang's highest k its gauges showed at a scrape.
    drafted_per_step: float | None = None

    @property
    def has_data(self) -> bool:
        return self.drafts > 0

    @property
    def first_position(self) -> float | None:
        """What the drafter's first position accepted: vLLM's per-position counter, else (SGLang) the accepted
        tokens per step, its upper bound (the first position's share is part of every longer acceptance)."""
        per_step = None if self.mean_acceptance_length is None else self.mean_acceptance_length - 1.0
        # The positions add up to the accepted tokens per step; a window whose per-position family does not (one
        # end's family missing or reset on its own) says nothing about position 0, and the per-step figure stands in.
        if self.per_position and (per_step is None or abs(sum(self.per_position) - per_step) <= 0.05 + 0.05 * per_step):
            return self.per_position[0]
        if self.mean_acceptance_length is not None:
            return max(self.mean_acceptance_length - 1.0, 0.0)
        return None

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


def _delta(before: float | None, after: float | None) -> float:
    """After minus before for a counter known not to have gone down (see :func:`detect_reset`)."""
    return max((after or 0.0) - (before or 0.0), 0.0)


def window(before: SpecDecodeCounters, after: SpecDecodeCounters,
           num_speculative_tokens: int | None = None) -> AcceptanceWindow:
    """Acceptance between two scrapes of the same engine (``after`` is the later one).

    ``num_speculative_tokens`` (k) lets an SGLang window derive its rate from counters; without it
    the scrape's ``spec_num_steps`` gauge is used when present, else the rate gauge. Raises
    :class:`MetricsUnusable` (``CounterDecrease``, ``AcceptedExceedsDrafted``) when the two scrapes
    do not make an honest window.
    """
    if before.engine != after.engine:
        raise ValueError(f"cannot compare a {before.engine} scrape with a {after.engine} scrape")
    return load_seen(_counted_window(before, after, num_speculative_tokens), (before, after))


def load_seen(found: AcceptanceWindow, scrapes: Sequence[SpecDecodeCounters]) -> AcceptanceWindow:
    """``found`` with the batch sizes and drafted tokens per step the ``scrapes`` inside it show (pure)."""
    running = [c.running_requests for c in scrapes if c.running_requests is not None]
    if found.engine == "vllm":
        drafted = found.draft_tokens / found.drafts if found.drafts > 0 and found.draft_tokens is not None else None
    else:  # SGLang counts no drafted tokens: its k gauges at each scrape (adaptive speculation moves them)
        shown = [c.num_speculative_tokens for c in scrapes if c.speculative]
        drafted = float(max(shown)) if shown and None not in shown else None
    return dataclasses.replace(found, fewest_running=min(running) if len(running) == len(scrapes) else None,
                               drafted_per_step=drafted)


def _counted_window(before: SpecDecodeCounters, after: SpecDecodeCounters,
                    num_speculative_tokens: int | None) -> AcceptanceWindow:
    reset = detect_reset(before, after)
    if reset:
        # A restart: the previous values belong to another process; count from zero.
        before = SpecDecodeCounters(engine=after.engine, speculative=after.speculative)
    # A counter missing from `before` while the engine was already counting (a scrape that lost a family:
    # cut short at a line, a half-written exposition) counts from its first value, as Prometheus'
    # increase() loses a new series' first sample. Counting it from zero would put the engine's whole
    # history into this window against the other counters' few seconds.
    counting = any((getattr(before, name) or 0.0) > 0 for name in _COUNT_FIELDS)

    def delta(name: str) -> float:
        start, end = getattr(before, name), getattr(after, name)
        return _delta(end if start is None and counting else start, end)

    k = num_speculative_tokens or after.num_speculative_tokens
    if after.engine == "vllm":
        previous = before.accepted_per_position or (after.accepted_per_position if counting else ())
        return _vllm_window(delta, previous, after.accepted_per_position, k, reset)
    return _sglang_window(delta, after, k, reset)


def _vllm_window(delta, previous: tuple[float, ...], latest: tuple[float, ...], k: int | None,
                 reset: bool) -> AcceptanceWindow:
    """A vLLM window from its counters' deltas (``delta(name)``) and the per-position accepted counts."""
    drafts, generation = delta("drafts"), delta("generation_tokens")
    draft_tokens = delta("draft_tokens")
    accepted = delta("accepted_tokens")
    per_position_counts = tuple(_delta(previous[i] if i < len(previous) else 0.0, value)
                                for i, value in enumerate(latest))
    # Each scrape can be consistent and the difference still not: e.g. 50 more accepted tokens
    # for 20 more draft tokens. That is a verdict, not a rate of 2.5.
    check_accepted_within_drafted("between the two scrapes", drafts, draft_tokens, accepted, per_position_counts)
    check_steps_consistent("between the two scrapes", "vllm", drafts, draft_tokens, generation, k)
    rate = acceptance_rate(accepted, draft_tokens)
    return AcceptanceWindow(
        engine="vllm", drafts=drafts, draft_tokens=draft_tokens, accepted_tokens=accepted,
        generation_tokens=generation, acceptance_rate=rate,
        mean_acceptance_length=mean_acceptance_length(accepted, drafts),
        rate_source="counters" if rate is not None else "none",
        reset=reset, per_position=tuple(v / drafts if drafts > 0 else 0.0 for v in per_position_counts),
    )


def _sglang_window(delta, after: SpecDecodeCounters, k: int | None, reset: bool) -> AcceptanceWindow:
    """An SGLang window: its length from counters; its rate derived with ``k``, else the later scrape's gauge."""
    drafts, generation = delta("drafts"), delta("generation_tokens")
    check_steps_consistent("between the two scrapes", "sglang", drafts, None, generation, None)
    length = tokens_per_verification(generation, drafts)
    draft_tokens = accepted = rate = None
    source: RateSource = "none"
    estimated = False
    if length is not None and k:
        draft_tokens = drafts * k
        # Clamped: the prefill token of each request is in generation_tokens (see the module doc).
        accepted = min(max(generation - drafts, 0.0), draft_tokens)
        rate = acceptance_rate(accepted, draft_tokens)
        source, estimated = "derived", True
    elif after.accept_rate_gauge is not None and after.speculative and drafts > 0:
        # Only for a window that verified something: SGLang leaves the gauge at 0 before the first
        # request, and an idle window's last interval value says nothing about the window.
        rate, source = after.accept_rate_gauge, "gauge"
    return AcceptanceWindow(
        engine="sglang", drafts=drafts, draft_tokens=draft_tokens, accepted_tokens=accepted,
        generation_tokens=generation, acceptance_rate=rate, mean_acceptance_length=length,
        rate_source=source, estimated=estimated, reset=reset,
    )
