"""Shared pytest fixtures: one real cluster per test session, one fresh namespace per test. How a cluster
is started and driven is the shared harness's (drafter_testbed/harness.py); this file is the pytest glue.

The cluster is the embedded local one (`drafter-operator cluster up`, reused when already running), or
the cluster `KUBECONFIG` points at when DRAFTER_TEST_USE_KUBECONFIG=1. Tests that need pods to really
run (the local process runner) skip on a foreign cluster.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from hypothesis import settings

from drafter_testbed import cluster as local_cluster
from drafter_testbed import harness

# No hypothesis deadline anywhere: a deadline is a wall-clock assertion, and on CI's two cores beside the
# end-to-end lane a 4 ms example once took 297 ms (a FlakyFailure in test_promotion_gate). What a test
# checks is its property; the time an example takes is the benchmarks' business.
settings.register_profile("drafter-suite", deadline=None)
settings.load_profile("drafter-suite")

# Every run accounts for its skips (tests/declared_skips.py: the declared reasons, the closing lines). Marked
# for assertion rewriting before this file imports it, as pytest does for every plugin it loads itself.
pytest.register_assert_rewrite("tests.declared_skips")
# The helpers tests share (tests/support) assert too: rewritten like the test modules they came from.
pytest.register_assert_rewrite("tests.support")
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


class Cluster(harness.Cluster):
    """The harness's cluster; adding nodes to a foreign one is a declared skip, not an error."""

    def add_nodes(self, count: int, runtime: str, gpus: int = 8, prefix: str | None = None,
                  gpu_product: str | None = None) -> list[str]:
        if not self.local:
            skip_because("external-cluster", "adding simulated GPU nodes needs the embedded local cluster")
        return super().add_nodes(count, runtime, gpus, prefix, gpu_product)


@pytest.fixture(scope="session")
def cluster() -> Cluster:
    if os.environ.get("DRAFTER_TEST_USE_KUBECONFIG") == "1" and os.environ.get("KUBECONFIG"):
        yield harness.external(os.environ["KUBECONFIG"], Cluster)
        return
    layout = local_cluster.Layout()
    started, this_run_started = harness.start_local(layout, Cluster)
    if this_run_started:
        _started_by_this_run(layout).touch()
    # No stop here: a worker's siblings may still use the cluster. pytest_unconfigure stops it.
    yield started


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
