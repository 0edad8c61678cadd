"""End-to-end: LeaderWorkerSet in the session's cluster, and kwok GPU nodes of the tests' own (fixtures)."""
from __future__ import annotations

import pytest

from tests.conftest import XDIST_WORKER

#: kwok nodes of 8 GPUs, one per pod of the tests' LeaderWorkerSets (a group of 2, 2 replicas): a serving replica
#: spread over whole 8-GPU nodes, as LWS serves one across several.
LWS_NODES = 4


@pytest.fixture(scope="session")
def lws_running(local_cluster_only):
    """LWS installed and answering in the session's cluster (a no-op when it runs already)."""
    from drafter_testbed import lws

    done = lws.install()
    print(f"lws: {done}")
    yield lws
    # Under xdist another worker may still use it; `cluster down` stops it there (it is a component).
    if not XDIST_WORKER and done["started"]:
        lws.stop()


#: The taint of those nodes, which only these tests' pods tolerate: a serving of another test tolerates the GPU taint
#: and could otherwise land on them, taking the capacity its own test counts on.
LWS_TAINT = ("drafter.dev/lws-test", "true")
LWS_TOLERATION = {"key": LWS_TAINT[0], "operator": "Equal", "value": LWS_TAINT[1], "effect": "NoSchedule"}


@pytest.fixture(scope="module")
def lws_nodes(local_cluster_only) -> list[str]:
    """LWS_NODES 8-GPU kwok nodes only these tests place pods on (by name and LWS_TAINT), per xdist worker, removed
    afterwards."""
    from drafter_testbed import cluster as local

    cluster = local_cluster_only
    prefix = f"lws-{XDIST_WORKER}" if XDIST_WORKER else "lws"
    existing = [n["metadata"]["name"] for n in cluster.get_json("nodes", "-l", "drafter.dev/node-runtime=kwok")["items"]
                if n["metadata"]["name"].rsplit("-", 1)[0] == prefix]
    added = local.add_nodes(LWS_NODES - len(existing), "kwok", 8, "NVIDIA-H100-80GB-HBM3", prefix,
                            taints=(LWS_TAINT,)) if len(existing) < LWS_NODES else []
    yield sorted(existing + added)[:LWS_NODES]
    if added:
        cluster.kubectl("delete", "node", *added, "--wait=false", check=False)
