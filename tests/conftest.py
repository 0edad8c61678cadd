"""Shared pytest fixtures: one real cluster per test session, one fresh namespace per test.

The cluster is the embedded local one (`drafter-operator cluster up`, reused when already running), or
the cluster `KUBECONFIG` points at when DRAFTER_TEST_USE_KUBECONFIG=1. Tests that need pods to really
run (the local process runner) skip on a foreign cluster.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from drafter_testbed import cluster as local_cluster
from drafter_testbed.versions import bin_dir

# Every run accounts for its skips (tests/declared_skips.py: the declared reasons, the closing lines). Marked
# for assertion rewriting before this file imports it, as pytest does for every plugin it loads itself.
pytest.register_assert_rewrite("tests.declared_skips")
pytest_plugins = ["tests.declared_skips"]
from tests.declared_skips import skip_because  # noqa: E402 (after the registration above)

# Every namespace of this test session starts with this prefix, and the session's operator watches only
# those (tests/e2e/conftest.py): two sessions on one local cluster (a CI run beside a developer's run)
# never reconcile each other's objects.
# Kept in the environment: pytest may import this file twice (as `conftest` and as `tests.conftest`), and
# both copies must agree.
# Under pytest-xdist every worker is a session of its own with an operator of its own, so each worker
# gets a prefix of its own below the run's ("t-1a2b3c-gw0-"): no two operators reconcile one namespace.
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
NAMESPACE_PREFIX = os.environ.setdefault("DRAFTER_TEST_NAMESPACE_PREFIX", f"t-{uuid.uuid4().hex[:6]}-") + (
    f"{XDIST_WORKER}-" if XDIST_WORKER else "")


@dataclass
class Cluster:
    kubeconfig: str
    local: bool  # the embedded cluster with a process runner (pods really run)
    bin_dir: Path

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "KUBECONFIG": self.kubeconfig, "PATH": f"{self.bin_dir}:{os.environ['PATH']}"}

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 120) -> subprocess.CompletedProcess:
        proc = subprocess.run([str(self.bin_dir / "kubectl"), *args], input=input, capture_output=True,
                              text=True, env=self.env, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
        return proc

    def get_json(self, *args: str) -> dict:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def api_client(self):
        from kubernetes import config

        return config.new_client_from_config(config_file=self.kubeconfig)

    def wait_for(self, what: str, predicate, timeout: float = 60, interval: float = 0.5):
        """Poll `predicate` until it returns something truthy; fail with `what` on timeout."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = predicate()
            if last:
                return last
            time.sleep(interval)
        raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")

    def add_nodes(self, count: int, runtime: str, gpus: int = 8, prefix: str | None = None) -> list[str]:
        if not self.local:
            skip_because("external-cluster", "adding simulated GPU nodes needs the embedded local cluster")
        from drafter_testbed.nodes import DEFAULT_GPU_PRODUCT

        return local_cluster.add_nodes(count, runtime, gpus, DEFAULT_GPU_PRODUCT, prefix)


@pytest.fixture(scope="session")
def cluster() -> Cluster:
    if os.environ.get("DRAFTER_TEST_USE_KUBECONFIG") == "1" and os.environ.get("KUBECONFIG"):
        yield Cluster(kubeconfig=os.environ["KUBECONFIG"], local=False, bin_dir=bin_dir())
        return
    layout = local_cluster.Layout()
    was_running = local_cluster.is_up(layout)
    local_cluster.up(layout=layout)  # under a lock: parallel workers start one cluster and share it
    if not was_running:
        _started_by_this_run(layout).touch()
    # No stop here: a worker's siblings may still use the cluster. pytest_unconfigure stops it.
    yield Cluster(kubeconfig=str(layout.kubeconfig), local=True, bin_dir=bin_dir())


def _started_by_this_run(layout) -> Path:
    """Marks that this run (its only process, or one of its xdist workers) started the local cluster; the
    run's id is the namespace prefix, which xdist workers inherit from their controller. The run's main
    process stops the cluster at the end only then: another pytest run beside this one (CI's second lane,
    which never uses the cluster) leaves it alone."""
    run = os.environ["DRAFTER_TEST_NAMESPACE_PREFIX"].strip("-")
    return layout.root / f".started-by-test-run-{run}"


def pytest_unconfigure(config):
    if XDIST_WORKER or os.environ.get("DRAFTER_TEST_USE_KUBECONFIG") == "1":
        return
    layout = local_cluster.Layout()
    claim = _started_by_this_run(layout)
    if claim.exists():
        claim.unlink()
        if os.environ.get("DRAFTER_KEEP_CLUSTER") != "1":
            local_cluster.down(layout=layout)


@pytest.fixture
def namespace(cluster: Cluster) -> str:
    name = f"{NAMESPACE_PREFIX}{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", name)
    cluster.wait_for("the namespace's default service account",
                     lambda: cluster.kubectl("-n", name, "get", "serviceaccount", "default", check=False).returncode == 0)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="session")
def local_cluster_only(cluster: Cluster) -> Cluster:
    if not cluster.local:
        skip_because("external-cluster", "pods must really run, on the local cluster's process runner")
    return cluster
