"""The operator's state gauges the chart's alert rules read: set from the status a reconcile leaves (serving
Ready, a swap under way, the last benchmark's speedup, failed benchmarks and trainings, usable engine
metrics), one series per object, and none left behind when the object or its state goes."""

from __future__ import annotations

import datetime as dt

from prometheus_client import REGISTRY

from drafter_operator.controllers.benchmark.apply import BenchmarkReconciler
from drafter_operator.controllers.training.apply import TrainingReconciler
from drafter_operator.controllers.plan import Plan
from drafter_operator.monitoring import operator_metrics as om

# Unique namespace: the registry is process-wide and other tests set series too.
NS = "test-state-metrics"
STARTED = "2026-11-30T10:00:00Z"


def value(metric: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(metric, labels)


def series(metric: str, **labels: str) -> list[dict[str, str]]:
    """Every series of ``metric`` whose labels include ``labels``."""
    return [s.labels for family in REGISTRY.collect() for s in family.samples
            if s.name == metric and all(s.labels.get(k) == v for k, v in labels.items())]


def condition(kind: str, status: str, reason: str = "Because", since: str = STARTED) -> dict:
    return {"type": kind, "status": status, "reason": reason, "lastTransitionTime": since}


def test_serving_ready_and_the_swap_under_way_follow_the_conditions():
    swapping = {"conditions": [condition("Ready", "True"), condition("Progressing", "True", "RevisionStarting")]}
    om.set_serving_state(NS, "kimi", "vllm", swapping)
    assert value("drafter_serving_ready", namespace=NS, name="kimi", engine="vllm") == 1.0
    started = dt.datetime(2026, 11, 30, 10, tzinfo=dt.timezone.utc).timestamp()
    assert value("drafter_swap_started_timestamp_seconds", namespace=NS, name="kimi", engine="vllm",
                 reason="RevisionStarting") == started
    # The reason moves on while the swap goes on: one series, the same start.
    om.set_serving_state(NS, "kimi", "vllm", {"conditions": [condition("Ready", "True"),
                                                              condition("Progressing", "True", "Gating")]})
    assert [s["reason"] for s in series("drafter_swap_started_timestamp_seconds", namespace=NS, name="kimi")] \
        == ["Gating"]
    # Swap over (or never started): no series, so `time() - started > limit` cannot fire on a stale one.
    om.set_serving_state(NS, "kimi", "vllm", {"conditions": [condition("Ready", "False"),
                                                              condition("Progressing", "False", "RevisionActive")]})
    assert series("drafter_swap_started_timestamp_seconds", namespace=NS, name="kimi") == []
    assert value("drafter_serving_ready", namespace=NS, name="kimi", engine="vllm") == 0.0
    om.forget_serving(NS, "kimi")
    assert series("drafter_serving_ready", namespace=NS, name="kimi") == []


def test_not_ready_is_one_series_per_serving_with_its_reason_and_none_when_scaled_to_zero():
    def not_ready(name: str) -> list[tuple[str, float | None]]:
        return [(s["reason"], value("drafter_serving_not_ready", **s))
                for s in series("drafter_serving_not_ready", namespace=NS, name=name)]

    om.set_serving_state(NS, "nr", "vllm", {"conditions": [condition("Ready", "False", "EngineStarting")]})
    assert not_ready("nr") == [("EngineStarting", 1.0)]
    # The reason moves on: still one series (the alert's `max by (namespace, name)` keeps its `for` clock).
    om.set_serving_state(NS, "nr", "vllm", {"conditions": [condition("Ready", "False", "EngineExited")]})
    assert not_ready("nr") == [("EngineExited", 1.0)]
    # spec.replicas 0 is Ready False by request: no series, though drafter_serving_ready stays 0.
    om.set_serving_state(NS, "nr", "vllm", {"conditions": [condition("Ready", "False", "ScaledToZero")]})
    assert not_ready("nr") == []
    assert value("drafter_serving_ready", namespace=NS, name="nr", engine="vllm") == 0.0
    om.set_serving_state(NS, "nr", "vllm", {"conditions": [condition("Ready", "Unknown", "EngineStarting")]})
    assert not_ready("nr") == [("EngineStarting", 1.0)]
    # Ready, or no Ready condition yet: no series.
    om.set_serving_state(NS, "nr", "vllm", {"conditions": [condition("Ready", "True", "EngineReady")]})
    assert not_ready("nr") == []
    om.set_serving_state(NS, "other", "vllm", {"conditions": [condition("Ready", "False", "Unschedulable")]})
    om.set_serving_state(NS, "nr", "vllm", {})
    assert not_ready("nr") == [] and not_ready("other") == [("Unschedulable", 1.0)]
    om.forget_serving(NS, "other")
    assert not_ready("other") == []
    om.forget_serving(NS, "nr")


def test_rollbacks_start_at_zero_so_the_first_one_is_an_increase():
    om.set_serving_state(NS, "fresh", "sglang", {})
    assert value("drafter_rollbacks_total", namespace=NS, name="fresh", engine="sglang") == 0.0
    om.rollback(NS, "fresh", "sglang")
    assert value("drafter_rollbacks_total", namespace=NS, name="fresh", engine="sglang") == 1.0
    om.forget_serving(NS, "fresh")
    assert value("drafter_rollbacks_total", namespace=NS, name="fresh", engine="sglang") is None


def test_last_benchmark_speedup_names_the_revision_its_drafter_and_the_benchmark():
    status = {"revisions": [{"name": "r1", "drafter": "none"}, {"name": "r2", "drafter": "eagle3:/models/d"}],
              "lastBenchmark": {"name": "kimi-gate-r2", "speedup": 0.66, "revision": "r2"}}
    om.set_serving_state(NS, "bench", "vllm", status)
    assert value("drafter_last_benchmark_speedup", namespace=NS, name="bench", engine="vllm",
                 drafter="eagle3:/models/d", revision="r2", benchmark="kimi-gate-r2") == 0.66
    # A newer benchmark replaces the series; none removes it.
    status["lastBenchmark"] = {"name": "by-hand", "speedup": 1.4, "revision": "r2"}
    om.set_serving_state(NS, "bench", "vllm", status)
    assert [(s["benchmark"], s["drafter"]) for s in series("drafter_last_benchmark_speedup", namespace=NS,
                                                           name="bench")] == [("by-hand", "eagle3:/models/d")]
    om.set_serving_state(NS, "bench", "vllm", {"revisions": status["revisions"]})
    assert series("drafter_last_benchmark_speedup", namespace=NS, name="bench") == []
    om.forget_serving(NS, "bench")


def test_another_servings_series_are_left_alone():
    om.set_serving_state(NS, "a", "vllm", {"conditions": [condition("Progressing", "True", "RevisionStarting")]})
    om.set_serving_state(NS, "b", "vllm", {"conditions": [condition("Progressing", "False", "RevisionActive")]})
    assert len(series("drafter_swap_started_timestamp_seconds", namespace=NS, name="a")) == 1
    om.forget_serving(NS, "a")
    om.forget_serving(NS, "b")


def test_engine_metrics_available_is_per_revision_and_forgotten_with_it():
    labels = dict(namespace=NS, name="m", engine="vllm", drafter="eagle3", revision="r1")
    om.set_engine_metrics_available(NS, "m", "vllm", "eagle3", "r1", False)
    assert value("drafter_engine_metrics_available", **labels) == 0.0
    om.set_engine_metrics_available(NS, "m", "vllm", "eagle3", "r1", True)
    assert value("drafter_engine_metrics_available", **labels) == 1.0
    om.forget_revision(NS, "m", "r1")
    assert value("drafter_engine_metrics_available", **labels) is None


class RecordingKube:
    """Takes the writes apply sends and answers nothing: only the gauges are under test here."""

    def __init__(self):
        self.sent: list[tuple] = []

    def patch(self, path, body):
        self.sent.append(("patch", path))

    def create(self, path, body):
        self.sent.append(("create", path))

    def delete(self, path, **_):
        self.sent.append(("delete", path))

    def get(self, path):
        return None  # the object is gone


def body(kind_status: dict, labels: dict | None = None, spec: dict | None = None, name: str = "run") -> dict:
    return {"metadata": {"namespace": NS, "name": name, "uid": "u1", "labels": labels or {}},
            "spec": spec or {}, "status": kind_status}


def test_benchmark_apply_publishes_the_state_the_plan_leaves():
    reconciler = BenchmarkReconciler(RecordingKube(), image="img")
    running = body({"state": "Running"}, spec={"servingRef": {"name": "kimi"}})
    finished = {"state": "Succeeded", "result": {"speedup": 1.62, "crossoverConcurrency": 32,
                                                 "equivalence": {"prompts": 8, "defects": 2}}}
    reconciler.apply(running, Plan(status=finished), lambda *_: None)
    labels = dict(namespace=NS, benchmark="run", serving="kimi")
    assert value("drafter_benchmark_failed", **labels) == 0.0
    assert value("drafter_benchmark_speedup", **labels) == 1.62
    assert value("drafter_benchmark_crossover_concurrency", **labels) == 32
    assert value("drafter_benchmark_output_defects", **labels) == 2
    # The recorded status alone (an empty plan, e.g. after an operator restart) says the same.
    reconciler.apply(body(finished, spec={"servingRef": {"name": "kimi"}}), Plan(), lambda *_: None)
    assert value("drafter_benchmark_speedup", **labels) == 1.62
    # A new generation fails without a result: failed, and no figures of the earlier run.
    reconciler.apply(body(finished, spec={"servingRef": {"name": "kimi"}}),
                     Plan(status={"state": "Failed", "result": None}), lambda *_: None)
    assert value("drafter_benchmark_failed", **labels) == 1.0
    assert value("drafter_benchmark_speedup", **labels) is None
    assert value("drafter_benchmark_crossover_concurrency", **labels) is None
    assert value("drafter_benchmark_output_defects", **labels) is None
    # Deleted: observe finds nothing and the series go.
    assert reconciler.observe(NS, "run") is None
    assert series("drafter_benchmark_failed", namespace=NS, benchmark="run") == []


def test_a_gate_benchmark_is_labelled_with_its_serving():
    reconciler = BenchmarkReconciler(RecordingKube(), image="img")
    gate = body({"state": "Failed"}, labels={"drafter.dev/serving": "kimi"}, name="kimi-gate-r2")
    reconciler.apply(gate, Plan(), lambda *_: None)
    assert value("drafter_benchmark_failed", namespace=NS, benchmark="kimi-gate-r2", serving="kimi") == 1.0
    om.forget_benchmark(NS, "kimi-gate-r2")
    assert series("drafter_benchmark_failed", namespace=NS, benchmark="kimi-gate-r2") == []


def test_training_apply_publishes_failed_and_forgets_a_deleted_training():
    reconciler = TrainingReconciler(RecordingKube(), image="img")
    training = body({"stage": "Train"}, name="retrain")
    reconciler.apply(training, Plan(), lambda *_: None)
    assert value("drafter_training_failed", namespace=NS, training="retrain") == 0.0
    reconciler.apply(training, Plan(status={"stage": "Failed"}), lambda *_: None)
    assert value("drafter_training_failed", namespace=NS, training="retrain") == 1.0
    assert reconciler.observe(NS, "retrain") is None
    assert value("drafter_training_failed", namespace=NS, training="retrain") is None


def test_engine_metrics_available_is_absent_while_nothing_can_be_read():
    labels = dict(namespace=NS, name="loading", engine="vllm", drafter="eagle3", revision="r1")
    om.set_engine_metrics_available(NS, "loading", "vllm", "eagle3", "r1", None)  # never set: nothing to remove
    assert value("drafter_engine_metrics_available", **labels) is None
    om.set_engine_metrics_available(NS, "loading", "vllm", "eagle3", "r1", False)
    om.set_engine_metrics_available(NS, "loading", "vllm", "eagle3", "r1", None)  # all its pods restarted
    assert value("drafter_engine_metrics_available", **labels) is None


def test_reconcile_counters_exist_at_zero_before_the_first_reconcile():
    om.start_reconcile_counters(("KindNeverReconciled",))
    for result in ("ok", "error"):
        assert value("drafter_reconcile_total", kind="KindNeverReconciled", result=result) == 0.0
