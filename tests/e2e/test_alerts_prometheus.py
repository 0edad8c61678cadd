"""The chart's alert rules in a REAL Prometheus, end to end on the local cluster.

The rules are those `helm template` renders from charts/drafter-operator (tests/unit/chart/test_alerts.py
renders them the same way), with short `for` durations so a test takes a minute. The Prometheus (3.16,
the cluster build's, started by drafter_testbed/prometheus.py as the demo's is) scrapes the operator's own /metrics and,
through Kubernetes service discovery, the engine pods (the emulator speaking vLLM's metrics), evaluates
the rules every second, and the serving's acceptance is watched through it (`source: prometheus`): the
whole chain an installed chart relies on. When the emulator's acceptance is lowered on the engine pod
(POST /emulator/acceptance), DrafterAcceptanceLow must go from inactive to firing, with the serving's
labels and its runbook link, and DrafterServingDegraded once the operator says Degraded.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator

import pytest
import yaml

from drafter_testbed.prometheus import Prometheus, config, engine_pods_job, running, static_job
from drafter_testbed.serving_client import ClientLoop
from tests.e2e.conftest import emulator_settings
from tests.support.alerts import rule_groups
from tests.support.dashboard import dashboard, metric_names, queries
from tests.support.e2e_prometheus import (ACCEPTANCE, ENGINE_PORT, GOOD_DRAFTER, SCRAPE_INTERVAL, SEED_PER_TOKEN,
                                          TARGET_MODEL, engine_pods, set_acceptance)
from tests.support.e2e_serving import apply, condition, seed_serving, service_ip, serving_status, wait_ready

pytestmark = pytest.mark.e2e

OPERATOR_JOB = "drafter-operator"
MIN_RATE = 0.4  # the serving's own threshold too, so both alerts are about the same drop
LOW_FOR_SECONDS = 5
RUNBOOK_BASE = "https://example.test/runbooks"  # rule_groups()'s
ACCEPTANCE_WINDOW = int(ACCEPTANCE["window"].rstrip("s"))
#: Lowered acceptance reaches the rule once the window's rate falls under 0.4 (within one window), then
#: `for`, one scrape and one evaluation; the slack is the 2-core machine's share.
LOW_BOUND = ACCEPTANCE_WINDOW
SLACK = 20


def chart_rules() -> dict:
    return rule_groups({
        "monitoring.prometheusRule.operatorSelector": f'job="{OPERATOR_JOB}"',
        "monitoring.prometheusRule.objectSelector": f'job="{OPERATOR_JOB}"',
        "monitoring.prometheusRule.alerts.acceptanceLow.minRate": MIN_RATE,
        "monitoring.prometheusRule.alerts.acceptanceLow.for": f"{LOW_FOR_SECONDS}s",
    })


@pytest.fixture
def alerting(cluster, namespace, operator, engine_nodes, model_volume, tmp_path) -> Iterator[Prometheus]:
    """The engine pods' kubernetes-pods job, the operator's /metrics under the job the rules'
    operatorSelector names, and the chart's rules evaluated every second."""
    emulator_settings(cluster, namespace, time_scale="0.1", startup_seconds="2")
    jobs = [engine_pods_job(cluster.kubeconfig, [namespace]),
            static_job(OPERATOR_JOB, f"127.0.0.1:{operator.metrics_port}")]
    with running(config(jobs, SCRAPE_INTERVAL), tmp_path, rules=chart_rules(), port=operator.prometheus_port) as prometheus:
        yield prometheus


@contextlib.contextmanager
def explained(cluster, namespace: str, operator, prometheus: Prometheus) -> Iterator[None]:
    try:
        yield
    except AssertionError:
        print("--- status ---\n" + yaml.safe_dump(serving_status(cluster, namespace, "kimi")))
        print("--- operator log ---\n" + operator.log_tail(40))
        with contextlib.suppress(OSError, ValueError):
            print("--- alerts ---\n" + json.dumps(prometheus.active_alerts(), indent=1))
            print("--- targets ---\n" + json.dumps([{k: t.get(k) for k in ("labels", "health", "lastError")}
                                                   for t in prometheus.targets()], indent=1))
        raise


