"""The ``prometheus`` acceptance source: one revision's acceptance window, asked of a Prometheus server
(the query itself is built in ``prometheus_query.py``; this module sends it and reads the answer).

The definitions are those of ``engines/metrics.py`` (which the ``engine`` source uses on two
scrapes), with Prometheus' ``increase()`` over the window in place of the difference of two scrapes:

- vLLM: rate = increase(accepted tokens) / increase(draft tokens); mean length = 1 + increase(accepted
  tokens) / increase(drafts);
- SGLang: length = increase(generation tokens) / increase(verify calls); with ``k`` draft tokens per
  verification, the rate is derived as :func:`engines.metrics.window` derives it (accepted =
  generation - verify calls, clamped; drafted = k x verify calls), else the ``spec_accept_rate``
  gauge is the fallback (``rate_source == "gauge"``).

Replicas are combined by summing their increases, never by averaging their rates: every counter is
asked for as ``sum by (<replica label>) (increase(...))`` and the totals are sums of those, so the
per-replica figures and the total come from the same numbers. All counters travel in ONE query (a
union of ``label_replace``-tagged vectors) evaluated at one explicit ``time``, so the numerator and
denominator of a ratio always describe the same window.

Layout: pure functions build the query (:func:`window_query`, plus :func:`rate_expression` and
:func:`length_expression`, the single-expression forms for dashboards and alert rules, documented in
docs/monitoring.md) and parse the API answer (:func:`parse_query_response`, :func:`acceptance_from_vector`);
:func:`fetch_acceptance` is the only function that does I/O.

Failures are exceptions, as in ``engines/metrics.py``: :class:`MetricsUnavailable` (Prometheus
unreachable, an HTTP or query error, no series for the selector) and :class:`MetricsInvalid` (a
:class:`~drafter_operator.engines.metrics.MetricsUnusable` with the same verdict reasons: NaN/Inf,
negative, accepted > drafted, partial series, an oversized or unparseable answer). Their
``condition_reason`` is the ``Degraded`` condition reason the issue defines.

Caveats that come with ``increase()`` (checked against a real Prometheus in
tests/unit/acceptance/test_prometheus_live.py):
- it extrapolates the sampled increase to the window's edges (by at most ~1.1 scrape intervals at
  each end), so counts are not whole numbers and read up to ~2.2 scrape intervals / window above
  the exact delta (at most 2.2 x 15 s / 300 s = 11% for a 5-minute window scraped every 15 s: the
  window should span many scrape intervals). Counters scraped together (same target, same
  timestamps) share the factor, so their ratios (rate, length) are exact, except for a counter that
  is small beside its increase (a young pod): its extrapolation stops where it would reach zero;
- a series that first appears inside the window loses its first sample's value (SGLang creates its
  counters on the first finished request), and a pod scraped fewer than twice in the window has no
  increase yet and is not in the figures.
"""

from __future__ import annotations

import dataclasses
import functools
import http
import json
import math
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import aiohttp

from drafter_operator import engines
from drafter_operator.engines.metrics import (
    AcceptanceWindow,
    acceptance_rate,
    mean_acceptance_length,
    sglang_draft_tokens,
    tokens_per_verification,
)
from drafter_operator.engines.metrics_verdicts import (
    DEFAULT_MAX_POSITIONS,
    MetricsUnusable,
    ScrapeVerdict,
    UnusableReason,
)
from drafter_operator.constants import Engine
from drafter_operator.acceptance.prometheus_query import COUNTERS, REQUIRED, SERIES_LABEL, Matcher, engine_name, \
    window_query
from drafter_operator.monitoring import http_fetch
from drafter_operator.monitoring.http_fetch import MetricsUnavailable
from drafter_operator.settings import PROMETHEUS_ENDPOINTS

