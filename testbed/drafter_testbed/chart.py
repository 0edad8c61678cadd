"""The Helm chart's operator on the local cluster: what `helm install` needs here that a real cluster has.

Two things differ from a real cluster, and only these:
- The operator pod runs on the local process runner, which has no container filesystem: the Kubernetes
  client's fixed in-cluster path (/var/run/secrets/kubernetes.io/serviceaccount) does not exist for the
  process. The values here mount a projected token of the chart's own ServiceAccount, the cluster's CA
  and a kubeconfig that names them, and point KUBECONFIG at it (a path in the environment is remapped to
  the pod's volume). Only the way the token is read differs: the identity, and so every permission, is
  the chart's.
- Its listeners share this host with every other process: the metrics and health ports are free ports.

The demo installs the operator this way, and tests/e2e/test_chart_install.py tests the chart this way.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import yaml

from drafter_testbed import cluster as local
from drafter_testbed.processes import free_port
from drafter_testbed.nodes import PROCESS, RUNTIME_LABEL
from drafter_testbed.versions import bin_dir

TOKEN_DIR = "/var/run/secrets/drafter-local"
KUBECONFIG_MAP = "drafter-local-kubeconfig"
#: The chart in a source checkout (the testbed runs from one; the operator's wheel has no chart).
CHART = Path(__file__).resolve().parents[2] / "charts" / "drafter-operator"
CRDS = ("drafterservings.drafter.dev", "drafterbenchmarks.drafter.dev", "draftertrainings.drafter.dev")


def set_args(values: dict[str, str]) -> list[str]:
    return [a for k, v in values.items() for a in ("--set", f"{k}={v}")]


def apiserver_url(kubeconfig: str | Path) -> str:
    return yaml.safe_load(Path(kubeconfig).read_text())["clusters"][0]["cluster"]["server"]


def token_kubeconfig(kubeconfig: str | Path, namespace: str) -> tuple[dict, list[str]]:
    """The ConfigMap to create in `namespace` and the chart values that mount it beside a projected
    token of the chart's ServiceAccount and point KUBECONFIG at it."""
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "chart",
        # Relative paths: the client resolves them beside the kubeconfig, in the projected volume.
        "clusters": [{"name": "local", "cluster": {"server": apiserver_url(kubeconfig), "certificate-authority": "ca.crt"}}],
        "users": [{"name": "chart-serviceaccount", "user": {"tokenFile": "token"}}],
        "contexts": [{"name": "chart", "context": {"cluster": "local", "user": "chart-serviceaccount"}}],
    }
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": KUBECONFIG_MAP, "namespace": namespace},
                  "data": {"kubeconfig": yaml.safe_dump(config)}}
    volume = {"name": "sa-kubeconfig", "projected": {"sources": [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"configMap": {"name": KUBECONFIG_MAP, "items": [{"key": "kubeconfig", "path": "kubeconfig"}]}}]}}
    mount = {"name": "sa-kubeconfig", "mountPath": TOKEN_DIR, "readOnly": True}
    values = ["--set-json", f"operator.extraVolumes={json.dumps([volume])}",
              "--set-json", f"operator.extraVolumeMounts={json.dumps([mount])}",
              "--set-json", f"operator.extraEnv={json.dumps([{'name': 'KUBECONFIG', 'value': f'{TOKEN_DIR}/kubeconfig'}])}"]
    return config_map, values


def local_values(kubeconfig: str | Path, namespace: str, **extra: str) -> tuple[dict, list[str]]:
    """The ConfigMap and the `helm install` arguments that run the chart's operator pod here: on a
    process node, on free ports, as the chart's ServiceAccount; `extra` are more `--set` values."""
    values = {f"nodeSelector.{RUNTIME_LABEL.replace('.', chr(92) + '.')}": PROCESS,
              "metrics.port": str(free_port()), "health.port": str(free_port()),
              "operator.trainingCpu": "true", **extra}
    config_map, mounts = token_kubeconfig(kubeconfig, namespace)
    return config_map, set_args(values) + mounts


def adopt_crds(layout: local.Layout, release: str, namespace: str) -> None:
    """Let the release own CRDs that exist already (applied by kubectl, or kept by an earlier release):
    the adoption docs/chart.md describes."""
    for crd in CRDS:
        if local.kubectl(layout, "get", "crd", crd).returncode != 0:
            continue
        local.kubectl(layout, "label", "crd", crd, "app.kubernetes.io/managed-by=Helm", "--overwrite", check=True)
        local.kubectl(layout, "annotate", "crd", crd, f"meta.helm.sh/release-name={release}",
                      f"meta.helm.sh/release-namespace={namespace}", "--overwrite", check=True)


def helm(layout: local.Layout, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(bin_dir() / "helm"), "--kubeconfig", str(layout.kubeconfig), *args],
                          capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise local.ClusterError(f"helm {' '.join(args[:3])} failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def install_or_upgrade(layout: local.Layout, release: str, namespace: str, **extra: str) -> subprocess.CompletedProcess:
    """`helm upgrade --install` of the chart's operator in `namespace` (created if missing), adopting the CRDs."""
    local.kubectl(layout, "create", "namespace", namespace)
    deadline = time.monotonic() + 60
    while local.kubectl(layout, "-n", namespace, "get", "configmap", "kube-root-ca.crt").returncode != 0:
        if time.monotonic() > deadline:
            raise local.ClusterError(f"no kube-root-ca.crt ConfigMap in {namespace} after 60 s (is the controller manager up?)")
        time.sleep(0.25)
    config_map, args = local_values(layout.kubeconfig, namespace, **extra)
    local.kubectl(layout, "apply", "-f", "-", input=yaml.safe_dump(config_map), check=True)
    adopt_crds(layout, release, namespace)
    return helm(layout, "upgrade", "--install", release, str(CHART), "-n", namespace, *args)


def operator_pods(layout: local.Layout, namespace: str, release: str) -> list[dict]:
    selector = f"app.kubernetes.io/instance={release},app.kubernetes.io/component=operator"
    listed = local.kubectl(layout, "-n", namespace, "get", "pods", "-l", selector, "-o", "json", check=True).stdout
    return [p for p in json.loads(listed)["items"] if not p["metadata"].get("deletionTimestamp")]


def is_ready(pod: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in (pod.get("status") or {}).get("conditions") or [])


def operator_log(layout: local.Layout, namespace: str, release: str, lines: int = 60) -> str:
    selector = f"app.kubernetes.io/instance={release},app.kubernetes.io/component=operator"
    logs = local.kubectl(layout, "-n", namespace, "logs", "-l", selector, f"--tail={lines}")
    return logs.stdout + logs.stderr


def wait_operator_ready(layout: local.Layout, namespace: str, release: str, timeout: float = 180,
                        not_uid: str | None = None) -> dict:
    """The one operator pod once Ready (`not_uid`: a pod other than that one, after an upgrade)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pods = operator_pods(layout, namespace, release)
        if len(pods) == 1 and is_ready(pods[0]) and pods[0]["metadata"]["uid"] != not_uid:
            return pods[0]
        time.sleep(0.25)
    raise local.ClusterError(f"the operator pod of release {release} in {namespace} was not Ready within "
                             f"{timeout:.0f} s; its log:\n{operator_log(layout, namespace, release)}")
