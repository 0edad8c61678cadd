"""The chart's alert rules (charts/drafter-operator/files/alerts.yaml through templates/prometheusrule.yaml),
rendered by the real `helm template` and held to the real `promtool` (3.16, from the local cluster's
toolchain): `check rules` parses them, and `test rules` runs one unit test per alert that fires on the
series it is about and one that stays quiet. Thresholds and `for` durations come from values; every
alert links a runbook page that exists; every metric an alert reads is one the operator exports.

Skips (saying why) when helm or promtool are absent: `drafter-operator cluster build` builds them.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from drafter_testbed.prometheus import CHART, KUBE_VERSION
from tests.support.dashboard import exported_metric_names, metric_names
from tests.support.alerts import NAMESPACE, RELEASE, RUNBOOK_BASE, alerts_of, promtool, render, rule_groups, tool

ROOT = Path(__file__).resolve().parents[3]
RUNBOOKS = ROOT / "docs" / "runbooks"
OPERATOR_JOB = f"{RELEASE}-drafter-operator-metrics"  # the chart's metrics Service, the ServiceMonitor's job
OTHER_JOB = "u-drafter-operator-metrics"  # another release's operator, scraped by the same Prometheus


@pytest.fixture(scope="module")
def default_rules(tmp_path_factory) -> tuple[Path, dict]:
    groups = rule_groups()
    path = tmp_path_factory.mktemp("rules") / "alerts.yaml"
    path.write_text(yaml.safe_dump(groups, sort_keys=False))
    return path, groups


def runbook(page: str) -> str:
    return f"{RUNBOOK_BASE}/{page}.md"


def not_reconciling_alert(servings: int) -> list[dict]:
    """What DrafterOperatorNotReconciling fires with when this release's operator has `servings` servings."""
    return [{"exp_labels": {"severity": "warning"}, "exp_annotations": {
        "summary": f"The drafter-operator has not reconciled its {servings} DrafterServings",
        "description": "The operator is up and reports DrafterServings but ran no DrafterServing reconcile in 10m.",
        "runbook_url": runbook("operator-not-reconciling")}}]


# --------------------------------------------------------------------------------------------------
# One promtool test group per alert: the series it reads, a time it must stay quiet and a time it must
# fire, with the labels and annotations it fires with. Series are promtool's expanding notation
# (`a+bxN`: N more samples, each b more), one sample a minute.
# Per-object series carry their object's namespace and the job of the operator that exports them (the
# rules select this release's by job); the operator's own series carry its target's job and namespace.
REVISION = {"namespace": "ns", "engine": "vllm", "drafter": "eagle3:/models/d", "revision": "r1", "job": OPERATOR_JOB}
TARGET = {"job": OPERATOR_JOB, "namespace": NAMESPACE}


def series(metric: str, labels: dict[str, str], values: str) -> dict:
    """``labels`` without a job are this release's (job OPERATOR_JOB)."""
    inner = ",".join(f'{k}="{v}"' for k, v in {"job": OPERATOR_JOB, **labels}.items())
    return {"series": f"{metric}{{{inner}}}", "values": values}


def sharded(instance: str, shard: int, shards: int, values: str, job: dict[str, str] = TARGET) -> list[dict]:
    """An operator process of ``shards`` leading ``shard`` (its drafter_operator_shard series), and its
    drafter_operator_shards: its shard count, exported for the whole window whether it leads or not."""
    labels = {**job, "instance": instance}
    return [series("drafter_operator_shard", {**labels, "shard": str(shard), "shards": str(shards)}, values),
            series("drafter_operator_shards", labels, f"{shards}x30")]