def test_low_acceptance_alert_fires_when_an_engines_acceptance_drops(cluster, namespace, operator, alerting):
    prometheus = alerting
    serving = seed_serving("kimi", swap={"strategy": "BlueGreen"})
    serving["spec"]["drafter"]["model"] = GOOD_DRAFTER
    serving["spec"]["acceptance"] = {**ACCEPTANCE, "minAcceptanceRate": str(MIN_RATE),
                                     "prometheus": operator.PROMETHEUS_ENDPOINT,
                                     "onDegraded": "Alert"}
    mine = {"namespace": namespace, "name": "kimi"}
    with explained(cluster, namespace, operator, prometheus):
        # Every chart rule loaded and evaluates without error.
        rules = cluster.wait_for("the chart's rules loaded", lambda: prometheus.rules() or None, timeout=30)
        assert set(rules) == set(r["alert"] for g in chart_rules()["groups"] for r in g["rules"])
        apply(cluster, namespace, serving)
        revision = wait_ready(cluster, namespace, "kimi")["activeRevision"]
        (pod,) = engine_pods(cluster, namespace, revision)
        cluster.wait_for("Prometheus scraping the engine pod and the operator", lambda: prometheus.up_pods(
            namespace, revision) == {pod["metadata"]["name"]} and prometheus.query(f'up{{job="{OPERATOR_JOB}"}} == 1'),
            timeout=60)

        loop = ClientLoop(service_ip(cluster, namespace, "kimi"), ENGINE_PORT, TARGET_MODEL, limit_seconds=300)
        loop.start()
        try:
            # Healthy: the operator's gauge, as Prometheus scraped it, above the line over a full window.
            healthy = cluster.wait_for("a healthy acceptance rate in Prometheus", lambda: [
                s for s in prometheus.query(f'drafter_acceptance_rate{{namespace="{namespace}", name="kimi"}} > 0.6')],
                timeout=3 * ACCEPTANCE_WINDOW + 30)
            assert healthy[0]["metric"]["revision"] == revision
            time.sleep(ACCEPTANCE_WINDOW)  # the window holds healthy traffic only before the drop
            for name in ("DrafterAcceptanceLow", "DrafterServingDegraded", "DrafterEngineMetricsUnavailable",
                         "DrafterOperatorDown", "DrafterOperatorNotReconciling"):
                assert prometheus.alerts(name) == [], f"{name} active on a healthy serving"
            assert all(r["health"] == "ok" for r in prometheus.rules().values()), prometheus.rules()

            set_acceptance(pod, SEED_PER_TOKEN)
            lowered = time.monotonic()
            states: list[str] = []

            def firing(name: str):
                def check():
                    found = prometheus.alerts(name, **mine)
                    state = found[0]["state"] if found else "inactive"
                    if not states or states[-1] != f"{name} {state}":
                        states.append(f"{name} {state}")
                    return found if state == "firing" else None
                return check
            try:
                (low,) = cluster.wait_for("DrafterAcceptanceLow firing", firing("DrafterAcceptanceLow"),
                                          timeout=LOW_BOUND + LOW_FOR_SECONDS + SLACK + 30, interval=0.25)
                low_seconds = time.monotonic() - lowered
                (degraded,) = cluster.wait_for("DrafterServingDegraded firing", firing("DrafterServingDegraded"),
                                               timeout=90, interval=0.25)
                degraded_seconds = time.monotonic() - lowered
            finally:
                print("\n" + " -> ".join(states))
        finally:
            loop.stop()

        print(f"\n{prometheus.version}: DrafterAcceptanceLow firing {low_seconds:.1f} s and DrafterServingDegraded "
              f"{degraded_seconds:.1f} s after lowering acceptance (window {ACCEPTANCE_WINDOW} s, rule for "
              f"{LOW_FOR_SECONDS} s, spec for {ACCEPTANCE['for']}); {loop.ok} requests")
        assert "DrafterAcceptanceLow pending" in states, states  # through `for`, not straight to firing
        # How long the alert took is printed, not asserted: promtool's rule tests (tests/unit/chart/test_alerts.py)
        # prove the rules' timing on a virtual clock; this shows the real pipeline fires it at all.
        assert low["labels"]["revision"] == revision and low["labels"]["severity"] == "warning"
        assert float(low["value"]) < MIN_RATE
        assert low["annotations"]["runbook_url"] == f"{RUNBOOK_BASE}/acceptance-low.md"
        assert low["annotations"]["summary"].startswith(f"{namespace}/kimi: drafter acceptance ")
        assert degraded["labels"]["revision"] == revision
        assert condition(serving_status(cluster, namespace, "kimi"), "Degraded")["status"] == "True"
        # The healthy engine's side of the dashboard: every vLLM metric a panel reads was scraped from the pod.
        scraped = {s["metric"]["__name__"] for s in prometheus.query(
            f'{{__name__=~"vllm:.+", namespace="{namespace}", drafter_dev_serving="kimi"}}')}
        used = {name for _, target in queries(dashboard()) for name in metric_names(target["expr"])
                if name.startswith("vllm:")}
        assert used and used <= scraped, used - scraped
