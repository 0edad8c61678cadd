"""A small fleet (the smoke version of bench/fleet_scale.py): 25 DrafterServings in 5 namespaces on kwok
8-GPU nodes, all Ready, no write by the operator while nothing changes, and 5 drafter swaps at once.

The fleet has an operator of its own, watching only the fleet's namespaces: the session's operator keeps
reconciling other tests' leftovers (namespaces being deleted), which would blur "no writes". Its
reconciler's requests come from its /metrics; kopf's own writes (annotations, finalizers, Events) are
caught as changes of the fleet's objects (any write that changes an object bumps its resourceVersion).
The kwok nodes carry a GPU product no other test uses and are deleted at the end.
"""

from __future__ import annotations

import copy
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml

from tests.e2e.conftest import OperatorProcess
from tests.support.e2e_serving import SEED, condition

# One worker runs the whole module: its fleet nodes and operator are set up once (module fixtures).
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("fleet")]

NAMESPACES, PER_NAMESPACE, SWAPS = 5, 5, 5
FLEET_PRODUCT = "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"
FLEET_LABEL = "drafter.dev/fleet-smoke"
WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE")
STEADY_SECONDS = 20


@pytest.fixture(scope="module")
def fleet_nodes(local_cluster_only):
    """One 8-GPU kwok node per serving (the seed takes a whole node), removed afterwards."""
    from drafter_testbed import cluster as local

    cluster = local_cluster_only
    # Only kwok nodes count: the fleet's servings select them, and another test's process node may carry the
    # same GPU product (the output check's SM120 node).
    have = cluster.get_json("nodes", "-l", f"nvidia.com/gpu.product={FLEET_PRODUCT},drafter.dev/node-runtime=kwok")["items"]
    added = local.add_nodes(max(0, NAMESPACES * PER_NAMESPACE + 1 - len(have)), "kwok", 8, FLEET_PRODUCT,
                            "fleet-smoke")
    yield
    if added:
        cluster.kubectl("delete", "node", *added, "--wait=false", check=False)


@pytest.fixture(scope="module")
def fleet(cluster, operator, fleet_nodes, tmp_path_factory):
    """Five namespaces outside the session's prefix and an operator for exactly those. `operator` is
    requested so the demo's cluster-wide operator is scaled down first."""
    run = uuid.uuid4().hex[:6]
    namespaces = [f"fleet-{run}-{i}" for i in range(NAMESPACES)]
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(
        [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}} for n in namespaces]))
    fleet_operator = OperatorProcess(cluster, tmp_path_factory.mktemp("fleet") / "operator.log", f"fleet-{run}-*")
    fleet_operator.start()
    yield namespaces, fleet_operator
    fleet_operator.stop()
    cluster.kubectl("delete", "namespace", *namespaces, "--wait=false", check=False)


def fleet_serving(namespace: str, name: str) -> dict:
    serving = copy.deepcopy(SEED)
    serving["metadata"] = {"name": name, "namespace": namespace, "labels": {FLEET_LABEL: "true"}}
    serving["spec"]["placement"] = {"gpuProduct": FLEET_PRODUCT, "nodeSelector": {"drafter.dev/node-runtime": "kwok"},
                                    "tolerations": SEED["spec"]["placement"]["tolerations"]}
    serving["spec"]["storage"].pop("modelClaim")  # kwok ignores volumes; no PersistentVolume needed
    return serving


def fleet_servings(cluster, namespaces: list[str]) -> dict[tuple[str, str], dict]:
    items = cluster.get_json("drafterservings", "-A", "-l", FLEET_LABEL)["items"]
    return {(s["metadata"]["namespace"], s["metadata"]["name"]): s for s in items
            if s["metadata"]["namespace"] in namespaces}


def is_ready(serving: dict) -> bool:
    status = serving.get("status") or {}
    return (condition(status, "Ready").get("status") == "True"
            and status.get("observedGeneration") == serving["metadata"]["generation"])