CASES: dict[str, dict] = {
    "DrafterAcceptanceLow": {
        "series": [series("drafter_acceptance_rate", {**REVISION, "name": "low"}, "0.2x30"),
                   series("drafter_acceptance_rate", {**REVISION, "name": "healthy"}, "0.8x30"),
                   # Below for 10 minutes only: less than `for` (15m).
                   series("drafter_acceptance_rate", {**REVISION, "name": "dip"}, "0.2x9 0.8x20")],
        "quiet": "14m", "fires": "20m",
        "alerts": [{"exp_labels": {**REVISION, "name": "low", "severity": "warning"}, "exp_annotations": {
            "summary": "ns/low: drafter acceptance 20%",
            "description": "Revision r1 (vllm, drafter eagle3:/models/d) has accepted 20% of its draft tokens, "
                           "below 0.3, for 15m.",
            "runbook_url": runbook("acceptance-low")}}],
    },
    "DrafterSpeculationSlowerThanBaseline": {
        # The slow revision's benchmark finishes at 5m (no series before: no benchmark yet).
        "series": [series("drafter_last_benchmark_speedup", {**REVISION, "name": "slow", "benchmark": "g1"},
                          "_x4 0.66x5"),
                   series("drafter_last_benchmark_speedup", {**REVISION, "name": "fast", "benchmark": "g2"}, "1.7x10"),
                   # Serving without a drafter: a benchmark near 1.0x says nothing about speculation.
                   series("drafter_last_benchmark_speedup", {**REVISION, "drafter": "none", "name": "plain",
                                                             "benchmark": "g3"}, "0.97x10")],
        "quiet": "3m", "fires": "8m",
        "alerts": [{"exp_labels": {**REVISION, "name": "slow", "benchmark": "g1", "severity": "warning"},
                    "exp_annotations": {
                        "summary": "ns/slow: speculation measured at 0.66x of the baseline",
                        "description": "Benchmark g1 of revision r1 (drafter eagle3:/models/d) measured a speedup of "
                                       "0.66x against its baseline, below 1: the drafter costs throughput.",
                        "runbook_url": runbook("speculation-slower")}}],
    },
    "DrafterServingDegraded": {
        "series": [series("drafter_degraded", {**REVISION, "name": "bad"}, "0x5 1x5"),
                   series("drafter_degraded", {**REVISION, "name": "good"}, "0x10")],
        "quiet": "3m", "fires": "7m",
        "alerts": [{"exp_labels": {**REVISION, "name": "bad", "severity": "warning"}, "exp_annotations": {
            "summary": "ns/bad is Degraded: drafter eagle3:/models/d does not pay",
            "description": "Revision r1 (vllm) has Degraded=True; status.degradedAction says what "
                           "spec.acceptance.onDegraded did.",
            "runbook_url": runbook("serving-degraded")}}],
    },
    "DrafterLost": {
        "series": [series("drafter_acceptance_first_position_rate", {**REVISION, "name": "lost"}, "0.41x4 0.003x20"),
                   series("drafter_acceptance_first_position_rate", {**REVISION, "name": "poor"}, "0.4x25"),
                   # Near zero for 4 minutes only: less than `for` (5m).
                   series("drafter_acceptance_first_position_rate", {**REVISION, "name": "blip"}, "0.4x4 0.0x3 0.4x18")],
        "quiet": "8m", "fires": "12m",
        "alerts": [{"exp_labels": {**REVISION, "name": "lost", "severity": "warning"}, "exp_annotations": {
            "summary": "ns/lost: drafter lost, its first position accepts 0.3%",
            "description": "Revision r1 (vllm, drafter eagle3:/models/d) accepts 0.3% of its drafts at the first "
                           "position, below 0.02, for 5m: the drafter is not running as trained.",
            "runbook_url": runbook("drafter-lost")}}],
    },
    "DrafterAcceptanceDrift": {
        # DriftDetected turns True at 5m on one serving; the other stays within its tolerance. The value is the
        # figure at promotion, which both carry.
        "series": [series("drafter_acceptance_length_at_promotion", {**REVISION, "name": "drifted", "benchmark": "g1"},
                          "3x10"),
                   series("drafter_acceptance_drift", {**REVISION, "name": "drifted"}, "0x5 1x5"),
                   series("drafter_acceptance_length_at_promotion", {**REVISION, "name": "steady", "benchmark": "g2"},
                          "2.6x10"),
                   series("drafter_acceptance_drift", {**REVISION, "name": "steady"}, "0x10")],
        "quiet": "3m", "fires": "7m",
        "alerts": [{"exp_labels": {**REVISION, "name": "drifted", "benchmark": "g1", "severity": "warning"},
                    "exp_annotations": {
                        "summary": "ns/drifted: acceptance length drifted below the 3.00 measured at promotion",
                        "description": "Revision r1 (vllm, drafter eagle3:/models/d) has DriftDetected=True: its live "
                                       "mean acceptance length stayed more than spec.acceptance.driftTolerance below "
                                       "the 3.00 gate benchmark g1 measured, for spec.acceptance.for. The condition's "
                                       "message gives the figures.",
                        "runbook_url": runbook("acceptance-drift")}}],
    },
    "DrafterEngineMetricsUnavailable": {
        "series": [series("drafter_engine_metrics_available", {**REVISION, "name": "blind"}, "1x5 0x20"),
                   series("drafter_engine_metrics_available", {**REVISION, "name": "seen"}, "1x25")],
        "quiet": "12m", "fires": "17m",
        "alerts": [{"exp_labels": {**REVISION, "name": "blind", "severity": "warning"}, "exp_annotations": {
            "summary": "ns/blind: the engines' metrics cannot be read",
            "description": "The operator could not read or trust the vllm metrics of revision r1 for 10m: "
                           "acceptance is not watched (Degraded is Unknown).",
            "runbook_url": runbook("engine-metrics-unavailable")}}],
    },
    "DrafterSwapStuck": {
        # promtool's clock starts at 0: a swap started at 0 is an hour old at 60m.
        "series": [series("drafter_swap_started_timestamp_seconds",
                          {"namespace": "ns", "name": "kimi", "engine": "vllm", "reason": "Unschedulable"}, "0x70"),
                   series("drafter_swap_started_timestamp_seconds",
                          {"namespace": "ns", "name": "young", "engine": "vllm", "reason": "Gating"}, "1800x70")],
        "quiet": "59m", "fires": "61m",
        "alerts": [{"exp_labels": {"job": OPERATOR_JOB, "namespace": "ns", "name": "kimi", "engine": "vllm", "reason": "Unschedulable",
                                   "severity": "warning"}, "exp_annotations": {
            "summary": "ns/kimi: swap under way for 1h 1m 0s (Unschedulable)",
            "description": "The swap of ns/kimi has been in progress (Progressing=True, reason Unschedulable) for "
                           "more than 3600 s; the previous revision keeps serving.",
            "runbook_url": runbook("swap-stuck")}}],
    },
    "DrafterSwapRolledBack": {
        "series": [series("drafter_rollbacks_total", {"namespace": "ns", "name": "kimi", "engine": "vllm"}, "0x10 1x50"),
                   series("drafter_rollbacks_total", {"namespace": "ns", "name": "calm", "engine": "vllm"}, "0x60")],
        "quiet": "5m", "fires": "15m", "quiet_again": "50m",
        "alerts": [{"exp_labels": {"job": OPERATOR_JOB, "namespace": "ns", "name": "kimi", "engine": "vllm", "severity": "warning"},
                    "exp_annotations": {
            "summary": "ns/kimi: a revision was rolled back",
            "description": "ns/kimi abandoned a revision in the last 30m and kept (or returned) traffic on the "
                           "previous one.",
            "runbook_url": runbook("swap-rolled-back")}}],
    },
    "DrafterBenchmarkFailed": {
        "series": [series("drafter_benchmark_failed", {"namespace": "ns", "benchmark": "b1", "serving": "kimi"}, "0x5 1x5"),
                   series("drafter_benchmark_failed", {"namespace": "ns", "benchmark": "b2", "serving": "kimi"}, "0x10")],
        "quiet": "3m", "fires": "8m",
        "alerts": [{"exp_labels": {"job": OPERATOR_JOB, "namespace": "ns", "benchmark": "b1", "serving": "kimi", "severity": "warning"},
                    "exp_annotations": {
            "summary": "DrafterBenchmark ns/b1 failed",
            "description": "The run of ns/b1 (serving kimi) failed without a result; its Failed condition says why.",
            "runbook_url": runbook("benchmark-failed")}}],
    },
    "DrafterOutputDiverged": {
        "series": [series("drafter_benchmark_output_defects", {"namespace": "ns", "benchmark": "b1", "serving": "kimi"},
                          "0x5 3x5"),
                   series("drafter_benchmark_output_defects", {"namespace": "ns", "benchmark": "b2", "serving": "kimi"},
                          "0x10")],
        "quiet": "3m", "fires": "8m",
        "alerts": [{"exp_labels": {"job": OPERATOR_JOB, "namespace": "ns", "benchmark": "b1", "serving": "kimi",
                                   "severity": "critical"},
                    "exp_annotations": {
            "summary": "DrafterBenchmark ns/b1: speculation changed the output",
            "description": "3 prompts of ns/b1 (serving kimi) left the no-speculation baseline's output at a token "
                           "the baseline was clearly decided on; its GatePassed condition names the first.",
            "runbook_url": runbook("output-diverged")}}],
    },
    "DrafterTrainingFailed": {
        "series": [series("drafter_training_failed", {"namespace": "ns", "training": "t1"}, "0x5 1x5"),
                   series("drafter_training_failed", {"namespace": "ns", "training": "t2"}, "0x10")],
        "quiet": "3m", "fires": "8m",
        "alerts": [{"exp_labels": {"job": OPERATOR_JOB, "namespace": "ns", "training": "t1", "severity": "warning"}, "exp_annotations": {
            "summary": "DrafterTraining ns/t1 failed",
            "description": "A stage of ns/t1 failed; its stage condition carries the stage's own error.",
            "runbook_url": runbook("training-failed")}}],
    },
    "DrafterOperatorDown": {
        "series": [series("up", {"job": OPERATOR_JOB, "namespace": NAMESPACE}, "1x8 0x20"),
                   # Another job's target going down is not the operator's.
                   series("up", {"job": "engines", "namespace": NAMESPACE}, "0x28")],
        "quiet": "12m", "fires": "15m",
        "alerts": [{"exp_labels": {"job": OPERATOR_JOB, "namespace": NAMESPACE, "severity": "warning"},
                    "exp_annotations": {
            "summary": "The drafter-operator's metrics endpoint is not up",
            "description": f'No scrape of the operator (up{{job="{OPERATOR_JOB}", namespace="{NAMESPACE}"}}) '
                           "succeeded for 5m: swaps, acceptance watches and Degraded actions have stopped.",
            "runbook_url": runbook("operator-down")}}],
    },
    "DrafterOperatorDown, never discovered": {
        "alertname": "DrafterOperatorDown",
        "series": [series("up", {"job": "engines", "namespace": NAMESPACE}, "1x10")],
        "quiet": "4m", "fires": "6m",
        "alerts": [{"exp_labels": {"job": OPERATOR_JOB, "namespace": NAMESPACE, "severity": "warning"},
                    "exp_annotations": {
            "summary": "The drafter-operator's metrics endpoint is not up",
            "description": f'No scrape of the operator (up{{job="{OPERATOR_JOB}", namespace="{NAMESPACE}"}}) '
                           "succeeded for 5m: swaps, acceptance watches and Degraded actions have stopped.",
            "runbook_url": runbook("operator-down")}}],
    },
    "DrafterOperatorDown, a standby beside the leader": {
        # Leader election: the standby pod is a second target of the same job, up, and must not count.
        "alertname": "DrafterOperatorDown",
        "series": [series("up", {"job": OPERATOR_JOB, "namespace": NAMESPACE, "instance": "leader"}, "1x20"),
                   series("up", {"job": OPERATOR_JOB, "namespace": NAMESPACE, "instance": "standby"}, "1x20")],
        "quiet": "10m", "fires": "20m", "alerts": [],
    },
    "DrafterOperatorNoLeader": {
        # A leader and a standby until 5m; then the leader's pod is gone (its series end) and the standby
        # keeps standing by: the Lease is held by someone Prometheus does not scrape.
        "series": [series("drafter_operator_leader", {"job": OPERATOR_JOB, "namespace": NAMESPACE, "instance": "a"},
                          "1x5"),
                   series("drafter_operator_leader", {"job": OPERATOR_JOB, "namespace": NAMESPACE, "instance": "b"},
                          "0x20"),
                   # Another release's operators (another job) lead: not this release's.
                   series("drafter_operator_leader", {"job": "other-metrics", "namespace": "other", "instance": "c"},
                          "1x20")],
        "quiet": "9m", "fires": "16m",
        "alerts": [{"exp_labels": {"severity": "warning"}, "exp_annotations": {
            "summary": "Every drafter-operator Prometheus sees is standing by",
            "description": f'The operators of job="{OPERATOR_JOB}", namespace="{NAMESPACE}" have all stood by for 5m: '
                           "their Lease is held by a process Prometheus does not scrape (an operator run by hand, "
                           "another release for the same namespaces), which acts instead of them, or by one that "
                           "renews without acting.",
            "runbook_url": runbook("operator-no-leader")}}],
    },
    "DrafterOperatorNoLeader, a standby beside the leader": {
        "alertname": "DrafterOperatorNoLeader",
        "series": [series("drafter_operator_leader", {"job": OPERATOR_JOB, "namespace": NAMESPACE, "instance": "a"},
                          "1x20"),
                   series("drafter_operator_leader", {"job": OPERATOR_JOB, "namespace": NAMESPACE, "instance": "b"},
                          "0x20")],
        "quiet": "10m", "fires": "20m", "alerts": [],
    },
    "DrafterOperatorShardWithoutLeader": {
        # --shards 2: shard 0's and shard 1's leaders and a standby; at 5m shard 1's leader is gone and nobody takes
        # its shard (the standby stays one); another release's operators (another job) lead only one of their two.
        "series": [*sharded("a", 0, 2, "1x30"), *sharded("b", 1, 2, "1x5"),
                   series("drafter_operator_shards", {**TARGET, "instance": "c"}, "2x30"),
                   *sharded("d", 0, 2, "1x30", job={"job": "other-metrics", "namespace": "other"})],
        "quiet": "9m", "fires": "16m",
        "alerts": [{"exp_labels": {"severity": "warning"}, "exp_annotations": {
            "summary": "A shard of the drafter-operator has no leader",
            "description": f'The operators of job="{OPERATOR_JOB}", namespace="{NAMESPACE}" have led only 1 shards, '
                           "fewer than they were started with (--shards), for 5m: the servings, trainings and "
                           "benchmarks of a shard nobody leads are not reconciled (no swap, acceptance watch or "
                           "action).",
            "runbook_url": runbook("operator-shard-without-leader")}}],
    },
    "DrafterOperatorShardWithoutLeader, a takeover": {
        # Shard 1's leader is killed at 5m and the standby leads shard 1 from 6m (its gauge appears): quiet.
        "alertname": "DrafterOperatorShardWithoutLeader",
        "series": [*sharded("a", 0, 2, "1x30"), *sharded("b", 1, 2, "1x5"), *sharded("c", 1, 2, "_x6 1x24")],
        "quiet": "20m", "fires": "30m", "alerts": [],
    },
    "DrafterOperatorShardWithoutLeader, unsharded": {
        # One shard (no --shards), led: count 1 is not below 1.
        "alertname": "DrafterOperatorShardWithoutLeader",
        "series": sharded("a", 0, 1, "1x30"),
        "quiet": "20m", "fires": "30m", "alerts": [],
    },
    "DrafterOperatorNotReconciling, a standby and a takeover": {
        # The leader reconciles until it is killed at 10m (its series end); the standby, which exported no
        # serving or reconcile series, takes over and reconciles from 11m on. Quiet throughout.
        "alertname": "DrafterOperatorNotReconciling",
        "series": [series("drafter_serving_ready", {"namespace": "ns", "name": "a", "engine": "vllm", "instance": "old"},
                          "1x10"),
                   series("drafter_reconcile_total", {**TARGET, "kind": "DrafterServing", "result": "ok", "instance": "old"},
                          "0+3x10"),
                   series("drafter_operator_leader", {**TARGET, "instance": "new"}, "0x10 1x30"),
                   series("drafter_serving_ready", {"namespace": "ns", "name": "a", "engine": "vllm", "instance": "new"},
                          "_x11 1x29"),
                   series("drafter_reconcile_total", {**TARGET, "kind": "DrafterServing", "result": "ok", "instance": "new"},
                          "_x11 0+3x29")],
        "quiet": "8m", "fires": "35m", "alerts": [],
    },
    "DrafterOperatorNotReconciling": {
        # Reconciles every 20 s (3 a minute) until 10m, then none while two servings exist.
        "series": [series("drafter_serving_ready", {"namespace": "ns", "name": "a", "engine": "vllm"}, "1x40"),
                   series("drafter_serving_ready", {"namespace": "ns", "name": "b", "engine": "sglang"}, "0x40"),
                   series("drafter_reconcile_total", {**TARGET, "kind": "DrafterServing", "result": "ok"}, "0+3x10 30x30")],
        "quiet": "22m", "fires": "27m",
        "alerts": not_reconciling_alert(2),
    },
    "DrafterObjectReconcileFailing": {
        # One serving's writes refused from 0m; another healthy all along; a third failed once and recovered.
        "series": [series("drafter_reconcile_failing", {"kind": "DrafterServing", "namespace": "ns", "name": "stuck"},
                          "1x30"),
                   series("drafter_reconcile_failing", {"kind": "DrafterServing", "namespace": "ns", "name": "fine"},
                          "0x30"),
                   series("drafter_reconcile_failing", {"kind": "DrafterServing", "namespace": "ns", "name": "blip"},
                          "1x2 0x28")],
        "quiet": "5m", "fires": "15m",
        "alerts": [{"exp_labels": {"kind": "DrafterServing", "namespace": "ns", "name": "stuck", "severity": "warning"},
                    "exp_annotations": {
                        "summary": "DrafterServing ns/stuck: every reconcile is failing",
                        "description": "Every reconcile of DrafterServing ns/stuck has failed for 10m: its conditions "
                                       "carry the apiserver's refusal (kubectl describe).",
                        "runbook_url": runbook("object-reconcile-failing")}}],
    },
    "DrafterServingNotReady": {
        # Among Ready servings: one stuck from 0m (its reason moves on at 8m: still one alert, same clock);
        # one not Ready for 10m only (less than `for`, 15m); one scaled to zero (no series: ScaledToZero).
        # Another release's stuck serving is its own rule's, not this one's.
        "series": [series("drafter_serving_not_ready", {"namespace": "ns", "name": "stuck", "engine": "vllm",
                                                        "reason": "EngineStarting"}, "1x7"),
                   series("drafter_serving_not_ready", {"namespace": "ns", "name": "stuck", "engine": "vllm",
                                                        "reason": "EngineExited"}, "_x7 1x23"),
                   series("drafter_serving_not_ready", {"namespace": "ns", "name": "slow", "engine": "sglang",
                                                        "reason": "Unschedulable"}, "1x9"),
                   series("drafter_serving_ready", {"namespace": "ns", "name": "fine", "engine": "vllm"}, "1x30"),
                   series("drafter_serving_ready", {"namespace": "ns", "name": "idle", "engine": "vllm"}, "0x30"),
                   series("drafter_serving_not_ready", {"job": OTHER_JOB, "namespace": "ns2", "name": "theirs",
                                                        "engine": "vllm", "reason": "EngineExited"}, "1x30")],
        "quiet": "14m", "fires": "16m", "quiet_again": "35m",
        "alerts": [{"exp_labels": {"namespace": "ns", "name": "stuck", "engine": "vllm", "severity": "warning"},
                    "exp_annotations": {
                        "summary": "ns/stuck is not Ready",
                        "description": "DrafterServing ns/stuck (vllm) has not been Ready for 15m: its Ready "
                                       "condition's reason and message say why (kubectl describe drafterserving).",
                        "runbook_url": runbook("serving-not-ready")}}],
    },
    "DrafterObjectReconcileFailing, another release's object": {
        "alertname": "DrafterObjectReconcileFailing",
        "series": [series("drafter_reconcile_failing", {"job": OTHER_JOB, "kind": "DrafterServing", "namespace": "ns2",
                                                        "name": "theirs"}, "1x30")],
        "quiet": "5m", "fires": "20m", "alerts": [],
    },
    "DrafterOperatorNotReconciling, another release reconciles": {
        # This release's loops stop at 10m; another release's operator keeps reconciling its own servings.
        "alertname": "DrafterOperatorNotReconciling",
        "series": [series("drafter_serving_ready", {"namespace": "ns", "name": "a", "engine": "vllm"}, "1x40"),
                   series("drafter_reconcile_total", {**TARGET, "kind": "DrafterServing", "result": "ok"},
                          "0+3x10 30x30"),
                   series("drafter_serving_ready", {"job": OTHER_JOB, "namespace": "ns2", "name": "b", "engine": "vllm"},
                          "1x40"),
                   series("drafter_reconcile_total", {"job": OTHER_JOB, "namespace": "other", "kind": "DrafterServing",
                                                      "result": "ok"}, "0+3x40")],
        "quiet": "22m", "fires": "27m",
        "alerts": not_reconciling_alert(1),
    },
    "DrafterOperatorNotReconciling, another release is stuck": {
        # The other release's servings and its silence are its own rule's alert, not this release's.
        "alertname": "DrafterOperatorNotReconciling",
        "series": [series("drafter_serving_ready", {"job": OTHER_JOB, "namespace": "ns2", "name": "b", "engine": "vllm"},
                          "1x40"),
                   series("drafter_reconcile_total", {"job": OTHER_JOB, "namespace": "other", "kind": "DrafterServing",
                                                      "result": "ok"}, "0x40"),
                   series("drafter_reconcile_total", {**TARGET, "kind": "DrafterServing", "result": "ok"}, "0x40")],
        "quiet": "10m", "fires": "30m", "alerts": [],
    },
    "DrafterReconcileErrors, another release succeeds": {
        # Every benchmark reconcile of this release fails; the other release's successes must not hide it.
        "alertname": "DrafterReconcileErrors",
        "series": [series("drafter_reconcile_total", {**TARGET, "kind": "DrafterBenchmark", "result": "error"},
                          "0+4x30"),
                   series("drafter_reconcile_total", {**TARGET, "kind": "DrafterBenchmark", "result": "ok"}, "7x30"),
                   series("drafter_reconcile_total", {"job": OTHER_JOB, "namespace": "other", "kind": "DrafterBenchmark",
                                                      "result": "ok"}, "0+5x30")],
        "quiet": "3m", "fires": "20m",
        "alerts": [{"exp_labels": {"kind": "DrafterBenchmark", "severity": "warning"}, "exp_annotations": {
            "summary": "Every DrafterBenchmark reconcile is failing",
            "description": "No DrafterBenchmark reconcile succeeded in 15m while 60 failed: the operator's log "
                           "says why (API errors, RBAC).",
            "runbook_url": runbook("reconcile-errors")}}],
    },
    "DrafterServingDegraded, another release's serving": {
        # Per-object alerts too: without the job, each release's rule would fire for every serving.
        "alertname": "DrafterServingDegraded",
        "series": [series("drafter_degraded", {**REVISION, "job": OTHER_JOB, "name": "theirs"}, "1x10")],
        "quiet": "1m", "fires": "8m", "alerts": [],
    },
    "DrafterReconcileErrors": {
        # Benchmarks: every reconcile fails from 0m. Servings: some fail, most succeed.
        "series": [series("drafter_reconcile_total", {**TARGET, "kind": "DrafterBenchmark", "result": "error"}, "0+4x30"),
                   series("drafter_reconcile_total", {**TARGET, "kind": "DrafterBenchmark", "result": "ok"}, "7x30"),
                   series("drafter_reconcile_total", {**TARGET, "kind": "DrafterServing", "result": "error"}, "0+1x30"),
                   series("drafter_reconcile_total", {**TARGET, "kind": "DrafterServing", "result": "ok"}, "0+3x30")],
        "quiet": "3m", "fires": "20m",
        "alerts": [{"exp_labels": {"kind": "DrafterBenchmark", "severity": "warning"}, "exp_annotations": {
            "summary": "Every DrafterBenchmark reconcile is failing",
            "description": "No DrafterBenchmark reconcile succeeded in 15m while 60 failed: the operator's log "
                           "says why (API errors, RBAC).",
            "runbook_url": runbook("reconcile-errors")}}],
    },
}


