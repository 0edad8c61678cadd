"""The chart's Grafana dashboard (charts/drafter-operator/files/dashboard.json, shipped by
templates/dashboard-configmap.yaml): it loads, targets Grafana 11/12 with the datasource as a variable,
every panel query is PromQL the real `promtool` accepts, and every metric a query reads is one the
operator or the engines really export: the operator's registry and the engine emulator's exporters,
which carry vLLM 0.33.0's and SGLang 0.5.23's names (held to the engines' own collectors in
tests/contract)."""

from __future__ import annotations

import json
import re
import subprocess

import yaml

from tests.support.dashboard import CHART, dashboard, exported_metric_names, metric_names, panels, queries


#: Grafana's variables, as a Prometheus rule file can hold them: ranges become a duration, the dashboard's
#: own variables a regex matching anything.
GRAFANA_RANGES = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"}

#: What the dashboard must show (the issue's list), by a metric each needs.
REQUIRED = {
    "acceptance rate per serving and revision": "drafter_acceptance_rate",
    "acceptance length per serving and revision": "drafter_acceptance_length",
    "per-position acceptance": "vllm:spec_decode_num_accepted_tokens_per_pos_total",
    "speedup per benchmark": "drafter_benchmark_speedup",
    "crossover concurrency": "drafter_benchmark_crossover_concurrency",
    "swaps": "drafter_swaps_total",
    "rollbacks": "drafter_rollbacks_total",
    "reconcile latency": "drafter_reconcile_duration_seconds_bucket",
    "vLLM throughput": "vllm:generation_tokens_total",
    "SGLang throughput": "sglang:generation_tokens_total",
    "vLLM latency": "vllm:inter_token_latency_seconds_bucket",
    "SGLang latency": "sglang:inter_token_latency_seconds_bucket",
}


def test_metric_names_reads_a_promql_expression():
    expr = ('histogram_quantile(0.95, sum by (kind, le) (rate(a:b_bucket{x=~"$y", z="w(1)"}[$__rate_interval])))'
            ' / on (ns) group_left sum(c_total offset 5m) > 1e3 unless time() - d')
    assert metric_names(expr) == {"a:b_bucket", "c_total", "d"}


def as_rule_expr(expr: str) -> str:
    for variable, duration in GRAFANA_RANGES.items():
        expr = expr.replace(variable, duration)
    return re.sub(r"\$\{?\w+\}?", ".*", expr)


def test_the_dashboard_loads_for_grafana_11_and_12_with_the_datasource_as_a_variable():
    board = dashboard()
    assert board["schemaVersion"] >= 39 and board["uid"] and board["title"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in panels(board)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in panels(board):
        assert {"h", "w", "x", "y"} <= set(panel["gridPos"]) and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
            assert panel["targets"] and panel.get("description"), panel["title"]
            for target in panel["targets"]:
                assert target["datasource"]["uid"] == "${datasource}", panel["title"]
    # The other variables ask the chosen datasource too.
    for name in ("namespace", "serving"):
        assert variables[name]["datasource"]["uid"] == "${datasource}"


def test_every_query_is_promql_that_promtool_accepts(tmp_path):
    from tests.support.alerts import promtool

    board = dashboard()
    rules = [{"record": f"dashboard:panel{panel['id']}_{target['refId'].lower()}", "expr": as_rule_expr(target["expr"])}
             for panel, target in queries(board)]
    rules += [{"record": f"dashboard:variable_{v['name']}",
               "expr": as_rule_expr(re.fullmatch(r"label_values\((.*), \w+\)", v["definition"]).group(1))}
              for v in board["templating"]["list"] if v["type"] == "query"]
    assert len(rules) >= 20
    path = tmp_path / "dashboard_rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, sort_keys=False))
    checked = promtool("check", "rules", str(path), cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(rules)} rules found" in checked.stdout


def test_a_query_promtool_refuses_fails_the_check(tmp_path):
    from tests.support.alerts import promtool

    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "g", "rules": [
        {"record": "dashboard:bad", "expr": as_rule_expr("sum by (x (rate(y[$__rate_interval]))")}]}]}))
    assert promtool("check", "rules", str(path), cwd=tmp_path).returncode != 0


