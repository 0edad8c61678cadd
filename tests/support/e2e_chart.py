"""End-to-end: the chart installed with helm on the local cluster, its namespaces, CRDs and operator pods."""
from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import yaml

from drafter_testbed import chart
from drafter_testbed import cluster as local

REPO = Path(__file__).resolve().parents[2]
CHART = chart.CHART

CRDS = chart.CRDS


def helm(cluster, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(cluster.bin_dir / "helm"), *args], capture_output=True, text=True, env=cluster.env,
                          timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def make_namespace(cluster, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", name)
    cluster.wait_for(f"the root CA ConfigMap in {name}",
                     lambda: cluster.kubectl("-n", name, "get", "configmap", "kube-root-ca.crt", check=False).returncode == 0)
    return name


def delete_namespaces(cluster, *names: str) -> None:
    for name in names:
        # This operator puts no finalizer on its objects (test_delete_without_operator.py checks that the
        # namespace goes without this). An operator of an older version still running on a shared local
        # cluster (a demo's) may have put kopf's there, and nothing would remove it once that one is gone.
        for plural in ("drafterservings", "drafterbenchmarks", "draftertrainings"):
            listed = cluster.kubectl("-n", name, "get", plural, "-o", "name", check=False).stdout.split()
            for obj in listed:
                cluster.kubectl("-n", name, "patch", obj, "--type=merge", "-p", '{"metadata":{"finalizers":null}}',
                                check=False)
        cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def adopt_crds(cluster, release: str, namespace: str) -> None:
    chart.adopt_crds(local.Layout(), release, namespace)


def local_values(cluster, namespace: str, **extra: str) -> list[str]:
    """drafter_testbed/chart.py's values for the local cluster (the operator pod as the chart's ServiceAccount, on a
    process node and free ports), with its kubeconfig ConfigMap created."""
    config_map, args = chart.local_values(cluster.kubeconfig, namespace, **{"operator.recheckSeconds": "5", **extra})
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(config_map))
    return args


def operator_pods(cluster, namespace: str, release: str) -> list[dict]:
    return cluster.get_json("pods", "-n", namespace, "-l",
                            f"app.kubernetes.io/instance={release},app.kubernetes.io/component=operator")["items"]


def ready(pod: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in (pod.get("status") or {}).get("conditions") or [])


def wait_operator_ready(cluster, namespace: str, release: str, timeout: float = 180) -> dict:
    def one_ready():
        pods = [p for p in operator_pods(cluster, namespace, release) if not p["metadata"].get("deletionTimestamp")]
        return pods[0] if len(pods) == 1 and ready(pods[0]) else None

    try:
        return cluster.wait_for("the operator pod Ready", one_ready, timeout=timeout, interval=0.25)
    except AssertionError:
        raise AssertionError(f"operator not Ready; its log:\n{operator_log(cluster, namespace, release)}") from None


def operator_log(cluster, namespace: str, release: str, lines: int = 60) -> str:
    logs = cluster.kubectl("-n", namespace, "logs", "-l", f"app.kubernetes.io/instance={release},app.kubernetes.io/component=operator",
                           f"--tail={lines}", check=False)
    return logs.stdout + logs.stderr


def example_serving(namespace: str, name: str | None = None) -> dict:
    serving = yaml.safe_load((REPO / "examples" / "serving-baseline.yaml").read_text())
    serving["metadata"]["namespace"] = namespace
    if name:
        serving["metadata"]["name"] = name
    return serving


def serving_status(cluster, namespace: str, name: str) -> dict:
    return cluster.get_json("drafterserving", "-n", namespace, name).get("status") or {}


def wait_reconciled(cluster, namespace: str, name: str, operator: tuple[str, str], generation: int = 1,
                    timeout: float = 60) -> dict:
    """`operator`: the release's namespace and name, whose operator log explains a timeout."""
    def written():
        status = serving_status(cluster, namespace, name)
        ready_condition = next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), None)
        return status if ready_condition and ready_condition.get("observedGeneration") == generation else None

    try:
        return cluster.wait_for(f"{namespace}/{name} reconciled at generation {generation}", written, timeout=timeout)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nthe operator's log:\n{operator_log(cluster, *operator)}") from None
