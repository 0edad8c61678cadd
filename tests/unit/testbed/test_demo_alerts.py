"""The demo's alerts (drafter_testbed/demo_alerts.py) and the Prometheus set-up it shares with the end-to-end tests
(drafter_testbed/prometheus.py): the shortened `for` durations, the alert-change tracking, and the scrape
configuration as the real promtool reads it."""

from __future__ import annotations

import time

import yaml
from hypothesis import given
from hypothesis import strategies as st

from drafter_operator.api import parse_duration
from drafter_testbed import cluster as local
from drafter_testbed import demo_alerts
from drafter_testbed import prometheus as prom
from tests.support.alerts import alerts_of, promtool, tool

DEMO_ACCEPTANCE_WINDOW_SECONDS = 30  # demo_acceptance.DEMO_ACCEPTANCE["window"]


def test_minutes_become_seconds_and_instant_alerts_are_left_alone():
    assert demo_alerts.shortened_fors({"a": {"for": "15m"}, "b": {"for": "0m"}, "c": {"for": "1h"},
                                       "d": {"for": "90s"}}) == {"a": "15s", "c": "1m", "d": "2s"}
    assert demo_alerts.for_values({"a": "15s"}) == {"monitoring.prometheusRule.alerts.a.for": "15s"}


def test_the_demos_rules_wait_less_than_its_acceptance_window():
    """Rendered by helm with the chart's own defaults shortened: every alert that waits, waits less
    than the demo's 30 s acceptance window, and those that fire at once still do."""
    tool("helm")
    defaults = demo_alerts.chart_alerts()
    fors = demo_alerts.shortened_fors(defaults)
    assert fors["acceptanceLow"] == "15s" and set(fors) < set(defaults)
    rules = alerts_of(prom.chart_rule_groups("drafter-operator", "drafter-system", demo_alerts.for_values(fors)))
    waits = {name: parse_duration(rule.get("for", "0s")) for name, rule in rules.items()}
    assert 0 < waits["DrafterAcceptanceLow"] < DEMO_ACCEPTANCE_WINDOW_SECONDS
    assert max(waits.values()) < DEMO_ACCEPTANCE_WINDOW_SECONDS, waits
    assert waits["DrafterServingDegraded"] == 0
    # The default operatorSelector: the job and namespace operator_pod_job gives the operator's target.
    assert 'up{job="drafter-operator-metrics", namespace="drafter-system"}' in rules["DrafterOperatorDown"]["expr"]


def alert(alertname: str, state: str, /, **labels: str) -> dict:
    return {"labels": {"alertname": alertname, **labels}, "state": state,
            "annotations": {"summary": f"{alertname} {labels}"}}


def test_changes_name_each_new_state_and_each_alert_gone():
    low = alert("DrafterAcceptanceLow", "pending", name="kimi", revision="r1")
    known = {demo_alerts.alert_key(low): low}
    firing = {**low, "state": "firing"}
    degraded = alert("DrafterServingDegraded", "firing", name="kimi", revision="r1")
    assert demo_alerts.changes(known, [low]) == []
    assert demo_alerts.changes(known, [firing, degraded]) == [("firing", firing), ("firing", degraded)]
    assert demo_alerts.changes(known, []) == [("resolved", low)]
    # The same alert on another revision is another alert.
    other = alert("DrafterAcceptanceLow", "pending", name="kimi", revision="r2")
    assert demo_alerts.changes(known, [other]) == [("pending", other), ("resolved", low)]


snapshots = st.lists(st.dictionaries(st.sampled_from(["a", "b", "c"]), st.sampled_from(["pending", "firing"])),
                     max_size=12)


@given(snapshots)
def test_replaying_the_changes_gives_every_alerts_last_state(sequence):
    """Whatever Prometheus answers poll after poll, the changes recorded say, for every alert ever seen,
    the state of the last answer (resolved if it is gone), and never repeat a state."""
    known: dict = {}
    last: dict[str, str] = {}
    for snapshot in sequence:
        active = [alert(name, state) for name, state in snapshot.items()]
        for state, moved in demo_alerts.changes(known, active):
            name = moved["labels"]["alertname"]
            assert last.get(name) != state
            last[name] = state
        known = {demo_alerts.alert_key(a): a for a in active}
    final = sequence[-1] if sequence else {}
    assert last == {name: final.get(name, "resolved") for name in last}
    assert set(final) <= set(last)


class Answers:
    """Prometheus' /api/v1/alerts answers, one per poll (a stand-in for the HTTP API: the tracking is the test)."""

    def __init__(self, *answers: list[dict]):
        self.answers = list(answers)

    def active_alerts(self) -> list[dict]:
        return self.answers.pop(0)


def test_the_watch_records_changes_on_the_demos_clock():
    low = alert("DrafterAcceptanceLow", "pending", name="kimi")
    low["annotations"]["runbook_url"] = "https://example.test/runbooks/acceptance-low.md"
    watch = demo_alerts.AlertWatch(started=0.0)
    watch.attach(Answers([low], [{**low, "state": "firing"}], []))
    for _ in range(3):
        watch.poll()
    assert [c.state for c in watch.changes_since(0)] == ["pending", "firing", "resolved"]
    assert [c.state for c in watch.changes_since(2)] == ["resolved"]
    assert all(c.runbook_url.endswith("acceptance-low.md") and c.alert == "DrafterAcceptanceLow" and c.at > 0
               for c in watch.changes_since(0))


def test_the_watch_polls_only_once_a_prometheus_is_attached():
    """On a cold machine the watch starts before its Prometheus is built: it waits, then polls the attached one."""
    low = alert("DrafterAcceptanceLow", "firing", name="kimi")
    watch = demo_alerts.AlertWatch(started=0.0)
    watch.start()
    try:
        time.sleep(demo_alerts.POLL_SECONDS * 1.5)  # at least one turn of the loop without Prometheus
        assert watch.changes_since(0) == [] and watch.failed_polls == 0
        answers = Answers(*([[low]] * 1000))
        watch.attach(answers)
        deadline = time.monotonic() + 30
        while not watch.changes_since(0) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        watch.stop()
    assert [(c.state, c.alert) for c in watch.changes_since(0)] == [("firing", "DrafterAcceptanceLow")]
    assert len(answers.answers) < 1000


def test_cluster_down_stops_the_demos_prometheus():
    assert demo_alerts.PROCESS_NAME in local.COMPONENTS


def test_promtool_accepts_the_scrape_configuration(tmp_path):
    """The jobs the demo and the e2e tests scrape with, as promtool checks them (service discovery
    against a kubeconfig file, relabelling, a rule file)."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    rules = tmp_path / "alerts.yaml"
    rules.write_text(yaml.safe_dump({"groups": []}))
    operator = prom.operator_pod_job(kubeconfig, "drafter-system", "drafter-operator", "drafter-operator-metrics")
    config = prom.config([operator, prom.engine_pods_job(kubeconfig, ["drafter-demo"]),
                          prom.static_job("drafter-operator", "127.0.0.1:8080")], 2)
    config["rule_files"] = [str(rules)]
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    checked = promtool("check", "config", str(path), cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert config["global"] == {"scrape_interval": "2s", "scrape_timeout": "2s", "evaluation_interval": "2s"}
    # The operator's series name the serving's namespace; the target's (the operator pod's) must not replace it.
    assert operator["honor_labels"] is True
