"""The Helm chart on the local cluster: every rendered manifest passes the apiserver's dry run; a release
runs the operator as a pod (the local process runner starts `drafter-operator run`) with the chart's
ServiceAccount token, so it has exactly the chart's RBAC; `helm test` passes; the operator reconciles a
DrafterServing from examples/; `helm upgrade` and `helm uninstall` leave no orphans; in namespaced
mode the operator works in its namespace and nothing outside it.

The operator pod authenticates with a projected token of the chart's ServiceAccount through a kubeconfig
(drafter_testbed/chart.py says why, and that only the way the token is read differs from a real cluster).

Namespaces here do not carry the session's prefix: the session's own operator (tests/e2e/conftest.py)
must not reconcile what the chart's operator is tested on.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from drafter_operator.resources.labels import SERVING_LABEL
from drafter_testbed import chart
from drafter_testbed import cluster as local
from tests.support.e2e_chart import (CHART, CRDS, adopt_crds, delete_namespaces, example_serving, helm, local_values,
                                     make_namespace, operator_pods, ready, serving_status, wait_operator_ready,
                                     wait_reconciled)

KUBE_VERSION = "1.35.4"
#: kinds whose CRDs (prometheus-operator's) the local cluster does not have: their dry run cannot run here.
NO_CRDS_HERE = ("ServiceMonitor", "PodMonitor", "PrometheusRule")
#: Seconds a serving outside the watched namespaces is given to (wrongly) get a status.
OUTSIDE_GRACE_SECONDS = 15


def release_objects(cluster, release: str, *namespaces: str) -> list[str]:
    """Every object that still carries the release's instance label, cluster-scoped and in `namespaces`."""
    selector = f"app.kubernetes.io/instance={release}"
    found = cluster.kubectl("get", "clusterroles,clusterrolebindings", "-l", selector, "-o", "name").stdout.split()
    for namespace in namespaces:
        found += cluster.kubectl("-n", namespace, "get",
                                 "deployments,pods,services,serviceaccounts,configmaps,roles,rolebindings",
                                 "-l", selector, "-o", "name").stdout.split()
    return found


def run_operator_as(cluster, namespace: str, service_account: str, tmp_path: Path, *watch: str,
                    timeout: float = 120) -> subprocess.CompletedProcess:
    """`drafter-operator run --namespace ...` on this host, authenticated with a token of `service_account`."""
    token = cluster.kubectl("-n", namespace, "create", "token", service_account, "--duration=10m").stdout.strip()
    config = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    config["users"] = [{"name": service_account, "user": {"token": token}}]
    config["contexts"][0]["context"]["user"] = service_account
    path = tmp_path / "sa-kubeconfig"
    path.write_text(yaml.safe_dump(config))
    args = [a for name in watch for a in ("--namespace", name)]
    # POD_NAMESPACE as in the chart's pod: the leader-election Lease is in the release namespace.
    return subprocess.run([sys.executable, "-m", "drafter_operator.cli", "run", *args, "--metrics-port", "0"], capture_output=True, text=True,
                          env={**cluster.env, "KUBECONFIG": str(path), "POD_NAMESPACE": namespace}, timeout=timeout)


# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("values", [
    {},
    {"operator.watchNamespaces": "{NS}", "crds.keep": "false"},
    {"image.repository": "registry.example:5000/ops/drafter-operator", "image.tag": "0.2.0",
     "operator.trainerImage": "registry.example/trainer:1", "monitoring.serviceMonitor.enabled": "true",
     "monitoring.podMonitor.enabled": "true"},
], ids=["default", "namespaced", "monitoring-custom-images"])
def test_every_rendered_manifest_passes_the_apiservers_dry_run(cluster, values):
    namespace = make_namespace(cluster, "chart-dry")
    try:
        values = {k: v.replace("NS", namespace) for k, v in values.items()}
        rendered = helm(cluster, "template", "dry", str(CHART), "--namespace", namespace, "--kube-version", KUBE_VERSION,
                        "--include-crds", *chart.set_args(values)).stdout
        objects = [o for o in yaml.safe_load_all(rendered) if o]
        # The helm test pod names its hook ServiceAccount, which a dry run does not create (`helm test` runs it below).
        checked = [o for o in objects if o["kind"] not in NO_CRDS_HERE
                   and not (o["kind"] == "Pod" and o["metadata"]["annotations"].get("helm.sh/hook") == "test")]
        assert len(checked) >= 8
        # As JSON: PyYAML, like helm's toYaml, writes the string "1e-4" unquoted, which kubectl reads as a number.
        proc = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input="\n---\n".join(map(json.dumps, checked)),
                               check=False)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.count("(server dry run)") == len(checked), proc.stdout
        if values.get("monitoring.serviceMonitor.enabled"):
            assert {"ServiceMonitor", "PodMonitor"} <= {o["kind"] for o in objects}
    finally:
        delete_namespaces(cluster, namespace)


@pytest.mark.exclusive  # the chart's operator watches every namespace: no other test's objects meanwhile
def test_install_test_reconcile_upgrade_uninstall_cluster_wide(local_cluster_only, capsys):
    cluster = local_cluster_only
    namespace, workload = make_namespace(cluster, "chart-op"), make_namespace(cluster, "chart-work")
    release = "drafter"
    try:
        adopt_crds(cluster, release, namespace)
        started = time.monotonic()
        install = helm(cluster, "install", release, str(CHART), "-n", namespace, *local_values(cluster, namespace))
        pod = wait_operator_ready(cluster, namespace, release)
        install_to_ready = time.monotonic() - started
        with capsys.disabled():
            print(f"\nhelm install -> operator pod Ready: {install_to_ready:.1f}s")  # printed, not asserted
        assert "Cluster-wide mode" in install.stdout  # NOTES.txt
        assert pod["spec"]["serviceAccountName"] == f"{release}-drafter-operator"  # the chart's own ServiceAccount
        assert pod["spec"]["nodeName"].startswith("local-cpu")

        # The pod exits 0 only when the CRDs are served and the metrics Service answers with the
        # operator's series; it is deleted once it succeeded (no orphan), so its log is not kept.
        test = helm(cluster, "test", release, "-n", namespace, timeout=180)
        assert "Phase:          Succeeded" in test.stdout, test.stdout
        left = [o for o in release_objects(cluster, release, namespace) if o.endswith("-test")]
        assert not left, f"test hook objects left behind: {left}"

        serving = example_serving(workload)
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(serving))
        name = serving["metadata"]["name"]
        status = wait_reconciled(cluster, workload, name, (namespace, release))
        assert status["revisions"], status
        deployments = cluster.get_json("deployments", "-n", workload, "-l", f"{SERVING_LABEL}={name}")["items"]
        assert deployments, "the operator created no engine Deployment"

        # Upgrade: a changed setting. Recreate: the old pod stops and releases the Lease, then the new one
        # starts, takes the Lease and picks the serving up again.
        old_uid = pod["metadata"]["uid"]
        helm(cluster, "upgrade", release, str(CHART), "-n", namespace,
             *local_values(cluster, namespace, **{"operator.workers": "4"}))
        pod = cluster.wait_for("the upgraded operator pod", lambda: next(
            (p for p in operator_pods(cluster, namespace, release) if p["metadata"]["uid"] != old_uid and ready(p)), None),
            timeout=180)
        cluster.wait_for("the old operator pod gone", lambda: len(operator_pods(cluster, namespace, release)) == 1,
                         timeout=60)
        cluster.wait_for("the new pod holding the Lease", lambda: cluster.get_json(
            "lease", "-n", namespace, "drafter-operator")["spec"]["holderIdentity"].startswith(pod["metadata"]["name"] + "_"),
            timeout=30)
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        assert env["DRAFTER_WORKERS"] == "4"
        cluster.kubectl("-n", workload, "patch", "drafterserving", name, "--type=merge",
                        "-p", '{"spec":{"replicas":2}}')
        wait_reconciled(cluster, workload, name, (namespace, release), generation=2)

        helm(cluster, "uninstall", release, "-n", namespace, "--wait", timeout=180)
        cluster.wait_for("the release's objects gone", lambda: not release_objects(cluster, release, namespace))
        # Kept: the CRDs (resource policy), and so the serving and the engine Deployment it owns.
        for crd in CRDS:
            assert cluster.kubectl("get", "crd", crd, check=False).returncode == 0, f"{crd} was deleted"
        assert cluster.kubectl("-n", workload, "get", "drafterserving", name, check=False).returncode == 0
        assert cluster.get_json("deployments", "-n", workload, "-l", f"{SERVING_LABEL}={name}")["items"]
    finally:
        helm(cluster, "uninstall", release, "-n", namespace, check=False)
        delete_namespaces(cluster, workload, namespace)


