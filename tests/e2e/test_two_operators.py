"""Two operator processes for the same namespaces on the local cluster (a `helm upgrade`'s overlap, an
operator run by hand): only the Lease holder acts; SIGKILL of the leader hands over within the Lease
duration, SIGTERM within a retry. The Lease and its timings: controllers/leadership.py.

The operators here watch one namespace of their own, outside the session operator's prefix, with their
Lease in it, so they exclude each other and nobody else.
"""

from __future__ import annotations

import signal
import time

import yaml

from drafter_operator.controllers import leader_election as election
from drafter_operator.controllers.leadership import Timings, lease_name
from tests.support.e2e_chart import example_serving
from tests.support.operator_candidates import (
    KILL_TAKEOVER_LIMIT, SLACK_SECONDS, TERM_TAKEOVER_LIMIT, Candidate, unrenewed_seconds, wait)


def test_only_the_lease_holder_acts_and_a_standby_takes_over_after_kill_and_term(own_namespace, tmp_path, capsys):
    cluster, namespace = own_namespace
    candidates: list[Candidate] = []

    def start(name: str) -> Candidate:
        candidates.append(Candidate(cluster, namespace, tmp_path, name))
        return candidates[-1]

    def lease() -> dict:
        return cluster.get_json("lease", "-n", namespace, lease_name([namespace]))["spec"]

    def reconciled(generation: int) -> bool:
        status = cluster.get_json("drafterserving", "-n", namespace, name).get("status") or {}
        return any(c["type"] == "Ready" and c.get("observedGeneration") == generation for c in status.get("conditions") or [])

    serving = example_serving(namespace)
    name = serving["metadata"]["name"]
    try:
        # Both start at once: they race to create the Lease, and exactly one wins.
        first, second = start("first"), start("second")
        leader = wait("one of two operators to lead", lambda: next((c for c in (first, second) if c.leads()), None),
                      60, candidates)
        standby = second if leader is first else first
        wait("the other to stand by", lambda: standby.metric("drafter_operator_leader") == 0.0, 30, candidates)
        assert standby.healthz() == 200  # the standby's own /healthz: its pod is live and Ready
        wait("kopf's /healthz on the leader", lambda: leader.healthz() == 200, 30, candidates)
        assert lease()["holderIdentity"].startswith(f"{leader.name}_{leader.proc.pid}_")

        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(serving))
        wait("the serving reconciled", lambda: reconciled(1), 60, candidates)
        wait("the leader's reconcile counted", lambda: leader.reconciles() > 0, 30, candidates)
        time.sleep(2)  # the standby would have acted by now: its loop would start at once on the watch event
        assert standby.reconciles() == 0 and standby.metric("drafter_reconcile_total", kind="DrafterServing",
                                                           result="error") is None
        assert cluster.get_json("deployments", "-n", namespace)["items"], "the leader created no engine Deployment"

        # SIGKILL: the Lease stays held until it expires; the standby takes over and acts.
        killed = time.monotonic()
        leader.signal(signal.SIGKILL)
        leader.proc.wait(10)
        last = lease()  # the dead leader's last renewal
        wait("the standby to lead after SIGKILL", standby.leads, KILL_TAKEOVER_LIMIT, candidates)
        kill_takeover = time.monotonic() - killed
        taken = lease()
        assert taken["holderIdentity"].startswith(f"{standby.name}_")
        assert taken["leaseTransitions"] == last.get("leaseTransitions", 0) + 1
        # Not before the Lease expired: both times are this machine's clock.
        unrenewed = unrenewed_seconds(last, taken)
        assert unrenewed >= Timings().lease_duration, f"taken over {unrenewed:.1f}s after the last renewal"
        cluster.kubectl("-n", namespace, "patch", "drafterserving", name, "--type=merge", "-p", '{"spec":{"replicas":2}}')
        wait("the spec change reconciled by the new leader", lambda: reconciled(2), 60, candidates)
        # The counter goes up when the reconcile returns, after the status write the wait above saw.
        wait("the new leader's reconcile counted", lambda: standby.reconciles() > 0, 30, candidates)

        # SIGTERM (a helm upgrade stopping the old pod): the leader releases the Lease; a new standby
        # (the restarted pod) takes over within a retry.
        leader, successor = standby, start("third")
        wait("the third to stand by", lambda: successor.metric("drafter_operator_leader") == 0.0, 60, candidates)
        termed = time.monotonic()
        leader.signal(signal.SIGTERM)
        wait("the successor to lead after SIGTERM", successor.leads, TERM_TAKEOVER_LIMIT, candidates)
        term_takeover = time.monotonic() - termed
        lease_after_term = lease()
        assert leader.proc.wait(30) == 0, leader.log()
        assert "released the Lease" in leader.log(60)
        cluster.kubectl("-n", namespace, "patch", "drafterserving", name, "--type=merge", "-p", '{"spec":{"replicas":1}}')
        wait("the spec change reconciled by the successor", lambda: reconciled(3), 60, candidates)
        wait("the successor's reconcile counted", lambda: successor.reconciles() > 0, 30, candidates)
        # It took over because the Lease was released, not because it expired (the time is printed only).
        whole_log = successor.log_path.read_text(errors="replace")
        assert f"as {lease_after_term['holderIdentity']} (released)" in whole_log, successor.log()

        # Someone else writes the Lease (a process this test does not see): the leader stops at once, with
        # status 3, instead of acting beside it.
        cluster.kubectl("-n", namespace, "patch", "lease", lease_name([namespace]), "--type=merge",
                        "-p", '{"spec":{"holderIdentity":"intruder"}}')
        stolen = time.monotonic()
        assert successor.proc.wait(Timings().retry_period + SLACK_SECONDS) == election.EXIT_LOST_LEADERSHIP, successor.log()
        lost_exit = time.monotonic() - stolen
        assert "lost leadership: the Lease names intruder" in successor.log(60)
        with capsys.disabled():
            print(f"\nleader SIGKILL -> standby leads: {kill_takeover:.1f}s (Lease unrenewed {unrenewed:.1f}s); "
                  f"SIGTERM -> successor leads: {term_takeover:.1f}s; Lease taken -> leader exits: {lost_exit:.1f}s")
    finally:
        # Delete the serving while the leader still runs, so its finalizer goes; then stop them all (the
        # namespace's teardown removes a finalizer nobody was left to remove).
        try:
            cluster.kubectl("-n", namespace, "delete", "drafterserving", name, "--wait=false", check=False)
            if any(c.proc.poll() is None and c.leads() for c in candidates):
                wait("the serving gone", lambda: cluster.kubectl("-n", namespace, "get", "drafterserving", name,
                                                                 check=False).returncode != 0, 20, candidates)
        finally:
            for candidate in candidates:
                candidate.stop()