def test_every_metric_a_panel_reads_is_really_exported():
    exported = exported_metric_names()
    used: dict[str, set[str]] = {}
    for panel, target in queries(dashboard()):
        names = metric_names(target["expr"])
        assert names, (panel["title"], target["expr"])
        for name in names:
            used.setdefault(name, set()).add(panel["title"])
    unknown = {name: sorted(titles) for name, titles in used.items() if name not in exported}
    assert not unknown, f"metrics nobody exports: {unknown}"
    missing = {what: metric for what, metric in REQUIRED.items() if metric not in used}
    assert not missing, f"the dashboard does not show: {missing}"


def test_the_exported_names_come_from_the_real_registries():
    exported = exported_metric_names()
    # Spot checks against names the engines' own code uses (tests/contract holds the emulator to them).
    assert {"vllm:spec_decode_num_drafts_total", "sglang:spec_verify_calls_total", "drafter_degraded",
            "drafter_reconcile_duration_seconds_bucket", "vllm:time_to_first_token_seconds_bucket"} <= exported
    assert "vllm:spec_decode_num_drafts" not in exported  # counters are exposed with _total only


def test_the_configmap_carries_the_dashboard_with_the_sidecar_label():
    from drafter_testbed.prometheus import KUBE_VERSION
    from tests.support.alerts import tool

    done = subprocess.run([str(tool("helm")), "template", "t", str(CHART), "--kube-version", KUBE_VERSION,
                           "--show-only", "templates/dashboard-configmap.yaml",
                           "--set", "monitoring.dashboard.enabled=true", "--set", "monitoring.dashboard.namespace=grafana",
                           "--set", "monitoring.dashboard.annotations.grafana_folder=LLM"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    (config_map,) = [d for d in yaml.safe_load_all(done.stdout) if d]
    assert config_map["kind"] == "ConfigMap" and config_map["metadata"]["namespace"] == "grafana"
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["annotations"] == {"grafana_folder": "LLM"}
    assert json.loads(config_map["data"]["drafter-operator.json"]) == dashboard()
    assert len(done.stdout.encode()) < 1024 * 1024  # a ConfigMap's limit


def test_every_panel_has_a_unit_and_every_series_follows_the_cluster_variable():
    """A multi-cluster Prometheus labels each cluster's series `cluster`: every selector of every query is
    narrowed by the variable (All is `.*`, which also matches series without the label), and every panel
    says what its numbers are."""
    board = dashboard()
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["cluster"]["allValue"] == ".*" and "cluster" in variables["cluster"]["definition"]
    assert 'cluster=~"$cluster"' in variables["namespace"]["definition"]
    assert 'cluster=~"$cluster"' in variables["serving"]["definition"]
    for panel in panels(board):
        if panel["type"] == "row":
            continue
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
        assert unit and unit != "none", f"{panel['title']}: no unit"
    for panel, target in queries(board):
        expr = target["expr"]
        for name in metric_names(expr):
            # each occurrence of the metric is followed by a selector that starts with the cluster matcher
            for match in re.finditer(rf"(?<![\w:]){re.escape(name)}(?![\w:])", expr):
                assert expr[match.end():].startswith('{cluster=~"$cluster"'), (panel["title"], name, expr)


def test_the_engines_acceptance_rate_is_shown_per_revision():
    board = dashboard()
    (panel,) = [p for p in panels(board) if p["title"] == "Acceptance rate from the engines by revision"]
    assert panel["fieldConfig"]["defaults"]["unit"] == "percentunit"
    exprs = [t["expr"] for t in panel["targets"]]
    assert any("vllm:spec_decode_num_draft_tokens_total" in e for e in exprs)
    assert any("sglang:spec_accept_rate" in e for e in exprs)
    assert all("drafter_dev_revision" in e for e in exprs), exprs