def unit_tests(rule_file: str) -> dict:
    """promtool's test file: per alert a group with its series, quiet when it must be, firing when it must."""
    tests = []
    for name, case in CASES.items():
        alert = case.get("alertname", name)
        evals = [{"eval_time": case["quiet"], "alertname": alert, "exp_alerts": []},
                 {"eval_time": case["fires"], "alertname": alert, "exp_alerts": case["alerts"]}]
        if "quiet_again" in case:
            evals.append({"eval_time": case["quiet_again"], "alertname": alert, "exp_alerts": []})
        tests.append({"name": name, "interval": "1m", "input_series": case["series"],
                      "alert_rule_test": evals})
    return {"rule_files": [rule_file], "evaluation_interval": "1m", "tests": tests}


def test_promtool_checks_the_rendered_rules(default_rules):
    path, groups = default_rules
    checked = promtool("check", "rules", str(path), cwd=path.parent)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(alerts_of(groups))} rules found" in checked.stdout, checked.stdout


def test_every_alert_fires_on_its_series_and_stays_quiet_otherwise(default_rules):
    path, groups = default_rules
    tested = {case.get("alertname", name) for name, case in CASES.items()}
    assert tested == set(alerts_of(groups)), "each alert needs its unit test (and each test its alert)"
    test_file = path.parent / "alerts_test.yaml"
    test_file.write_text(yaml.safe_dump(unit_tests(path.name), sort_keys=False))
    ran = promtool("test", "rules", str(test_file), cwd=path.parent)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "SUCCESS" in ran.stdout


