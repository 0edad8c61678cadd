"""Reading an engine's ``/metrics`` body (pure): the series a parser asks for, within bounds (body size,
series count, draft positions), and checked accessors that turn them into counts and gauge values or
raise a :class:`~drafter_operator.engines.metrics.MetricsUnusable` verdict. The engines' parsers
(``vllm.py``, ``sglang.py``) and the in-flight reader build on it; ``metrics.py`` holds the verdicts and
the window math.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterable, Iterator, Mapping
from typing import NamedTuple

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from drafter_operator.engines.metrics_verdicts import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_POSITIONS,
    Labels,
    SeriesKey,
    UnusableReason,
    clip,
    count_problem,
    series_name,
    unusable,
)

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
                           f"cannot parse Prometheus text: {clip(str(exc), 160)}") from None
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
            raise unusable(UnusableReason.NON_FINITE, f"{series_name(*key)} is {clip(str(sample.value), 40)}", *key)
        found.setdefault(sample.name, []).append(Series(key[0], key[1], value))
    if not any_sample:
        raise unusable(UnusableReason.EMPTY, "/metrics body has no samples")
    if not engine_seen:
        scope = f" with {series_name('', tuple(sorted(wanted_labels.items())))}" if wanted_labels else ""
        raise unusable(UnusableReason.NOT_ENGINE_METRICS,
                       f"no {engine_prefix}* series{scope}: not this engine's /metrics")
    return found


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
                           f"{s}: {label} {clip(raw, 20)} is beyond the {max_positions}-position cap",
                           s.name, s.labels)
        position = int(raw)
        totals[position] = totals.get(position, 0.0) + check_count(s)
    return tuple(totals.get(i, 0.0) for i in range(max(totals) + 1)) if totals else ()


def counter_series(found: Mapping[str, list[Series]], names: Iterable[str]) -> tuple[tuple[SeriesKey, float], ...]:
    """The counters' individual series, kept so that resets are found per series as Prometheus does."""
    return tuple(((s.name, s.labels), s.value) for name in names for s in found.get(name, ()))