#: Largest /api/v1/query answer read, in bytes. A window answer holds ~5 series per replica plus k
#: per-position series (~300 bytes each): 1 MiB is thousands of replicas, and keeps a parse cheap.
DEFAULT_MAX_RESPONSE_BYTES = 1024 * 1024
#: Connect / read timeouts (seconds); the whole answer must arrive within their sum. The query is a
#: handful of increase()s; a healthy server answers in milliseconds, and a verdict loop must not hang on
#: a sick one.
DEFAULT_TIMEOUT = http_fetch.Timeout(read=5.0, connect=2.0)
#: Relative slack for accepted <= drafted: both are extrapolated by increase(), by factors that agree
#: to rounding for counters scraped together; anything beyond rounding is a real inconsistency.
_RELATIVE_SLACK = 1e-9

# --------------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------------


class MetricsInvalid(MetricsUnusable):
    """An answer that cannot be trusted (NaN, negative, accepted > drafted, ...): a ``MetricsUnusable``
    with the engine source's verdict reasons, so one ``except MetricsUnusable`` serves both sources."""

    condition_reason = "MetricsInvalid"


def _invalid(reason: UnusableReason, message: str, metric: str | None = None,
             labels: Mapping[str, str] | None = None) -> MetricsInvalid:
    return MetricsInvalid(ScrapeVerdict(reason, message, metric, tuple(sorted((labels or {}).items()))))


# --------------------------------------------------------------------------------------------------
# Parsing (pure)
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class VectorSample:
    """One element of an instant vector."""

    labels: Mapping[str, str]
    value: float


#: Prometheus' documented errorType values (HTTP API, "Format overview") and resultType values: the only
#: words of an answer a message may repeat.
PROMETHEUS_ERROR_TYPES = frozenset({"bad_data", "execution", "timeout", "canceled", "internal", "unavailable",
                                    "not_found", "not_acceptable"})
PROMETHEUS_RESULT_TYPES = frozenset({"matrix", "vector", "scalar", "string"})


def status_line(status_code: int) -> str:
    """``HTTP 502 Bad Gateway``: the code and its standard phrase, never the server's own words."""
    try:
        return f"HTTP {status_code} {http.HTTPStatus(status_code).phrase}"
    except ValueError:
        return f"HTTP {status_code}"


