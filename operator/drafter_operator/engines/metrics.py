"""Speculative-decoding counters read from an engine's ``/metrics``, and the window math on them.

Engine-specific metric names and the parsers that fill :class:`SpecDecodeCounters` live in
``engines/vllm.py`` and ``engines/sglang.py``; this module holds what both share:

- :class:`ScrapeVerdict` and :class:`MetricsUnusable`: why a body (or a pair of scrapes) cannot be
  trusted, with a reason code and a message naming the metric and labels that were wrong;
- :func:`read_series`, a bounded reader of Prometheus text (``prometheus_client.parser``, never by
  hand) that refuses oversized, empty, unparseable and foreign bodies, duplicated series and
  non-finite values, and keeps only the series a parser asked for;
- checked accessors (:func:`count_total`, :func:`gauge_mean`, :func:`position_totals`) that turn
  those series into numbers or verdicts;
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

import math
import re
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal, NamedTuple

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

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


def _clip(text: str, limit: int = 80) -> str:
    """Bodies are untrusted: never copy an unbounded piece of one into a message."""
    return text if len(text) <= limit else text[:limit] + "..."


def series_name(name: str, labels: Labels) -> str:
    """``name{key="value",...}`` as Prometheus prints it, label values clipped."""
    if not labels:
        return name
    return name + "{" + ",".join(f'{key}="{_clip(value, 40)}"' for key, value in labels) + "}"


# --------------------------------------------------------------------------------------------------
# Bounded reading of a body
# --------------------------------------------------------------------------------------------------

class Series(NamedTuple):
    """One sample of a series the parser asked for (a tuple: bodies can hold ~10^5 of them)."""

    name: str
    labels: Labels
    value: float

    def __str__(self) -> str:
        return series_name(self.name, self.labels)


def _body_text(body: str | bytes, max_body_bytes: int) -> str:
    """The body as text, refused when over ``max_body_bytes`` (UTF-8 bytes) before anything is parsed."""
    if isinstance(body, (bytes, bytearray, memoryview)):
        size = len(body)
        if size > max_body_bytes:
            raise unusable(UnusableReason.TOO_LARGE,
                           f"/metrics body is {size} bytes, over the {max_body_bytes}-byte cap")
        try:
            return bytes(body).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise unusable(UnusableReason.UNPARSEABLE,
                           f"/metrics body is not UTF-8: {exc.reason} at byte {exc.start}") from None
    # A str has at most as many characters as UTF-8 bytes: too many characters is too many bytes.
    size = len(body)
    if size <= max_body_bytes and not body.isascii():
        size = len(body.encode("utf-8", "surrogatepass"))  # at most 4x the cap, and only for non-ASCII text
    if size > max_body_bytes:
        raise unusable(UnusableReason.TOO_LARGE, f"/metrics body is over the {max_body_bytes}-byte cap")
    return body


def _matches(labels: Mapping[str, str], wanted: Mapping[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in wanted.items())


def _samples(text: str) -> Iterator[Sample]:
    """The body's samples, parsed lazily by ``prometheus_client`` (a refused sample stops the parse)."""
    families = text_string_to_metric_families(text)
    while True:
        try:
            family = next(families)
        except StopIteration:
            return
        except Exception as exc:  # noqa: BLE001
            # Third-party code fed an untrusted body: whatever it raises means "not Prometheus text".
            raise unusable(UnusableReason.UNPARSEABLE,
                           f"cannot parse Prometheus text: {_clip(str(exc), 160)}") from None
        yield from family.samples


def _as_float(value: int | float) -> float:
    """The parser's value as a double: it reads an integer literal as a Python int of any size, which
    would be infinite as a double (math.isfinite raises OverflowError on it instead of saying so)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def read_series(body: str | bytes, engine_prefix: str, names: Collection[str],
                labels: Mapping[str, str | None] | None = None, *,
                max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> dict[str, list[Series]]:
    """The samples called one of ``names`` (whose labels include ``labels``), by name.

    Raises :class:`MetricsUnusable` when the body is over ``max_body_bytes`` (checked before parsing),
    empty, not Prometheus text, without any ``engine_prefix`` series matching ``labels`` (a label set
    to None is not checked), or when a wanted series appears twice or has a non-finite value. Only
    wanted samples are kept, so memory beyond the body itself stays proportional to them.
    """
    text = _body_text(body, max_body_bytes)
    wanted_labels = {key: value for key, value in (labels or {}).items() if value is not None}
    found: dict[str, list[Series]] = {}
    seen: set[SeriesKey] = set()
    any_sample = engine_seen = False
    for sample in _samples(text):
        any_sample = True
        if not sample.name.startswith(engine_prefix) or not _matches(sample.labels, wanted_labels):
            continue
        engine_seen = True
        if sample.name not in names:
            continue
        key: SeriesKey = (sample.name, tuple(sorted(sample.labels.items())))  # label order does not matter
        if key in seen:
            raise unusable(UnusableReason.DUPLICATE_SERIES, f"{series_name(*key)} appears more than once", *key)
        seen.add(key)
        value = _as_float(sample.value)
        if not math.isfinite(value):
            raise unusable(UnusableReason.NON_FINITE, f"{series_name(*key)} is {_clip(str(sample.value), 40)}", *key)
        found.setdefault(sample.name, []).append(Series(key[0], key[1], value))
    if not any_sample:
        raise unusable(UnusableReason.EMPTY, "/metrics body has no samples")
    if not engine_seen:
        scope = f" with {series_name('', tuple(sorted(wanted_labels.items())))}" if wanted_labels else ""
        raise unusable(UnusableReason.NOT_ENGINE_METRICS,
                       f"no {engine_prefix}* series{scope}: not this engine's /metrics")
    return found


# --------------------------------------------------------------------------------------------------
# Checked accessors
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


def check_count(series: Series) -> float:
    """A counter's value, refused unless it is a count (see :func:`count_problem`)."""
    problem = count_problem(series.value)
    if problem is not None:
        raise unusable(problem, f"{series} is {series.value}, not a count of tokens or steps",
                       series.name, series.labels)
    return series.value