def test_a_broken_expectation_fails_promtool(default_rules):
    """The harness can fail: the acceptance alert with a healthy rate instead of a low one."""
    path, _ = default_rules
    suite = unit_tests(path.name)
    (acceptance,) = [t for t in suite["tests"] if t["name"] == "DrafterAcceptanceLow"]
    acceptance["input_series"] = [s for s in acceptance["input_series"] if 'name="low"' not in s["series"]]
    suite["tests"] = [acceptance]
    test_file = path.parent / "broken_test.yaml"
    test_file.write_text(yaml.safe_dump(suite, sort_keys=False))
    ran = promtool("test", "rules", str(test_file), cwd=path.parent)
    assert ran.returncode != 0 and "DrafterAcceptanceLow" in ran.stdout + ran.stderr


def test_every_alert_links_an_existing_runbook_page(default_rules):
    _, groups = default_rules
    for name, rule in alerts_of(groups).items():
        url = rule["annotations"]["runbook_url"]
        assert url.startswith(RUNBOOK_BASE + "/"), (name, url)
        page = RUNBOOKS / url.removeprefix(RUNBOOK_BASE + "/")
        assert page.exists(), f"{name}: runbook {page} is missing"
        assert name in page.read_text(), f"{page} does not name the alert {name}"
        assert rule["labels"]["severity"] in ("warning", "critical"), name


