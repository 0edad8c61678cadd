"""A sample of the operator's own metrics, read from the default registry."""
from __future__ import annotations

from prometheus_client import REGISTRY


def value(metric, **lbl):
    return REGISTRY.get_sample_value(metric, lbl)
