"""The chart's alert rules rendered by `helm template`, and the pinned promtool that checks them."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from drafter_testbed.prometheus import binaries, render_prometheus_rule
from drafter_testbed.versions import bin_dir

RELEASE, NAMESPACE = "t", "default"
RUNBOOK_BASE = "https://example.test/runbooks"


def tool(name: str) -> Path:
    """helm, or promtool (drafter_testbed/prometheus.py's: DRAFTER_TEST_PROMETHEUS_DIR overrides where)."""
    path = binaries()[1] if name == "promtool" else bin_dir() / name
    if not path.exists():
        pytest.fail(f"no {name} in {path.parent}: run `drafter-operator cluster build` (./dev test and ./dev check "
                    "do) to build the pinned toolchain", pytrace=False)
    return path


def render(values: dict | None = None) -> list[dict]:
    """The PrometheusRule as `helm template` renders it (drafter_testbed/prometheus.py, as the demo renders it),
    with this module's release, namespace and runbook base; ``values``: dotted path -> value."""
    return render_prometheus_rule(RELEASE, NAMESPACE, {"monitoring.prometheusRule.runbookBaseUrl": RUNBOOK_BASE,
                                                       **(values or {})}, helm=tool("helm"))


def rule_groups(values: dict | None = None) -> dict:
    (rule,) = render(values)
    assert rule["kind"] == "PrometheusRule" and rule["apiVersion"] == "monitoring.coreos.com/v1"
    return rule["spec"]


def alerts_of(groups: dict) -> dict[str, dict]:
    return {r["alert"]: r for g in groups["groups"] for r in g["rules"]}


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(tool("promtool")), *args], capture_output=True, text=True, timeout=120, cwd=cwd)
