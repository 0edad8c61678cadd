"""The demo's alerts: the chart's alert rules in a real Prometheus beside the story, and when each fired.

An installed chart (`monitoring.prometheusRule.enabled`) hands its rules to a prometheus-operator
Prometheus that scrapes the operator through the chart's ServiceMonitor and the engine pods through its
PodMonitor. The local cluster has no prometheus-operator, so the demo starts that Prometheus itself
(drafter_testbed/prometheus.py): the rules `helm template` renders for the demo's release, and the scrape jobs
those two monitors would make. Only the `for` durations differ, minutes read as seconds (15m -> 15s), so
the alerts move at the pace of the demo's 30 s acceptance window; thresholds are the chart's defaults.

While the story runs, a thread asks Prometheus for its active alerts every second and records each
change (pending, firing, resolved) on the demo's clock (seconds since `kubectl apply`). Prometheus keeps
running after the demo, like the operator; `drafter-operator cluster down` stops it (cluster.COMPONENTS).
"""

from __future__ import annotations

import math
import re
import shutil
import threading
import time
from dataclasses import dataclass

import yaml
from rich.console import Console
from rich.table import Table

from drafter_operator.api import format_duration, parse_duration
from drafter_testbed import cluster as local
from drafter_testbed import processes
from drafter_testbed import prometheus as prom
from drafter_testbed.chart import CHART

#: The pid file name of the demo's Prometheus in the cluster's run directory (listed in cluster.COMPONENTS).
PROCESS_NAME = "demo-prometheus"
#: Scrape and rule evaluation interval: a few times finer than the operator's 5 s acceptance measurements.
INTERVAL_SECONDS = 2
POLL_SECONDS = 1.0


def shortened_fors(alerts: dict) -> dict[str, str]:
    """Alert (a key of the chart's `monitoring.prometheusRule.alerts`) -> its `for` with minutes read as
    seconds: 15m -> 15s, 1h -> 1m. Alerts whose `for` is zero fire at once anyway and are left out."""
    shortened = {}
    for name, settings in alerts.items():
        seconds = parse_duration(str(settings["for"]))
        if seconds > 0:
            shortened[name] = format_duration(math.ceil(seconds / 60))
    return shortened


def for_values(shortened: dict[str, str]) -> dict[str, str]:
    """The chart values (dotted path -> value) that set those `for` durations."""
    return {f"monitoring.prometheusRule.alerts.{name}.for": duration for name, duration in shortened.items()}


def chart_alerts() -> dict:
    return yaml.safe_load((CHART / "values.yaml").read_text())["monitoring"]["prometheusRule"]["alerts"]


def start(layout: local.Layout, release: str, namespace: str, watched_namespace: str) -> tuple[prom.Prometheus, dict]:
    """(Re)start the demo's Prometheus with the chart's rules for `release` in `namespace`, scraping the
    operator's metrics Service and the engine pods of `watched_namespace`; return it and the `for`
    durations it was given (`shortened_fors`), once it has scraped the operator (so DrafterOperatorDown
    is not pending)."""
    processes.stop(PROCESS_NAME, layout.run)
    directory = layout.root / PROCESS_NAME
    # An earlier run's data would restore its alerts' `for` clocks (ALERTS_FOR_STATE) into this story.
    shutil.rmtree(directory, ignore_errors=True)
    fors = shortened_fors(chart_alerts())
    rules = prom.chart_rule_groups(release, namespace, for_values(fors))
    jobs = [prom.operator_pod_job(layout.kubeconfig, namespace, release, metrics_service(layout, namespace, release)),
            prom.engine_pods_job(layout.kubeconfig, [watched_namespace])]
    prometheus = prom.start(prom.config(jobs, INTERVAL_SECONDS), directory, rules, name=PROCESS_NAME,
                            run_dir=layout.run)
    deadline = time.monotonic() + 60
    while not (prometheus.query(f'up{{namespace="{namespace}"}} == 1')
               and not prometheus.alerts("DrafterOperatorDown")):
        if time.monotonic() > deadline:
            raise local.ClusterError(f"the demo's Prometheus ({prometheus.url}) did not scrape the operator in "
                                     f"{namespace} within 60 s: see its targets at {prometheus.url}/targets")
        time.sleep(0.5)
    return prometheus, fors


