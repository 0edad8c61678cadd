"""Faults during a swap, the short version of bench/swap_faults.py: the operator SIGKILLed at three
moments of one BlueGreen swap, and the kube-apiserver restarted in the middle of another. Each swap must
finish with the invariants of drafter_testbed/swap_faults.py and no failed request through the Service.
"""

from __future__ import annotations

import signal
import time

import pytest

from drafter_testbed import swap_faults as sf
from drafter_testbed.serving_client import ClientLoop
from tests.e2e.conftest import emulator_settings
from tests.support.e2e_serving import apply, seed_serving, service_ip, wait_ready

pytestmark = pytest.mark.e2e

NAME = "kimi"


def wait_for_phase(cluster, namespace: str, old: str, phases: set[str], timeout: float = 90) -> str:
    return cluster.wait_for(f"the swap in one of {sorted(phases)}", lambda: (
        p := sf.swap_phase(sf.take_snapshot(cluster.get_json, namespace), NAME, old)) in phases and p,
        timeout=timeout, interval=0.3)


def start_swap(cluster, namespace: str) -> tuple[str, dict, ClientLoop]:
    emulator_settings(cluster, namespace, time_scale="0.1", startup_seconds="6")  # a loading phase to aim at
    serving = seed_serving(NAME, swap={"strategy": "BlueGreen"})
    # One GPU a revision: both revisions fit beside whatever else holds GPUs on the engine nodes.
    serving["spec"]["target"]["tensorParallelSize"] = 1
    serving["spec"]["resources"] = {"gpusPerReplica": 1}
    apply(cluster, namespace, serving)
    status = wait_ready(cluster, namespace, NAME)
    client = ClientLoop(service_ip(cluster, namespace, NAME), 8000, "/models/Kimi-K2.5", limit_seconds=300)
    client.start()
    serving["spec"]["drafter"]["model"] = "/models/drafters/emulator-good-drafter"
    apply(cluster, namespace, serving)
    return status["activeRevision"], status, client


def finish_and_check(cluster, namespace: str, old: str, before: dict, client: ClientLoop) -> list[sf.Check]:
    try:
        checks, seconds = sf.wait_for_invariants(
            cluster.get_json, namespace, NAME, timeout=150, expected_previous=old,
            history_before=[r["name"] for r in before["revisions"]])
        time.sleep(1)  # traffic keeps flowing against the new revision alone
    finally:
        client.stop()
    print(f"invariants after {seconds:.1f} s; requests {client.ok} ok, {len(client.failures)} failed")
    assert [c for c in checks if not c.held] == []
    assert client.failures == [] and client.ok > 10
    return checks


def test_operator_sigkilled_at_three_moments_of_a_bluegreen_swap(fast_engines):
    cluster, namespace, operator = fast_engines
    old, before, client = start_swap(cluster, namespace)
    hit = []
    try:
        # Right after the spec change: the restarted operator must start the swap itself.
        operator.stop(signal.SIGKILL)
        operator.start()
        hit.append(sf.swap_phase(sf.take_snapshot(cluster.get_json, namespace), NAME, old))
        # The new revision's pod loading, the old one serving.
        hit.append(wait_for_phase(cluster, namespace, old, {sf.LOADING, sf.SWITCH}))
        operator.stop(signal.SIGKILL)
        operator.start()
        # Traffic moved; the old revision draining, not yet deleted.
        hit.append(wait_for_phase(cluster, namespace, old, {sf.DELETION}))
        operator.stop(signal.SIGKILL)
        operator.start()
    except BaseException:
        client.stop()
        raise
    print(f"operator SIGKILLed at: {hit}")
    assert hit[1:] in ([sf.LOADING, sf.DELETION], [sf.SWITCH, sf.DELETION])
    checks = finish_and_check(cluster, namespace, old, before, client)
    assert {c.name for c in checks} >= {"exactly one active revision", "revisions history intact"}


@pytest.mark.exclusive  # every other test would see the apiserver go away
def test_kube_apiserver_restarted_mid_swap(fast_engines):
    from drafter_testbed import cluster as local

    cluster, namespace, operator = fast_engines
    old, before, client = start_swap(cluster, namespace)
    try:
        phase = wait_for_phase(cluster, namespace, old, {sf.LOADING, sf.SWITCH})
        seconds = local.restart("kube-apiserver")
        print(f"kube-apiserver restarted at '{phase}', healthy again after {seconds} s")
        # If its Lease could not be renewed for the renew deadline, the operator exits as client-go's electors
        # do, and OperatorProcess starts it again as the kubelet would (printed below).
    except BaseException:
        client.stop()
        raise
    finish_and_check(cluster, namespace, old, before, client)
    print(f"operator restarts in this session so far: {operator.restarts}")
    # The shared cluster is whole again for the tests after this one.
    layout = local.Layout()
    assert local.is_up(layout)
    cluster.wait_for("every node Ready", lambda: all(
        any(c["type"] == "Ready" and c["status"] == "True" for c in (n.get("status") or {}).get("conditions") or [])
        for n in cluster.get_json("nodes")["items"]), timeout=60)
