"""Sick engines end to end: an engine pod whose /metrics hangs, answers late, dribbles, answers garbage, an
error or drops the connection (the emulator's run-time fault, POST /emulator/metrics-fault) turns its
watched serving's Degraded condition Unknown with MetricsUnavailable or MetricsInvalid and a message that
says what went wrong, never True; and another serving's swap takes its normal time while it hangs.
"""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

from tests.support.e2e_acceptance import Traffic, engine_pods, events
from tests.support.e2e_serving import apply, condition, serving_status, wait_ready
from tests.support.e2e_engine_faults import small

pytestmark = pytest.mark.e2e

ACCEPTANCE = {"minAcceptanceRate": "0.4", "window": "30s", "for": "10s", "minDraftTokens": 50, "onDegraded": "Alert"}
#: (fault, Degraded reason, words its message must hold). The operator's scrape deadline is 5 s.
FAULTS = [
    ({"mode": "hang"}, "MetricsUnavailable", "Timeout: "),
    ({"mode": "slow", "seconds": 8}, "MetricsUnavailable", "no complete answer within 5 s"),
    ({"mode": "trickle", "seconds": 30}, "MetricsUnavailable", "no complete answer within 5 s"),
    ({"mode": "status", "status": 500}, "MetricsUnavailable", "HTTPError: "),
    ({"mode": "reset"}, "MetricsUnavailable", "Unreachable: "),
    ({"mode": "garbage"}, "MetricsInvalid", "Unparseable: "),
]


def set_fault(pod: dict, fault: dict) -> None:
    request = urllib.request.Request(f"http://{pod['status']['podIP']}:8000/emulator/metrics-fault",
                                     data=json.dumps(fault).encode(), headers={"Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=10).read()


class NeverDegraded:
    """Reads the watched serving's status while waiting and fails the moment Degraded turns True."""

    def __init__(self, cluster, namespace: str, name: str):
        self.cluster, self.namespace, self.name = cluster, namespace, name
        self.seen: list[tuple[str, str]] = []

    def wait(self, status: str, reason: str, words: str = "", timeout: float = 40) -> dict:
        def check():
            cond = condition(serving_status(self.cluster, self.namespace, self.name), "Degraded")
            self.seen.append((cond.get("status"), cond.get("reason")))
            assert cond.get("status") != "True", cond
            return cond if (cond.get("status"), cond.get("reason")) == (status, reason) \
                and words in cond.get("message", "") else None
        return self.cluster.wait_for(f"Degraded={status}/{reason} ({words})", check, timeout=timeout, interval=0.3)


def swap_seconds(cluster, namespace: str, serving: dict, k: int) -> float:
    """Change the drafter's k (a new revision, a BlueGreen swap) and time it until the new one serves."""
    before = serving_status(cluster, namespace, serving["metadata"]["name"])["activeRevision"]
    serving["spec"]["drafter"]["numSpeculativeTokens"] = k
    started = time.monotonic()
    apply(cluster, namespace, serving)
    cluster.wait_for("the swap", lambda: (s := serving_status(cluster, namespace, serving["metadata"]["name"])).get(
        "activeRevision") not in (None, before) and condition(s, "Ready").get("status") == "True", timeout=90,
        interval=0.2)
    return time.monotonic() - started


def test_each_metrics_fault_is_unknown_never_degraded_and_does_not_slow_another_serving(fast_engines):
    cluster, namespace, operator = fast_engines
    watched = small("watched")
    watched["spec"]["acceptance"] = ACCEPTANCE
    other = small("other")
    apply(cluster, namespace, watched)
    apply(cluster, namespace, other)
    revision = wait_ready(cluster, namespace, "watched")["activeRevision"]
    wait_ready(cluster, namespace, "other")
    (pod,) = engine_pods(cluster, namespace, "watched", revision)
    labels = {"namespace": namespace, "name": "watched", "revision": revision}
    watch = NeverDegraded(cluster, namespace, "watched")
    normal_swap = swap_seconds(cluster, namespace, other, 4)

    with Traffic(cluster, namespace, "watched", limit_seconds=150):
        watch.wait("False", "AcceptanceHealthy")
        # Late but within the 5 s deadline: still read, still healthy.
        set_fault(pod, {"mode": "slow", "seconds": 2})
        time.sleep(3 * operator.ACCEPTANCE_INTERVAL_SECONDS + 2)
        watch.wait("False", "AcceptanceHealthy", timeout=5)
        messages, seconds = {}, {}
        for fault, reason, words in FAULTS:
            set_fault(pod, fault)
            started = time.monotonic()
            messages[fault["mode"]] = watch.wait("Unknown", reason, words)["message"]
            seconds[fault["mode"]] = time.monotonic() - started
            assert operator.metric("drafter_engine_metrics_available", **labels) == 0.0
            assert operator.metric("drafter_degraded", **labels) is None  # Unknown: no series to page on
            if fault["mode"] == "hang":
                hung_swap = swap_seconds(cluster, namespace, other, 3)
            set_fault(pod, {"mode": "none"})
            started = time.monotonic()
            watch.wait("False", "AcceptanceHealthy")
            seconds[fault["mode"]] = (seconds[fault["mode"]], time.monotonic() - started)

    for fault, reason, _ in FAULTS:
        to_verdict, to_recover = seconds[fault["mode"]]
        print(f"{json.dumps(fault):40} {reason:18} {to_verdict:5.1f} s, healthy {to_recover:4.1f} s after: "
              f"{messages[fault['mode']]}")
    pod_name = pod["metadata"]["name"]
    assert all(message.startswith(f"{pod_name}: ") for message in messages.values()), messages
    assert "HTTP 500" in messages["status"] and "/metrics" in messages["reset"]
    print(f"BlueGreen swap of another serving: {normal_swap:.1f} s normally, {hung_swap:.1f} s while the watched "
          f"engine's /metrics hangs")
    # The other serving's swap finished while this engine's /metrics hung (swap_seconds waits for it); how long
    # it took beside the normal swap is printed, not asserted (wall clock). What bounds a hung read is
    # SCRAPE_TIMEOUT_SECONDS in acceptance/engine_source.py.
    reasons = {e["reason"] for e in events(cluster, namespace, "watched")}
    assert {"MetricsUnavailable", "MetricsInvalid"} <= reasons and "LowAcceptanceRate" not in reasons
    status = serving_status(cluster, namespace, "watched")
    assert not any(r.get("degraded") for r in status["revisions"])
    assert ("True", "LowAcceptanceRate") not in watch.seen
