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


@pytest.fixture(scope="session")
def lws_nodes(local_cluster_only) -> list[str]:
    """LWS_NODES 8-GPU kwok nodes only these tests place pods on (by name), per xdist worker: those already there
    under the prefix, and new ones for the rest."""
    cluster = local_cluster_only
    prefix = f"lws-{XDIST_WORKER}" if XDIST_WORKER else "lws"
    existing = [n["metadata"]["name"] for n in cluster.get_json("nodes", "-l", "drafter.dev/node-runtime=kwok")["items"]
                if n["metadata"]["name"].rsplit("-", 1)[0] == prefix]
    if len(existing) < LWS_NODES:
        existing += cluster.add_nodes(LWS_NODES - len(existing), "kwok", 8, prefix)
    return sorted(existing)[:LWS_NODES]