@pytest.mark.cluster_lock("chart-crds")  # its release adopts the CRDs (another release's adoption would fail it)
def test_namespaced_mode_works_in_its_namespace_and_nowhere_else(local_cluster_only, capsys, tmp_path):
    cluster = local_cluster_only
    namespace = make_namespace(cluster, "chart-op")
    watched, outside = make_namespace(cluster, "chart-mine"), make_namespace(cluster, "chart-other")
    release = "scoped"
    try:
        adopt_crds(cluster, release, namespace)
        started = time.monotonic()
        install = helm(cluster, "install", release, str(CHART), "-n", namespace,
                       *local_values(cluster, namespace, **{"operator.watchNamespaces": f"{{{watched}}}"}))
        wait_operator_ready(cluster, namespace, release)
        with capsys.disabled():
            print(f"\nhelm install (namespaced) -> operator pod Ready: {time.monotonic() - started:.1f}s")
        assert f"only in\n  {watched}" in install.stdout  # NOTES.txt names the namespaces
        assert not cluster.kubectl("get", "clusterroles,clusterrolebindings", "-l", f"app.kubernetes.io/instance={release}",
                                   "-o", "name").stdout.split()

        mine, other = example_serving(watched, "mine"), example_serving(outside, "other")
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([mine, other]))
        wait_reconciled(cluster, watched, "mine", (namespace, release))
        time.sleep(OUTSIDE_GRACE_SECONDS)
        assert serving_status(cluster, outside, "other") == {}, "a serving outside the watched namespace was reconciled"
        assert not cluster.get_json("deployments", "-n", outside)["items"]

        # Outside its namespace the ServiceAccount is refused, by name, what it may do inside.
        account = f"system:serviceaccount:{namespace}:{release}-drafter-operator"
        for where, expected in ((watched, "yes"), (outside, "no")):
            answer = cluster.kubectl("auth", "can-i", "create", "deployments.apps", "-n", where, "--as", account,
                                     check=False).stdout.strip()
            assert answer == expected, f"can-i create deployments in {where}: {answer}"
        assert cluster.kubectl("auth", "can-i", "list", "drafterservings.drafter.dev", "--all-namespaces", "--as",
                               account, check=False).stdout.strip() == "no"

        # Asked to act outside its namespace (a user running the operator by hand with the chart's
        # ServiceAccount), it refuses to start and names what is denied where, and the fix.
        refused = run_operator_as(cluster, namespace, f"{release}-drafter-operator", tmp_path, watched, outside)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert f"watch drafterservings.drafter.dev in namespace {outside}" in refused.stderr, refused.stderr
        assert f"in namespace {watched}" not in refused.stderr
        assert "operator.watchNamespaces" in refused.stderr

        helm(cluster, "uninstall", release, "-n", namespace, "--wait", timeout=180)
        cluster.wait_for("the release's objects gone", lambda: not release_objects(cluster, release, namespace, watched))
    finally:
        helm(cluster, "uninstall", release, "-n", namespace, check=False)
        delete_namespaces(cluster, watched, outside, namespace)