def parse_query_response(status_code: int, body: bytes) -> list[VectorSample]:
    """The instant vector of an ``/api/v1/query`` answer, or :class:`MetricsUnavailable` /
    :class:`MetricsInvalid`. Values are parsed as Prometheus writes them (``"NaN"``, ``"+Inf"``
    included); judging them is :func:`acceptance_from_vector`'s job."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        doc = None
    # No part of the body is copied into a message: messages reach status and Events, which every tenant of
    # the namespace reads. Only the status code, its standard phrase and Prometheus' own error type.
    if isinstance(doc, dict) and doc.get("status") == "error":
        # Prometheus explains its 4xx/5xx in the body: bad_data (400), execution (422), timeout (503).
        kind = doc.get("errorType") if doc.get("errorType") in PROMETHEUS_ERROR_TYPES else "unknown error type"
        raise MetricsUnavailable("QueryError", f"{status_line(status_code)}, Prometheus error type {kind}")
    if status_code != 200:
        raise MetricsUnavailable("HTTPError", status_line(status_code))
    if not isinstance(doc, dict):
        raise _invalid(UnusableReason.UNPARSEABLE, "the query answer is not a JSON object")
    data = doc.get("data")
    if doc.get("status") != "success" or not isinstance(data, dict):
        raise _invalid(UnusableReason.UNPARSEABLE, "the query answer's status is not success")
    if data.get("resultType") != "vector" or not isinstance(data.get("result"), list):
        got = data.get("resultType") if data.get("resultType") in PROMETHEUS_RESULT_TYPES else "another type"
        raise _invalid(UnusableReason.UNPARSEABLE, f"expected an instant vector, got {got}")
    out = []
    for index, item in enumerate(data["result"]):
        try:
            labels, (_, raw) = item["metric"], item["value"]
            if not isinstance(labels, dict) or not isinstance(raw, str):
                raise TypeError
            out.append(VectorSample({str(k): str(v) for k, v in labels.items()}, float(raw)))
        except (KeyError, TypeError, ValueError):
            raise _invalid(UnusableReason.UNPARSEABLE, f"vector element {index} is malformed") from None
    return out


@dataclass(frozen=True)
class PrometheusWindow:
    """What the source returns: the combined window, each replica's, and the query's evaluation."""

    total: AcceptanceWindow
    #: Replica (value of the replica label) -> its own window; empty string when the label is absent.
    replicas: Mapping[str, AcceptanceWindow] = field(default_factory=dict)
    #: Evaluation time of the query: the window's end (Unix seconds).
    end: float = 0.0
    window_seconds: float = 0.0
    query: str = ""
    #: Wall-clock seconds the HTTP round trip took.
    latency_seconds: float = 0.0

    def replicas_differ(self, tolerance: float = 0.05) -> bool:
        """Whether per-replica rates differ from the combined one by more than ``tolerance`` (status
        shows per-replica figures only when they say something the total does not)."""
        total = self.total.acceptance_rate
        return total is not None and any(
            w.acceptance_rate is not None and abs(w.acceptance_rate - total) > tolerance for w in self.replicas.values())


def _check_value(sample: VectorSample, tag: str) -> float:
    value = sample.value
    if not math.isfinite(value):
        raise _invalid(UnusableReason.NON_FINITE, f"{tag} is {value} in the query answer", tag, sample.labels)
    if value < 0:
        raise _invalid(UnusableReason.NEGATIVE_COUNTER, f"{tag} is {value:g}, below zero", tag, sample.labels)
    return value


def _exceeds(accepted: float, drafted: float) -> bool:
    return accepted > drafted * (1 + _RELATIVE_SLACK) + 1e-9


def _replica_window(engine: Engine, who: str, c: Mapping[str, float], k: int | None) -> AcceptanceWindow:
    """One replica's (or the total's) window from its counters' increases, as engines.metrics.window does."""
    drafts, generation = c["drafts"], c.get("generation_tokens", 0.0)
    if engines.engine(engine).RATE_PER_DRAFTED_TOKEN:  # accepted and drafted tokens both counted
        draft_tokens, accepted = c["draft_tokens"], c["accepted_tokens"]
        if _exceeds(accepted, draft_tokens):
            raise _invalid(UnusableReason.ACCEPTED_EXCEEDS_DRAFTED,
                           f"{who}: {accepted:g} accepted tokens but {draft_tokens:g} draft tokens in the window")
        accepted = min(accepted, draft_tokens)  # rounding only (checked above)
        rate = acceptance_rate(accepted, draft_tokens)
        return AcceptanceWindow(engine=engine, drafts=drafts, draft_tokens=draft_tokens, accepted_tokens=accepted,
                                generation_tokens=generation, acceptance_rate=rate,
                                mean_acceptance_length=mean_acceptance_length(accepted, drafts),
                                rate_source="counters" if rate is not None else "none")
    length = tokens_per_verification(generation, drafts)
    draft_tokens = accepted = rate = None
    source, estimated = "none", False
    if length is not None and k:
        draft_tokens = drafts * k
        # Clamped like engines.metrics.window: each request's prefill token is in generation tokens.
        accepted = min(max(generation - drafts, 0.0), draft_tokens)
        rate, source, estimated = acceptance_rate(accepted, draft_tokens), "derived", True
    elif "accept_rate_gauge" in c:
        rate, source = c["accept_rate_gauge"], "gauge"
        if rate > 1:
            raise _invalid(UnusableReason.OUT_OF_RANGE, f"{who}: spec_accept_rate is {rate:g}, above 1")
    return AcceptanceWindow(engine=engine, drafts=drafts, draft_tokens=draft_tokens, accepted_tokens=accepted,
                            generation_tokens=generation, acceptance_rate=rate, mean_acceptance_length=length,
                            rate_source=source, estimated=estimated)


