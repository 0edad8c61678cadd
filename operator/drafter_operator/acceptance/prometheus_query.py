"""The PromQL of the ``prometheus`` acceptance source (pure): the selectors of one revision's engine pods,
and the one query that reads a window's counter increases per replica (``prometheus_source.py`` sends it
and reads the answer).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from drafter_operator import engines
from drafter_operator.constants import Engine

#: The label each series of the answer is tagged with, naming the counter it carries.
SERIES_LABEL = "drafter_series"

# --------------------------------------------------------------------------------------------------
# Selectors
# --------------------------------------------------------------------------------------------------

_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
MatchOp = Literal["=", "!=", "=~", "!~"]


@dataclass(frozen=True)
class Matcher:
    """One PromQL label matcher; the value is escaped, so any string is safe to put in a query."""

    label: str
    value: str
    op: MatchOp = "="

    def __post_init__(self) -> None:
        if not _LABEL_NAME.match(self.label) or self.label.startswith("__"):
            raise ValueError(f"{self.label!r} is not a PromQL label name")
        if self.op not in ("=", "!=", "=~", "!~"):
            raise ValueError(f"{self.op!r} is not a PromQL matcher")

    def __str__(self) -> str:
        # PromQL strings take Go escapes; json.dumps writes a compatible double-quoted literal.
        return f"{self.label}{self.op}{json.dumps(self.value)}"


def sanitize_label(name: str) -> str:
    """A Kubernetes label as Kubernetes service discovery names it (``drafter.dev/serving`` ->
    ``drafter_dev_serving``): Prometheus replaces every character outside [a-zA-Z0-9_] by ``_``,
    and ``labelmap`` on ``__meta_kubernetes_pod_label_(.+)`` keeps that name."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def revision_matchers(namespace: str, serving: str, revision: str) -> tuple[Matcher, ...]:
    """The matchers of one revision's pods, for a scrape config that maps pod labels (``labelmap``)
    and sets ``namespace`` (the usual kubernetes-pods job)."""
    from drafter_operator.constants import REVISION_LABEL, SERVING_LABEL

    return (Matcher("namespace", namespace), Matcher(sanitize_label(SERVING_LABEL), serving),
            Matcher(sanitize_label(REVISION_LABEL), revision))


def _selector(metric: str, matchers: Sequence[Matcher]) -> str:
    return metric + "{" + ",".join(str(m) for m in matchers) + "}"


def _duration(seconds: float) -> str:
    if not (math.isfinite(seconds) and seconds >= 1 and float(seconds).is_integer()):
        raise ValueError(f"window must be a whole number of seconds >= 1, not {seconds!r}")
    return f"{int(seconds)}s"


# --------------------------------------------------------------------------------------------------
# Query building (pure)
# --------------------------------------------------------------------------------------------------

#: Per engine: the tag each counter's increase travels under, and the metric it is read from (each engine
#: module's WINDOW_COUNTERS).
COUNTERS: dict[str, dict[str, str]] = {name: module.WINDOW_COUNTERS for name, module in engines.ENGINES.items()}
#: Counters without which a replica has no acceptance figure (each engine module's WINDOW_REQUIRED).
REQUIRED: dict[str, tuple[str, ...]] = {name: module.WINDOW_REQUIRED for name, module in engines.ENGINES.items()}


def engine_name(engine: str) -> Engine:
    if engine not in COUNTERS:
        raise ValueError(f"engine must be {' or '.join(COUNTERS)}, not {engine!r}")
    return engine  # type: ignore[return-value]


def _tagged(expr: str, tag: str) -> str:
    # label_replace with an empty regex on an empty source label always matches: it just adds the tag.
    return f'label_replace({expr}, "{SERIES_LABEL}", "{tag}", "", "")'


def window_query(engine: str, matchers: Sequence[Matcher], window_seconds: float,
                 replica_label: str = "pod") -> str:
    """One PromQL query whose answer holds every counter's increase over the window, per replica.

    Each part is ``sum by (<replica_label>) (increase(<counter>{<matchers>}[<window>]))`` tagged with
    ``drafter_series="<counter>"``; vLLM adds the per-position accepted counts summed by
    ``position``; SGLang adds the last ``spec_num_steps`` and ``spec_num_draft_tokens`` (k) and ``spec_accept_rate`` per replica,
    the fallbacks :func:`engines.metrics.window` uses. ``or`` keeps all parts: their tags differ.
    """
    engine = engine_name(engine)
    if not _LABEL_NAME.match(replica_label):
        raise ValueError(f"{replica_label!r} is not a PromQL label name")
    rng = _duration(window_seconds)
    module = engines.engine(engine)
    parts = [_tagged(f"sum by ({replica_label}) (increase({_selector(metric, matchers)}[{rng}]))", tag)
             for tag, metric in COUNTERS[engine].items()]
    if module.PER_POSITION_COUNTER is not None:
        per_pos = _selector(module.PER_POSITION_COUNTER, matchers)
        parts.append(_tagged(f"sum by (position) (increase({per_pos}[{rng}]))", "accepted_per_position"))
    for aggregation, tag, metric in module.WINDOW_GAUGES:
        parts.append(_tagged(f"{aggregation} by ({replica_label}) ({_selector(metric, matchers)})", tag))
    return "\n  or ".join(parts)


def _sum_increase(metric: str, matchers: Sequence[Matcher], rng: str) -> str:
    return f"sum(increase({_selector(metric, matchers)}[{rng}]))"


def rate_expression(engine: str, matchers: Sequence[Matcher], window_seconds: float,
                    num_speculative_tokens: int | None = None) -> str:
    """The acceptance rate as one PromQL expression (dashboards, alert rules): vLLM accepted / drafted
    tokens; SGLang ``(length - 1) / k`` (needs k; no clamping in PromQL, see the module doc)."""
    engine, rng = engine_name(engine), _duration(window_seconds)
    counters = COUNTERS[engine]
    if engines.engine(engine).RATE_PER_DRAFTED_TOKEN:  # both counted: accepted / drafted tokens
        return (f"{_sum_increase(counters['accepted_tokens'], matchers, rng)}\n  / "
                f"{_sum_increase(counters['draft_tokens'], matchers, rng)}")
    if not num_speculative_tokens:
        raise ValueError("an SGLang rate needs k (num_speculative_tokens)")
    return f"({length_expression(engine, matchers, window_seconds)}\n  - 1) / {int(num_speculative_tokens)}"


def length_expression(engine: str, matchers: Sequence[Matcher], window_seconds: float) -> str:
    """The mean acceptance length as one PromQL expression: vLLM ``1 + accepted / drafts``, SGLang
    generation tokens / verify calls."""
    engine, rng = engine_name(engine), _duration(window_seconds)
    counters = COUNTERS[engine]
    if engines.engine(engine).RATE_PER_DRAFTED_TOKEN:  # accepted tokens counted: 1 + accepted / drafts
        return (f"1 + {_sum_increase(counters['accepted_tokens'], matchers, rng)}\n  / "
                f"{_sum_increase(counters['drafts'], matchers, rng)}")
    return (f"{_sum_increase(counters['generation_tokens'], matchers, rng)}\n  / "
            f"{_sum_increase(counters['drafts'], matchers, rng)}")