def count_total(found: Mapping[str, list[Series]], name: str) -> float | None:
    """Sum of a counter over its series (engines, ``is_streaming``...); None when absent."""
    matched = found.get(name)
    if not matched:
        return None
    # At most ~10^6 series fit in the body cap, each <= 2**53: the sum stays finite.
    return math.fsum(check_count(s) for s in matched)


def gauge_mean(found: Mapping[str, list[Series]], name: str, low: float, high: float) -> float | None:
    """Mean of a gauge over its series (one per scheduler rank); values outside [low, high] are refused."""
    matched = found.get(name)
    if not matched:
        return None
    for s in matched:
        if not low <= s.value <= high:
            raise unusable(UnusableReason.OUT_OF_RANGE, f"{s} is {s.value}, outside [{low}, {high}]", s.name, s.labels)
    return math.fsum(s.value for s in matched) / len(matched)


# A position label: a decimal integer without sign or leading zeros.
_POSITION = re.compile(r"0|[1-9][0-9]*")


def position_totals(samples: Iterable[Series], label: str,
                    max_positions: int = DEFAULT_MAX_POSITIONS) -> tuple[float, ...]:
    """Per-position counter totals ``(pos 0, pos 1, ...)``, summed over the other labels.

    The position label must be an integer in [0, max_positions); the tuple is never longer than
    ``max_positions`` whatever the body says (a label of 10**8 is refused by its length, before it
    is even converted). Positions that were not exported count zero.
    """
    totals: dict[int, float] = {}
    for s in samples:
        raw = dict(s.labels).get(label)
        if raw is None or not _POSITION.fullmatch(raw):
            raise unusable(UnusableReason.BAD_POSITION, f"{s}: {label} is not a non-negative integer", s.name, s.labels)
        if len(raw) > len(str(max_positions)) or int(raw) >= max_positions:
            raise unusable(UnusableReason.TOO_MANY_POSITIONS,
                           f"{s}: {label} {_clip(raw, 20)} is beyond the {max_positions}-position cap",
                           s.name, s.labels)
        position = int(raw)
        totals[position] = totals.get(position, 0.0) + check_count(s)
    return tuple(totals.get(i, 0.0) for i in range(max(totals) + 1)) if totals else ()


def counter_series(found: Mapping[str, list[Series]], names: Iterable[str]) -> tuple[tuple[SeriesKey, float], ...]:
    """The counters' individual series, kept so that resets are found per series as Prometheus does."""
    return tuple(((s.name, s.labels), s.value) for name in names for s in found.get(name, ()))


# --------------------------------------------------------------------------------------------------
# One scrape
# --------------------------------------------------------------------------------------------------

EngineName = Literal["vllm", "sglang"]

_COUNT_FIELDS = ("drafts", "draft_tokens", "accepted_tokens", "generation_tokens", "prompt_tokens")
#: The gauges' domains [0, high]. SGLang 0.5.23 sets them to 0 when nothing was measured, never NaN
#: (``scheduler_components/metrics_reporter.py``); a step or draft count is at most the position cap
#: (+1: ``speculative_num_draft_tokens`` counts the root token).
GAUGE_RANGES: dict[str, float] = {
    "accept_length_gauge": DEFAULT_MAX_POSITIONS + 1.0,
    "accept_rate_gauge": 1.0,
    "num_steps_gauge": float(DEFAULT_MAX_POSITIONS),
    "num_draft_tokens_gauge": DEFAULT_MAX_POSITIONS + 1.0,
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
        if self.num_steps_gauge:
            return int(self.num_steps_gauge)
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


def check_steps_consistent(where: str, engine: EngineName, drafts: float, draft_tokens: float | None,
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
    #: True when the counters went backwards (engine restart): the window counts from the restart.
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

    drafts = delta("drafts")
    generation = delta("generation_tokens")

    if after.engine == "vllm":
        draft_tokens = delta("draft_tokens")
        accepted = delta("accepted_tokens")
        previous = before.accepted_per_position or (after.accepted_per_position if counting else ())
        per_position_counts = tuple(_delta(previous[i] if i < len(previous) else 0.0, value)
                                    for i, value in enumerate(after.accepted_per_position))
        # Each scrape can be consistent and the difference still not: e.g. 50 more accepted tokens
        # for 20 more draft tokens. That is a verdict, not a rate of 2.5.
        check_accepted_within_drafted("between the two scrapes", drafts, draft_tokens, accepted, per_position_counts)
        check_steps_consistent("between the two scrapes", "vllm", drafts, draft_tokens, generation,
                               num_speculative_tokens or after.num_speculative_tokens)
        rate = acceptance_rate(accepted, draft_tokens)
        return AcceptanceWindow(
            engine="vllm", drafts=drafts, draft_tokens=draft_tokens, accepted_tokens=accepted,
            generation_tokens=generation, acceptance_rate=rate,
            mean_acceptance_length=mean_acceptance_length(accepted, drafts),
            rate_source="counters" if rate is not None else "none",
            reset=reset, per_position=tuple(v / drafts if drafts > 0 else 0.0 for v in per_position_counts),
        )

    # SGLang
    check_steps_consistent("between the two scrapes", "sglang", drafts, None, generation, None)
    length = tokens_per_verification(generation, drafts)
    k = num_speculative_tokens or after.num_speculative_tokens
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