def test_every_metric_an_alert_reads_is_exported_by_the_operator(default_rules):
    _, groups = default_rules
    exported = exported_metric_names()
    for name, rule in alerts_of(groups).items():
        used = metric_names(rule["expr"])
        assert used, (name, rule["expr"])
        # `up` is Prometheus' own series for the operator's scrape target.
        assert used - exported - {"up"} == set(), f"{name} reads metrics nobody exports: {used - exported}"


def test_thresholds_and_durations_come_from_values():
    rule = "monitoring.prometheusRule."
    alerts = alerts_of(rule_groups({
        rule + "alerts.acceptanceLow.minRate": 0.55, rule + "alerts.acceptanceLow.for": "2m",
        rule + "alerts.acceptanceLow.severity": "critical", rule + "alerts.speculationSlower.minSpeedup": 1.2,
        rule + "alerts.swapStuck.afterSeconds": 900, rule + "alerts.swapRolledBack.window": "2h",
        rule + "alerts.notReconciling.window": "3m", rule + "alerts.reconcileErrors.window": "7m",
        rule + "alerts.trainingFailed.enabled": False, rule + "operatorSelector": 'job="my-operator"',
    }))
    low = alerts["DrafterAcceptanceLow"]
    assert (low["expr"], low["for"], low["labels"]["severity"]) == \
        (f'drafter_acceptance_rate{{job="{OPERATOR_JOB}"}} < 0.55', "2m", "critical")
    assert "below 0.55, for 2m" in low["annotations"]["description"]
    assert alerts["DrafterSpeculationSlowerThanBaseline"]["expr"].endswith("< 1.2")
    assert alerts["DrafterSwapStuck"]["expr"].endswith("> 900")
    assert "[2h]" in alerts["DrafterSwapRolledBack"]["expr"]
    assert "[3m]" in alerts["DrafterOperatorNotReconciling"]["expr"]
    assert alerts["DrafterReconcileErrors"]["expr"].count("[7m]") == 2
    assert alerts["DrafterOperatorDown"]["expr"] == 'up{job="my-operator"} == 0 or absent(up{job="my-operator"})'
    assert "DrafterTrainingFailed" not in alerts