def acceptance_from_vector(engine: str, samples: Iterable[VectorSample], replica_label: str = "pod",
                           num_speculative_tokens: int | None = None) -> tuple[AcceptanceWindow, dict[str, AcceptanceWindow]]:
    """The combined window and each replica's, from the answer to :func:`window_query`.

    The total sums the replicas' increases (the definitions are ratios of sums). Raises
    :class:`MetricsUnavailable` (``NoSeries``) when no replica has the spec-decode counters, and
    :class:`MetricsInvalid` for non-finite or negative values, a replica with only some of the
    counters (``MissingSeries``), or more accepted than drafted tokens.
    """
    engine = engine_name(engine)
    required = REQUIRED[engine]
    counters: dict[str, dict[str, float]] = {}
    per_position: dict[int, float] = {}
    steps: list[float] = []
    windows: list[float] = []  # spec_num_draft_tokens: the verify window of a block drafter
    for s in samples:
        tag = s.labels.get(SERIES_LABEL, "")
        if tag == "accepted_per_position":
            raw = s.labels.get("position", "")
            if not raw.isdigit() or int(raw) >= DEFAULT_MAX_POSITIONS:
                raise _invalid(UnusableReason.BAD_POSITION, f"position {raw[:20]!r}", tag, s.labels)
            per_position[int(raw)] = _check_value(s, tag)
            continue
        if tag not in COUNTERS[engine] and tag not in ("num_steps", "num_draft_tokens", "accept_rate_gauge"):
            continue  # not ours (a foreign series cannot carry our tag unless the selector is odd)
        value = _check_value(s, tag)
        replica = s.labels.get(replica_label, "")
        if tag in ("num_steps", "num_draft_tokens"):
            (steps if tag == "num_steps" else windows).append(value)
            continue
        counters.setdefault(replica, {})[tag] = value
    with_counters = {r: c for r, c in counters.items() if any(t in c for t in required)}
    if not with_counters:
        raise MetricsUnavailable("NoSeries", f"no {engine} speculative-decoding counters matched the selector "
                                             f"(no pod scraped twice in the window, or speculation is off)")
    for replica, c in sorted(with_counters.items()):
        missing = [COUNTERS[engine][t] for t in required if t not in c]
        if missing:
            raise _invalid(UnusableReason.MISSING_SERIES,
                           f"replica {replica_label}={replica[:60]!r} has no {', '.join(missing)} in the window",
                           missing[0], {replica_label: replica})
    k = num_speculative_tokens
    counted = engines.engine(engine).RATE_PER_DRAFTED_TOKEN
    if not counted and not k and steps:  # k from the gauges of an engine that derives its rate with k
        k = sglang_draft_tokens(max(steps), max(windows) if windows else None)
    replicas = {r: _replica_window(engine, f"replica {replica_label}={r[:60]!r}", c, k)
                for r, c in sorted(with_counters.items())}
    totals = {t: sum(c.get(t, 0.0) for c in with_counters.values()) for t in COUNTERS[engine]}
    gauges = [c["accept_rate_gauge"] for c in with_counters.values() if "accept_rate_gauge" in c]
    if gauges:
        # Only the fallback without k: a gauge is an interval value, so the replicas' mean is all there is.
        totals["accept_rate_gauge"] = sum(gauges) / len(gauges)
    total = _replica_window(engine, "all replicas", totals, k)
    if engines.engine(engine).PER_POSITION_COUNTER is not None and per_position and total.drafts > 0:
        positions = tuple(per_position.get(i, 0.0) / total.drafts for i in range(max(per_position) + 1))
        if any(_exceeds(p, 1.0) for p in positions):
            raise _invalid(UnusableReason.ACCEPTED_EXCEEDS_DRAFTED,
                           f"a draft position was accepted more often than there were drafts: {positions}")
        total = dataclasses.replace(total, per_position=tuple(min(p, 1.0) for p in positions))
    return total, replicas


# --------------------------------------------------------------------------------------------------
# The endpoints the administrator allows
# --------------------------------------------------------------------------------------------------

#: Name -> Prometheus base URL, JSON; the chart renders it from prometheus.endpoints. Tenants name one in
#: spec.acceptance.prometheus: the operator never queries a URL a tenant wrote.
ENDPOINTS_ENV = PROMETHEUS_ENDPOINTS.name
_ENDPOINT_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")


