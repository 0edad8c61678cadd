"""Deletes finish without the operator: after `helm uninstall`, deleting a DrafterServing and then its
namespace completes on its own (the garbage collector removes the children through their ownerReferences),
with no finalizer stripped by hand; the serving never carried kopf's finalizer, not even while the operator
ran. And a serving that still carries the finalizer an older operator version put there loses it as soon
as this operator sees it.
"""

from __future__ import annotations

import subprocess
import time

import pytest
import yaml

from drafter_operator.resources.labels import SERVING_LABEL
from tests.support.e2e_chart import (CHART, adopt_crds, delete_namespaces, example_serving, helm, local_values,
                                     make_namespace, wait_operator_ready, wait_reconciled)

# The chart's operator watches every namespace, so no other test's objects may be about meanwhile.
pytestmark = [pytest.mark.e2e, pytest.mark.exclusive]

KOPF_FINALIZER = "kopf.zalando.org/KopfFinalizerMarker"
#: How long a delete may take with nothing of ours running: the garbage collector and the namespace
#: controller need seconds; a finalizer nobody removes would hold it forever.
DELETE_SECONDS = 90


def finalizers(cluster, namespace: str, name: str) -> list[str] | None:
    """The serving's finalizers, or None once it is gone."""
    got = cluster.kubectl("-n", namespace, "get", "drafterserving", name, "-o", "json", check=False)
    if got.returncode != 0:
        assert "NotFound" in got.stderr, got.stderr
        return None
    return yaml.safe_load(got.stdout)["metadata"].get("finalizers") or []


def watch_finalizers(cluster, namespace: str) -> subprocess.Popen:
    """Every version of every serving in `namespace` as the apiserver's watch delivers it: name and finalizers."""
    return subprocess.Popen([str(cluster.bin_dir / "kubectl"), "-n", namespace, "get", "drafterservings", "--watch",
                             "-o", "jsonpath={.metadata.name} {.metadata.resourceVersion} {.metadata.finalizers}{\"\\n\"}"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=cluster.env)


def seen_versions(watch: subprocess.Popen) -> list[str]:
    watch.terminate()
    output, _ = watch.communicate(timeout=10)
    return [line for line in output.splitlines() if line.strip()]


def children(cluster, namespace: str, name: str) -> list[str]:
    return cluster.kubectl("-n", namespace, "get", "deployments,services", "-l", f"{SERVING_LABEL}={name}",
                           "-o", "name").stdout.split()


def test_a_serving_and_its_namespace_delete_after_helm_uninstall(local_cluster_only, operator):
    # `operator`: the session's operator watches only the session's namespaces, and its fixture scales a
    # demo's cluster-wide operator (maybe an older version, which would add kopf's finalizer) to zero.
    cluster = local_cluster_only
    namespace, workload = make_namespace(cluster, "gone-op"), make_namespace(cluster, "gone-work")
    release = "gone"
    watch = None
    try:
        adopt_crds(cluster, release, namespace)
        helm(cluster, "install", release, str(CHART), "-n", namespace, *local_values(cluster, namespace))
        wait_operator_ready(cluster, namespace, release)
        watch = watch_finalizers(cluster, workload)  # now that the CRDs are served
        serving = example_serving(workload)
        name = serving["metadata"]["name"]
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(serving))
        wait_reconciled(cluster, workload, name, (namespace, release))
        cluster.wait_for("the serving's Deployment and Service", lambda: len(children(cluster, workload, name)) >= 2,
                         timeout=60)
        assert finalizers(cluster, workload, name) == []  # while the operator runs and has reconciled it

        helm(cluster, "uninstall", release, "-n", namespace, "--wait", timeout=180)
        assert finalizers(cluster, workload, name) == []

        started = time.monotonic()
        deleted = cluster.kubectl("-n", workload, "delete", "drafterserving", name, f"--timeout={DELETE_SECONDS}s",
                                  check=False, timeout=DELETE_SECONDS + 30)
        assert deleted.returncode == 0, f"the serving's delete did not finish: {deleted.stderr}"
        assert finalizers(cluster, workload, name) is None
        cluster.wait_for("the garbage collector removing the serving's children",
                         lambda: not children(cluster, workload, name), timeout=DELETE_SECONDS)
        cluster.kubectl("delete", "namespace", workload, "--wait=false")
        cluster.wait_for(f"namespace {workload} gone", lambda: cluster.kubectl(
            "get", "namespace", workload, check=False).returncode != 0, timeout=DELETE_SECONDS)
        print(f"\nserving and namespace deleted without the operator in {time.monotonic() - started:.1f}s")

        # Every version the watch delivered (how many depends on the apiserver's batching and the watch's
        # start; at least the creation): none with kopf's finalizer.
        versions = [line for line in seen_versions(watch) if line.startswith(f"{name} ")]
        assert versions, "the watch saw no version of the serving"
        assert not [line for line in versions if KOPF_FINALIZER in line], versions
    finally:
        if watch is not None and watch.poll() is None:
            watch.kill()
        helm(cluster, "uninstall", release, "-n", namespace, check=False)
        delete_namespaces(cluster, workload, namespace)


def test_the_finalizer_an_older_operator_left_is_removed(cluster, namespace, operator):
    serving = example_serving(namespace, "legacy")
    serving["metadata"]["finalizers"] = [KOPF_FINALIZER]
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(serving))
    try:
        cluster.wait_for("the operator removing kopf's finalizer",
                         lambda: finalizers(cluster, namespace, "legacy") == [], timeout=60)
        deleted = cluster.kubectl("-n", namespace, "delete", "drafterserving", "legacy", "--timeout=60s", check=False,
                                  timeout=90)
        assert deleted.returncode == 0, deleted.stderr
    finally:
        if finalizers(cluster, namespace, "legacy"):
            cluster.kubectl("-n", namespace, "patch", "drafterserving", "legacy", "--type=merge",
                            "-p", '{"metadata":{"finalizers":null}}', check=False)