def versions(cluster, namespaces: list[str]) -> dict[tuple, str]:
    """resourceVersion of every object the operator or kopf writes in the fleet: a write that changed
    anything changed one of these, or added or removed one."""
    out = {}
    for item in cluster.get_json("drafterservings,deployments,services,events", "-A")["items"]:
        meta = item["metadata"]
        # The operator posts its Events on the DrafterServing; the Services' Events are the EndpointSlice
        # controller's (it refuses loopback pod IPs, docs/testbed.md), retried with a back-off, not ours.
        if item["kind"] == "Event" and item["involvedObject"]["kind"] != "DrafterServing":
            continue
        if meta["namespace"] in namespaces:
            out[(item["kind"], meta["namespace"], meta["name"])] = meta["resourceVersion"]
    return out


def reconciler_writes(fleet_operator: OperatorProcess) -> float:
    return sum(fleet_operator.metric("drafter_operator_api_requests", verb=verb) or 0 for verb in WRITE_VERBS)


def test_a_fleet_gets_ready_stays_quiet_and_swaps_at_once(cluster, fleet):
    namespaces, fleet_operator = fleet
    wanted = [(ns, f"kimi-{i}") for ns in namespaces for i in range(PER_NAMESPACE)]
    cluster.kubectl("apply", "--server-side", "-f", "-",
                    input=yaml.safe_dump_all([fleet_serving(ns, name) for ns, name in wanted]))
    servings = cluster.wait_for(f"all {len(wanted)} servings Ready", lambda: (
        s := fleet_servings(cluster, namespaces)) and len(s) == len(wanted) and all(map(is_ready, s.values())) and s,
        timeout=120, interval=1)
    assert sorted(servings) == sorted(wanted)
    for key in wanted:
        deployments = cluster.get_json("-n", key[0], "deployments", "-l", f"drafter.dev/serving={key[1]}")["items"]
        assert [d["status"].get("readyReplicas") for d in deployments] == [1], key

    # Steady: the first acceptance measurements (every 2 s here) may still record a condition; after that
    # nothing changes, so nothing may be written.
    time.sleep(8)
    before_versions, before_writes = versions(cluster, namespaces), reconciler_writes(fleet_operator)
    time.sleep(STEADY_SECONDS)
    after_versions, after_writes = versions(cluster, namespaces), reconciler_writes(fleet_operator)
    changed = {k: (before_versions.get(k), v) for k, v in after_versions.items() if before_versions.get(k) != v}
    changed.update({k: (v, None) for k, v in before_versions.items() if k not in after_versions})
    assert after_writes == before_writes, f"the reconciler wrote {after_writes - before_writes} times while steady"
    assert not changed, f"objects written while steady: {dict(list(changed.items())[:5])}"

    # A handful of drafter swaps at once, one per namespace: each ends with its new revision active and
    # Ready, the old Deployment gone and exactly one left.
    targets = [(ns, "kimi-0") for ns in namespaces][:SWAPS]
    old = {k: servings[k]["status"]["activeRevision"] for k in targets}
    patch = '{"spec": {"drafter": {"numSpeculativeTokens": 3}}}'
    with ThreadPoolExecutor(len(targets)) as pool:
        list(pool.map(lambda k: cluster.kubectl("-n", k[0], "patch", "drafterserving", k[1], "--type", "merge",
                                                "-p", patch), targets))

    def swapped():
        now = fleet_servings(cluster, namespaces)
        done = {}
        for key in targets:
            status = now[key].get("status") or {}
            left = [d["metadata"]["labels"]["drafter.dev/revision"] for d in cluster.get_json(
                "-n", key[0], "deployments", "-l", f"drafter.dev/serving={key[1]}")["items"]]
            if is_ready(now[key]) and status.get("activeRevision") not in (None, old[key]) \
                    and left == [status["activeRevision"]]:
                done[key] = status["activeRevision"]
        return len(done) == len(targets) and done
    new = cluster.wait_for(f"{len(targets)} swaps finished", swapped, timeout=90, interval=1)
    assert all(new[k] != old[k] for k in targets)
    untouched = fleet_servings(cluster, namespaces)
    assert all(is_ready(s) for s in untouched.values())
    assert all(untouched[k]["status"]["activeRevision"] == servings[k]["status"]["activeRevision"]
               for k in wanted if k not in targets)