def test_labels_go_on_the_rule_and_disabled_renders_nothing():
    (rule,) = render({"monitoring.prometheusRule.labels.release": "kube-prometheus-stack"})
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert rule["metadata"]["labels"]["app.kubernetes.io/name"] == "drafter-operator"
    assert rule["metadata"]["namespace"] == NAMESPACE
    off = subprocess.run([str(tool("helm")), "template", RELEASE, str(CHART), "--kube-version", KUBE_VERSION,
                          "--show-only", "templates/prometheusrule.yaml"], capture_output=True, text=True, timeout=60)
    # helm refuses --show-only of a template that renders nothing: the rule is off by default.
    assert off.returncode != 0 and "could not find template" in off.stderr, off.stdout + off.stderr


def test_values_the_schema_refuses():
    done = subprocess.run([str(tool("helm")), "template", RELEASE, str(CHART), "--kube-version", KUBE_VERSION,
                           "--show-only", "templates/prometheusrule.yaml", "--set", "monitoring.prometheusRule.enabled=true",
                           "--set-json", "monitoring.prometheusRule.alerts.acceptanceLow.minRate=1.5"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "minRate" in done.stderr, done.stderr


def test_additional_rule_labels_go_on_every_rule_and_selectors_come_from_values():
    rule = "monitoring.prometheusRule."
    alerts = alerts_of(rule_groups({rule + "additionalRuleLabels.team": "ml-platform",
                                    rule + "additionalRuleLabels.tier": "inference",
                                    rule + "objectSelector": 'job="mine", cluster="eu"'}))
    # Every default severity is warning but wrong answers' (speculation changed the output).
    assert set(alerts) == {case.get("alertname", name) for name, case in CASES.items()} and all(
        (r["labels"]["team"], r["labels"]["tier"], r["labels"]["severity"]) ==
        ("ml-platform", "inference", "critical" if n == "DrafterOutputDiverged" else "warning")
        for n, r in alerts.items()), {n: r["labels"] for n, r in alerts.items()}
    assert alerts["DrafterServingNotReady"]["expr"] == \
        'max by (namespace, name, engine) (drafter_serving_not_ready{job="mine", cluster="eu"}) == 1'
    # The operator's own series keep the target selector (job and namespace of the release's target).
    assert f'drafter_reconcile_total{{job="{OPERATOR_JOB}", namespace="{NAMESPACE}", kind="DrafterServing"}}' in \
        alerts["DrafterOperatorNotReconciling"]["expr"]


def test_additional_rule_labels_may_not_replace_the_severity():
    done = subprocess.run([str(tool("helm")), "template", RELEASE, str(CHART), "--kube-version", KUBE_VERSION,
                           "--set", "monitoring.prometheusRule.enabled=true",
                           "--set", "monitoring.prometheusRule.additionalRuleLabels.severity=page"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "additionalRuleLabels.severity" in done.stderr \
        and "alerts.<alert>.severity" in done.stderr, done.stderr
    bad = subprocess.run([str(tool("helm")), "template", RELEASE, str(CHART), "--kube-version", KUBE_VERSION,
                          "--set", "monitoring.prometheusRule.additionalRuleLabels.team-name=x"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "team-name" in bad.stderr, bad.stderr


def monitors(values: list[str]) -> dict[str, dict]:
    done = subprocess.run([str(tool("helm")), "template", RELEASE, str(CHART), "--kube-version", KUBE_VERSION,
                           "--set", "monitoring.serviceMonitor.enabled=true", "--set", "monitoring.podMonitor.enabled=true",
                           "--show-only", "templates/servicemonitor.yaml", "--show-only", "templates/podmonitor.yaml",
                           *values], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return {d["kind"]: d for d in yaml.safe_load_all(done.stdout) if d}


def test_monitor_relabelings_reach_the_endpoints_and_promtool_accepts_them(tmp_path):
    cluster = [{"action": "replace", "targetLabel": "cluster", "replacement": "prod-eu"}]
    keep = [{"action": "keep", "sourceLabels": ["__name__"], "regex": "(vllm|sglang):.*"}]
    drop = [{"action": "drop", "sourceLabels": ["__name__"], "regex": "drafter_reconcile_duration_seconds_bucket"}]
    rendered = monitors(["--set-json", f"monitoring.serviceMonitor.relabelings={json.dumps(cluster)}",
                         "--set-json", f"monitoring.serviceMonitor.metricRelabelings={json.dumps(drop)}",
                         "--set-json", f"monitoring.podMonitor.relabelings={json.dumps(cluster)}",
                         "--set-json", f"monitoring.podMonitor.metricRelabelings={json.dumps(keep)}"])
    (service,) = rendered["ServiceMonitor"]["spec"]["endpoints"]
    (pods,) = rendered["PodMonitor"]["spec"]["podMetricsEndpoints"]
    assert (service["relabelings"], service["metricRelabelings"]) == (cluster, drop)
    assert (pods["relabelings"], pods["metricRelabelings"]) == (cluster, keep)
    # What the prometheus-operator writes from them (camelCase to snake_case) is a config Prometheus loads.
    snake = {"sourceLabels": "source_labels", "targetLabel": "target_label"}

    def relabel(configs):
        return [{snake.get(k, k): v for k, v in c.items()} for c in configs]
    config = {"scrape_configs": [{"job_name": "operator", "static_configs": [{"targets": ["127.0.0.1:8080"]}],
                                  "relabel_configs": relabel(service["relabelings"]),
                                  "metric_relabel_configs": relabel(service["metricRelabelings"])},
                                 {"job_name": "engines", "static_configs": [{"targets": ["127.0.0.1:8000"]}],
                                  "relabel_configs": relabel(pods["relabelings"]),
                                  "metric_relabel_configs": relabel(pods["metricRelabelings"])}]}
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    checked = promtool("check", "config", "--syntax-only", "prometheus.yml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # None by default: the endpoints carry no relabeling keys at all.
    plain = monitors([])
    assert "relabelings" not in plain["ServiceMonitor"]["spec"]["endpoints"][0]
    assert "metricRelabelings" not in plain["PodMonitor"]["spec"]["podMetricsEndpoints"][0]


def test_a_misspelt_relabeling_is_refused_naming_the_field():
    done = subprocess.run([str(tool("helm")), "template", RELEASE, str(CHART), "--kube-version", KUBE_VERSION,
                           "--set-json", 'monitoring.podMonitor.relabelings=[{"source_labels": ["__name__"]}]'],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "podMonitor/relabelings" in done.stderr and "source_labels" in done.stderr, \
        done.stderr