def announce(console: Console, prometheus: prom.Prometheus, fors: dict[str, str]) -> None:
    defaults = chart_alerts()
    shortened = ", ".join(f"{name} {defaults[name]['for']} -> {duration}" for name, duration in fors.items())
    version = re.search(r"version (\S+)", prometheus.version)
    console.print(f"Prometheus {version.group(1) if version else ''} ({prometheus.url}) evaluates the chart's "
                  f"{len(prometheus.rules())} alert rules (`helm template`, chart thresholds) and scrapes the operator "
                  f"and the engine pods as the chart's ServiceMonitor and PodMonitor would, every "
                  f"{INTERVAL_SECONDS} s. Shortened for the demo, each `for` in seconds instead of minutes: "
                  f"{shortened}.")


def metrics_service(layout: local.Layout, namespace: str, release: str) -> str:
    """The name of the release's metrics Service: the `job` its ServiceMonitor gives the operator."""
    selector = f"app.kubernetes.io/instance={release},app.kubernetes.io/component=operator-metrics"
    names = local.kubectl(layout, "-n", namespace, "get", "services", "-l", selector, "-o", "name",
                          check=True).stdout.split()
    if len(names) != 1:
        raise local.ClusterError(f"expected one metrics Service of release {release} in {namespace}, found {names}")
    return names[0].removeprefix("service/")


@dataclass(frozen=True)
class AlertChange:
    at: float  # seconds since the demo's kubectl apply
    state: str  # pending, firing or resolved
    alert: str
    summary: str
    runbook_url: str


def alert_key(alert: dict) -> tuple:
    return tuple(sorted(alert["labels"].items()))


def changes(known: dict[tuple, dict], active: list[dict]) -> list[tuple[str, dict]]:
    """What moved between the alerts seen last (`known`, by `alert_key`) and `active` (Prometheus'
    pending and firing alerts now): (state, alert) for each new state, ("resolved", last seen) for each
    alert gone. Pure."""
    now = {alert_key(a): a for a in active}
    moved = [(a["state"], a) for k, a in now.items() if known.get(k, {}).get("state") != a["state"]]
    return moved + [("resolved", a) for k, a in known.items() if k not in now]


class AlertWatch(threading.Thread):
    """Polls Prometheus' active alerts in the background and keeps every change, on the demo's clock. It starts
    before Prometheus may be there (a cold machine builds it while the story runs: drafter_testbed/late_build.py)
    and polls from `attach` on."""

    def __init__(self, started: float):
        super().__init__(daemon=True)
        self.started = started
        self.prometheus: prom.Prometheus | None = None
        self.stop_event = threading.Event()
        self.lock = threading.Lock()
        self.seen: list[AlertChange] = []
        self.known: dict[tuple, dict] = {}
        self.failed_polls = 0

    def attach(self, prometheus: prom.Prometheus) -> None:
        self.prometheus = prometheus

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                if self.prometheus is not None:
                    self.poll()
            except (OSError, ValueError, KeyError):  # a slow or odd answer: the next poll catches up
                self.failed_polls += 1
            self.stop_event.wait(POLL_SECONDS)

    def poll(self) -> None:
        active = self.prometheus.active_alerts()
        at = time.monotonic() - self.started
        with self.lock:
            for state, alert in changes(self.known, active):
                annotations = alert.get("annotations") or {}
                self.seen.append(AlertChange(at, state, alert["labels"]["alertname"], annotations.get("summary", ""),
                                             annotations.get("runbook_url", "")))
            self.known = {alert_key(a): a for a in active}

    def changes_since(self, index: int) -> list[AlertChange]:
        with self.lock:
            return list(self.seen[index:])

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=10)


def print_changes(console: Console, changes_: list[AlertChange], title: str) -> None:
    """A compact timeline of alert changes, then each alert's runbook once."""
    if not changes_:
        console.print(f"{title}: none.")
        return
    table = Table(title=title)
    for column in ("at", "state", "alert", "summary"):
        table.add_column(column)
    for change in changes_:
        table.add_row(f"{change.at:.0f}", change.state, change.alert, change.summary)
    console.print(table)
    runbooks = {c.alert: c.runbook_url for c in changes_ if c.runbook_url}
    for alert, url in runbooks.items():
        console.print(f"  runbook {alert}: {url}", soft_wrap=True)  # a URL broken in two cannot be opened
