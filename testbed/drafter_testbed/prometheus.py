"""A real Prometheus beside the local cluster, set up the way an installed chart's monitoring sets one up.

- The scrape jobs: the engine pods found through Kubernetes service discovery, labelled as the chart's
  PodMonitor labels them (`namespace`, `pod`, the pod labels mapped: `drafter_dev_serving`,
  `drafter_dev_revision`, which the `prometheus` acceptance source matches); the operator's /metrics,
  either the chart's operator pod (with the `job` and `namespace` the chart's ServiceMonitor gives,
  which the alerts' default `operatorSelector` matches) or a fixed address.
- The chart's alert rules, as `helm template` renders the PrometheusRule with the given values.
- The process: the cluster build's Prometheus on a free loopback port, recorded by pid file
  (drafter_testbed/processes.py) so whoever started it, or `drafter-operator cluster down`, stops exactly it.
- Its HTTP API: targets, queries, rules, and the active (pending or firing) alerts.

Which Prometheus: the cluster build's (`versions.bin_dir()`), Prometheus 3 with Kubernetes service
discovery compiled in (docs/testbed.md); `DRAFTER_TEST_PROMETHEUS_DIR` (a directory holding
`prometheus` and `promtool`) overrides it. The demo and the end-to-end tests use this module.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

from drafter_operator.resources.engine import PORT_NAME as ENGINE_PORT_NAME
from drafter_testbed import processes
from drafter_testbed.chart import CHART
from drafter_testbed.versions import PINS, bin_dir

#: The chart requires a Kubernetes version; `helm template` assumes v1.20 without one.
KUBE_VERSION = PINS.kubernetes.removeprefix("v")
#: The operator container's port (and the chart's metrics Service's) that serves /metrics.
OPERATOR_PORT_NAME = "metrics"


class PrometheusError(RuntimeError):
    pass


def binaries() -> tuple[Path, Path]:
    """prometheus and promtool: the cluster build's, or those in DRAFTER_TEST_PROMETHEUS_DIR."""
    directory = Path(os.environ.get("DRAFTER_TEST_PROMETHEUS_DIR") or bin_dir())
    return directory / "prometheus", directory / "promtool"


# ------------------------------------------------------------------------------------------------
# Scrape jobs


def engine_pods_job(kubeconfig: str | Path, namespaces: list[str]) -> dict:
    """The kubernetes-pods job, limited to `namespaces`: engine pods only (those the operator created,
    label drafter.dev/serving), their engine port only, labelled as the chart's PodMonitor labels them."""
    return {
        "job_name": "kubernetes-pods",
        "kubernetes_sd_configs": [{"role": "pod", "kubeconfig_file": str(kubeconfig),
                                   "namespaces": {"names": list(namespaces)}}],
        "relabel_configs": [
            {"source_labels": ["__meta_kubernetes_pod_label_drafter_dev_serving"], "regex": ".+", "action": "keep"},
            {"source_labels": ["__meta_kubernetes_pod_container_port_name"], "regex": ENGINE_PORT_NAME,
             "action": "keep"},
            # Pod labels as labels (drafter.dev/revision -> drafter_dev_revision), namespace, pod.
            {"action": "labelmap", "regex": "__meta_kubernetes_pod_label_(.+)"},
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        ],
    }


def operator_pod_job(kubeconfig: str | Path, namespace: str, release: str, job: str) -> dict:
    """What the chart's ServiceMonitor makes of the operator, with `job` the metrics Service's name: the
    operator pod of `release` in `namespace` on its `metrics` port, labelled `job` and `namespace` as the
    prometheus-operator labels it, so the alerts' default `operatorSelector` matches. Found through
    the pods, not the Service's EndpointSlices as a ServiceMonitor does: the local cluster's pod IPs are
    loopback addresses, which EndpointSlices refuse. Discovered, not fixed: a new pod is followed."""
    return {
        "job_name": job,
        # As the ServiceMonitor's honorLabels: the series' `namespace` is the serving's, not the pod's.
        "honor_labels": True,
        "kubernetes_sd_configs": [{"role": "pod", "kubeconfig_file": str(kubeconfig),
                                   "namespaces": {"names": [namespace]}}],
        "relabel_configs": [
            {"source_labels": ["__meta_kubernetes_pod_label_app_kubernetes_io_instance"], "regex": re.escape(release),
             "action": "keep"},
            {"source_labels": ["__meta_kubernetes_pod_label_app_kubernetes_io_component"], "regex": "operator",
             "action": "keep"},
            {"source_labels": ["__meta_kubernetes_pod_container_port_name"], "regex": OPERATOR_PORT_NAME,
             "action": "keep"},
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        ],
    }


def static_job(job: str, target: str) -> dict:
    """One fixed `host:port` (an operator process on loopback, for instance) under `job`."""
    return {"job_name": job, "static_configs": [{"targets": [target]}]}


