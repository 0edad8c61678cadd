"""End-to-end: Kueue in the session's cluster and a GPU ClusterQueue for one test's namespace (fixtures)."""
from __future__ import annotations

import pytest
import yaml

from tests.conftest import XDIST_WORKER


@pytest.fixture(scope="session")


def kueue_running(local_cluster_only):
    """Kueue installed and answering in the session's cluster (a no-op when it runs already)."""
    from drafter_testbed import kueue

    done = kueue.install()
    print(f"kueue: {done}")
    yield kueue
    # Under xdist another worker may still use it; `cluster down` stops it there (once it is a component).
    if not XDIST_WORKER and done["started"]:
        kueue.stop()


@pytest.fixture


def gpu_queue(cluster, namespace, kueue_running, engine_nodes):
    """A ResourceFlavor, a ClusterQueue open to this test's namespace only with one GPU of quota (and cpu and
    memory enough), and the LocalQueue `team` in the namespace. Returns the ClusterQueue's name."""
    kueue = kueue_running
    name = f"{namespace}-gpus"
    objects = [kueue.resource_flavor(name),
               kueue.cluster_queue(name, name, {"nvidia.com/gpu": "1", "cpu": "8", "memory": "32Gi"},
                                   {"matchLabels": {"kubernetes.io/metadata.name": namespace}}),
               kueue.local_queue(namespace, "team", name)]
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))
    cluster.wait_for("the ClusterQueue to be active", lambda: (kueue.condition(
        cluster.get_json("clusterqueue", name), "Active") or {}).get("status") == "True")
    yield name
    cluster.kubectl("delete", "namespace", namespace, "--wait=true", "--timeout=60s", check=False)
    cluster.kubectl("delete", "clusterqueue", name, "--ignore-not-found", "--wait=false", check=False)
    cluster.kubectl("delete", "resourceflavor", name, "--ignore-not-found", "--wait=false", check=False)
