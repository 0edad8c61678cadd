"""The operator's own metrics: acceptance gauges set from a window, and no stale series after deletion."""

from __future__ import annotations

import dataclasses

import pytest
from prometheus_client import REGISTRY, generate_latest

from drafter_operator.engines.metrics import AcceptanceWindow
from drafter_operator.monitoring import operator_metrics as om
from tests.support.gauges import value

# Unique namespaces: the registry is process-wide and other tests may have set series.
NS = "test-operator-metrics"


def labels(name="kimi", revision="r1", engine="vllm", drafter="eagle3-a", namespace=NS):
    return {"namespace": namespace, "name": name, "engine": engine, "drafter": drafter, "revision": revision}


def window(rate, length):
    return AcceptanceWindow("vllm", 100, 500, None if rate is None else rate * 500, 0, rate, length,
                            "counters" if rate is not None else "none")


def test_acceptance_and_degraded_gauges_carry_the_revision_labels():
    om.set_acceptance(NS, "kimi", "vllm", "eagle3-a", "r1", window(0.15, 1.75))
    om.set_degraded(NS, "kimi", "vllm", "eagle3-a", "r1", True)
    assert value("drafter_acceptance_rate", **labels()) == 0.15
    assert value("drafter_acceptance_length", **labels()) == 1.75
    assert value("drafter_acceptance_first_position_rate", **labels()) == 0.75  # no per-position: accepted per step
    om.set_acceptance(NS, "kimi", "vllm", "eagle3-a", "r1",
                      dataclasses.replace(window(0.15, 1.75), per_position=(0.41, 0.2, 0.08, 0.04, 0.02)))
    assert value("drafter_acceptance_first_position_rate", **labels()) == 0.41
    assert value("drafter_degraded", **labels()) == 1.0
    om.set_degraded(NS, "kimi", "vllm", "eagle3-a", "r1", False)
    assert value("drafter_degraded", **labels()) == 0.0
    text = generate_latest(REGISTRY).decode()
    assert (f'drafter_acceptance_rate{{drafter="eagle3-a",engine="vllm",name="kimi",namespace="{NS}",revision="r1"}} 0.15'
            in text)
    om.forget_serving(NS, "kimi")


def test_missing_figures_and_unknown_remove_series_instead_of_going_stale():
    om.set_acceptance(NS, "a", "vllm", "d", "r1", window(0.5, 3.5))
    om.set_degraded(NS, "a", "vllm", "d", "r1", False)
    om.set_acceptance(NS, "a", "vllm", "d", "r1", window(None, None))  # no drafts in the window
    om.set_degraded(NS, "a", "vllm", "d", "r1", None)  # Unknown
    lbl = labels(name="a", drafter="d")
    assert value("drafter_acceptance_rate", **lbl) is None
    assert value("drafter_acceptance_length", **lbl) is None
    assert value("drafter_degraded", **lbl) is None
    om.set_degraded(NS, "never-set", "vllm", "d", "r1", None)  # removing what was never set is fine


def test_forget_revision_keeps_the_other_revision_and_serving():
    for name, revision in (("b", "r1"), ("b", "r2"), ("c", "r1")):
        om.set_acceptance(NS, name, "sglang", "d", revision, window(0.6, 3.0))
        om.set_degraded(NS, name, "sglang", "d", revision, False)
    assert om.forget_revision(NS, "b", "r1") == 4  # rate, length, first position, degraded
    assert value("drafter_acceptance_first_position_rate",
                 **labels(name="b", revision="r1", engine="sglang", drafter="d")) is None
    assert value("drafter_acceptance_rate", **labels(name="b", revision="r1", engine="sglang", drafter="d")) is None
    assert value("drafter_degraded", **labels(name="b", revision="r1", engine="sglang", drafter="d")) is None
    assert value("drafter_acceptance_rate", **labels(name="b", revision="r2", engine="sglang", drafter="d")) == 0.6
    assert value("drafter_acceptance_rate", **labels(name="c", revision="r1", engine="sglang", drafter="d")) == 0.6
    assert om.forget_revision(NS, "b", "r1") == 0
    om.forget_serving(NS, "b")
    om.forget_serving(NS, "c")


def test_forget_serving_removes_gauges_and_counters_of_that_serving_only():
    om.set_acceptance(NS, "gone", "vllm", "d", "r1", window(0.2, 2.0))
    om.set_acceptance(NS, "gone", "vllm", "d2", "r2", window(0.6, 4.0))
    om.set_degraded(NS, "gone", "vllm", "d", "r1", True)
    om.swap(NS, "gone", "vllm", "BlueGreen")
    om.rollback(NS, "gone", "vllm")
    om.swap(NS, "stays", "vllm", "BlueGreen")
    om.set_degraded("other-ns", "gone", "vllm", "d", "r1", True)  # same name, other namespace
    assert value("drafter_swaps_total", namespace=NS, name="gone", engine="vllm", strategy="BlueGreen") == 1
    assert om.forget_serving(NS, "gone") == 9  # 7 gauge series, a swap and a rollback
    text = generate_latest(REGISTRY).decode()
    assert not [line for line in text.splitlines() if f'name="gone",namespace="{NS}"' in line]
    assert value("drafter_swaps_total", namespace=NS, name="stays", engine="vllm", strategy="BlueGreen") == 1
    assert value("drafter_degraded", **labels(name="gone", namespace="other-ns", drafter="d")) == 1
    om.forget_serving(NS, "stays")
    om.forget_serving("other-ns", "gone")


def test_existing_counters_and_timer_still_work():
    before = value("drafter_reconcile_total", kind="test-kind", result="error") or 0
    with pytest.raises(RuntimeError):
        with om.reconcile_timer("test-kind"):
            raise RuntimeError("boom")
    assert value("drafter_reconcile_total", kind="test-kind", result="error") == before + 1
    assert value("drafter_reconcile_duration_seconds_count", kind="test-kind") >= 1