@functools.lru_cache(maxsize=8)
def parse_endpoints(raw: str | None) -> Mapping[str, str]:
    """``DRAFTER_PROMETHEUS_ENDPOINTS``'s value; ValueError naming the variable when it is malformed."""
    if raw is None or not raw.strip():
        return {}
    try:
        endpoints = json.loads(raw)
    except ValueError:
        raise ValueError(f"{ENDPOINTS_ENV} is not JSON (an object of name to URL)") from None
    if not isinstance(endpoints, dict) or not all(
            isinstance(k, str) and _ENDPOINT_NAME.match(k) and isinstance(v, str) and re.match(r"^https?://\S+$", v)
            for k, v in endpoints.items()):
        raise ValueError(f"{ENDPOINTS_ENV} must map lowercase names (letters, digits, '-') to http(s) URLs, e.g. "
                         f'{{"default": "http://prometheus.monitoring:9090"}}')
    return dict(endpoints)


def endpoints_from_env(environ: Mapping[str, str] | None = None) -> Mapping[str, str]:
    return parse_endpoints(PROMETHEUS_ENDPOINTS.read(environ))


def endpoint_problem(name: str | None, endpoints: Mapping[str, str]) -> str | None:
    """Why ``spec.acceptance.prometheus`` names no endpoint the operator may query; None when it does."""
    if name is None or name in endpoints:
        return None
    if not endpoints:
        return (f"spec.acceptance.prometheus {name!r} names no Prometheus endpoint: the operator is configured with "
                f"none (chart value prometheus.endpoints); ask the administrator to add one, or use source engine")
    return (f"spec.acceptance.prometheus {name!r} names no Prometheus endpoint the operator is configured with: "
            f"use one of {', '.join(sorted(endpoints))} (chart value prometheus.endpoints), or use source engine")


# --------------------------------------------------------------------------------------------------
# The HTTP call
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PrometheusConnection:
    """A Prometheus to query and how: at ``url``, through ``client`` (None: one of its own for the call; pass
    one to reuse connections across servings), within ``timeout``, reading at most ``max_response_bytes`` of
    an answer; ``shown_as``: what messages call the endpoint instead of its URL (which may carry credentials)."""

    url: str
    client: aiohttp.ClientSession | None = None
    timeout: http_fetch.Timeout = DEFAULT_TIMEOUT
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    shown_as: str | None = None


@dataclass(frozen=True)
class AcceptanceQuery:
    """Whose acceptance over what window: the ``engine``'s counters of the series ``matchers`` select over
    ``window_seconds``, per replica by ``replica_label``; ``num_speculative_tokens``: the drafts per step, for
    an engine whose counters need it to give an acceptance rate."""

    engine: str
    matchers: Sequence[Matcher]
    window_seconds: float
    replica_label: str = "pod"
    num_speculative_tokens: int | None = None


async def fetch_acceptance(prometheus: PrometheusConnection, asked: AcceptanceQuery,
                           end: float | None = None) -> PrometheusWindow:
    """The acceptance ``asked`` for over the window ending at ``end`` (default: now), from ``prometheus``."""
    engine, window_seconds, replica_label = asked.engine, asked.window_seconds, asked.replica_label
    timeout, max_response_bytes, client = prometheus.timeout, prometheus.max_response_bytes, prometheus.client
    query = window_query(engine, asked.matchers, window_seconds, replica_label)
    end = time.time() if end is None else end
    url = prometheus.url.rstrip("/") + "/api/v1/query"
    # POST form: the union query is long, and Prometheus accepts the same parameters in a form body.
    data = {"query": query, "time": f"{end:.3f}", "timeout": f"{max(timeout.read or 5.0, 1.0):g}s"}
    own = client is None
    client = client or http_fetch.client(timeout)
    started = time.perf_counter()
    try:
        bounds = http_fetch.AnswerBounds(
            deadline_seconds=(timeout.connect or 0.0) + (timeout.read or 5.0), max_bytes=max_response_bytes,
            too_large=lambda why: _invalid(UnusableReason.TOO_LARGE, f"the query answer: {why}"), timeout=timeout)
        status, body = await http_fetch.fetch(client, "POST", url, bounds, data=data, shown_as=prometheus.shown_as)
    finally:
        if own:
            await client.close()
    latency = time.perf_counter() - started
    total, replicas = acceptance_from_vector(engine, parse_query_response(status, body), replica_label,
                                             asked.num_speculative_tokens)
    return PrometheusWindow(total=total, replicas=replicas, end=end, window_seconds=window_seconds, query=query,
                            latency_seconds=latency)