def config(jobs: list[dict], interval_seconds: float = 1) -> dict:
    """A Prometheus configuration scraping `jobs` and evaluating rules every `interval_seconds`."""
    interval = f"{interval_seconds:g}s"
    return {"global": {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": interval},
            "scrape_configs": jobs}


# ------------------------------------------------------------------------------------------------
# The chart's alert rules


def render_prometheus_rule(release: str, namespace: str, values: dict | None = None,
                           helm: Path | None = None) -> list[dict]:
    """The chart's PrometheusRule as `helm template` renders it (only that template), as YAML documents.
    `values`: dotted path -> value, passed as JSON so numbers stay numbers (`--set` makes 0.55 a string);
    the rule is switched on here."""
    argv = [str(helm or bin_dir() / "helm"), "template", release, str(CHART), "--namespace", namespace,
            "--kube-version", KUBE_VERSION, "--show-only", "templates/prometheusrule.yaml",
            "--set", "monitoring.prometheusRule.enabled=true"]
    for path, value in (values or {}).items():
        argv += ["--set-json", f"{path}={json.dumps(value)}"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise PrometheusError(f"helm template of the chart's PrometheusRule failed: {done.stderr.strip()}")
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def chart_rule_groups(release: str, namespace: str, values: dict | None = None) -> dict:
    """The rule file Prometheus loads: the rendered PrometheusRule's spec (its `groups`)."""
    (rule,) = render_prometheus_rule(release, namespace, values)
    return rule["spec"]


# ------------------------------------------------------------------------------------------------
# The API


@dataclass
class Prometheus:
    url: str
    version: str

    def get(self, path: str) -> dict:
        with urllib.request.urlopen(self.url + path, timeout=5) as response:
            return json.loads(response.read())

    def ready(self) -> bool:
        """/-/ready answers 200 once the TSDB and the rules are loaded; the API says 503 until then."""
        try:
            with urllib.request.urlopen(self.url + "/-/ready", timeout=5) as response:
                return response.status == 200
        except OSError:  # URLError and HTTPError (503 while starting) are OSErrors
            return False

    def targets(self) -> list[dict]:
        return self.get("/api/v1/targets?state=active")["data"]["activeTargets"]

    def up_pods(self, namespace: str, revision: str) -> set[str]:
        """The pods of `revision` Prometheus discovered and scraped successfully."""
        return {t["labels"]["pod"] for t in self.targets() if t["health"] == "up"
                and t["labels"].get("namespace") == namespace and t["labels"].get("drafter_dev_revision") == revision}

    def query(self, expr: str) -> list[dict]:
        return self.get("/api/v1/query?" + urllib.parse.urlencode({"query": expr}))["data"]["result"]

    def active_alerts(self) -> list[dict]:
        """Every pending or firing alert (labels, annotations, state, activeAt, value)."""
        return self.get("/api/v1/alerts")["data"]["alerts"]

    def alerts(self, alertname: str, /, **labels: str) -> list[dict]:
        """Active alerts called `alertname` whose labels include `labels`."""
        return [a for a in self.active_alerts() if a["labels"].get("alertname") == alertname
                and all(a["labels"].get(k) == v for k, v in labels.items())]

    def rules(self) -> dict[str, dict]:
        return {r["name"]: r for g in self.get("/api/v1/rules?type=alert")["data"]["groups"] for r in g["rules"]}


# ------------------------------------------------------------------------------------------------
# The process


def start(prometheus_config: dict, directory: Path, rules: dict | None = None, name: str = "prometheus",
          run_dir: Path | None = None, timeout: float = 60, port: int | None = None) -> Prometheus:
    """Start Prometheus with `prometheus_config` (and `rules`, a rule file's content) on a free loopback
    port, its files, data and log in `directory`, its pid file in `run_dir` (default `directory`) under
    `name`; return it once ready. The configuration is checked with promtool first. ``port``: where it
    listens instead of a free port (an operator configured with this endpoint before it started)."""
    binary, promtool = binaries()
    if not (binary.exists() and promtool.exists()):
        raise PrometheusError(f"no prometheus/promtool in {binary.parent}: run `drafter-operator cluster build`")
    directory.mkdir(parents=True, exist_ok=True)
    full = dict(prometheus_config)
    if rules is not None:
        (directory / "alerts.yaml").write_text(yaml.safe_dump(rules, sort_keys=False))
        full["rule_files"] = [str(directory / "alerts.yaml")]
    config_file = directory / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(full, sort_keys=False))
    version = _version(binary)
    check = subprocess.run([str(promtool), "check", "config", str(config_file)], capture_output=True, text=True,
                           timeout=30)
    if check.returncode != 0:
        raise PrometheusError(f"{version}: promtool check config {config_file}: {check.stdout}{check.stderr}")
    port = port or processes.free_port()
    run_dir = run_dir or directory
    pid = processes.start(name, [str(binary), f"--config.file={config_file}", f"--storage.tsdb.path={directory}/data",
                                 f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                          run_dir, directory, env=dict(os.environ))
    prometheus = Prometheus(f"http://127.0.0.1:{port}", version)
    deadline = time.monotonic() + timeout
    while not prometheus.ready():
        log = directory / f"{name}.log"
        if processes.running_pid(name, run_dir) != pid:
            raise PrometheusError(f"{version} exited while starting: {_tail(log)}")
        if time.monotonic() > deadline:
            processes.stop(name, run_dir)
            raise PrometheusError(f"{version} not ready on port {port} within {timeout:.0f} s: {_tail(log)}")
        time.sleep(0.2)
    return prometheus


@contextlib.contextmanager
def running(prometheus_config: dict, directory: Path, rules: dict | None = None,
            port: int | None = None) -> Iterator[Prometheus]:
    """`start`, and always stop it afterwards."""
    prometheus = start(prometheus_config, directory, rules, port=port)
    try:
        yield prometheus
    finally:
        processes.stop("prometheus", directory)


def _version(binary: Path) -> str:
    done = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30)
    return f"{binary}: " + ((done.stdout + done.stderr).splitlines() or ["(no version)"])[0]


def _tail(log: Path, lines: int = 20) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
