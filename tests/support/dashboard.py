"""The chart's Grafana dashboard: its panels, their PromQL queries and the metric names they read."""
from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

from prometheus_client import REGISTRY, CollectorRegistry

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "drafter-operator"
DASHBOARD = CHART / "files" / "dashboard.json"

#: PromQL words that are neither metrics nor functions (functions are followed by "(").
PROMQL_WORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset",
                          "and", "or", "unless", "atan2", "inf", "nan"})


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: what is left once strings, label matchers, ranges and
    grouping label lists are gone, minus function names (a word before "(") and keywords."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for match in re.finditer(r"(?<![\w:.$])([A-Za-z_:][\w:]*)(\s*\()?", text):
        if not match.group(2) and match.group(1) not in PROMQL_WORDS:
            names.add(match.group(1))
    return names


def _sample_names(registry: CollectorRegistry) -> set[str]:
    """Every sample name a registry exposes, including families whose labelled series do not exist yet
    (SGLang creates some on the first request): derived from each family's type as the exposition does."""
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count"),
                "gauge": ("",), "info": ("_info",), "untyped": ("",)}
    return {family.name + suffix for family in registry.collect() for suffix in suffixes[family.type]}


def exported_metric_names() -> set[str]:
    """The operator's own metrics and the emulated engines' (vLLM with a drafter, SGLang with EAGLE-3)."""
    from drafter_testbed.emulator.exporters import SglangExporter, VllmExporter
    from drafter_operator.monitoring import operator_metrics  # noqa: F401  (registers the drafter_* families)

    return (_sample_names(REGISTRY) | _sample_names(VllmExporter("m", 5).registry)
            | _sample_names(SglangExporter("m", 3, 4).registry))


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def panels(board: dict) -> Iterator[dict]:
    for panel in board["panels"]:
        yield panel
        yield from panel.get("panels", ())  # a collapsed row holds its panels


def queries(board: dict) -> Iterator[tuple[dict, dict]]:
    for panel in panels(board):
        for target in panel.get("targets", ()):
            yield panel, target
